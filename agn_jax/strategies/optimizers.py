"""The local and server optimizers the config names: `--worker_optimizer`, `--server_optimizer`, and Delayed Nesterov.

Example:
  >>> make_server_optimizer("none") is None
  True
  >>> WORKER_OPTIMIZERS[:2]
  ('adam', 'sgd')
"""

import inspect
from typing import Callable, Dict, NamedTuple, Optional, Tuple

import jax
import jax.numpy as jnp
import optax

from agn_jax.strategies.keras_optimizers import keras_adagrad, keras_adam


# The factories below and `make_*_optimizer` check the arguments they use,
# as optax's do: they are public (`get_strategy`), and a caller without a
# `TrainConfig` has nothing else to name a bad value. A config's values were
# checked already, by `TrainConfig.validate`.
def check_positive(**values):
  """Raises ValueError (one line) naming the first of `values` that is not > 0."""
  for key, value in values.items():
    if not value > 0:
      raise ValueError(f"{key} must be > 0, got {value!r}")



# The learning-rate schedules `--lr_schedule` names.
LR_SCHEDULES = ("constant", "cosine")


def learning_rate_schedule(learning_rate: float, lr_schedule: str = "constant",
                           warmup_steps: int = 0,
                           decay_steps: Optional[int] = None,
                           final_lr_fraction: float = 0.1
                          ) -> optax.ScalarOrSchedule:
  """The workers' learning rate at each of their local steps: `--lr_schedule`.

  With `η` = `learning_rate`, `W` = `warmup_steps`, `D` = `decay_steps`
  and `f` = `final_lr_fraction`, the rate of local step `t` (from 0: the
  count of the optimizer's updates before this one) is

      t < W:       η t / W                                (warm-up from 0)
      constant:    η                                      (t >= W)
      cosine:      f η + (1 − f) η (1 + cos(π (t − W) / (D − W))) / 2
                   for W <= t < D, and f η from D on

  optax's schedules compute it (`optax.linear_schedule`,
  `optax.warmup_cosine_decay_schedule`); the optimizer keeps the count `t`
  in its state (`optax.ScaleByScheduleState`), so every worker counts its
  own local steps and a checkpoint of its state holds where it is.
  `constant` without warm-up is the number `η` itself: the optimizer and
  its state are then exactly those of a run without a schedule.

  Args:
    learning_rate: `η`, the peak rate, > 0.
    lr_schedule: one of `LR_SCHEDULES`.
    warmup_steps: `W`, local steps of linear warm-up from 0, >= 0.
    decay_steps: `D`, the cosine's whole length, warm-up included (as
      optax counts it), > `W`; cosine only (constant takes None).
    final_lr_fraction: `f`, in [0, 1]: where the cosine ends, as a fraction
      of `η`.

  Returns:
    `η` (a float), or an `optax.Schedule`.

  Example:
    >>> lr = learning_rate_schedule(1.0, "cosine", warmup_steps=2,
    ...                             decay_steps=4, final_lr_fraction=0.0)
    >>> [round(float(lr(t)), 3) for t in range(6)]
    [0.0, 0.5, 1.0, 0.5, 0.0, 0.0]
  """
  check_positive(learning_rate=learning_rate)
  if lr_schedule not in LR_SCHEDULES:
    raise ValueError(f"lr_schedule must be one of {', '.join(LR_SCHEDULES)}, "
                     f"got {lr_schedule!r}")
  if isinstance(warmup_steps, bool) or not isinstance(
      warmup_steps, int) or warmup_steps < 0:
    raise ValueError(f"warmup_steps must be an integer >= 0, got "
                     f"{warmup_steps!r}")
  if lr_schedule == "constant":
    if decay_steps is not None:
      raise ValueError(f"decay_steps is the cosine's length: "
                       f"lr_schedule=constant takes none, got {decay_steps!r}")
    return (optax.linear_schedule(0.0, learning_rate, warmup_steps)
            if warmup_steps else learning_rate)
  if isinstance(decay_steps, bool) or not isinstance(
      decay_steps, int) or decay_steps <= warmup_steps:
    raise ValueError(f"decay_steps (the cosine's length, warm-up included) "
                     f"must be an integer > warmup_steps={warmup_steps}, got "
                     f"{decay_steps!r}")
  if not 0 <= final_lr_fraction <= 1:
    raise ValueError(f"final_lr_fraction must be in [0, 1], got "
                     f"{final_lr_fraction!r}")
  return optax.warmup_cosine_decay_schedule(
      0.0, learning_rate, warmup_steps, decay_steps,
      end_value=final_lr_fraction * learning_rate)


def _is_schedule_state(node) -> bool:
  return isinstance(node, optax.ScaleByScheduleState)


def at_schedule_step(opt_state: optax.OptState, step) -> optax.OptState:
  """`opt_state` with every schedule's count set to `step`: where a worker that restarts after `step` local steps resumes its schedule.

  A state without a schedule (`learning_rate_schedule`'s constant rate) is
  returned as it is. Jittable.

  Example:
    >>> tx = optax.sgd(learning_rate_schedule(1.0, "constant",
    ...                                       warmup_steps=4))
    >>> state = at_schedule_step(tx.init(jnp.zeros(1)), 2)
    >>> tx.update(jnp.ones(1), state)[0]  # The rate of step 2: 2/4.
    Array([-0.5], dtype=float32)
  """
  return jax.tree.map(
      lambda s: s._replace(count=jnp.asarray(step, s.count.dtype))
      if _is_schedule_state(s) else s, opt_state, is_leaf=_is_schedule_state)


def schedule_step(opt_state: optax.OptState) -> Optional[jax.Array]:
  """The count of the first schedule in `opt_state` (`at_schedule_step`), or None without one."""
  for node in jax.tree.leaves(opt_state, is_leaf=_is_schedule_state):
    if _is_schedule_state(node):
      return node.count
  return None


# The local optimizers `--worker_optimizer` names.
WORKER_OPTIMIZERS = ("adam", "sgd", "momentum", "nesterov", "adagrad",
                     "keras_adam", "keras_adagrad")


def make_worker_optimizer(name: str, learning_rate: optax.ScalarOrSchedule,
                          momentum: float = 0.9) -> optax.GradientTransformation:
  """The local optimizer named by `--worker_optimizer`: one of `WORKER_OPTIMIZERS`.

  `momentum` is heavy-ball momentum, `nesterov` Nesterov's (as optax
  writes it: on the look-ahead point, see `nesterov_anchor`); both use
  `momentum`. `adagrad` is optax's (initial accumulator 0.1), the
  optimizer of dist-keras' workflow notebook. `keras_adam` and
  `keras_adagrad` are Keras 2.0's, what the thesis' dist-keras workers ran
  (`agn_jax.strategies.keras_optimizers`: ε placed as Keras places it, and
  Adagrad's accumulator from 0); Keras' SGD, with or without (Nesterov)
  momentum, is optax's already. `learning_rate` is a number or a schedule
  of the local step (`learning_rate_schedule`).
  """
  if not callable(learning_rate):
    check_positive(learning_rate=learning_rate)
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
  if name == "keras_adam":
    return keras_adam(learning_rate)
  if name == "keras_adagrad":
    return keras_adagrad(learning_rate)
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
  check_positive(server_learning_rate=learning_rate)
  settings = dict(server_learning_rate=learning_rate,
                  server_momentum=momentum, server_every=every)
  return _SERVER_OPTIMIZERS[name](**{
      k: settings[k] for k in SERVER_OPTIMIZER_SETTINGS[name]})
