"""The simulator's jitted parts: the workload's cost, the devices, the round.

**Rounds.** The n workers' parameters and optimizer states are stacked on a
leading worker axis (`Workers`). One round is one jitted call
(`build_round`):

1. every worker whose next window can run (it holds the center its last
   commit's reply carried) runs it, with the same
   window kernel the process workers run (`agn_jax.kernel.window_kernel`),
   mapped over the workers as `jax.lax.map(window, workers, batch_size=k)`
   does it, k workers vmapped at a time, but updating the stacked state in
   place (`map_in_place`: `lax.map` would hold a second copy of every
   worker's state); workers not due are masked (skipped when k = 1, computed
   and discarded when vmapped);
2. the next commits of the schedule reach the server one by one, as long
   as their windows have run (up to a worker's second commit in the round,
   whose window needs the first one's center), through the strategy's
   half-steps, as in the processes backend:
   `strategy.worker_commit`, `strategy.server_apply` (a payload with a
   non-finite number is rejected: the center and clock stay) and
   `strategy.worker_receive` (after a rejection, a fresh start from the
   center). Staleness is the server clock at the apply minus the clock of
   the center the worker last pulled: before its window, or just now for a
   strategy that pulls before its commit (staleness 0, nothing lands in
   between). The loop writes back only the leaves a commit and pull change
   (AGN's delta and Adam's moments stay where they are; a rejected worker's
   are reset after the round, `build_restart`): XLA copies a written-back
   leaf of all n workers on every commit.

**Devices.** The worker axis is sharded over a `jax.sharding.Mesh` with one
`workers` axis (`NamedSharding(mesh, P("workers"))`): each device runs the
windows of its own workers; the center and the server state are replicated,
and every device applies the same commits to its copy, fetching the
committing worker's state from its owner (an `all_gather` of one worker's
state per commit). By default the mesh holds the largest number of local
devices that divides n (n = 10 on 4 devices uses 2), so no worker is padded
(`default_mesh`). k (`workers_per_call`) is per device: by default 1 on
CPU, where workers one after another keep one model in cache and run faster
than vmapped ones, and all of a device's workers on GPU or TPU
(`default_workers_per_call`).

**Programs kept across runs.** The jitted round, restart and initial states
are built once per process for the same arguments (`agn_jax.kept`): the
same strategy and loss function objects, which `agn_jax.build` hands out
once per setting. A second run of the same program in one process (another
seed, budget or clock) traces, lowers and compiles none of them again.

Example:
  >>> import jax.numpy as jnp
  >>> map_in_place(lambda s, x: (s + x, x), jnp.zeros(3), jnp.ones(3))[0]
  Array([1., 1., 1.], dtype=float32)
"""

from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, PartitionSpec as P
import numpy as np

from agn_jax import instruments as instruments_lib
from agn_jax import kernel as kernel_lib
from agn_jax.kept import kept
from agn_jax import strategies
from agn_jax import wire
from agn_jax.sim.clock import Workload

AXIS = "workers"


class Workers(NamedTuple):
  """The stacked worker state (leading axis: worker).

  Attributes:
    params: local parameters.
    opt_state: local optimizer state.
    pulled: the center each worker last pulled, kept only for a strategy
      that commits against the center it pulled before the window and reads
      it (adag); else None.
    clock: the server clock of that pull (int32).
    residual: with a `Strategy.compression`, each worker's error-feedback
      residual (`strategies.ResidualWorkerState`); else None.
  """
  params: Any
  opt_state: Any
  pulled: Any
  clock: jax.Array
  residual: Any = None

  def state(self, strategy) -> Any:
    """The strategy's worker state of these params, optimizer state and residual."""
    return strategy.worker_state(self.params, self.opt_state, self.residual)


