"""Commit compression: codecs that shrink a flat float32 delta, and the error feedback around them.

Pure and jittable, below the runtime: a `Strategy` compresses its commit's
`delta` with a `Codec` (`agn_jax.strategies.with_compression`) and every
backend moves what the codec made. A codec's `encode` turns a flat float32
vector into a tuple of flat arrays (the payload as sent) and `decode` turns
them back into a float32 vector of the same length. `compress` adds error
feedback (Seide et al. 2014; Karimireddy et al. 2019): what the codec drops
is kept in a residual and added to the next delta, so nothing is lost, only
delayed.

Example:
  >>> import jax.numpy as jnp
  >>> from agn_jax import compression
  >>> codec = compression.parse("topk:0.5")
  >>> encoded, residual = compression.compress(
  ...     codec, jnp.array([0.1, -2.0, 0.3, 1.0]), jnp.zeros(4))
  >>> codec.decode(encoded, 4), residual
  (Array([ 0., -2.,  0.,  1.], dtype=float32), Array([0.1, 0. , 0.3, 0. ], dtype=float32))
"""

import math
from typing import Callable, NamedTuple, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

# What `--commit_compression` accepts, in words.
FORMS = ("none", "bf16", "int8", "topk:FRACTION")
# int8's scale covers this many consecutive entries: one outlier costs the
# precision of 1024 entries, not of the whole model, for 4 B per 1024.
INT8_CHUNK = 1024

Encoded = Tuple[jax.Array, ...]


class Codec(NamedTuple):
  """A lossy code for a flat float32 vector.

  Attributes:
    name: the `--commit_compression` value it was parsed from.
    encode: `x -> encoded`, a tuple of flat arrays (jittable); a non-finite
      `x` gives a non-finite float in `encoded`, so the server still refuses
      it (`Strategy.accepts`).
    decode: `(encoded, size) -> x̂`, float32 of length `size` (jittable).
    to_wire: `encoded -> arrays of plain numpy dtypes` (bf16 travels as its
      uint16 bits); `from_wire` undoes it.
    from_wire: `wire -> encoded`.
  """
  name: str
  encode: Callable[[jax.Array], Encoded]
  decode: Callable[[Encoded, int], jax.Array]
  to_wire: Callable[[Encoded], Encoded] = lambda encoded: tuple(encoded)
  from_wire: Callable[[Encoded], Encoded] = lambda wire: tuple(wire)

  def encoded_bytes(self, size: int) -> int:
    """Bytes of `encode`'s output for a vector of `size` floats.

    Example:
      >>> [parse(c).encoded_bytes(2048) for c in ("bf16", "int8", "topk:0.01")]
      [4096, 2056, 168]
    """
    shapes = jax.eval_shape(self.encode,
                            jax.ShapeDtypeStruct((size,), jnp.float32))
    return sum(math.prod(s.shape) * np.dtype(s.dtype).itemsize
               for s in shapes)


def _poisoned(x, value):
  """`value`, turned NaN where `x` has a non-finite entry (the server then rejects it)."""
  return jnp.where(jnp.all(jnp.isfinite(x)), value, jnp.nan).astype(
      value.dtype)


def bf16() -> Codec:
  """Rounds each entry to bfloat16 (round to nearest even): 2 B per entry.

  Example:
    >>> import jax.numpy as jnp
    >>> codec = bf16()
    >>> codec.decode(codec.encode(jnp.array([1.0, 1.00390625, 3.0])), 3)
    Array([1., 1., 3.], dtype=float32)
  """

  def encode(x):
    return (jnp.asarray(x, jnp.float32).astype(jnp.bfloat16),)

  def decode(encoded, size):
    del size
    return encoded[0].astype(jnp.float32)

  def to_wire(encoded):
    return (jax.lax.bitcast_convert_type(encoded[0], jnp.uint16),)

  def from_wire(wire):
    return (jax.lax.bitcast_convert_type(jnp.asarray(wire[0]), jnp.bfloat16),)

  return Codec("bf16", encode, decode, to_wire, from_wire)


