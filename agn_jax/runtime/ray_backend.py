"""The ray backend: the server, the workers and the evaluator as Ray actors, on one machine or a cluster.

They run the processes backend's own loops (`server.serve`,
`worker.run_worker`, `evaluator.run_evaluator`). The center travels through
Ray's object store, where a read on the same node maps the stored pages
(zero-copy), and commits travel as object references through a FIFO queue
held by one small actor, the hub, with the acknowledgement counters, the done
flags and the run's flags. Ray is an optional install
(`pip install -r requirements-ray.txt`); this module imports it on first use.

Example:
  >>> from agn_jax import TrainConfig
  >>> from agn_jax.runtime import train
  >>> summary = train(TrainConfig(backend="ray", num_workers=2, epochs=5.0,
  ...                             workdir="/tmp/agn_ray_doc"),
  ...                 ray_address="local")  # doctest: +SKIP
"""

import asyncio
import contextlib
import os
import signal
import socket
import threading
import time
from typing import Dict, List, Optional

import numpy as np

from agn_jax.runtime import _child
from agn_jax.runtime import backend as backend_lib
from agn_jax.runtime import events as ev
from agn_jax.runtime import placement as placement_lib
from agn_jax.runtime.bookkeeping import RunError, write_json
from agn_jax.runtime.launcher import Terminated
from agn_jax.runtime.processes import MAX_SLOTS, cache_dir_default
from agn_jax.runtime.transport import Commit, Transport

_GRACE_SECONDS = 1.5  # The loops poll the abort flag at least every 0.2 s.
_POLL_SECONDS = 0.05  # The driver's cadence: events, exits, the barrier.
_CONNECT_SECONDS = 5.0  # To reach a cluster address before Ray's own (long) retries.
_FLAG_SECONDS = 0.02  # How stale a part's view of an unset flag may be.


def _ray():
  try:
    import ray  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise RunError("the ray backend needs Ray: pip install -r "
                   "requirements-ray.txt") from e
  return ray


# The actors. Plain classes here; `ray.remote(cls)` makes actors of them.


class _Hub:
  """What the parts share: the center's object reference, the commit queue, the counters, the flags.

  An asyncio actor: its methods run one at a time on one event loop and
  change state only between awaits, so every change is atomic, and a waiting
  call (`next_commit`, `wait_acknowledged`, `wait_flag`) costs no polling.
  The queue's order is the order in which commits reach the hub: FIFO.
  """

  def __init__(self, num_workers: int, capacity: int):
    self._capacity = capacity
    self._center = None  # (packed center, clock): see `_pack`.
    self._queue: List[tuple] = []  # (meta, packed payload), arrival order.
    self._applying = [0] * num_workers
    self._acks = [0] * num_workers
    self._done: Dict[int, ev.WorkerDone] = {}
    self._reported = set()  # Workers whose WorkerDone the server took.
    self._flags = set()
    self._changed = None

  def _condition(self):
    if self._changed is None:  # Created on the actor's event loop.
      self._changed = asyncio.Condition()
    return self._changed

  async def _notify(self):
    async with self._condition():
      self._condition().notify_all()

  async def _until(self, predicate, timeout) -> bool:
    if predicate():
      return True
    try:
      async with self._condition():
        await asyncio.wait_for(self._condition().wait_for(predicate), timeout)
      return True
    except asyncio.TimeoutError:
      return predicate()

  # The center.
  async def publish(self, packed, clock, after=None):
    del after  # Only orders this call after an earlier one.
    self._center = (packed, clock)
    await self._notify()

  async def center(self, timeout):
    await self._until(lambda: self._center is not None, timeout)
    return self._center

  # Commits.
  async def commit(self, meta, packed, timeout) -> bool:
    if not await self._until(lambda: len(self._queue) < self._capacity,
                             timeout):
      return False
    self._queue.append((meta, packed))
    await self._notify()
    return True

  async def next_commit(self, timeout):
    def ready():
      return self._queue or set(self._done) - self._reported
    if not await self._until(ready, timeout):
      return None
    if self._queue:
      # A worker commits before it finishes, so its WorkerDone comes last.
      meta, ref = self._queue.pop(0)
      self._applying[meta.worker] += 1
      await self._notify()  # Room in the queue.
      return meta, ref
    w = min(set(self._done) - self._reported)
    self._reported.add(w)
    return self._done[w]

  async def release(self, worker, handled: bool, after=None):
    del after  # Only orders this call after an earlier one.
    self._applying[worker] -= 1
    self._acks[worker] += int(handled)
    await self._notify()

  async def wait_acknowledged(self, worker, count, timeout) -> bool:
    return await self._until(lambda: self._acks[worker] >= count, timeout)

  async def finish(self, done):
    self._done[done.worker] = done
    await self._notify()

  async def in_flight(self, worker) -> bool:
    return (self._applying[worker] > 0 or
            any(meta.worker == worker for meta, _ in self._queue))

  async def acknowledged(self, worker) -> int:
    return self._acks[worker]

  async def set_acknowledged(self, worker, count):
    self._acks[worker] = count
    await self._notify()

  async def is_done(self, worker) -> bool:
    return worker in self._done

  # The run's flags: one-way switches.
  async def set_flag(self, key):
    self._flags.add(key)
    await self._notify()

  async def flags(self) -> set:
    return set(self._flags)

  async def wait_flag(self, key, timeout) -> bool:
    return await self._until(lambda: key in self._flags, timeout)


