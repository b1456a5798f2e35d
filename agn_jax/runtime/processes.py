"""The processes backend (the default and the reference): a server, n workers and an evaluator on one host.

They exchange the center and commits through shared memory
(`SharedMemoryTransport`). This module supervises them: spawns, watches,
restarts dead workers, stops; the books are `bookkeeping.RunBook`'s. It never
starts a JAX backend itself (that would claim accelerator memory the workers
need), and every shared-memory segment is created and unlinked here, so
nothing outlives the run.
"""

import contextlib
import os
import signal
import threading
import time
from typing import Dict, Optional

from agn_jax.runtime import _child
from agn_jax.runtime import backend as backend_lib
from agn_jax.runtime import events as ev
from agn_jax.runtime import placement as placement_lib
from agn_jax.runtime import shm
from agn_jax.runtime.bookkeeping import RunError, write_json
from agn_jax.runtime.evaluator import evaluator_main
from agn_jax.runtime.server import server_main
from agn_jax.runtime.transport import SharedMemoryTransport
from agn_jax.runtime.worker import worker_main

MAX_SLOTS = 8  # Enough to keep the server busy; bounded so workers feel backpressure.
_GRACE_SECONDS = 1.5  # Children poll the abort flag at least every 0.2 s.
_SPAWN_LOCK = threading.Lock()


def cache_dir_default() -> str:
  """The persistent compilation cache: `$AGN_JAX_CACHE_DIR` or ~/.cache/agn_jax/jax_cache."""
  return os.environ.get("AGN_JAX_CACHE_DIR", _child.DEFAULT_CACHE_DIR)


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


def _cause(exitcode) -> str:
  if exitcode is not None and exitcode < 0:
    return f"killed by signal {-exitcode}"
  return f"exited with code {exitcode}"


