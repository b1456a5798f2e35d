"""The models by name: the paper's MLP, a small CNN (flax.linen), the language model's transformer; classification's loss and evaluation."""

import functools
from typing import Any, Callable, Dict, Sequence, Tuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from agn_jax import names
from agn_jax import tasks
from agn_jax.kept import kept

PAPER_HIDDEN_SIZES = (1000, 2000, 1000)
# How the MLP's and the CNN's parameters start (`--initializer`): flax.linen's
# defaults (lecun_normal kernels, zero biases), or Keras 2.0's
# (`Dense(kernel_initializer='glorot_uniform', bias_initializer='zeros')`,
# and the same for `Conv2D`; keras-team/keras 2.0.5, keras/layers/core.py),
# which the thesis' dist-keras MLP had. Both start the biases at zero.
INITIALIZERS = ("flax", "keras")
_KERNEL_INITS = {"flax": nn.linear.default_kernel_init,
                 "keras": nn.initializers.glorot_uniform()}

Params = Any
ApplyFn = Callable[[Params, jax.Array], jax.Array]
Batch = Tuple[jax.Array, jax.Array]


class MLP(nn.Module):
  """Fully connected ReLU network returning logits.

  The paper's network is `MLP((1000, 2000, 1000), 10)` on 784 inputs
  (4,798,010 parameters).

  Attributes:
    hidden_sizes: widths of the hidden layers.
    num_classes: number of output logits.
    initializer: how the kernels start, one of `INITIALIZERS`.
  """
  hidden_sizes: Sequence[int]
  num_classes: int
  initializer: str = "flax"

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    dense = functools.partial(nn.Dense,
                              kernel_init=_KERNEL_INITS[self.initializer])
    x = x.reshape((x.shape[0], -1))
    for width in self.hidden_sizes:
      x = nn.relu(dense(width)(x))
    return dense(self.num_classes)(x)


class CNN(nn.Module):
  """Two conv/pool blocks and a dense layer, on 2-D images or 1-D signals.

  The flat input is reshaped to `input_shape`; a shape of rank 3 (`H, W, C`)
  gets 3x3 convolutions, rank 2 (`L, C`) gets width-5 convolutions and a rank-1
  shape `(L,)` is read as one channel.

  Attributes:
    num_classes: number of output logits.
    input_shape: per-example shape with a trailing channel axis.
    features: channels of the two convolutions.
    dense_size: width of the hidden dense layer.
    initializer: how the kernels start, one of `INITIALIZERS`.
  """
  num_classes: int
  input_shape: Tuple[int, ...]
  features: Tuple[int, int] = (32, 64)
  dense_size: int = 128
  initializer: str = "flax"

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    shape = tuple(self.input_shape)
    if len(shape) == 1:
      shape += (1,)
    spatial = len(shape) - 1
    x = x.reshape((x.shape[0],) + shape)
    kernel = (3, 3) if spatial == 2 else (5,) * spatial
    kernel_init = _KERNEL_INITS[self.initializer]
    for width in self.features:
      x = nn.relu(nn.Conv(width, kernel, kernel_init=kernel_init)(x))
      # SAME padding keeps odd sizes (e.g. 7x7 after one pool) from shrinking
      # to nothing on small inputs such as the 8x8 digits.
      x = nn.max_pool(x, (2,) * spatial, (2,) * spatial, padding="SAME")
    x = x.reshape((x.shape[0], -1))
    x = nn.relu(nn.Dense(self.dense_size, kernel_init=kernel_init)(x))
    return nn.Dense(self.num_classes, kernel_init=kernel_init)(x)


def _mlp(num_classes, input_shape, hidden_sizes, initializer):
  del input_shape  # The MLP takes flat inputs of any width.
  if any(int(w) < 1 for w in hidden_sizes):
    raise ValueError(f"hidden_sizes must be positive, got {hidden_sizes}")
  return MLP(tuple(int(w) for w in hidden_sizes), int(num_classes),
             initializer)


def _cnn(num_classes, input_shape, hidden_sizes, initializer):
  del hidden_sizes  # The CNN has its own fixed widths.
  if not 1 <= len(input_shape) <= 3:
    raise ValueError(f"input_shape must have rank 1 to 3 for the cnn, got "
                     f"{tuple(input_shape)}")
  return CNN(int(num_classes), tuple(int(d) for d in input_shape),
             initializer=initializer)