class _Mailbox:
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


class _Host:
  """One Ray actor process that runs one part of the run: the server, a worker or the evaluator.

  Args:
    env: what `placement` would set before JAX is imported; Ray already
      started the process with it (`runtime_env`), and the accelerator ids
      Ray assigned are known only here.
    nice: the process's niceness increment.
    platform: the worker's platform ("cpu" for the server and evaluator).
    cpu_affinity: cores to pin the process's compute to, or None.
  """

  def __init__(self, env, nice, platform, cpu_affinity=None):
    self.entered = time.time()
    try:
      # The driver coordinates Ctrl-C; an actor must not die of it alone.
      signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # Not the main thread.
      pass
    os.environ.update(env)
    if platform == "tpu":
      os.environ.update(_tpu_env(self._accelerator_ids("TPU")))
    # Linux applies both to this thread; JAX's threads, started from it
    # later, inherit them (Ray's own threads keep theirs).
    if cpu_affinity:
      os.sched_setaffinity(0, cpu_affinity)
    if nice:
      os.nice(nice)

  @staticmethod
  def _accelerator_ids(kind):
    import ray  # pylint: disable=g-import-not-at-top
    return tuple(ray.get_runtime_context().get_accelerator_ids().get(kind, ()))

  def where(self):
    import ray  # pylint: disable=g-import-not-at-top
    return {"pid": os.getpid(), "node": ray.util.get_node_ip_address()}

  def serve(self, ctx, resume):
    from agn_jax.runtime import server  # pylint: disable=g-import-not-at-top
    try:
      return server.serve(ctx, _Replies(ctx.events.mailbox), resume)
    finally:
      ctx.events.flush()

  def work(self, ctx, index, incarnation):
    from agn_jax.runtime import worker  # pylint: disable=g-import-not-at-top
    try:
      return worker.run_worker(ctx, index, incarnation, self.entered)
    finally:
      ctx.events.flush()

  def evaluate(self, ctx):
    from agn_jax.runtime import evaluator  # pylint: disable=g-import-not-at-top
    try:
      return evaluator.run_evaluator(ctx)
    finally:
      ctx.events.flush()


def _tpu_env(chips) -> Dict[str, str]:
  """A one-chip TPU process on the chip Ray assigned, with a port of its own on the host."""
  if len(chips) != 1:
    raise RuntimeError(f"a tpu worker needs exactly one chip, Ray assigned "
                       f"{list(chips)}")
  chip = str(chips[0])
  env = dict(placement_lib.worker_placement("tpu", 0, 1, devices=(chip,)).env)
  port = str(placement_lib.TPU_BASE_PORT + int(chip))
  env.update(TPU_PROCESS_PORT=port, TPU_PROCESS_ADDRESSES=f"localhost:{port}")
  return env


