"""The simulated backend's engine: n asynchronous workers in one deterministic program.

No processes, files or metrics here: the run bookkeeping drives a `Simulation`
round by round and writes what it returns.

**The clock.** When each commit happens comes from a time model, never from
the numbers (`agn_jax.cluster`): each worker computes a window, sends its
commit, waits for the one FIFO server and receives the center, and an
`agn_jax.cluster.EventSchedule` gives the commits in the order the server
applies them, with their times (in seconds of the modeled cluster, or in
local steps for `--cluster=none`). The numerics follow that order.

**Rounds.** The n workers' parameters and optimizer states are stacked on a
leading worker axis. One round is one jitted call:

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
   are reset after the round): XLA copies a written-back leaf of all n
   workers on every commit.

A worker commits at most once per round, and its next window starts from the
state its commit left, so any sequence of commits cut into rounds this way is
simulated exactly: the result depends on the commit order only, never on k or
on the devices. A window that ran in one round may be committed in a later
one (a slow worker's, while a fast one commits twice): every window whose
center exists runs in the same mapped call.

**Speed models** (`agn_jax.cluster.parse_speed_model`): `constant` (with
equal costs the commits go round robin, staleness exactly n − 1 after the
first round), `lognormal:SIGMA` and `speeds:S0,...` (each worker's own
speed), `random:SIGMA` and `straggler:P:SLOWDOWN` (each window's own
duration, so a fast window can lap a slow one), `trace:RUN_DIR` (a
processes run's window times). A given commit order can be replayed too
(`commit_order`: a sequence of workers, or of rounds).

**Dynamic Local Updates** (`--dynamic_local_updates`, Liu, Douillard et al.
2024): worker k's windows are `λ_k = λ s_k / max_j s_j` steps
(`agn_jax.shares.local_updates`), s_k its speed over the run
(`TimeModel.mean_speeds`: the worker's own speed for `lognormal`, `speeds`
and `trace`; the same for every worker of `constant`, `random` and
`straggler`, which then keep λ). Its share stays the same number of local
steps, so it runs more, shorter windows (`agn_jax.shares.Windows`), and the
clock times each window by its own steps. The mapped call still runs up to
λ steps for every due worker: each runs its own window's first steps only
(`window_kernel`'s `steps`), the others change nothing and take no data.

**Devices.** The worker axis is sharded over a `jax.sharding.Mesh` with one
`workers` axis (`NamedSharding(mesh, P("workers"))`): each device runs the
windows of its own workers; the center and the server state are replicated,
and every device applies the same commits to its copy, fetching the
committing worker's state from its owner (an `all_gather` of one worker's
state per commit). By default the mesh holds the largest number of local
devices that divides n (n = 10 on 4 devices uses 2), so no worker is padded.
k (`workers_per_call`) is per device: by default 1 on CPU, where workers one
after another keep one model in cache and run faster than vmapped ones, and
all of a device's workers on GPU or TPU. `Simulation.info` records the
choice.

Example:
  >>> import numpy as np
  >>> from agn_jax import TrainConfig
  >>> from agn_jax.data import load_synthetic
  >>> from agn_jax.simulator import Simulation
  >>> config = TrainConfig(strategy="agn", num_workers=3, communication_window=2,
  ...                      hidden_sizes=(8,), batch_size=4, epochs=0.2)
  >>> sim = Simulation(config, load_synthetic(size=500, seed=0))
  >>> [r.staleness for r in sim.run_round() + sim.run_round()]
  [0, 1, 2, 2, 2, 2]
  >>> sim.center().dtype, sim.done
  (dtype('float32'), False)
"""

from typing import (Any, Callable, Dict, Iterator, List, NamedTuple, Optional,
                    Sequence, Tuple)

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import numpy as np

from agn_jax import build, cluster as cluster_lib, kernel as kernel_lib
from agn_jax import models, shares, strategies
from agn_jax.config import SimulatedOptions
from agn_jax.errors import check_rejected_in_a_row
from agn_jax.flat import FlatLayout
from agn_jax.shares import (Windows, local_updates,
                            shard_bounds, windows_per_worker)

AXIS = "workers"


