"""The simulated backend's engine: n asynchronous workers in one deterministic program.

No processes, files or metrics here: the run bookkeeping drives a `Simulation`
round by round and writes what it returns.

**Rounds.** The n workers' parameters and optimizer states are stacked on a
leading worker axis. One round is one jitted call:

1. every worker due this round runs one communication window with the same
   window kernel the process workers run (`agn_jax.kernel.window_kernel`),
   mapped over the workers as `jax.lax.map(window, workers, batch_size=k)`
   does it, k workers vmapped at a time, but updating the stacked state in
   place (`map_in_place`: `lax.map` would hold a second copy of every
   worker's state); workers not due are masked (skipped when k = 1, computed
   and discarded when vmapped);
2. the due workers' commits reach the server one by one, in the round's
   order, through the strategy's own server rule (`strategy.rule.apply`),
   exactly as the process server applies them: a payload with a non-finite
   number is rejected (the center and clock stay, the worker starts afresh
   from the center, as a process worker does), staleness is the server clock
   at the apply minus the clock of the center the worker last pulled. Each
   worker follows its strategy's protocol: commit-then-pull strategies (agn,
   downpour, dynsgd, adag) commit the window's delta, pull the center just
   after their own commit and run `strategy.pull_fn` on it; pull-then-commit
   strategies (aeasgd, eamsgd) pull the center just before their commit,
   commit against it and keep their own parameters (so their staleness is 0).
   The loop writes back only the leaves a commit and pull change (AGN's delta
   and Adam's moments stay where they are; a rejected worker's are reset
   after the round): written back, XLA copied those leaves of all n workers
   on every commit, 11 % of the run at n = 40.

A worker commits at most once per round, and its next window starts from the
state its commit left, so any sequence of commits cut into rounds this way is
simulated exactly: the result depends on the commit order only, never on k or
on the devices.

**Commit orders and simulated time.** Simulated time is counted in local
steps of a speed-1 worker: a window of a worker with speed `s` lasts `λ / s`;
commits, pulls and the server take no simulated time.

* `"round_robin"`: homogeneous workers (speed 1) whose windows are evenly
  staggered; every round is `0, 1, …, n−1`, so after the first round every
  commit has staleness exactly n − 1. The j-th commit of the run (j from 0)
  happens at `λ (j + 1) / n`.
* `"random"`: like round_robin, but each round's order is a permutation
  seeded by `(seed, round)`; the j-th commit at `λ (j + 1) / n`.
* `"speeds"`: worker k has speed `s_k` (`worker_speeds`: a list of n positive
  factors, or a float σ for a log-normal spread `s_k = exp(σ z_k)`, z seeded by
  `seed`; default σ = 0.5). Worker k's i-th commit (i from 1) happens at
  `i λ / s_k`. An event queue of these completion times (ties by worker index)
  decides who commits when; a round takes events in time order until a worker
  would commit a second time, so a round holds between 1 and n commits, and
  the others are masked.
* a sequence of worker indices (replay a given commit order, cut into rounds
  as above), or a sequence of rounds (each a sequence of distinct worker
  indices); the j-th commit at `λ (j + 1) / n`.

**Devices.** The worker axis is sharded over a `jax.sharding.Mesh` with one
`workers` axis (`NamedSharding(mesh, P("workers"))`): each device runs the
windows of its own workers; the center and the server state are replicated,
and every device applies the same commits to its copy, fetching the
committing worker's state from its owner (an `all_gather` of one worker's
state per commit). By default the mesh holds the largest number of local
devices that divides n (n = 10 on 4 devices uses 2), so no worker is padded.
k (`workers_per_call`) is per device: by default 1 on CPU, where workers one
after another keep one model in cache (a `vmap` of 40 paper-MLP Adam steps
ran at 0.67x one model's speed on a 2-core CPU; here n = 8 paper MLPs at
λ = 10 ran at 1834 samples/s with k = 1 against 1707 with k = 8, on a busy
machine), and all of a device's workers on GPU or TPU. `Simulation.info`
records the choice.

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

import heapq
import math
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Sequence, Union

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import numpy as np

from agn_jax import build, kernel as kernel_lib, models, strategies
from agn_jax.runtime import _child
from agn_jax.runtime.flat import FlatLayout
# Sampling, shares and the rejection limit exactly as the process workers.
from agn_jax.runtime.worker import (BatchSampler, MAX_REJECTED_IN_A_ROW,
                                    shard_bounds, windows_per_worker)

COMMIT_ORDERS = ("round_robin", "random", "speeds")
AXIS = "workers"
DEFAULT_SPEED_SIGMA = 0.5
_ORDER_SALT = 0x0D3E5  # Keeps the order's seed apart from the samplers' [seed, k].


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
    simulated_time: when the commit happened, in local steps of a speed-1
      worker (see the module docstring).
    round: the round it belongs to (from 0).
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


class Diverged(_child.Diverged):
  """A worker's commits were rejected `MAX_REJECTED_IN_A_ROW` times in a row.

  The process worker's failure of the same name, with the round's records.

  Attributes:
    records: the commits of the round that ended in the failure.
  """

  def __init__(self, message: str, records: List[CommitRecord]):
    super().__init__(message)
    self.records = records


class _Workers(NamedTuple):
  """The stacked worker state (leading axis: worker).

  Attributes:
    params: local parameters.
    opt_state: local optimizer state.
    pulled: the center each worker last pulled, kept only for a commit-then-
      pull strategy whose `commit_fn` reads it (adag); else None.
    clock: the server clock of that pull (int32).
  """
  params: Any
  opt_state: Any
  pulled: Any
  clock: jax.Array


# --- Which worker commits when ----------------------------------------------


class _Schedule:
  """Decides each round's commits: `(worker, simulated_time)` in order."""

  def __init__(self, name, num_workers, window, num_windows, seed):
    self.name = name
    self.n = num_workers
    self.window = window
    self.num_windows = num_windows
    self.seed = seed

  def _homogeneous_time(self, commit_index):
    return self.window * (commit_index + 1) / self.n

  def next_round(self, round_index, windows_done, num_commits):
    remaining = [k for k in range(self.n) if windows_done[k] < self.num_windows]
    if self.name == "random":
      rng = np.random.default_rng([self.seed, _ORDER_SALT, round_index])
      remaining = [remaining[i] for i in rng.permutation(len(remaining))]
    return [(k, self._homogeneous_time(num_commits + i))
            for i, k in enumerate(remaining)]

  def describe(self):
    return {"commit_order": self.name}