# What the parts hold: the Transport, the flags, the events and the data.

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

  def __init__(self, hub, num_params: int, payload_size: int):
    self.num_params = int(num_params)
    self.payload_size = int(payload_size)
    self._hub = hub
    self._unsent = None  # (payload, packed): a commit waiting for room.
    self._sent = None  # The result of the last call not waited for.

  @classmethod
  def create(cls, num_params: int, payload_size: int, num_workers: int,
             capacity: int, **actor_options) -> "RayTransport":
    """Starts the hub actor (Ray must be initialized); `close()` ends it.

    Args:
      num_params: length of the flat center.
      payload_size: flat vectors per commit.
      num_workers: how many workers may commit.
      capacity: commits that may wait in the queue before `commit` waits.
      **actor_options: Ray options of the hub actor (e.g. its node).
    """
    import ray  # pylint: disable=g-import-not-at-top
    hub = ray.remote(_Hub).options(**actor_options).remote(num_workers,
                                                           capacity)
    return cls(hub, num_params, payload_size)

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
            "_hub": self._hub}

  def __setstate__(self, state):
    self.__init__(state["_hub"], state["num_params"], state["payload_size"])

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


class _Flags:
  """The run's flags (`_child.FLAG_NAMES`), held by the hub.

  A flag is a one-way switch, so one seen set stays set here; `is_set` asks
  the hub at most every `_FLAG_SECONDS` (the processes backend's children
  poll theirs every 5 ms), so a worker's checks cost no call per window.
  """

  def __init__(self, hub):
    self._hub = hub
    self._seen = set()
    self._asked = -float("inf")

  def __getstate__(self):
    return {"_hub": self._hub}

  def __setstate__(self, state):
    self.__init__(state["_hub"])

  def set(self, key):
    import ray  # pylint: disable=g-import-not-at-top
    ray.get(self._hub.set_flag.remote(key))
    self._seen.add(key)

  def is_set(self, key):
    import ray  # pylint: disable=g-import-not-at-top
    if key not in self._seen and (time.monotonic() - self._asked >
                                  _FLAG_SECONDS):
      self._seen |= ray.get(self._hub.flags.remote())
      self._asked = time.monotonic()
    return key in self._seen

  def wait(self, key, timeout):
    import ray  # pylint: disable=g-import-not-at-top
    if key not in self._seen and ray.get(self._hub.wait_flag.remote(key,
                                                                    timeout)):
      self._seen.add(key)
    return key in self._seen


class _Events:
  """A part's channel to the driver, with the `put` of a queue: sends without waiting, in order."""

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
    """Waits until the mailbox holds every event sent so far (before a part returns)."""
    import ray  # pylint: disable=g-import-not-at-top
    if self._last is not None:
      try:
        ray.get(self._last)
      except ray.exceptions.RayError:  # The driver is shutting down.
        pass


class _Replies:
  """The driver's answers to the server's checkpoint requests, with a `Connection`'s poll/recv."""

  def __init__(self, mailbox):
    self._mailbox = mailbox
    self._next = None

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


class _DatasetByName:
  """The run's data, loaded by each part itself from the dataset's name, size and seed.

  The driver ships no data: each worker takes its shard of what it loads
  (`worker.shard_bounds`), the evaluator the test set.
  """

  def __init__(self, config):
    self._args = (config.dataset, config.data_dir, config.dataset_size,
                  config.seed)

  def arrays(self):
    from agn_jax import data  # pylint: disable=g-import-not-at-top
    name, data_dir, size, seed = self._args
    dataset = data.load(name, data_dir, size=size, seed=seed)
    return {"x_train": dataset.x_train, "y_train": dataset.y_train,
            "x_test": dataset.x_test, "y_test": dataset.y_test}


class _StoredDataset:
  """A dataset object passed to `train()`: put once into the object store, read zero-copy on each node."""

  def __init__(self, ref):
    self._ref = [ref]  # Nested: the reference travels, not the arrays.

  def arrays(self):
    import ray  # pylint: disable=g-import-not-at-top
    return ray.get(self._ref[0])


