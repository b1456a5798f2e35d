"""The worker process: λ local steps in one dispatch, then the strategy's commit and pull half-steps.

With Dynamic Local Updates (`--dynamic_local_updates`) each window is the
λ_k local steps the server planned with the acknowledgement of the
worker's last commit (`transport.WindowPlan`, from the step times the
commits carry: `CommitMeta.window_start`, `time` and `local_updates`); the
first window is λ. One compilation of the window kernel serves every
length (its `steps` argument), so a new λ_k costs no compilation, which
would also count as step time.

Module level imports no JAX: a spawned part applies its placement first.
"""

import os
import resource
import time
from typing import NamedTuple, Optional

import numpy as np

from agn_jax import shares
from agn_jax import wire
from agn_jax.errors import check_rejected_in_a_row
from agn_jax.runtime import context
from agn_jax.runtime import events
from agn_jax.runtime.transports.base import WindowPlan
from agn_jax.shares import shard_bounds, windows_per_worker
from agn_jax.wire import CommitMeta

_POLL_SECONDS = 0.1


class WorkerFunctions(NamedTuple):
  """The jitted pieces of the worker loop, around the flat center and payload.

  Attributes:
    kernel: `(params, opt_state, batches) -> WindowResult`, the window kernel.
    init: `center_flat -> WorkerState`, `strategy.init_worker`.
    commit: `(state, center_flat) -> (payload, state, accepted)`,
      `strategy.worker_commit` with `payload` the flat arrays it sends
      (`agn_jax.wire.pack`: compressed with `--commit_compression`) and
      `accepted` whether the server will apply it (`strategy.accepts`).
    receive: `(state, center_flat, accepted) -> state`,
      `strategy.worker_receive`; `accepted` is a Python bool, compiled once
      for each value.
    begin: `(state, steps) -> state`, `strategy.begin_window` (Dynamic
      Local Updates).
  """
  kernel: object
  init: object
  commit: object
  receive: object
  begin: object


def worker_functions(strategy, loss_fn, layout) -> WorkerFunctions:
  """Jits the strategy's worker half-steps around the flat center and payload."""
  import jax
  from agn_jax import kernel as kernel_lib

  def init(center_flat):
    return strategy.init_worker(layout.unravel(center_flat))

  def commit(state, center_flat):
    payload, state = strategy.worker_commit(state, layout.unravel(center_flat))
    return wire.pack(strategy, payload), state, strategy.accepts(payload)

  def receive(state, center_flat, accepted):
    return strategy.worker_receive(state, layout.unravel(center_flat),
                                   accepted)

  return WorkerFunctions(
      kernel=kernel_lib.window_kernel(loss_fn, strategy.worker_transform),
      init=jax.jit(init),
      commit=jax.jit(commit, donate_argnums=0),
      receive=jax.jit(receive, donate_argnums=0, static_argnums=2),
      begin=jax.jit(strategy.begin_window, donate_argnums=0))


def run_worker(ctx: context.RunContext, index: int, incarnation: int = 0,
               entered: Optional[float] = None) -> bool:
  """Runs worker `index`'s loop in this process until its share is done (any backend).

  Returns:
    False after reporting a failure (or an abort) to the launcher.
  """
  try:
    _Worker(ctx, index, incarnation, entered or time.time()).run()
  except BaseException as e:  # pylint: disable=broad-except
    context.report_failure(ctx, f"worker {index}", e)
    return False
  finally:
    ctx.events.flush()
  return True


class _Stopped(Exception):
  """The run is winding down before this worker started training."""


