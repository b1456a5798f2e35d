"""The simulated backend's engine: n asynchronous workers in one deterministic program.

No processes, files or metrics here: the run bookkeeping drives a `Simulation`
round by round and writes what it returns.

**The clock.** When each commit happens comes from a time model, never from
the numbers (`agn_jax.sim.clock`): each worker computes a window, sends its
commit, waits for the one FIFO server and receives the center, and an
`agn_jax.sim.schedule.EventSchedule` gives the commits in the order the server
applies them, with their times (in seconds of the modeled cluster, or in
local steps for `--cluster=none`). The numerics follow that order.

**Rounds.** The n workers' states are stacked on a leading worker axis,
and one round is one jitted call (`agn_jax.sim.engine`): every worker whose
next window can run runs it, then the schedule's next commits reach the
server one by one through the strategy's half-steps, as in the processes
backend. A worker commits at most once per round, and its next window
starts from the state its commit left, so any sequence of commits cut into rounds this way is
simulated exactly: the result depends on the commit order only, never on k or
on the devices. A window that ran in one round may be committed in a later
one (a slow worker's, while a fast one commits twice): every window whose
center exists runs in the same mapped call.

The speed models are `agn_jax.sim.speeds`; a given commit order can be
replayed too (`commit_order`: a sequence of workers, or of rounds). A
synchronous strategy's rounds are `agn_jax.sim.synchronous`'s.

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

**Devices.** The worker axis is sharded over a `workers` mesh
(`agn_jax.sim.engine.default_mesh`), k workers vmapped at a time on each
device; `Simulation.info` records the choice.

Example:
  >>> import numpy as np
  >>> from agn_jax import TrainConfig
  >>> from agn_jax.data import load_synthetic
  >>> from agn_jax.sim.simulation import Simulation
  >>> config = TrainConfig(strategy="agn", num_workers=3, communication_window=2,
  ...                      hidden_sizes=(8,), batch_size=4, epochs=0.2)
  >>> sim = Simulation.from_config(config, load_synthetic(size=500, seed=0))
  >>> [r.staleness for r in sim.run_round() + sim.run_round()]
  [0, 1, 2, 2, 2, 2]
  >>> sim.center().dtype, sim.done
  (dtype('float32'), False)
"""

from typing import Any, Dict, Iterator, List, Optional, Sequence

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import numpy as np

from agn_jax import build, data, shares, strategies, tasks, wire
from agn_jax.config import SimulatedOptions
from agn_jax.shares import (Windows, local_updates,
                            shard_bounds, windows_per_worker)
from agn_jax.sim import clock as clock_lib
from agn_jax.sim import engine, synchronous
from agn_jax.sim.measuring import Measuring
from agn_jax.sim.progress import Progress
from agn_jax.sim.schedule import (EventSchedule, Handled, ReplaySchedule,
                                  ScheduledCommit)


