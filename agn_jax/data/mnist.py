"""MNIST from the four standard IDX files, fetched and verified if absent."""

import hashlib
import os
import tempfile
import urllib.error
import urllib.request
from typing import Optional, Sequence

import numpy as np

from agn_jax.data import idx
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


def _download(data_dir: str, name: str, mirrors: Sequence[str],
              timeout: float) -> str:
  """Fetches `name` from the first mirror that serves it with the right hash."""
  try:
    os.makedirs(data_dir, exist_ok=True)
  except OSError as e:
    raise DataError(f"MNIST: cannot create data_dir {data_dir} "
                    f"({e.strerror or e}); {_where_to_put(data_dir)}") from None
  target = os.path.join(data_dir, name)
  failures = []
  for mirror in mirrors:
    url = mirror.rstrip("/") + "/" + name
    # Write beside the target and rename, so an interrupted download never
    # leaves a half file that a later run would try to parse.
    fd, tmp = tempfile.mkstemp(prefix=name + ".", suffix=".part", dir=data_dir)
    try:
      digest = hashlib.sha256()
      with os.fdopen(fd, "wb") as out, urllib.request.urlopen(
          url, timeout=timeout) as response:
        while chunk := response.read(1 << 20):
          digest.update(chunk)
          out.write(chunk)
      if digest.hexdigest() != SHA256[name]:
        failures.append(f"{url}: SHA-256 mismatch")
        continue
      os.replace(tmp, target)
      return target
    except (urllib.error.URLError, OSError, ValueError) as e:
      failures.append(f"{url}: {getattr(e, 'reason', None) or e}")
    finally:
      if os.path.exists(tmp):
        os.remove(tmp)
  raise DataError(f"MNIST: could not download {name} ({'; '.join(failures)}); "
                  f"{_where_to_put(data_dir)}")


def load_mnist(
    data_dir: Optional[str] = None,
    *,
    size: Optional[int] = None,
    mirrors: Optional[Sequence[str]] = None,
    download: bool = True,
    timeout: float = 10.0,
) -> Dataset:
  """Loads MNIST from IDX files in `data_dir`, downloading any that are missing.

  Each file may be raw or gzipped. Missing files are fetched as `.gz` from the
  first mirror that answers and checked against their known SHA-256; when no
  mirror answers the error says which files to put where.

  Args:
    data_dir: directory of the IDX files; default `~/.cache/agn_jax/mnist`.
    size: if given, keep only the first `size` training examples (the test
      set stays whole so accuracies remain comparable).
    mirrors: base URLs to try in order; default `$AGN_JAX_MNIST_MIRRORS`
      (comma-separated) or the public mirrors in `DEFAULT_MIRRORS`.
    download: whether to fetch missing files at all.
    timeout: seconds per network operation, kept short so offline machines
      fail fast.

  Returns:
    A `Dataset` with pixels scaled to `[0, 1]`, `input_shape=(28, 28, 1)`.

  Raises:
    DataError: one line naming the file or directory at fault.

  Example:
    >>> ds = load_mnist("/data/mnist")  # doctest: +SKIP
    >>> ds.x_train.shape, ds.input_shape  # doctest: +SKIP
    ((60000, 784), (28, 28, 1))
  """
  check_size("mnist", size, 1)
  data_dir = os.path.abspath(os.path.expanduser(data_dir or DEFAULT_DATA_DIR))
  mirrors = tuple(mirrors) if mirrors is not None else mirrors_from_env()
  paths = {}
  for stem in FILES:
    path = _find(data_dir, stem)
    if path is None:
      if not download or not mirrors:
        raise DataError(f"MNIST: {stem}[.gz] not found; "
                        f"{_where_to_put(data_dir)}")
      path = _download(data_dir, stem + ".gz", mirrors, timeout)
    paths[stem] = path

  def split(images_stem, labels_stem):
    images = idx.read_idx(paths[images_stem], expected_ndim=3)
    labels = idx.read_idx(paths[labels_stem], expected_ndim=1)
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
