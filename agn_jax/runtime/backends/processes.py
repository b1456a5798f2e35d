"""The processes backend (the default and the reference): a server, n workers and an evaluator on one host.

They exchange the center and commits through shared memory
(`SharedMemoryTransport`), and the run's switches and data too (`shm`); the
server and the evaluator send their events through a queue, each worker
through a pipe of its own. The supervision is `backend.ServerBackend`'s;
this module spawns, watches and stops the processes. It never starts a JAX
backend itself (that would claim accelerator memory the workers need), and
every shared-memory segment is created and unlinked here, so nothing
outlives the run.
"""

import collections
import contextlib
import os
import queue
import signal
import threading
import time
from typing import Dict

from agn_jax import placement as placement_lib
from agn_jax.runtime import backend as backend_lib
from agn_jax.runtime import context
from agn_jax.runtime.transports import channels
from agn_jax.runtime.transports import shm
from agn_jax.runtime.transports.shared_memory import SharedMemoryTransport

_SPAWN_LOCK = threading.Lock()


# --- The channels: a queue for the server and the evaluator, a pipe each for
# the workers, a pipe for the launcher's replies.


class EventPipe(channels.Events):
  """A worker's own channel to the launcher: the writing end of a pipe.

  One writer per pipe, and no lock: a worker killed mid-message cannot block
  anyone else, unlike a `multiprocessing.Queue` shared by all workers.
  """

  def __init__(self, connection):
    self._connection = connection

  def put(self, event) -> None:
    self._connection.send(event)


class QueueEvents(channels.Events):
  """The server's and the evaluator's channel to the launcher: a `multiprocess.Queue`.

  Its feeder thread takes what is put, so the server never waits for the
  launcher to read.
  """

  def __init__(self, queue):
    self.queue = queue

  def put(self, event) -> None:
    self.queue.put(event)


class PipeReplies(channels.Replies):
  """The launcher's answers to the server: the reading end of a pipe."""

  def __init__(self, connection):
    self._connection = connection

  def poll(self, timeout):
    return self._connection.poll(timeout)

  def recv(self):
    return self._connection.recv()


# --- The backend.


@contextlib.contextmanager
def _spawn_environment(placement: placement_lib.Placement):
  """Spawns inside see the placement's environment and SIGINT blocked from exec on.

  A spawned child inherits the environment and the signal mask, so JAX in
  the child (even one imported while unpickling) sees its placement, and a
  Ctrl-C in the terminal reaches only the launcher, which coordinates the
  shutdown. A SIGINT that arrives meanwhile stays pending for the launcher.
  """
  with _SPAWN_LOCK:
    saved = {key: os.environ.get(key) for key in placement.env}
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
      os.environ.update(placement.env)
      yield
    finally:
      for key, value in saved.items():
        if value is None:
          os.environ.pop(key, None)
        else:
          os.environ[key] = value
      signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)


def _part_main(ctx, role, placement, replies, resume, incarnation) -> None:
  """A spawned part: its placement first, then its loop (`backend.run_part`); exit status 1 after a reported failure."""
  entered = time.time()
  context.enter(placement)
  if not backend_lib.run_part(ctx, role, replies, resume, incarnation,
                              entered):
    raise SystemExit(1)


