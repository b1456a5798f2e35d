"""How the center and commits move between processes: the interface and its shared-memory backend.

The server and workers only talk to a `Transport`; a deterministic simulator
or a multi-host backend can replace `SharedMemoryTransport` without touching
the strategies, the server loop or the worker loop.
"""

import abc
import queue
import time
from typing import Any, Dict, NamedTuple, Optional, Union

import numpy as np

from agn_jax.runtime import shm


class CommitHeader(NamedTuple):
  """The small metadata that travels with a commit; the payload stays in its slot.

  Attributes:
    slot: index of the ring slot that holds the payload.
    worker: the committing worker's index.
    clock: the server clock of the center the commit's window started from
      (commit-then-pull) or that the commit was computed against
      (pull-then-commit); staleness is `clock at apply − clock`.
    loss: the worker's mean local loss over the window.
    accuracy: the worker's mean local accuracy over the window.
    time: `time.time()` when the worker committed.
  """
  slot: int
  worker: int
  clock: int
  loss: float
  accuracy: float
  time: float


class WorkerDone(NamedTuple):
  """A worker's last message: it has used its data share (or was stopped).

  Attributes:
    worker: the worker's index.
    num_commits: commits it pushed (rejected ones included).
    num_samples: training samples in those commits' windows.
    stats: anything else worth reporting (peak RSS, start-up time).
  """
  worker: int
  num_commits: int
  num_samples: int
  stats: Dict[str, Any]


Message = Union[CommitHeader, WorkerDone]


class Transport(abc.ABC):
  """The center, the commit ring and the commit queue, as the runtime sees them.

  One server publishes the center and consumes commits FIFO; any number of
  workers pull the center and push commits. `create` happens in the launcher;
  a child process attaches by receiving the transport as a `Process` argument.

  Attributes:
    num_params: length of the flat float32 center.
    payload_size: flat vectors per commit (`len(strategy.payload)`).
    num_slots: capacity of the commit ring.
  """

  num_params: int
  payload_size: int
  num_slots: int

  # Server side.
  @abc.abstractmethod
  def publish(self, center: np.ndarray, clock: int) -> None:
    """Makes `center` (after `clock` applied commits) what pulls return."""

  @abc.abstractmethod
  def next_commit(self, timeout: Optional[float]) -> Optional[Message]:
    """The oldest unprocessed message, or None after `timeout` seconds."""

  @abc.abstractmethod
  def slot(self, index: int) -> np.ndarray:
    """The `[payload_size, num_params]` float32 storage of ring slot `index`."""

  @abc.abstractmethod
  def free_slot(self, index: int) -> None:
    """Returns a slot to the ring once the server is done with its payload."""

  @abc.abstractmethod
  def acknowledge(self, worker: int) -> None:
    """Marks one more of `worker`'s commits as handled (applied or rejected)."""

  # Worker side.
  @abc.abstractmethod
  def pull(self, out: np.ndarray, timeout: Optional[float] = None) -> int:
    """Copies a consistent snapshot of the center into `out`; returns its clock.

    Blocks until the server has published the initial center.

    Raises:
      TimeoutError: nothing was published within `timeout` seconds.
    """

  @abc.abstractmethod
  def acquire_slot(self, worker: int,
                   timeout: Optional[float]) -> Optional[int]:
    """A free slot for `worker` to fill, or None after `timeout` (backpressure)."""

  @abc.abstractmethod
  def commit(self, header: CommitHeader) -> None:
    """Hands a filled slot to the server."""

  @abc.abstractmethod
  def wait_acknowledged(self, worker: int, count: int,
                        timeout: Optional[float]) -> bool:
    """Waits until the server handled `count` commits of `worker`; False on timeout.

    A worker pulls only after its own commits are in the center, as with the
    reference implementation's synchronous commit RPC: with one worker the
    run is then exactly Lookahead, and staleness counts other workers only.
    """

  @abc.abstractmethod
  def finish(self, done: WorkerDone) -> None:
    """Tells the server this worker will commit no more (after its commits)."""

  def close(self) -> None:
    """Releases this process' handles."""

  def unlink(self) -> None:
    """Destroys the shared state (owner only, after every process is gone)."""


