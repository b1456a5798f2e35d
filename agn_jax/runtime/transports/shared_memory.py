"""The processes backend's transport: the center and the commits in shared memory.

`SharedMemoryTransport` implements `agn_jax.runtime.transports.base.Transport`
over two `shm.Segment`s: the center (two buffers under a seqlock) and a ring
of commit slots that the workers fill and the server applies in FIFO order.
"""

import os
import time
from typing import Optional, Sequence, Union

import numpy as np

from agn_jax.runtime.events import WorkerDone
from agn_jax.runtime.transports import shm
from agn_jax.runtime.transports.base import Commit, Transport, WindowPlan
from agn_jax.wire import CommitMeta, Wire, wire_spec


# Header words of the center segment.
_ACTIVE = 0  # Which of the two buffers holds the latest complete center.
_VERSION = 1  # Two seqlock counters, one per buffer: odd while being written.
_CLOCK = 3  # Two clocks, one per buffer.
_HEADER_WORDS = 8
_SEQLOCK_ATTEMPTS = 4


# Slot phases. A slot moves FREE → FILLING (a worker acquired it) → QUEUED
# (the worker wrote the whole payload and header, then committed) → APPLYING
# (the server took it) → FREE. Only a worker's death interrupts that cycle,
# and only in FILLING, where the supervisor reclaims the slot.
_FREE, _FILLING, _QUEUED, _APPLYING = 0, 1, 2, 3
# Per worker: handled commits, done mark, commits and samples when done, and
# its `WindowPlan` (local steps of its next window, steps done, its stream
# ticket's start and steps).
_WORKER_WORDS = 8
# Per slot: owner, phase, queue position, clock of the commit, number of
# step values (-1: none), local steps of its window, bytes committed and
# pulled (`CommitMeta`).
_SLOT_WORDS = 8
# Per slot: loss, time, window start (NaN: unknown); then the task's metrics.
_SLOT_FLOATS = 3


def _uniform(wire: Wire) -> bool:
  """Whether every array of `wire` has one length and dtype (no compression)."""
  return len(set(wire)) == 1


def _slot_bytes(wire: Wire) -> int:
  """A ring slot's bytes: one `[k, n]` block, or each array of `wire` on its own cache lines."""
  if _uniform(wire):
    (n, dtype), k = wire[0], len(wire)
    return shm.aligned(k * n * np.dtype(dtype).itemsize)
  return sum(shm.aligned(n * np.dtype(d).itemsize) for n, d in wire)


def _slot_views(segment, offset: int, wire: Wire):
  """Views of one slot at `offset`: a `[k, n]` array (iterating it gives the k vectors), or a list of one array per `wire` entry."""
  if _uniform(wire):
    (n, dtype), k = wire[0], len(wire)
    return segment.array(np.dtype(dtype), (k, n), offset)
  views = []
  for n, dtype in wire:
    views.append(segment.array(np.dtype(dtype), (n,), offset))
    offset += shm.aligned(n * np.dtype(dtype).itemsize)
  return views


def _ring_header_bytes(num_slots, num_workers, step_capacity, num_metrics=0):
  # The step values are float32, as the kernel computes them: λ of them
  # per slot (160 bytes at λ = 40) next to a payload of millions of floats.
  floats = _SLOT_FLOATS + num_metrics
  return (shm.aligned((_WORKER_WORDS * num_workers + _SLOT_WORDS * num_slots +
                       1) * 8) + shm.aligned(floats * num_slots * 8) +
          shm.aligned(step_capacity * num_slots * 4))


