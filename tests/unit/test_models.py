"""Tests for agn_jax.models: sizes, shapes, loss by hand, evaluation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agn_jax import models, transformer


def num_params(params) -> int:
  return sum(p.size for p in jax.tree.leaves(params))


def test_paper_mlp_has_4798010_parameters():
  model = models.MLP((1000, 2000, 1000), 10)
  # eval_shape: count without allocating the 19 MB of weights.
  shapes = jax.eval_shape(
      lambda rng: models.init_params(model, rng, 784), jax.random.key(0))
  assert num_params(shapes) == 4_798_010
  assert models.create_model("mlp", 10, (28, 28, 1)) == model


def test_mlp_flattens_extra_axes():
  model = models.MLP((16,), 3)
  params = models.init_params(model, jax.random.key(0), 12)
  x = jax.random.normal(jax.random.key(1), (5, 12))
  np.testing.assert_allclose(model.apply(params, x.reshape(5, 3, 4)),
                             model.apply(params, x), rtol=1e-6)
  assert model.apply(params, x).shape == (5, 3)


def test_create_model_rejects_unknown_names_and_shapes():
  with pytest.raises(ValueError, match="unknown model 'rnn'"):
    models.create_model("rnn", 10, (8, 8, 1))
  with pytest.raises(ValueError, match="input_shape"):
    models.create_model("cnn", 10, (2, 2, 2, 1))
  with pytest.raises(ValueError, match="hidden_sizes"):
    models.create_model("mlp", 10, (4,), hidden_sizes=(0,))


def test_the_model_list_is_what_create_model_builds():
  # The registry is the one list: the flags and the config ask it.
  assert models.MODELS == ("mlp", "cnn", "transformer")
  built = {name: type(models.create_model(name, 10, shape, (16,)))
           for name, shape in zip(models.MODELS, [(8, 8, 1)] * 2 + [(8,)])}
  assert built == {"mlp": models.MLP, "cnn": models.CNN,
                   "transformer": transformer.Transformer}
  with pytest.raises(ValueError, match="available: mlp, cnn, transformer, or "
                     "package.module:function"):
    models.create_model("resnet", 10, (8, 8, 1))


def test_classification_loss_matches_hand_computation():
  logits = jnp.array([[2.0, 0.0, 0.0], [0.0, 1.0, 3.0], [1.0, 1.0, 0.0]])
  labels = jnp.array([0, 1, 1])
  loss_fn = models.classification_loss(lambda params, x: x * params)
  loss, aux = loss_fn(jnp.float32(1.0), (logits, labels))
  log_probs = jax.nn.log_softmax(logits)
  expected = -(log_probs[0, 0] + log_probs[1, 1] + log_probs[2, 1]) / 3
  np.testing.assert_allclose(loss, expected, rtol=1e-6)
  # Row 3 ties between classes 0 and 1; argmax picks the first, so wrong.
  np.testing.assert_allclose(aux["accuracy"], 1 / 3, rtol=1e-6)


def test_evaluate_rejects_bad_input():
  model = models.MLP((8,), 4)
  params = models.init_params(model, jax.random.key(0), 6)
  with pytest.raises(ValueError, match="non-empty"):
    models.evaluate(model.apply, params, np.zeros((0, 6)), np.zeros(0))
  with pytest.raises(ValueError, match="batch_size"):
    models.evaluate(model.apply, params, np.zeros((2, 6)), np.zeros(2), 0)