class _SpeedSchedule(_Schedule):
  """Worker k's i-th window ends at `i λ / s_k`; rounds follow the event queue."""

  def __init__(self, num_workers, window, num_windows, seed, speeds):
    super().__init__("speeds", num_workers, window, num_windows, seed)
    self.speeds = speeds

  def _end(self, worker, windows):
    return windows * self.window / self.speeds[worker]

  def next_round(self, round_index, windows_done, num_commits):
    del round_index, num_commits
    queue = [(self._end(k, windows_done[k] + 1), k) for k in range(self.n)
             if windows_done[k] < self.num_windows]
    heapq.heapify(queue)
    plan, seen = [], set()
    while queue:
      time, k = heapq.heappop(queue)
      if k in seen:
        break
      plan.append((k, time))
      seen.add(k)
      done = windows_done[k] + 1
      if done < self.num_windows:
        heapq.heappush(queue, (self._end(k, done + 1), k))
    return plan

  def describe(self):
    return {"commit_order": "speeds", "worker_speeds": list(self.speeds)}


class _ReplaySchedule(_Schedule):
  """A given commit order: rounds as given, or a flat order cut greedily."""

  def __init__(self, num_workers, window, num_windows, seed, rounds):
    super().__init__("replay", num_workers, window, num_windows, seed)
    self.rounds = rounds

  def next_round(self, round_index, windows_done, num_commits):
    if round_index >= len(self.rounds):
      return []
    return [(k, self._homogeneous_time(num_commits + i))
            for i, k in enumerate(self.rounds[round_index])]

  def describe(self):
    return {"commit_order": "replay", "rounds": [list(r) for r in self.rounds]}


