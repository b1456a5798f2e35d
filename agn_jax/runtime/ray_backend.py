"""The ray backend: the server, the workers and the evaluator as Ray actors, on one machine or a cluster.

They run the processes backend's own loops (`server.serve`,
`worker.run_worker`, `evaluator.run_evaluator`). The center travels through
Ray's object store, where a read on the same node maps the stored pages
(zero-copy), and commits travel as object references through a FIFO queue
held by one small actor, the hub, with the acknowledgement counters, the
workers' done reports and the run's switches (an `inprocess.CommitBoard`).
Events reach the driver through a second actor, the mailbox. The
supervision is `backend.ServerBackend`'s. Ray is an optional install
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

from agn_jax.errors import RayStartError, RunError
from agn_jax.runtime import _child
from agn_jax.runtime import backend as backend_lib
from agn_jax.runtime import channels
from agn_jax.runtime import events as ev
from agn_jax.runtime import placement as placement_lib
from agn_jax.runtime import ray_head
from agn_jax.runtime.inprocess import CommitBoard
from agn_jax.runtime.transport import Commit, Transport

_CONNECT_SECONDS = 5.0  # To reach a cluster address before Ray's own (long) retries.
_SWITCH_SECONDS = 0.02  # How stale a part's view of an unset switch may be.


def _ray():
  try:
    import ray  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise RunError("the ray backend needs Ray: pip install -r "
                   "requirements-ray.txt") from e
  return ray


# The actors. Plain classes here; `ray.remote(cls)` makes actors of them.


class _Hub:
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
    placement: what the part applies before JAX is imported
      (`_child.enter`); Ray already started the process with its
      environment (`runtime_env`). Linux applies its affinity and niceness
      to this thread; JAX's threads, started from it later, inherit them
      (Ray's own threads keep theirs).
    platform: the part's platform; a TPU worker learns only here which chip
      Ray assigned it.
  """

  def __init__(self, placement, platform):
    self.entered = time.time()
    if platform == "tpu":
      placement = placement._replace(env=dict(
          placement.env, **_tpu_env(self._accelerator_ids("TPU"))))
    _child.enter(placement)

  @staticmethod
  def _accelerator_ids(kind):
    import ray  # pylint: disable=g-import-not-at-top
    return tuple(ray.get_runtime_context().get_accelerator_ids().get(kind, ()))

  def where(self):
    import ray  # pylint: disable=g-import-not-at-top
    return {"pid": os.getpid(), "node": ray.util.get_node_ip_address()}

  def serve(self, ctx, replies, resume):
    from agn_jax.runtime import server  # pylint: disable=g-import-not-at-top
    return server.serve(ctx, replies, resume)

  def work(self, ctx, index, incarnation):
    from agn_jax.runtime import worker  # pylint: disable=g-import-not-at-top
    return worker.run_worker(ctx, index, incarnation, self.entered)

  def evaluate(self, ctx):
    from agn_jax.runtime import evaluator  # pylint: disable=g-import-not-at-top
    return evaluator.run_evaluator(ctx)


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
  (`shares.shard_bounds`), the evaluator the test set.
  """

  def __init__(self, config):
    self._args = (config.dataset, config.data_dir, config.dataset_size,
                  config.seed)

  def arrays(self):
    from agn_jax import data  # pylint: disable=g-import-not-at-top
    name, data_dir, size, seed = self._args
    return backend_lib.dataset_arrays(data.load(name, data_dir, size=size,
                                                seed=seed))


class StoredDataset(channels.DataSource):
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
      of this machine, stopped at the end and with this process however it
      ends, SIGKILL included: `ray_head.LocalRay`), "auto" (the cluster this
      machine belongs to), or the head's "host:port"; default
      `config.ray_address`. A process that already called `ray.init()`
      keeps its connection, and the run never stops it.
    num_slots, cache_dir: as `backend.ServerBackend` has them (the cache
      on each node).

  A `dataset=` object given to `train()` is put into the object store once
  (each node then reads it zero-copy); otherwise every part loads the data
  itself by name.
  """

  name = "ray"
  poll_seconds = 0.05  # Nothing Ray does wakes the driver: it looks this often.

  def __init__(self, config, book, ray_address=None, num_slots=None,
               cache_dir=None):
    super().__init__(config, book, num_slots, cache_dir)
    self.address = config.ray_address if ray_address is None else ray_address
    self.ray = None
    # The private instance that "local" started, with its keeper.
    self.local: Optional[ray_head.LocalRay] = None
    self.connected = False  # This run called ray.init (and shuts it down).
    self.hub = self.mailbox = self.replies = None
    self.taken = 0  # Events taken from the mailbox so far.
    self.actors: Dict[str, object] = {}  # role -> its latest actor
    self.calls: Dict[str, object] = {}  # role -> ObjectRef of its loop, until read
    self.where: Dict[str, dict] = {}  # role -> {"pid", "node"}
    self.pending_where: Dict[object, tuple] = {}  # ObjectRef -> (role, actor)
    self.retired: List[object] = []  # Dead workers' actors, killed at the end.

  # Set-up.

  def prepare(self, dataset=None):
    with self._interrupts_deferred():
      check_address(self.address)
      # Before the data and the model: their threads (XLA's) would not have
      # Ctrl-C and SIGTERM blocked while Ray starts its core (`_connect`).
      self._connect()
      self._interrupt_point()
      super().prepare(dataset)

  def _set_up(self, plan, slots, dataset):
    ray, n = self.ray, self.config.num_workers
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # pylint: disable=g-import-not-at-top
    here = NodeAffinitySchedulingStrategy(
        ray.get_runtime_context().get_node_id(), soft=False)
    self.on_driver_node = dict(scheduling_strategy=here, num_cpus=0,
                               max_restarts=0)
    self.single_node = sum(node["Alive"] for node in ray.nodes()) == 1
    self.platform, self.worker_options = self._worker_resources(n)
    self.book.extra_summary["platform"] = self.platform
    self.book.extra_summary["ray_address"] = self.address
    self.transport = RayTransport.create(plan.layout.num_params,
                                         plan.payload_size, n, slots,
                                         **self.on_driver_node)
    self.hub = self.transport.hub
    self.mailbox = ray.remote(_Mailbox).options(
        max_concurrency=1, **self.on_driver_node).remote()
    self.switches = RaySwitches(self.hub)
    self.events = RayEvents(self.mailbox)
    self.replies = RayReplies(self.mailbox)
    self.data = (DatasetByName(self.config) if dataset is None else
                 StoredDataset(ray.put(backend_lib.dataset_arrays(dataset))))

  def _connect(self):
    """Connects to Ray: a private instance started here for "local" (`ray_head`), else the cluster at the address."""
    ray = self.ray = _ray()
    if ray.is_initialized():
      return
    address = self.address
    if address == "local":
      self.local = ray_head.LocalRay.launch(
          num_cpus=len(placement_lib.available_cores()))
      try:
        self.local.wait_ready()
      except RayStartError as e:
        raise RunError(str(e)) from None
      address = self.local.address
    error = []

    def connect():
      try:
        ray.init(address=address, log_to_driver=False,
                 configure_logging=False)
      except BaseException as e:  # pylint: disable=broad-except
        error.append(e)

    # In a thread of its own: in the main thread ray.init installs a SIGTERM
    # handler that exits at once, and an exception raised by a signal
    # handler must not cut Ray's start of its core in half. Ctrl-C and
    # SIGTERM are blocked meanwhile (Ray's core installs a handler of its own
    # that prints a stack trace) and take effect once it is done.
    thread = threading.Thread(target=connect, name="ray.init", daemon=True)
    with _interrupts_held(block=True), _quiet_ray_init():
      thread.start()
      thread.join()
      self.connected = not error
    if error and isinstance(error[0], ConnectionError):
      raise ValueError(f"ray_address {self.address}: {error[0]}") from None
    if error:
      raise error[0]

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

  def _host(self, role, placement, platform, **options):
    host = self.ray.remote(_Host).options(
        runtime_env={"env_vars": dict(placement.env)}, **options).remote(
            placement, platform)
    self.actors[role] = host
    self.pending_where[host.where.remote()] = (role, host)
    return host

  # The parts.

  def _launch(self, role):
    w = backend_lib.worker_of(role)
    if w is None:
      placement = placement_lib.host_placement(os.environ.get("XLA_FLAGS", ""))
      host = self._host(role, placement, "cpu", **self.on_driver_node)
      self.calls[role] = (
          host.serve.remote(self.ctx, self.replies, self.config.resume)
          if role == "server" else host.evaluate.remote(self.ctx))
      return
    options = dict(self.worker_options)
    affinity = None
    if self.single_node and self.platform == "cpu":
      # One machine, as with processes: each worker its own core(s).
      affinity = placement_lib.worker_placement(
          "cpu", w, self.config.num_workers,
          cores=placement_lib.available_cores()).cpu_affinity
    placement = placement_lib.Placement(options.pop("env"), affinity,
                                        placement_lib.WORKER_NICE)
    host = self._host(role, placement, self.platform, **options)
    self.calls[role] = host.work.remote(self.ctx, w, self.incarnations[w])

  def _wait(self, timeout):
    refs = list(self.calls.values())
    done = []
    if refs:
      self.ray.wait(refs, num_returns=1, timeout=timeout)
      done, _ = self.ray.wait(refs, num_returns=len(refs), timeout=0)
    else:
      time.sleep(timeout)
    self._note_where()
    done = set(done)
    return [role for role, ref in self.calls.items() if ref in done]

  def _exit_cause(self, role):
    ref = self.calls.pop(role)
    try:
      ok = bool(self.ray.get(ref))
      return ok, "exited early" if ok else "exited after a failure"
    except self.ray.exceptions.RayActorError as e:
      logs = (os.path.join(self.local.session_dir, "logs")
              if self.local is not None and self.local.session_dir else None)
      return False, _death(e, self._pid(role), logs)

  def _take_events(self):
    for event in self.ray.get(self.mailbox.take.remote(self.taken)):
      self.taken += 1  # Before handling, as a queue's `get` would.
      yield event

  def _reply(self, answer):
    self.mailbox.reply.remote(answer)

  def _retire(self, role):
    self.retired.append(self.actors.pop(role))
    self.where.pop(role, None)
    self.ray.kill(self.retired[-1], no_restart=True)

  def _note_where(self):
    """Records where each actor runs as soon as it has started (pids.json)."""
    if not self.pending_where:
      return
    ready, _ = self.ray.wait(list(self.pending_where),
                             num_returns=len(self.pending_where), timeout=0)
    for ref in ready:
      role, host = self.pending_where.pop(ref)
      try:
        place = self.ray.get(ref)
      except self.ray.exceptions.RayActorError:
        continue
      if self.actors.get(role) is host:  # Not a retired one's answer.
        self.where[role] = place
    if ready:
      self._write_pids()

  def _pid(self, role):
    return self.where.get(role, {}).get("pid")

  def _pids_extra(self):
    return {
        "shm_segments": [],  # Ray's object store is Ray's to clean up.
        "nodes": {role: p["node"] for role, p in self.where.items()},
        "ray_address": self.address,
        # The private instance "local" started: its keeper, and the session
        # directory by which its processes are known.
        "ray_keeper": self.local.keeper.pid if self.local else None,
        "ray_session_dir": self.local.session_dir if self.local else None,
    }

  # The end.

  def shutdown(self):
    # Ray's stop, like its start, must not be cut in half; an interrupt
    # meanwhile only asks for what is happening already.
    with _interrupts_held(drop=True):
      super().shutdown()

  def _end_parts(self):
    if self.ray is not None:
      self._stop_actors()
    if self.local is not None:
      self.local.stop()  # The instance and every process in it.

  def _stop_actors(self):
    ray = self.ray
    try:
      if self.calls:  # They were told to leave.
        ray.wait(list(self.calls.values()), num_returns=len(self.calls),
                 timeout=backend_lib.GRACE_SECONDS)
    except ray.exceptions.RayError:
      pass
    actors = [a for a in [*self.actors.values(), *self.retired, self.hub,
                          self.mailbox] if a is not None]
    for actor in actors:
      try:
        ray.kill(actor, no_restart=True)
      except Exception:  # pylint: disable=broad-except
        pass  # Gone already.
    self.calls.clear()
    if self.connected:
      ray.shutdown()  # Disconnects; `local.stop()` ends the instance.
    else:
      # A kill only starts the end; a call to a dead actor fails at once.
      try:
        if actors:
          ray.wait([a.__ray_ready__.remote() for a in actors],
                   num_returns=len(actors), timeout=backend_lib.GRACE_SECONDS)
      except ray.exceptions.RayError:
        pass