class SharedMemoryTransport(Transport):
  """A `Transport` for processes on one host: POSIX shared memory, `flock` and a semaphore.

  Center: two float32 buffers (double buffering) with a seqlock counter each.
  The server writes the buffer that is not active and then flips `active`, so
  a pull copies a buffer nobody writes unless the server finished two whole
  publishes during that copy; the counter detects that and the pull retries,
  and after a few failed tries it takes a lock that the server also takes
  around its write, so a reader can never starve. A pull therefore never
  returns a center with a commit half applied and never stalls the server for
  longer than one memcpy.

  Commits: a ring of `num_slots` slots, each sized for one commit's `wire`
  (`[payload_size, num_params]` float32 without compression; the codec's
  arrays, e.g. int8 values and float32 scales, with it), whose owners,
  phases and headers live in shared memory too. A worker
  acquires a FREE slot under a lock, fills it, writes the header and only
  then marks it QUEUED with the next queue position; the server applies
  QUEUED slots in queue order (FIFO). A worker that finds no free slot waits:
  that is the backpressure.

  Every lock is an `flock`, which the kernel releases when its holder dies,
  and the only other primitive is a semaphore the workers post to wake the
  server. So a worker killed at any instruction (SIGKILL, out of memory)
  leaves the transport usable: a slot it was filling is reclaimed by the
  supervisor (`reclaim`), a slot it committed is complete and applied.
  (`multiprocessing.Queue`/`Lock`/`Event` would not survive that: their
  locks stay held by the dead.)

  Stores are seen in program order on x86-64 (total store order), which the
  seqlock and the FILLING → QUEUED publication rely on; weakly ordered CPUs
  would need fences around those words.

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
               center_name, ring_name, doorbell, step_capacity=0, wire=None,
               metrics=(), step_metric=None):
    self.num_workers = int(num_workers)
    self.num_params = int(num_params)
    self.payload_size = int(payload_size)
    self.wire = wire_spec(num_params, payload_size, wire)
    self.num_slots = int(num_slots)
    self.step_capacity = int(step_capacity)
    self.metrics = tuple(sorted(metrics))
    self.step_metric = step_metric
    self._center_name = center_name
    self._ring_name = ring_name
    self._doorbell = doorbell
    self._center_seg = None
    self._ring_seg = None

  @classmethod
  def create(cls, ctx, num_params: int, payload_size: int, num_slots: int,
             num_workers: int = 1, step_capacity: int = 0,
             wire: Optional[Sequence] = None, metrics: Sequence[str] = (),
             step_metric: Optional[str] = None) -> "SharedMemoryTransport":
    """Creates the segments (in the launcher, before spawning).

    Args:
      ctx: a `multiprocess` context (spawn or forkserver).
      num_params: length of the flat center.
      payload_size: flat vectors per commit.
      num_slots: ring capacity, >= 1.
      num_workers: how many workers may commit (one acknowledgement counter
        each).
      step_capacity: the most step values a commit carries (λ); 0 for
        none.
      wire: each payload array's `(length, dtype)` (`wire_spec`); None:
        `payload_size` float32 vectors of `num_params`.
      metrics: the names of the task's metrics a commit carries
        (`CommitMeta.metrics`; `agn_jax.tasks.Task.metric_names`).
      step_metric: the name of the metric whose step values a commit
        carries (`CommitMeta.step_metrics`), or None.

    Returns:
      The owning transport; pass it to child processes as a `Process` arg.
    """
    if num_params < 1 or payload_size < 1 or num_slots < 1:
      raise ValueError("num_params, payload_size and num_slots must be >= 1, "
                       f"got {num_params}, {payload_size}, {num_slots}")
    if step_capacity < 0:
      raise ValueError(f"step_capacity must be >= 0, got {step_capacity}")
    wire = wire_spec(num_params, payload_size, wire)
    buffer_bytes = shm.aligned(num_params * 4)
    center = shm.Segment.create(
        shm.aligned(_HEADER_WORDS * 8) + 2 * buffer_bytes)
    try:
      ring = shm.Segment.create(
          _ring_header_bytes(num_slots, num_workers, step_capacity,
                             len(tuple(metrics))) +
          num_slots * _slot_bytes(wire))
    except BaseException:
      center.unlink()
      raise
    t = cls(num_params, payload_size, num_slots, num_workers, center.name,
            ring.name, ctx.Semaphore(0), step_capacity, wire, metrics,
            step_metric)
    t._center_seg, t._ring_seg = center, ring
    t._map()
    t._owner[:] = -1
    return t

  # The views into the segments, per process (`close` drops them).
  _VIEWS = ("_header", "_buffers", "_slots", "_acks", "_done", "_done_commits",
            "_done_samples", "_plan_updates", "_plan_steps",
            "_ticket_start", "_ticket_steps", "_owner",
            "_phase", "_seq", "_clock", "_steps_count", "_local_updates",
            "_bytes_committed", "_bytes_pulled", "_floats", "_steps",
            "_next_seq")
  _LOCKS = ("_center_lock", "_ring_lock")

  def __getstate__(self):
    # Mappings and descriptors are per process; a child re-attaches by name.
    local = ("_center_seg", "_ring_seg", *self._VIEWS, *self._LOCKS,
             "_reported")
    return {k: v for k, v in self.__dict__.items() if k not in local}

  def __setstate__(self, state):
    self.__dict__.update(state)
    self._center_seg = shm.Segment.attach(self._center_name)
    self._ring_seg = shm.Segment.attach(self._ring_name)
    self._map()

  def _map(self):
    p, k, s, n = (self.num_params, self.payload_size, self.num_slots,
                  self.num_workers)
    self._header = self._center_seg.array(np.int64, (_HEADER_WORDS,))
    base, step = shm.aligned(_HEADER_WORDS * 8), shm.aligned(p * 4)
    self._buffers = [
        self._center_seg.array(np.float32, (p,), base + b * step)
        for b in range(2)
    ]
    words = self._ring_seg.array(np.int64,
                                 (_WORKER_WORDS * n + _SLOT_WORDS * s + 1,))
    (self._acks, self._done, self._done_commits, self._done_samples,
     self._plan_updates, self._plan_steps, self._ticket_start,
     self._ticket_steps) = (
         words[i * n:(i + 1) * n] for i in range(_WORKER_WORDS))
    slot_words = words[_WORKER_WORDS * n:]
    (self._owner, self._phase, self._seq, self._clock, self._steps_count,
     self._local_updates, self._bytes_committed, self._bytes_pulled) = (
         slot_words[i * s:(i + 1) * s] for i in range(_SLOT_WORDS))
    self._next_seq = words[-1:]
    base = shm.aligned((_WORKER_WORDS * n + _SLOT_WORDS * s + 1) * 8)
    floats = _SLOT_FLOATS + len(self.metrics)
    self._floats = self._ring_seg.array(np.float64, (floats, s), base)
    self._steps = self._ring_seg.array(
        np.float32, (s, self.step_capacity),
        base + shm.aligned(floats * s * 8))
    base = _ring_header_bytes(s, n, self.step_capacity, len(self.metrics))
    step = _slot_bytes(self.wire)
    self._slots = [_slot_views(self._ring_seg, base + i * step, self.wire)
                   for i in range(s)]
    self._center_lock = self._center_seg.lock_fd()
    self._ring_lock = self._ring_seg.lock_fd()
    self._reported = np.zeros(n, bool)  # Server side: WorkerDone handed out.

  @property
  def names(self):
    """The shared-memory segment names (for leak checks)."""
    return (self._center_name, self._ring_name)

  # Server side.

  def publish(self, center, clock):
    h = self._header
    b = 1 - int(h[_ACTIVE])
    with shm.flocked(self._center_lock):
      h[_VERSION + b] += 1  # Odd: buffer b is being written.
      np.copyto(self._buffers[b], center, casting="same_kind")
      h[_CLOCK + b] = clock
      h[_VERSION + b] += 1  # Even again: complete.
    h[_ACTIVE] = b

  def release(self, commit):
    # Acknowledge before freeing: once no slot of a worker is in flight, its
    # counter is final (a restarted worker reads it as its progress).
    self.acknowledge(commit.meta.worker)
    self.free_slot(commit.handle)

  def commit(self, payload, meta, timeout):
    if tuple(sorted(meta.metrics)) != self.metrics:
      raise ValueError(f"a commit carries the metrics {sorted(meta.metrics)};"
                       f" the ring holds {list(self.metrics)}")
    steps = dict(meta.step_metrics)
    if set(steps) - {self.step_metric}:
      raise ValueError(f"a commit carries step values of {sorted(steps)}; "
                       f"the ring holds those of {self.step_metric!r}")
    count = len(steps.get(self.step_metric, ()))
    if count > self.step_capacity:
      raise ValueError(f"a commit carries {count} step values; the ring "
                       f"holds {self.step_capacity}")
    slot = self.acquire_slot(meta.worker, timeout)
    if slot is None:
      return False
    view = self._slots[slot]
    for i, vector in enumerate(payload):
      np.copyto(view[i], np.asarray(vector))
    self.queue_slot(slot, meta)
    return True

  # The ring itself: what `commit` and `next_commit` are made of.

  def next_commit(self, timeout) -> Optional[Union[Commit, WorkerDone]]:
    """The oldest QUEUED slot's `Commit` (now APPLYING; its payload the slot's views, its handle the slot), a `WorkerDone`, or None after `timeout`."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
      # Done marks first: a worker queues its last commit before it marks
      # itself done, so a mark seen here means that commit is visible below.
      done = self._done.copy()
      queued = np.flatnonzero(self._phase == _QUEUED)
      if queued.size:
        i = int(queued[np.argmin(self._seq[queued])])
        self._phase[i] = _APPLYING
        loss, when, start = self._floats[:_SLOT_FLOATS, i]
        metrics = dict(zip(self.metrics,
                           self._floats[_SLOT_FLOATS:, i].tolist()))
        count = int(self._steps_count[i])
        steps = ({self.step_metric: self._steps[i, :count].copy()}
                 if count >= 0 and self.step_metric is not None else {})
        meta = CommitMeta(int(self._owner[i]), int(self._clock[i]),
                          float(loss), metrics, float(when),
                          None if np.isnan(start) else float(start), steps,
                          int(self._local_updates[i]),
                          int(self._bytes_committed[i]),
                          int(self._bytes_pulled[i]))
        return Commit(meta, self._slots[i], i)
      new = np.flatnonzero((done != 0) & ~self._reported)
      if new.size:
        w = int(new[0])
        self._reported[w] = True
        return WorkerDone(w, int(self._done_commits[w]),
                          int(self._done_samples[w]), {})
      wait = 0.1 if deadline is None else min(0.1,
                                              deadline - time.monotonic())
      if wait <= 0:
        return None
      # Bounded: a worker killed between queueing and ringing costs <= 0.1 s.
      self._doorbell.acquire(True, wait)

  def slot(self, index):
    """The storage of ring slot `index`: `[payload_size, num_params]` float32, or one array per `wire` entry."""
    return self._slots[index]

  def free_slot(self, index):
    """Returns a slot to the ring once the server is done with its payload."""
    self._owner[index] = -1
    self._phase[index] = _FREE

  def set_window_plan(self, worker, plan):
    # Written before the acknowledgement that follows it (`release`), which
    # is what a worker waits for before it reads them.
    self._plan_updates[worker] = plan.local_updates
    self._plan_steps[worker] = plan.steps_done
    self._ticket_start[worker] = plan.ticket_start
    self._ticket_steps[worker] = plan.ticket_steps

  def acknowledge(self, worker):
    """Counts one more of `worker`'s commits as handled."""
    # Only the server writes a counter; a worker only reads its own.
    self._acks[worker] += 1

  def slot_owners(self) -> np.ndarray:
    """Which worker holds each slot (-1: free), whether filling, queued or being applied."""
    return np.where(self._phase == _FREE, -1, self._owner)

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
    with shm.flocked(self._center_lock):
      b = int(h[_ACTIVE])
      np.copyto(out, self._buffers[b])
      return int(h[_CLOCK + b])

  def acquire_slot(self, worker, timeout) -> Optional[int]:
    """A FREE slot now FILLING for `worker`, or None after `timeout` (backpressure)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    pause = 1e-5
    while True:
      if (self._phase == _FREE).any():  # Look before taking the lock.
        with shm.flocked(self._ring_lock):
          free = np.flatnonzero(self._phase == _FREE)
          if free.size:
            index = int(free[0])
            self._owner[index] = worker
            self._phase[index] = _FILLING
            return index
      if deadline is not None and time.monotonic() > deadline:
        return None
      time.sleep(pause)
      pause = min(pause * 2, 1e-3)

  def queue_slot(self, slot: int, meta: CommitMeta) -> None:
    """Hands filled `slot` with its commit's `meta` to the server, behind every slot queued before it."""
    i = slot
    values = dict(meta.step_metrics)
    steps = np.asarray(values.get(self.step_metric, ()),
                       np.float32).reshape(-1)
    self._clock[i] = meta.clock
    self._local_updates[i] = meta.local_updates
    self._bytes_committed[i] = meta.bytes_committed
    self._bytes_pulled[i] = meta.bytes_pulled
    # -1: the commit carries no step values (0: an empty list of them).
    self._steps_count[i] = steps.size if self.step_metric in values else -1
    self._steps[i, :steps.size] = steps
    self._floats[:, i] = (meta.loss, meta.time,
                          np.nan if meta.window_start is None else
                          meta.window_start,
                          *(meta.metrics[name] for name in self.metrics))
    with shm.flocked(self._ring_lock):
      self._seq[i] = self._next_seq[0]
      self._next_seq[0] += 1
      self._phase[i] = _QUEUED  # Last: the payload and header are complete.
    self._doorbell.release()

  def wait_acknowledged(self, worker, count, timeout):
    deadline = None if timeout is None else time.monotonic() + timeout
    pause = 1e-5
    while self._acks[worker] < count:
      if deadline is not None and time.monotonic() > deadline:
        return False
      time.sleep(pause)
      pause = min(pause * 2, 1e-3)  # Short waits stay short; long ones idle.
    return True

  def window_plan(self, worker):
    return WindowPlan(int(self._plan_updates[worker]),
                      int(self._plan_steps[worker]),
                      int(self._ticket_start[worker]),
                      int(self._ticket_steps[worker]))

  def finish(self, done):
    w = done.worker
    self._done_commits[w] = done.num_commits
    self._done_samples[w] = done.num_samples
    self._done[w] = 1  # Last: after this worker's final commit was queued.
    self._doorbell.release()

  # Supervisor side.

  def reclaim(self, worker):
    with shm.flocked(self._ring_lock):
      mine = np.flatnonzero((self._owner == worker) &
                            (self._phase == _FILLING))
      for i in mine:
        self._owner[i] = -1
        self._phase[i] = _FREE
    return int(mine.size)

  def in_flight(self, worker):
    return bool(((self._owner == worker) & ((self._phase == _QUEUED) |
                                            (self._phase == _APPLYING))).any())

  def acknowledged(self, worker):
    return int(self._acks[worker])

  def set_acknowledged(self, worker, count):
    self._acks[worker] = count

  def is_done(self, worker):
    return bool(self._done[worker])

  def close(self):
    for attr in self._VIEWS:
      self.__dict__.pop(attr, None)
    for attr in self._LOCKS:
      fd = self.__dict__.pop(attr, None)
      if fd is not None:
        os.close(fd)
    for seg in (self._center_seg, self._ring_seg):
      if seg is not None:
        seg.close()

  def unlink(self):
    for seg in (self._center_seg, self._ring_seg):
      if seg is not None and seg.owner:
        seg.unlink()
