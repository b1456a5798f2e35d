"""A strategy's parts: the server rules, the worker's commit and pull, the `Strategy` and its `exchange`.

Pure and jittable; nothing here knows about processes. Every backend only
calls a strategy's half-steps (`Strategy.worker_commit`, `server_apply`,
`worker_receive`), in the order `exchange` sequences them.
"""

import dataclasses
from typing import Any, Callable, Dict, NamedTuple, Optional, Tuple

import jax
import jax.numpy as jnp
import optax

from agn_jax import compression as compression_lib
from agn_jax import transform
from agn_jax import wire
from agn_jax.strategies.optimizers import at_schedule_step, schedule_step

# What a worker commits: "delta", plus "stale_center" for adag. With a
# `Strategy.compression`, "delta" is the codec's encoding of it.
Payload = Dict[str, Any]


class ServerState(NamedTuple):
  """State of the central parameter server.

  Attributes:
    clock: number of commits applied so far (int32 scalar).
    outer_state: state of the optional server-side outer optimizer.
  """

  clock: jax.Array
  outer_state: optax.OptState


class ServerRule(NamedTuple):
  """A server rule: pure functions on the center.

  Attributes:
    init: `init(center) -> ServerState`.
    apply: `apply(center, payload, server_state, staleness) -> (center,
      server_state)`; jittable; applies one commit's payload.
  """

  init: Callable[[optax.Params], ServerState]
  apply: Callable[..., Tuple[optax.Params, ServerState]]


# Increments: `(center, payload, staleness) -> what the commit adds to the center`.


def add_increment(center, payload, staleness):
  """DOWNPOUR, AGN, AEASGD/EAMSGD: `θ̃ ← θ̃ + Δ`."""
  del center, staleness
  return payload["delta"]


def dynsgd_increment(center, payload, staleness):
  """DynSGD: `θ̃ ← θ̃ + Δ / (τ + 1)` with `τ` the commit's staleness."""
  del center
  scale = 1.0 / (jnp.asarray(staleness, jnp.float32) + 1.0)
  return jax.tree.map(lambda d: (d * scale).astype(d.dtype), payload["delta"])


def adag_increment(learning_rate: float):
  """The thesis' element-wise rule: `θ̃ ← θ̃ + Δ ⊘ (η⁻¹ (θ̃ − θ̃_stale)² + 1)`."""

  def increment(center, payload, staleness):
    del staleness
    return jax.tree.map(
        lambda c, d, s: (d / ((c - s)**2 / learning_rate + 1.0)).astype(d.dtype),
        center, payload["delta"], payload["stale_center"])

  return increment


def server_rule(increment: Callable[..., optax.Updates],
                outer: Optional[optax.GradientTransformation] = None
               ) -> ServerRule:
  """Builds a `ServerRule` from an increment and an optional outer optimizer.

  Without `outer` the center moves by the increment. With `outer` (DiLoCo
  style) the negated increment is a pseudo-gradient for `outer`, whose update
  moves the center; `optax.sgd(1.0)` therefore reproduces the plain rule.

  Args:
    increment: `(center, payload, staleness) -> increment` pytree.
    outer: an optax transformation applied on the server, or None.

  Returns:
    A `ServerRule`.

  Example:
    >>> import jax.numpy as jnp
    >>> from agn_jax.strategies import server_rule, dynsgd_increment
    >>> rule = server_rule(dynsgd_increment)
    >>> center = jnp.zeros(2)
    >>> center, state = rule.apply(center, {"delta": jnp.ones(2)},
    ...                            rule.init(center), staleness=3)
    >>> center, int(state.clock)
    (Array([0.25, 0.25], dtype=float32), 1)
  """

  def init(center):
    return ServerState(
        clock=jnp.zeros([], jnp.int32),
        outer_state=outer.init(center) if outer else optax.EmptyState())

  def apply(center, payload, state, staleness):
    inc = increment(center, payload, staleness)
    outer_state = state.outer_state
    if outer is not None:
      pseudo_grad = jax.tree.map(jnp.negative, inc)
      inc, outer_state = outer.update(pseudo_grad, outer_state, center)
    center = jax.tree.map(lambda c, i: (c + i).astype(c.dtype), center, inc)
    return center, ServerState(state.clock + 1, outer_state)

  return ServerRule(init, apply)


