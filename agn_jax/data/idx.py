"""A strict parser for the IDX format of the MNIST files, raw or gzipped."""

import gzip
import hashlib
import math
import os
import zlib

from typing import Optional, Tuple

import numpy as np

from agn_jax.data.dataset import DataError

# IDX type byte -> big-endian numpy dtype (LeCun's MNIST page lists these).
_DTYPES = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_GZIP_MAGIC = b"\x1f\x8b"


def _read_bytes(path: str) -> bytes:
  try:
    with open(path, "rb") as f:
      raw = f.read()
  except OSError as e:
    raise DataError(
        f"{path}: cannot read IDX file ({e.strerror or e})") from None
  if not raw:
    raise DataError(f"{path}: empty file (0 bytes), not an IDX file")
  # Sniff the content rather than trust the suffix: people gunzip files and
  # keep the name, or the other way round.
  if raw[:2] == _GZIP_MAGIC:
    try:
      return gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as e:
      raise DataError(f"{path}: corrupt gzip data ({e})") from None
  if path.endswith(".gz"):
    raise DataError(f"{path}: named .gz but is not gzip data")
  return raw


def read_idx(path: str, expected_ndim: Optional[int] = None,
             canonical: Optional[Tuple[int, str]] = None) -> np.ndarray:
  """Reads one IDX file (raw or gzip-compressed) into a numpy array.

  The header is checked strictly: two zero bytes, a known type byte, the
  number of dimensions (so MNIST images carry magic `0x00000803` and labels
  `0x00000801`), then the big-endian dimensions; the payload must hold exactly
  `prod(dims)` items, so truncated or padded files are rejected.

  Args:
    path: the file; gzip data is recognised by its content.
    expected_ndim: if given, the number of dimensions the header must declare.
    canonical: `(size, sha256)` of a published file (MNIST's): content of
      exactly that size (uncompressed) must have that SHA-256, so flipped
      bytes in a cached or given copy are refused. Content of another size
      is someone's own data, checked by its header alone. Hashing costs
      about 0.04 s for MNIST's 47 MB, so it is done on every read.

  Returns:
    An array of shape `dims` in native byte order.

  Raises:
    DataError: naming `path`, for any unreadable, corrupt or malformed file.

  Example:
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "labels-idx1-ubyte")
    >>> with open(path, "wb") as f:
    ...   _ = f.write(bytes([0, 0, 8, 1, 0, 0, 0, 3, 7, 0, 9]))
    >>> read_idx(path, expected_ndim=1).tolist()
    [7, 0, 9]
  """
  path = os.fspath(path)
  data = _read_bytes(path)
  if canonical is not None and len(data) == canonical[0]:
    digest = hashlib.sha256(data).hexdigest()
    if digest != canonical[1]:
      raise DataError(f"{path}: corrupt: its SHA-256 is {digest}, the "
                      f"published file's {canonical[1]}; delete it, and it is "
                      "fetched again")
  if len(data) < 4:
    raise DataError(f"{path}: too short for an IDX header ({len(data)} bytes)")
  zero, type_byte, ndim = data[0:2], data[2], data[3]
  magic = int.from_bytes(data[:4], "big")
  if zero != b"\x00\x00" or type_byte not in _DTYPES:
    raise DataError(f"{path}: bad IDX magic number 0x{magic:08x} "
                    "(not an IDX file?)")
  if expected_ndim is not None and ndim != expected_ndim:
    raise DataError(
        f"{path}: IDX magic 0x{magic:08x} declares {ndim} dimensions, expected "
        f"{expected_ndim} (magic 0x{(type_byte << 8) | expected_ndim:08x})")
  if ndim == 0:
    raise DataError(f"{path}: IDX header declares zero dimensions")
  header_len = 4 + 4 * ndim
  if len(data) < header_len:
    raise DataError(f"{path}: truncated IDX header ({len(data)} bytes, "
                    f"{ndim} dimensions need {header_len})")
  dims = tuple(int(d) for d in np.frombuffer(data, ">u4", ndim, offset=4))
  dtype = _DTYPES[type_byte]
  if 0 in dims:
    raise DataError(f"{path}: IDX header declares dims {dims}: no data")
  # Python ints: a forged header (2^31, 2^16, 2^16) must not overflow.
  expected = math.prod(dims) * dtype.itemsize
  got = len(data) - header_len
  if got != expected:
    kind = ("truncated IDX data" if got < expected else
            "trailing bytes after the IDX data")
    raise DataError(f"{path}: {kind}: header declares dims {dims}, "
                    f"{expected} bytes; the file holds {got} bytes after "
                    "the header")
  array = np.frombuffer(data, dtype, offset=header_len).reshape(dims)
  return array.astype(dtype.newbyteorder("="))