class CommitRecord(NamedTuple):
  """One commit as the server saw it.

  Attributes:
    worker: the committing worker.
    window: that worker's window index over its whole share (from 0).
    clock: the server clock after the commit (unchanged if rejected).
    staleness: server clock at the apply − clock of the center the worker
      last pulled (as the process server counts it; for a rejected commit,
      what it would have been).
    loss: the window's mean training loss.
    accuracy: the window's mean training accuracy (nan if the loss has none).
    rejected: the payload had a non-finite number and was not applied.
    simulated_time: when the server had applied it, on the time model's
      clock (modeled seconds; local steps of a speed-1 worker for the
      `none` cluster).
    round: the round it was applied in (from 0).
    window_start: when the window's first step began, on the same clock.
    step_accuracy: each local step's training accuracy (float32 values);
      empty when the loss has none.
    window_end: when the window's last step was done: its i-th step (from
      0) ends at `window_start + (i + 1) (window_end − window_start) / λ`.
      The commit's message and the server's queue come after it.
    window_round: the round the window ran in (the commit's own or earlier).
    local_updates: the window's local steps: λ, or with Dynamic Local
      Updates the worker's λ_k (or fewer, in the last window of its share).
  """
  worker: int
  window: int
  clock: int
  staleness: int
  loss: float
  accuracy: float
  rejected: bool
  simulated_time: float
  round: int
  window_start: float = 0.0
  step_accuracy: Tuple[float, ...] = ()
  window_end: float = 0.0
  window_round: int = 0
  local_updates: int = 0


class _Workers(NamedTuple):
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