# A strategy's worker-side building blocks, all `(params, opt_state, center)
# -> ...`: a `commit_fn` returns `(payload, params, opt_state)`, a `pull_fn`
# `(params, opt_state)`.


def delta_commit(params, opt_state, center):
  """Commit-then-pull strategies commit the window's (normalized) delta."""
  del center
  return {"delta": transform.commit_delta(opt_state)}, params, opt_state


def delta_and_center_commit(params, opt_state, center):
  """The thesis' element-wise rule also needs the center the worker pulled."""
  payload, params, opt_state = delta_commit(params, opt_state, center)
  return dict(payload, stale_center=center), params, opt_state


def reanchor_pull(params, opt_state, center):
  """Commit-then-pull strategies restart every window at the pulled center."""
  del params
  return transform.reanchor(opt_state, center)


def elastic_commit(alpha: float,
                   anchor: Optional[Callable[[Any, Any], Any]] = None):
  """AEASGD/EAMSGD: `E = α (x_k − θ̃)`, `θ_k ← θ_k − E`, commit `E`.

  Args:
    alpha: the elastic coefficient `α = ρη`.
    anchor: `(params, opt_state) -> x_k`, the point the elastic force pulls
      on, where the worker holds a look-ahead of it rather than the point
      itself (EAMSGD's Nesterov steps, `nesterov_anchor`); None: `x_k` is
      the worker's parameters. Either way the force moves both by `−E`.

  Returns:
    A `commit_fn`.

  Example:
    >>> import jax.numpy as jnp
    >>> from agn_jax.strategies import elastic_commit
    >>> payload, params, _ = elastic_commit(0.05)(jnp.asarray([2.0]), None,
    ...                                           jnp.asarray([0.0]))
    >>> payload["delta"], params
    (Array([0.1], dtype=float32), Array([1.9], dtype=float32))
  """

  def commit(params, opt_state, center):
    x = params if anchor is None else anchor(params, opt_state)
    elastic = jax.tree.map(lambda p, c: alpha * (p - c), x, center)
    params = jax.tree.map(lambda p, e: p - e, params, elastic)
    return {"delta": elastic}, params, opt_state

  return commit


def nesterov_anchor(learning_rate: float, momentum: float):
  """Zhang et al.'s iterate `x = y − δv` of a worker that holds the look-ahead `y`.

  EAMSGD's local step (Zhang et al. 2015, Algorithm 2) is Nesterov momentum
  on `x`: `v ← δv − η ∇f(x + δv)`, `x ← x + v`. `optax.sgd(η, δ,
  nesterov=True)` run on the look-ahead `y = x + δv` is the same sequence:
  it keeps the trace `m = −v/η` and computes `m ← ∇f(y) + δm`,
  `y ← y − η ∇f(y) − ηδm = y − η ∇f(y) + δv'`, while Zhang's step gives
  `y' = x' + δv' = y − δv + v' + δv' = y − η ∇f(y) + δv'` (`v'`, `x'`: the
  new values), the same update. So the worker's parameters are
  `y` (its gradients are taken there, as Zhang's), and the elastic force,
  which Zhang applies to `x` while keeping `v`, is computed on
  `x = y − δv = y + δη m` and moves `y` by the same `−E`: the exact
  algorithm, not an approximation of it.

  Args:
    learning_rate: the local step's `η`.
    momentum: `δ`.

  Returns:
    `(params, opt_state) -> x`, for an `opt_state` of `optax.sgd(learning_rate,
    momentum, nesterov=True)` (`make_worker_optimizer("nesterov", ...)`).

  Example:
    >>> import jax.numpy as jnp, optax
    >>> from agn_jax.strategies import nesterov_anchor
    >>> tx = optax.sgd(0.5, momentum=0.5, nesterov=True)
    >>> y = jnp.zeros(1)
    >>> updates, state = tx.update(jnp.ones(1), tx.init(y))
    >>> y = y + updates  # Zhang: v = -0.5, x = -0.5, y = x + δv = -0.75.
    >>> y, nesterov_anchor(0.5, 0.5)(y, state)
    (Array([-0.75], dtype=float32), Array([-0.5], dtype=float32))
  """

  def anchor(params, opt_state):
    trace = optax.tree_utils.tree_get(opt_state, "trace")
    return jax.tree.map(lambda y, m: y + momentum * learning_rate * m,
                        params, trace)

  return anchor


