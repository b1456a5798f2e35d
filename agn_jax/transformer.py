"""A small decoder-only transformer for next-byte prediction: the model, its loss and evaluation.

The built-in model `transformer` (`agn_jax.models`) and task `next_token`
(`agn_jax.tasks`) are these: `--dataset=shakespeare --model=transformer
--task=next_token` trains on Shakespeare's works byte by byte.
"""

import functools
import math
from typing import Any, Callable, Dict, Optional, Tuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from agn_jax import models
from agn_jax import tasks
from agn_jax.data import shakespeare

Params = Any
ApplyFn = Callable[[Params, jax.Array], jax.Array]
Batch = Tuple[jax.Array, jax.Array]
LossFn = Callable[[Params, Batch], Tuple[jax.Array, Dict[str, jax.Array]]]
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
                       mlp_dim: Optional[int] = None,
                       vocab_size: int = shakespeare.VOCAB_SIZE
                       ) -> Transformer:
  """A `Transformer` for sequences of up to `seq_len` tokens (bytes, by default).

  The defaults have 1,902,976 parameters.

  Args:
    seq_len: the longest sequence (learned positions).
    d_model: width; a multiple of `num_heads`.
    num_layers: decoder blocks.
    num_heads: attention heads.
    mlp_dim: MLP width; `4 * d_model` by default.
    vocab_size: number of tokens (256: bytes).

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
                      ("mlp_dim", mlp_dim), ("vocab_size", vocab_size)):
    if isinstance(value, bool) or int(value) != value or value < 1:
      raise ValueError(f"{name} must be a positive integer, got {value!r}")
  if d_model % num_heads:
    raise ValueError(f"d_model {d_model} is not a multiple of num_heads "
                     f"{num_heads}")
  return Transformer(int(vocab_size), int(seq_len), int(d_model),
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
  return models.init_params(model, rng, (model.max_len,), jnp.int32)


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


def evaluate(apply_fn: ApplyFn, params: Params, x: np.ndarray, y: np.ndarray,
             batch_size: int = 64) -> Tuple[float, Dict[str, float]]:
  """Loss, next-token accuracy and bits per byte over a whole split: the `next_token` task's evaluation.

  `next_token_loss` averaged over the split's examples
  (`agn_jax.tasks.mean_over_batches`): every example has the same number
  of positions, so this is the mean over every position of every example.
  Each example is read on its own, so position t predicts from its t + 1
  tokens only. The batches are smaller than a classifier's: each holds a
  `[batch, T, vocab]` array of logits.

  Args:
    apply_fn: `apply_fn(params, x) -> logits [B, T, V]`, stable and
      hashable (e.g. `model.apply`), so each call reuses one compiled
      program.
    params: the model's variables.
    x: `[N, T]` input tokens.
    y: `[N, T]` target tokens.
    batch_size: examples per batch (caps memory).

  Returns:
    `(loss, {"accuracy", "bits_per_byte"})` as Python floats, the loss in
    nats per token.

  Example:
    >>> model = create_transformer(seq_len=4, d_model=8, num_layers=1,
    ...                            num_heads=2)
    >>> x = np.array([[72, 97, 109, 108]] * 3)
    >>> loss, metrics = evaluate(model.apply,
    ...                          init_params(model, jax.random.key(0)), x,
    ...                          np.roll(x, -1, axis=1))
    >>> sorted(metrics), round(metrics["bits_per_byte"] * _LN2 / loss, 6)
    (['accuracy', 'bits_per_byte'], 1.0)
  """
  x, y = np.asarray(x), np.asarray(y)
  if x.shape != y.shape or x.ndim != 2:
    raise ValueError(f"evaluate needs x and y of one shape [N, T], got "
                     f"{x.shape} and {y.shape}")
  return tasks.mean_over_batches(tasks.loss_of(next_token_loss, apply_fn),
                                 params, x, y, batch_size)
