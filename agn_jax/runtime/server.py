"""The parameter-server process: owns the center, applies commits FIFO through the strategy.

The math, and the refusal of a non-finite commit, is `strategy.server_apply`,
jitted; this module only moves bytes and counts staleness. No JAX at module
level.

With Dynamic Local Updates the server also plans each worker's next window
(`WindowPlanner`), from the step times its commits report, and hands the
plan to the transport before it acknowledges the commit.
"""

import os
import time
from typing import Dict, List, Optional, Sequence

import numpy as np

from agn_jax import shares
from agn_jax import wire
from agn_jax.errors import CheckpointError
from agn_jax.runtime import context
from agn_jax.runtime import events
from agn_jax.runtime.transports.base import WindowPlan
from agn_jax.shares import local_updates
from agn_jax.wire import CommitMeta

_POLL_SECONDS = 0.2


def server_apply_fn(strategy, layout, donate: bool = True):
  """`apply(center_flat, state, payload, staleness) -> (center_flat, state, accepted)`, jitted.

  `strategy.server_apply` sees the same pytrees it sees in a single process;
  the flat arrays (`agn_jax.wire.pack`, compressed with `--commit_compression`)
  are only the wire format. With `donate` the center's buffer is reused for
  the new one; without, the center before the apply stays (the instruments
  read it).
  """
  import jax

  def apply(center_flat, state, payload, staleness):
    center = layout.unravel(center_flat)
    center, state, accepted = strategy.server_apply(
        center, state, wire.unpack(strategy, payload, center), staleness)
    return layout.ravel(center), state, accepted

  return jax.jit(apply, donate_argnums=(0,) if donate else ())


class ServerInstruments:
  """`--diagnostics` on the server: each applied commit measured as the simulator measures it (`agn_jax.instruments.measure_commit`).

  The center a commit's worker pulled is the one published at the commit's
  clock (`CommitMeta.clock`), so the server keeps the centers it published
  (on the subsample's coordinates), from the oldest clock a worker may still
  commit against: each worker's next commit pulled at its last one's clock
  or later. A commit whose center is no longer known (one queued before a
  resume) has NaN for the instruments that need it.

  Args:
    config: the run's `TrainConfig`.
    strategy, layout, loss_fn: the run's strategy, `FlatLayout` and loss.
    arrays: the run's data arrays; the first `instruments.PROBE_EXAMPLES`
      training examples are the gradient cosine's probe set.
    center: the flat center the server starts from, at `clock`.
    clock: its clock.
  """

  def __init__(self, config, strategy, layout, loss_fn, arrays, center,
               clock: int):
    import jax
    import jax.numpy as jnp
    from agn_jax import instruments
    self.diagnostics = diagnostics = instruments.Diagnostics.of(
        config.diagnostics_subsample, config.diagnostics_every,
        seed=config.seed, num_params=layout.num_params)
    x, y = arrays["x_train"], arrays["y_train"]
    probe = min(instruments.PROBE_EXAMPLES, len(x))
    self.probe = (jnp.asarray(x[:probe]), jnp.asarray(y[:probe]))
    self._restrict = jax.jit(
        lambda c: diagnostics.restrict(layout.unravel(c)))
    self.pulled = {clock: self._restrict(center)}
    self.floor = [clock] * config.num_workers
    self.state = jax.jit(diagnostics.tools.init)(self.pulled[clock])

    def measure(state, probe, payload, pulled, before_flat, after_flat,
                clock):
      before = layout.unravel(before_flat)
      delta = strategy.decompress(wire.unpack(strategy, payload, before),
                                  before)["delta"]
      return instruments.measure_commit(
          diagnostics, loss_fn, state, probe, delta, pulled, before,
          layout.unravel(after_flat), clock)

    def unknown(like):
      return jax.tree.map(lambda a: jnp.full_like(a, jnp.nan), like)

    self._measure = jax.jit(measure)
    self._unknown = jax.jit(unknown)

  def commit(self, meta: CommitMeta, payload, before, after,
             clock: int) -> Dict[str, float]:
    """The instruments of an applied commit: `{name: float}`, the gradient cosine only where due.

    Args:
      meta: the commit's `CommitMeta`.
      payload: its flat arrays, as it came (read before the commit is
        released).
      before, after: the flat center before and after the apply.
      clock: the server clock before the apply.
    """
    from agn_jax import instruments
    pulled = self.pulled.get(meta.clock)
    if pulled is None:
      pulled = self._unknown(self.pulled[max(self.pulled)])
    self.state, scalars = self._measure(self.state, self.probe,
                                        tuple(payload), pulled, before,
                                        after, np.int32(clock))
    measured = instruments.scalars_to_floats(scalars)
    if clock % self.diagnostics.every:
      del measured[instruments.GRADIENT_COSINE]
    # Centers no worker can still have pulled are dropped.
    self.floor[meta.worker] = meta.clock
    self.pulled[clock + 1] = self._restrict(after)
    oldest = min(self.floor)
    for old in [c for c in self.pulled if c < oldest]:
      del self.pulled[old]
    return measured