def keep_pull(params, opt_state, center):
  """Elastic workers are never reset to the center."""
  del center
  return params, opt_state


class WorkerState(NamedTuple):
  """A worker's local state between two commits.

  Attributes:
    params: the local parameters (where its next gradient is taken).
    opt_state: the state of the strategy's `worker_transform`.
  """

  params: optax.Params
  opt_state: optax.OptState


class ResidualWorkerState(NamedTuple):
  """A worker's state between two commits of a strategy with `compression`.

  Attributes:
    params: as `WorkerState`'s.
    opt_state: as `WorkerState`'s.
    residual: what the codec dropped from the commits so far, to be sent
      with the next one (error feedback, `agn_jax.compression.compress`): a
      flat float32 vector, the parameters' leaves in `jax.tree.leaves`
      order.
  """

  params: optax.Params
  opt_state: optax.OptState
  residual: jax.Array


def _where(accepted, on_accept, on_reject):
  """`on_accept` where `accepted` (a bool array) else `on_reject`, leaf by leaf."""
  return jax.tree.map(lambda a, r: jnp.where(accepted, a, r), on_accept,
                      on_reject)


@dataclasses.dataclass(frozen=True)
class Strategy:
  """One algorithm: what workers run, what the server applies, and in which order.

  A commit is three pure, jittable half-steps that every backend calls in
  the same order, and nothing outside this class knows what they do:

  0. (Dynamic Local Updates only) before a window of λ_k local steps,
     `begin_window(state, λ_k)` tells the worker transformation its length;
  1. after its λ local steps, the worker pulls the center first if
     `pull_before_commit`, then `worker_commit(state, center)` gives the
     payload it sends with the clock of the center it last pulled;
  2. the server takes commits one at a time (FIFO):
     `server_apply(center, server_state, payload, staleness)`, with
     staleness = server clock − that clock; a payload with a non-finite
     number is rejected and changes nothing;
  3. the worker pulls again if `pulls_after_commit(accepted)` (once the
     server has handled its commit), then `worker_receive(state, center,
     accepted)` gives its state for the next window, `center` being
     `received_center`'s; after a rejected commit that is a fresh start
     from the center.

  `exchange` is that sequence on one host (the simulator's round calls it);
  the processes and Ray backends split it between a worker
  (`runtime/worker.py`: steps 1 and 3) and the server (`runtime/server.py`:
  step 2).

  Attributes:
    name: the registry name.
    communication_window: λ, local steps per commit.
    worker_transform: the optax transformation of the local steps.
    rule: the server rule.
    pull_before_commit: False (agn, downpour, dynsgd, adag): the worker
      commits against the center it pulled before the window, then restarts
      from a fresh pull. True (aeasgd, eamsgd): the worker pulls just before
      its commit, computes it against that center and keeps its own
      parameters.
    payload: the keys of a commit's payload, e.g. `("delta",)` or
      `("delta", "stale_center")`.
    commit_fn: `(params, opt_state, center) -> (payload, params, opt_state)`,
      the worker's commit (`worker_commit`).
    pull_fn: `(params, opt_state, center) -> (params, opt_state)`, what the
      worker does with the center after an accepted commit
      (`worker_receive`).
    commit_reads_center: whether `commit_fn` reads the center a worker that
      does not pull before its commit pulled before its window (adag's
      `stale_center`, a user's `θ_k − θ̃`), declared rather than found out:
      the simulator then keeps every worker's pulled center. AGN's and
      DOWNPOUR's commit only their accumulated delta. The default, True, is
      always right, at the cost of one center per worker in the simulator.
    compression: None, or the `agn_jax.compression.Codec` the payload's
      `delta` travels in (`with_compression`): `worker_commit` encodes the
      flat delta plus the worker's residual and keeps what the code dropped
      in `ResidualWorkerState.residual`; `server_apply` decodes before the
      rule.
      Any other payload entry (adag's `stale_center`) travels as it is.
    synchronous: False (every strategy of the paper): the server applies
      each commit as it arrives. True (`agn_jax.strategies.synchronous`:
      sync_data_parallel, diloco): the workers run in rounds from one
      center and the server applies the mean of a round's commits in one
      step of its rule (`synchronous_exchange`), on the simulated backend
      only.

  Example:
    >>> import jax.numpy as jnp, optax
    >>> from agn_jax import get_strategy
    >>> from agn_jax.strategies import WorkerState
    >>> s = get_strategy("downpour", communication_window=1,
    ...                  inner=optax.sgd(1.0))
    >>> center = jnp.zeros(2)
    >>> state, server_state = s.init_worker(center), s.rule.init(center)
    >>> updates, opt_state = s.worker_transform.update(  # One local step.
    ...     jnp.ones(2), state.opt_state, state.params)
    >>> state = WorkerState(state.params + updates, opt_state)
    >>> payload, state = s.worker_commit(state, center)
    >>> center, server_state, accepted = s.server_apply(
    ...     center, server_state, payload, staleness=0)
    >>> accepted = bool(accepted)
    >>> accepted, s.pulls_after_commit(accepted), int(server_state.clock)
    (True, True, 1)
    >>> s.worker_receive(state, center, accepted).params
    Array([-1., -1.], dtype=float32)
  """

  name: str
  communication_window: int
  worker_transform: optax.GradientTransformation
  rule: ServerRule
  pull_before_commit: bool
  payload: Tuple[str, ...]
  commit_fn: Callable[..., Tuple[Payload, Any, Any]]
  pull_fn: Callable[..., Tuple[Any, Any]]
  compression: Optional[compression_lib.Codec] = None
  commit_reads_center: bool = True
  synchronous: bool = False

  def init_worker(self, center) -> WorkerState:
    """A worker's state at a center it pulled first: a fresh start there (a zero residual)."""
    return self.worker_state(center, self.worker_transform.init(center),
                             self._fresh_residual(center))

  def worker_state(self, params, opt_state, residual=None):
    """A `WorkerState`, or with `compression` a `ResidualWorkerState` (a None `residual`: zeros)."""
    if self.compression is None:
      return WorkerState(params, opt_state)
    if residual is None:
      residual = self._fresh_residual(params)
    return ResidualWorkerState(params, opt_state, residual)

  def _fresh_residual(self, like):
    if self.compression is None:
      return None
    return jnp.zeros(wire.num_params(like), jnp.float32)

  def begin_window(self, state: WorkerState, steps) -> WorkerState:
    """The worker's state for a window of `steps` local steps instead of λ (jittable).

    Dynamic Local Updates give each worker a window of its own length
    (`agn_jax.shares.local_updates`). A worker transformation built on
    `agn` commits after the window's own steps and normalizes by them
    (`transform.set_window`); an elastic strategy's window is only the
    number of local steps the worker runs before its commit, so its state
    stays as it is.

    Args:
      state: the worker's state at the start of the window.
      steps: the window's local steps, >= 1 (int or int32 array).

    Returns:
      The state, its window set where the transformation has one.

    Example:
      >>> import jax.numpy as jnp, optax
      >>> from agn_jax import get_strategy
      >>> s = get_strategy("agn", communication_window=4,
      ...                  inner=optax.sgd(1.0))
      >>> state = s.begin_window(s.init_worker(jnp.zeros(1)), 2)
      >>> int(transform.find_agn_state(state.opt_state).window)
      2
    """
    if not transform.holds_agn_state(state.opt_state):
      return state
    return state._replace(
        opt_state=transform.set_window(state.opt_state, steps))

  def worker_commit(self, state: WorkerState,
                    center) -> Tuple[Payload, WorkerState]:
    """The worker's half-step at the end of a window.

    Args:
      state: the worker's state after the window's λ local steps.
      center: the center the worker pulled just now (`pull_before_commit`),
        else the one it pulled before the window.

    Returns:
      `(payload, state)`: the payload, a dict with the keys `self.payload`
      (its `delta` encoded by `compression`, if any), and the worker's state
      after its commit.
    """
    payload, params, opt_state = self.commit_fn(state.params, state.opt_state,
                                                center)
    payload = {key: payload[key] for key in self.payload}
    residual = getattr(state, "residual", None)
    if self.compression is not None:
      if residual is None:
        residual = self._fresh_residual(payload["delta"])
      payload["delta"], residual = compression_lib.compress(
          self.compression, wire.ravel(payload["delta"]), residual)
    return payload, self.worker_state(params, opt_state, residual)

  def decompress(self, payload: Payload, center) -> Payload:
    """The payload with its `delta` decoded into the center's shape (as is without `compression`)."""
    if self.compression is None:
      return payload
    flat = self.compression.decode(payload["delta"], wire.num_params(center))
    return dict(payload, delta=wire.unravel_like(flat, center))

  def accepts(self, payload: Payload) -> jax.Array:
    """Whether the server applies `payload`: every number in it is finite.

    A worker whose optimizer diverged must not poison the center.
    """
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x))
                              for x in jax.tree.leaves(payload)]))

  def server_apply(self, center, server_state: ServerState, payload: Payload,
                   staleness) -> Tuple[Any, ServerState, jax.Array]:
    """The server's half-step: applies one commit through the rule, or rejects it.

    Args:
      center: the center.
      server_state: the `ServerState`.
      payload: the commit's payload, as `worker_commit` made it (an encoded
        `delta` is decoded here, `decompress`).
      staleness: server clock − the clock of the center the worker last
        pulled (int32).

    Returns:
      `(center, server_state, accepted)`; `accepted` is `accepts(payload)`
      (a bool array). A rejected commit leaves the center and the server
      state (its clock too) as they were.
    """
    accepted = self.accepts(payload)
    applied = self.rule.apply(center, self.decompress(payload, center),
                              server_state, staleness)
    center, server_state = _where(accepted, applied, (center, server_state))
    return center, server_state, accepted

  def pulls_after_commit(self, accepted: bool) -> bool:
    """Whether the worker pulls once the server has handled its commit.

    It restarts from the center after its own commit (read-your-writes),
    unless it pulled just before the commit and keeps its own parameters.
    A rejected worker always starts afresh from the center.
    """
    return not (self.pull_before_commit and accepted)

  def received_center(self, accepted, center, used):
    """The center `worker_receive` gets, as the contract names it (jittable).

    Args:
      accepted: the server's verdict on the commit (a Python bool or a
        traced one).
      center: the center once the server handled the commit.
      used: the center the commit used (`worker_commit`'s).

    Returns:
      `center` where the worker pulls after its commit
      (`pulls_after_commit(accepted)`), else `used`: a worker that pulled
      just before its commit and keeps its parameters does not pull again.
    """
    if isinstance(accepted, bool):
      return center if self.pulls_after_commit(accepted) else used
    if not self.pull_before_commit:
      return center
    return _where(accepted, used, center)

  def worker_receive(self, state: WorkerState, center,
                     accepted) -> WorkerState:
    """The worker's half-step once the server has handled its commit.

    Args:
      state: the state `worker_commit` returned.
      center: the center pulled after the commit where
        `pulls_after_commit(accepted)`, else the one the commit used.
      accepted: whether the server applied the commit (`server_apply`'s
        verdict; the worker knows it as `accepts(payload)`): a Python bool or
        a traced one.

    Returns:
      The state for the next window: `pull_fn`'s after an accepted commit,
      `init_worker(center)` after a rejected one (the optimizer state, e.g.
      Adam's moments, may be what diverged), its learning-rate schedule
      still at the worker's local step (`at_schedule_step`). A Python bool
      returns that one state as it is: a leaf the pull leaves alone is the
      very array passed in (the simulator writes back only the leaves a
      half-step changed).
    """
    if isinstance(accepted, bool) and not accepted:
      return self._restart(state, center)
    kept = self.worker_state(
        *self.pull_fn(state.params, state.opt_state, center),
        getattr(state, "residual", None))
    if isinstance(accepted, bool):
      return kept
    return _where(accepted, kept, self._restart(state, center))

  def _restart(self, state: WorkerState, center) -> WorkerState:
    """`init_worker(center)`, its schedule's count kept from `state`: the local steps taken stay taken."""
    fresh = self.init_worker(center)
    step = schedule_step(state.opt_state)
    if step is None:
      return fresh
    return fresh._replace(opt_state=at_schedule_step(fresh.opt_state, step))