@contextlib.contextmanager
def _interrupts_held(drop: bool = False, block: bool = False):
  """Holds Ctrl-C and SIGTERM back in this block; afterwards they act as they would have (unless `drop`).

  With `block`, they are also blocked in this thread, and so in every thread
  started meanwhile, for good; they then reach no thread that blocked them
  before (the CLI blocks them in every thread but the main one) until the
  block ends. Its end puts Python's handlers back in place, over any a
  library installed meanwhile. In the main thread only (elsewhere signals
  are not this thread's).
  """
  if threading.current_thread() is not threading.main_thread():
    yield
    return
  signals = {signal.SIGINT, signal.SIGTERM}
  held = []
  hold = lambda signum, frame: held.append(signum)
  previous = {signum: signal.signal(signum, hold) for signum in signals}
  mask = signal.pthread_sigmask(signal.SIG_BLOCK, signals) if block else None
  try:
    yield
  finally:
    if block:
      for signum in sorted(signals & signal.sigpending()):
        signal.sigwait({signum})  # Taken here, not by whatever handler.
        held.append(signum)
    _settle()  # A handler tripped by another thread runs now, as `hold`.
    for signum, handler in previous.items():
      signal.signal(signum, handler)
    if block:
      signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    if held and not drop:
      handler = previous[held[0]]
      if callable(handler):
        handler(held[0], None)  # Raises KeyboardInterrupt or Terminated.
      elif handler == signal.SIG_DFL:
        signal.raise_signal(held[0])


