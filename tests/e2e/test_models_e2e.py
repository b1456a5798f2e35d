"""The end-to-end half of tests/unit/test_models.py: real processes, subprocesses or whole runs."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from agn_jax import models


@pytest.mark.parametrize("input_shape", [(8, 8, 1), (40, 1), (32,)])
def test_cnn_on_images_and_signals(input_shape):
  dim = int(np.prod(input_shape))
  model = models.create_model("cnn", 10, input_shape)
  assert isinstance(model, models.CNN)
  # One compiled program instead of many eagerly dispatched conv ops.
  logits = jax.jit(lambda rng, x: model.apply(
      models.init_params(model, rng, dim), x))(jax.random.key(0),
                                                jnp.ones((3, dim)))
  assert logits.shape == (3, 10)
  assert np.all(np.isfinite(logits))


def test_loss_is_differentiable_and_training_lowers_it():
  model = models.MLP((32,), 2)
  params = models.init_params(model, jax.random.key(0), 4)
  x = jax.random.normal(jax.random.key(1), (64, 4))
  y = (x[:, 0] > 0).astype(jnp.int32)
  loss_fn = models.classification_loss(model.apply)
  optimizer = optax.adam(1e-2)
  opt_state = optimizer.init(params)

  @jax.jit
  def step(params, opt_state):
    (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        params, (x, y))
    updates, opt_state = optimizer.update(grads, opt_state)
    return optax.apply_updates(params, updates), opt_state, loss, aux

  first = None
  for _ in range(100):
    params, opt_state, loss, aux = step(params, opt_state)
    first = loss if first is None else first
  assert loss < 0.5 * first
  assert aux["accuracy"] > 0.9


@pytest.mark.parametrize("batch_size", [3, 1000])
def test_evaluate_agrees_with_the_loss_on_the_whole_split(batch_size):
  model = models.MLP((8,), 4)
  params = models.init_params(model, jax.random.key(0), 6)
  x = np.asarray(jax.random.normal(jax.random.key(2), (7, 6)))
  y = np.arange(7) % 4
  loss, accuracy = models.evaluate(model.apply, params, x, y, batch_size)
  assert isinstance(loss, float) and isinstance(accuracy, float)
  expected_loss, aux = models.classification_loss(model.apply)(params, (x, y))
  np.testing.assert_allclose(loss, expected_loss, rtol=1e-5)
  np.testing.assert_allclose(accuracy, aux["accuracy"], rtol=1e-6)
