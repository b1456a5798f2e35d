"""scikit-learn's 8x8 digits: a tiny offline stand-in for MNIST."""

import gzip
import importlib.util
import os
from typing import Optional

import numpy as np

from agn_jax.data.dataset import Dataset, check_size, make_dataset

TEST_FRACTION = 0.2


def load_digits(*, size: Optional[int] = None, seed: int = 0) -> Dataset:
  """Loads the 1,797 sklearn digits with a seeded 80/20 train/test split.

  Args:
    size: if given, keep only the first `size` training examples.
    seed: seed of the split's permutation; the same seed gives the same split.

  Returns:
    A `Dataset` with pixels divided by 16 (so in `[0, 1]`) and
    `input_shape=(8, 8, 1)`.

  Example:
    >>> ds = load_digits(seed=0)
    >>> ds.x_train.shape, ds.x_test.shape, ds.input_shape
    ((1438, 64), (359, 64), (8, 8, 1))
  """
  check_size("digits", size, 1)
  table = _digits_table()
  x = table[:, :-1].astype(np.float32) / 16.0
  y = table[:, -1].astype(int)
  order = np.random.default_rng(seed).permutation(len(y))
  num_test = int(round(len(y) * TEST_FRACTION))
  test, train = order[:num_test], order[num_test:]
  if size is not None:
    train = train[:size]
  return make_dataset("digits", x[train], y[train], x[test], y[test], 10,
                      (8, 8, 1))


def _digits_table() -> np.ndarray:
  """scikit-learn's digits.csv.gz: 1,797 rows of 64 pixels, then the label.

  Read from the installed scikit-learn's data directory without importing
  scikit-learn: its import takes about a second, paid by every process that
  loads digits (each CLI run, each Ray actor). `sklearn.datasets.load_digits`
  reads the same file; it is the way when the file is not where expected.
  """
  spec = importlib.util.find_spec("sklearn")  # Finds it, imports nothing.
  if spec is not None and spec.submodule_search_locations:
    path = os.path.join(spec.submodule_search_locations[0], "datasets",
                        "data", "digits.csv.gz")
    if os.path.isfile(path):
      with gzip.open(path, "rt", encoding="utf-8") as f:
        return np.loadtxt(f, delimiter=",")
  from sklearn import datasets  # pylint: disable=g-import-not-at-top
  bunch = datasets.load_digits()
  return np.column_stack([bunch.data, bunch.target])