def _settle():
  """Nothing; Python runs the handlers of signals that arrived meanwhile when it enters a function."""


@contextlib.contextmanager
def _quiet_ray_init():
  """Drops Ray's warning that ray.init outside the main thread sets no SIGTERM handler (on purpose)."""
  import logging  # pylint: disable=g-import-not-at-top

  class _Drop(logging.Filter):

    def filter(self, record):
      return "SIGTERM handler is not set" not in record.getMessage()

  logger = logging.getLogger("ray._private.worker")
  quiet = _Drop()
  logger.addFilter(quiet)
  try:
    yield
  finally:
    logger.removeFilter(quiet)


def _death(error, pid: Optional[int] = None,
           logs_dir: Optional[str] = None) -> str:
  """One line on how an actor's process ended, e.g. "actor died: killed by signal 9".

  Ray reports a process that vanished without a word as "connection error
  code 2 ... End of file": its SIGTERM handler reports SIGTERM, and a
  crash (SIGSEGV, SIGABRT, ...) leaves "Fatal Python error" in the
  process's log (Ray's workers run faulthandler), so what is left is SIGKILL
  (kill -9, the kernel's OOM killer). The log is read where this process can
  see it (`logs_dir`, an instance on this machine).

  Example:
    >>> _death(RuntimeError("Worker exit type: SYSTEM_ERROR Worker exit "
    ...                     "detail: Worker unexpectedly exits with a "
    ...                     "connection error code 2. End of file. Some..."))
    'actor died: killed by signal 9'
  """
  detail = None
  for line in str(error).splitlines():
    if "Worker exit detail:" in line:
      detail = line.split("Worker exit detail:", 1)[1].strip()
      break
  if detail is None:
    return "actor died (no detail)"
  if "receives a SIGTERM" in detail:
    return f"actor died: killed by signal {int(signal.SIGTERM)}"
  if "connection error code 2" in detail or "End of file" in detail:
    crash = _fatal_error(pid, logs_dir)
    if crash:
      return f"actor died: crashed ({crash})"
    return f"actor died: killed by signal {int(signal.SIGKILL)}"
  return f"actor died ({detail.split('.')[0].strip()})"


def _fatal_error(pid: Optional[int], logs_dir: Optional[str]) -> Optional[str]:
  """The "Fatal Python error: ..." that Ray's worker `pid` logged before it died, if any."""
  if not pid or not logs_dir:
    return None
  import glob  # pylint: disable=g-import-not-at-top
  pattern = os.path.join(glob.escape(logs_dir), f"worker-*-{pid}.err")
  for path in glob.glob(pattern):
    try:
      with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        f.seek(max(0, f.tell() - 65536))
        text = f.read().decode("utf-8", "replace")
    except OSError:
      continue
    for line in text.splitlines():
      if line.startswith("Fatal Python error:"):
        return line.split(":", 1)[1].strip()
  return None
