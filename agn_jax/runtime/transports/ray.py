"""Ray's transport and channels: the hub and mailbox actors, and what the parts hold to reach them.

The center travels through Ray's object store, where a read on the same
node maps the stored pages (zero-copy), and commits travel as object
references through a FIFO queue held by one small actor, the hub, with the
acknowledgement counters, the workers' done reports and the run's switches
(an `inprocess.CommitBoard`). Events reach the driver through a second
actor, the mailbox, which also carries the driver's replies to the server.
The parts see only `transport.Transport` and the `channels` classes:
`RayTransport`, `RaySwitches`, `RayEvents`, `RayReplies`, and a
`channels.DataSource` (`DatasetByName`, `StoredDataset`).

Ray is imported on first use, never when this module is: a user without Ray
still imports the runtime.

Example (with Ray initialized; the conformance suite runs these classes):
  >>> from agn_jax.wire import CommitMeta
  >>> t = RayTransport.create(num_params=2, payload_size=1, num_workers=1,
  ...                         capacity=1)  # doctest: +SKIP
  >>> t.publish(np.ones(2, np.float32), clock=0)  # doctest: +SKIP
  >>> t.commit((np.full(2, 0.5, np.float32),),
  ...          CommitMeta(0, 0, 0.1, {"accuracy": 0.9}, 0.0),
  ...          timeout=1)  # doctest: +SKIP
  True
  >>> t.release(t.next_commit(timeout=1))  # doctest: +SKIP
  >>> t.acknowledged(0)  # doctest: +SKIP
  1
  >>> t.close()  # doctest: +SKIP
"""

import asyncio
import time

import numpy as np

from agn_jax.errors import DataMismatch
from agn_jax.runtime import backend as backend_lib
from agn_jax.runtime import events as ev
from agn_jax.runtime.transports import channels
from agn_jax.runtime.transports.base import Commit, Transport, WindowPlan
from agn_jax.runtime.transports.board import CommitBoard
from agn_jax.wire import wire_spec

_SWITCH_SECONDS = 0.02  # How stale a part's view of an unset switch may be.


# The actors. Plain classes here; `ray.remote(cls)` makes actors of them.


class Hub:
  """What the parts share: a `CommitBoard` (the center's object reference, the commit queue, the counters, the switches).

  An asyncio actor: its methods run one at a time on one event loop and
  change the board only between awaits, so every change is atomic, and a
  waiting call (`next_commit`, `wait_acknowledged`, `wait_switch`) costs no
  polling. The queue's order is the order in which commits reach the hub:
  FIFO.
  """

  def __init__(self, num_workers: int, capacity: int):
    self._board = CommitBoard(num_workers, capacity)
    self._changed = None

  def _condition(self):
    if self._changed is None:  # Created on the actor's event loop.
      self._changed = asyncio.Condition()
    return self._changed

  async def _when(self, ready, step, timeout=None, otherwise=None):
    """`step()` as soon as `ready()` holds, in one hold of the lock; `otherwise` after `timeout` seconds."""
    deadline = None if timeout is None else time.monotonic() + timeout
    changed = self._condition()
    async with changed:
      while not ready():
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
          return otherwise
        try:
          await asyncio.wait_for(changed.wait(), left)
        except asyncio.TimeoutError:
          pass  # The lock is held again; `ready` decides.
      result = step()
      changed.notify_all()
      return result

  def _now(self, step):
    return self._when(lambda: True, step)

  # The center.
  async def publish(self, packed, clock, after=None):
    del after  # Only orders this call after an earlier one.
    await self._now(lambda: self._board.publish(packed, clock))

  async def center(self, timeout):
    return await self._when(lambda: self._board.center is not None,
                            lambda: self._board.center, timeout)

  # Commits.
  async def commit(self, meta, packed, timeout) -> bool:
    return await self._when(self._board.has_room,
                            lambda: self._board.push(meta, packed), timeout,
                            False)

  async def next_commit(self, timeout):
    return await self._when(self._board.has_message, self._board.take,
                            timeout)

  async def release(self, worker, handled: bool, after=None):
    del after  # Only orders this call after an earlier one.
    await self._now(lambda: self._board.release(worker, handled))

  async def wait_acknowledged(self, worker, count, timeout) -> bool:
    return await self._when(
        lambda: self._board.acknowledged(worker) >= count, lambda: True,
        timeout, False)

  async def set_window_plan(self, worker, plan, after=None):
    del after  # Only orders this call after an earlier one.
    await self._now(lambda: self._board.set_window_plan(worker, plan))

  async def window_plan(self, worker):
    return self._board.window_plan(worker)

  async def finish(self, done):
    await self._now(lambda: self._board.finish(done))

  async def in_flight(self, worker) -> bool:
    return self._board.in_flight(worker)

  async def acknowledged(self, worker) -> int:
    return self._board.acknowledged(worker)

  async def set_acknowledged(self, worker, count):
    await self._now(lambda: self._board.set_acknowledged(worker, count))

  async def is_done(self, worker) -> bool:
    return self._board.is_done(worker)

  # The run's switches.
  async def set_switch(self, name):
    await self._now(lambda: self._board.switches.add(name))

  async def switches(self) -> set:
    return set(self._board.switches)

  async def wait_switch(self, name, timeout) -> bool:
    return await self._when(lambda: name in self._board.switches,
                            lambda: True, timeout, False)