class RoundRecords(NamedTuple):
  """What one round returns besides the state.

  Attributes:
    clock: [n] the server clock after each of the round's commits, in
      commit order (unchanged if rejected; slots past the round's commits
      are 0).
    staleness: [n] each commit's staleness, in commit order.
    loss: [n] each worker's window's mean loss, by worker (NaN: not due).
    metrics: `{name: [n]}` each worker's window's mean of each metric its
      loss reports (the task's; classification's accuracy), by worker.
    rejected: [n] whether each commit was rejected, in commit order.
    step_metrics: `{name: [n, λ]}` each worker's local steps' values of the
      step metric (the task's efficiency metric), by worker; empty when the
      loss reports no such metric.
    instruments: with diagnostics (`agn_jax.instruments.Diagnostics`), `{name: [n]}` of each
      commit's instruments in commit order, the names
      `agn_jax.instruments.SCALARS` and `gradient_cosine` (NaN for a
      rejected commit, and the gradient cosine but every k-th); else None.
    pulled_clock: [n] the clock of the center each commit's worker pulled,
      in commit order, where commits are not applied one at a time (a
      synchronous round, `agn_jax.sim.synchronous`); None: each commit's
      `clock − 1 − staleness` (as rejected: `clock − staleness`).
  """
  clock: Any
  staleness: Any
  loss: Any
  metrics: Any
  rejected: Any
  step_metrics: Any
  instruments: Any = None
  pulled_clock: Any = None


class DiagnosticsCarry(NamedTuple):
  """What the instruments carry from round to round (replicated on every device).

  Attributes:
    state: the `agn_jax.instruments.CommitInstrumentsState`.
    pulled: [n, ...] the center each worker last received, on the
      subsample's coordinates (`[n, m]`) or whole (stacked like the center).
  """
  state: Any
  pulled: Any


def initial_diagnostics(diagnostics: instruments_lib.Diagnostics, center, num_workers: int,
                        sharding) -> DiagnosticsCarry:
  """No commit measured yet; every worker holds `center`."""
  return _diagnostics_init(diagnostics, num_workers, sharding)(center)


@kept
def _diagnostics_init(diagnostics, num_workers, sharding):

  def init(center):
    like = diagnostics.restrict(center)
    return DiagnosticsCarry(
        state=diagnostics.tools.init(like),
        pulled=jax.tree.map(
            lambda x: jnp.broadcast_to(x, (num_workers,) + jnp.shape(x)),
            like))

  return jax.jit(init, out_shardings=sharding)


def workload(strategy: strategies.Strategy, loss_fn, center, x_train, y_train,
             batch_size: int) -> Workload:
  """What one worker computes and sends, for the time model (`agn_jax.sim.clock`).

  The forward and backward pass's FLOPs are XLA's count for one mini-batch;
  the optimizer state's size is the worker transformation's; a commit's
  bytes are its payload's as sent (`Strategy.commit_bytes`: compressed with
  `--commit_compression`).

  Example:
    >>> from agn_jax import get_strategy
    >>> import jax.numpy as jnp, optax
    >>> loss = lambda p, b: (jnp.sum((b[0] @ p["w"]) ** 2), {})
    >>> w = workload(get_strategy("agn", communication_window=2,
    ...                           inner=optax.adam(1e-3)), loss,
    ...              {"w": jnp.zeros((3, 2))}, np.zeros((8, 3), np.float32),
    ...              np.zeros(8, np.int32), batch_size=4)
    >>> w.num_params, w.optimizer_floats, w.payload_vectors, w.payload_bytes
    (6, 4.0, 1, 24)
  """
  center = jax.tree.map(lambda a: jnp.asarray(a, jnp.float32), center)
  num_params = sum(int(np.size(a)) for a in jax.tree.leaves(center))
  batch = (jax.ShapeDtypeStruct((batch_size,) + np.shape(x_train)[1:],
                                np.asarray(x_train).dtype),
           jax.ShapeDtypeStruct((batch_size,) + np.shape(y_train)[1:],
                                np.asarray(y_train).dtype))
  leaves, treedef = jax.tree.flatten(center)
  flops = _flops(loss_fn, treedef, tuple(
      jax.ShapeDtypeStruct(np.shape(a), a.dtype) for a in leaves), batch)
  if not flops > 0:
    flops = 6.0 * num_params * batch_size
  state = jax.eval_shape(strategy.worker_transform.init, center)
  floats = sum(int(np.size(a)) for a in jax.tree.leaves(state)
               if jnp.issubdtype(a.dtype, jnp.floating))
  return Workload(
      num_params=num_params, flops_per_step=flops,
      optimizer_floats=floats / max(num_params, 1),
      payload_vectors=len(strategy.payload),
      pull_before_commit=bool(strategy.pull_before_commit),
      payload_bytes=wire.commit_bytes(strategy, center))


