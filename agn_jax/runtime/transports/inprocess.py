"""The parts of a run as threads of one process: a `Transport` and its channels.

A condition variable guards the `board.CommitBoard` that every transport
keeps somewhere. `agn_jax.runtime.backends.inprocess.InProcessBackend` runs
the real loops on threads over them.

Example:
  >>> import numpy as np
  >>> from agn_jax.wire import CommitMeta
  >>> t = InProcessTransport(num_params=2, payload_size=1, num_workers=1,
  ...                        capacity=1)
  >>> t.publish(np.ones(2, np.float32), clock=0)
  >>> t.commit((np.full(2, 0.5, np.float32),),
  ...          CommitMeta(0, 0, 0.1, {"accuracy": 0.9}, 0.0),
  ...          timeout=1)
  True
  >>> commit = t.next_commit(timeout=1)
  >>> t.release(commit)
  >>> commit.payload[0].tolist(), t.acknowledged(0)
  ([0.5, 0.5], 1)
"""

import queue
import threading
import time
from typing import Dict

import numpy as np

from agn_jax.runtime import events as ev
from agn_jax.runtime.transports import channels
from agn_jax.runtime.transports.base import Commit, Transport
from agn_jax.wire import wire_spec
from agn_jax.runtime.transports.board import CommitBoard


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
