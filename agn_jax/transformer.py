"""A small decoder-only transformer for next-byte prediction: model, loss, evaluation, the task's pieces.

`shakespeare_task()` returns everything a language-model run needs, in the
shape of the classification task's parts (`models.py`): the dataset loader,
a flax module factory, `loss(apply_fn) -> loss_fn(params, (x, y)) -> (loss,
{"accuracy", "bits_per_byte"})` for the window kernel, and an evaluation of
a whole split.
"""

import functools
import math
from typing import Any, Callable, Dict, NamedTuple, Optional, Tuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from agn_jax.data import shakespeare
from agn_jax.data.dataset import Dataset

Params = Any
ApplyFn = Callable[[Params, jax.Array], jax.Array]
Batch = Tuple[jax.Array, jax.Array]
LossFn = Callable[[Params, Batch], Tuple[jax.Array, Dict[str, jax.Array]]]
METRICS = ("loss", "accuracy", "bits_per_byte")
_LN2 = math.log(2.0)


class Block(nn.Module):
  """One pre-LayerNorm decoder block: causal self-attention, then a GELU MLP.

  Attributes:
    num_heads: attention heads.
    mlp_dim: hidden width of the MLP.
  """
  num_heads: int
  mlp_dim: int

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:
    h = nn.LayerNorm()(x)
    x = x + nn.MultiHeadDotProductAttention(self.num_heads,
                                            deterministic=True)(h, mask=mask)
    h = nn.LayerNorm()(x)
    h = nn.Dense(x.shape[-1])(nn.gelu(nn.Dense(self.mlp_dim)(h)))
    return x + h


class Transformer(nn.Module):
  """A decoder-only transformer with learned positions, returning next-token logits.

  Tokens may arrive as any number type (the runtime's batches, or the
  zeros `models.init_params` initializes with); they are cast to int32.

  Attributes:
    vocab_size: number of tokens (256 for bytes).
    max_len: the longest sequence, the number of learned positions.
    d_model: width of the residual stream.
    num_layers: decoder blocks.
    num_heads: attention heads per block.
    mlp_dim: hidden width of each block's MLP.
  """
  vocab_size: int = shakespeare.VOCAB_SIZE
  max_len: int = shakespeare.DEFAULT_SEQ_LEN
  d_model: int = 192
  num_layers: int = 4
  num_heads: int = 4
  mlp_dim: int = 768

  @nn.compact
  def __call__(self, tokens: jax.Array) -> jax.Array:
    """Logits `[B, T, vocab_size]`; position t sees tokens 0..t only."""
    tokens = jnp.asarray(tokens).astype(jnp.int32)
    length = tokens.shape[-1]
    if length > self.max_len:
      raise ValueError(f"sequences of {length} tokens are longer than the "
                       f"model's max_len {self.max_len}")
    x = nn.Embed(self.vocab_size, self.d_model, name="tokens")(tokens)
    x = x + nn.Embed(self.max_len, self.d_model, name="positions")(
        jnp.arange(length))
    mask = nn.make_causal_mask(tokens)
    for _ in range(self.num_layers):
      x = Block(self.num_heads, self.mlp_dim)(x, mask)
    return nn.Dense(self.vocab_size)(nn.LayerNorm()(x))


def create_transformer(seq_len: int = shakespeare.DEFAULT_SEQ_LEN,
                       d_model: int = 192, num_layers: int = 4,
                       num_heads: int = 4,
                       mlp_dim: Optional[int] = None) -> Transformer:
  """A byte-level `Transformer` for sequences of up to `seq_len` tokens.

  The defaults have 1,902,976 parameters.

  Args:
    seq_len: the longest sequence (learned positions).
    d_model: width; a multiple of `num_heads`.
    num_layers: decoder blocks.
    num_heads: attention heads.
    mlp_dim: MLP width; `4 * d_model` by default.

  Raises:
    ValueError: one line naming the argument, for a size below 1 or a
      `d_model` that `num_heads` does not divide.

  Example:
    >>> model = create_transformer()
    >>> shapes = jax.eval_shape(functools.partial(init_params, model),
    ...                         jax.random.key(0))
    >>> sum(p.size for p in jax.tree.leaves(shapes))
    1902976
  """
  mlp_dim = 4 * d_model if mlp_dim is None else mlp_dim
  for name, value in (("seq_len", seq_len), ("d_model", d_model),
                      ("num_layers", num_layers), ("num_heads", num_heads),
                      ("mlp_dim", mlp_dim)):
    if isinstance(value, bool) or int(value) != value or value < 1:
      raise ValueError(f"{name} must be a positive integer, got {value!r}")
  if d_model % num_heads:
    raise ValueError(f"d_model {d_model} is not a multiple of num_heads "
                     f"{num_heads}")
  return Transformer(shakespeare.VOCAB_SIZE, int(seq_len), int(d_model),
                     int(num_layers), int(num_heads), int(mlp_dim))


