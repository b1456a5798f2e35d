"""Every algorithm of the paper as a `Strategy`: worker transformation, server rule, protocol.

Pure and jittable; nothing here knows about processes. The runtime looks a
strategy up by name in the registry and follows its protocol.
"""

import dataclasses
import inspect
from typing import Any, Callable, Dict, Mapping, NamedTuple, Optional, Tuple

import jax
import jax.numpy as jnp
import optax

from agn_jax import transform

Commit = Dict[str, Any]  # "delta", plus "stale_center" for adag.
COMMIT_THEN_PULL = "commit_then_pull"
PULL_THEN_COMMIT = "pull_then_commit"


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
    apply: `apply(center, commit, server_state, staleness) -> (center,
      server_state)`; jittable; applies one commit.
  """

  init: Callable[[optax.Params], ServerState]
  apply: Callable[..., Tuple[optax.Params, ServerState]]


# Increments: `(center, commit, staleness) -> what the commit adds to the center`.


def add_increment(center, commit, staleness):
  """DOWNPOUR, AGN, AEASGD/EAMSGD: `θ̃ ← θ̃ + Δ`."""
  del center, staleness
  return commit["delta"]


def dynsgd_increment(center, commit, staleness):
  """DynSGD: `θ̃ ← θ̃ + Δ / (τ + 1)` with `τ` the commit's staleness."""
  del center
  scale = 1.0 / (jnp.asarray(staleness, jnp.float32) + 1.0)
  return jax.tree.map(lambda d: (d * scale).astype(d.dtype), commit["delta"])


def adag_increment(learning_rate: float):
  """The thesis' element-wise rule: `θ̃ ← θ̃ + Δ ⊘ (η⁻¹ (θ̃ − θ̃_stale)² + 1)`."""

  def increment(center, commit, staleness):
    del staleness
    return jax.tree.map(
        lambda c, d, s: (d / ((c - s)**2 / learning_rate + 1.0)).astype(d.dtype),
        center, commit["delta"], commit["stale_center"])

  return increment


def server_rule(increment: Callable[..., optax.Updates],
                outer: Optional[optax.GradientTransformation] = None
               ) -> ServerRule:
  """Builds a `ServerRule` from an increment and an optional outer optimizer.

  Without `outer` the center moves by the increment. With `outer` (DiLoCo
  style) the negated increment is a pseudo-gradient for `outer`, whose update
  moves the center; `optax.sgd(1.0)` therefore reproduces the plain rule.

  Args:
    increment: `(center, commit, staleness) -> increment` pytree.
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

  def apply(center, commit, state, staleness):
    inc = increment(center, commit, staleness)
    outer_state = state.outer_state
    if outer is not None:
      pseudo_grad = jax.tree.map(jnp.negative, inc)
      inc, outer_state = outer.update(pseudo_grad, outer_state, center)
    center = jax.tree.map(lambda c, i: (c + i).astype(c.dtype), center, inc)
    return center, ServerState(state.clock + 1, outer_state)

  return ServerRule(init, apply)


# Worker-side protocol functions. All are `(params, opt_state, center) -> ...`.


def delta_commit(params, opt_state, center):
  """Commit-then-pull strategies commit the window's (normalized) delta."""
  del center
  return {"delta": transform.commit_delta(opt_state)}, params, opt_state


def delta_and_center_commit(params, opt_state, center):
  """The thesis' element-wise rule also needs the center the worker pulled."""
  commit, params, opt_state = delta_commit(params, opt_state, center)
  return dict(commit, stale_center=center), params, opt_state


def reanchor_pull(params, opt_state, center):
  """Commit-then-pull strategies restart every window at the pulled center."""
  del params
  return transform.reanchor(opt_state, center)


def elastic_commit(alpha: float):
  """AEASGD/EAMSGD: `E = α (θ_k − θ̃)`, `θ_k ← θ_k − E`, commit `E`."""

  def commit(params, opt_state, center):
    elastic = jax.tree.map(lambda p, c: alpha * (p - c), params, center)
    params = jax.tree.map(lambda p, e: p - e, params, elastic)
    return {"delta": elastic}, params, opt_state

  return commit


def keep_pull(params, opt_state, center):
  """Elastic workers are never reset to the center."""
  del center
  return params, opt_state