class WindowPlanner:
  """Dynamic Local Updates on real workers: each one's next window from the step times measured so far.

  A commit's window took `meta.time − meta.window_start` seconds for its
  `meta.local_updates` steps: its worker's latest step time t_k. The
  worker's next window is `λ_k = round(λ · min_j t_j / t_k)`, at least 1
  (`agn_jax.shares.local_updates`, speeds 1 / t_j), over the workers that
  have reported one. A worker's first window in this server's session is no
  measurement (it holds the kernel's first call: tens of milliseconds of
  set-up, as long as many steps of a small model), so its first two
  windows are λ. A worker whose share is done keeps counting with its last
  step time; a resumed run measures anew. The plan also counts each
  worker's local steps done (applied or rejected commits): where a
  restarted worker resumes its share.

  Args:
    communication_window: λ.
    steps_done: each worker's local steps done so far (a resumed run's).

  Example:
    >>> planner = WindowPlanner(8, [0, 0])
    >>> def window(worker, seconds):
    ...   return CommitMeta(worker, 0, 0.0, {}, time=seconds,
    ...                     window_start=0.0, local_updates=8)
    >>> planner.plan(window(0, 9.0))[:2]  # Its first window: no measurement.
    (0, 8)
    >>> planner.plan(window(1, 9.0))[:2], planner.plan(window(0, 8.0))[:2]
    ((0, 8), (8, 16))
    >>> planner.plan(window(1, 16.0))[:2]  # 2 s a step against 1 s.
    (4, 16)
  """

  def __init__(self, communication_window: int, steps_done: Sequence[int]):
    self.communication_window = int(communication_window)
    self.steps_done: List[int] = [int(s) for s in steps_done]
    self.step_seconds: Dict[int, float] = {}
    self._started = set()  # Workers whose first window this session is in.

  def plan(self, meta: CommitMeta) -> WindowPlan:
    """Counts the commit's steps and measures its step time; the worker's next `WindowPlan`."""
    w = meta.worker
    steps = meta.local_updates or self.communication_window
    self.steps_done[w] += steps
    if w not in self._started:
      self._started.add(w)
    elif meta.window_start is not None and meta.time > meta.window_start:
      self.step_seconds[w] = (meta.time - meta.window_start) / steps
    if w not in self.step_seconds:
      return WindowPlan(0, self.steps_done[w])
    workers = sorted(self.step_seconds)
    planned = local_updates(self.communication_window,
                            [1.0 / self.step_seconds[k] for k in workers])
    return WindowPlan(planned[workers.index(w)], self.steps_done[w])


def serve(ctx: context.RunContext, replies, resume: bool = False) -> bool:
  """Runs the server loop in this process until every worker is done (any backend).

  Args:
    ctx: the run's shared context.
    replies: the launcher's answers to checkpoint requests.
    resume: restore the newest checkpoint in `<workdir>/checkpoints` first.

  Returns:
    False after reporting a failure to the launcher.
  """
  try:
    _Server(ctx, replies).serve(resume)
  except BaseException as e:  # pylint: disable=broad-except
    context.report_failure(ctx, "server", e)
    return False
  finally:
    ctx.events.flush()
  return True