# The address.


def check_address(address: str) -> None:
  """Raises `ValueError` (one line) unless `address` is local, auto or a reachable host:port.

  Ray itself retries an unreachable address for minutes; this answers in
  seconds.

  Example:
    >>> check_address("local")
    >>> check_address("nowhere")
    Traceback (most recent call last):
    ...
    ValueError: ray_address must be local, auto or host:port, got 'nowhere'
  """
  if address in ("local", "auto"):
    return
  host, sep, port = address.rpartition(":")
  if address.startswith("ray://"):
    raise ValueError(f"ray_address {address!r}: Ray Client (ray://) is not "
                     f"supported; run on a node of the cluster with auto or "
                     f"the head's host:port")
  if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
    raise ValueError(f"ray_address must be local, auto or host:port, got "
                     f"{address!r}")
  try:
    socket.create_connection((host.strip("[]"), int(port)),
                             timeout=_CONNECT_SECONDS).close()
  except OSError as e:
    raise ValueError(f"ray_address {address}: no Ray cluster reachable there "
                     f"({e.strerror or e})") from None


class RayBackend(backend_lib.ServerBackend):
  """Ray actors on one machine or a cluster: the hub, the server, n workers and the evaluator.

  Each worker's resources come from the platform (`config.platform`, or
  what the cluster has: TPU, then GPU, then CPU): one CPU (a fraction when
  the cluster has fewer CPUs than workers), a GPU or a fraction of one, or
  one TPU chip. The hub, the server and the evaluator run on the driver's
  node and reserve nothing; the server writes checkpoints to
  `config.workdir` there (on a cluster, the driver's node's disk).

  Options (keyword arguments of `train()`):
    ray_address: "local" (start a private Ray instance with one CPU per core
      of this machine, stopped at the end), "auto" (the cluster this
      machine belongs to), or the head's "host:port"; default
      `config.ray_address`. A process that already called `ray.init()`
      keeps its connection, and the run never stops it.
    num_slots: how many commits may wait in the queue (default `min(n, 8)`).
    cache_dir: JAX's persistent compilation cache on each node (default
      `processes.cache_dir_default()`; "" turns it off).

  A `dataset=` object given to `train()` is put into the object store once
  (each node then reads it zero-copy); otherwise every part loads the data
  itself by name.
  """

  name = "ray"

  def __init__(self, config, book, ray_address=None, num_slots=None,
               cache_dir=None):
    super().__init__(config, book)
    self.address = (ray_address if ray_address is not None else getattr(
        config, "ray_address", "local"))
    self.num_slots = num_slots
    self.cache_dir = cache_dir_default() if cache_dir is None else cache_dir
    self.ray = None
    self.connected = False  # This run called ray.init (and shuts it down).
    self.hub = self.mailbox = None
    self.taken = 0  # Events taken from the mailbox so far.
    self.transport = self.flags = self.events = self.ctx = None
    self.actors: Dict[str, object] = {}  # role -> actor handle
    self.running: Dict[object, str] = {}  # ObjectRef of a part's loop -> role
    self.where: Dict[str, dict] = {}  # role -> {"pid", "node"}
    self.pending_where: Dict[object, str] = {}
    self.retired: List[object] = []  # Dead workers' actors, killed at the end.
    self.previous: List[dict] = []
    self.incarnations: Dict[int, int] = {}
    self.closed = False

  # Set-up.

  def prepare(self, dataset=None):
    config, book = self.config, self.book
    check_address(self.address)
    plan = backend_lib.plan(config, dataset)
    book.expected_commits = plan.expected_commits
    book.windows_per_worker = plan.windows
    self._connect()
    ray = self.ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # pylint: disable=g-import-not-at-top
    here = NodeAffinitySchedulingStrategy(
        ray.get_runtime_context().get_node_id(), soft=False)
    self.on_driver_node = dict(scheduling_strategy=here, num_cpus=0,
                               max_restarts=0)
    n = config.num_workers
    self.single_node = sum(node["Alive"] for node in ray.nodes()) == 1
    self.platform, self.worker_options = self._worker_resources(n)
    book.extra_summary["platform"] = self.platform
    book.extra_summary["ray_address"] = self.address
    slots = self.num_slots or min(n, MAX_SLOTS)
    book.extra_summary["num_slots"] = slots

    self.transport = RayTransport.create(plan.layout.num_params,
                                         plan.payload_size, n, slots,
                                         **self.on_driver_node)
    self.hub = self.transport.hub
    self.mailbox = ray.remote(_Mailbox).options(
        max_concurrency=1, **self.on_driver_node).remote()
    self.flags = _Flags(self.hub)
    self.events = _Events(self.mailbox)
    data = (_DatasetByName(config) if dataset is None else _StoredDataset(
        ray.put({"x_train": dataset.x_train, "y_train": dataset.y_train,
                 "x_test": dataset.x_test, "y_test": dataset.y_test})))
    self.ctx = _child.RunContext(
        config=config.to_dict(), data=data, transport=self.transport,
        events=self.events, flags=self.flags, layout=plan.layout.metadata(),
        num_classes=plan.dataset.num_classes,
        input_shape=tuple(plan.dataset.input_shape),
        cache_dir=self.cache_dir, parent_pid=None)
    if not config.resume:
      book.open()

  def _connect(self):
    """Connects to (or starts) Ray; the run's SIGTERM handling stays the launcher's."""
    ray = self.ray = _ray()
    if ray.is_initialized():
      return
    old_term = signal.getsignal(signal.SIGTERM)
    kwargs = dict(include_dashboard=False, log_to_driver=False,
                  configure_logging=False)
    if self.address == "local":
      kwargs["num_cpus"] = len(placement_lib.available_cores())
    try:
      ray.init(address=self.address, **kwargs)
    except ConnectionError as e:
      raise ValueError(f"ray_address {self.address}: {e}") from None
    finally:
      # ray.init installs a SIGTERM handler that exits at once.
      if (old_term is not None and
          threading.current_thread() is threading.main_thread()):
        signal.signal(signal.SIGTERM, old_term)
    self.connected = True

  def _worker_resources(self, n):
    """(platform, the worker actors' resource options), checked against the cluster."""
    total = self.ray.cluster_resources()
    platform = self.config.platform or (
        "tpu" if total.get("TPU") else "gpu" if total.get("GPU") else "cpu")

    def share(kind):
      # Ray takes fractions of a resource to four decimal places.
      have = total.get(kind, 0)
      return min(1.0, int(have / n * 10**4) / 10**4)

    xla_flags = os.environ.get("XLA_FLAGS", "")
    if platform == "cpu":
      cpus = share("CPU")
      if cpus <= 0:
        raise ValueError(f"the Ray cluster has too few CPUs for {n} workers")
      # Threads and allocator settings as for n processes on these cores.
      cores = range(max(1, int(total.get("CPU", 1))))
      env = placement_lib.worker_placement(
          "cpu", 0, n, cores=cores, base_xla_flags=xla_flags).env
      options = dict(num_cpus=cpus)
    elif platform == "gpu":
      if not total.get("GPU"):
        raise ValueError("platform gpu but the Ray cluster has no GPU")
      env = dict(placement_lib.worker_placement(
          "gpu", 0, 1, devices=("0",), base_xla_flags=xla_flags).env)
      del env["CUDA_VISIBLE_DEVICES"]  # Ray sets it to the GPU it assigns.
      options = dict(num_cpus=0, num_gpus=share("GPU"))
    else:
      chips = int(total.get("TPU", 0))
      if n > chips:
        raise ValueError(f"tpu runs one worker per chip: {n} workers but the "
                         f"Ray cluster has {chips} TPU chips")
      env = {"JAX_PLATFORMS": "tpu", "ALLOW_MULTIPLE_LIBTPU_LOAD": "1"}
      if xla_flags:
        env["XLA_FLAGS"] = xla_flags
      options = dict(num_cpus=0, resources={"TPU": 1})
    fault = os.environ.get("AGN_JAX_FAULT")
    if fault:  # The test hook reaches the workers as with processes.
      env = dict(env, AGN_JAX_FAULT=fault)
    return platform, dict(options, env=env, scheduling_strategy="SPREAD",
                          max_restarts=0)

  def _host(self, role, env, nice, platform, cpu_affinity=None, **options):
    host = self.ray.remote(_Host).options(
        runtime_env={"env_vars": dict(env)}, **options).remote(
            env, nice, platform, cpu_affinity)
    self.actors[role] = host
    self.pending_where[host.where.remote()] = role
    return host

  def _start_worker(self, w):
    options = dict(self.worker_options)
    env = options.pop("env")
    affinity = None
    if self.single_node and self.platform == "cpu":
      # One machine, as with processes: each worker its own core(s).
      affinity = placement_lib.worker_placement(
          "cpu", w, self.config.num_workers,
          cores=placement_lib.available_cores()).cpu_affinity
    host = self._host(f"worker {w}", env, placement_lib.WORKER_NICE,
                      self.platform, affinity, **options)
    self.running[host.work.remote(self.ctx, w,
                                  self.incarnations.setdefault(w, 0))] = (
                                      f"worker {w}")

  def run(self):
    with _sigterm_kept():
      self._run()

  def _run(self):
    host_env = placement_lib.host_placement(
        os.environ.get("XLA_FLAGS", "")).env
    server = self._host("server", host_env, 0, "cpu", **self.on_driver_node)
    self.running[server.serve.remote(self.ctx, self.config.resume)] = "server"
    if self.config.resume:
      self._await_restore()
    evaluator = self._host("evaluator", host_env, 0, "cpu",
                           **self.on_driver_node)
    self.running[evaluator.evaluate.remote(self.ctx)] = "evaluator"
    for w in range(self.config.num_workers):
      self._start_worker(w)
    self.book.timeline["spawned"] = time.time()
    self._supervise()

  def _await_restore(self):
    """Waits until the server has read and checked the checkpoint, then takes over the workdir."""
    while self.book.restored is None:
      done = self._wait(_POLL_SECONDS)
      self._drain()
      for ref in done:
        role = self.running.pop(ref)
        if self.book.restored is None:
          self._on_exit(role, ref)
          raise RunError("server exited before restoring the checkpoint")
    self.book.open(self.book.restored.metrics_offset)

  # Supervision.

  def _wait(self, timeout):
    """The parts' loops that ended within `timeout` seconds."""
    refs = list(self.running)
    if not refs:
      time.sleep(timeout)
      return []
    self.ray.wait(refs, num_returns=1, timeout=timeout)
    done, _ = self.ray.wait(refs, num_returns=len(refs), timeout=0)
    return done

  def _supervise(self, deadline: Optional[float] = None):
    """Handles events and ended loops until the final evaluation and every worker's end (or `deadline`)."""
    book = self.book
    while book.final_eval is None or any(
        role.startswith("worker") for role in self.running.values()):
      timeout = _POLL_SECONDS
      if deadline is not None:
        timeout = min(timeout, deadline - time.monotonic())
        if timeout <= 0:
          return
      timeout = self._stop_after_max_seconds(timeout)
      done = self._wait(timeout)
      self._drain()
      for ref in done:
        self._on_exit(self.running.pop(ref), ref)
      self._note_where()
      self._advance()

  def _drain(self):
    for event in self.ray.get(self.mailbox.take.remote(self.taken)):
      self.taken += 1  # Before handling, as a queue's `get` would.
      if isinstance(event, ev.CheckpointRequest):
        # Every event the server sent before is in the file: that is the
        # position a resume from this checkpoint cuts metrics.jsonl back to.
        self.mailbox.reply.remote((event.clock, self.book.metrics_position()))
      else:
        self.book.handle(event)

  def _on_exit(self, role, ref):
    try:
      ok, cause = bool(self.ray.get(ref)), "exited after a failure"
    except self.ray.exceptions.RayActorError as e:
      ok, cause = False, _death(e)
    self._drain()  # Its last words (an error report) come first.
    if role.startswith("worker"):
      return self._on_worker_exit(int(role.split()[1]), ok, cause)
    self._check_exit(role, ok, cause if not ok else "exited early")

  def _on_worker_exit(self, w, ok, cause):
    """Restarts a dead worker with the rest of its share, within the run's budget."""
    if not self._worker_exited(w, ok, cause):
      return
    role = f"worker {w}"
    self.retired.append(self.actors.pop(role))
    if role in self.where:
      self.previous.append(self.where.pop(role))
    self.ray.kill(self.retired[-1], no_restart=True)
    self._start_worker(w)

  def _note_where(self):
    """Records where each actor runs as soon as it has started (pids.json)."""
    if not self.pending_where:
      return
    ready, _ = self.ray.wait(list(self.pending_where),
                             num_returns=len(self.pending_where), timeout=0)
    for ref in ready:
      role = self.pending_where.pop(ref)
      try:
        place = self.ray.get(ref)
      except self.ray.exceptions.RayActorError:
        continue
      if self.actors.get(role) is not None:
        self.where[role] = place
    if ready:
      self._write_pids()

  def _write_pids(self):
    n = self.config.num_workers
    pid = lambda role: self.where.get(role, {}).get("pid")
    write_json(self.book.workdir / "pids.json", {
        "server": pid("server"),
        "evaluator": pid("evaluator"),
        "workers": [pid(f"worker {i}") for i in range(n)],
        "restarted_workers": [p["pid"] for p in self.previous],
        "shm_segments": [],  # Ray's object store is Ray's to clean up.
        "nodes": {role: p["node"] for role, p in self.where.items()},
        "ray_address": self.address,
    })

  # The end.

  def shutdown(self):
    if self.closed or self.ray is None:
      return
    self.closed = True
    ray = self.ray
    if self.flags is not None:
      try:
        # After a normal end everyone has left already; otherwise leave now.
        self.flags.set("stop")
        self.flags.set("abort")
        if self.running:
          ray.wait(list(self.running), num_returns=len(self.running),
                   timeout=_GRACE_SECONDS)
      except ray.exceptions.RayError:
        pass
    actors = [a for a in [*self.actors.values(), *self.retired, self.hub,
                          self.mailbox] if a is not None]
    for actor in actors:
      try:
        ray.kill(actor, no_restart=True)
      except Exception:  # pylint: disable=broad-except
        pass  # Gone already.
    self.running.clear()
    if self.connected:
      ray.shutdown()  # Stops the instance that "local" started, and all in it.
    else:
      # A kill only starts the end; a call to a dead actor fails at once.
      try:
        if actors:
          ray.wait([a.__ray_ready__.remote() for a in actors],
                   num_returns=len(actors), timeout=_GRACE_SECONDS)
      except ray.exceptions.RayError:
        pass


@contextlib.contextmanager
def _sigterm_kept():
  """Keeps SIGTERM's `Terminated` what it is through Ray's calls.

  An exception that a signal handler raises while the driver waits in
  `ray.wait` or `ray.get` comes out of Ray as a plain KeyboardInterrupt, and
  the CLI tells SIGTERM from Ctrl-C by the exception's class.
  """
  previous = signal.getsignal(signal.SIGTERM)
  if (threading.current_thread() is not threading.main_thread() or
      not callable(previous)):
    yield
    return
  seen = []

  def handler(signum, frame):
    seen.append(signum)
    previous(signum, frame)

  signal.signal(signal.SIGTERM, handler)
  try:
    yield
  except KeyboardInterrupt as e:
    if seen and not isinstance(e, Terminated):
      raise Terminated(f"received signal {seen[0]}") from None
    raise
  finally:
    signal.signal(signal.SIGTERM, previous)


def _death(error) -> str:
  """One line on how an actor's process ended."""
  detail = str(error)
  for line in detail.splitlines():
    if "Worker exit detail:" in line:
      detail = line.split("Worker exit detail:", 1)[1].split(".")[0].strip()
      break
  else:
    detail = "no detail"
  return f"actor process died ({detail})"
