"""Each worker's share of the training set: its shard, its windows, the order it draws them in.

Pure numpy. The process workers and the simulator both take their samples
from here, so a backend never changes which examples a worker sees.
"""

import math
from typing import NamedTuple, Optional, Sequence, Tuple

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


def local_updates(communication_window: int,
                  speeds: Sequence[float]) -> Tuple[int, ...]:
  """Each worker's window under Dynamic Local Updates: `λ_k = λ s_k / max_j s_j`.

  The fastest worker keeps λ local steps, the others fewer, in proportion to
  their speed, so that every window takes about as long (Liu, Douillard et
  al. 2024, arXiv:2401.09135). λ_k is rounded to the nearest integer (a half
  rounds up) and is at least 1.

  Args:
    communication_window: λ.
    speeds: each worker's speed s_k > 0, in any unit (local steps per
      second, or one over the seconds of a local step).

  Returns:
    `(λ_0, ..., λ_{n-1})`.

  Raises:
    ValueError: for a speed that is not a finite number > 0.

  Example:
    >>> local_updates(10, [1.0, 0.5, 0.24, 0.01])
    (10, 5, 2, 1)
  """
  speeds = [float(s) for s in speeds]
  if not speeds or not all(math.isfinite(s) and s > 0 for s in speeds):
    raise ValueError(f"speeds must be finite numbers > 0, got {speeds!r}")
  fastest = max(speeds)
  return tuple(max(1, math.floor(communication_window * s / fastest + 0.5))
               for s in speeds)


