"""Each worker's share of the training set: its shard, its windows, the order it draws them in.

Pure numpy. The process workers and the simulator both take their samples
from here, so a backend never changes which examples a worker sees.
"""

import numpy as np


def shard_bounds(num_examples: int, num_workers: int,
                 worker: int) -> tuple:
  """`[start, stop)` of worker `worker`'s contiguous shard of the training set.

  Example:
    >>> [shard_bounds(10, 3, k) for k in range(3)]
    [(0, 3), (3, 6), (6, 10)]
  """
  return (num_examples * worker // num_workers,
          num_examples * (worker + 1) // num_workers)


def windows_per_worker(num_examples: int, num_workers: int, epochs: float,
                       communication_window: int, batch_size: int) -> int:
  """Whole windows in one worker's share of `epochs × N / n` samples.

  A last partial window (< λ steps) is not committed, as in the reference
  implementation, so it is not run either.

  Example:
    >>> windows_per_worker(1000, 4, 2.0, communication_window=5, batch_size=10)
    10
  """
  share = epochs * num_examples / num_workers
  return int(share // (communication_window * batch_size))


class BatchSampler:
  """Endless shuffled passes over one shard: a fresh permutation every epoch.

  Example:
    >>> import numpy as np
    >>> sampler = BatchSampler(4, np.random.default_rng(0))
    >>> first_pass = sampler.take(4)
    >>> sorted(first_pass.tolist()), len(sampler.take(6))
    ([0, 1, 2, 3], 6)
  """

  def __init__(self, num_examples: int, rng: np.random.Generator):
    if num_examples < 1:
      raise ValueError("a worker's shard is empty; use fewer workers")
    self._n = num_examples
    self._rng = rng
    self._perm = rng.permutation(num_examples)
    self._pos = 0

  def skip(self, k: int) -> None:
    """Advances past `k` samples, exactly as `take(k)` would."""
    while k > 0:
      if self._pos == self._n:
        self._perm, self._pos = self._rng.permutation(self._n), 0
      t = min(k, self._n - self._pos)
      self._pos += t
      k -= t

  def take(self, k: int) -> np.ndarray:
    """The next `k` sample indices of the shard."""
    parts = []
    while k > 0:
      if self._pos == self._n:
        self._perm, self._pos = self._rng.permutation(self._n), 0
      t = min(k, self._n - self._pos)
      parts.append(self._perm[self._pos:self._pos + t])
      self._pos += t
      k -= t
    return np.concatenate(parts)