def _transformer(num_classes, input_shape, hidden_sizes):
  del hidden_sizes  # Its sizes are create_transformer's defaults.
  if len(input_shape) != 1:
    raise ValueError(f"the transformer reads token sequences, input_shape "
                     f"(seq_len,); got {tuple(input_shape)}")
  from agn_jax import transformer  # pylint: disable=g-import-not-at-top
  return transformer.create_transformer(int(input_shape[0]),
                                        vocab_size=int(num_classes))


# name -> builder(num_classes, input_shape, hidden_sizes); the model registry.
_BUILDERS = {"mlp": _mlp, "cnn": _cnn, "transformer": _transformer}
MODELS = tuple(_BUILDERS)


def check_name(name: str) -> None:
  """Raises `ValueError` (one line) unless `name` names a model: one of `MODELS`, or a factory written outside this package.

  A model outside this package is named by where its factory lives,
  `"package.module:function"` (`agn_jax.names`); every process of a run
  imports it from there. The factory takes any of `num_classes`,
  `input_shape` and `hidden_sizes` by name (the dataset's and the
  config's, `create_model`) and returns a flax module.

  Example:
    >>> check_name("agn_jax.models:MLP")
    >>> check_name("rnn")
    Traceback (most recent call last):
    ...
    ValueError: unknown model 'rnn'; available: mlp, cnn, transformer, or package.module:function
  """
  names.lookup("model", name, _BUILDERS)


def create_model(
    name: str,
    num_classes: int,
    input_shape: Sequence[int],
    hidden_sizes: Sequence[int] = PAPER_HIDDEN_SIZES,
    initializer: str = "flax",
) -> nn.Module:
  """Builds a model by name.

  Args:
    name: one of `MODELS` (`"mlp"`, `"cnn"`, `"transformer"`), or a factory
      written outside this package, `"package.module:function"`
      (`check_name`), called with those of `num_classes`, `input_shape` and
      `hidden_sizes` it takes.
    num_classes: the model's outputs (`Dataset.num_classes`: classes, the
      transformer's vocabulary, or a user's dataset's output width).
    input_shape: per-example shape with a channel axis (used by the CNN),
      or `(seq_len,)` for the transformer
      (`agn_jax.transformer.create_transformer`'s other sizes).
    hidden_sizes: hidden widths of the MLP (ignored by the others).
    initializer: how the parameters start, one of `INITIALIZERS`: either
      for a model whose factory takes `initializer` (the mlp, the cnn), only
      "flax" (the model's own) for another.

  Returns:
    The flax module. It takes a batch of the training inputs as the dataset
    holds them (`[B, D]` flat float32 for this package's datasets).

  Raises:
    ValueError: one line: an unknown name, a bad size, an initializer the
      model does not take, or a factory that raises or returns no flax
      module.

  Example:
    >>> model = create_model("mlp", 10, (8, 8, 1), hidden_sizes=(32,))
    >>> type(model).__name__
    'MLP'
  """
  builder = names.lookup("model", name, _BUILDERS)
  if initializer not in INITIALIZERS:
    raise ValueError(f"initializer must be one of {', '.join(INITIALIZERS)}, "
                     f"got {initializer!r}")
  if initializer != "flax" and not {"initializer", "**"} & set(
      names.parameters(builder)):
    raise ValueError(f"--initializer={initializer} is for the mlp and the "
                     f"cnn; model {name!r} takes no initializer")
  try:
    model = names.call_with(builder, num_classes=num_classes,
                            input_shape=tuple(input_shape),
                            hidden_sizes=tuple(hidden_sizes),
                            initializer=initializer)
  except Exception as e:  # pylint: disable=broad-except
    if name in _BUILDERS:
      raise  # This package's own say what is wrong in one line.
    raise ValueError(names.raised("model", name, e)) from e
  if not isinstance(model, nn.Module):
    raise ValueError(f"model {name!r}: its factory returned a "
                     f"{type(model).__name__}, not a flax Module")
  return model


def init_params(model: nn.Module, rng: jax.Array, input_dim,
                dtype=jnp.float32) -> Params:
  """Initializes a model for inputs of `input_dim` features.

  Args:
    model: a module from `create_model`.
    rng: a `jax.random` key.
    input_dim: number of features per (flattened) example, or the shape of
      one example's inputs as the dataset holds them (`x_train.shape[1:]`).
    dtype: the inputs' dtype (`x_train.dtype`; float32 for this package's
      datasets, integer token ids, say, for a user's).

  Returns:
    The variables dict `{"params": ...}` that `model.apply` takes, so
    `model.apply` itself is the `apply_fn` of `classification_loss` and
    `evaluate`.

  Example:
    >>> model = MLP((1000, 2000, 1000), 10)
    >>> params = init_params(model, jax.random.key(0), 784)
    >>> sum(p.size for p in jax.tree.leaves(params))
    4798010
  """
  shape = ((int(input_dim),) if isinstance(input_dim, (int, np.integer))
           else tuple(int(d) for d in input_dim))
  # Jitted: one compiled program instead of every initializer's operations
  # dispatched one by one (a transformer's: seconds). The MLP's and the
  # CNN's parameters are bit for bit the eager ones.
  return _jitted_init(model)(rng, jnp.zeros((1,) + shape, dtype))