def int8(chunk: int = INT8_CHUNK) -> Codec:
  """Symmetric int8 per chunk: `q = round(x / s)`, `s = max|x_chunk| / 127`.

  Each run of `chunk` consecutive entries has its own float32 scale `s`
  (the last run may be shorter); `x̂ = q s`, so `|x − x̂| <= s / 2`. An
  all-zero chunk has `s = 0` and decodes to zeros. 1 B per entry and 4 B
  per chunk.

  Example:
    >>> import jax.numpy as jnp
    >>> codec = int8(chunk=2)
    >>> q, scale = codec.encode(jnp.array([1.0, -0.5, 0.0, 0.0, 2.54]))
    >>> q, scale
    (Array([127, -64,   0,   0, 127], dtype=int8), Array([0.00787402, 0.        , 0.02      ], dtype=float32))
    >>> codec.decode((q, scale), 5)
    Array([ 1.      , -0.503937,  0.      ,  0.      ,  2.54    ], dtype=float32)
  """
  if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
    raise ValueError(f"chunk must be an integer >= 1, got {chunk!r}")

  def chunks(x):
    size = x.shape[0]
    padded = jnp.pad(x, (0, -size % chunk))
    return padded.reshape(-1, chunk)

  def encode(x):
    x = jnp.asarray(x, jnp.float32)
    size = x.shape[0]
    blocks = chunks(x)
    scale = jnp.max(jnp.abs(blocks), axis=1) / 127.0
    safe = jnp.where(scale > 0, scale, 1.0)
    q = jnp.clip(jnp.round(blocks / safe[:, None]), -127, 127)
    q = q.astype(jnp.int8).reshape(-1)[:size]
    return q, _poisoned(x, scale)

  def decode(encoded, size):
    q, scale = encoded
    blocks = chunks(q.astype(jnp.float32))
    return (blocks * scale[:, None]).reshape(-1)[:size]

  return Codec("int8", encode, decode)


def topk(fraction: float) -> Codec:
  """Keeps the `⌈fraction · size⌉` entries of largest magnitude: their int32 indices and float32 values.

  The others decode to zero. 8 B per kept entry; `fraction = 1` keeps every
  entry exactly.

  Example:
    >>> import jax.numpy as jnp
    >>> codec = topk(0.4)
    >>> indices, values = codec.encode(jnp.array([0.1, -3.0, 0.2, 2.0, 0.0]))
    >>> indices, values
    (Array([1, 3], dtype=int32), Array([-3.,  2.], dtype=float32))
    >>> codec.decode((indices, values), 5)
    Array([ 0., -3.,  0.,  2.,  0.], dtype=float32)
  """
  if not (isinstance(fraction, (int, float)) and not isinstance(fraction, bool)
          and 0 < fraction <= 1):
    raise ValueError(f"topk's fraction must be in (0, 1], got {fraction!r}")

  def kept(size):
    return max(1, min(size, math.ceil(fraction * size)))

  def encode(x):
    x = jnp.asarray(x, jnp.float32)
    _, indices = jax.lax.top_k(jnp.abs(x), kept(x.shape[0]))
    indices = indices.astype(jnp.int32)
    return indices, _poisoned(x, x[indices])

  def decode(encoded, size):
    indices, values = encoded
    return jnp.zeros(size, jnp.float32).at[indices].set(values)

  return Codec(f"topk:{fraction:g}", encode, decode)


def parse(text: str) -> Optional[Codec]:
  """The codec `--commit_compression=text` names; None for `none`.

  Raises:
    ValueError: one line, for anything but `none`, `bf16`, `int8` or
      `topk:FRACTION` with `0 < FRACTION <= 1`.

  Example:
    >>> parse("none") is None, parse("int8").name, parse("topk:0.01").name
    (True, 'int8', 'topk:0.01')
    >>> parse("topk:1.5")
    Traceback (most recent call last):
    ...
    ValueError: commit_compression accepts none, bf16, int8 or topk:FRACTION with FRACTION in (0, 1], got 'topk:1.5'
  """
  error = ValueError(f"commit_compression accepts none, bf16, int8 or "
                     f"topk:FRACTION with FRACTION in (0, 1], got {text!r}")
  if not isinstance(text, str):
    raise error
  if text == "none":
    return None
  if text == "bf16":
    return bf16()
  if text == "int8":
    return int8()
  name, sep, value = text.partition(":")
  if name == "topk" and sep:
    try:
      fraction = float(value)
    except ValueError:
      raise error from None
    if math.isfinite(fraction) and 0 < fraction <= 1:
      return topk(fraction)
  raise error


def compress(codec: Codec, delta, residual) -> Tuple[Encoded, jax.Array]:
  """Error feedback: encodes `delta + residual`, keeps what the code dropped.

  With `c = delta + residual`, returns `encode(c)` and the new residual
  `c − decode(encode(c))`. Over commits `k = 1..K` from a zero residual,
  the decoded commits sum to `Σ delta_k − residual_K`: the server receives
  every delta, each part of it at most a few commits late.

  Args:
    codec: the `Codec`.
    delta: this commit's flat float32 delta.
    residual: what earlier commits dropped (flat float32, same length).

  Returns:
    `(encoded, residual)`.

  Example:
    >>> import jax.numpy as jnp
    >>> codec = topk(0.5)
    >>> sent, r = compress(codec, jnp.array([1.0, 0.5]), jnp.zeros(2))
    >>> sent, r = compress(codec, jnp.array([0.25, 0.0]), r)
    >>> codec.decode(sent, 2), r  # 0.5 waited one commit; now 0.25 waits.
    (Array([0. , 0.5], dtype=float32), Array([0.25, 0.  ], dtype=float32))
  """
  corrected = jnp.asarray(delta, jnp.float32) + residual
  encoded = codec.encode(corrected)
  return encoded, corrected - codec.decode(encoded, corrected.shape[0])
