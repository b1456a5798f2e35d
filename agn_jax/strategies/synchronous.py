"""Synchronous rounds: synchronous data-parallel training and DiLoCo, whose n commits the server applies together.

A synchronous strategy (`Strategy.synchronous`) runs in rounds. Every worker
starts its window from the same center and commits it; the server applies
the mean of the round's accepted commits in one step of its rule
(`synchronous_exchange`), and every worker receives the new center. Pure and
jittable like `base`; the simulator's synchronous round
(`agn_jax.sim.synchronous`) calls `synchronous_exchange`.

* `sync_data_parallel`: one local step a round (λ = 1). Worker k commits
  its mini-batch gradient, negated (`−g_k`), and the server steps the center
  with the workers' optimizer on the mean gradient,
  `θ̃ ← θ̃ + opt(mean_k g_k)`: the global batch is n × batch_size, as n
  asynchronous workers' one step each.
* `diloco` (Douillard et al. 2023, Algorithm 1): λ inner steps of the worker
  optimizer from the center (each worker keeps its optimizer's state across
  rounds), commit `Δ_k = θ_k − θ̃`, and the outer optimizer steps on the
  pseudo-gradient `−mean_k Δ_k`: Nesterov SGD, lr 0.7, momentum 0.9.

Example:
  >>> from agn_jax import get_strategy
  >>> s = get_strategy("diloco", communication_window=4)
  >>> s.synchronous, s.payload
  (True, ('delta',))
"""

from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import optax

from agn_jax import transform
from agn_jax.strategies.base import (Payload, ServerState, Strategy, _where,
                                     add_increment, delta_commit,
                                     reanchor_pull, server_rule)
from agn_jax.strategies.optimizers import make_server_optimizer
from agn_jax.strategies.registry import (available, get_strategy,
                                         parameters, register)


class LastGradient(NamedTuple):
  """State of `hold_gradient`.

  Attributes:
    gradient: the gradient of the last step.
  """
  gradient: optax.Updates


def hold_gradient() -> optax.GradientTransformation:
  """A worker step that keeps its gradient and leaves the parameters where they are.

  The worker of synchronous data-parallel training takes no step of its
  own: the server steps the center on the mean of the workers' gradients.

  Example:
    >>> import jax.numpy as jnp
    >>> tx = hold_gradient()
    >>> updates, state = tx.update(jnp.ones(2), tx.init(jnp.zeros(2)))
    >>> updates, state.gradient
    (Array([0., 0.], dtype=float32), Array([1., 1.], dtype=float32))
  """

  def init_fn(params):
    return LastGradient(optax.tree_utils.tree_zeros_like(params))

  def update_fn(updates, state, params=None):
    del state, params
    return optax.tree_utils.tree_zeros_like(updates), LastGradient(updates)

  return optax.GradientTransformation(init_fn, update_fn)


def gradient_commit(params, opt_state, center):
  """Synchronous data-parallel training commits `−g`, the increment of one SGD step of rate 1."""
  del center
  return ({"delta": jax.tree.map(jnp.negative, opt_state.gradient)}, params,
          opt_state)


def center_pull(params, opt_state, center):
  """The worker's replica becomes the center (the gradient it held is spent)."""
  del params
  return center, opt_state


@register("sync_data_parallel", paper_defaults=dict(
    worker_optimizer="adam", learning_rate=1e-3))
def sync_data_parallel_strategy(
    inner: Optional[optax.GradientTransformation] = None,
    learning_rate: float = 1e-3) -> Strategy:
  """Synchronous data-parallel training: every round one step of `inner` on the mean of n gradients.

  `inner` (the `--worker_optimizer`, default Adam at `learning_rate`) is
  what every replica of an all-reduce would run on the averaged gradient;
  here the server runs it once, on the center, and keeps its state.
  """
  return Strategy(
      name="sync_data_parallel", communication_window=1,
      worker_transform=hold_gradient(),
      rule=server_rule(add_increment, inner or optax.adam(learning_rate)),
      pull_before_commit=False, payload=("delta",),
      commit_fn=gradient_commit, pull_fn=center_pull,
      commit_reads_center=False, synchronous=True)