@kept
def _flops(loss_fn, treedef, leaves, batch) -> float:
  """XLA's FLOP count of one mini-batch's gradient; 0 where it has none."""
  center = jax.tree.unflatten(treedef, leaves)
  grad = jax.jit(jax.grad(lambda p, b: loss_fn(p, b)[0]))
  try:
    cost = grad.lower(center, batch).cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    return float((cost or {}).get("flops", 0.0))
  except Exception:  # pylint: disable=broad-except
    return 0.0  # A backend without cost analysis: `workload` counts.


# --- Devices ----------------------------------------------------------------


def default_mesh(num_workers: int, devices=None) -> Mesh:
  """A `workers` mesh over the most local devices that divide `num_workers`.

  Example:
    >>> default_mesh(3).axis_names
    ('workers',)
  """
  devices = list(devices if devices is not None else jax.local_devices())
  count = max(d for d in range(1, len(devices) + 1) if num_workers % d == 0)
  return Mesh(np.array(devices[:count]), (AXIS,))


def default_workers_per_call(platform: str, workers_per_device: int) -> int:
  """k: 1 on CPU (one model stays in cache), every worker of a device elsewhere.

  Example:
    >>> default_workers_per_call("cpu", 10), default_workers_per_call("gpu", 10)
    (1, 10)
  """
  return 1 if platform == "cpu" else workers_per_device


def map_in_place(fn, state, xs, batch_size: int = 1):
  """`jax.lax.map` over a leading axis that writes each result over `state` in place.

  Computes what `jax.lax.map(lambda a: fn(*a), (state, xs),
  batch_size=batch_size)` computes, `batch_size` elements vmapped at a time,
  but as a loop that updates `state` in place: `lax.map` builds its outputs
  in a second buffer, which for the simulator's stacked workers is a second
  copy of every worker's parameters and optimizer state (measured: 494 MB of
  temporaries for 366 MB of state, n = 4 paper MLPs with Adam). With
  `batch_size=1` nothing is vmapped, so a `lax.cond` inside `fn` still skips
  its untaken branch.

  Args:
    fn: `fn(state_i, xs_i) -> (state_i, ys_i)`.
    state: a pytree whose leaves share a leading axis of length m.
    xs: a pytree of per-element inputs with the same leading axis.
    batch_size: elements per call of `fn` (vmapped when > 1).

  Returns:
    `(state, ys)`, each with the leading axis of length m.

  Example:
    >>> import jax.numpy as jnp
    >>> state, ys = map_in_place(lambda s, x: (s + x, 2 * x), jnp.zeros(5),
    ...                          jnp.arange(5.0), batch_size=2)
    >>> state, ys
    (Array([0., 1., 2., 3., 4.], dtype=float32), Array([0., 2., 4., 6., 8.], dtype=float32))
  """
  m = jax.tree.leaves(state)[0].shape[0]
  k = max(1, min(int(batch_size), m))

  def first(tree):
    return jax.tree.map(lambda a: a[0], tree)

  _, ys_shape = jax.eval_shape(fn, first(state), first(xs))
  ys = jax.tree.map(lambda s: jnp.zeros((m,) + s.shape, s.dtype), ys_shape)

  def chunk(start, size, carry):
    state, ys = carry
    piece = jax.tree.map(
        lambda a: jax.lax.dynamic_slice_in_dim(a, start, size),
        (state, xs))
    if size == 1:
      out = fn(*first(piece))
      out = jax.tree.map(lambda a: a[None], out)
    else:
      out = jax.vmap(fn)(*piece)
    return jax.tree.map(
        lambda a, v: jax.lax.dynamic_update_slice_in_dim(a, v, start, 0),
        (state, ys), out)

  carry = jax.lax.fori_loop(0, m // k, lambda c, carry: chunk(c * k, k, carry),
                            (state, ys))
  if m % k:
    carry = chunk(m - m % k, m % k, carry)
  return carry


def initial_workers(strategy, center, num_workers: int, keeps_pulled: bool,
                  sharding):
  """n workers' fresh state at `center`, stacked and placed with `sharding`."""
  return _stacked(strategy, num_workers, keeps_pulled, sharding)(center)