def workload(strategy: strategies.Strategy, loss_fn, center, x_train, y_train,
             batch_size: int) -> cluster_lib.Workload:
  """What one worker computes and sends, for the time model (`agn_jax.cluster`).

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
  grad = jax.jit(jax.grad(lambda p, b: loss_fn(p, b)[0]))
  flops = 0.0
  try:
    cost = grad.lower(center, batch).cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    flops = float((cost or {}).get("flops", 0.0))
  except Exception:  # pylint: disable=broad-except
    pass  # A backend without cost analysis: the dense-layer count below.
  if not flops > 0:
    flops = 6.0 * num_params * batch_size
  state = jax.eval_shape(strategy.worker_transform.init, center)
  floats = sum(int(np.size(a)) for a in jax.tree.leaves(state)
               if jnp.issubdtype(a.dtype, jnp.floating))
  return cluster_lib.Workload(
      num_params=num_params, flops_per_step=flops,
      optimizer_floats=floats / max(num_params, 1),
      payload_vectors=len(strategy.payload),
      pull_before_commit=bool(strategy.pull_before_commit),
      payload_bytes=strategy.commit_bytes(center))


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


def _reads_center(worker_commit, state, center) -> bool:
  """Whether `worker_commit(state, center)` reads its `center` at all."""
  closed = jax.make_jaxpr(worker_commit)(state, center)
  jaxpr = closed.jaxpr
  center_vars = jaxpr.invars[len(jaxpr.invars) - len(jax.tree.leaves(center)):]
  used = {id(v) for eqn in jaxpr.eqns for v in eqn.invars}
  used |= {id(v) for v in jaxpr.outvars}
  return any(id(v) in used for v in center_vars)


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


# --- The engine -------------------------------------------------------------


class Simulation:
  """n asynchronous workers and their server, simulated round by round.

  Args:
    config: a `TrainConfig`; the strategy, model, initial center, worker
      optimizer, n, λ, batch size, epochs and seed are built from it with
      `agn_jax.build` exactly as the process workers build them. Its
      `SimulatedOptions` give the clock and k, the workers vmapped at a
      time on each device (`workers_per_call`; None: 1 on CPU, all of a
      device's workers on GPU/TPU); a config of another backend has none,
      and their defaults apply.
    dataset: an `agn_jax.data.Dataset` (its training split is sharded).
    cluster: the `agn_jax.cluster.Cluster` of the time model; None: the
      preset the options' `cluster` names (`this_host` has none: it is
      measured, `agn_jax.runtime.calibration.this_host`). The speed model,
      the bandwidth, latency and apply overrides are the options', the
      seed the config's.
    commit_order: None, or a commit order to replay instead of the time
      model's: a sequence of worker indices, or of rounds (each a sequence
      of distinct workers, applied in one round).
    mesh: a `Mesh` with one axis named `"workers"` whose size divides n
      (None: `default_mesh(n)`).

  Raises:
    ValueError: one line, for a setting the time model cannot take (see
      `agn_jax.cluster.time_model`) or a bad replayed order.

  Example:
    >>> from agn_jax.config import SimulatedOptions, TrainConfig
    >>> from agn_jax.data import load_synthetic
    >>> ds = load_synthetic(size=300, seed=0)
    >>> config = TrainConfig(strategy="aeasgd", num_workers=2,
    ...                      communication_window=2, hidden_sizes=(8,),
    ...                      batch_size=4, epochs=0.2, backend="simulated",
    ...                      options=SimulatedOptions(speed_model="speeds:2,1"))
    >>> sim = Simulation(config, ds)
    >>> [(r.worker, r.simulated_time) for r in sim.run_round()]
    [(0, 1.0)]
    >>> loss, accuracy = sim.evaluate(ds.x_test, ds.y_test)
  """

  def __init__(self, config, dataset, *,
               cluster: Optional[cluster_lib.Cluster] = None,
               commit_order: Optional[Sequence] = None,
               mesh: Optional[Mesh] = None):
    options = config.options
    if not isinstance(options, SimulatedOptions):
      options = SimulatedOptions()
    strategy = build.build_strategy(config)
    model, loss_fn = build.build_model(config, dataset.num_classes,
                                       dataset.input_shape)
    center = build.initial_center(config, model,
                                  int(np.prod(dataset.input_shape)))
    if cluster is None:
      cluster = cluster_lib.preset(options.cluster)

    def time_model(work: Callable[[], cluster_lib.Workload]):
      return cluster_lib.time_model(
          cluster, work() if cluster.unit != "steps" else
          cluster_lib.Workload(0, pull_before_commit=
                               strategy.pull_before_commit),
          num_workers=config.num_workers,
          communication_window=config.communication_window,
          speed_model=options.speed_model, seed=config.seed,
          bandwidth_gbps=options.bandwidth_gbps,
          latency_ms=options.latency_ms,
          server_apply_ms=options.server_apply_ms)

    self._setup(strategy, loss_fn, center, dataset.x_train, dataset.y_train,
                num_workers=config.num_workers, batch_size=config.batch_size,
                epochs=config.epochs, seed=config.seed, time_model=time_model,
                commit_order=commit_order,
                workers_per_call=options.workers_per_call, mesh=mesh,
                apply_fn=model.apply,
                dynamic_local_updates=config.dynamic_local_updates,
                data_assignment=config.data_assignment)

  @classmethod
  def from_parts(cls, strategy: strategies.Strategy, loss_fn, initial_center,
                 x_train, y_train, *, num_workers: int, batch_size: int,
                 epochs: float, seed: int = 0,
                 time_model: Optional[cluster_lib.TimeModel] = None,
                 commit_order: Optional[Sequence] = None,
                 workers_per_call=None, mesh=None,
                 apply_fn=None,
                 dynamic_local_updates: bool = False,
                 data_assignment: str = "shards") -> "Simulation":
    """A simulation of any strategy and loss, without a `TrainConfig`.

    Args:
      strategy: the `Strategy`.
      loss_fn: `loss_fn(params, (x, y)) -> (loss, aux)`, as the kernel takes.
      initial_center: the center pytree (float32 leaves).
      x_train: `[N, ...]` features; each worker's shard is `shard_bounds`.
      y_train: `[N]` labels.
      num_workers: n.
      batch_size: mini-batch size of a local step.
      epochs: epochs' worth of data over all workers (`windows_per_worker`).
      seed: seeds the samplers (`[seed, k]`).
      time_model: an `agn_jax.cluster.TimeModel` of n workers and this
        strategy's λ; None: the step counter (`none` cluster, constant
        speeds).
      commit_order, mesh: as for the constructor.
      workers_per_call: k, as `SimulatedOptions.workers_per_call`.
      apply_fn: `apply_fn(center, x) -> logits`, for `evaluate`; optional.
      dynamic_local_updates: each worker's windows are λ_k steps, in
        proportion to its speed on the time model (see the module
        docstring).
      data_assignment: how the samples reach the workers
        (`agn_jax.shares.ASSIGNMENTS`).

    Returns:
      The `Simulation`.
    """
    lam = strategy.communication_window
    if time_model is None:
      time_model = cluster_lib.TimeModel(
          1.0, 0.0, 0.0, 0.0, num_workers=num_workers,
          communication_window=lam,
          pull_before_commit=strategy.pull_before_commit, cluster="none",
          unit="steps")
    if (time_model.num_workers, time_model.communication_window,
        time_model.pull_before_commit) != (num_workers, lam,
                                           strategy.pull_before_commit):
      raise ValueError(
          f"time_model is of {time_model.num_workers} workers, λ = "
          f"{time_model.communication_window}, pull_before_commit="
          f"{time_model.pull_before_commit}; the simulation has {num_workers}"
          f", {lam}, {strategy.pull_before_commit}")
    sim = cls.__new__(cls)
    sim._setup(strategy, loss_fn, initial_center, x_train, y_train,
               num_workers=num_workers, batch_size=batch_size, epochs=epochs,
               seed=seed, time_model=lambda work: time_model,
               commit_order=commit_order, workers_per_call=workers_per_call,
               mesh=mesh, apply_fn=apply_fn,
               dynamic_local_updates=dynamic_local_updates,
               data_assignment=data_assignment)
    return sim

  def _setup(self, strategy, loss_fn, initial_center, x_train, y_train, *,
             num_workers, batch_size, epochs, seed, time_model, commit_order,
             workers_per_call, mesh, apply_fn, dynamic_local_updates=False,
             data_assignment="shards"):
    n = num_workers
    # `from_parts` takes n, the batch size and k from its caller, not from a
    # validated config.
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
      raise ValueError(f"num_workers must be an integer >= 1, got {n!r}")
    if batch_size < 1:
      raise ValueError(f"batch_size must be >= 1, got {batch_size!r}")
    x_train, y_train = np.asarray(x_train), np.asarray(y_train)
    if len(x_train) != len(y_train):
      raise ValueError(f"x_train has {len(x_train)} examples, y_train "
                       f"{len(y_train)}")
    self.strategy = strategy
    self.num_workers = n
    self.communication_window = lam = strategy.communication_window
    self.batch_size = batch_size
    self.seed = seed
    self.data_assignment = data_assignment
    self._num_examples = len(x_train)
    self.num_windows = windows_per_worker(len(x_train), n, epochs, lam,
                                          batch_size)
    self._bounds = [shard_bounds(len(x_train), n, k) for k in range(n)]
    for start, stop in self._bounds:
      if stop <= start:
        raise ValueError("a worker's shard is empty; use fewer workers")
    self.time_model = time_model(lambda: workload(
        strategy, loss_fn, initial_center, x_train, y_train, batch_size))
    # Dynamic Local Updates: λ_k from each worker's speed over the run; the
    # share stays `num_windows` windows of λ, in local steps.
    self.dynamic_local_updates = bool(dynamic_local_updates)
    self.local_updates = (
        local_updates(lam, self.time_model.mean_speeds())
        if self.dynamic_local_updates else (lam,) * n)
    self.windows = Windows(self.num_windows * lam, self.local_updates)
    self._stream = None
    if data_assignment == shares.STREAM:
      if commit_order is not None:
        raise ValueError("data_assignment=stream hands each window the "
                         "stream's next steps by the clock; a replayed "
                         "commit_order fixes every worker's windows instead")
      # Every share together, handed out by the clock (`EventSchedule`).
      self._stream = shares.Stream(len(x_train), batch_size, seed)
      tickets = shares.Tickets(n * self.windows.share_steps)
    if commit_order is not None:
      self._schedule = cluster_lib.ReplaySchedule(commit_order, n,
                                                  self.windows)
    else:
      self._schedule = cluster_lib.EventSchedule(
          self.time_model, self.windows,
          tickets if self._stream is not None else None)
    self._apply_fn = apply_fn

    # Devices and k.
    if mesh is None:
      mesh = default_mesh(n)
    if tuple(mesh.axis_names) != (AXIS,) or n % mesh.size:
      raise ValueError(f"mesh must have the one axis {AXIS!r} and a size "
                       f"that divides num_workers={n}, got axes "
                       f"{mesh.axis_names} of size {mesh.size}")
    self.mesh = mesh
    per_device = n // mesh.size
    platform = mesh.devices.flat[0].platform
    if workers_per_call is None:
      workers_per_call = default_workers_per_call(platform, per_device)
    if (isinstance(workers_per_call, bool) or
        not isinstance(workers_per_call, int) or workers_per_call < 1):
      raise ValueError(f"workers_per_call must be an integer >= 1, got "
                       f"{workers_per_call!r}")
    self.workers_per_call = min(workers_per_call, per_device)
    self._sharded = NamedSharding(mesh, P(AXIS))
    self._replicated = NamedSharding(mesh, P())

    # State: the center, the server state and the stacked workers.
    self.layout = FlatLayout.from_tree(initial_center)
    center = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32),
                          initial_center)
    self._keeps_pulled = (
        not strategy.pull_before_commit and
        _reads_center(strategy.worker_commit, strategy.init_worker(center),
                      center))
    self._x = jax.device_put(x_train, self._replicated)
    self._y = jax.device_put(y_train, self._replicated)
    self._center = jax.device_put(center, self._replicated)
    self._server = jax.device_put(strategy.rule.init(center),
                                  self._replicated)
    self._workers = self._initial_workers(center)
    self._treedef = jax.tree.structure(self._arrays())
    self._round_fn = self._build_round(loss_fn)
    self._restart_fn = self._build_restart()

    # Host-side progress.
    self._round = 0
    self._num_commits = 0
    self._rejected = 0
    self._simulated_time = 0.0
    self._windows_done = [0] * n  # Committed.
    self._windows_run = [0] * n  # Computed: one more while a commit waits.
    # A window that ran but is not committed yet: its metrics and round.
    self._pending: List[Optional[tuple]] = [None] * n
    self._rejected_in_a_row = [0] * n
    self._samplers = self._fresh_samplers()
    # Messages of this session (not restored): each commit, and the center
    # its worker receives with the reply (or pulls first, `pull_before_commit`).
    self.commit_bytes = strategy.commit_bytes(center)
    self.center_bytes = 4 * self.layout.num_params
    self._messages = [0] * n

  def _initial_workers(self, center):
    n, strategy = self.num_workers, self.strategy

    def stack(center):
      state = strategy.init_worker(center)
      one = _Workers(state.params, state.opt_state,
                     center if self._keeps_pulled else None,
                     jnp.zeros([], jnp.int32), getattr(state, "residual", None))
      return jax.tree.map(
          lambda x: jnp.broadcast_to(x, (n,) + jnp.shape(x)), one)

    return jax.jit(stack, out_shardings=self._sharded)(center)

  def _window_count(self, worker: int) -> int:
    """Windows of `worker`: its share's, or on a stream the ones the clock gave it so far."""
    if self._stream is not None:
      return self._schedule.window_count(worker)
    return self.windows.count(worker)

  def _window_samples(self, worker: int, window: int) -> np.ndarray:
    """Sample indices of `worker`'s window `window`, [steps × batch]."""
    if self._stream is not None:
      start, steps = self._schedule.ticket(worker, window)
      return self._stream.indices(start, steps)
    return self._samplers[worker].take(
        self.windows.steps(worker, window) * self.batch_size)

  def _fresh_samplers(self):
    if self._stream is not None:
      return []  # The stream's steps are read by ticket.
    samplers = []
    for k in range(self.num_workers):
      sampler = shares.sampler(self.data_assignment, self._num_examples,
                               self.num_workers, k, self.seed)
      # Where a restarted process worker resumes: its share so far, skipped.
      sampler.skip(self.windows.steps_before(k, self._windows_run[k]) *
                   self.batch_size)
      samplers.append(sampler)
    return samplers

  def _build_restart(self):
    """`restart(workers, mask)`: the masked workers start afresh at their parameters.

    After a round whose commit was rejected: the commit loop already set such
    a worker's parameters (and every leaf it rewrites) to the center and its
    fresh values; this resets the leaves it left untouched, so the worker's
    state is exactly what `strategy.worker_receive` gives a rejected worker,
    as in a process worker.
    """
    strategy = self.strategy
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

    return jax.jit(restart, donate_argnums=0, out_shardings=self._sharded)

  def _build_round(self, loss_fn):
    strategy = self.strategy
    kernel = kernel_lib.window_kernel(loss_fn, strategy.worker_transform,
                                      donate=False)
    k = self.workers_per_call
    sharded = self.mesh.size > 1
    per_device = self.num_workers // self.mesh.size
    keeps_pulled = self._keeps_pulled
    dynamic = self.dynamic_local_updates

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
          accuracy = (mean(metrics["accuracy"]).astype(jnp.float32)
                      if "accuracy" in metrics else jnp.float32(jnp.nan))
          # Each step's accuracy, [λ] (or [0] when the loss has none).
          steps = metrics.get("accuracy", jnp.zeros(0)).astype(jnp.float32)
          return (w._replace(params=result.params,
                             opt_state=result.opt_state),
                  (loss, accuracy, steps))

        def skip(w):
          shapes = jax.eval_shape(run, w)[1]
          return w, jax.tree.map(
              lambda s: jnp.full(s.shape, jnp.nan, s.dtype), shapes)

        return jax.lax.cond(is_due, run, skip, w)

      workers, (loss, accuracy, steps) = map_in_place(
          one, workers, (indices, due, lengths), batch_size=k)
      return workers, loss, accuracy, steps

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

    def commit_one(i, carry):
      """The i-th commit of the round, through the strategy's half-steps."""
      workers, center, server, rec = carry
      worker = rec["order"][i]
      w = take(workers, worker)
      if strategy.pull_before_commit:  # Nothing lands between pull and commit.
        pulled, pulled_clock = center, server.clock
      else:
        pulled, pulled_clock = (w.pulled if keeps_pulled else center), w.clock
      staleness = server.clock - pulled_clock
      payload, state = strategy.worker_commit(w.state(strategy), pulled)
      center, server, accepted = strategy.server_apply(center, server, payload,
                                                       staleness)
      # A pull costs nothing here. As the contract says: the worker receives
      # the new center where it pulls after its commit
      # (`pulls_after_commit(accepted)`), else the one its commit used.
      if strategy.pull_before_commit:
        given = jax.tree.map(lambda new, used: jnp.where(accepted, used, new),
                             center, pulled)
      else:
        given = center
      received = strategy.worker_receive(state, given, accepted)
      # An optimizer-state leaf that an accepted commit and pull leave as it
      # was (AGN's delta, Adam's moments) keeps its old array, so `put` does
      # not write it back; `_restart` resets it after the round for a
      # rejected worker.
      kept = strategy.worker_receive(state, pulled if
                                     strategy.pull_before_commit else center,
                                     True)
      opt_state = jax.tree.map(lambda new, k, old: old if k is old else new,
                               received.opt_state, kept.opt_state, w.opt_state)
      w_new = _Workers(received.params, opt_state,
                       center if keeps_pulled else None, server.clock,
                       getattr(received, "residual", None))
      workers = put(workers, worker, w_new, w)
      rec = dict(rec,
                 clock=rec["clock"].at[i].set(server.clock),
                 staleness=rec["staleness"].at[i].set(staleness),
                 rejected=rec["rejected"].at[i].set(~accepted))
      return workers, center, server, rec

    def round_fn(workers, center, server, indices, due, lengths, order,
                 num_commits, x, y):
      workers, loss, accuracy, steps = windows(workers, indices, due, lengths,
                                               x, y)
      if sharded:
        loss = jax.lax.all_gather(loss, AXIS, tiled=True)
        accuracy = jax.lax.all_gather(accuracy, AXIS, tiled=True)
        steps = jax.lax.all_gather(steps, AXIS, tiled=True)
      slots = order.shape[0]
      rec = {"order": order,
             "clock": jnp.zeros(slots, jnp.int32),
             "staleness": jnp.zeros(slots, jnp.int32),
             "rejected": jnp.zeros(slots, bool)}
      workers, center, server, rec = jax.lax.fori_loop(
          0, num_commits, commit_one, (workers, center, server, rec))
      # The windows' metrics by worker: a window's commit may come later.
      records = (rec["clock"], rec["staleness"], loss, accuracy,
                 rec["rejected"], steps)
      return workers, center, server, records

    if sharded:
      round_fn = jax.shard_map(
          round_fn, mesh=self.mesh,
          in_specs=(P(AXIS), P(), P(), P(AXIS), P(AXIS), P(AXIS), P(), P(),
                    P(), P()),
          out_specs=(P(AXIS), P(), P(), P()),
          # Every device applies the same commits to its copy of the center
          # (from all-gathered worker states), so it is replicated by
          # construction; the check would also reject the masked branch.
          check_vma=False)
    return jax.jit(round_fn, donate_argnums=(0, 1, 2))

  # --- Public API -------------------------------------------------------------

  @property
  def done(self) -> bool:
    """Whether no commit is left (every share is done, or a replay is used up)."""
    return self._schedule.peek() is None

  def _describe_clock(self) -> Dict[str, Any]:
    if isinstance(self._schedule, cluster_lib.ReplaySchedule):
      return {"time_model": self._schedule.describe()}
    return {"time_model": self.time_model.describe()}

  @property
  def info(self) -> Dict[str, Any]:
    """How the simulation runs: platform, devices, k, the time model."""
    return {
        "platform": self.mesh.devices.flat[0].platform,
        "num_devices": int(self.mesh.size),
        "workers_per_device": self.num_workers // self.mesh.size,
        "workers_per_call": self.workers_per_call,
        "windows_per_worker": (
            [self._window_count(k) for k in range(self.num_workers)]
            if self.dynamic_local_updates or self._stream is not None
            else self.num_windows),
        "keeps_pulled_center": self._keeps_pulled,
        **({"local_updates": list(self.local_updates)}
           if self.dynamic_local_updates else {}),
        **self._describe_clock(),
    }

  def _plan(self) -> List[cluster_lib.ScheduledCommit]:
    """The round's commits: the schedule's next ones, up to a worker's second."""
    plan, seen = [], set()
    while True:
      commit = self._schedule.peek()
      if (commit is None or commit.worker in seen or
          (commit.barrier and plan)):
        return plan
      plan.append(self._schedule.pop())
      seen.add(commit.worker)

  def run_round(self) -> List[CommitRecord]:
    """Runs one round; returns its commits in the order the server applied them.

    Returns:
      The round's `CommitRecord`s; `[]` once `done`.

    Raises:
      Diverged: a worker's commits were rejected `MAX_REJECTED_IN_A_ROW`
        times in a row (each time from a fresh start at the center).
    """
    n, lam, batch = self.num_workers, self.communication_window, self.batch_size
    # Every worker that holds its center runs its window now, whenever its
    # commit comes.
    due = np.array([self._pending[k] is None and
                    self._windows_run[k] < self._window_count(k)
                    for k in range(n)])
    plan = self._plan()
    if not plan:
      return []
    # A window of fewer than λ steps (Dynamic Local Updates) takes only its
    # own steps' samples; the rest of its rows are never read.
    indices = np.zeros((n, lam, batch), np.int32)
    lengths = np.zeros(n, np.int32)
    order = np.zeros(n, np.int32)
    for k in np.flatnonzero(due):
      samples = self._window_samples(k, self._windows_run[k])
      length = len(samples) // batch
      lengths[k] = length
      indices[k, :length] = samples.reshape(length, batch)
    for i, c in enumerate(plan):
      order[i] = c.worker
    self._workers, self._center, self._server, out = self._round_fn(
        self._workers, self._center, self._server,
        jax.device_put(indices, self._sharded),
        jax.device_put(due, self._sharded),
        jax.device_put(lengths, self._sharded), order, np.int32(len(plan)),
        self._x, self._y)
    clock, staleness, loss, accuracy, rejected, steps = (np.asarray(a)
                                                         for a in out)
    for k in np.flatnonzero(due):
      self._pending[k] = (float(loss[k]), float(accuracy[k]),
                          tuple(steps[k][:lengths[k]].tolist()), self._round,
                          int(lengths[k]))
      self._windows_run[k] += 1
    if rejected[:len(plan)].any():
      mask = np.zeros(n, bool)
      mask[order[:len(plan)][rejected[:len(plan)]]] = True
      self._workers = self._restart_fn(self._workers,
                                       jax.device_put(mask, self._sharded))
    records = []
    for i, c in enumerate(plan):
      k = c.worker
      window_loss, window_accuracy, window_steps, ran, length = (
          self._pending[k])
      self._pending[k] = None
      records.append(CommitRecord(
          worker=k, window=self._windows_done[k], clock=int(clock[i]),
          staleness=int(staleness[i]), loss=window_loss,
          accuracy=window_accuracy, rejected=bool(rejected[i]),
          simulated_time=float(c.applied), round=self._round,
          window_start=float(c.window_start), step_accuracy=window_steps,
          window_end=float(c.window_end), window_round=ran,
          local_updates=length))
      self._windows_done[k] += 1
      self._messages[k] += 1
      self._rejected += int(rejected[i])
      self._rejected_in_a_row[k] = (self._rejected_in_a_row[k] + 1
                                    if rejected[i] else 0)
    self._round += 1
    self._num_commits += len(plan)
    self._simulated_time = max(self._simulated_time, records[-1].simulated_time)
    for k in range(n):
      check_rejected_in_a_row(self._rejected_in_a_row[k], worker=k,
                              records=records)
    return records

  def lower_round(self):
    """The round's jitted program, lowered for this simulation's shapes.

    For inspection, e.g. of the compiled HLO
    (`sim.lower_round().compile().as_text()`) or its cost analysis; nothing
    runs and the state is not touched.

    Returns:
      A `jax.stages.Lowered` of one round in which all n workers are due.
    """
    n, lam = self.num_workers, self.communication_window
    indices = np.zeros((n, lam, self.batch_size), np.int32)
    return self._round_fn.lower(
        self._workers, self._center, self._server,
        jax.device_put(indices, self._sharded),
        jax.device_put(np.ones(n, bool), self._sharded),
        jax.device_put(np.full(n, lam, np.int32), self._sharded),
        np.arange(n, dtype=np.int32), np.int32(n), self._x, self._y)

  def __iter__(self) -> Iterator[List[CommitRecord]]:
    """Yields every remaining round's records until `done`."""
    while True:
      records = self.run_round()
      if not records:
        return
      yield records

  def center(self) -> np.ndarray:
    """The center as one flat float32 vector, in the process server's layout."""
    return self.layout.ravel_numpy(self._center)

  def center_tree(self):
    """The center as a pytree of numpy arrays."""
    return jax.tree.map(np.asarray, self._center)

  def evaluate(self, x, y, batch_size: int = 1000):
    """`(loss, accuracy)` of the center on `x`, `y` (`agn_jax.models.evaluate`)."""
    if self._apply_fn is None:
      raise ValueError("evaluate needs the model: build the Simulation from a "
                       "config, or pass apply_fn to from_parts")
    return models.evaluate(self._apply_fn, self._center, x, y, batch_size)

  def traffic(self, worker: int) -> Dict[str, int]:
    """What `worker` sent and received in this session, in payload bytes as sent.

    Each commit is one message of `commit_bytes` (compressed with
    `--commit_compression`) and one center of `center_bytes` (float32), as
    the time model charges them.
    """
    return {"bytes_committed": self._messages[worker] * self.commit_bytes,
            "bytes_pulled": self._messages[worker] * self.center_bytes}

  @property
  def simulated_time(self) -> float:
    """When the last commit so far happened, on the time model's clock (0 before the first)."""
    return self._simulated_time

  @property
  def expected_commits(self) -> Optional[int]:
    """The run's commits, or None where the clock decides them (a stream with Dynamic Local Updates)."""
    if self._stream is not None and self.dynamic_local_updates:
      return None
    return self.windows.total()

  @property
  def windows_run(self) -> int:
    """Windows computed so far, all workers together (committed or not)."""
    return sum(self._windows_run)

  def steps_done(self, worker: int) -> int:
    """Local steps of `worker`'s committed windows, a restored session's included."""
    if self._stream is not None:
      return self._schedule.steps_before(worker, self._windows_done[worker])
    return self.windows.steps_before(worker, self._windows_done[worker])

  @property
  def oldest_waiting_round(self) -> Optional[int]:
    """The round of the oldest window that ran and awaits its commit (None: none)."""
    rounds = [p[3] for p in self._pending if p is not None]
    return min(rounds) if rounds else None

  @property
  def clock(self) -> int:
    """Commits applied to the center so far (rejected ones excluded)."""
    return int(self._server.clock)

  def _arrays(self):
    return {"workers": self._workers, "center": self._center,
            "server_state": self._server}

  def state(self) -> Dict[str, Any]:
    """Everything needed to continue this simulation exactly, on the host.

    Returns:
      `{"arrays": {"workers", "center", "server_state"}, "meta": {...}}`.
      `arrays` is a pytree of numpy arrays: `workers` is the stacked worker
      state (`params`, `opt_state`, `pulled` or None, `clock`: each leaf with
      a leading axis of n; with `--commit_compression` also `residual`),
      `center` the center pytree, `server_state` the
      rule's `ServerState`. `meta` is JSON-able: `round`, `num_commits`
      (applied and rejected), `clock` (applied), `rejected_commits`,
      `windows_done` (committed), `windows_run` (computed),
      `rejected_in_a_row` and `pending` (per worker: a window that ran but
      is not committed yet, `[loss, accuracy, step accuracies, round,
      local steps]`, or None), `simulated_time` (of the last commit),
      `num_workers`, `schedule` (the clock's position,
      `EventSchedule.state`) and `time_model` (`TimeModel.describe`, or a
      replay's rounds). The
      samplers are not stored: like a restarted process worker, `restore`
      makes each anew from the seed (`shares.sampler`) and skips the samples of its
      `windows_run` windows; the speed draws are seeded per window.
    """
    meta = {
        "round": self._round,
        "num_commits": self._num_commits,
        "clock": self.clock,
        "rejected_commits": self._rejected,
        "windows_done": list(self._windows_done),
        "windows_run": list(self._windows_run),
        "pending": [None if p is None else [p[0], p[1], list(p[2]), p[3],
                                            p[4]]
                    for p in self._pending],
        "rejected_in_a_row": list(self._rejected_in_a_row),
        "simulated_time": self._simulated_time,
        "num_workers": self.num_workers,
        "schedule": self._schedule.state(),
        **self._describe_clock(),
    }
    return {"arrays": jax.tree.map(np.asarray, self._arrays()), "meta": meta}

  def restore(self, state: Dict[str, Any]) -> None:
    """Continues from `state()` of a simulation built the same way.

    Args:
      state: `{"arrays": ..., "meta": ...}` as `state()` returns it; `arrays`
        may also be the list of its leaves (`jax.tree.leaves` order), as a
        checkpoint stores them.

    Raises:
      ValueError: the state belongs to a different simulation.
    """
    meta = state["meta"]

    def clock(model):
      model = model if isinstance(model, dict) else {}
      return ", ".join(f"{key} {model.get(key)}" for key in (
          "cluster", "speed_model", "rounds") if key in model)

    theirs, mine = clock(meta.get("time_model")), clock(
        self._describe_clock()["time_model"])
    if meta.get("num_workers") != self.num_workers or theirs != mine:
      raise ValueError(
          f"the state is of {meta.get('num_workers')} workers on the clock "
          f"({theirs or 'none recorded'}); this simulation has "
          f"{self.num_workers} on ({mine})")
    leaves = jax.tree.leaves(state["arrays"])
    template = jax.tree.leaves(self._arrays())
    if len(leaves) != len(template) or any(
        np.shape(a) != t.shape for a, t in zip(leaves, template)):
      raise ValueError("the state's arrays do not match this simulation's "
                       "model, optimizer or number of workers")
    leaves = [np.asarray(a, t.dtype) for a, t in zip(leaves, template)]
    arrays = jax.tree.unflatten(self._treedef, leaves)
    self._workers = jax.device_put(arrays["workers"], self._sharded)
    self._center = jax.device_put(arrays["center"], self._replicated)
    self._server = jax.device_put(arrays["server_state"], self._replicated)
    self._round = int(meta["round"])
    self._num_commits = int(meta["num_commits"])
    self._rejected = int(meta["rejected_commits"])
    self._simulated_time = float(meta["simulated_time"])
    self._windows_done = [int(w) for w in meta["windows_done"]]
    self._windows_run = [int(w) for w in meta["windows_run"]]
    self._pending = [None if p is None else
                     (float(p[0]), float(p[1]), tuple(float(a) for a in p[2]),
                      int(p[3]), int(p[4]) if len(p) > 4 else
                      self.communication_window) for p in meta["pending"]]
    self._rejected_in_a_row = [int(w) for w in meta["rejected_in_a_row"]]
    self._schedule.restore(meta["schedule"])
    self._samplers = self._fresh_samplers()