class Mailbox:
  """The parts' events to the driver, and the driver's replies to the server.

  A synchronous actor with one thread: calls from one sender run in the
  order they were sent, so the server's events arrive in order (the
  checkpoint protocol counts on it).
  """

  def __init__(self):
    self._events = []
    self._first = 0  # The number of `_events[0]` among all events put.
    self._replies = []

  def put(self, event):
    self._events.append(event)

  def take(self, start: int):
    """The events from number `start` on; the driver handled those before it.

    They stay here until the driver asks past them, so an interrupt that
    cuts the driver's handling of a batch short loses none of them.
    """
    del self._events[:start - self._first]
    self._first = start
    return list(self._events)

  def reply(self, value):
    self._replies.append(value)

  def take_reply(self):
    return self._replies.pop(0) if self._replies else None


def start_mailbox(**actor_options):
  """Starts a `Mailbox` actor (Ray must be initialized) on one thread, which keeps each sender's order; returns its handle."""
  import ray  # pylint: disable=g-import-not-at-top
  return ray.remote(Mailbox).options(max_concurrency=1,
                                     **actor_options).remote()


# What the parts hold: the Transport, the switches, the events and the data.

# Smaller arrays travel inside the call to the hub (as Ray itself does with
# small arguments); larger ones go through the object store once, and only
# their reference through the hub.
_INLINE_BYTES = 100 * 1024


def _pack(value, nbytes):
  """`value` itself if small, else `[its object reference]` (nested, so Ray passes the reference)."""
  if nbytes < _INLINE_BYTES:
    return value
  import ray  # pylint: disable=g-import-not-at-top
  return [ray.put(value)]


def _unpack(packed):
  """What `_pack` packed; raises Ray's errors if the object was lost."""
  if isinstance(packed, list):
    import ray  # pylint: disable=g-import-not-at-top
    return ray.get(packed[0])
  return packed