class Exchange(NamedTuple):
  """One commit of one worker, as `exchange` sequenced it.

  Attributes:
    payload: the payload the worker committed (`worker_commit`'s).
    committed: the worker's state after its commit, before it received.
    state: the worker's state for its next window (`worker_receive`'s).
    center: the center once the server handled the commit.
    server_state: the server's state then.
    accepted: whether the server applied the commit (a bool array).
    staleness: server clock at the apply − the clock of the center the
      commit used (int32).
    used: the center the commit used: the one pulled before the window, or
      with `pull_before_commit` the server's center at the commit.
    received: the center the worker received (`received_center`).
  """
  payload: Payload
  committed: Any
  state: Any
  center: Any
  server_state: ServerState
  accepted: jax.Array
  staleness: jax.Array
  used: Any
  received: Any


def exchange(strategy: Strategy, state, center, server_state: ServerState,
             pulled, pulled_clock) -> Exchange:
  """One commit of one worker in the contract's order, with the server on the same host (jittable).

  Pull first or not (`pull_before_commit`), commit (`worker_commit`), apply
  (`server_apply`), receive (`worker_receive`, with the center
  `received_center` names). The simulator's round calls it for each commit.
  The processes and Ray backends run the same half-steps split between the
  worker's process and the server's, where other commits may land between a
  pull before the commit and its apply; here none does.

  Args:
    strategy: the `Strategy`.
    state: the worker's state after its window's local steps.
    center: the server's center when the commit reaches it.
    server_state: the server's `ServerState` then.
    pulled: the center the worker pulled before its window (unused with
      `pull_before_commit`, or where the commit does not read it,
      `commit_reads_center`).
    pulled_clock: that center's clock (int32).

  Returns:
    An `Exchange`.

  Example:
    >>> import jax.numpy as jnp, optax
    >>> from agn_jax import get_strategy
    >>> s = get_strategy("aeasgd", inner=optax.sgd(1.0), rho=5.0,
    ...                  elastic_learning_rate=0.1)
    >>> server = s.rule.init(jnp.zeros(1))
    >>> state = s.init_worker(jnp.zeros(1))._replace(
    ...     params=jnp.full(1, 2.0))  # After its window.
    >>> ex = exchange(s, state, jnp.zeros(1), server, pulled=None,
    ...               pulled_clock=0)
    >>> ex.payload["delta"], ex.center, ex.state.params  # E = 0.5 · 2.
    (Array([1.], dtype=float32), Array([1.], dtype=float32), Array([1.], dtype=float32))
  """
  if strategy.pull_before_commit:
    pulled, pulled_clock = center, server_state.clock
  staleness = jnp.asarray(server_state.clock - pulled_clock, jnp.int32)
  payload, committed = strategy.worker_commit(state, pulled)
  center, server_state, accepted = strategy.server_apply(
      center, server_state, payload, staleness)
  received = strategy.received_center(accepted, center, pulled)
  state = strategy.worker_receive(committed, received, accepted)
  return Exchange(payload, committed, state, center, server_state, accepted,
                  staleness, pulled, received)