class Simulation:
  """n asynchronous workers and their server, simulated round by round.

  Built from a `TrainConfig` with `from_config` (what the simulated backend
  does), or from any strategy and loss with the constructor.

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
    time_model: an `agn_jax.sim.clock.TimeModel` of n workers and this
      strategy's λ; None: the step counter (`none` cluster, constant
      speeds).
    commit_order: None, or a commit order to replay instead of the time
      model's: a sequence of worker indices, or of rounds (each a sequence
      of distinct workers, applied in one round).
    workers_per_call: k, the workers vmapped at a time on each device
      (`SimulatedOptions.workers_per_call`; None: 1 on CPU, all of a
      device's workers on GPU/TPU).
    mesh: a `Mesh` with one axis named `"workers"` whose size divides n
      (None: `engine.default_mesh(n)`).
    apply_fn: `apply_fn(center, x) -> outputs`, for `evaluate`; optional.
    task: the `agn_jax.tasks.Task` `evaluate` runs the evaluation of, whose
      efficiency metric's steps the records keep (None: classification).
    dynamic_local_updates: each worker's windows are λ_k steps, in
      proportion to its speed on the time model (see the module
      docstring).
    data_assignment: how the samples reach the workers
      (`agn_jax.shares.ASSIGNMENTS`).
    diagnostics: measure every applied commit with `agn_jax.instruments`
      inside the round (`agn_jax.instruments.Diagnostics`); each `Handled` then
      carries them (`instruments`). Off, the round is traced as without.
    diagnostics_subsample: with `diagnostics`, the share of the parameters
      they are computed on (`agn_jax.instruments.Subsample.from_seed(seed, p,
      fraction)`); None: `instruments.default_subsample(p)`; 1: every
      parameter.
    diagnostics_every: with `diagnostics`, the gradient cosine is taken at
      every k-th applied commit (the 1st, the (k+1)-th, ...), on the probe
      set: the first `instruments.PROBE_EXAMPLES` training examples.

  Raises:
    ValueError: one line, for a bad size, a time model of other workers or
      λ, a bad mesh or k, or a bad replayed order.

  Example:
    >>> import jax.numpy as jnp, optax
    >>> from agn_jax import get_strategy
    >>> loss = lambda p, b: (jnp.mean((b[0] @ p["w"] - b[1]) ** 2), {})
    >>> sim = Simulation(get_strategy("agn", communication_window=2,
    ...                               inner=optax.sgd(0.1)), loss,
    ...                  {"w": jnp.zeros(3)}, np.ones((8, 3), np.float32),
    ...                  np.ones(8, np.float32), num_workers=2, batch_size=2,
    ...                  epochs=1.0)
    >>> [(r.meta.worker, r.staleness) for r in sim.run_round()]
    [(0, 0), (1, 1)]
  """

  def __init__(self, strategy: strategies.Strategy, loss_fn, initial_center,
               x_train, y_train, *, num_workers: int, batch_size: int,
               epochs: float, seed: int = 0,
               time_model: Optional[clock_lib.TimeModel] = None,
               commit_order: Optional[Sequence] = None,
               workers_per_call: Optional[int] = None,
               mesh: Optional[Mesh] = None, apply_fn=None, task=None,
               dynamic_local_updates: bool = False,
               data_assignment: str = "shards", diagnostics: bool = False,
               diagnostics_subsample: Optional[float] = None,
               diagnostics_every: int = 10):
    n = num_workers
    # The constructor takes n, the batch size and k from its caller, not
    # from a validated config.
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
      raise ValueError(f"num_workers must be an integer >= 1, got {n!r}")
    if batch_size < 1:
      raise ValueError(f"batch_size must be >= 1, got {batch_size!r}")
    x_train, y_train = np.asarray(x_train), np.asarray(y_train)
    if len(x_train) != len(y_train):
      raise ValueError(f"x_train has {len(x_train)} examples, y_train "
                       f"{len(y_train)}")
    lam = strategy.communication_window
    if time_model is None:
      time_model = clock_lib.TimeModel(
          1.0, 0.0, 0.0, 0.0, num_workers=n, communication_window=lam,
          pull_before_commit=strategy.pull_before_commit, cluster="none",
          unit="steps")
    if (time_model.num_workers, time_model.communication_window,
        time_model.pull_before_commit) != (n, lam,
                                           strategy.pull_before_commit):
      raise ValueError(
          f"time_model is of {time_model.num_workers} workers, λ = "
          f"{time_model.communication_window}, pull_before_commit="
          f"{time_model.pull_before_commit}; the simulation has {n}"
          f", {lam}, {strategy.pull_before_commit}")
    if strategy.synchronous:
      synchronous.check_simulation(
          commit_order=commit_order, data_assignment=data_assignment,
          dynamic_local_updates=dynamic_local_updates, diagnostics=diagnostics)
    self.strategy = strategy
    self.num_workers = n
    self.communication_window = lam
    self.batch_size = batch_size
    self.seed = seed
    self.data_assignment = data_assignment
    self.time_model = time_model
    self._num_examples = len(x_train)
    self.num_windows = windows_per_worker(len(x_train), n, epochs, lam,
                                          batch_size)
    self._bounds = [shard_bounds(len(x_train), n, k) for k in range(n)]
    for start, stop in self._bounds:
      if stop <= start:
        raise ValueError("a worker's shard is empty; use fewer workers")
    # Dynamic Local Updates: λ_k from each worker's speed over the run; the
    # share stays `num_windows` windows of λ, in local steps.
    self.dynamic_local_updates = bool(dynamic_local_updates)
    self.local_updates = (
        local_updates(lam, time_model.mean_speeds())
        if self.dynamic_local_updates else (lam,) * n)
    self.windows = Windows(self.num_windows * lam, self.local_updates)
    self._stream = None
    tickets = None
    if data_assignment == shares.STREAM:
      if commit_order is not None:
        raise ValueError("data_assignment=stream hands each window the "
                         "stream's next steps by the clock; a replayed "
                         "commit_order fixes every worker's windows instead")
      # Every share together, handed out by the clock (`EventSchedule`).
      self._stream = shares.Stream(len(x_train), batch_size, seed)
      tickets = shares.Tickets(n * self.windows.share_steps)
    if strategy.synchronous:
      self._schedule = synchronous.RoundSchedule(time_model, self.windows)
    elif commit_order is not None:
      self._schedule = ReplaySchedule(commit_order, n, self.windows)
    else:
      self._schedule = EventSchedule(time_model, self.windows, tickets)
    self._apply_fn = apply_fn
    self.task = tasks.classification() if task is None else task
    # A task given is held to its metrics; a loss given alone reports any.
    self._check_metrics = task is not None
    self._diagnostics_settings = ((diagnostics_subsample, diagnostics_every)
                                  if diagnostics else None)
    self._set_devices(mesh, workers_per_call)
    self._set_state(loss_fn, initial_center, x_train, y_train)

    self._progress = Progress.start(n)
    self._samplers = self._fresh_samplers()
    self._messages = [0] * n  # This session's (not restored): `traffic`.

  @classmethod
  def from_config(cls, config, dataset, *,
                  cluster: Optional[clock_lib.Cluster] = None,
                  commit_order: Optional[Sequence] = None,
                  mesh: Optional[Mesh] = None) -> "Simulation":
    """The simulation of a `TrainConfig`, as the simulated backend runs it.

    Args:
      config: a `TrainConfig`; the strategy, model, initial center, worker
        optimizer, n, λ, batch size, epochs and seed are built from it with
        `agn_jax.build` exactly as the process workers build them. Its
        `SimulatedOptions` give the clock and k (`workers_per_call`); a
        config of another backend has none, and their defaults apply.
      dataset: an `agn_jax.data.Dataset` (its training split is sharded).
      cluster: the `agn_jax.sim.clock.Cluster` of the time model; None: the
        preset the options' `cluster` names (`this_host` has none: it is
        measured, `agn_jax.runtime.backends.calibration.this_host`). The
        speed model, the bandwidth, latency and apply overrides are the
        options', the seed the config's.
      commit_order, mesh: as for the constructor.

    Returns:
      The `Simulation`.

    Raises:
      ValueError: one line, for a setting the time model cannot take (see
        `agn_jax.sim.clock.time_model`) or a bad replayed order.

    Example:
      >>> from agn_jax.config import SimulatedOptions, TrainConfig
      >>> from agn_jax.data import load_synthetic
      >>> ds = load_synthetic(size=300, seed=0)
      >>> config = TrainConfig(strategy="aeasgd", num_workers=2,
      ...                      communication_window=2, hidden_sizes=(8,),
      ...                      batch_size=4, epochs=0.2, backend="simulated",
      ...                      options=SimulatedOptions(speed_model="speeds:2,1"))
      >>> sim = Simulation.from_config(config, ds)
      >>> [(r.meta.worker, r.simulated_time) for r in sim.run_round()]
      [(0, 1.0)]
      >>> loss, metrics = sim.evaluate(ds.x_test, ds.y_test)
    """
    options = config.options
    if not isinstance(options, SimulatedOptions):
      options = SimulatedOptions()
    strategy = build.build_strategy(config)
    model, loss_fn = build.build_model(config, dataset.num_classes,
                                       dataset.input_shape)
    center = build.initial_center(config, model,
                                  data.example_of(dataset.x_train))
    if cluster is None:
      cluster = clock_lib.preset(options.cluster)
    # The `none` cluster counts steps: what a worker computes costs nothing.
    work = (clock_lib.Workload(
        0, pull_before_commit=strategy.pull_before_commit)
            if cluster.unit == "steps" else engine.workload(
                strategy, loss_fn, center, dataset.x_train, dataset.y_train,
                config.batch_size))
    time_model = clock_lib.time_model(
        cluster, work, num_workers=config.num_workers,
        communication_window=config.communication_window,
        speed_model=options.speed_model, seed=config.seed,
        bandwidth_gbps=options.bandwidth_gbps, latency_ms=options.latency_ms,
        server_apply_ms=options.server_apply_ms)
    return cls(strategy, loss_fn, center, dataset.x_train, dataset.y_train,
               num_workers=config.num_workers, batch_size=config.batch_size,
               epochs=config.epochs, seed=config.seed, time_model=time_model,
               commit_order=commit_order,
               workers_per_call=options.workers_per_call, mesh=mesh,
               apply_fn=model.apply, task=build.build_task(config),
               dynamic_local_updates=config.dynamic_local_updates,
               data_assignment=config.data_assignment,
               diagnostics=config.diagnostics,
               diagnostics_subsample=config.diagnostics_subsample,
               diagnostics_every=config.diagnostics_every)

  def _set_devices(self, mesh: Optional[Mesh], workers_per_call) -> None:
    """The mesh, k and the two shardings (workers, replicated)."""
    n = self.num_workers
    if mesh is None:
      mesh = engine.default_mesh(n)
    if tuple(mesh.axis_names) != (engine.AXIS,) or n % mesh.size:
      raise ValueError(f"mesh must have the one axis {engine.AXIS!r} and a "
                       f"size that divides num_workers={n}, got axes "
                       f"{mesh.axis_names} of size {mesh.size}")
    self.mesh = mesh
    per_device = n // mesh.size
    platform = mesh.devices.flat[0].platform
    if workers_per_call is None:
      workers_per_call = engine.default_workers_per_call(platform, per_device)
    if (isinstance(workers_per_call, bool) or
        not isinstance(workers_per_call, int) or workers_per_call < 1):
      raise ValueError(f"workers_per_call must be an integer >= 1, got "
                       f"{workers_per_call!r}")
    self.workers_per_call = min(workers_per_call, per_device)
    self._sharded = NamedSharding(mesh, P(engine.AXIS))
    self._replicated = NamedSharding(mesh, P())

  def _set_state(self, loss_fn, initial_center, x_train, y_train) -> None:
    """The center, the server state, the stacked workers and the jitted round."""
    strategy, n = self.strategy, self.num_workers
    self.layout = wire.FlatLayout.from_tree(initial_center)
    center = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32),
                          initial_center)
    # The workers keep the center they pulled where their commit reads it.
    self._keeps_pulled = (not strategy.pull_before_commit and
                          strategy.commit_reads_center)
    self._x = jax.device_put(x_train, self._replicated)
    self._y = jax.device_put(y_train, self._replicated)
    self._center = jax.device_put(center, self._replicated)
    self._server = jax.device_put(strategy.rule.init(center),
                                  self._replicated)
    self._workers = engine.initial_workers(strategy, center, n,
                                           self._keeps_pulled, self._sharded)
    self._treedef = jax.tree.structure(self._arrays())
    self._measuring = None
    if self._diagnostics_settings is not None:
      self._measuring = Measuring(
          *self._diagnostics_settings, seed=self.seed,
          num_params=self.layout.num_params, x_train=x_train,
          y_train=y_train, center=self._center, num_workers=n,
          replicated=self._replicated)
    build_round = (synchronous.build_round if strategy.synchronous else
                   engine.build_round)
    self._round_fn = build_round(
        strategy, loss_fn, mesh=self.mesh, num_workers=n,
        workers_per_call=self.workers_per_call,
        keeps_pulled=self._keeps_pulled,
        dynamic_local_updates=self.dynamic_local_updates,
        diagnostics=self.diagnostics,
        step_metric=self.task.efficiency_metric)
    self._restart_fn = engine.build_restart(strategy, self._sharded)
    # Each commit is one message of `commit_bytes`, and the center its worker
    # receives with the reply (or pulls first, `pull_before_commit`) one of
    # `center_bytes`.
    self.commit_bytes = wire.commit_bytes(strategy, center)
    self.center_bytes = 4 * self.layout.num_params

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
      steps = self.windows.steps_before(k, self._progress.windows_run[k])
      sampler.skip(steps * self.batch_size)
      samplers.append(sampler)
    return samplers

  @property
  def done(self) -> bool:
    """Whether no commit is left (every share is done, or a replay is used up)."""
    return self._schedule.peek() is None

  def _describe_clock(self) -> Dict[str, Any]:
    if isinstance(self._schedule, ReplaySchedule):
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
        **({"diagnostics": self.diagnostics_info}
           if self.diagnostics is not None else {}),
        **self._describe_clock(),
    }

  @property
  def diagnostics(self):
    """What the round's instruments measure (`agn_jax.instruments.Diagnostics`), or None without `diagnostics`."""
    return None if self._measuring is None else self._measuring.diagnostics

  @property
  def diagnostics_info(self) -> Optional[Dict[str, Any]]:
    """How the instruments measure (`Measuring.info`); None without `diagnostics`."""
    return None if self._measuring is None else self._measuring.info()

  def _plan(self, max_commits: Optional[int]) -> List[ScheduledCommit]:
    """The round's commits: the schedule's next ones, up to a worker's second (or `max_commits`)."""
    plan, seen = [], set()
    while max_commits is None or len(plan) < max_commits:
      commit = self._schedule.peek()
      if (commit is None or commit.worker in seen or
          (commit.barrier and plan)):
        return plan
      plan.append(self._schedule.pop())
      seen.add(commit.worker)
    return plan

  def run_round(self, max_commits: Optional[int] = None) -> List[Handled]:
    """Runs one round; returns its commits in the order the server applied them.

    Args:
      max_commits: end the round after this many commits at most (e.g. to
        evaluate the center after a given commit). Where rounds end changes
        nothing in the result, only how the commits are grouped into calls.
        A synchronous strategy's round is whole whatever it says.

    Returns:
      The round's `Handled`s; `[]` once `done`.

    Raises:
      Diverged: a worker's commits were rejected `MAX_REJECTED_IN_A_ROW`
        times in a row (each time from a fresh start at the center).
      ValueError: `max_commits` < 1.
    """
    if max_commits is not None and max_commits < 1:
      raise ValueError(f"max_commits must be positive, got {max_commits}")
    n, lam, batch = self.num_workers, self.communication_window, self.batch_size
    progress = self._progress
    # Every worker that holds its center runs its window now, whenever its
    # commit comes.
    due = np.array([progress.pending[k] is None and
                    progress.windows_run[k] < self._window_count(k)
                    for k in range(n)])
    # A synchronous round is never cut: its commits are applied together.
    plan = self._plan(None if self.strategy.synchronous else max_commits)
    if not plan:
      return []
    # A window of fewer than λ steps (Dynamic Local Updates) takes only its
    # own steps' samples; the rest of its rows are never read.
    indices = np.zeros((n, lam, batch), np.int32)
    lengths = np.zeros(n, np.int32)
    order = np.zeros(n, np.int32)
    for k in np.flatnonzero(due):
      samples = self._window_samples(k, progress.windows_run[k])
      length = len(samples) // batch
      lengths[k] = length
      indices[k, :length] = samples.reshape(length, batch)
    for i, c in enumerate(plan):
      order[i] = c.worker
    args = (self._workers, self._center, self._server,
            jax.device_put(indices, self._sharded),
            jax.device_put(due, self._sharded),
            jax.device_put(lengths, self._sharded), order,
            np.int32(len(plan)), self._x, self._y)
    measuring = self._measuring
    if measuring is None:
      self._workers, self._center, self._server, out = self._round_fn(*args)
    else:
      (self._workers, self._center, self._server, out,
       measuring.carry) = self._round_fn(*args, measuring.carry,
                                         *measuring.probe)
    out = jax.tree.map(np.asarray, out)
    if self._check_metrics:
      self.task.check_reported(out.metrics, "loss")
      self._check_metrics = False
    rejected = out.rejected
    progress.windows_ran(due, lengths, out)
    if rejected[:len(plan)].any():
      mask = np.zeros(n, bool)
      mask[order[:len(plan)][rejected[:len(plan)]]] = True
      self._workers = self._restart_fn(self._workers,
                                       jax.device_put(mask, self._sharded))
    records = progress.commits_handled(plan, out, measuring)
    for r in records:
      self._messages[r.meta.worker] += 1
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
    extra = (() if self._measuring is None else
             (self._measuring.carry,) + self._measuring.probe)
    return self._round_fn.lower(
        self._workers, self._center, self._server,
        jax.device_put(indices, self._sharded),
        jax.device_put(np.ones(n, bool), self._sharded),
        jax.device_put(np.full(n, lam, np.int32), self._sharded),
        np.arange(n, dtype=np.int32), np.int32(n), self._x, self._y, *extra)

  def __iter__(self) -> Iterator[List[Handled]]:
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
    """`(loss, {metric: value})` of the center on `x`, `y` (the task's evaluation, `agn_jax.tasks.Task.evaluation`)."""
    if self._apply_fn is None:
      raise ValueError("evaluate needs the model: build the Simulation from a "
                       "config, or pass apply_fn to from_parts")
    return self.task.evaluation(self._apply_fn, self._center, x, y,
                                batch_size)

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
    return self._progress.simulated_time

  @property
  def expected_commits(self) -> Optional[int]:
    """The run's commits, or None where the clock decides them (a stream with Dynamic Local Updates)."""
    if self._stream is not None and self.dynamic_local_updates:
      return None
    return self.windows.total()

  @property
  def windows_run(self) -> int:
    """Windows computed so far, all workers together (committed or not)."""
    return sum(self._progress.windows_run)

  def steps_done(self, worker: int) -> int:
    """Local steps of `worker`'s committed windows, a restored session's included."""
    if self._stream is not None:
      return self._schedule.steps_before(
          worker, self._progress.windows_done[worker])
    return self.windows.steps_before(worker,
                                     self._progress.windows_done[worker])

  @property
  def num_commits(self) -> int:
    """Commits handled so far, applied and rejected (a restored session's included)."""
    return self._progress.num_commits

  @property
  def oldest_waiting_round(self) -> Optional[int]:
    """The round of the oldest window that ran and awaits its commit (None: none)."""
    rounds = [p.round for p in self._progress.pending if p is not None]
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
      is not committed yet, `[loss, metrics, step metrics, round,
      local steps]`, or None), `simulated_time` (of the last commit),
      `num_workers`, `schedule` (the clock's position,
      `EventSchedule.state`) and `time_model` (`TimeModel.describe`, or a
      replay's rounds). The
      samplers are not stored: like a restarted process worker, `restore`
      makes each anew from the seed (`shares.sampler`) and skips the samples of its
      `windows_run` windows; the speed draws are seeded per window.
    """
    meta = {
        **self._progress.to_meta(),
        "clock": self.clock,
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
    self._progress = Progress.from_meta(meta, self.communication_window)
    self._schedule.restore(meta["schedule"])
    self._samplers = self._fresh_samplers()
    if self._measuring is not None:
      # The instruments are not checkpointed: they start afresh at the
      # restored center (μ̂'s sums, the previous commit; each worker's
      # pulled center is taken to be this one).
      self._measuring.reset(self._center)
