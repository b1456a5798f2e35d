"""MNIST-1D (Greydanus 2020), generated offline with the `mnist1d` package."""

import random
from typing import Optional

import numpy as np

from agn_jax.data.dataset import DataError, Dataset, check_size, make_dataset

DEFAULT_SIZE = 5000  # the package's own default, 4,000 train + 1,000 test


def load_mnist1d(*, size: Optional[int] = None, seed: int = 0) -> Dataset:
  """Generates MNIST-1D: 40-sample 1-D signals of the ten digits' templates.

  Nothing is downloaded or cached; generation takes about a second per 20k
  examples. The package's default arguments are used except for the number
  of samples and the seed (the published dataset uses seed 42).

  Args:
    size: total number of examples (train + test, split 80/20); rounded down
      to a multiple of 10 because every class gets the same count.
    seed: generation seed.

  Returns:
    A standardized `Dataset` with `input_shape=(40, 1)`.

  Example:
    >>> ds = load_mnist1d(size=100, seed=0)
    >>> ds.x_train.shape, ds.x_test.shape, ds.input_shape
    ((80, 40), (20, 40), (40, 1))
  """
  check_size("mnist1d", size, 20)
  try:
    # Imported lazily: the package pulls in matplotlib.
    from mnist1d import data as mnist1d_data  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise DataError(f"mnist1d: the mnist1d package is not installed ({e})") \
        from None
  args = mnist1d_data.get_dataset_args()
  args.num_samples = DEFAULT_SIZE if size is None else int(size)
  args.seed = int(seed)
  # make_dataset seeds the global `random` and `np.random` generators; put them
  # back so loading data does not change anyone else's randomness.
  np_state, py_state = np.random.get_state(), random.getstate()
  try:
    raw = mnist1d_data.make_dataset(args)
  finally:
    np.random.set_state(np_state)
    random.setstate(py_state)
  length = raw["x"].shape[1]
  return make_dataset("mnist1d", raw["x"], raw["y"], raw["x_test"],
                      raw["y_test"], 10, (length, 1))
