"""The strategies of the paper by name: the registry, the factories and their paper defaults.

Every backend looks a strategy up by name (in the registry, or a
`"package.module:function"` written outside this package: `check_name`).
"""

import inspect
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

import optax

from agn_jax import names, transform
from agn_jax.strategies.base import (Strategy, adag_increment,
                                     add_increment, delta_and_center_commit,
                                     delta_commit, dynsgd_increment,
                                     elastic_commit, keep_pull,
                                     nesterov_anchor, reanchor_pull,
                                     server_rule)
from agn_jax.strategies.optimizers import check_positive, make_worker_optimizer


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
    ValueError: unknown strategy 'sgdx'; available: agn, downpour, dynsgd, adag, aeasgd, eamsgd, sync_data_parallel, diloco, or package.module:function
  """
  _factory(name)


def _factory(name: str) -> Callable[..., Strategy]:
  return names.lookup("strategy", name, _REGISTRY)


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
    name: one of `available()`: agn, downpour, aeasgd, eamsgd, dynsgd, adag,
      the synchronous sync_data_parallel and diloco
      (`agn_jax.strategies.synchronous`); or a strategy outside this
      package, `"package.module:function"`
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


def _commit_then_pull(name, communication_window, inner, normalization,
                      increment, server_optimizer, commit_fn=delta_commit,
                      payload=("delta",), commit_reads_center=False):
  return Strategy(
      name=name,
      communication_window=communication_window,
      worker_transform=transform.agn(inner, communication_window,
                                     normalization),
      rule=server_rule(increment, server_optimizer),
      pull_before_commit=False,
      payload=payload,
      commit_fn=commit_fn,
      pull_fn=reanchor_pull,
      commit_reads_center=commit_reads_center)


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
  check_positive(learning_rate=learning_rate)
  return _commit_then_pull("adag", communication_window,
                           inner or optax.adam(learning_rate), normalization,
                           adag_increment(learning_rate), server_optimizer,
                           commit_fn=delta_and_center_commit,
                           payload=("delta", "stale_center"),
                           commit_reads_center=True)


def _elastic(name, communication_window, inner, rho, elastic_learning_rate,
             server_optimizer, anchor=None):
  check_positive(rho=rho, elastic_learning_rate=elastic_learning_rate)
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
      pull_fn=keep_pull,
      # It reads only the center it pulls just before its commit.
      commit_reads_center=False)


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
  check_positive(learning_rate=learning_rate)
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
