"""The thesis' model as Keras 2.0 built it: Keras' Adam and Adagrad, glorot_uniform kernels, and the paper configurations that turn them on.

The references are Keras 2.0.5's update rules (keras-team/keras, tag 2.0.5,
`keras/optimizers.py`) written out here in numpy, float64:

  Adam:    t ← t + 1;  lr_t = lr · sqrt(1 − β₂ᵗ) / (1 − β₁ᵗ)
           m ← β₁ m + (1 − β₁) g;  v ← β₂ v + (1 − β₂) g²
           θ ← θ − lr_t · m / (sqrt(v) + ε),  ε = 1e-8, m = v = 0 at first
  Adagrad: a ← a + g²;  θ ← θ − lr · g / (sqrt(a) + ε),  ε = 1e-8, a = 0 at first

and `Dense(kernel_initializer='glorot_uniform', bias_initializer='zeros')`:
kernels uniform on ±sqrt(6 / (fan_in + fan_out)), biases zero.
"""

import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from agn_jax import checkpoint, models, strategies
from agn_jax.errors import CheckpointError
from experiments.report import design
from tests.unit.test_checkpoint import NUM_EXAMPLES, run_config, write_resumable

# Three steps of gradients for four parameters: tiny ones (where ε decides
# the step), an ordinary one, and one that is zero at the first step.
GRADIENTS = np.array([[1e-8, -3e-9, 0.5, 0.0],
                      [2e-8, 1e-9, -0.2, 0.3],
                      [-1e-8, 4e-9, 0.1, -0.3]])


def _rate(lr, t):
  """`lr`, or a schedule's rate at step t (from 1): `lr(t − 1)`, the updates before it."""
  return float(lr(t - 1)) if callable(lr) else lr


def keras_adam_reference(gradients, lr, b1=0.9, b2=0.999, eps=1e-8):
  """θ after each step of Keras 2.0's `Adam.get_updates`, from θ = 0 (`lr`: a number or a schedule)."""
  theta = np.zeros(gradients.shape[1])
  m, v = np.zeros_like(theta), np.zeros_like(theta)
  out = []
  for t, g in enumerate(gradients, start=1):
    lr_t = _rate(lr, t) * np.sqrt(1 - b2**t) / (1 - b1**t)
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g**2
    theta = theta - lr_t * m / (np.sqrt(v) + eps)
    out.append(theta)
  return np.stack(out)


def keras_adagrad_reference(gradients, lr, eps=1e-8):
  """θ after each step of Keras 2.0's `Adagrad.get_updates`, from θ = 0 (`lr`: a number or a schedule)."""
  theta = np.zeros(gradients.shape[1])
  a = np.zeros_like(theta)
  out = []
  for t, g in enumerate(gradients, start=1):
    a = a + g**2
    theta = theta - _rate(lr, t) * g / (np.sqrt(a) + eps)
    out.append(theta)
  return np.stack(out)


def trajectory(tx, gradients, jit):
  """θ after each step of the optax transformation `tx`, from θ = 0."""
  params = jnp.zeros(gradients.shape[1], jnp.float32)
  state = tx.init(params)
  update = jax.jit(tx.update) if jit else tx.update
  out = []
  for g in gradients:
    updates, state = update(jnp.asarray(g, jnp.float32), state, params)
    params = optax.apply_updates(params, updates)
    out.append(np.asarray(params))
  return np.stack(out)


def checked_trajectory(name, lr, reference, jit, rtol):
  """θ after each step of `--worker_optimizer=name`, checked against `reference`."""
  got = trajectory(strategies.make_worker_optimizer(name, lr), GRADIENTS, jit)
  np.testing.assert_allclose(got, reference(GRADIENTS, lr), rtol=rtol,
                             atol=1e-12)
  return got


