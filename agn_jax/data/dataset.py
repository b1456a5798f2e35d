"""The `Dataset` every loader returns, the one error type, the one check of what a loader returned."""

import hashlib
from typing import NamedTuple, Optional, Tuple

import numpy as np


class DataError(ValueError):
  """A dataset could not be loaded; the message is one line naming the cause."""


class Dataset(NamedTuple):
  """A dataset held in memory: what every loader returns.

  This package's datasets are classification sets of flat float32
  features (`make_dataset`), but for `shakespeare`: int32 byte windows
  `[N, T]`, its targets the same windows one byte later. A user's loader
  (`agn_jax.data.load` of `"package.module:function"`) may hold any arrays
  its task's loss reads: inputs of any per-example shape and numeric dtype
  (integer token ids, say) and targets of any (floats, sequences); the
  workers index their first axis only. Every loader's result passes
  `check_dataset`.

  Attributes:
    x_train: `[N, ...]` training inputs; this package's are float32
      `[N, D]`, flattened, scaled to about `[0, 1]` or standardized.
    y_train: `[N, ...]` training targets; this package's are int32 labels
      in `[0, num_classes)`.
    x_test: `[M, ...]` test inputs, as `x_train`.
    y_test: `[M, ...]` test targets, as `y_train`.
    num_classes: the model's output width (`agn_jax.models.create_model`):
      the number of classes, or a user's task's outputs (a regression's
      targets, a vocabulary).
    input_shape: per-example shape the model reads, for models that
      un-flatten the features (e.g. `(28, 28, 1)` or `(40, 1)`; this
      package's have a trailing channel axis and `prod(input_shape) == D`).
    name: the name `agn_jax.data.load` knows the dataset by.
  """
  x_train: np.ndarray
  y_train: np.ndarray
  x_test: np.ndarray
  y_test: np.ndarray
  num_classes: int
  input_shape: Tuple[int, ...]
  name: str


class Example(NamedTuple):
  """What one input of a dataset looks like: what a model is initialized on.

  Plain data (no JAX), so it travels to a run's every process.

  Attributes:
    shape: one example's shape as the dataset holds it (`x_train.shape[1:]`;
      `(D,)` for this package's flat features).
    dtype: its dtype, as a numpy dtype string (`"<f4"`, `"<i4"`).
  """
  shape: Tuple[int, ...]
  dtype: str


def example_of(x) -> Example:
  """The `Example` of a dataset's inputs `x` (`[N, ...]`): one row's shape and dtype.

  Example:
    >>> example_of(np.zeros((5, 784), np.float32))
    Example(shape=(784,), dtype='<f4')
  """
  x = np.asarray(x) if not hasattr(x, "shape") else x
  return Example(tuple(int(d) for d in x.shape[1:]), np.dtype(x.dtype).str)


def check_dataset(dataset, name: str,
                  classes_for: Optional[str] = None) -> Dataset:
  """`dataset` as a `Dataset` of numpy arrays, if it is one a run can train on; else `DataError` (one line).

  The one check of what any loader returned, built-in or a user's, run
  once per load (vectorized, a pass over each array): a `Dataset` whose
  four arrays hold numbers (bool, integer or float; not `dtype=object`),
  the float ones only finite values, whose splits have as many targets as
  inputs and are not empty, with an integer `num_classes` >= 1 and an
  `input_shape` of positive integers. For a task whose targets are class
  labels (`classes_for`, `agn_jax.tasks.Task.class_targets`), the targets
  must also be integers in `[0, num_classes)`: a label outside would be
  trained on as no class at all (a one-hot of zeros).

  Args:
    dataset: what the loader returned.
    name: the dataset's name (`--dataset`), for the message.
    classes_for: the task whose loss reads the targets as class labels
      (`--task`, named in the message); None: targets of any value.

  Example:
    >>> x = np.zeros((4, 3), np.int32)
    >>> ds = check_dataset(Dataset(x, np.ones(4), x, np.ones(4), 1, (3,), "t"),
    ...                    "t")
    >>> ds.x_train.dtype, ds.input_shape
    (dtype('int32'), (3,))
    >>> check_dataset((x, x), "t")
    Traceback (most recent call last):
    ...
    agn_jax.data.dataset.DataError: dataset 't': its loader returned a tuple, not an agn_jax.data.Dataset
    >>> y = np.array([0, 2, 9, 9])
    >>> check_dataset(Dataset(x, y, x, y % 2, 3, (3,), "t"), "t",
    ...               classes_for="classification")
    Traceback (most recent call last):
    ...
    agn_jax.data.dataset.DataError: dataset 't': 2 of the 4 train labels lie outside [0, 3) (its num_classes), e.g. 9 (example 2); --task=classification reads each as one of the model's 3 outputs
  """
  if not isinstance(dataset, Dataset):
    raise DataError(f"dataset {name!r}: its loader returned a "
                    f"{type(dataset).__name__}, not an agn_jax.data.Dataset")
  arrays = [_numeric(name, field, a)
            for field, a in zip(Dataset._fields, dataset[:4])]
  for split, x, y in (("train", arrays[0], arrays[1]),
                      ("test", arrays[2], arrays[3])):
    if x.ndim < 1 or y.ndim < 1 or len(x) != len(y):
      raise DataError(f"dataset {name!r}: the {split} split has "
                      f"{len(x) if x.ndim else 0} inputs and "
                      f"{len(y) if y.ndim else 0} targets")
    if not len(x):
      raise DataError(f"dataset {name!r}: the {split} split is empty")
  classes = dataset.num_classes
  if (isinstance(classes, bool) or not isinstance(classes, (int, np.integer))
      or classes < 1):
    raise DataError(f"dataset {name!r}: num_classes must be an integer >= 1, "
                    f"got {classes!r}")
  try:
    shape = tuple(int(d) for d in dataset.input_shape)
  except (TypeError, ValueError):
    shape = ()
  if not shape or min(shape) < 1:
    raise DataError(f"dataset {name!r}: input_shape must be a tuple of "
                    f"positive integers, got {dataset.input_shape!r}")
  if classes_for is not None:
    for split, y in (("train", arrays[1]), ("test", arrays[3])):
      _check_labels(name, split, y, int(classes), classes_for)
  return Dataset(*arrays, int(classes), shape, str(dataset.name))