@kept
def _stacked(strategy, n, keeps_pulled, sharding):

  def stack(center):
    state = strategy.init_worker(center)
    one = Workers(state.params, state.opt_state,
                   center if keeps_pulled else None,
                   jnp.zeros([], jnp.int32), getattr(state, "residual", None))
    return jax.tree.map(
        lambda x: jnp.broadcast_to(x, (n,) + jnp.shape(x)), one)

  return jax.jit(stack, out_shardings=sharding)


@kept
def build_restart(strategy, sharding):
  """`restart(workers, mask)`: the masked workers start afresh at their parameters.

  After a round whose commit was rejected: the commit loop already set such
  a worker's parameters (and every leaf it rewrites) to the center and its
  fresh values; this resets the leaves it left untouched, so the worker's
  state is exactly what `strategy.worker_receive` gives a rejected worker,
  as in a process worker.
  """
  fresh_start = jax.vmap(
      lambda state: strategy.worker_receive(state, state.params, False))

  def restart(workers, mask):
    state = workers.state(strategy)

    def pick(new, old):
      where = mask.reshape(mask.shape + (1,) * (old.ndim - 1))
      return jnp.where(where, new, old)

    fresh = jax.tree.map(pick, fresh_start(state), state)
    return workers._replace(params=fresh.params, opt_state=fresh.opt_state,
                            residual=getattr(fresh, "residual", None))

  return jax.jit(restart, donate_argnums=0, out_shardings=sharding)


def _when(pred, fn, state):
  """`fn(state)`, a `(state, records)` pair, where `pred`; else `state` as it was and NaN records.

  `lax.cond` traces `fn` first (then the skip, which takes the records'
  shapes from that trace): `fn` is traced once, not again for its shapes.
  """
  traced = []

  def run(state):
    state, records = fn(state)
    traced.append(jax.tree.map(
        lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), records))
    return state, records

  def skip(state):
    shapes = traced[-1] if traced else jax.eval_shape(fn, state)[1]
    return state, jax.tree.map(
        lambda s: jnp.full(s.shape, jnp.nan, s.dtype), shapes)

  return jax.lax.cond(pred, run, skip, state)

def build_windows(strategy, loss_fn, workers_per_call: int,
                  dynamic_local_updates: bool,
                  step_metric: Optional[str] = "accuracy"):
  """`windows(workers, indices, due, lengths, x, y)`: every due worker's window, for a round (traceable).

  Each due worker runs its window with the window kernel
  (`map_in_place`, `workers_per_call` at a time); the others pass through
  unchanged. It returns `(workers, loss, means, steps)`: the stacked
  workers, and by worker the window's mean loss, its means of the loss's
  other metrics and each step's value of `step_metric`
  (`RoundRecords`' `loss`, `metrics` and `step_metrics`).

  Args:
    strategy: the `Strategy`.
    loss_fn: `loss_fn(params, (x, y)) -> (loss, aux)`.
    workers_per_call: k.
    dynamic_local_updates: windows may be shorter than λ (`lengths`).
    step_metric: the metric whose every local step's value is kept.
  """
  kernel = kernel_lib.window_kernel(loss_fn, strategy.worker_transform,
                                    donate=False)
  k = workers_per_call
  dynamic = dynamic_local_updates

  def windows(workers, indices, due, lengths, x, y):
    """Every due worker's window; the others pass through unchanged."""

    def one(w, args):
      idx, is_due, length = args

      def mean(values):
        # Over the window's own steps (a shorter window's others are NaN);
        # the same expression with and without Dynamic Local Updates, so
        # equal windows give equal means, bit for bit.
        used = jnp.arange(values.shape[0]) < length
        return jnp.sum(jnp.where(used, values, 0)) / length

      def run(w):
        if dynamic:
          opt_state = strategy.begin_window(w.state(strategy),
                                            length).opt_state
          result = kernel(w.params, opt_state, (x[idx], y[idx]), length)
        else:
          result = kernel(w.params, w.opt_state, (x[idx], y[idx]))
        metrics = result.metrics
        loss = mean(metrics["loss"]).astype(jnp.float32)
        means = {name: mean(values).astype(jnp.float32)
                 for name, values in metrics.items() if name != "loss"}
        # Each step's value of the step metric, [λ] (none when the loss
        # reports no such metric).
        steps = ({step_metric: metrics[step_metric].astype(jnp.float32)}
                 if step_metric in metrics else {})
        return (w._replace(params=result.params,
                           opt_state=result.opt_state),
                (loss, means, steps))

      return _when(is_due, run, w)

    workers, (loss, means, steps) = map_in_place(
        one, workers, (indices, due, lengths), batch_size=k)
    return workers, loss, means, steps

  return windows