# One per model (modules are frozen dataclasses: equal settings, equal
# modules), so a process's later runs of a model reuse its traced program.
@kept
def _jitted_init(model: nn.Module):
  return jax.jit(model.init)


def classification_loss(
    apply_fn: ApplyFn,
) -> Callable[[Params, Batch], Tuple[jax.Array, Dict[str, jax.Array]]]:
  """Mean softmax cross-entropy with integer labels, plus accuracy.

  Args:
    apply_fn: `apply_fn(params, x) -> logits`, e.g. `model.apply`.

  Returns:
    `loss_fn(params, (x, y)) -> (loss, {"accuracy": accuracy})`, suitable for
    `jax.value_and_grad(loss_fn, has_aux=True)`.

  Example:
    >>> model = MLP((8,), 3)
    >>> params = init_params(model, jax.random.key(0), 4)
    >>> loss_fn = classification_loss(model.apply)
    >>> loss, aux = loss_fn(params, (jnp.ones((2, 4)), jnp.array([0, 2])))
    >>> sorted(aux)
    ['accuracy']
  """

  def loss_fn(params: Params, batch: Batch):
    x, y = batch
    logits = apply_fn(params, x)
    y = y.astype(jnp.int32)
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
    accuracy = jnp.mean(jnp.argmax(logits, axis=-1) == y)
    return loss, {"accuracy": accuracy}

  return loss_fn


@functools.partial(jax.jit, static_argnums=0)
def _evaluate_batches(apply_fn, params, xs, ys, mask):
  """Sums loss and correct predictions over `[num_batches, batch, ...]`."""

  def one_batch(carry, batch):
    x, y, m = batch
    logits = apply_fn(params, x)
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, y)
    correct = (jnp.argmax(logits, axis=-1) == y).astype(jnp.float32)
    carry = (carry[0] + jnp.sum(losses * m), carry[1] + jnp.sum(correct * m))
    return carry, None

  zero = jnp.zeros([], jnp.float32)
  (loss_sum, correct_sum), _ = jax.lax.scan(one_batch, (zero, zero),
                                            (xs, ys, mask))
  return loss_sum, correct_sum


def evaluate(
    apply_fn: ApplyFn,
    params: Params,
    x: np.ndarray,
    y: np.ndarray,
    batch_size: int = 1000,
) -> Tuple[float, float]:
  """Mean loss and accuracy over a whole split, in jitted batches.

  The split is padded to a whole number of batches and the padding masked
  out, so every call with the same shapes reuses one compiled program.
  `apply_fn` must be hashable and stable (e.g. `model.apply`) for that cache
  to hit.

  Args:
    apply_fn: `apply_fn(params, x) -> logits`.
    params: the model's variables.
    x: `[N, D]` features.
    y: `[N]` integer labels.
    batch_size: examples per batch (caps memory).

  Returns:
    `(loss, accuracy)` as Python floats.

  Example:
    >>> model = MLP((8,), 3)
    >>> params = init_params(model, jax.random.key(0), 4)
    >>> loss, acc = evaluate(model.apply, params, np.ones((5, 4)), np.zeros(5))
    >>> 0.0 <= acc <= 1.0
    True
  """
  n, batch_size = tasks.check_split(x, y, batch_size, "evaluate")
  num_batches = -(-n // batch_size)
  pad = num_batches * batch_size - n
  x = np.asarray(x, np.float32)
  xs = np.concatenate([x, np.zeros((pad,) + x.shape[1:], np.float32)])
  ys = np.concatenate([np.asarray(y, np.int32), np.zeros(pad, np.int32)])
  mask = np.concatenate([np.ones(n, np.float32), np.zeros(pad, np.float32)])
  loss_sum, correct_sum = _evaluate_batches(
      apply_fn, params,
      xs.reshape((num_batches, batch_size) + x.shape[1:]),
      ys.reshape(num_batches, batch_size),
      mask.reshape(num_batches, batch_size))
  return float(loss_sum) / n, float(correct_sum) / n