class ProcessesBackend(backend_lib.ServerBackend):
  """Spawned processes on one host, shared memory between them.

  Its settings (`agn_jax.config.ProcessesOptions`): `num_slots`, the
  capacity of the commit ring, and `cache_dir`, JAX's persistent
  compilation cache shared by all processes (see `backend.ServerBackend`).
  """

  name = "processes"

  def __init__(self, config, book, faults=context.Faults()):
    super().__init__(config, book, faults)
    self.queue = self.replies = None
    self.processes: Dict[str, object] = {}  # role -> its latest Process
    self.live: Dict[object, str] = {}  # sentinel -> role, not yet read
    self.worker_pipes: Dict[int, object] = {}  # worker -> its events' reader
    self.last_words = collections.deque()  # Read from a dead worker's pipe.

  def _set_up(self, plan, slots, dataset):
    del dataset  # The plan's arrays go into shared memory.
    config, n = self.config, self.config.num_workers
    platform = config.platform or placement_lib.detect_platform()
    devices = placement_lib.visible_devices(platform)
    cores = placement_lib.available_cores()
    xla_flags = os.environ.get("XLA_FLAGS", "")
    self.book.extra_summary["platform"] = platform
    self.worker_placements = [
        placement_lib.worker_placement(platform, i, n, devices, cores,
                                       xla_flags) for i in range(n)
    ]
    self.host_placement = placement_lib.host_placement(xla_flags)
    import multiprocess  # pylint: disable=g-import-not-at-top
    self.mp = multiprocess.get_context("spawn")
    self.parent_pid = os.getpid()
    self.data = shm.SharedArrays.create(backend_lib.dataset_arrays(
        plan.dataset))
    from agn_jax import tasks  # pylint: disable=g-import-not-at-top
    task = tasks.get_task(config.task)
    self.transport = SharedMemoryTransport.create(
        self.mp, plan.layout.num_params, plan.payload_size, slots, n,
        step_capacity=config.communication_window, wire=plan.wire,
        metrics=task.metric_names(), step_metric=task.efficiency_metric)
    self.switches = shm.Switches.create(channels.SWITCH_NAMES)
    # Only the server and the evaluator write here; each worker has a pipe.
    self.queue = self.mp.Queue()
    self.events = QueueEvents(self.queue)
    if self.cache_dir:
      os.makedirs(os.path.expanduser(self.cache_dir), exist_ok=True)

  def _launch(self, role):
    w = backend_lib.worker_of(role)
    ctx, placement, replies = self.ctx, self.host_placement, None
    if role == "server":
      reader, self.replies = self.mp.Pipe(duplex=False)
      replies = PipeReplies(reader)
    elif w is not None:
      # A pipe of its own: a worker killed mid-message blocks no one else.
      reader, writer = self.mp.Pipe(duplex=False)
      ctx = ctx._replace(events=EventPipe(writer))
      placement = self.worker_placements[w]
    process = self.mp.Process(
        target=_part_main, name=f"agn-{role}", daemon=True,
        args=(ctx, role, placement, replies, self.config.resume,
              self.incarnations.get(w, 0)))
    with _spawn_environment(placement):
      process.start()
    self.processes[role] = process
    self.live[process.sentinel] = role
    if role == "server":
      reader.close()  # The server holds its own copy.
    elif w is not None:
      writer.close()  # The child holds its own copy; EOF once it is gone.
      self.worker_pipes[w] = reader

  def _wait(self, timeout):
    from multiprocess import connection  # pylint: disable=g-import-not-at-top
    reader = self.queue._reader  # pylint: disable=protected-access
    ready = connection.wait(
        [reader, *self.worker_pipes.values(), *self.live], timeout)
    return [self.live[r] for r in ready if r in self.live]

  def _exit_cause(self, role):
    process = self.processes[role]
    process.join()
    del self.live[process.sentinel]
    w = backend_lib.worker_of(role)
    if w is not None:  # What it sent before it died, to the end.
      self.last_words.extend(self._read_pipe(w, wait=0.05))
    return process.exitcode == 0, backend_lib.exit_cause(process.exitcode)

  def _take_events(self):
    while self.last_words:
      yield self.last_words.popleft()
    while True:
      try:
        yield self.queue.get_nowait()
      except queue.Empty:
        break
    for w in list(self.worker_pipes):
      yield from self._read_pipe(w)

  def _read_pipe(self, w, wait=0.0):
    """What worker `w` sent; closes its pipe at EOF."""
    reader = self.worker_pipes.get(w)
    while reader is not None and reader.poll(wait):
      try:
        event = reader.recv()
      except Exception:  # pylint: disable=broad-except
        reader.close()  # EOF, or a message cut short by a kill.
        del self.worker_pipes[w]
        return
      yield event

  def _reply(self, answer):
    self.replies.send(answer)

  def _pid(self, role):
    process = self.processes.get(role)
    return process.pid if process is not None else None

  def _pids_extra(self):
    return {"shm_segments": [*self.transport.names, self.data.name,
                             self.switches.name],
            "semaphores": shm.semaphore_names(self.queue, self.transport)}

  def _end_parts(self):
    deadline = time.monotonic() + backend_lib.GRACE_SECONDS
    for process in self.processes.values():
      process.join(max(0.0, deadline - time.monotonic()))
    for process in self.processes.values():
      if process.is_alive():
        process.terminate()
    for process in self.processes.values():
      process.join(1.0)
      if process.is_alive():
        process.kill()
        process.join()
    for reader in self.worker_pipes.values():
      reader.close()
    self.worker_pipes.clear()
    if self.replies is not None:
      self.replies.close()
    if self.queue is not None:
      self.queue.cancel_join_thread()
      self.queue.close()
    for resource in (self.transport, self.data, self.switches):
      if resource is not None:
        resource.close()
        resource.unlink()