def gather_workers(tree):
  """`tree`'s per-worker leaves of this device's workers, all-gathered into every worker's (inside `shard_map`)."""
  return jax.tree.map(lambda a: jax.lax.all_gather(a, AXIS, tiled=True), tree)


@kept
def build_round(strategy, loss_fn, *, mesh, num_workers: int,
                workers_per_call: int, keeps_pulled: bool,
                dynamic_local_updates: bool,
                diagnostics: instruments_lib.Diagnostics = None,
                step_metric: Optional[str] = "accuracy"):
  """One round, jitted: `round_fn(workers, center, server, indices, ...)`.

  Its arguments: the stacked workers, the center, the server state, each
  worker's sample indices, whether it is due and its window's steps, the
  round's commit order and count, and the training data; with
  `diagnostics`, also the `DiagnosticsCarry` and the probe set `(x, y)`.

  Every due worker's window (`map_in_place`, `workers_per_call` at a time on
  each device), then the round's `num_commits` commits in `order` through
  the strategy's half-steps (see the module docstring).

  Args:
    strategy: the `Strategy`.
    loss_fn: `loss_fn(params, (x, y)) -> (loss, aux)`.
    mesh: the `workers` mesh; the stacked workers are sharded over it.
    num_workers: n.
    workers_per_call: k, per device.
    keeps_pulled: the workers keep the center they pulled (`Workers.pulled`).
    dynamic_local_updates: windows may be shorter than λ (`lengths`).
    diagnostics: None, or the `agn_jax.instruments.Diagnostics` that measure each applied
      commit (`agn_jax.instruments.commit_instruments`: `Δ` is the payload's
      decoded `delta` as sent, the pulled center the one its worker last
      received) and every k-th its gradient cosine on the probe set. None
      traces the round exactly as without instruments.
    step_metric: the metric whose every local step's value the records keep
      (`RoundRecords.step_metrics`; the task's efficiency metric), if the
      loss reports it.

  Returns:
    The jitted round; it returns `(workers, center, server, records)`
    (`RoundRecords`), the first three donated; with `diagnostics`, also the
    new `DiagnosticsCarry` (donated too).
  """
  windows = build_windows(strategy, loss_fn, workers_per_call,
                          dynamic_local_updates, step_metric)
  sharded = mesh.size > 1
  per_device = num_workers // mesh.size

  def take(workers, worker):
    """Worker `worker`'s state, on every device."""
    if not sharded:
      return jax.tree.map(lambda a: a[worker], workers)
    local = worker % per_device
    gathered = jax.lax.all_gather(
        jax.tree.map(lambda a: a[local], workers), AXIS)
    return jax.tree.map(lambda a: a[worker // per_device], gathered)

  def put(workers, worker, value, taken):
    """Writes worker `worker`'s leaves of `value` that are not `taken`'s.

    A leaf the commit and pull left as they were (the very array `take`
    returned, e.g. AGN's delta) is not written back: XLA cannot order a
    write into a stacked leaf after the other reads of it in the same
    iteration, and copies the whole stacked leaf (n models) on every
    commit when it is.
    """
    def write(a, v, t):
      if v is t:
        return a
      if not sharded:
        return a.at[worker].set(v)
      mine = jax.lax.axis_index(AXIS) == worker // per_device
      local = worker % per_device
      return a.at[local].set(jnp.where(mine, v, a[local]))

    return jax.tree.map(write, workers, value, taken)

  def measure(diag, probe, worker, payload, pulled, before, after, clock,
              accepted):
    """The instruments of one commit: `(new carry, {name: scalar})`."""
    delta = strategy.decompress(payload, before)["delta"]
    if strategy.pull_before_commit:  # Pulled just now: nothing moved.
      center_pulled = diagnostics.restrict(pulled)
    else:
      center_pulled = jax.tree.map(lambda a: a[worker], diag.pulled)

    def update(state):
      return instruments_lib.measure_commit(
          diagnostics, loss_fn, state, probe, delta, center_pulled, before,
          after, clock)

    # A rejected commit moved nothing and is not measured.
    return _when(accepted, update, diag.state)

  def commit_one(i, carry):
    """The i-th commit of the round, through the strategy's half-steps."""
    if diagnostics is not None:
      workers, center, server, rec, diag, probe = carry
    else:
      workers, center, server, rec = carry
    worker = rec["order"][i]
    w = take(workers, worker)
    before, clock_before = center, server.clock
    # The commit in the contract's order (`strategies.exchange`). A pull
    # costs nothing here, and nothing lands between a pull before the commit
    # and its apply.
    ex = strategies.exchange(
        strategy, w.state(strategy), center, server,
        w.pulled if keeps_pulled else center, w.clock)
    center, server, accepted = ex.center, ex.server_state, ex.accepted
    staleness, payload, pulled = ex.staleness, ex.payload, ex.used
    # An optimizer-state leaf that an accepted commit and pull leave as it
    # was (AGN's delta, Adam's moments) keeps its old array, so `put` does
    # not write it back; `_restart` resets it after the round for a
    # rejected worker.
    unchanged = strategy.worker_receive(
        ex.committed, strategy.received_center(True, center, pulled), True)
    received = ex.state
    opt_state = jax.tree.map(lambda new, k, old: old if k is old else new,
                             received.opt_state, unchanged.opt_state,
                             w.opt_state)
    w_new = Workers(received.params, opt_state,
                     center if keeps_pulled else None, server.clock,
                     getattr(received, "residual", None))
    workers = put(workers, worker, w_new, w)
    rec = dict(rec,
               clock=rec["clock"].at[i].set(server.clock),
               staleness=rec["staleness"].at[i].set(staleness),
               rejected=rec["rejected"].at[i].set(~accepted))
    if diagnostics is None:
      return workers, center, server, rec
    state, scalars = measure(diag, probe, worker, payload, pulled, before,
                             center, clock_before, accepted)
    diag = DiagnosticsCarry(state, jax.tree.map(
        lambda a, g: a.at[worker].set(g), diag.pulled,
        diagnostics.restrict(ex.received)))
    rec = dict(rec, instruments={
        name: rec["instruments"][name].at[i].set(value)
        for name, value in scalars.items()})
    return workers, center, server, rec, diag, probe

  def round_fn(workers, center, server, indices, due, lengths, order,
               num_commits, x, y, *measured):
    workers, loss, means, steps = windows(workers, indices, due, lengths,
                                          x, y)
    if sharded:
      loss, means, steps = gather_workers((loss, means, steps))
    slots = order.shape[0]
    rec = {"order": order,
           "clock": jnp.zeros(slots, jnp.int32),
           "staleness": jnp.zeros(slots, jnp.int32),
           "rejected": jnp.zeros(slots, bool)}
    if diagnostics is None:
      workers, center, server, rec = jax.lax.fori_loop(
          0, num_commits, commit_one, (workers, center, server, rec))
    else:
      diag, probe_x, probe_y = measured
      rec["instruments"] = {
          name: jnp.full(slots, jnp.nan, jnp.float32)
          for name in instruments_lib.SCALARS + (instruments_lib.GRADIENT_COSINE,)}
      workers, center, server, rec, diag, _ = jax.lax.fori_loop(
          0, num_commits, commit_one,
          (workers, center, server, rec, diag, (probe_x, probe_y)))
    # The windows' metrics by worker: a window's commit may come later.
    records = RoundRecords(rec["clock"], rec["staleness"], loss, means,
                           rec["rejected"], steps, rec.get("instruments"))
    if diagnostics is None:
      return workers, center, server, records
    return workers, center, server, records, diag

  if sharded:
    # The instruments' carry and probe set are replicated, as the center.
    extra = () if diagnostics is None else (P(), P(), P())
    round_fn = jax.shard_map(
        round_fn, mesh=mesh,
        in_specs=(P(AXIS), P(), P(), P(AXIS), P(AXIS), P(AXIS), P(), P(),
                  P(), P()) + extra,
        out_specs=(P(AXIS), P(), P(), P()) + extra[:1],
        # Every device applies the same commits to its copy of the center
        # (from all-gathered worker states), so it is replicated by
        # construction; the check would also reject the masked branch.
        check_vma=False)
  donate = (0, 1, 2) if diagnostics is None else (0, 1, 2, 10)
  return jax.jit(round_fn, donate_argnums=donate)
