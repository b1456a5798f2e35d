"""Every algorithm of the paper as a `Strategy`: worker transformation, server rule, commit/pull half-steps.

Pure and jittable; nothing here knows about processes. Every backend looks a
strategy up by name (in the registry, or a `"package.module:function"`
written outside this package: `check_name`) and only calls its half-steps
(`Strategy.worker_commit`, `server_apply`, `worker_receive`).
"""

import dataclasses
import importlib
import inspect
import math
from typing import Any, Callable, Dict, Mapping, NamedTuple, Optional, Tuple

import jax
import jax.numpy as jnp
import optax

from agn_jax import compression as compression_lib
from agn_jax import transform

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
     accepted)` gives its state for the next window; after a rejected commit
     that is a fresh start from the center.

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
    compression: None, or the `agn_jax.compression.Codec` the payload's
      `delta` travels in (`with_compression`): `worker_commit` encodes the
      flat delta plus the worker's residual and keeps what the code dropped
      in `ResidualWorkerState.residual`; `server_apply` decodes before the
      rule.
      Any other payload entry (adag's `stale_center`) travels as it is.

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
    return jnp.zeros(_size(like), jnp.float32)

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
          self.compression, _ravel(payload["delta"]), residual)
    return payload, self.worker_state(params, opt_state, residual)

  def decompress(self, payload: Payload, center) -> Payload:
    """The payload with its `delta` decoded into the center's shape (as is without `compression`)."""
    if self.compression is None:
      return payload
    flat = self.compression.decode(payload["delta"], _size(center))
    return dict(payload, delta=_unravel_like(flat, center))

  def pack(self, payload: Payload) -> Tuple[jax.Array, ...]:
    """The payload as the runtime sends it: flat arrays of plain dtypes (jittable).

    Each entry in `self.payload` order: a pytree raveled into one float32
    vector (the leaves in `jax.tree.leaves` order, as `agn_jax.flat.FlatLayout`
    ravels them), an encoded `delta` as its codec's arrays (`Codec.to_wire`).
    `unpack` undoes it.
    """
    wire = []
    for key in self.payload:
      if key == "delta" and self.compression is not None:
        wire.extend(self.compression.to_wire(payload[key]))
      else:
        wire.append(_ravel(payload[key]))
    return tuple(wire)

  def unpack(self, wire, center) -> Payload:
    """The payload `pack` sent, its pytrees shaped like `center` (jittable)."""
    wire, payload = list(wire), {}
    for key in self.payload:
      if key == "delta" and self.compression is not None:
        arity = len(jax.eval_shape(self.compression.encode,
                                   jax.ShapeDtypeStruct((1,), jnp.float32)))
        payload[key] = tuple(self.compression.from_wire(wire[:arity]))
        del wire[:arity]
      else:
        payload[key] = _unravel_like(wire.pop(0), center)
    return payload

  def wire_spec(self, center) -> Tuple[jax.ShapeDtypeStruct, ...]:
    """The shapes and dtypes of `pack`'s arrays for a model shaped like `center` (arrays or `jax.ShapeDtypeStruct`s).

    Example:
      >>> import jax.numpy as jnp
      >>> from agn_jax import compression, get_strategy
      >>> s = with_compression(get_strategy("adag"), compression.parse("int8"))
      >>> [(x.shape, str(x.dtype)) for x in s.wire_spec(jnp.zeros(3000))]
      [((3000,), 'int8'), ((3,), 'float32'), ((3000,), 'float32')]
    """
    return tuple(jax.eval_shape(
        lambda c: self.pack(self.worker_commit(self.init_worker(c), c)[0]),
        center))

  def commit_bytes(self, center) -> int:
    """Bytes of one commit as sent (`wire_spec`'s arrays) for a model shaped like `center`.

    Example:
      >>> import jax.numpy as jnp
      >>> from agn_jax import compression, get_strategy
      >>> s = get_strategy("agn")
      >>> s.commit_bytes(jnp.zeros(1000)), with_compression(
      ...     s, compression.parse("bf16")).commit_bytes(jnp.zeros(1000))
      (4000, 2000)
    """
    return sum(math.prod(x.shape) * jnp.dtype(x.dtype).itemsize
               for x in self.wire_spec(center))

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
      Adam's moments, may be what diverged). A Python bool returns that one
      state as it is: a leaf the pull leaves alone is the very array passed
      in (the simulator writes back only the leaves a half-step changed).
    """
    if isinstance(accepted, bool) and not accepted:
      return self.init_worker(center)
    kept = self.worker_state(
        *self.pull_fn(state.params, state.opt_state, center),
        getattr(state, "residual", None))
    if isinstance(accepted, bool):
      return kept
    return _where(accepted, kept, self.init_worker(center))


def _size(tree) -> int:
  """The number of entries of a pytree's leaves (arrays or `jax.ShapeDtypeStruct`s)."""
  return sum(math.prod(jnp.shape(leaf)) for leaf in jax.tree.leaves(tree))


def _ravel(tree) -> jax.Array:
  """A pytree as one flat float32 vector, its leaves in `jax.tree.leaves` order."""
  return jnp.concatenate([jnp.ravel(leaf).astype(jnp.float32)
                          for leaf in jax.tree.leaves(tree)])


def _unravel_like(flat, like):
  """`flat` as a pytree shaped like `like` (`_ravel` undone)."""
  leaves, treedef = jax.tree.flatten(like)
  out, start = [], 0
  for leaf in leaves:
    size = math.prod(jnp.shape(leaf))
    out.append(flat[start:start + size].reshape(jnp.shape(leaf)))
    start += size
  return treedef.unflatten(out)


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


_REGISTRY: Dict[str, Callable[..., Strategy]] = {}
_PAPER_DEFAULTS: Dict[str, Dict[str, Any]] = {}


def register(name: str, paper_defaults: Optional[Mapping[str, Any]] = None):
  """Decorator that adds a strategy factory to the registry under `name`.

  The registry holds this package's strategies. A strategy written
  elsewhere needs no registration (a registration would not reach the
  run's other processes): `check_name` says how it is named.

  Args:
    name: the registry name.
    paper_defaults: the `TrainConfig` settings the paper gives this strategy
      (`worker_optimizer`, `learning_rate`, `momentum`, `rho`,
      `elastic_learning_rate`, `normalization`, as they apply); what
      `paper_defaults(name)` returns.
  """

  def wrap(factory):
    _REGISTRY[name] = factory
    _PAPER_DEFAULTS[name] = dict(paper_defaults or {})
    return factory

  return wrap


def available() -> Tuple[str, ...]:
  """The names in the registry, in registration order."""
  return tuple(_REGISTRY)


def check_name(name: str) -> None:
  """Raises `ValueError` (one line) unless `name` names a strategy: a registered one, or one written outside this package.

  A strategy outside this package is named by where its factory lives,
  `"package.module:function"`, as an entry point names a function. Each
  process of a run (a spawned worker, a Ray actor) imports it from there
  when it first needs it, so the module must be importable wherever the
  run runs. The paper gives such a strategy no defaults: `paper_defaults`
  is empty, and the config says what its factory's arguments are.

  Example:
    >>> from agn_jax import get_strategy
    >>> check_name("agn_jax.strategies:downpour_strategy")
    >>> get_strategy("agn_jax.strategies:downpour_strategy",
    ...              communication_window=2).name
    'downpour'
    >>> check_name("sgdx")
    Traceback (most recent call last):
    ...
    ValueError: unknown strategy 'sgdx'; available: agn, downpour, dynsgd, adag, aeasgd, eamsgd, or package.module:function
  """
  _factory(name)


def _factory(name: str) -> Callable[..., Strategy]:
  if name in _REGISTRY:
    return _REGISTRY[name]
  module, sep, function = name.partition(":")
  if sep and module and function:
    try:
      factory = getattr(importlib.import_module(module), function)
    except (ImportError, AttributeError) as e:
      raise ValueError(f"strategy {name!r} cannot be imported: {e}") from None
    if callable(factory):
      return factory
  raise ValueError(f"unknown strategy {name!r}; available: "
                   f"{', '.join(_REGISTRY)}, or package.module:function")


def paper_defaults(name: str) -> Dict[str, Any]:
  """The settings the paper gives strategy `name`, as `TrainConfig` field values.

  A `TrainConfig` field left at None takes its value from here (see
  `TrainConfig.resolved`); a field a strategy has no paper value for is
  absent.

  Args:
    name: one of `available()`, or a strategy outside this package
      (`check_name`), which has none.

  Returns:
    A new dict, e.g. `{"worker_optimizer": "adam", "learning_rate": 1e-3,
    "rho": 5.0, "elastic_learning_rate": 0.01, ...}` for aeasgd.

  Raises:
    ValueError: for an unknown name.

  Example:
    >>> from agn_jax.strategies import paper_defaults
    >>> d = paper_defaults("aeasgd")
    >>> d["worker_optimizer"], d["learning_rate"], d["rho"]
    ('adam', 0.001, 5.0)
    >>> d["rho"] * d["elastic_learning_rate"]  # α
    0.05
  """
  check_name(name)
  return dict(_PAPER_DEFAULTS.get(name, {}))


def parameters(name: str) -> Tuple[str, ...]:
  """The keyword arguments strategy `name`'s factory takes.

  `build.build_strategy` passes a factory exactly these, so a setting a
  strategy does not have is never silently dropped inside the factory.

  Example:
    >>> from agn_jax.strategies import parameters
    >>> "rho" in parameters("aeasgd"), "rho" in parameters("agn")
    (True, False)
  """
  return tuple(inspect.signature(_factory(name)).parameters)


def get_strategy(name: str, **kwargs) -> Strategy:
  """Builds the strategy `name` names.

  Args:
    name: one of `available()`: agn, downpour, aeasgd, eamsgd, dynsgd, adag;
      or a strategy outside this package, `"package.module:function"`
      (`check_name`).
    **kwargs: the factory's arguments (`parameters(name)`), e.g.
      `communication_window`, `inner` (the local optimizer; each strategy has
      the paper's default; eamsgd's is always Nesterov), `learning_rate`
      (the local optimizer's), `rho` and `elastic_learning_rate` (aeasgd,
      eamsgd: `α = ρη`), `momentum` (eamsgd), `normalization` (agn, adag),
      `server_optimizer` (an optax transformation or None).

  Returns:
    A `Strategy`.

  Raises:
    ValueError: for an unknown name or a bad argument value.
    TypeError: for an argument the strategy does not take (a misspelled
      `comunication_window=` is an error, not a silent default), or a
      factory that returns no `Strategy`.

  Example:
    >>> from agn_jax import get_strategy
    >>> s = get_strategy("agn", communication_window=10)
    >>> s.pull_before_commit, s.payload
    (False, ('delta',))
  """
  accepted = parameters(name)
  unknown = [key for key in kwargs if key not in accepted]
  if unknown:
    raise TypeError(
        f"strategy {name!r} takes no argument "
        f"{', '.join(repr(k) for k in unknown)}; it takes "
        f"{', '.join(accepted)}")
  strategy = _factory(name)(**kwargs)
  if not isinstance(strategy, Strategy):
    raise TypeError(f"strategy {name!r}: its factory returned a "
                    f"{type(strategy).__name__}, not a Strategy")
  return strategy


# The factories below and `make_*_optimizer` check the arguments they use,
# as optax's do: they are public (`get_strategy`), and a caller without a
# `TrainConfig` has nothing else to name a bad value. A config's values were
# checked already, by `TrainConfig.validate`.
def _check_positive(**values):
  for key, value in values.items():
    if not value > 0:
      raise ValueError(f"{key} must be > 0, got {value!r}")


def _commit_then_pull(name, communication_window, inner, normalization,
                      increment, server_optimizer, commit_fn=delta_commit,
                      payload=("delta",)):
  return Strategy(
      name=name,
      communication_window=communication_window,
      worker_transform=transform.agn(inner, communication_window,
                                     normalization),
      rule=server_rule(increment, server_optimizer),
      pull_before_commit=False,
      payload=payload,
      commit_fn=commit_fn,
      pull_fn=reanchor_pull)


@register("agn", paper_defaults=dict(
    worker_optimizer="adam", learning_rate=1e-3, normalization="window"))
def agn_strategy(communication_window: int = 10,
                 inner: Optional[optax.GradientTransformation] = None,
                 learning_rate: float = 1e-3,
                 server_optimizer=None,
                 normalization: transform.Normalization = "window") -> Strategy:
  """AGN: commit `a/λ`, the server adds it (FIFO)."""
  return _commit_then_pull("agn", communication_window,
                           inner or optax.adam(learning_rate), normalization,
                           add_increment, server_optimizer)


@register("downpour", paper_defaults=dict(
    worker_optimizer="adam", learning_rate=1e-3, normalization="none"))
def downpour_strategy(communication_window: int = 10,
                      inner: Optional[optax.GradientTransformation] = None,
                      learning_rate: float = 1e-3,
                      server_optimizer=None) -> Strategy:
  """DOWNPOUR: commit the raw accumulated delta, the server adds it."""
  return _commit_then_pull("downpour", communication_window,
                           inner or optax.adam(learning_rate), "none",
                           add_increment, server_optimizer)


@register("dynsgd", paper_defaults=dict(
    worker_optimizer="adam", learning_rate=1e-3, normalization="none"))
def dynsgd_strategy(communication_window: int = 10,
                    inner: Optional[optax.GradientTransformation] = None,
                    learning_rate: float = 1e-3,
                    server_optimizer=None) -> Strategy:
  """DynSGD: commit the raw delta, the server scales it by `1/(τ+1)`."""
  return _commit_then_pull("dynsgd", communication_window,
                           inner or optax.adam(learning_rate), "none",
                           dynsgd_increment, server_optimizer)


@register("adag", paper_defaults=dict(
    worker_optimizer="adam", learning_rate=1e-3, normalization="window"))
def adag_strategy(communication_window: int = 10,
                  inner: Optional[optax.GradientTransformation] = None,
                  learning_rate: float = 1e-3,
                  server_optimizer=None,
                  normalization: transform.Normalization = "window") -> Strategy:
  """The thesis' staleness-aware element-wise rule on AGN's normalized delta.

  The worker commits its AGN delta together with the center it pulled; the
  server divides element-wise by `η⁻¹ (θ̃ − θ̃_stale)² + 1`, with `η` the
  workers' `learning_rate`.
  """
  _check_positive(learning_rate=learning_rate)
  return _commit_then_pull("adag", communication_window,
                           inner or optax.adam(learning_rate), normalization,
                           adag_increment(learning_rate), server_optimizer,
                           commit_fn=delta_and_center_commit,
                           payload=("delta", "stale_center"))


def _elastic(name, communication_window, inner, rho, elastic_learning_rate,
             server_optimizer, anchor=None):
  _check_positive(rho=rho, elastic_learning_rate=elastic_learning_rate)
  if isinstance(communication_window, bool) or not isinstance(
      communication_window, int) or communication_window < 1:
    raise ValueError("communication_window must be an integer >= 1, got "
                     f"{communication_window!r}")
  return Strategy(
      name=name,
      communication_window=communication_window,
      worker_transform=inner,
      rule=server_rule(add_increment, server_optimizer),
      pull_before_commit=True,
      payload=("delta",),
      commit_fn=elastic_commit(rho * elastic_learning_rate, anchor),
      pull_fn=keep_pull)


@register("aeasgd", paper_defaults=dict(
    worker_optimizer="adam", learning_rate=1e-3, rho=5.0,
    elastic_learning_rate=0.01, normalization="none"))
def aeasgd_strategy(communication_window: int = 10,
                    inner: Optional[optax.GradientTransformation] = None,
                    learning_rate: float = 1e-3,
                    rho: float = 5.0,
                    elastic_learning_rate: float = 0.01,
                    server_optimizer=None) -> Strategy:
  """Asynchronous EASGD (Zhang et al. 2015) as the thesis ran it.

  λ local steps of `inner` (default Adam at `learning_rate`); then pull,
  `E = α (θ_k − θ̃)` with `α = rho · elastic_learning_rate`,
  `θ_k ← θ_k − E`, commit `E`. The local optimizer's learning rate plays no
  part in `α`.

  The defaults are the thesis' grid: its `experiments/easgd_experiments.py`
  runs dist-keras' `AEASGD(worker_optimizer='adam', learning_rate=0.01)`,
  whose worker compiles the model with Keras' Adam at its default 1e-3 and
  uses `learning_rate` only in `alpha = rho * learning_rate`, with
  dist-keras' default `rho=5.0`: α = 0.05.

  Example:
    >>> from agn_jax import get_strategy
    >>> from agn_jax.strategies import WorkerState
    >>> s = get_strategy("aeasgd", rho=5.0, elastic_learning_rate=0.01)
    >>> payload, state = s.worker_commit(WorkerState(2.0, None), center=0.0)
    >>> round(float(payload["delta"]), 6)  # α (θ_k − θ̃) = 0.05 · 2
    0.1
  """
  _check_positive(learning_rate=learning_rate)
  return _elastic("aeasgd", communication_window,
                  inner or optax.adam(learning_rate), rho,
                  elastic_learning_rate, server_optimizer)


@register("eamsgd", paper_defaults=dict(
    worker_optimizer="nesterov", learning_rate=0.01, momentum=0.9, rho=5.0,
    elastic_learning_rate=0.01, normalization="none"))
def eamsgd_strategy(communication_window: int = 10,
                    learning_rate: float = 0.01,
                    rho: float = 5.0,
                    elastic_learning_rate: float = 0.01,
                    momentum: float = 0.9,
                    server_optimizer=None) -> Strategy:
  """EAMSGD (Zhang et al. 2015, Algorithm 2): AEASGD with Nesterov local steps.

  Each local step is `v ← δv − η ∇f(x + δv)`, `x ← x + v` (`η` =
  `learning_rate`, `δ` = `momentum`); every λ steps the worker pulls and
  applies the elastic force to `x`, keeping `v`: `E = α (x − θ̃)`,
  `x ← x − E`, commit `E`, with `α = rho · elastic_learning_rate`. The
  worker runs `make_worker_optimizer("nesterov")` on the look-ahead
  `x + δv`, which is the same sequence; `nesterov_anchor` says why and how
  the force still acts on `x`.

  Where the defaults come from: Nesterov momentum with δ = 0.9 is
  dist-keras' EAMSGD default (`momentum=0.9`). Zhang et al.
  use one η for the local steps and for `α = ηρ`; both are 0.01 here, the
  default `learning_rate` of dist-keras' EAMSGD worker (its trainer's is
  0.1) and the η of the thesis' AEASGD grid, so α = 0.05 as AEASGD's;
  ρ = 5 is dist-keras' default. The thesis ran no EAMSGD grid. dist-keras' own EAMSGD worker
  departs from Algorithm 2 (its velocity takes the compiled Keras
  optimizer's step times `learning_rate` and looks ahead on the other side
  of `x`); this follows the paper.

  Example:
    >>> from agn_jax import get_strategy
    >>> s = get_strategy("eamsgd")
    >>> s.pull_before_commit, s.payload
    (True, ('delta',))
  """
  if not 0 <= momentum < 1:
    raise ValueError(f"momentum must be in [0, 1), got {momentum!r}")
  return _elastic("eamsgd", communication_window,
                  make_worker_optimizer("nesterov", learning_rate, momentum),
                  rho, elastic_learning_rate, server_optimizer,
                  anchor=nesterov_anchor(learning_rate, momentum))


# The local optimizers `--worker_optimizer` names.
WORKER_OPTIMIZERS = ("adam", "sgd", "momentum", "nesterov", "adagrad")


def make_worker_optimizer(name: str, learning_rate: float,
                          momentum: float = 0.9) -> optax.GradientTransformation:
  """The local optimizer named by `--worker_optimizer`: one of `WORKER_OPTIMIZERS`.

  `momentum` is heavy-ball momentum, `nesterov` Nesterov's (as optax
  writes it: on the look-ahead point, see `nesterov_anchor`); both use
  `momentum`. `adagrad` is optax's (initial accumulator 0.1), the
  optimizer of dist-keras' workflow notebook.
  """
  _check_positive(learning_rate=learning_rate)
  if name == "adam":
    return optax.adam(learning_rate)
  if name == "sgd":
    return optax.sgd(learning_rate)
  if name == "momentum":
    return optax.sgd(learning_rate, momentum=momentum)
  if name == "nesterov":
    return optax.sgd(learning_rate, momentum=momentum, nesterov=True)
  if name == "adagrad":
    return optax.adagrad(learning_rate)
  raise ValueError(f"worker_optimizer must be one of "
                   f"{', '.join(WORKER_OPTIMIZERS)}, got {name!r}")


class DelayedNesterovState(NamedTuple):
  """State of `delayed_nesterov`.

  Attributes:
    count: updates since the last momentum update, in `[0, every)` (int32).
    momentum: `m`, the momentum of the averaged pseudo-gradients.
    accumulated: `b`, the sum of the pseudo-gradients since the last
      momentum update (the paper's `Δ`).
  """

  count: jax.Array
  momentum: optax.Updates
  accumulated: optax.Updates


def _check_every(every) -> None:
  if isinstance(every, bool) or not isinstance(every, int) or every < 1:
    raise ValueError(f"server_every must be an integer >= 1, got {every!r}")


def delayed_nesterov(learning_rate: float, momentum: float = 0.9,
                     every: int = 1) -> optax.GradientTransformation:
  """Delayed Nesterov (DN): the outer momentum moves once every `every` commits.

  For the pseudo-gradient `g_t` of the t-th update (t = 1, 2, ...), with
  `ε` = `learning_rate`, `β` = `momentum`, `N` = `every` and the buffer
  `b` (the paper's `Δ`), `m = b = 0` at the start:

      b ← b + g_t
      if t mod N = 0:   m ← β m + b / N;   θ ← θ − ε (β m + g_t / N);   b ← 0
      else:             θ ← θ − ε g_t / N

  Every update applies its own pseudo-gradient at once, scaled by `1/N`;
  every N-th one also applies the Nesterov correction `β m` of a momentum
  that saw the mean of the last N pseudo-gradients. Over N updates the
  parameters move by `−ε (mean(g) + β m)`: one Nesterov step on the mean,
  with the momentum updated once, not once per (stale) commit. With
  `N = 1` it is Nesterov SGD exactly, `optax.sgd(ε, β, nesterov=True)`.

  Source: the DN update of Liu, Douillard et al. 2024 (arXiv:2401.09135),
  as the HALoS authors transcribe the paper's pseudocode
  (`utnslab/halos`, `src/halos/opt.py`, `DelayedNesterovOptimizer`): at
  the N-th update `θ ← θ − ε ((1 − cN + c) β m + g_t / N)`, between them
  `θ ← θ − ε (c β m + g_t / N)`, with `c` the pseudocode's "momentum
  activation"; DN proper is `c = 0`, the formula above (a second
  implementation, Forgather's, agrees). The public toy notebook
  `google-deepmind/asyncdiloco` has only a simpler variant (`delayed_sgd`:
  sum N pseudo-gradients, then one outer step), not DN.

  Like every optax transformation it takes gradients and returns updates
  to add: on the server (`server_rule`) the pseudo-gradient is the negated
  increment, `−Δ` for AGN's commit `Δ` (the paper's worker sends
  `θ_start − θ_end`, the same sign).

  Args:
    learning_rate: `ε`, > 0.
    momentum: `β`, in [0, 1).
    every: `N`, updates between momentum updates, an integer >= 1.

  Returns:
    An `optax.GradientTransformation` with a `DelayedNesterovState`.

  Example:
    >>> import jax.numpy as jnp
    >>> from agn_jax.strategies import delayed_nesterov
    >>> tx = delayed_nesterov(1.0, momentum=0.5, every=2)
    >>> state = tx.init(jnp.zeros(1))
    >>> u1, state = tx.update(jnp.ones(1), state)  # −g/2
    >>> u2, state = tx.update(jnp.ones(1), state)  # −(g/2 + β m), m = 1
    >>> u1, u2
    (Array([-0.5], dtype=float32), Array([-1.], dtype=float32))

  References:
    Liu, Douillard, Kale, Rusu, Shen, Szlam, Ranzato, `Asynchronous Local-SGD
    Training for Language Modeling <https://arxiv.org/abs/2401.09135>`_,
    2024.
  """
  if not learning_rate > 0:
    raise ValueError(f"server_learning_rate must be > 0, got {learning_rate!r}")
  if not 0 <= momentum < 1:
    raise ValueError(f"server_momentum must be in [0, 1), got {momentum!r}")
  _check_every(every)

  def init_fn(params):
    # Two trees of zeros, not one twice: a donated state must not alias.
    return DelayedNesterovState(jnp.zeros([], jnp.int32),
                                optax.tree_utils.tree_zeros_like(params),
                                optax.tree_utils.tree_zeros_like(params))

  def update_fn(updates, state, params=None):
    del params
    milestone = state.count == every - 1
    accumulated = jax.tree.map(lambda a, g: a + g, state.accumulated, updates)
    moment = jax.tree.map(
        lambda m, a: jnp.where(milestone, momentum * m + a / every,
                               m).astype(m.dtype),
        state.momentum, accumulated)
    new_updates = jax.tree.map(
        lambda g, m: (-learning_rate * (g / every + jnp.where(
            milestone, momentum * m, jnp.zeros_like(m)))).astype(g.dtype),
        updates, moment)
    accumulated = jax.tree.map(
        lambda a: jnp.where(milestone, jnp.zeros_like(a), a), accumulated)
    count = jnp.where(milestone, 0, state.count + 1).astype(jnp.int32)
    return new_updates, DelayedNesterovState(count, moment, accumulated)

  return optax.GradientTransformation(init_fn, update_fn)


# The DiLoCo-style outer optimizers `--server_optimizer` names. Each builder's
# parameters are the settings that optimizer reads: the one declaration that
# building it (`make_server_optimizer`), the config's choices and help, and
# the summary line of `experiments.train` read (`SERVER_OPTIMIZER_SETTINGS`).
_SERVER_OPTIMIZERS: Dict[str, Callable[..., Optional[
    optax.GradientTransformation]]] = {
    "none": lambda: None,
    "sgd": lambda server_learning_rate: optax.sgd(server_learning_rate),
    "nesterov": lambda server_learning_rate, server_momentum: optax.sgd(
        server_learning_rate, momentum=server_momentum, nesterov=True),
    "delayed_nesterov": (
        lambda server_learning_rate, server_momentum, server_every:
        delayed_nesterov(server_learning_rate, server_momentum, server_every)),
}
SERVER_OPTIMIZERS = tuple(_SERVER_OPTIMIZERS)
# server optimizer -> the settings it reads, e.g. nesterov:
# (server_learning_rate, server_momentum).
SERVER_OPTIMIZER_SETTINGS: Dict[str, Tuple[str, ...]] = {
    name: tuple(inspect.signature(build).parameters)
    for name, build in _SERVER_OPTIMIZERS.items()}


def server_optimizers_using(setting: str) -> Tuple[str, ...]:
  """The server optimizers that read `setting` (`SERVER_OPTIMIZER_SETTINGS`).

  Example:
    >>> server_optimizers_using("server_momentum")
    ('nesterov', 'delayed_nesterov')
    >>> SERVER_OPTIMIZER_SETTINGS["sgd"]
    ('server_learning_rate',)
  """
  return tuple(name for name, used in SERVER_OPTIMIZER_SETTINGS.items()
               if setting in used)


def make_server_optimizer(name: str, learning_rate: float = 0.7,
                          momentum: float = 0.9, every: int = 1
                         ) -> Optional[optax.GradientTransformation]:
  """The outer optimizer named by `--server_optimizer`: one of `SERVER_OPTIMIZERS`.

  DiLoCo's own setting is `nesterov` with learning rate 0.7 and momentum 0.9.
  `delayed_nesterov` (Liu, Douillard et al. 2024, see `delayed_nesterov`)
  updates its momentum once every `every` commits (`--server_every`). Each
  is given only the settings it reads (`SERVER_OPTIMIZER_SETTINGS`); all
  three are checked whatever the optimizer, as the config checks them.
  """
  _check_every(every)
  if name not in _SERVER_OPTIMIZERS:
    raise ValueError(f"server_optimizer must be one of "
                     f"{', '.join(SERVER_OPTIMIZERS)}, got {name!r}")
  if name == "none":
    return None
  _check_positive(server_learning_rate=learning_rate)
  settings = dict(server_learning_rate=learning_rate,
                  server_momentum=momentum, server_every=every)
  return _SERVER_OPTIMIZERS[name](**{
      k: settings[k] for k in SERVER_OPTIMIZER_SETTINGS[name]})