@register("diloco", paper_defaults=dict(
    worker_optimizer="adam", learning_rate=1e-3, normalization="none",
    server_optimizer="nesterov"))
def diloco_strategy(communication_window: int = 10,
                    inner: Optional[optax.GradientTransformation] = None,
                    learning_rate: float = 1e-3,
                    server_optimizer: Optional[
                        optax.GradientTransformation] = make_server_optimizer(
                            "nesterov")) -> Strategy:
  """DiLoCo (Douillard et al. 2023): λ inner steps per round, an outer step on the mean delta.

  The defaults are the paper's outer optimizer, Nesterov SGD with
  learning rate 0.7 and momentum 0.9 (`--server_optimizer=nesterov`);
  `server_optimizer=None` is plain model averaging (local SGD). The inner
  optimizer is Adam at `learning_rate` (the paper's is AdamW).

  References:
    Douillard, Feng, Rusu, Chhaparia, Donchev, Kuncoro, Ranzato, Szlam,
    Shen, `DiLoCo: Distributed Low-Communication Training of Language
    Models <https://arxiv.org/abs/2311.08105>`_, 2023.
  """
  return Strategy(
      name="diloco", communication_window=communication_window,
      worker_transform=transform.agn(inner or optax.adam(learning_rate),
                                     communication_window, "none"),
      rule=server_rule(add_increment, server_optimizer),
      pull_before_commit=False, payload=("delta",), commit_fn=delta_commit,
      pull_fn=reanchor_pull, commit_reads_center=False, synchronous=True)


def is_synchronous(name: str) -> bool:
  """Whether the registered strategy `name` runs in synchronous rounds (one outside this package: False).

  Example:
    >>> is_synchronous("diloco"), is_synchronous("agn")
    (True, False)
  """
  return name in available() and get_strategy(name).synchronous


def fit_error(config) -> Optional[str]:
  """Why a resolved `TrainConfig` cannot run its synchronous strategy, or None (an asynchronous one: None).

  A synchronous round needs every worker in lockstep on its own share, on
  the simulator: not the processes or Ray backends, Dynamic Local Updates,
  a shared stream or the per-commit instruments; and a clock that is not
  measured by a processes run (`--cluster=this_host`). A setting the strategy's
  factory does not take (sync_data_parallel's window, its server
  optimizer) must be the one it uses.
  """
  name = config.strategy
  if not is_synchronous(name):
    return None
  flag = f"--strategy={name}"
  if config.backend != "simulated":
    return (f"{flag} runs in synchronous rounds: it runs on the simulated "
            f"backend only (--backend=simulated), not "
            f"--backend={config.backend}")
  if config.dynamic_local_updates:
    return (f"{flag} runs every worker's window in lockstep: "
            "--dynamic_local_updates has no place in a synchronous round")
  if config.data_assignment == "stream":
    return (f"{flag}: every worker of a synchronous round trains on its own "
            "share; --data_assignment=stream is for asynchronous workers")
  if config.diagnostics:
    return (f"--diagnostics measures commits applied one at a time; {flag} "
            "applies a round's commits together")
  if getattr(config.options, "cluster", None) == "this_host":
    return (f"--cluster=this_host times a processes run of the strategy, "
            f"and {flag} has none: use --cluster=paper or none")
  taken = parameters(name)
  own = get_strategy(name)
  if ("communication_window" not in taken and
      config.communication_window != own.communication_window):
    return (f"{flag} takes {own.communication_window} local step a round: "
            f"it needs --communication_window={own.communication_window}, "
            f"got {config.communication_window}")
  if "server_optimizer" not in taken and config.server_optimizer != "none":
    return (f"{flag} steps the center with --worker_optimizer; it takes no "
            f"--server_optimizer, got {config.server_optimizer}")
  return None