# Header words of the center segment.
_ACTIVE = 0  # Which of the two buffers holds the latest complete center.
_VERSION = 1  # Two seqlock counters, one per buffer: odd while being written.
_CLOCK = 3  # Two clocks, one per buffer.
_HEADER_WORDS = 8
_SEQLOCK_ATTEMPTS = 4


def _ring_header_bytes(num_slots, num_workers):
  # Acknowledgement counters (int64 per worker), then slot owners (int32).
  return shm.aligned(num_workers * 8) + shm.aligned(num_slots * 4)


class SharedMemoryTransport(Transport):
  """A `Transport` for processes on one host: POSIX shared memory and queues.

  Center: two float32 buffers (double buffering) with a seqlock counter each.
  The server writes the buffer that is not active and then flips `active`, so
  a pull copies a buffer nobody writes unless the server finished two whole
  publishes during that copy; the counter detects that and the pull retries,
  and after a few failed tries it takes a lock that the server also takes
  around its write, so a reader can never starve. A pull therefore never
  returns a center with a commit half applied and never stalls the server for
  longer than one memcpy.

  Commits: a ring of `num_slots` slots of `[payload_size, num_params]` float32.
  Free slot indices wait in one queue, filled slot indices (with a
  `CommitHeader`) in another; only indices and headers are pickled. A worker
  that finds no free slot blocks: that is the backpressure.

  Seqlock ordering relies on x86-64's total store order (stores are seen in
  program order); weakly ordered CPUs would need fences around the counters.

  Example:
    >>> import multiprocess, numpy as np
    >>> ctx = multiprocess.get_context("spawn")
    >>> t = SharedMemoryTransport.create(ctx, num_params=3, payload_size=1,
    ...                                  num_slots=2)
    >>> t.publish(np.ones(3, np.float32), clock=0)
    >>> out = np.empty(3, np.float32)
    >>> t.pull(out), out
    (0, array([1., 1., 1.], dtype=float32))
    >>> t.close(); t.unlink()
  """

  def __init__(self, num_params, payload_size, num_slots, num_workers,
               center_name, ring_name, free_slots, commits, lock):
    self.num_workers = int(num_workers)
    self.num_params = int(num_params)
    self.payload_size = int(payload_size)
    self.num_slots = int(num_slots)
    self._center_name = center_name
    self._ring_name = ring_name
    self._free_slots = free_slots
    self._commits = commits
    self._lock = lock
    self._center_seg = None
    self._ring_seg = None

  @classmethod
  def create(cls, ctx, num_params: int, payload_size: int, num_slots: int,
             num_workers: int = 1) -> "SharedMemoryTransport":
    """Creates the segments and queues (in the launcher, before spawning).

    Args:
      ctx: a `multiprocess` context (spawn or forkserver).
      num_params: length of the flat center.
      payload_size: flat vectors per commit.
      num_slots: ring capacity, >= 1.
      num_workers: how many workers may commit (one acknowledgement counter
        each).

    Returns:
      The owning transport; pass it to child processes as a `Process` arg.
    """
    if num_params < 1 or payload_size < 1 or num_slots < 1:
      raise ValueError("num_params, payload_size and num_slots must be >= 1, "
                       f"got {num_params}, {payload_size}, {num_slots}")
    buffer_bytes = shm.aligned(num_params * 4)
    center = shm.Segment.create(
        shm.aligned(_HEADER_WORDS * 8) + 2 * buffer_bytes)
    try:
      ring = shm.Segment.create(
          _ring_header_bytes(num_slots, num_workers) +
          num_slots * shm.aligned(payload_size * num_params * 4))
    except BaseException:
      center.unlink()
      raise
    free_slots = ctx.Queue()
    for index in range(num_slots):
      free_slots.put(index)
    t = cls(num_params, payload_size, num_slots, num_workers, center.name,
            ring.name, free_slots, ctx.Queue(), ctx.Lock())
    t._center_seg, t._ring_seg = center, ring
    t._map()
    t._owners[:] = -1
    return t

  def __getstate__(self):
    # Mappings are per process; a child re-attaches by name.
    local = ("_center_seg", "_ring_seg", "_header", "_buffers", "_slots",
             "_owners", "_acks")
    return {k: v for k, v in self.__dict__.items() if k not in local}

  def __setstate__(self, state):
    self.__dict__.update(state)
    self._center_seg = shm.Segment.attach(self._center_name)
    self._ring_seg = shm.Segment.attach(self._ring_name)
    self._map()

  def _map(self):
    p, k, s = self.num_params, self.payload_size, self.num_slots
    self._header = self._center_seg.array(np.int64, (_HEADER_WORDS,))
    base, step = shm.aligned(_HEADER_WORDS * 8), shm.aligned(p * 4)
    self._buffers = [
        self._center_seg.array(np.float32, (p,), base + b * step)
        for b in range(2)
    ]
    self._acks = self._ring_seg.array(np.int64, (self.num_workers,))
    self._owners = self._ring_seg.array(np.int32, (s,),
                                        shm.aligned(self.num_workers * 8))
    base = _ring_header_bytes(s, self.num_workers)
    step = shm.aligned(k * p * 4)
    self._slots = [
        self._ring_seg.array(np.float32, (k, p), base + i * step)
        for i in range(s)
    ]

  @property
  def names(self):
    """The shared-memory segment names (for leak checks)."""
    return (self._center_name, self._ring_name)

  # Server side.

  def publish(self, center, clock):
    h = self._header
    b = 1 - int(h[_ACTIVE])
    with self._lock:
      h[_VERSION + b] += 1  # Odd: buffer b is being written.
      np.copyto(self._buffers[b], center, casting="same_kind")
      h[_CLOCK + b] = clock
      h[_VERSION + b] += 1  # Even again: complete.
    h[_ACTIVE] = b

  def next_commit(self, timeout):
    try:
      return self._commits.get(timeout=timeout)
    except queue.Empty:
      return None

  def slot(self, index):
    return self._slots[index]

  def free_slot(self, index):
    self._owners[index] = -1
    self._free_slots.put(index)

  def acknowledge(self, worker):
    # Only the server writes a counter; a worker only reads its own.
    self._acks[worker] += 1

  def slot_owners(self) -> np.ndarray:
    """Which worker holds each slot (-1: free or queued for the server).

    A supervisor that restarts a dead worker frees the slots it still holds.
    """
    return self._owners.copy()

  # Worker side.

  def pull(self, out, timeout=None):
    h = self._header
    deadline = None if timeout is None else time.monotonic() + timeout
    while h[_VERSION] == 0 and h[_VERSION + 1] == 0:  # Nothing published yet.
      if deadline is not None and time.monotonic() > deadline:
        raise TimeoutError("the server published no center in time")
      time.sleep(0.005)
    for _ in range(_SEQLOCK_ATTEMPTS):
      b = int(h[_ACTIVE])
      version = int(h[_VERSION + b])
      if version % 2 == 0 and version > 0:
        np.copyto(out, self._buffers[b])
        clock = int(h[_CLOCK + b])
        if int(h[_VERSION + b]) == version:
          return clock
    # The server outran us repeatedly (e.g. this process was descheduled).
    with self._lock:
      b = int(h[_ACTIVE])
      np.copyto(out, self._buffers[b])
      return int(h[_CLOCK + b])

  def acquire_slot(self, worker, timeout):
    try:
      index = self._free_slots.get(timeout=timeout)
    except queue.Empty:
      return None
    self._owners[index] = worker
    return index

  def commit(self, header):
    self._commits.put(header)

  def wait_acknowledged(self, worker, count, timeout):
    deadline = None if timeout is None else time.monotonic() + timeout
    pause = 1e-5
    while self._acks[worker] < count:
      if deadline is not None and time.monotonic() > deadline:
        return False
      time.sleep(pause)
      pause = min(pause * 2, 1e-3)  # Short waits stay short; long ones idle.
    return True

  def finish(self, done):
    self._commits.put(done)

  def close(self):
    for attr in ("_header", "_buffers", "_slots", "_owners", "_acks"):
      self.__dict__.pop(attr, None)
    for seg in (self._center_seg, self._ring_seg):
      if seg is not None:
        seg.close()
    for q in (self._free_slots, self._commits):
      # Never block interpreter exit on items nobody will read any more.
      q.cancel_join_thread()

  def unlink(self):
    for seg in (self._center_seg, self._ring_seg):
      if seg is not None and seg.owner:
        seg.unlink()