def init_params(model: Transformer, rng: jax.Array) -> Params:
  """The variables `{"params": ...}` of `model`, for `model.apply`.

  Example:
    >>> model = create_transformer(seq_len=8, d_model=16, num_layers=1,
    ...                            num_heads=2)
    >>> logits = model.apply(init_params(model, jax.random.key(0)),
    ...                      jnp.zeros((3, 8), jnp.int32))
    >>> logits.shape
    (3, 8, 256)
  """
  return model.init(rng, jnp.zeros((1, model.max_len), jnp.int32))


def next_token_loss(apply_fn: ApplyFn) -> LossFn:
  """Mean next-token cross-entropy, with next-token accuracy and bits per byte.

  Over every position of every example: the loss in nats, `accuracy` the
  share of positions whose most likely token is the target, and
  `bits_per_byte` the loss in bits (`loss / ln 2`), which is bits per byte
  because every token is one byte.

  Args:
    apply_fn: `apply_fn(params, x) -> logits [B, T, V]`, e.g. `model.apply`.

  Returns:
    `loss_fn(params, (x, y)) -> (loss, {"accuracy", "bits_per_byte"})`, with
    `x` and `y` `[B, T]` tokens, for `jax.value_and_grad(..., has_aux=True)`
    and `window_kernel`.

  Example:
    >>> model = create_transformer(seq_len=4, d_model=8, num_layers=1,
    ...                            num_heads=2)
    >>> loss_fn = next_token_loss(model.apply)
    >>> x = jnp.array([[72, 97, 109, 108]])
    >>> loss, aux = loss_fn(init_params(model, jax.random.key(0)),
    ...                     (x, jnp.roll(x, -1)))
    >>> sorted(aux)
    ['accuracy', 'bits_per_byte']
  """

  def loss_fn(params: Params, batch: Batch):
    x, y = batch
    logits = apply_fn(params, x)
    y = jnp.asarray(y).astype(jnp.int32)
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
    accuracy = jnp.mean(jnp.argmax(logits, axis=-1) == y)
    return loss, {"accuracy": accuracy, "bits_per_byte": loss / _LN2}

  return loss_fn


@functools.partial(jax.jit, static_argnums=0)
def _evaluate_batches(apply_fn, params, xs, ys, mask):
  """Sums of per-token loss and correct predictions over `[batches, B, T]`."""

  def one_batch(carry, batch):
    x, y, m = batch
    logits = apply_fn(params, x)
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, y)
    correct = (jnp.argmax(logits, axis=-1) == y).astype(jnp.float32)
    return (carry[0] + jnp.sum(losses * m[:, None]),
            carry[1] + jnp.sum(correct * m[:, None])), None

  zero = jnp.zeros([], jnp.float32)
  (loss_sum, correct_sum), _ = jax.lax.scan(one_batch, (zero, zero),
                                            (xs, ys, mask))
  return loss_sum, correct_sum