@dataclasses.dataclass(frozen=True)
class Strategy:
  """One algorithm: what workers run, what the server applies, and in which order.

  Attributes:
    name: the registry name.
    communication_window: λ, local steps per commit.
    worker_transform: the optax transformation of the local steps.
    rule: the server rule.
    protocol: `"commit_then_pull"` (agn, downpour, dynsgd, adag: the worker
      commits, then restarts at a fresh pull) or `"pull_then_commit"` (aeasgd,
      eamsgd: the worker pulls, computes its elastic commit against it, and
      keeps its own parameters).
    payload: the keys of a commit, e.g. `("delta",)` or
      `("delta", "stale_center")`.
    commit_fn: `(params, opt_state, center) -> (commit, params, opt_state)`;
      `center` is the center pulled before the window (commit-then-pull) or
      just now (pull-then-commit).
    pull_fn: `(params, opt_state, center) -> (params, opt_state)`, run on every
      pulled center after the commit.
  """

  name: str
  communication_window: int
  worker_transform: optax.GradientTransformation
  rule: ServerRule
  protocol: str
  payload: Tuple[str, ...]
  commit_fn: Callable[..., Tuple[Commit, Any, Any]]
  pull_fn: Callable[..., Tuple[Any, Any]]

  def init_worker(self, center):
    """A worker's `(params, opt_state)` at a center it pulled first."""
    return center, self.worker_transform.init(center)


_REGISTRY: Dict[str, Callable[..., Strategy]] = {}
_PAPER_DEFAULTS: Dict[str, Dict[str, Any]] = {}


def register(name: str, paper_defaults: Optional[Mapping[str, Any]] = None):
  """Decorator that adds a strategy factory to the registry under `name`.

  Args:
    name: the registry name.
    paper_defaults: the `TrainConfig` settings PAPER.md gives this strategy
      (`worker_optimizer`, `learning_rate`, `momentum`, `rho`,
      `normalization`, as they apply); what `paper_defaults(name)` returns.
  """

  def wrap(factory):
    _REGISTRY[name] = factory
    _PAPER_DEFAULTS[name] = dict(paper_defaults or {})
    return factory

  return wrap


def available() -> Tuple[str, ...]:
  """The names in the registry, in registration order."""
  return tuple(_REGISTRY)


def _check_name(name: str) -> None:
  if name not in _REGISTRY:
    raise ValueError(
        f"unknown strategy {name!r}; available: {', '.join(_REGISTRY)}")


def paper_defaults(name: str) -> Dict[str, Any]:
  """The settings PAPER.md gives strategy `name`, as `TrainConfig` field values.

  A `TrainConfig` field left at None takes its value from here (see
  `TrainConfig.resolved`); a field a strategy has no paper value for is
  absent.

  Args:
    name: one of `available()`.

  Returns:
    A new dict, e.g. `{"worker_optimizer": "sgd", "learning_rate": 0.01,
    "rho": 5.0, ...}` for aeasgd.

  Raises:
    ValueError: for an unknown name.

  Example:
    >>> from agn_jax.strategies import paper_defaults
    >>> d = paper_defaults("eamsgd")
    >>> d["worker_optimizer"], d["learning_rate"], d["momentum"], d["rho"]
    ('momentum', 0.01, 0.9, 5.0)
  """
  _check_name(name)
  return dict(_PAPER_DEFAULTS[name])


def parameters(name: str) -> Tuple[str, ...]:
  """The keyword arguments strategy `name`'s factory takes.

  `build.build_strategy` passes a factory exactly these, so a setting a
  strategy does not have is never silently dropped inside the factory.

  Example:
    >>> from agn_jax.strategies import parameters
    >>> "rho" in parameters("aeasgd"), "rho" in parameters("agn")
    (True, False)
  """
  _check_name(name)
  return tuple(inspect.signature(_REGISTRY[name]).parameters)