class ProcessesBackend(backend_lib.ServerBackend):
  """Spawned processes on one host, shared memory between them.

  Options (keyword arguments of `train()`):
    num_slots: capacity of the commit ring (default `min(n, 8)`).
    cache_dir: JAX's persistent compilation cache shared by all processes
      (default `cache_dir_default()`; "" turns it off).
  """

  name = "processes"

  def __init__(self, config, book, num_slots=None, cache_dir=None):
    super().__init__(config, book)
    self.num_slots = num_slots
    self.cache_dir = cache_dir_default() if cache_dir is None else cache_dir
    self.data = None
    self.transport = None
    self.events = None
    self.flags = None
    self.replies = None
    self.processes: Dict[str, object] = {}  # role -> Process
    self.live: Dict[object, str] = {}  # sentinel -> role, of running processes
    self.worker_pipes: Dict[int, object] = {}  # worker -> its events' reader
    self.incarnations: Dict[int, int] = {}
    self.previous_pids = []

  # Set-up.

  def prepare(self, dataset=None):
    config, book = self.config, self.book
    plan = backend_lib.plan(config, dataset)
    dataset = plan.dataset
    n = config.num_workers
    book.expected_commits = plan.expected_commits
    book.windows_per_worker = plan.windows

    platform = config.platform or placement_lib.detect_platform()
    devices = placement_lib.visible_devices(platform)
    cores = placement_lib.available_cores()
    xla_flags = os.environ.get("XLA_FLAGS", "")
    book.extra_summary["platform"] = platform
    self.worker_placements = [
        placement_lib.worker_placement(platform, i, n, devices, cores,
                                       xla_flags) for i in range(n)
    ]
    self.host_placement = placement_lib.host_placement(xla_flags)

    import multiprocess
    self.mp = multiprocess.get_context("spawn")
    self.data = shm.SharedArrays.create({
        "x_train": dataset.x_train, "y_train": dataset.y_train,
        "x_test": dataset.x_test, "y_test": dataset.y_test,
    })
    slots = self.num_slots or min(n, MAX_SLOTS)
    self.transport = SharedMemoryTransport.create(
        self.mp, plan.layout.num_params, plan.payload_size, slots, n)
    book.extra_summary["num_slots"] = slots
    self.flags = shm.Flags.create(_child.FLAG_NAMES)
    # Only the server and the evaluator write here; each worker has a pipe.
    self.events = self.mp.Queue()
    if self.cache_dir:
      os.makedirs(os.path.expanduser(self.cache_dir), exist_ok=True)
    self.ctx = _child.RunContext(
        config=config.to_dict(), data=self.data, transport=self.transport,
        events=self.events, flags=self.flags, layout=plan.layout.metadata(),
        num_classes=dataset.num_classes,
        input_shape=tuple(dataset.input_shape), cache_dir=self.cache_dir,
        parent_pid=os.getpid())
    if not config.resume:
      book.open()

  def _start(self, role, placement, target, *args):
    process = self.mp.Process(target=target, args=(self.ctx, *args),
                              name=f"agn-{role}", daemon=True)
    with _spawn_environment(placement):
      process.start()
    self.processes[role] = process
    self.live[process.sentinel] = role

  def _start_worker(self, w):
    reader, writer = self.mp.Pipe(duplex=False)
    self._start(f"worker {w}", self.worker_placements[w], worker_main, w,
                self.worker_placements[w], writer,
                self.incarnations.setdefault(w, 0))
    writer.close()  # The child holds its own copy; EOF once it is gone.
    self.worker_pipes[w] = reader

  def run(self):
    self._spawn()
    self.book.timeline["spawned"] = time.time()
    self._supervise()

  def _spawn(self):
    replies, self.replies = self.mp.Pipe(duplex=False)
    self._start("server", self.host_placement, server_main,
                self.host_placement, replies, self.config.resume)
    replies.close()
    if self.config.resume:
      self._await_restore()
    self._start("evaluator", self.host_placement, evaluator_main,
                self.host_placement)
    for w in range(self.config.num_workers):
      self._start_worker(w)
    self._write_pids()

  def _await_restore(self):
    """Waits until the server has read and checked the checkpoint, then takes over the workdir."""
    from multiprocess import connection
    reader = self.events._reader  # pylint: disable=protected-access
    while self.book.restored is None:
      ready = connection.wait([reader] + list(self.live), 0.5)
      self._drain_events()
      for sentinel in ready:
        if sentinel in self.live and self.book.restored is None:
          self._on_exit(self.live.pop(sentinel))
          raise RunError("server exited before restoring the checkpoint")
    self.book.open(self.book.restored.metrics_offset)

  def _write_pids(self):
    n = self.config.num_workers
    write_json(self.book.workdir / "pids.json", {
        "server": self.processes["server"].pid,
        "evaluator": self.processes["evaluator"].pid,
        "workers": [self.processes[f"worker {i}"].pid for i in range(n)],
        "restarted_workers": self.previous_pids,  # Dead, replaced ones.
        # For leak checks: these names must be gone from /dev/shm at the end.
        "shm_segments": [*self.transport.names, self.data.name,
                         self.flags.name],
    })

  # Supervision.

  def _supervise(self, deadline: Optional[float] = None):
    """Waits on events and process sentinels until the final evaluation (or `deadline`).

    A dead worker's sentinel leads to a restart (`_on_exit`); the server's
    final checkpoint leads to the final evaluation.
    """
    from multiprocess import connection
    book = self.book
    reader = self.events._reader  # pylint: disable=protected-access
    while book.final_eval is None:
      timeout = 0.5
      if deadline is not None:
        timeout = deadline - time.monotonic()
        if timeout <= 0:
          return
      timeout = self._stop_after_max_seconds(timeout)
      pipes = {r: w for w, r in self.worker_pipes.items()}
      ready = connection.wait([reader] + list(pipes) + list(self.live),
                              min(timeout, 0.5))
      self._drain_events()
      for r in ready:
        if r in pipes:
          self._drain_pipe(pipes[r])
      for sentinel in ready:
        if sentinel in self.live:
          self._on_exit(self.live.pop(sentinel))
      self._advance()

  def _dispatch(self, event):
    if isinstance(event, ev.CheckpointRequest):
      # Every event the server sent before is in the file: that is the
      # position a resume from this checkpoint cuts metrics.jsonl back to.
      self.replies.send((event.clock, self.book.metrics_position()))
    else:
      self.book.handle(event)

  def _on_exit(self, role):
    process = self.processes[role]
    process.join()
    self._drain_events()  # Its last words (an error report) come first.
    code = process.exitcode
    if role.startswith("worker"):
      return self._on_worker_exit(int(role.split()[1]), code)
    self._check_exit(role, code == 0, _cause(code))

  def _on_worker_exit(self, w, code):
    """Restarts a dead worker with the rest of its share, within the run's budget."""
    self._drain_pipe(w, to_end=True)
    if self._worker_exited(w, code == 0, _cause(code)):
      self.previous_pids.append(self.processes[f"worker {w}"].pid)
      self._start_worker(w)
      self._write_pids()

  def _drain_pipe(self, w, to_end=False):
    """Handles what worker `w` sent; closes its pipe at EOF."""
    reader = self.worker_pipes.get(w)
    while reader is not None and reader.poll(0 if not to_end else 0.05):
      try:
        event = reader.recv()
      except Exception:  # EOF, or a message cut short by a kill.
        reader.close()
        del self.worker_pipes[w]
        return
      self._dispatch(event)

  def _drain_events(self):
    import queue
    while True:
      try:
        event = self.events.get_nowait()
      except queue.Empty:
        return
      self._dispatch(event)

  # The end.

  def shutdown(self):
    if self.flags is not None:
      # After a normal end everyone has left already; otherwise leave now.
      self.flags.set("stop")
      self.flags.set("abort")
    deadline = time.monotonic() + _GRACE_SECONDS
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
      self.replies = None
    if self.events is not None:
      self.events.cancel_join_thread()
      self.events.close()
      self.events = None
    for shared in ("transport", "data", "flags"):
      resource = getattr(self, shared)
      if resource is not None:
        resource.close()
        resource.unlink()
        setattr(self, shared, None)