class RayTransport(Transport):
  """A `Transport` of Ray primitives: the object store for the bytes, the hub actor for the order.

  * publish: `ray.put` of the center, its reference and clock to the hub;
    a pull asks the hub for the latest and reads it from the object store
    (zero-copy on the same node), then copies it into the worker's buffer.
  * commit: `ray.put` of the payload, its reference and `CommitMeta` into
    the hub's bounded FIFO queue (backpressure: `commit` waits for room).
  * A commit is queued in one call to the hub, whole or not at all, so
    there is nothing half-written to reclaim. Its payload belongs to the
    worker that put it: if that worker dies before the server reads it, Ray
    may have lost the payload with it, and then the server drops the commit
    unacknowledged and the restarted worker does that window again. Either
    way applied + rejected equals the commits the workers made.

  Picklable: it travels to every actor as the hub's handle and two numbers.
  """

  def __init__(self, hub, num_params: int, payload_size: int, wire=None):
    self.num_params = int(num_params)
    self.payload_size = int(payload_size)
    self.wire = wire_spec(num_params, payload_size, wire)
    self._hub = hub
    self._unsent = None  # (payload, packed): a commit waiting for room.
    self._sent = None  # The result of the last call not waited for.

  @classmethod
  def create(cls, num_params: int, payload_size: int, num_workers: int,
             capacity: int, wire=None, **actor_options) -> "RayTransport":
    """Starts the hub actor (Ray must be initialized); `close()` ends it.

    Args:
      num_params: length of the flat center.
      payload_size: flat arrays per commit.
      num_workers: how many workers may commit.
      capacity: commits that may wait in the queue before `commit` waits.
      wire: each payload array's `(length, dtype)` (`transport.wire_spec`);
        None: float32 vectors of `num_params`. A compressed commit
        (`--commit_compression`) is put into the object store as its
        codec's arrays, so fewer bytes move.
      **actor_options: Ray options of the hub actor (e.g. its node).
    """
    import ray  # pylint: disable=g-import-not-at-top
    hub = ray.remote(Hub).options(**actor_options).remote(num_workers,
                                                           capacity)
    return cls(hub, num_params, payload_size, wire)

  def close(self):
    """Ends the hub actor (the creator only, once every part is done)."""
    import ray  # pylint: disable=g-import-not-at-top
    ray.kill(self._hub, no_restart=True)

  @property
  def hub(self):
    """The hub actor's handle."""
    return self._hub

  def __getstate__(self):
    return {"num_params": self.num_params, "payload_size": self.payload_size,
            "wire": self.wire, "_hub": self._hub}

  def __setstate__(self, state):
    self.__init__(state["_hub"], state["num_params"], state["payload_size"],
                  state.get("wire"))

  @staticmethod
  def _get(ref):
    import ray  # pylint: disable=g-import-not-at-top
    return ray.get(ref)

  def _settled(self):
    """Waits for the server's calls sent without waiting (publish, release)."""
    if self._sent is not None:
      self._get(self._sent)
      self._sent = None

  # Server side.
  def publish(self, center, clock):
    center = np.asarray(center, np.float32)
    # Not waited for: `release` runs after it (Ray runs a call only once the
    # calls whose results it takes as arguments are done), and a worker
    # pulls only after its commit's release.
    self._sent = self._hub.publish.remote(_pack(center, center.nbytes),
                                          int(clock), self._sent)

  def next_commit(self, timeout):
    import ray  # pylint: disable=g-import-not-at-top
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
      left = None if deadline is None else max(0.0, deadline - time.monotonic())
      message = self._get(self._hub.next_commit.remote(left))
      if message is None or isinstance(message, ev.WorkerDone):
        return message
      meta, packed = message
      try:
        payload = _unpack(packed)
      except (ray.exceptions.ObjectLostError, ray.exceptions.OwnerDiedError):
        # Its worker died and took the payload along: never applied.
        self._sent = self._hub.release.remote(meta.worker, False, self._sent)
        continue
      return Commit(meta, payload, packed)

  def release(self, commit):
    self._sent = self._hub.release.remote(commit.meta.worker, True, self._sent)

  def set_window_plan(self, worker, plan):
    # Ordered before the `release` that follows, as `publish` is.
    self._sent = self._hub.set_window_plan.remote(
        worker, tuple(int(v) for v in plan), self._sent)

  # Worker side.
  def pull(self, out, timeout=None):
    latest = self._get(self._hub.center.remote(timeout))
    if latest is None:
      raise TimeoutError("the server published no center in time")
    packed, clock = latest
    np.copyto(out, _unpack(packed))
    return clock

  def commit(self, payload, meta, timeout):
    # A commit retried for room is put into the object store once.
    if self._unsent is None or self._unsent[0] is not payload:
      vectors = tuple(np.asarray(v) for v in payload)
      self._unsent = (payload, _pack(vectors, sum(v.nbytes for v in vectors)))
    if not self._get(self._hub.commit.remote(meta, self._unsent[1], timeout)):
      return False
    self._unsent = None
    return True

  def wait_acknowledged(self, worker, count, timeout):
    return self._get(self._hub.wait_acknowledged.remote(worker, count,
                                                        timeout))

  def window_plan(self, worker):
    self._settled()
    return WindowPlan(*self._get(self._hub.window_plan.remote(worker)))

  def finish(self, done):
    self._get(self._hub.finish.remote(done))

  # Supervisor side.
  def reclaim(self, worker):
    del worker  # Nothing is ever half-queued (see the class docstring).
    return 0

  def in_flight(self, worker):
    self._settled()
    return self._get(self._hub.in_flight.remote(worker))

  def acknowledged(self, worker):
    self._settled()
    return self._get(self._hub.acknowledged.remote(worker))

  def set_acknowledged(self, worker, count):
    self._get(self._hub.set_acknowledged.remote(worker, count))

  def is_done(self, worker):
    return self._get(self._hub.is_done.remote(worker))