def _replay_rounds(order, num_workers, num_windows):
  """Validates a replayed order; returns its rounds (lists of distinct workers)."""
  order = list(order)
  nested = bool(order) and not isinstance(order[0], (int, np.integer))
  rounds = []
  if nested:
    rounds = [[int(k) for k in r] for r in order]
  else:
    for k in (int(k) for k in order):
      if not rounds or k in rounds[-1]:
        rounds.append([])
      rounds[-1].append(k)
  counts = [0] * num_workers
  for r in rounds:
    if not r or len(set(r)) != len(r):
      raise ValueError(f"commit_order: every round needs distinct workers, "
                       f"got {r}")
    for k in r:
      if not 0 <= k < num_workers:
        raise ValueError(f"commit_order: worker {k} is not in [0, "
                         f"{num_workers})")
      counts[k] += 1
  over = [k for k in range(num_workers) if counts[k] > num_windows]
  if over:
    raise ValueError(f"commit_order: worker {over[0]} commits {counts[over[0]]}"
                     f" times, but its share holds {num_windows} windows")
  return rounds


def _make_schedule(commit_order, worker_speeds, n, window, num_windows, seed):
  if isinstance(commit_order, str):
    if commit_order not in COMMIT_ORDERS:
      raise ValueError(f"commit_order must be one of {', '.join(COMMIT_ORDERS)}"
                       f" or a sequence of workers, got {commit_order!r}")
    if commit_order != "speeds":
      if worker_speeds is not None:
        raise ValueError("worker_speeds needs commit_order='speeds', got "
                         f"commit_order={commit_order!r}")
      return _Schedule(commit_order, n, window, num_windows, seed)
    return _SpeedSchedule(n, window, num_windows, seed,
                          _speeds(worker_speeds, n, seed))
  if worker_speeds is not None:
    raise ValueError("worker_speeds needs commit_order='speeds'")
  return _ReplaySchedule(n, window, num_windows, seed,
                         _replay_rounds(commit_order, n, num_windows))


def _speeds(worker_speeds, n, seed):
  if worker_speeds is None or isinstance(worker_speeds, (int, float)):
    sigma = DEFAULT_SPEED_SIGMA if worker_speeds is None else float(
        worker_speeds)
    if not sigma >= 0:
      raise ValueError(f"worker_speeds as a log-normal σ must be >= 0, got "
                       f"{worker_speeds!r}")
    z = np.random.default_rng([seed, _ORDER_SALT, 2**31]).standard_normal(n)
    return [float(s) for s in np.exp(sigma * z)]
  speeds = [float(s) for s in worker_speeds]
  if len(speeds) != n or not all(s > 0 and math.isfinite(s) for s in speeds):
    raise ValueError(f"worker_speeds must be {n} positive numbers (one per "
                     f"worker) or a σ, got {worker_speeds!r}")
  return speeds


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