class _Server:
  """The center, the server state and the loop that applies commits to them."""

  def __init__(self, ctx, replies):
    self.ctx = ctx
    self.replies = replies
    self.transport = ctx.transport

  def _leaving(self) -> bool:
    return not context.parent_alive(self.ctx) or self.ctx.switches.is_set("abort")

  def _restore(self, template_state):
    """The newest checkpoint, checked against this run; None after reporting why not."""
    import jax
    import jax.numpy as jnp
    from agn_jax import checkpoint
    try:
      ckpt = checkpoint.restore(self.checkpoint_dir)
      checkpoint.check_resumable(ckpt, self.ctx.config, self.layout.metadata(),
                                 jax.tree.leaves(template_state))
    except CheckpointError as e:
      self.ctx.events.put(events.ResumeFailed(str(e)))
      return None
    # From here the run goes on from `ckpt`: newer damaged ones step aside.
    checkpoint.set_aside_damaged(self.checkpoint_dir, ckpt)
    leaves = [
        jnp.asarray(x, dtype=t.dtype)
        for x, t in zip(ckpt.server_leaves, jax.tree.leaves(template_state))
    ]
    state = jax.tree.unflatten(jax.tree.structure(template_state), leaves)
    return ckpt, state

  def serve(self, resume: bool) -> None:
    jax = context.configure_jax(self.ctx.cache_dir)
    import jax.numpy as jnp
    from agn_jax import build, checkpoint
    ctx, transport = self.ctx, self.transport
    config, strategy, model, loss_fn, layout = context.build_parts(ctx)
    self.layout = layout
    self.checkpoint_dir = os.path.join(config.workdir, "checkpoints")
    initial = layout.ravel_numpy(build.initial_center(
        config, model, ctx.example))
    state = strategy.rule.init(layout.unravel(jnp.asarray(initial)))
    self.clock, self.rejected = 0, 0
    # Each worker's bytes in the commits handled, the run's earlier sittings
    # included (`checkpoint.Meta.traffic`).
    self.traffic = {key: [0] * config.num_workers
                    for key in checkpoint.TRAFFIC}
    saved_step = None
    self.planner: Optional[WindowPlanner] = None
    if config.dynamic_local_updates:
      self.planner = WindowPlanner(config.communication_window,
                                   [0] * config.num_workers)
    self.tickets: Optional[shares.Tickets] = None
    if config.data_assignment == shares.STREAM:
      # Every share together; each worker's next window is the stream's
      # next steps, handed out with its acknowledgement (the first ones
      # here, in worker order, before any worker can pull).
      share = shares.windows_per_worker(
          len(ctx.data.arrays()["x_train"]), config.num_workers,
          config.epochs, config.communication_window, config.batch_size)
      self.tickets = shares.Tickets(
          config.num_workers * share * config.communication_window)
    if resume:
      restored = self._restore(state)
      if restored is None:
        return
      ckpt, state = restored
      initial = ckpt.center
      self.clock = int(ckpt.meta["num_commits"])
      self.rejected = int(ckpt.meta["rejected_commits"])
      saved_step = ckpt.step
      traffic = ckpt.meta.get("traffic")
      if traffic is not None:
        self.traffic = {key: [int(b) for b in traffic[key]]
                        for key in checkpoint.TRAFFIC}
      for w, count in enumerate(ckpt.meta["worker_commits"]):
        transport.set_acknowledged(w, count)
      if self.planner is not None:
        self.planner.steps_done = [int(s) for s in ckpt.meta["worker_steps"]]
      stream = ckpt.meta.get("stream")
      if self.tickets is not None:
        if not isinstance(stream, dict):
          raise CheckpointError("the checkpoint records no stream tickets: "
                                "it is of a run with another data assignment")
        self.tickets.taken = int(stream["taken"])
      for w in range(config.num_workers):
        steps = (self.planner.steps_done[w] if self.planner is not None
                 else 0)
        ticket = (tuple(stream["tickets"][w]) if self.tickets is not None
                  else (0, 0))
        if self.tickets is not None and not ticket[1]:
          # Spent when saved; a resume with more epochs has more to hand out.
          ticket = self._ticket(config.communication_window)
        if self.planner is not None or self.tickets is not None:
          transport.set_window_plan(w, WindowPlan(0, steps, *ticket))
      ctx.events.put(events.Restored(
          self.clock, ckpt.meta.get("metrics_offset"), self.rejected,
          list(ckpt.meta["worker_commits"]), traffic,
          ckpt.meta.get("wall_seconds"), ckpt.notes()))
    elif self.tickets is not None:
      for w in range(config.num_workers):
        transport.set_window_plan(w, WindowPlan(0, 0, *self._ticket(
            config.communication_window)))
    center = jnp.asarray(initial)
    measuring = (ServerInstruments(config, strategy, layout, loss_fn,
                                   ctx.data.arrays(), center, self.clock)
                 if config.diagnostics else None)
    # The instruments read the center before the apply: it is not donated.
    apply = server_apply_fn(strategy, layout, donate=measuring is None)
    transport.publish(initial, clock=self.clock)
    self.checkpointer = checkpoint.Checkpointer(self.checkpoint_dir,
                                                saved_step)

    # Compile before the first commit arrives, on a copy (the center is donated).
    zeros = tuple(np.zeros(x.shape, x.dtype) for x in wire.payload_spec(
        strategy, layout.unravel(center)))
    jax.block_until_ready(apply(jnp.array(center), state, zeros, np.int32(0)))
    ctx.events.put(events.ServerReady(time.time()))

    period = config.checkpoint_every_seconds
    saved_at, saved_clock = time.monotonic(), self.clock
    done = {}
    try:
      while len(done) < config.num_workers:
        if (period and period > 0 and self.clock != saved_clock and
            time.monotonic() - saved_at >= period):
          self._save(center, state, final=False)
          saved_at, saved_clock = time.monotonic(), self.clock
        message = transport.next_commit(_POLL_SECONDS)
        if message is None:
          if self._leaving():
            return
          continue
        if isinstance(message, events.WorkerDone):
          done[message.worker] = message
          continue
        meta = message.meta
        self.traffic["bytes_committed"][meta.worker] += meta.bytes_committed
        self.traffic["bytes_pulled"][meta.worker] += meta.bytes_pulled
        staleness = self.clock - meta.clock
        before = center
        center, state, accepted = apply(center, state, tuple(message.payload),
                                        np.int32(staleness))
        if self.planner is not None or self.tickets is not None:
          # Before the acknowledgement carries it.
          transport.set_window_plan(meta.worker, self._plan(meta, config))
        if not accepted:  # Waits for the result: the payload is read.
          self.rejected += 1
          transport.release(message)
          ctx.events.put(events.Rejected(time.time(), meta.worker, self.clock))
          continue
        measured = None
        if measuring is not None:  # Before the release: it reads the payload.
          measured = measuring.commit(meta, message.payload, before, center,
                                      self.clock)
        del before
        host = np.asarray(center)
        self.clock += 1
        transport.publish(host, self.clock)
        transport.release(message)
        del host  # No view may outlive the buffer, which the next apply donates.
        # The window's local steps are said only with Dynamic Local Updates.
        ctx.events.put(events.Committed(
            time.time(), meta._replace(local_updates=(
                (meta.local_updates or config.communication_window)
                if self.planner is not None else 0)),
            self.clock, staleness, instruments=measured))
      if self.ctx.config["checkpoint_at_end"]:
        self._save(center, state, final=True)
    finally:
      self.checkpointer.close()
    ctx.events.put(events.ServerDone(
        time.time(), self.clock, self.rejected,
        [transport.acknowledged(w) for w in range(config.num_workers)]))

  def _ticket(self, steps: int):
    """The stream's next `(start, steps)` for a window of `steps`, `(0, 0)` once spent."""
    return self.tickets.take(steps) or (0, 0)

  def _plan(self, meta: CommitMeta, config) -> WindowPlan:
    """The worker's next `WindowPlan`: its λ_k (Dynamic Local Updates), its stream ticket."""
    plan = (self.planner.plan(meta) if self.planner is not None else
            WindowPlan())
    if self.tickets is None:
      return plan
    # The worker keeps its last ticket until this one: it is the window it
    # runs next, whatever happens to it in between.
    start, steps = self._ticket(plan.local_updates or
                                config.communication_window)
    return plan._replace(ticket_start=start, ticket_steps=steps)

  def _metrics_offset(self):
    """Asks the launcher how far metrics.jsonl goes once every event up to now is in it, and the run's wall seconds so far.

    This server's events reach the launcher in order, so the answer covers
    every commit in the center being saved; commits wait meanwhile.

    Returns:
      `(metrics offset, wall seconds)`, or `(None, None)` without an answer.
    """
    self.ctx.events.put(events.CheckpointRequest(self.clock))
    deadline = time.monotonic() + 30.0
    while time.monotonic() < deadline and not self._leaving():
      if self.replies.poll(0.05):
        clock, offset, wall = self.replies.recv()
        if clock == self.clock:  # Not a late answer to an earlier request.
          return offset, wall
    return None, None

  def _save(self, center, state, final: bool):
    if not self.ctx.config["checkpoints"]:
      return
    seconds = self.checkpointer.save_once(
        self.clock, lambda: self._contents(center, state), final)
    if seconds is not None:
      self.ctx.events.put(events.CheckpointSaved(time.time(), self.clock,
                                                 final, seconds))

  def _contents(self, center, state):
    """The checkpoint of this clock: `(center, server leaves, meta)`."""
    import jax
    from agn_jax import checkpoint
    offset, wall = self._metrics_offset()
    n = self.ctx.config["num_workers"]
    meta = checkpoint.Meta.now(
        num_commits=self.clock, rejected_commits=self.rejected,
        # Each worker's progress through its data share, in windows.
        worker_commits=[self.transport.acknowledged(w) for w in range(n)],
        config=self.ctx.config, layout=self.layout, metrics_offset=offset,
        wall_seconds=wall,
        # With Dynamic Local Updates, that progress in local steps.
        worker_steps=(list(self.planner.steps_done)
                      if self.planner is not None else None),
        # With a stream: its steps handed out, and each worker's next ticket.
        stream=({"taken": self.tickets.taken, "tickets": [
            list(self.transport.window_plan(w)[2:]) for w in range(n)]}
                if self.tickets is not None else None),
        traffic={key: list(v) for key, v in self.traffic.items()}).to_json()
    return (np.array(center), [np.array(x) for x in jax.tree.leaves(state)],
            meta)
