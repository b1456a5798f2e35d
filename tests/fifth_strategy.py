"""A strategy written outside agn_jax, as a user would write one: the fixture of tests/{unit,e2e}/test_fifth_strategy*.py.

Each window is λ plain SGD steps from the center the worker pulled; the
worker commits half of what it moved, `(θ_k − θ̃)/2`; the server adds the
commit; the worker starts its next window at the center it pulls then.

Nothing in agn_jax names it. A run selects it by where it lives,
`TrainConfig(strategy="tests.fifth_strategy:half_delta")`, and every
process of the run (a spawned worker, a Ray actor) imports it from here, so
this module imports nothing from tests/ and needs only agn_jax, JAX and
optax.
"""

import jax
import optax

from agn_jax import strategies

NAME = "tests.fifth_strategy:half_delta"


def half_delta(communication_window: int = 10,
               learning_rate: float = 0.1) -> strategies.Strategy:
  """Commit half the window's delta; the server adds it.

  Example:
    >>> import jax.numpy as jnp
    >>> from agn_jax import get_strategy
    >>> from agn_jax.strategies import WorkerState
    >>> s = get_strategy(NAME, communication_window=1, learning_rate=1.0)
    >>> payload, _ = s.worker_commit(WorkerState(jnp.ones(2), None),
    ...                              center=jnp.zeros(2))
    >>> payload["delta"]
    Array([0.5, 0.5], dtype=float32)
  """
  sgd = optax.sgd(learning_rate)

  def commit(params, opt_state, center):
    half = jax.tree.map(lambda p, c: 0.5 * (p - c), params, center)
    return {"delta": half}, params, opt_state

  def restart(params, opt_state, center):
    del params, opt_state
    return center, sgd.init(center)

  return strategies.Strategy(
      name="half_delta",
      communication_window=communication_window,
      worker_transform=sgd,
      rule=strategies.server_rule(strategies.add_increment),
      pull_before_commit=False,
      payload=("delta",),
      commit_fn=commit,
      pull_fn=restart)


AVERAGING_NAME = "tests.fifth_strategy:pull_first_and_average"


def pull_first_and_average(communication_window: int = 10,
                           learning_rate: float = 0.1) -> strategies.Strategy:
  """Pull before the commit, commit a quarter of the way to the center, then average with the center received.

  Its `worker_receive` reads the center, and it pulls before its commit:
  the contract hands it the center its commit used (it does not pull
  again), not the one after the server applied the commit.
  """
  sgd = optax.sgd(learning_rate)

  def commit(params, opt_state, center):
    quarter = jax.tree.map(lambda p, c: 0.25 * (p - c), params, center)
    return {"delta": quarter}, params, opt_state

  def average(params, opt_state, center):
    return jax.tree.map(lambda p, c: 0.5 * (p + c), params, center), opt_state

  return strategies.Strategy(
      name="pull_first_and_average",
      communication_window=communication_window,
      worker_transform=sgd,
      rule=strategies.server_rule(strategies.add_increment),
      pull_before_commit=True,
      payload=("delta",),
      commit_fn=commit,
      pull_fn=average)
