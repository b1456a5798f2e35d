"""The `Dataset` every loader returns, the one error type, shared checks."""

from typing import NamedTuple, Optional, Tuple

import numpy as np


class DataError(ValueError):
  """A dataset could not be loaded; the message is one line naming the cause."""


class Dataset(NamedTuple):
  """A classification dataset held in memory as flat float32 features.

  Attributes:
    x_train: float32 `[N, D]` training features, flattened, scaled to about
      `[0, 1]` or standardized.
    y_train: int32 `[N]` training labels in `[0, num_classes)`.
    x_test: float32 `[M, D]` test features.
    y_test: int32 `[M]` test labels.
    num_classes: number of classes.
    input_shape: per-example shape with a trailing channel axis, for models
      that un-flatten the features (e.g. `(28, 28, 1)` or `(40, 1)`);
      `prod(input_shape) == D`.
    name: the name `agn_jax.data.load` knows the dataset by.
  """
  x_train: np.ndarray
  y_train: np.ndarray
  x_test: np.ndarray
  y_test: np.ndarray
  num_classes: int
  input_shape: Tuple[int, ...]
  name: str


def make_dataset(
    name: str,
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_test: np.ndarray,
    y_test: np.ndarray,
    num_classes: int,
    input_shape: Tuple[int, ...],
) -> Dataset:
  """Flattens and casts arrays into a `Dataset`, checking they agree."""
  input_shape = tuple(int(d) for d in input_shape)
  dim = int(np.prod(input_shape))
  x_train = np.ascontiguousarray(x_train, np.float32).reshape(len(x_train), -1)
  x_test = np.ascontiguousarray(x_test, np.float32).reshape(len(x_test), -1)
  y_train = np.asarray(y_train).astype(np.int32)
  y_test = np.asarray(y_test).astype(np.int32)
  for split, x, y in (("train", x_train, y_train), ("test", x_test, y_test)):
    if x.shape[1] != dim:
      raise DataError(
          f"{name}: {split} features have {x.shape[1]} values per example, "
          f"input_shape {input_shape} needs {dim}")
    if len(x) != len(y):
      raise DataError(
          f"{name}: {split} split has {len(x)} examples but {len(y)} labels")
    if len(y) and (y.min() < 0 or y.max() >= num_classes):
      raise DataError(
          f"{name}: {split} labels must lie in [0, {num_classes}), "
          f"found [{y.min()}, {y.max()}]")
  if not len(y_train):
    raise DataError(f"{name}: the training split is empty")
  return Dataset(x_train, y_train, x_test, y_test, int(num_classes),
                 input_shape, name)


def check_size(name: str, size: Optional[int], minimum: int) -> None:
  """Raises `DataError` unless `size` is None or an int >= `minimum`."""
  if size is None:
    return
  if isinstance(size, bool) or not isinstance(size, (int, np.integer)):
    raise DataError(f"{name}: size must be an integer, got {size!r}")
  if size < minimum:
    raise DataError(f"{name}: size must be at least {minimum}, got {size}")
