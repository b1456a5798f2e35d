"""The workers' learning-rate schedule (`--lr_schedule`, `--warmup_steps`, `--decay_steps`, `--final_lr_fraction`).

The references are written out here: with peak rate η, warm-up W, length D
and final fraction f, local step t (from 0) takes

  t < W:       η t / W
  W <= t < D:  f η + (1 − f) η (1 + cos(π (t − W) / (D − W))) / 2   (cosine)
  t >= D:      f η                                                   (cosine)
  t >= W:      η                                                     (constant)

and SGD on `½ |θ − x_t|²` steps `θ ← θ − rate(t) (θ − x_t)`, in numpy.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agn_jax import build, strategies, window_kernel
from agn_jax.config import TrainConfig
from agn_jax.strategies import WorkerState
from tests.unit.test_keras import (checked_trajectory, keras_adagrad_reference,
                                   keras_adam_reference)

ETA, W, D, F = 0.3, 3, 8, 0.2


def rate(t, eta=ETA, warmup=W, decay=D, final=F, cosine=True):
  """The schedule's rate at local step t, from the formula above."""
  if t < warmup:
    return eta * t / warmup
  if not cosine:
    return eta
  if t >= decay:
    return final * eta
  return final * eta + (1 - final) * eta * (
      1 + math.cos(math.pi * (t - warmup) / (decay - warmup))) / 2


def test_the_rate_at_chosen_steps_is_the_formula():
  cosine = strategies.learning_rate_schedule(ETA, "cosine", W, D, F)
  steps = [0, 1, 2, 3, 4, 5, 7, 8, 9, 100]
  np.testing.assert_allclose([float(cosine(t)) for t in steps],
                             [rate(t) for t in steps], rtol=1e-6, atol=1e-9)
  # Worked by hand: a third of the way up; the peak; the cosine's midpoint
  # (t − W = (D − W) / 2) halfway between η and f η; the floor.
  assert float(cosine(1)) == pytest.approx(0.1)
  assert float(cosine(3)) == pytest.approx(0.3)
  one_to_one = strategies.learning_rate_schedule(1.0, "cosine", 2, 6, 0.2)
  assert float(one_to_one(4)) == pytest.approx(0.6)
  assert float(one_to_one(6)) == pytest.approx(0.2)
  warm = strategies.learning_rate_schedule(ETA, "constant", warmup_steps=4)
  np.testing.assert_allclose([float(warm(t)) for t in range(7)],
                             [rate(t, warmup=4, cosine=False)
                              for t in range(7)], rtol=1e-6)
  # No warm-up, no schedule: the number itself, so today's runs (and
  # their optimizer states, their checkpoints) are what they were.
  assert strategies.learning_rate_schedule(ETA) == ETA


@pytest.mark.parametrize("args, message", [
    (("cosine", 0, None), "decay_steps"),
    (("cosine", 8, 8), "decay_steps"),
    (("constant", 0, 8), "takes none"),
    (("linear", 0, None), "lr_schedule"),
])
def test_a_schedule_that_does_not_fit_is_refused(args, message):
  with pytest.raises(ValueError, match=message):
    strategies.learning_rate_schedule(ETA, *args)


def _config(**changes):
  values = dict(strategy="downpour", worker_optimizer="sgd", learning_rate=ETA,
                lr_schedule="cosine", warmup_steps=W, decay_steps=D,
                final_lr_fraction=F, communication_window=10)
  values.update(changes)
  return TrainConfig(**values)


def _loss_fn(params, x):
  return 0.5 * jnp.sum((params - x)**2), {}


def test_one_sgd_worker_follows_the_schedule_step_by_step():
  # The run's own strategy (`build_strategy`), one window of λ = 10 steps
  # through the window kernel: warm-up, cosine and floor, in one window.
  # DOWNPOUR's window ends where its local steps do (AGN's divides by λ).
  strategy = build.build_strategy(_config())
  rng = np.random.default_rng(0)
  theta0 = rng.normal(size=3).astype(np.float32)
  xs = rng.normal(size=(10, 3)).astype(np.float32)
  kernel = window_kernel(_loss_fn, strategy.worker_transform, donate=False)
  result = kernel(*strategy.init_worker(jnp.asarray(theta0)), jnp.asarray(xs))
  theta = theta0.astype(np.float64)
  for t, x in enumerate(xs):
    theta = theta - rate(t) * (theta - x)
  np.testing.assert_allclose(np.asarray(result.params), theta, rtol=1e-5,
                             atol=1e-6)
  assert int(strategies.schedule_step(result.opt_state)) == 10
  # The pull after a commit keeps the count, and so does the fresh start
  # after a rejected commit: the steps taken stay taken.
  payload, state = strategy.worker_commit(
      WorkerState(result.params, result.opt_state), jnp.asarray(theta0))
  del payload
  for accepted in (True, False, jnp.asarray(False)):
    after = strategy.worker_receive(state, jnp.asarray(theta0), accepted)
    assert int(strategies.schedule_step(after.opt_state)) == 10, accepted


@pytest.mark.parametrize("name, reference", [
    ("keras_adam", keras_adam_reference),
    ("keras_adagrad", keras_adagrad_reference)])
def test_keras_optimizers_take_the_rate_of_their_own_step(name, reference):
  # Keras' Adam counts t from 1 (its bias corrections); its t-th update
  # takes the schedule's rate at t − 1, as optax's do.
  schedule = strategies.learning_rate_schedule(0.1, "cosine", 1, 3, 0.5)
  checked_trajectory(name, schedule, reference, jit=True, rtol=1e-4)


def test_a_restarted_worker_resumes_its_schedule():
  # What a processes worker restarted after `done` local steps does.
  tx = strategies.make_worker_optimizer(
      "sgd", strategies.learning_rate_schedule(ETA, "cosine", W, D, F))
  state = strategies.at_schedule_step(tx.init(jnp.zeros(1)), 5)
  updates, state = jax.jit(tx.update)(jnp.ones(1), state)
  assert float(updates[0]) == pytest.approx(-rate(5), rel=1e-6)
  assert int(strategies.schedule_step(state)) == 6
  plain = strategies.make_worker_optimizer("sgd", ETA).init(jnp.zeros(1))
  assert strategies.schedule_step(plain) is None


@pytest.mark.parametrize("changes, message", [
    (dict(decay_steps=None), "lr_schedule=cosine needs decay_steps"),
    (dict(warmup_steps=8), "warmup_steps=8 must be less than decay_steps=8"),
    (dict(lr_schedule="constant"), "lr_schedule=constant takes none"),
    (dict(strategy="eamsgd", worker_optimizer=None, decay_steps=None,
          lr_schedule="constant"), "eamsgd"),
])
def test_the_config_refuses_a_schedule_that_does_not_fit(changes, message):
  with pytest.raises(ValueError, match=message) as e:
    _config(**changes).validate()
  assert "\n" not in str(e.value)