def evaluate(apply_fn: ApplyFn, params: Params, x: np.ndarray, y: np.ndarray,
             batch_size: int = 64) -> Dict[str, float]:
  """Loss, next-token accuracy and bits per byte over a whole split.

  Every position of every example counts once; each example is read on its
  own, so position t of an example predicts from its t + 1 tokens only. The
  split is padded to whole batches and the padding masked out, so every call
  with the same shapes reuses one compiled program (for a stable,
  hashable `apply_fn` such as `model.apply`).

  Args:
    apply_fn: `apply_fn(params, x) -> logits [B, T, V]`.
    params: the model's variables.
    x: `[N, T]` input tokens.
    y: `[N, T]` target tokens.
    batch_size: examples per batch (caps memory).

  Returns:
    `{"loss": nats per token, "accuracy": ..., "bits_per_byte": ...}` as
    Python floats.

  Example:
    >>> model = create_transformer(seq_len=4, d_model=8, num_layers=1,
    ...                            num_heads=2)
    >>> x = np.array([[72, 97, 109, 108]] * 3)
    >>> metrics = evaluate(model.apply, init_params(model, jax.random.key(0)),
    ...                    x, np.roll(x, -1, axis=1))
    >>> sorted(metrics)
    ['accuracy', 'bits_per_byte', 'loss']
  """
  x, y = np.asarray(x), np.asarray(y)
  n = len(x)
  if n == 0 or x.shape != y.shape or x.ndim != 2:
    raise ValueError(f"evaluate needs non-empty x and y of one shape [N, T], "
                     f"got {x.shape} and {y.shape}")
  if batch_size < 1:
    raise ValueError(f"batch_size must be positive, got {batch_size}")
  batch_size = min(int(batch_size), n)
  num_batches = -(-n // batch_size)
  pad = num_batches * batch_size - n

  def batched(a):
    a = np.concatenate([a.astype(np.int32), np.zeros((pad,) + a.shape[1:],
                                                     np.int32)])
    return a.reshape((num_batches, batch_size) + a.shape[1:])

  mask = np.concatenate([np.ones(n, np.float32), np.zeros(pad, np.float32)])
  loss_sum, correct_sum = _evaluate_batches(
      apply_fn, params, batched(x), batched(y),
      mask.reshape(num_batches, batch_size))
  tokens = x.size
  loss = float(loss_sum) / tokens
  return {"loss": loss, "accuracy": float(correct_sum) / tokens,
          "bits_per_byte": loss / _LN2}


class LanguageModelTask(NamedTuple):
  """The pieces of a next-byte language-model run.

  Attributes:
    name: the dataset's name.
    load_dataset: `load_dataset(data_dir=None, *, size=None, seed=0,
      **kwargs) -> Dataset` of int32 `[N, seq_len]` windows; `seed` is
      unused (the split is fixed), `kwargs` go to
      `shakespeare.load_shakespeare` (`indexes`, `download`, `timeout`).
    create_model: `create_model() -> Transformer`.
    init_params: `init_params(model, rng) -> variables`.
    loss: `loss(model.apply) -> loss_fn(params, (x, y)) -> (loss, {"accuracy",
      "bits_per_byte"})`, the window kernel's loss.
    evaluate: `evaluate(model.apply, params, x, y) -> {"loss", "accuracy",
      "bits_per_byte"}` over a whole split.
    baseline: `baseline(dataset) -> float`, the held-out bits per byte of the
      unigram byte model counted on the training split.
    metrics: the names `evaluate` returns.
  """
  name: str
  load_dataset: Callable[..., Dataset]
  create_model: Callable[[], Transformer]
  init_params: Callable[[Transformer, jax.Array], Params]
  loss: Callable[[ApplyFn], LossFn]
  evaluate: Callable[..., Dict[str, float]]
  baseline: Callable[[Dataset], float]
  metrics: Tuple[str, ...] = METRICS


def unigram_baseline(dataset: Dataset) -> float:
  """Held-out bits per byte of the unigram byte model of `dataset`'s training targets.

  Counted over exactly the targets `evaluate` scores (`y_test`), so the two
  numbers compare.

  Example:
    >>> x, y = shakespeare.windows(shakespeare.encode("abab" * 4), 4)
    >>> ds = Dataset(x, y, x, y, 256, (4,), "toy")
    >>> round(unigram_baseline(ds), 3)  # -log2(7 / 268): add-one counts.
    5.259
  """
  return shakespeare.unigram_bits_per_byte(dataset.y_train, dataset.y_test)


def shakespeare_task(seq_len: int = shakespeare.DEFAULT_SEQ_LEN,
                     d_model: int = 192, num_layers: int = 4,
                     num_heads: int = 4,
                     mlp_dim: Optional[int] = None) -> LanguageModelTask:
  """Next-byte prediction on Shakespeare's works with a small transformer.

  Args:
    seq_len: bytes per example, and the model's positions.
    d_model: the transformer's width.
    num_layers: decoder blocks.
    num_heads: attention heads.
    mlp_dim: MLP width; `4 * d_model` by default.

  Returns:
    The `LanguageModelTask`.

  Raises:
    ValueError: one line naming a bad model argument.

  Example:
    >>> task = shakespeare_task(seq_len=16, d_model=32, num_layers=1,
    ...                         num_heads=2)
    >>> model = task.create_model()
    >>> params = task.init_params(model, jax.random.key(0))
    >>> x = shakespeare.encode("To be, or not to be, that is th")
    >>> loss, aux = task.loss(model.apply)(params, (x[None, :16],
    ...                                            x[None, 1:17]))
    >>> task.metrics
    ('loss', 'accuracy', 'bits_per_byte')
  """
  create_transformer(seq_len, d_model, num_layers, num_heads, mlp_dim)

  def load_dataset(data_dir=None, *, size=None, seed=0, **kwargs):
    del seed  # The held-out works are fixed.
    return shakespeare.load_shakespeare(data_dir, seq_len=seq_len, size=size,
                                        **kwargs)

  return LanguageModelTask(
      name=shakespeare.NAME,
      load_dataset=load_dataset,
      create_model=functools.partial(create_transformer, seq_len, d_model,
                                     num_layers, num_heads, mlp_dim),
      init_params=init_params,
      loss=next_token_loss,
      evaluate=evaluate,
      baseline=unigram_baseline)