def _window_metrics(jnp, metrics, started: float, steps: int,
                    task) -> tuple:
  """`(loss, metrics, start, end, step_metrics)` of one window kernel's result.

  The means are the window's, over its first `steps` local steps (the
  others ran not): the loss's and each of the task's named metrics'
  (`{name: mean}`). `step_metrics` holds each local step's mini-batch value
  of the task's efficiency metric, `{name: float32 values}` (empty when the
  loss reports no such metric). The steps run in one dispatch and have no
  times of their own: the window's start (`started`, when it was
  dispatched) and end (when its results were back, which waits for the
  steps) bound them.

  Raises:
    ValueError: the loss reports other metrics than the task declares.
  """
  names = [name for name in metrics if name != "loss"]
  task.check_reported(names, "loss")
  loss = float(jnp.mean(metrics["loss"][:steps]))
  means = {name: float(jnp.mean(metrics[name][:steps])) for name in names}
  step = task.efficiency_metric
  step_metrics = ({step: np.asarray(metrics[step][:steps],
                                    np.float32).reshape(-1)}
                  if step in metrics else {})
  return loss, means, started, time.time(), step_metrics


class _Worker:
  """One worker's state and loop."""

  def __init__(self, ctx, index, incarnation, entered):
    self.timeline = {"entered": entered}
    self.ctx = ctx
    self.index = index
    self.incarnation = incarnation
    self.switches = ctx.switches
    self.transport = ctx.transport
    # What a test injects (`context.Faults`); nothing in a production run.
    self.fault = ctx.faults.fault_for(index, incarnation)
    self.slowdown = ctx.faults.slowdown_for(index)
    self.turns = ctx.faults.turns
    # Payload bytes as sent, this process' (`summary.json` sums them), and
    # the pulls' since the last commit (the next commit carries them).
    self.bytes_committed = 0
    self.bytes_pulled = 0
    self.pulled_since_commit = 0

  def _stopping(self) -> bool:
    if not context.parent_alive(self.ctx) or self.switches.is_set("abort"):
      raise SystemExit(0)  # The launcher is gone or gives up: leave quietly.
    return self.switches.is_set("stop")

  def _wait_for(self, switch):
    while not self.switches.wait(switch, _POLL_SECONDS):
      if self._stopping():
        raise _Stopped()

  def _my_turn(self, commit: int) -> bool:
    """Waits for this worker's `commit`-th commit's turn (`context.Turns`); False if stopped first."""
    while not self.turns.wait(self.index, commit, _POLL_SECONDS):
      if self._stopping():
        return False
    return True

  def _acknowledged(self, pushed):
    """Waits until the server handled this worker's `pushed` commits (or a stop)."""
    while not self.transport.wait_acknowledged(self.index, pushed,
                                               _POLL_SECONDS):
      if self._stopping():
        break

  def _pull(self, jnp, pushed):
    # Read-your-writes: the center must already hold this worker's commits.
    self._acknowledged(pushed)
    buffer = np.empty(self.transport.num_params, np.float32)
    clock = self.transport.pull(buffer)
    self.bytes_pulled += buffer.nbytes
    self.pulled_since_commit += buffer.nbytes
    # A fresh buffer per pull: the device array may alias host memory on CPU.
    return clock, jnp.asarray(buffer)

  def _push(self, payload, clock, window, local_updates) -> bool:
    """Commits the payload, waiting for room; False if stopped first.

    `window` is `_window_metrics`' `(loss, metrics, start, end,
    step_metrics)`, `local_updates` its local steps. The transport takes
    the whole payload before the commit is queued: a worker that dies
    meanwhile leaves nothing the server would apply.
    """
    loss, metrics, start, end, step_metrics = window
    sent = sum(v.nbytes for v in payload)
    meta = CommitMeta(self.index, clock, loss, metrics, end, start,
                      step_metrics, local_updates, sent,
                      self.pulled_since_commit)
    # A finished window is still committed after a stop, unless the commit
    # queue stays full (the server may be gone).
    while not self.transport.commit(payload, meta, timeout=_POLL_SECONDS):
      if self._stopping():
        return False
    self.bytes_committed += sent
    self.pulled_since_commit = 0
    return True

  def _start(self):
    """Waits for the start barrier, then for this worker's earlier commits.

    Returns:
      How many of this worker's commits the server has handled: the windows
      of its share already done (by a process that died, or before a resume).
    """
    # Every worker starts together once all are compiled, so start-up skew
    # does not show up as staleness of the first commits.
    self._wait_for("go")
    # A predecessor's queued commit is complete and still gets applied.
    while self.transport.in_flight(self.index):
      if self._stopping():
        raise _Stopped()
      time.sleep(0.001)
    return self.transport.acknowledged(self.index)

  def run(self):
    ctx, index = self.ctx, self.index
    jax = context.configure_jax(ctx.cache_dir)
    import jax.numpy as jnp
    config, strategy, _, loss_fn, layout = context.build_parts(ctx)
    from agn_jax import build, strategies  # pylint: disable=g-import-not-at-top
    task = build.build_task(config)
    arrays = ctx.data.arrays()
    x, y = arrays["x_train"], arrays["y_train"]
    n = config.num_workers
    start, stop = shard_bounds(len(x), n, index)
    x_shard, y_shard = x[start:stop], y[start:stop]  # Shapes to compile.
    lam, batch = config.communication_window, config.batch_size
    # The share in local steps: whole windows of λ, with or without Dynamic
    # Local Updates (which cut it into windows of λ_k, the last shorter).
    share_steps = windows_per_worker(len(x), n, config.epochs, lam,
                                     batch) * lam
    dynamic = config.dynamic_local_updates
    # Indices into the whole training set, as `data_assignment` hands
    # them to this worker: its own sampler, or the shared stream's steps of
    # the ticket the server hands it with each acknowledgement.
    stream = config.data_assignment == shares.STREAM
    if stream:
      data_stream, sampler = shares.Stream(len(x), batch, config.seed), None
    else:
      sampler = shares.sampler(config.data_assignment, len(x), n, index,
                               config.seed)
    fns = worker_functions(strategy, loss_fn, layout)
    self.timeline["built"] = time.time()

    try:
      # Worker 0 compiles and fills the persistent cache; the others then
      # load the executables instead of compiling the same kernels n times.
      if index != 0:
        self._wait_for("compiled")
      self._warm_up(fns, jnp, x_shard, y_shard, lam, batch, dynamic)
      self.switches.set("compiled")
      self.timeline["compiled"] = time.time()
      ctx.events.put(events.WorkerReady(time.time(), index, self.incarnation,
                                        self.timeline))
      base = self._start()
    except _Stopped:
      self._finish(self.transport.acknowledged(index), None,
                   self.transport.steps_done(index, lam, dynamic))
      return

    plan = self.transport.window_plan(index) if dynamic else WindowPlan()
    done = self.transport.steps_done(index, lam, dynamic)
    if sampler is not None:
      sampler.skip(done * batch)  # The rest of this worker's share.
    clock, center = self._pull(jnp, base)
    if self.turns:
      self.turns.arrive()
    if stream:  # Set before the center was published or this acknowledged.
      plan = self.transport.window_plan(index)
    state = fns.init(center)
    if done:  # A restarted worker: its schedule goes on from its own steps.
      state = state._replace(opt_state=strategies.at_schedule_step(
          state.opt_state, done))
    started = time.time()
    commits = base
    rejected_in_a_row = 0
    window = base
    while plan.ticket_steps > 0 if stream else done < share_steps:
      if self._stopping():
        break
      if self.fault and window == self.fault.window:
        if self.fault.kind == "raise":
          raise RuntimeError(f"injected fault in worker "
                             f"{index} at window {window}")
        if self.fault.kind == "exit":
          os._exit(3)
        if self.fault.kind == "nan":
          # As a non-finite gradient would: the window's steps, the optimizer
          # state and so the commit all turn non-finite.
          state = state._replace(
              params=jax.tree.map(lambda p: p * np.nan, state.params))
      if stream:
        steps = plan.ticket_steps
        idx = data_stream.indices(plan.ticket_start, steps)
      else:
        steps = min(plan.local_updates or lam, share_steps - done)
        idx = sampler.take(steps * batch)
      batches = (x[idx].reshape((steps, batch) + x.shape[1:]),
                 y[idx].reshape((steps, batch) + y.shape[1:]))
      started_window = time.time()
      if dynamic:
        # Padded to λ steps: one kernel for every length; the padding is
        # never read.
        batches = tuple(np.concatenate([b, np.zeros(
            (lam - steps,) + b.shape[1:], b.dtype)]) for b in batches)
        state = fns.begin(state, np.int32(steps))
        result = fns.kernel(state.params, state.opt_state, batches,
                            np.int32(steps))
      else:
        result = fns.kernel(state.params, state.opt_state, batches)
      state = state._replace(params=result.params, opt_state=result.opt_state)
      if self.slowdown:
        time.sleep(self.slowdown * steps)  # A test's slow worker.
      window_metrics = _window_metrics(jnp, result.metrics, started_window,
                                       steps, task)
      if self.turns and not self._my_turn(commits - base):
        break
      if strategy.pull_before_commit:
        clock, center = self._pull(jnp, commits)
      payload, state, accepted = fns.commit(state, center)
      payload, accepted = tuple(np.asarray(v) for v in payload), bool(accepted)
      if not self._push(payload, clock, window_metrics, steps):
        break
      commits += 1
      done += steps
      window += 1
      if strategy.pulls_after_commit(accepted):
        clock, center = self._pull(jnp, commits)
      elif stream:  # The next ticket comes with this commit's acknowledgement.
        self._acknowledged(commits)
      if dynamic or stream:  # Planned before the acknowledgement.
        plan = self.transport.window_plan(index)
      rejected_in_a_row = 0 if accepted else rejected_in_a_row + 1
      check_rejected_in_a_row(rejected_in_a_row)
      state = fns.receive(state, center, accepted)
      if self.turns:  # The next commit's turn: this one is in the center.
        self._acknowledged(commits)
        self.turns.done()
    self._finish(commits, started, done)

  def _warm_up(self, fns, jnp, x, y, lam, batch, dynamic):
    """Compiles every jitted piece, or loads it from the cache, without training.

    The window kernel is compiled ahead of time rather than run: a run on
    zeros would cost every worker a whole window of compute at start-up, and,
    being asynchronous, would still be running when the first real window
    starts. The small pieces are run, and waited for.
    """
    import jax
    center = jnp.zeros(self.transport.num_params, jnp.float32)
    state = fns.init(center)
    batches = (jax.ShapeDtypeStruct((lam, batch) + x.shape[1:], x.dtype),
               jax.ShapeDtypeStruct((lam, batch) + y.shape[1:], y.dtype))
    if dynamic:
      state = fns.begin(state, np.int32(lam))
      fns.kernel.lower(state.params, state.opt_state, batches,
                       jax.ShapeDtypeStruct((), np.int32)).compile()
    else:
      fns.kernel.lower(state.params, state.opt_state, batches).compile()
    _, state, _ = fns.commit(state, center)
    state = fns.receive(state, center, True)
    jax.block_until_ready(fns.receive(state, center, False))

  def _finish(self, commits, started: Optional[float], steps: int):
    """Reports this worker's share done: `commits` counts all its commits in the run, `steps` their local steps (`Transport.steps_done`)."""
    config = self.ctx.config
    samples = steps * config["batch_size"]
    stats = {
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "started": started,
        "bytes_committed": self.bytes_committed,
        "bytes_pulled": self.bytes_pulled,
    }
    try:
      import psutil
      info = psutil.Process().memory_full_info()
      stats["uss_mb"] = info.uss / 2**20
      stats["rss_mb"] = info.rss / 2**20
    except Exception:  # psutil is optional here; the peak is enough.
      pass
    done = events.WorkerDone(self.index, commits, samples, stats)
    self.transport.finish(done)
    self.ctx.events.put(done)