class RaySwitches(channels.Switches):
  """The run's switches, held by the hub.

  A switch stays set once set, so one seen set stays set here; `is_set`
  asks the hub at most every `_SWITCH_SECONDS` (the processes backend's
  children poll theirs every 5 ms), so a worker's checks cost no call per
  window.
  """

  def __init__(self, hub):
    self._hub = hub
    self._seen = set()
    self._asked = -float("inf")

  def __getstate__(self):
    return {"_hub": self._hub}

  def __setstate__(self, state):
    self.__init__(state["_hub"])

  def set(self, name):
    import ray  # pylint: disable=g-import-not-at-top
    ray.get(self._hub.set_switch.remote(name))
    self._seen.add(name)

  def is_set(self, name):
    import ray  # pylint: disable=g-import-not-at-top
    if name not in self._seen and (time.monotonic() - self._asked >
                                   _SWITCH_SECONDS):
      self._seen |= ray.get(self._hub.switches.remote())
      self._asked = time.monotonic()
    return name in self._seen

  def wait(self, name, timeout):
    import ray  # pylint: disable=g-import-not-at-top
    if name not in self._seen and ray.get(
        self._hub.wait_switch.remote(name, timeout)):
      self._seen.add(name)
    return name in self._seen


class RayEvents(channels.Events):
  """A part's channel to the driver through the mailbox: sends without waiting, in order."""

  def __init__(self, mailbox):
    self.mailbox = mailbox
    self._last = None

  def __getstate__(self):
    return {"mailbox": self.mailbox}

  def __setstate__(self, state):
    self.__init__(state["mailbox"])

  def put(self, event):
    self._last = self.mailbox.put.remote(event)

  def flush(self):
    import ray  # pylint: disable=g-import-not-at-top
    if self._last is not None:
      try:
        ray.get(self._last)
      except ray.exceptions.RayError:  # The driver is shutting down.
        pass


class RayReplies(channels.Replies):
  """The driver's answers to the server's checkpoint requests, through the mailbox."""

  def __init__(self, mailbox):
    self._mailbox = mailbox
    self._next = None

  def __getstate__(self):
    return {"_mailbox": self._mailbox}

  def __setstate__(self, state):
    self.__init__(state["_mailbox"])

  def poll(self, timeout):
    import ray  # pylint: disable=g-import-not-at-top
    deadline = time.monotonic() + timeout
    while self._next is None:
      self._next = ray.get(self._mailbox.take_reply.remote())
      if self._next is None:
        if time.monotonic() >= deadline:
          return False
        time.sleep(min(0.005, max(0.0, deadline - time.monotonic())))
    return True

  def recv(self):
    self.poll(float("inf"))
    value, self._next = self._next, None
    return value


class DatasetByName(channels.DataSource):
  """The run's data, loaded by each part itself from the dataset's name, size and seed.

  The driver ships no data: each worker takes its shard of what it loads
  (`shares.shard_bounds`), the evaluator the test set. What each part
  loads must be what the driver loaded and checked: its `fingerprint`
  (`agn_jax.data.fingerprint`: shapes, dtypes, first and last rows) is
  compared with the driver's, so that a loader returning other data on
  each call ends the run instead of training each worker on data of its
  own.

  Args:
    config: the run's config (the dataset's name, `data_dir`, size, seed).
    fingerprint: the driver's dataset's `agn_jax.data.fingerprint`.
  """

  def __init__(self, config, fingerprint: str):
    self._args = (config.dataset, config.data_dir, config.dataset_size,
                  config.seed)
    self._fingerprint = fingerprint

  def arrays(self):
    """The arrays (`backend.dataset_arrays`) of the dataset loaded here.

    Raises:
      DataMismatch: they are not the driver's (fatal: a restart would load
        other data again).
    """
    from agn_jax import data  # pylint: disable=g-import-not-at-top
    name, data_dir, size, seed = self._args
    dataset = data.load(name, data_dir, size=size, seed=seed)
    here = data.fingerprint(dataset)
    if here != self._fingerprint:
      raise DataMismatch(
          f"dataset {name!r}: its loader returned other data here than on "
          f"the driver (fingerprint {here}, the driver's "
          f"{self._fingerprint}: shapes, dtypes, first and last rows); each "
          "process of a Ray run loads it, so it must return the same data on "
          "every call (draw from its `seed`)")
    return backend_lib.dataset_arrays(dataset)


class StoredDataset(channels.DataSource):
  """A dataset object passed to `train()`: put once into the object store, read zero-copy on each node."""

  def __init__(self, ref):
    self._ref = [ref]  # Nested: the reference travels, not the arrays.

  def arrays(self):
    import ray  # pylint: disable=g-import-not-at-top
    return ray.get(self._ref[0])