class SynchronousRound(NamedTuple):
  """What `synchronous_exchange` returns.

  Attributes:
    state: the workers' states for their next windows, stacked.
    center: the center after the round.
    server_state: the server's state then; its clock counts the accepted
      commits (a round of a accepted commits moves it by a).
    accepted: [m] whether each worker's commit was taken into the mean.
    payload: the workers' payloads, stacked.
  """
  state: Any
  center: Any
  server_state: ServerState
  accepted: jax.Array
  payload: Payload


def _sum_over_workers(tree):
  return jax.tree.map(lambda a: jnp.sum(a, axis=0), tree)


def synchronous_exchange(strategy: Strategy, states, center,
                         server_state: ServerState,
                         total: Optional[Callable[[Any], Any]] = None
                        ) -> SynchronousRound:
  """One synchronous round's exchange: every worker commits, the server steps once on the mean, every worker receives (jittable).

  Each worker commits (`Strategy.worker_commit`, against the center they
  all pulled); a payload with a non-finite number is rejected
  (`Strategy.accepts`) and left out of the mean. The server applies the
  mean of the accepted payloads' decoded deltas through its rule once
  (staleness 0: nothing moved the center since the workers pulled it), and
  its clock moves by the accepted commits. Every worker then receives the
  new center (`Strategy.worker_receive`: a rejected one starts afresh
  there). A round without an accepted commit changes neither the center
  nor the server's state.

  Args:
    strategy: a synchronous `Strategy` whose payload is `("delta",)`.
    states: the workers' states after their windows, stacked on a leading
      axis.
    center: the center the workers pulled.
    server_state: the server's `ServerState`.
    total: `tree -> tree`, the sum of a stacked pytree over every worker of
      the round (the leading axis, and across devices where the workers
      are sharded); None: the sum over the leading axis.

  Returns:
    A `SynchronousRound`.

  Example:
    >>> import jax.numpy as jnp, optax
    >>> s = get_strategy("sync_data_parallel", inner=optax.sgd(0.5))
    >>> center = jnp.zeros(1)
    >>> states = jax.vmap(s.init_worker)(jnp.zeros((2, 1)))
    >>> states = states._replace(opt_state=LastGradient(  # Their gradients.
    ...     jnp.asarray([[1.0], [3.0]])))
    >>> out = synchronous_exchange(s, states, center, s.rule.init(center))
    >>> out.center, int(out.server_state.clock)  # −0.5 · mean(1, 3)
    (Array([-1.], dtype=float32), 2)
  """
  total = total or _sum_over_workers
  payload, committed = jax.vmap(strategy.worker_commit,
                                in_axes=(0, None))(states, center)
  accepted = jax.vmap(strategy.accepts)(payload)
  deltas = jax.vmap(lambda p: strategy.decompress(p, center)["delta"])(
      payload)

  def kept(d):  # A rejected delta's NaN must not reach the sum.
    mask = accepted.reshape(accepted.shape + (1,) * (d.ndim - 1))
    return jnp.where(mask, d, jnp.zeros_like(d))

  summed, count = total((jax.tree.map(kept, deltas),
                         accepted.astype(jnp.int32)))
  mean = jax.tree.map(
      lambda s: (s / jnp.maximum(count, 1)).astype(s.dtype), summed)
  stepped, after = strategy.rule.apply(center, {"delta": mean}, server_state,
                                       jnp.zeros([], jnp.int32))
  after = after._replace(clock=(server_state.clock + count).astype(
      server_state.clock.dtype))
  center, server_state = _where(count > 0, (stepped, after),
                                (center, server_state))
  state = jax.vmap(strategy.worker_receive, in_axes=(0, None, 0))(
      committed, center, accepted)
  return SynchronousRound(state, center, server_state, accepted, payload)
