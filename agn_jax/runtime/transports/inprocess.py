"""The parts of a run as threads of one process: a `Transport`, its channels and a backend.

`CommitBoard` is the state every transport keeps somewhere (the center, the
commit queue, each worker's counters, the switches); here a condition
variable guards it, and Ray's hub actor (`ray_transport`) holds the same
board on its event loop. `InProcessBackend` runs the real server, worker and
evaluator loops on threads under the real supervisor
(`backend.ServerBackend`), so a test drives them in seconds without
spawning a process. It is no choice of `train()`: threads of one
interpreter share its GIL and cannot be killed.

Example:
  >>> import numpy as np
  >>> from agn_jax.runtime.transport import CommitMeta
  >>> t = InProcessTransport(num_params=2, payload_size=1, num_workers=1,
  ...                        capacity=1)
  >>> t.publish(np.ones(2, np.float32), clock=0)
  >>> t.commit((np.full(2, 0.5, np.float32),), CommitMeta(0, 0, 0.1, 0.9, 0.0),
  ...          timeout=1)
  True
  >>> commit = t.next_commit(timeout=1)
  >>> t.release(commit)
  >>> commit.payload[0].tolist(), t.acknowledged(0)
  ([0.5, 0.5], 1)
"""

import collections
import queue
import threading
import time
from typing import Dict, List

import numpy as np

from agn_jax.runtime import backend as backend_lib
from agn_jax.runtime import channels
from agn_jax.runtime import events as ev
from agn_jax.runtime.transport import Commit, Transport, WindowPlan, wire_spec


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


class InProcessTransport(Transport):
  """A `Transport` between threads: a `CommitBoard` under a condition variable.

  Payloads and centers are copied in and out, so no thread ever sees
  another's buffer change. Nothing is ever half-queued, so `reclaim` has
  nothing to do.
  """

  def __init__(self, num_params: int, payload_size: int, num_workers: int,
               capacity: int, wire=None):
    self.num_params = int(num_params)
    self.payload_size = int(payload_size)
    self.wire = wire_spec(num_params, payload_size, wire)
    self.board = CommitBoard(num_workers, capacity)
    self._changed = threading.Condition()

  def _when(self, ready, step, timeout, otherwise=None):
    """`step()` as soon as `ready()` holds, in one hold of the lock; `otherwise` after `timeout` seconds."""
    with self._changed:
      if not self._changed.wait_for(ready, timeout):
        return otherwise
      result = step()
      self._changed.notify_all()
      return result

  def _now(self, step):
    return self._when(lambda: True, step, None)

  # Server side.
  def publish(self, center, clock):
    copy = np.array(center, np.float32)
    self._now(lambda: self.board.publish(copy, int(clock)))

  def next_commit(self, timeout):
    message = self._when(self.board.has_message, self.board.take, timeout)
    if message is None or isinstance(message, ev.WorkerDone):
      return message
    return Commit(*message)

  def release(self, commit):
    self._now(lambda: self.board.release(commit.meta.worker, True))

  def set_window_plan(self, worker, plan):
    self._now(lambda: self.board.set_window_plan(worker, plan))

  # Worker side.
  def pull(self, out, timeout=None):
    latest = self._when(lambda: self.board.center is not None,
                        lambda: self.board.center, timeout)
    if latest is None:
      raise TimeoutError("the server published no center in time")
    np.copyto(out, latest[0])
    return latest[1]

  def commit(self, payload, meta, timeout):
    vectors = tuple(np.array(v, dtype) for v, (_, dtype) in zip(payload,
                                                                  self.wire))
    return self._when(self.board.has_room,
                      lambda: self.board.push(meta, vectors), timeout, False)

  def wait_acknowledged(self, worker, count, timeout):
    return self._when(lambda: self.board.acknowledged(worker) >= count,
                      lambda: True, timeout, False)

  def window_plan(self, worker):
    return self._now(lambda: self.board.window_plan(worker))

  def finish(self, done):
    self._now(lambda: self.board.finish(done))

  # Supervisor side.
  def reclaim(self, worker):
    return 0

  def in_flight(self, worker):
    return self._now(lambda: self.board.in_flight(worker))

  def acknowledged(self, worker):
    return self._now(lambda: self.board.acknowledged(worker))

  def set_acknowledged(self, worker, count):
    self._now(lambda: self.board.set_acknowledged(worker, count))

  def is_done(self, worker):
    return self._now(lambda: self.board.is_done(worker))