def _numeric(name: str, field: str, array) -> np.ndarray:
  """`array` as a numpy array of numbers, all finite; else `DataError` naming the dataset and `field`."""
  try:
    array = np.asarray(array)
  except (TypeError, ValueError) as e:  # Ragged lists, say.
    raise DataError(f"dataset {name!r}: {field} is no array: "
                    f"{str(e).splitlines()[0] if str(e) else e!r}") from None
  if array.dtype.kind not in "biuf":
    # An object array (a list of arrays, mixed types) fails deep inside
    # JAX; strings and complex numbers are no model's inputs here.
    raise DataError(f"dataset {name!r}: {field} has dtype {array.dtype}; "
                    "a run needs arrays of numbers (bool, integer or float)")
  if array.dtype.kind == "f" and array.size:
    bad = ~np.isfinite(array.reshape(len(array), -1) if array.ndim else array)
    if bad.any():
      first = int(np.argmax(bad.any(axis=-1))) if array.ndim else 0
      raise DataError(f"dataset {name!r}: {field} holds {int(bad.sum())} "
                      f"non-finite values (NaN or infinity), the first in "
                      f"example {first}")
  return array


def _check_labels(name: str, split: str, y: np.ndarray, classes: int,
                  task: str) -> None:
  """Raises `DataError` unless `y` are integer class labels in `[0, classes)`."""
  if y.dtype.kind not in "iu":
    raise DataError(
        f"dataset {name!r}: the {split} labels are {y.dtype}, --task={task} "
        f"needs integer class labels in [0, {classes}) (floats would be "
        "truncated)")
  outside = (y < 0) | (y >= classes)
  count = int(np.count_nonzero(outside))
  if count:
    first = int(np.argmax(outside.reshape(-1)))
    value = y.reshape(-1)[first]
    raise DataError(
        f"dataset {name!r}: {count} of the {y.size} {split} labels lie "
        f"outside [0, {classes}) (its num_classes), e.g. {value} (example "
        f"{first // max(1, y[:1].size)}); --task={task} reads each as one of "
        f"the model's {classes} outputs")


def fingerprint(dataset: Dataset) -> str:
  """A cheap digest of a dataset: its arrays' shapes and dtypes, first and last rows, `num_classes` and `input_shape`.

  What every process that loads a dataset by name compares with the
  driver's (`agn_jax.runtime.transports.ray.DatasetByName`): a loader that
  returns other data on each call would otherwise train each worker on
  data of its own. Two rows per array: a few bytes however large the data.

  Example:
    >>> x = np.arange(6, dtype=np.float32).reshape(3, 2)
    >>> ds = Dataset(x, np.arange(3), x, np.arange(3), 3, (2,), "t")
    >>> fingerprint(ds) == fingerprint(ds._replace(name="u"))
    True
    >>> fingerprint(ds) == fingerprint(ds._replace(x_test=x + 1))
    False
  """
  digest = hashlib.sha256()
  for array in dataset[:4]:
    array = np.asarray(array)
    digest.update(repr((array.shape, array.dtype.str)).encode())
    if len(array):
      digest.update(np.ascontiguousarray(array[0]).tobytes())
      digest.update(np.ascontiguousarray(array[-1]).tobytes())
  digest.update(repr((int(dataset.num_classes),
                      tuple(int(d) for d in dataset.input_shape))).encode())
  return digest.hexdigest()[:16]


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