@pytest.mark.parametrize("jit", [False, True])
def test_keras_adam_takes_keras_steps(jit):
  lr = 1e-3
  # float32: 1 − β₂ᵗ loses about 1e-5 of itself.
  got = checked_trajectory("keras_adam", lr, keras_adam_reference, jit, 1e-4)
  # The first step of g = 1e-8 by hand: lr · sqrt(1e-3) g / (sqrt(1e-3) g + ε)
  # = 1e-3 · 3.1623e-10 / 1.03162e-8 = 3.0654e-5. optax's Adam, whose ε sits
  # beside the corrected sqrt(v̂) = g, steps lr · g / (g + ε) = 5e-4.
  assert got[0, 0] == pytest.approx(-3.0654e-5, rel=1e-4)
  optax_steps = trajectory(optax.adam(lr), GRADIENTS, jit)
  assert optax_steps[0, 0] == pytest.approx(-5e-4, rel=1e-4)
  # Where |g| ≫ ε the two agree: only where ε sits differs.
  np.testing.assert_allclose(got[:, 2:], optax_steps[:, 2:], rtol=1e-5)


@pytest.mark.parametrize("jit", [False, True])
def test_keras_adagrad_starts_its_accumulator_at_zero(jit):
  lr = 1e-2
  got = checked_trajectory("keras_adagrad", lr, keras_adagrad_reference, jit,
                           1e-5)
  # By hand: the first step is lr · g / (|g| + ε): -lr · sign(g) for g = 0.5,
  # and -lr / 2 for g = 1e-8 = ε; nothing for g = 0. Then parameter 3's
  # second step is lr · 0.3 / 0.3 (its accumulator held nothing before).
  np.testing.assert_allclose(got[0], [-lr / 2, lr * 3e-9 / 1.3e-8, -lr, 0],
                             rtol=1e-5)
  assert got[1, 3] == pytest.approx(-lr, rel=1e-5)
  # optax's Adagrad starts at 0.1: its first step on g = 0.5 is
  # lr · 0.5 / sqrt(0.35), on g = 1e-8 lr · 1e-8 / sqrt(0.1): about nothing.
  optax_steps = trajectory(optax.adagrad(lr), GRADIENTS, jit)
  np.testing.assert_allclose(optax_steps[0, [0, 2]],
                             [-lr * 1e-8 / np.sqrt(0.1 + 1e-7),
                              -lr * 0.5 / np.sqrt(0.35 + 1e-7)], rtol=1e-4)


def test_keras_optimizers_keep_optax_state_layouts():
  # The same arrays as optax's: a checkpoint cannot tell them apart, which is
  # why a resumed run must keep its worker_optimizer.
  params = {"w": jnp.zeros((2, 3)), "b": jnp.zeros(3)}
  for keras, ours in (("keras_adam", "adam"), ("keras_adagrad", "adagrad")):
    states = [strategies.make_worker_optimizer(name, 0.1).init(params)
              for name in (keras, ours)]
    assert jax.tree.structure(states[0]) == jax.tree.structure(states[1])
    assert ([x.shape for x in jax.tree.leaves(states[0])] ==
            [x.shape for x in jax.tree.leaves(states[1])])


@pytest.mark.parametrize("name, input_shape, hidden", [
    ("mlp", (784,), (300, 200)), ("cnn", (8, 8, 1), ())])
