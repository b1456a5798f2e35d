"""The state every transport keeps somewhere: the center, the commit queue, each worker's counters, the switches.

Threads keep it under a condition variable (`inprocess.InProcessTransport`);
Ray's hub actor (`ray.Hub`) holds it on its event loop.

Example:
  >>> board = CommitBoard(num_workers=2, capacity=4)
  >>> board.center is None, board.switches
  (True, set())
"""

import collections
from typing import Dict

from agn_jax.runtime import events as ev
from agn_jax.runtime.transports.base import WindowPlan


class CommitBoard:
  """What a transport keeps: the latest center, a bounded FIFO of commits, each worker's counters, the switches.

  It never waits and is never shared unguarded: its holder runs each method
  atomically and wakes its waiters after every change.

  Attributes:
    center: `(center, clock)` last published, or None.
    switches: the names of the switches set so far.
  """

  def __init__(self, num_workers: int, capacity: int):
    self.capacity = capacity
    self.center = None
    self.switches = set()
    self._queue = collections.deque()  # (meta, payload), arrival order.
    self._applying = [0] * num_workers
    self._acks = [0] * num_workers
    self._plans = [WindowPlan()] * num_workers
    self._done: Dict[int, ev.WorkerDone] = {}
    self._reported = set()  # Workers whose WorkerDone the server took.

  def publish(self, center, clock: int) -> None:
    self.center = (center, clock)

  def has_room(self) -> bool:
    return len(self._queue) < self.capacity

  def has_message(self) -> bool:
    return bool(self._queue) or bool(set(self._done) - self._reported)

  def push(self, meta, payload) -> bool:
    """Queues a commit (call when `has_room`)."""
    self._queue.append((meta, payload))
    return True

  def take(self):
    """The oldest commit as `(meta, payload)`, now being applied, else a `WorkerDone` (call when `has_message`)."""
    if self._queue:
      # A worker commits before it finishes, so its WorkerDone comes last.
      meta, payload = self._queue.popleft()
      self._applying[meta.worker] += 1
      return meta, payload
    w = min(set(self._done) - self._reported)
    self._reported.add(w)
    return self._done[w]

  def release(self, worker: int, handled: bool) -> None:
    """The server is done with a commit of `worker`; `handled` counts it (applied or rejected)."""
    self._applying[worker] -= 1
    self._acks[worker] += int(handled)

  def set_window_plan(self, worker: int, plan: WindowPlan) -> None:
    self._plans[worker] = WindowPlan(*plan)

  def window_plan(self, worker: int) -> WindowPlan:
    return self._plans[worker]

  def finish(self, done: ev.WorkerDone) -> None:
    self._done[done.worker] = done

  def in_flight(self, worker: int) -> bool:
    return (self._applying[worker] > 0 or
            any(meta.worker == worker for meta, _ in self._queue))

  def acknowledged(self, worker: int) -> int:
    return self._acks[worker]

  def set_acknowledged(self, worker: int, count: int) -> None:
    self._acks[worker] = count

  def is_done(self, worker: int) -> bool:
    return worker in self._done