def get_strategy(name: str, **kwargs) -> Strategy:
  """Builds the strategy registered under `name`.

  Args:
    name: one of `available()`: agn, downpour, aeasgd, eamsgd, dynsgd, adag.
    **kwargs: the factory's arguments (`parameters(name)`), e.g.
      `communication_window`, `inner` (the local optimizer; each strategy has
      PAPER.md's default), `learning_rate`, `rho` (aeasgd, eamsgd),
      `momentum` (eamsgd), `normalization` (agn, adag), `server_optimizer`
      (an optax transformation or None).

  Returns:
    A `Strategy`.

  Raises:
    ValueError: for an unknown name or a bad argument value.
    TypeError: for an argument the strategy does not take (a misspelled
      `comunication_window=` is an error, not a silent default).

  Example:
    >>> from agn_jax import get_strategy
    >>> s = get_strategy("agn", communication_window=10)
    >>> s.protocol, s.payload
    ('commit_then_pull', ('delta',))
  """
  _check_name(name)
  accepted = parameters(name)
  unknown = [key for key in kwargs if key not in accepted]
  if unknown:
    raise TypeError(
        f"strategy {name!r} takes no argument "
        f"{', '.join(repr(k) for k in unknown)}; it takes "
        f"{', '.join(accepted)}")
  return _REGISTRY[name](**kwargs)


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
      protocol=COMMIT_THEN_PULL,
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


def _elastic(name, communication_window, inner, learning_rate, rho,
             server_optimizer):
  _check_positive(learning_rate=learning_rate, rho=rho)
  if isinstance(communication_window, bool) or not isinstance(
      communication_window, int) or communication_window < 1:
    raise ValueError("communication_window must be an integer >= 1, got "
                     f"{communication_window!r}")
  return Strategy(
      name=name,
      communication_window=communication_window,
      worker_transform=inner,
      rule=server_rule(add_increment, server_optimizer),
      protocol=PULL_THEN_COMMIT,
      payload=("delta",),
      commit_fn=elastic_commit(rho * learning_rate),
      pull_fn=keep_pull)


@register("aeasgd", paper_defaults=dict(
    worker_optimizer="sgd", learning_rate=0.01, rho=5.0, normalization="none"))
def aeasgd_strategy(communication_window: int = 10,
                    inner: Optional[optax.GradientTransformation] = None,
                    learning_rate: float = 0.01,
                    rho: float = 5.0,
                    server_optimizer=None) -> Strategy:
  """Asynchronous EASGD: plain SGD locally, elastic commit `α (θ_k − θ̃)`, `α = ρη`."""
  return _elastic("aeasgd", communication_window,
                  inner or optax.sgd(learning_rate), learning_rate, rho,
                  server_optimizer)


@register("eamsgd", paper_defaults=dict(
    worker_optimizer="momentum", learning_rate=0.01, momentum=0.9, rho=5.0,
    normalization="none"))
def eamsgd_strategy(communication_window: int = 10,
                    inner: Optional[optax.GradientTransformation] = None,
                    learning_rate: float = 0.01,
                    rho: float = 5.0,
                    momentum: float = 0.9,
                    server_optimizer=None) -> Strategy:
  """EAMSGD: AEASGD whose local steps use momentum (μ = 0.9 by default)."""
  return _elastic("eamsgd", communication_window,
                  inner or optax.sgd(learning_rate, momentum=momentum),
                  learning_rate, rho, server_optimizer)


# The local optimizers `--worker_optimizer` names, and DiLoCo-style outer ones.
WORKER_OPTIMIZERS = ("adam", "sgd", "momentum")
SERVER_OPTIMIZERS = ("none", "sgd", "nesterov")


def make_worker_optimizer(name: str, learning_rate: float,
                          momentum: float = 0.9) -> optax.GradientTransformation:
  """The local optimizer named by `--worker_optimizer`: one of `WORKER_OPTIMIZERS`."""
  _check_positive(learning_rate=learning_rate)
  if name == "adam":
    return optax.adam(learning_rate)
  if name == "sgd":
    return optax.sgd(learning_rate)
  if name == "momentum":
    return optax.sgd(learning_rate, momentum=momentum)
  raise ValueError(f"worker_optimizer must be one of "
                   f"{', '.join(WORKER_OPTIMIZERS)}, got {name!r}")


def make_server_optimizer(name: str, learning_rate: float = 0.7,
                          momentum: float = 0.9
                         ) -> Optional[optax.GradientTransformation]:
  """The outer optimizer named by `--server_optimizer`: one of `SERVER_OPTIMIZERS`.

  DiLoCo's own setting is `nesterov` with learning rate 0.7 and momentum 0.9.
  """
  if name == "none":
    return None
  _check_positive(server_learning_rate=learning_rate)
  if name == "sgd":
    return optax.sgd(learning_rate)
  if name == "nesterov":
    return optax.sgd(learning_rate, momentum=momentum, nesterov=True)
  raise ValueError(f"server_optimizer must be one of "
                   f"{', '.join(SERVER_OPTIMIZERS)}, got {name!r}")