def test_keras_initializer_is_glorot_uniform_with_zero_biases(
    name, input_shape, hidden):
  model = models.create_model(name, 10, input_shape, hidden,
                              initializer="keras")
  params = models.init_params(model, jax.random.key(0), input_shape)
  flax_params = models.init_params(
      models.create_model(name, 10, input_shape, hidden), jax.random.key(0),
      input_shape)
  checked = 0
  for path, leaf in jax.tree_util.tree_leaves_with_path(params["params"]):
    leaf = np.asarray(leaf)
    if path[-1].key == "bias":
      assert not leaf.any()
      continue
    # Keras' fans (keras/initializers.py, _compute_fans): a conv kernel's
    # receptive field times its input and output channels.
    receptive = int(np.prod(leaf.shape[:-2]))
    fan_in, fan_out = leaf.shape[-2] * receptive, leaf.shape[-1] * receptive
    bound = np.sqrt(6 / (fan_in + fan_out))
    assert np.abs(leaf).max() <= bound
    if leaf.size >= 10_000:  # Enough draws to pin the distribution.
      assert np.abs(leaf).max() > 0.99 * bound
      assert leaf.var() == pytest.approx(bound**2 / 3, rel=0.03)
      checked += 1
  assert checked >= 1
  # flax's lecun_normal is another distribution (variance 1 / fan_in).
  first = jax.tree.leaves(params)[1], jax.tree.leaves(flax_params)[1]
  assert first[0].shape == first[1].shape
  assert not np.allclose(first[0], first[1])


def test_flax_initializer_is_the_models_own():
  model = models.create_model("mlp", 3, (4,), (8,))
  assert model == models.MLP((8,), 3)
  with pytest.raises(ValueError, match="--initializer=keras is for the mlp "
                     "and the cnn; model 'transformer' takes no initializer"):
    models.create_model("transformer", 16, (8,), initializer="keras")
  with pytest.raises(ValueError, match="initializer must be one of flax, "
                     "keras, got 'he'"):
    models.create_model("mlp", 3, (4,), (8,), initializer="he")


@pytest.mark.parametrize("flagfiles", [
    ("paper_mnist_agn.flags",), ("paper_mnist_aeasgd.flags",)])
def test_the_paper_configurations_build_the_model_as_keras_did(flagfiles):
  flags = tuple(design.flagfile(f) for f in flagfiles)
  assert design.flag_value(flags, "initializer") == "keras"
  assert design.flag_value(flags, "worker_optimizer") == "keras_adam"


def test_the_cpu_study_keeps_the_model_its_committed_runs_had():
  p = design.preset("cpu")
  for run in p.runs:
    assert design.flag_value(run.argv(), "initializer") in (None, "flax")
    assert not str(design.flag_value(run.argv(), "worker_optimizer")
                   ).startswith("keras")


def test_the_study_runs_keras_models_and_downpour_both_keras_optimizers():
  p = design.preset("refit")
  grid = [r for r in p.runs if r.section == design.GRID]
  for run in (grid[0], grid[-1]):
    assert design.flag_value(run.argv(), "initializer") == "keras"
    assert design.flag_value(run.argv(), "worker_optimizer") == "keras_adam"
  downpour = {design.flag_value(r.argv(), "worker_optimizer")
              for r in p.runs if r.section == design.DOWNPOUR}
  assert {"keras_adam", "keras_adagrad"} <= downpour


@pytest.mark.parametrize("setting, value", [
    ("initializer", "keras"), ("worker_optimizer", "keras_adam")])
def test_a_resumed_run_keeps_its_initializer_and_optimizer(
    tmp_path, setting, value):
  write_resumable(tmp_path)
  with pytest.raises(CheckpointError, match=f"different run.*{setting}="):
    checkpoint.validate_for_resume(
        str(tmp_path), run_config(tmp_path, **{setting: value}), NUM_EXAMPLES)


def test_a_checkpoint_from_before_the_initializer_resumes_as_flax(tmp_path):
  meta_path = write_resumable(tmp_path)
  with open(meta_path) as f:
    meta = json.load(f)
  del meta["config"]["initializer"]
  with open(meta_path, "w") as f:
    json.dump(meta, f)
  checkpoint.validate_for_resume(str(tmp_path), run_config(tmp_path),
                                 NUM_EXAMPLES)
  with pytest.raises(CheckpointError, match="initializer='flax'; this run "
                     "has initializer='keras'"):
    checkpoint.validate_for_resume(
        str(tmp_path), run_config(tmp_path, initializer="keras"),
        NUM_EXAMPLES)