class InProcessSwitches(channels.Switches):
  """The run's switches for threads: a set under a condition variable."""

  def __init__(self):
    self._set = set()
    self._changed = threading.Condition()

  def set(self, name):
    with self._changed:
      self._set.add(name)
      self._changed.notify_all()

  def is_set(self, name):
    with self._changed:
      return name in self._set

  def wait(self, name, timeout):
    with self._changed:
      return self._changed.wait_for(lambda: name in self._set, timeout)


class InProcessEvents(channels.Events):
  """A thread's channel to the supervisor: a `queue.Queue` every part shares."""

  def __init__(self, inbox: queue.Queue):
    self.inbox = inbox

  def put(self, event):
    self.inbox.put(event)


class InProcessReplies(channels.Replies):
  """The supervisor's answers to the server thread: a `queue.Queue`."""

  def __init__(self):
    self.answers = queue.Queue()
    self._next = []

  def poll(self, timeout):
    if not self._next:
      try:
        self._next.append(self.answers.get(timeout=timeout))
      except queue.Empty:
        return False
    return True

  def recv(self):
    self.poll(None)
    return self._next.pop()


class InMemoryData(channels.DataSource):
  """The run's arrays, shared by reference between threads."""

  def __init__(self, arrays: Dict[str, np.ndarray]):
    self._arrays = dict(arrays)

  def arrays(self):
    return dict(self._arrays)


class InProcessBackend(backend_lib.ServerBackend):
  """The server, the workers and the evaluator as threads of this process, under the shared supervisor.

  For tests of the loops and of the supervision; a part that fails is
  started again as with any backend, but a thread cannot be killed, so
  `AGN_JAX_FAULT=exit` (which ends the process) has no place here.

  Example:
    >>> from agn_jax.config import ProcessesOptions, TrainConfig
    >>> from agn_jax.runtime.bookkeeping import RunBook
    >>> config = TrainConfig(num_workers=2, epochs=1.0,
    ...                      workdir="/tmp/agn_inprocess_doc",
    ...                      options=ProcessesOptions(cache_dir="")).resolved()
    >>> run = InProcessBackend(config, RunBook(config, None, "inprocess"))  # doctest: +SKIP
    >>> run.prepare(); run.run(); run.shutdown()  # doctest: +SKIP
  """

  name = "inprocess"
  poll_seconds = 0.02

  def _set_up(self, plan, slots, dataset):
    del dataset  # The plan's arrays are shared by reference.
    self.transport = InProcessTransport(plan.layout.num_params,
                                        plan.payload_size,
                                        self.config.num_workers, slots,
                                        wire=plan.wire)
    self.switches = InProcessSwitches()
    self.inbox = queue.Queue()
    self.events = InProcessEvents(self.inbox)
    self.replies = InProcessReplies()
    self.data = InMemoryData(backend_lib.dataset_arrays(plan.dataset))
    self.threads: Dict[str, threading.Thread] = {}
    self.results: Dict[str, bool] = {}
    self.ended: List[str] = []
    self.changed = threading.Event()  # An event was put or a part ended.

  def _launch(self, role):
    incarnation = self.incarnations.get(backend_lib.worker_of(role), 0)

    def part():
      try:
        self.results[role] = backend_lib.run_part(
            self.ctx, role, self.replies, self.config.resume, incarnation)
      finally:
        self.ended.append(role)
        self.changed.set()

    self.results.pop(role, None)
    self.threads[role] = threading.Thread(target=part, name=f"agn-{role}",
                                          daemon=True)
    self.threads[role].start()

  def _wait(self, timeout):
    if not self.ended and self.inbox.empty():
      self.changed.wait(timeout)
    self.changed.clear()
    return list(self.ended)

  def _exit_cause(self, role):
    self.threads[role].join()
    self.ended.remove(role)
    ok = self.results.get(role, False)
    return ok, "ended early" if ok else "failed"

  def _take_events(self):
    while True:
      try:
        yield self.inbox.get_nowait()
      except queue.Empty:
        return

  def _reply(self, answer):
    self.replies.answers.put(answer)

  def _pid(self, role):
    return None

  def _end_parts(self):
    deadline = time.monotonic() + backend_lib.GRACE_SECONDS
    for thread in self.threads.values():
      thread.join(max(0.0, deadline - time.monotonic()))