def _reads_center(commit_fn, params, opt_state, center) -> bool:
  """Whether `commit_fn(params, opt_state, center)` reads its `center` at all."""
  closed = jax.make_jaxpr(commit_fn)(params, opt_state, center)
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
      `agn_jax.build` exactly as the process workers build them.
    dataset: an `agn_jax.data.Dataset` (its training split is sharded).
    commit_order: `"round_robin"`, `"random"`, `"speeds"`, or a sequence of
      worker indices / of rounds to replay (see the module docstring).
    worker_speeds: with `"speeds"`: n speed factors, or a float σ of a seeded
      log-normal spread (None: σ = 0.5).
    workers_per_call: k, workers vmapped at a time on each device (None: 1 on
      CPU, all of a device's workers on GPU/TPU).
    mesh: a `Mesh` with one axis named `"workers"` whose size divides n
      (None: `default_mesh(n)`).

  Example:
    >>> from agn_jax import TrainConfig
    >>> from agn_jax.data import load_synthetic
    >>> ds = load_synthetic(size=300, seed=0)
    >>> config = TrainConfig(strategy="aeasgd", num_workers=2,
    ...                      communication_window=2, hidden_sizes=(8,),
    ...                      batch_size=4, epochs=0.2)
    >>> sim = Simulation(config, ds, commit_order="speeds",
    ...                  worker_speeds=[2.0, 1.0])
    >>> [(r.worker, r.simulated_time) for r in sim.run_round()]
    [(0, 1.0)]
    >>> loss, accuracy = sim.evaluate(ds.x_test, ds.y_test)
  """

  def __init__(self, config, dataset, *,
               commit_order: Union[str, Sequence] = "round_robin",
               worker_speeds: Union[None, float, Sequence[float]] = None,
               workers_per_call: Optional[int] = None,
               mesh: Optional[Mesh] = None):
    strategy = build.build_strategy(config)
    model, loss_fn = build.build_model(config, dataset.num_classes,
                                       dataset.input_shape)
    center = build.initial_center(config, model,
                                  int(np.prod(dataset.input_shape)))
    self._setup(strategy, loss_fn, center, dataset.x_train, dataset.y_train,
                num_workers=config.num_workers, batch_size=config.batch_size,
                epochs=config.epochs, seed=config.seed,
                commit_order=commit_order, worker_speeds=worker_speeds,
                workers_per_call=workers_per_call, mesh=mesh,
                apply_fn=model.apply)

  @classmethod
  def from_parts(cls, strategy: strategies.Strategy, loss_fn, initial_center,
                 x_train, y_train, *, num_workers: int, batch_size: int,
                 epochs: float, seed: int = 0,
                 commit_order: Union[str, Sequence] = "round_robin",
                 worker_speeds=None, workers_per_call=None, mesh=None,
                 apply_fn=None) -> "Simulation":
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
      seed: seeds the samplers (`[seed, k]`) and the orders.
      commit_order, worker_speeds, workers_per_call, mesh: as for the
        constructor.
      apply_fn: `apply_fn(center, x) -> logits`, for `evaluate`; optional.

    Returns:
      The `Simulation`.
    """
    sim = cls.__new__(cls)
    sim._setup(strategy, loss_fn, initial_center, x_train, y_train,
               num_workers=num_workers, batch_size=batch_size, epochs=epochs,
               seed=seed, commit_order=commit_order,
               worker_speeds=worker_speeds,
               workers_per_call=workers_per_call, mesh=mesh,
               apply_fn=apply_fn)
    return sim

  def _setup(self, strategy, loss_fn, initial_center, x_train, y_train, *,
             num_workers, batch_size, epochs, seed, commit_order,
             worker_speeds, workers_per_call, mesh, apply_fn):
    n = num_workers
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
    self.num_windows = windows_per_worker(len(x_train), n, epochs, lam,
                                          batch_size)
    self._bounds = [shard_bounds(len(x_train), n, k) for k in range(n)]
    for start, stop in self._bounds:
      if stop <= start:
        raise ValueError("a worker's shard is empty; use fewer workers")
    self._schedule = _make_schedule(commit_order, worker_speeds, n, lam,
                                    self.num_windows, seed)
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
    params0, opt0 = strategy.init_worker(center)
    self._keeps_pulled = (
        strategy.protocol == strategies.COMMIT_THEN_PULL and
        _reads_center(strategy.commit_fn, params0, opt0, center))
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
    self._windows_done = [0] * n
    self._rejected_in_a_row = [0] * n
    self._samplers = self._fresh_samplers()

  def _initial_workers(self, center):
    n, strategy = self.num_workers, self.strategy

    def stack(center):
      params, opt_state = strategy.init_worker(center)
      one = _Workers(params, opt_state,
                     center if self._keeps_pulled else None,
                     jnp.zeros([], jnp.int32))
      return jax.tree.map(
          lambda x: jnp.broadcast_to(x, (n,) + jnp.shape(x)), one)

    return jax.jit(stack, out_shardings=self._sharded)(center)

  def _fresh_samplers(self):
    samplers = []
    for k, (start, stop) in enumerate(self._bounds):
      sampler = BatchSampler(stop - start,
                             np.random.default_rng([self.seed, k]))
      # Where a restarted process worker resumes: its share so far, skipped.
      sampler.skip(self._windows_done[k] * self.communication_window *
                   self.batch_size)
      samplers.append(sampler)
    return samplers

  def _build_restart(self):
    """`restart(workers, mask)`: the masked workers start afresh at their parameters.

    After a round whose commit was rejected: the commit loop already set such
    a worker's parameters (and every leaf it rewrites) to the center and its
    fresh values; this resets the leaves it left untouched, so the worker is
    `strategy.init_worker(center)` exactly, as a restarted process worker is.
    """
    init = jax.vmap(self.strategy.init_worker)

    def restart(workers, mask):
      fresh = init(workers.params)

      def pick(new, old):
        where = mask.reshape(mask.shape + (1,) * (old.ndim - 1))
        return jnp.where(where, new, old)

      params, opt_state = jax.tree.map(pick, fresh,
                                       (workers.params, workers.opt_state))
      return workers._replace(params=params, opt_state=opt_state)

    return jax.jit(restart, donate_argnums=0, out_shardings=self._sharded)

  def _build_round(self, loss_fn):
    strategy = self.strategy
    kernel = kernel_lib.window_kernel(loss_fn, strategy.worker_transform,
                                      donate=False)
    k = self.workers_per_call
    sharded = self.mesh.size > 1
    per_device = self.num_workers // self.mesh.size
    commit_then_pull = strategy.protocol == strategies.COMMIT_THEN_PULL
    keeps_pulled = self._keeps_pulled

    def windows(workers, indices, due, x, y):
      """Every due worker's window; the others pass through unchanged."""

      def one(w, args):
        idx, is_due = args

        def run(w):
          result = kernel(w.params, w.opt_state, (x[idx], y[idx]))
          metrics = result.metrics
          loss = jnp.mean(metrics["loss"]).astype(jnp.float32)
          accuracy = (jnp.mean(metrics["accuracy"]).astype(jnp.float32)
                      if "accuracy" in metrics else jnp.float32(jnp.nan))
          return (w._replace(params=result.params,
                             opt_state=result.opt_state), (loss, accuracy))

        def skip(w):
          return w, (jnp.float32(jnp.nan), jnp.float32(jnp.nan))

        return jax.lax.cond(is_due, run, skip, w)

      workers, (loss, accuracy) = map_in_place(one, workers, (indices, due),
                                               batch_size=k)
      return workers, loss, accuracy

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
      iteration, and copied the whole stacked leaf (n models) on every
      commit when it was.
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

    def select(pred, on_true, on_false):
      return jax.tree.map(lambda a, b: jnp.where(pred, a, b), on_true,
                          on_false)

    def commit_one(i, carry):
      """The server applies the i-th commit of the round; its worker pulls."""
      workers, center, server, rec = carry
      worker = rec["order"][i]
      w = take(workers, worker)
      if commit_then_pull:
        pulled = w.pulled if keeps_pulled else center
        commit, params, opt_state = strategy.commit_fn(w.params, w.opt_state,
                                                       pulled)
        staleness = server.clock - w.clock
      else:  # Pull now, commit against it: nothing lands in between.
        commit, params, opt_state = strategy.commit_fn(w.params, w.opt_state,
                                                       center)
        staleness = jnp.zeros_like(server.clock)
      payload = {key: commit[key] for key in strategy.payload}
      finite = jnp.all(jnp.stack(
          [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(payload)]))
      applied = strategy.rule.apply(center, payload, server, staleness)
      center, server = select(finite, applied, (center, server))
      if commit_then_pull:
        params, opt_state = strategy.pull_fn(params, opt_state, center)
      # A rejected worker starts afresh from the center, like a process
      # worker: its optimizer state may be what diverged. Here the leaves
      # the commit and pull rewrite anyway (the parameters always) take
      # their fresh values; `_restart` resets the rest after the round.
      fresh_params, fresh_opt_state = strategy.init_worker(center)
      params = jax.tree.map(lambda new, init: jnp.where(finite, new, init),
                            params, fresh_params)
      opt_state = jax.tree.map(
          lambda new, old, init: new if new is old else jnp.where(
              finite, new, init), opt_state, w.opt_state, fresh_opt_state)
      w_new = _Workers(params, opt_state, center if keeps_pulled else None,
                       server.clock)
      workers = put(workers, worker, w_new, w)
      rec = dict(rec,
                 clock=rec["clock"].at[i].set(server.clock),
                 staleness=rec["staleness"].at[i].set(staleness),
                 rejected=rec["rejected"].at[i].set(~finite))
      return workers, center, server, rec

    def round_fn(workers, center, server, indices, due, order, num_commits,
                 x, y):
      workers, loss, accuracy = windows(workers, indices, due, x, y)
      if sharded:
        loss = jax.lax.all_gather(loss, AXIS, tiled=True)
        accuracy = jax.lax.all_gather(accuracy, AXIS, tiled=True)
      slots = order.shape[0]
      rec = {"order": order,
             "clock": jnp.zeros(slots, jnp.int32),
             "staleness": jnp.zeros(slots, jnp.int32),
             "rejected": jnp.zeros(slots, bool)}
      workers, center, server, rec = jax.lax.fori_loop(
          0, num_commits, commit_one, (workers, center, server, rec))
      records = (rec["clock"], rec["staleness"], loss[order], accuracy[order],
                 rec["rejected"])
      return workers, center, server, records

    if sharded:
      round_fn = jax.shard_map(
          round_fn, mesh=self.mesh,
          in_specs=(P(AXIS), P(), P(), P(AXIS), P(AXIS), P(), P(), P(), P()),
          out_specs=(P(AXIS), P(), P(), P()),
          # Every device applies the same commits to its copy of the center
          # (from all-gathered worker states), so it is replicated by
          # construction; the check would also reject the masked branch.
          check_vma=False)
    return jax.jit(round_fn, donate_argnums=(0, 1, 2))

  # --- Public API -------------------------------------------------------------

  @property
  def done(self) -> bool:
    """Whether no worker has a window left (or a replayed order is used up)."""
    return not self._schedule.next_round(self._round, self._windows_done,
                                         self._num_commits)

  @property
  def info(self) -> Dict[str, Any]:
    """How the simulation runs: platform, devices, k, commit order."""
    return {
        "platform": self.mesh.devices.flat[0].platform,
        "num_devices": int(self.mesh.size),
        "workers_per_device": self.num_workers // self.mesh.size,
        "workers_per_call": self.workers_per_call,
        "windows_per_worker": self.num_windows,
        "keeps_pulled_center": self._keeps_pulled,
        **self._schedule.describe(),
    }

  def run_round(self) -> List[CommitRecord]:
    """Runs one round; returns its commits in the order the server applied them.

    Returns:
      The round's `CommitRecord`s; `[]` once `done`.

    Raises:
      Diverged: a worker's commits were rejected `MAX_REJECTED_IN_A_ROW`
        times in a row (each time from a fresh start at the center).
    """
    plan = self._schedule.next_round(self._round, self._windows_done,
                                     self._num_commits)
    if not plan:
      return []
    n, lam, batch = self.num_workers, self.communication_window, self.batch_size
    indices = np.zeros((n, lam, batch), np.int32)
    due = np.zeros(n, bool)
    order = np.zeros(n, np.int32)
    for i, (k, _) in enumerate(plan):
      order[i], due[k] = k, True
      indices[k] = (self._samplers[k].take(lam * batch).reshape(lam, batch) +
                    self._bounds[k][0])
    self._workers, self._center, self._server, out = self._round_fn(
        self._workers, self._center, self._server,
        jax.device_put(indices, self._sharded),
        jax.device_put(due, self._sharded), order, np.int32(len(plan)),
        self._x, self._y)
    clock, staleness, loss, accuracy, rejected = (np.asarray(a) for a in out)
    if rejected[:len(plan)].any():
      mask = np.zeros(n, bool)
      mask[order[:len(plan)][rejected[:len(plan)]]] = True
      self._workers = self._restart_fn(self._workers,
                                       jax.device_put(mask, self._sharded))
    records = []
    for i, (k, time) in enumerate(plan):
      records.append(CommitRecord(
          worker=k, window=self._windows_done[k], clock=int(clock[i]),
          staleness=int(staleness[i]), loss=float(loss[i]),
          accuracy=float(accuracy[i]), rejected=bool(rejected[i]),
          simulated_time=float(time), round=self._round))
      self._windows_done[k] += 1
      self._rejected += int(rejected[i])
      self._rejected_in_a_row[k] = (self._rejected_in_a_row[k] + 1
                                    if rejected[i] else 0)
    self._round += 1
    self._num_commits += len(plan)
    self._simulated_time = max(self._simulated_time, records[-1].simulated_time)
    failed = [k for k in range(n)
              if self._rejected_in_a_row[k] >= MAX_REJECTED_IN_A_ROW]
    if failed:
      raise Diverged(
          f"worker {failed[0]}: {self._rejected_in_a_row[failed[0]]} commits "
          f"in a row were non-finite and rejected, each from a fresh start at "
          f"the center (lower the learning rate?)", records)
    return records

  def lower_round(self):
    """The round's jitted program, lowered for this simulation's shapes.

    For inspection, e.g. of the compiled HLO
    (`sim.lower_round().compile().as_text()`) or its cost analysis; nothing
    runs and the state is not touched.

    Returns:
      A `jax.stages.Lowered` of one round in which all n workers are due.
    """
    n = self.num_workers
    indices = np.zeros((n, self.communication_window, self.batch_size),
                       np.int32)
    return self._round_fn.lower(
        self._workers, self._center, self._server,
        jax.device_put(indices, self._sharded),
        jax.device_put(np.ones(n, bool), self._sharded),
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

  @property
  def simulated_time(self) -> float:
    """When the last commit so far happened, in simulated time (0 before the first)."""
    return self._simulated_time

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
      a leading axis of n), `center` the center pytree, `server_state` the
      rule's `ServerState`. `meta` is JSON-able: `round`, `num_commits`
      (applied and rejected), `clock` (applied), `rejected_commits`,
      `windows_done` and `rejected_in_a_row` (per worker),
      `simulated_time` (of the last commit), `num_workers`, and the
      commit order (`commit_order`, plus `worker_speeds` or `rounds`). The
      samplers are not stored: like a restarted process worker, `restore`
      re-seeds each with `[seed, k]` and skips the samples of its
      `windows_done` windows; the random order is seeded per round.
    """
    meta = {
        "round": self._round,
        "num_commits": self._num_commits,
        "clock": self.clock,
        "rejected_commits": self._rejected,
        "windows_done": list(self._windows_done),
        "rejected_in_a_row": list(self._rejected_in_a_row),
        "simulated_time": self._simulated_time,
        "num_workers": self.num_workers,
        **self._schedule.describe(),
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
    mine = self._schedule.describe()
    if meta.get("num_workers") != self.num_workers or any(
        meta.get(key) != value for key, value in mine.items()):
      raise ValueError(
          f"the state is of {meta.get('num_workers')} workers with "
          f"commit_order {meta.get('commit_order')!r}; this simulation has "
          f"{self.num_workers} with {mine['commit_order']!r}")
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
    self._rejected_in_a_row = [int(w) for w in meta["rejected_in_a_row"]]
    self._samplers = self._fresh_samplers()