def with_compression(strategy: Strategy,
                     codec: Optional[compression_lib.Codec]) -> Strategy:
  """`strategy` whose commits send their `delta` through `codec`, with error feedback.

  Every strategy's `delta` is an update to add to the center: AGN's `a/λ`,
  DOWNPOUR's and DynSGD's `a`, the elastic strategies' `E`, adag's
  normalized delta (its `stale_center` travels uncompressed: it is a center,
  not an update, and an error in it would have no residual to make up for
  it). An elastic worker moves itself by the whole `E` and sends the
  compressed `E` plus its residual, so the center receives all of it, a
  little late.

  Args:
    strategy: a `Strategy`.
    codec: an `agn_jax.compression.Codec`, or None (no compression).

  Returns:
    The `Strategy` with `compression=codec`.

  Raises:
    ValueError: for a strategy whose payload has no `delta`.

  Example:
    >>> import jax.numpy as jnp
    >>> from agn_jax import compression, get_strategy
    >>> s = with_compression(get_strategy("aeasgd"), compression.parse("bf16"))
    >>> payload, state = s.worker_commit(s.init_worker(jnp.ones(2)),
    ...                                  jnp.zeros(2))
    >>> payload["delta"][0].dtype, state.residual.shape
    (dtype(bfloat16), (2,))
  """
  if codec is not None and "delta" not in strategy.payload:
    raise ValueError(f"strategy {strategy.name!r} commits no delta (its "
                     f"payload is {', '.join(strategy.payload)}); "
                     "commit_compression needs one")
  return dataclasses.replace(strategy, compression=codec)
