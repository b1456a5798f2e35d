"""The worker process: pull, λ local steps in one dispatch, commit, in the strategy's order.

Module level imports no JAX: `worker_main` applies the placement first.
"""

import os
import resource
import time
from typing import NamedTuple, Optional

import numpy as np

from agn_jax.runtime import _child
from agn_jax.runtime import events
from agn_jax.runtime.transport import CommitMeta, payload_is_finite

_POLL_SECONDS = 0.1
# A worker whose commits are rejected (non-finite) this many times in a row,
# each time from a fresh start at the center, fails the run.
MAX_REJECTED_IN_A_ROW = 3


def shard_bounds(num_examples: int, num_workers: int,
                 worker: int) -> tuple:
  """`[start, stop)` of worker `worker`'s contiguous shard of the training set.

  Example:
    >>> [shard_bounds(10, 3, k) for k in range(3)]
    [(0, 3), (3, 6), (6, 10)]
  """
  return (num_examples * worker // num_workers,
          num_examples * (worker + 1) // num_workers)


def windows_per_worker(num_examples: int, num_workers: int, epochs: float,
                       communication_window: int, batch_size: int) -> int:
  """Whole windows in one worker's share of `epochs × N / n` samples.

  A last partial window (< λ steps) is not committed, as in the reference
  implementation, so it is not run either.

  Example:
    >>> windows_per_worker(1000, 4, 2.0, communication_window=5, batch_size=10)
    10
  """
  share = epochs * num_examples / num_workers
  return int(share // (communication_window * batch_size))


class BatchSampler:
  """Endless shuffled passes over one shard: a fresh permutation every epoch."""

  def __init__(self, num_examples: int, rng: np.random.Generator):
    if num_examples < 1:
      raise ValueError("a worker's shard is empty; use fewer workers")
    self._n = num_examples
    self._rng = rng
    self._perm = rng.permutation(num_examples)
    self._pos = 0

  def skip(self, k: int) -> None:
    """Advances past `k` samples, exactly as `take(k)` would."""
    while k > 0:
      if self._pos == self._n:
        self._perm, self._pos = self._rng.permutation(self._n), 0
      t = min(k, self._n - self._pos)
      self._pos += t
      k -= t

  def take(self, k: int) -> np.ndarray:
    parts = []
    while k > 0:
      if self._pos == self._n:
        self._perm, self._pos = self._rng.permutation(self._n), 0
      t = min(k, self._n - self._pos)
      parts.append(self._perm[self._pos:self._pos + t])
      self._pos += t
      k -= t
    return np.concatenate(parts)


class WorkerFunctions(NamedTuple):
  """The jitted pieces of the worker loop.

  Attributes:
    kernel: `(params, opt_state, batches) -> WindowResult`, the window kernel.
    init: `center_flat -> (params, opt_state)`.
    commit: `(params, opt_state, center_flat) -> (payload, params,
      opt_state)` with `payload` a tuple of flat vectors in
      `strategy.payload` order.
    pull: `(params, opt_state, center_flat) -> (params, opt_state)`.
  """
  kernel: object
  init: object
  commit: object
  pull: object


def worker_functions(strategy, loss_fn, layout) -> WorkerFunctions:
  """Jits the strategy's worker side around the flat center and payload."""
  import jax
  from agn_jax import kernel as kernel_lib

  def init(center_flat):
    return strategy.init_worker(layout.unravel(center_flat))

  def commit(params, opt_state, center_flat):
    payload, params, opt_state = strategy.commit_fn(
        params, opt_state, layout.unravel(center_flat))
    return (tuple(layout.ravel(payload[key]) for key in strategy.payload),
            params, opt_state)

  def pull(params, opt_state, center_flat):
    return strategy.pull_fn(params, opt_state, layout.unravel(center_flat))

  return WorkerFunctions(
      kernel=kernel_lib.window_kernel(loss_fn, strategy.worker_transform),
      init=jax.jit(init),
      commit=jax.jit(commit, donate_argnums=(0, 1)),
      pull=jax.jit(pull, donate_argnums=(0, 1)))


def worker_main(ctx: _child.RunContext, index: int, placement, events,
                incarnation: int = 0) -> None:
  """Entry point of worker `index` (a spawned process).

  Args:
    ctx: the run's shared context.
    index: which worker (which data shard).
    placement: its devices and environment.
    events: the writing end of this worker's own pipe to the launcher.
    incarnation: 0 for the first process of this worker, k after k restarts.
  """
  entered = time.time()
  _child.enter(placement)
  ctx = ctx._replace(events=_child.EventPipe(events))
  if not run_worker(ctx, index, incarnation, entered):
    raise SystemExit(1)


def run_worker(ctx: _child.RunContext, index: int, incarnation: int = 0,
               entered: Optional[float] = None) -> bool:
  """Runs worker `index`'s loop in this process until its share is done (any backend).

  Returns:
    False after reporting a failure (or an abort) to the launcher.
  """
  try:
    _Worker(ctx, index, incarnation, entered or time.time()).run()
  except BaseException as e:  # pylint: disable=broad-except
    _child.report_failure(ctx, f"worker {index}", e)
    return False
  return True


class _Stopped(Exception):
  """The run is winding down before this worker started training."""


class _Worker:
  """One worker's state and loop."""

  def __init__(self, ctx, index, incarnation, entered):
    self.timeline = {"entered": entered}
    self.ctx = ctx
    self.index = index
    self.incarnation = incarnation
    self.flags = ctx.flags
    self.transport = ctx.transport
    fault = _child.parse_fault(os.environ.get("AGN_JAX_FAULT"))
    if fault is not None and (fault.worker != index or
                              incarnation >= fault.incarnations):
      fault = None
    self.fault = fault

  def _stopping(self) -> bool:
    if not _child.parent_alive(self.ctx) or self.flags.is_set("abort"):
      raise SystemExit(0)  # The launcher is gone or gives up: leave quietly.
    return self.flags.is_set("stop")

  def _wait_for(self, flag):
    while not self.flags.wait(flag, _POLL_SECONDS):
      if self._stopping():
        raise _Stopped()

  def _pull(self, jnp, pushed):
    # Read-your-writes: the center must already hold this worker's commits.
    while not self.transport.wait_acknowledged(self.index, pushed,
                                               _POLL_SECONDS):
      if self._stopping():
        break
    buffer = np.empty(self.transport.num_params, np.float32)
    clock = self.transport.pull(buffer)
    # A fresh buffer per pull: the device array may alias host memory on CPU.
    return clock, jnp.asarray(buffer)

  def _push(self, payload, clock, loss, accuracy) -> bool:
    """Commits the payload, waiting for room; False if stopped first.

    The transport takes the whole payload before the commit is queued: a
    worker that dies meanwhile leaves nothing the server would apply.
    """
    meta = CommitMeta(self.index, clock, loss, accuracy, time.time())
    # A finished window is still committed after a stop, unless the commit
    # queue stays full (the server may be gone).
    while not self.transport.commit(payload, meta, timeout=_POLL_SECONDS):
      if self._stopping():
        return False
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
    jax = _child.configure_jax(ctx.cache_dir)
    import jax.numpy as jnp
    from agn_jax import strategies
    config, strategy, _, loss_fn, layout = _child.build_parts(ctx)
    arrays = ctx.data.arrays()
    x, y = arrays["x_train"], arrays["y_train"]
    n = config.num_workers
    start, stop = shard_bounds(len(x), n, index)
    x_shard, y_shard = x[start:stop], y[start:stop]
    lam, batch = config.communication_window, config.batch_size
    num_windows = windows_per_worker(len(x), n, config.epochs, lam, batch)
    sampler = BatchSampler(len(x_shard),
                           np.random.default_rng([config.seed, index]))
    fns = worker_functions(strategy, loss_fn, layout)
    self.timeline["built"] = time.time()

    try:
      # Worker 0 compiles and fills the persistent cache; the others then
      # load the executables instead of compiling the same kernels n times.
      if index != 0:
        self._wait_for("compiled")
      self._warm_up(fns, jnp, x_shard, y_shard, lam, batch)
      self.flags.set("compiled")
      self.timeline["compiled"] = time.time()
      ctx.events.put(events.WorkerReady(time.time(), index, self.incarnation,
                                        self.timeline))
      base = self._start()
    except _Stopped:
      self._finish(self.transport.acknowledged(index), None)
      return

    sampler.skip(base * lam * batch)  # The rest of this worker's share.
    clock, center = self._pull(jnp, base)
    params, opt_state = fns.init(center)
    started = time.time()
    commits = base
    commit_then_pull = strategy.protocol == strategies.COMMIT_THEN_PULL
    rejected_in_a_row = 0
    for window in range(base, num_windows):
      if self._stopping():
        break
      if self.fault and window == self.fault.window:
        if self.fault.kind == "raise":
          raise RuntimeError(f"injected fault (AGN_JAX_FAULT) in worker "
                             f"{index} at window {window}")
        if self.fault.kind == "exit":
          os._exit(3)
        if self.fault.kind == "nan":
          # As a non-finite gradient would: the window's steps, the optimizer
          # state and so the commit all turn non-finite.
          params = jax.tree.map(lambda p: p * np.nan, params)
      idx = sampler.take(lam * batch)
      batches = (x_shard[idx].reshape(lam, batch, -1),
                 y_shard[idx].reshape(lam, batch))
      result = fns.kernel(params, opt_state, batches)
      params, opt_state = result.params, result.opt_state
      loss = float(jnp.mean(result.metrics["loss"]))
      accuracy = float(jnp.mean(result.metrics.get("accuracy", jnp.nan)))
      if commit_then_pull:
        payload, params, opt_state = fns.commit(params, opt_state, center)
        payload = tuple(np.asarray(v) for v in payload)
        finite = payload_is_finite(payload)
        if not self._push(payload, clock, loss, accuracy):
          break
        clock, center = self._pull(jnp, commits + 1)
        if finite:
          params, opt_state = fns.pull(params, opt_state, center)
      else:
        clock, center = self._pull(jnp, commits)
        payload, params, opt_state = fns.commit(params, opt_state, center)
        payload = tuple(np.asarray(v) for v in payload)
        finite = payload_is_finite(payload)
        if not self._push(payload, clock, loss, accuracy):
          break
      commits += 1
      if finite:
        rejected_in_a_row = 0
      else:
        # The server rejects it. The local optimizer state (Adam's moments)
        # or the never-reset elastic worker may be poisoned: start afresh
        # from the center, or every later commit would be rejected too.
        rejected_in_a_row += 1
        if rejected_in_a_row >= MAX_REJECTED_IN_A_ROW:
          raise _child.Diverged(
              f"{rejected_in_a_row} commits in a row were non-finite and "
              f"rejected, each from a fresh start at the center (lower "
              f"--learning_rate?)")
        if not commit_then_pull:
          clock, center = self._pull(jnp, commits)
        params, opt_state = fns.init(center)
    self._finish(commits, started)

  def _warm_up(self, fns, jnp, x, y, lam, batch):
    """Compiles every jitted piece, or loads it from the cache, without training.

    The window kernel is compiled ahead of time rather than run: a run on
    zeros would cost every worker a whole window of compute at start-up, and,
    being asynchronous, would still be running when the first real window
    starts. The small pieces are run, and waited for.
    """
    import jax
    center = jnp.zeros(self.transport.num_params, jnp.float32)
    params, opt_state = fns.init(center)
    batches = (jax.ShapeDtypeStruct((lam, batch) + x.shape[1:], x.dtype),
               jax.ShapeDtypeStruct((lam, batch) + y.shape[1:], y.dtype))
    fns.kernel.lower(params, opt_state, batches).compile()
    _, params, opt_state = fns.commit(params, opt_state, center)
    jax.block_until_ready(fns.pull(params, opt_state, center))

  def _finish(self, commits, started: Optional[float]):
    """Reports this worker's share done: `commits` counts all its commits in the run."""
    config = self.ctx.config
    samples = commits * config["communication_window"] * config["batch_size"]
    stats = {
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "started": started,
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