class Windows(NamedTuple):
  """Each worker's windows over its share: how many, and how many local steps each.

  Every worker's share is the same `share_steps` local steps (whole windows
  of λ, `windows_per_worker` × λ), whatever its window: with Dynamic Local
  Updates worker k runs windows of λ_k steps, and one shorter last window
  for what remains, so the run trains on exactly the samples it trains on
  without them. With λ_k = λ for all, every window is λ steps.

  Attributes:
    share_steps: local steps in each worker's share.
    local_updates: λ_k of each worker.

  Example:
    >>> w = Windows(share_steps=10, local_updates=(5, 3))
    >>> w.count(0), w.count(1), [w.steps(1, j) for j in range(w.count(1))]
    (2, 4, [3, 3, 3, 1])
    >>> w.steps_before(1, 4), w.total()
    (10, 6)
  """
  share_steps: int
  local_updates: Tuple[int, ...]

  @classmethod
  def fixed(cls, num_windows: int, communication_window: int,
            num_workers: int) -> "Windows":
    """`num_windows` windows of λ steps for each of n workers."""
    return cls(int(num_windows) * int(communication_window),
               (int(communication_window),) * int(num_workers))

  def count(self, worker: int) -> int:
    """Windows in `worker`'s share: `ceil(share_steps / λ_k)`."""
    return -(-self.share_steps // self.local_updates[worker])

  def steps(self, worker: int, window: int) -> int:
    """Local steps of window `window` (from 0) of `worker`; 0 past its share."""
    lam = self.local_updates[worker]
    return max(0, min(lam, self.share_steps - window * lam))

  def steps_before(self, worker: int, window: int) -> int:
    """Local steps of `worker`'s first `window` windows."""
    return min(window * self.local_updates[worker], self.share_steps)

  def total(self) -> int:
    """Windows of every worker together: the run's commits."""
    return sum(self.count(k) for k in range(len(self.local_updates)))


class BatchSampler:
  """Endless shuffled passes over one shard: a fresh permutation every epoch.

  Example:
    >>> import numpy as np
    >>> sampler = BatchSampler(4, np.random.default_rng(0))
    >>> first_pass = sampler.take(4)
    >>> sorted(first_pass.tolist()), len(sampler.take(6))
    ([0, 1, 2, 3], 6)
  """

  def __init__(self, num_examples: int, rng: Optional[np.random.Generator]):
    if num_examples < 1:
      raise ValueError("a worker's shard is empty; use fewer workers")
    self._n = num_examples
    self._rng = rng
    self._perm = self._next_pass()
    self._pos = 0

  def _next_pass(self) -> np.ndarray:
    """The order of the next pass: `num_examples` indices."""
    return self._rng.permutation(self._n)

  def _advance(self, k: int, keep: bool) -> Optional[np.ndarray]:
    parts = []
    while k > 0:
      if self._pos == self._n:
        self._perm, self._pos = self._next_pass(), 0
      t = min(k, self._n - self._pos)
      if keep:
        parts.append(self._perm[self._pos:self._pos + t])
      self._pos += t
      k -= t
    return np.concatenate(parts) if keep else None

  def skip(self, k: int) -> None:
    """Advances past `k` samples, exactly as `take(k)` would."""
    self._advance(k, keep=False)

  def take(self, k: int) -> np.ndarray:
    """The next `k` sample indices of the shard."""
    return self._advance(k, keep=True)


# The random streams of `epoch_order` (apart from the shards' `[seed,
# worker]`): the epoch slices' permutations, and the shared stream's.
EPOCH_SLICES_STREAM, SHARED_STREAM = 1 << 20, 1 << 21


def epoch_order(num_examples: int, seed: int, epoch: int,
                stream: int) -> np.ndarray:
  """Epoch `epoch`'s seeded permutation of the whole training set, in random stream `stream`.

  Example:
    >>> sorted(epoch_order(5, seed=0, epoch=3, stream=SHARED_STREAM).tolist())
    [0, 1, 2, 3, 4]
  """
  return np.random.default_rng([seed, stream, epoch]).permutation(num_examples)


# How the training set reaches the workers (`TrainConfig.data_assignment`).
ASSIGNMENTS = ("shards", "epoch_slices", "stream")
# The modes in which each worker draws its own samples (`sampler`).
PER_WORKER = ("shards", "epoch_slices")
STREAM = "stream"


class Stream:
  """`stream`: one shared sequence of mini-batches; whoever needs a window takes the next steps of it.

  The sequence is every epoch's seeded permutation of the whole set, one
  after another, cut into mini-batches; step s of the stream is samples
  `[s B, (s + 1) B)` of it. Which worker takes which steps is not the
  stream's business: the clock (the simulator) or the server (processes,
  Ray) hands out `Tickets`, and a fast worker takes more of them. The
  assumption of asynchronous Local-SGD and Dynamic Local Updates (Liu,
  Douillard et al. 2024).

  Example:
    >>> s = Stream(6, batch_size=2, seed=0)
    >>> first_epoch, second_epoch = s.indices(0, 3), s.indices(3, 3)
    >>> sorted(first_epoch.tolist()), sorted(second_epoch.tolist())
    ([0, 1, 2, 3, 4, 5], [0, 1, 2, 3, 4, 5])
    >>> s.indices(2, 2).tolist() == (first_epoch[4:].tolist() +
    ...                              second_epoch[:2].tolist())
    True
  """

  def __init__(self, num_examples: int, batch_size: int, seed: int):
    if num_examples < 1:
      raise ValueError("the training set is empty")
    self._n, self._batch, self._seed = num_examples, batch_size, seed
    self._cache: dict = {}

  def _epoch(self, epoch: int) -> np.ndarray:
    if epoch not in self._cache:
      if len(self._cache) > 2:
        self._cache.pop(min(self._cache))
      self._cache[epoch] = epoch_order(self._n, self._seed, epoch,
                                       SHARED_STREAM)
    return self._cache[epoch]

  def indices(self, start_step: int, steps: int) -> np.ndarray:
    """Sample indices of steps `[start_step, start_step + steps)`, `steps × batch_size` of them."""
    first, last = start_step * self._batch, (start_step + steps) * self._batch
    parts, pos = [], first
    while pos < last:
      epoch, offset = divmod(pos, self._n)
      take = min(last - pos, self._n - offset)
      parts.append(self._epoch(epoch)[offset:offset + take])
      pos += take
    return (np.concatenate(parts) if parts else np.zeros(0, np.int64))


class Tickets:
  """The stream's counter: hands out its steps, in order, until the run's budget is spent.

  The run's budget is every worker's share together (`n × share_steps`
  local steps), so the sample budget is the same as with `shards` and
  `epoch_slices`; a ticket is `(start_step, steps)`, its last one possibly
  shorter than asked (only with Dynamic Local Updates, whose windows do not
  divide the budget).

  Example:
    >>> t = Tickets(total_steps=5)
    >>> t.take(2), t.take(2), t.take(2), t.take(2)
    ((0, 2), (2, 2), (4, 1), None)
  """

  def __init__(self, total_steps: int, taken: int = 0):
    self.total_steps, self.taken = int(total_steps), int(taken)

  def take(self, steps: int) -> Optional[Tuple[int, int]]:
    """The next `(start_step, steps)`, or None once the budget is spent."""
    steps = min(int(steps), self.total_steps - self.taken)
    if steps <= 0:
      return None
    ticket = (self.taken, steps)
    self.taken += steps
    return ticket


class ShardSampler:
  """`shards`: worker k cycles its one fixed contiguous shard, reshuffled every pass (`BatchSampler`).

  Indices are into the whole training set.

  Example:
    >>> import numpy as np
    >>> s = ShardSampler(10, num_workers=2, worker=1, seed=0)
    >>> sorted(s.take(5).tolist())
    [5, 6, 7, 8, 9]
  """

  def __init__(self, num_examples: int, num_workers: int, worker: int,
               seed: int):
    self.start, stop = shard_bounds(num_examples, num_workers, worker)
    self._sampler = BatchSampler(stop - self.start,
                                 np.random.default_rng([seed, worker]))

  def skip(self, k: int) -> None:
    """Advances past `k` samples, exactly as `take(k)` would."""
    self._sampler.skip(k)

  def take(self, k: int) -> np.ndarray:
    """The next `k` sample indices."""
    return self._sampler.take(k) + self.start


class EpochSliceSampler(BatchSampler):
  """`epoch_slices`: every epoch a fresh seeded permutation of the whole set, cut into n equal slices; worker k takes slice k.

  What the thesis' dist-keras did (the union of `num_epoch` copies of the
  data, repartitioned over the workers) and what PyTorch's
  `DistributedSampler.set_epoch` does: over the run a worker sees the whole
  set, not one shard again and again. Every worker sees the same
  permutation of an epoch (it depends on the seed and the epoch only), so
  the slices of an epoch are disjoint and cover the set. A worker's
  samples run on from one epoch's slice into the next one's; its share is
  the same whole windows as with `shards`, so the sample budget is the
  same in every mode.

  Example:
    >>> import numpy as np
    >>> a = EpochSliceSampler(10, num_workers=2, worker=0, seed=0)
    >>> b = EpochSliceSampler(10, num_workers=2, worker=1, seed=0)
    >>> sorted(a.take(5).tolist() + b.take(5).tolist())  # Epoch 0: all of it.
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
  """

  def __init__(self, num_examples: int, num_workers: int, worker: int,
               seed: int):
    if num_examples < num_workers:
      raise ValueError("a worker's slice is empty; use fewer workers")
    self._num_examples, self._seed = num_examples, seed
    self._bounds = shard_bounds(num_examples, num_workers, worker)
    self._epoch = -1
    super().__init__(self._bounds[1] - self._bounds[0], rng=None)

  def _next_pass(self) -> np.ndarray:
    """The next epoch's slice: this worker's part of its permutation of all."""
    self._epoch += 1
    start, stop = self._bounds
    return epoch_order(self._num_examples, self._seed, self._epoch,
                       EPOCH_SLICES_STREAM)[start:stop]


def sampler(assignment: str, num_examples: int, num_workers: int,
            worker: int, seed: int):
  """Worker `worker`'s sampler under `assignment` (one of `ASSIGNMENTS`): `take(k)` gives indices into the whole set.

  Raises:
    ValueError: an unknown assignment, or an empty share.
  """
  if assignment == "shards":
    return ShardSampler(num_examples, num_workers, worker, seed)
  if assignment == "epoch_slices":
    return EpochSliceSampler(num_examples, num_workers, worker, seed)
  if assignment == STREAM:
    raise ValueError("stream has no per-worker sampler: take `Tickets` and "
                     "read `Stream.indices`")
  raise ValueError(f"data_assignment must be one of {', '.join(ASSIGNMENTS)}, "
                   f"got {assignment!r}")
