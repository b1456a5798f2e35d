"""The seam between a run and the machinery that runs it.

A `Backend` supervises the run's parts (start, watch, restart, stop) and
hands every event to the shared books (`bookkeeping.RunBook`); `train()`
picks one by name from `BACKENDS`. What every backend computes the same way
(the data, the shares, the parameter layout) is `plan()`. `ServerBackend`
is the supervision of a server, workers and an evaluator, written once; the
processes and Ray backends (and threads, `inprocess`) only start, wait for,
read and stop their parts.
"""

import abc
import contextlib
import importlib
import os
import pathlib
import signal
import threading
import time
from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Tuple

import numpy as np

from agn_jax.config import TrainConfig
from agn_jax.errors import RunError, Terminated
from agn_jax.runtime import context
from agn_jax.runtime import evaluator
from agn_jax.runtime import events as ev
from agn_jax.runtime import server
from agn_jax.runtime import worker
from agn_jax.runtime.bookkeeping import read_json, write_json
from agn_jax.runtime.transports import shm
from agn_jax import wire as wire_lib

# name -> "module:Class", imported on first use (Ray is an optional install).
BACKENDS = {
    "processes": "agn_jax.runtime.backends.processes:ProcessesBackend",
    "simulated": "agn_jax.runtime.backends.simulated:SimulatedBackend",
    "ray": "agn_jax.runtime.backends.ray:RayBackend",
}


def available() -> tuple:
  """The backend names `train()` and `--backend` accept."""
  return tuple(BACKENDS)




def backend_class(name: str):
  """The class registered under `name`."""
  if name not in BACKENDS:
    raise ValueError(f"backend must be one of {available()}, got {name!r}")
  module, cls = BACKENDS[name].split(":")
  return getattr(importlib.import_module(module), cls)


class Plan(NamedTuple):
  """What a run trains on and how the work is shared, the same for every backend.

  Attributes:
    dataset: the `agn_jax.data.Dataset`.
    windows: whole communication windows in each worker's share.
    expected_commits: `num_workers × windows`.
    layout: the parameters' `FlatLayout`.
    payload_size: flat arrays per commit.
    wire: each of those arrays' `(length, dtype)` (`agn_jax.wire.wire_of`:
      float32 vectors of the model's size, or a codec's arrays with
      `--commit_compression`), what the transport's slots hold.
  """
  dataset: Any
  windows: int
  expected_commits: int
  layout: Any
  payload_size: int
  wire: Tuple[Tuple[int, str], ...] = ()


def plan(config: TrainConfig, dataset=None) -> Plan:
  """Loads the data and checks it against the task, the model and the workers' shares.

  Raises:
    ValueError: data that does not fit the task (`data.check_dataset`),
      a model and task that do not fit it (`build.check_fit`), too few
      examples for the workers, or a share shorter than a window.
  """
  from agn_jax import build, data
  from agn_jax.shares import windows_per_worker
  # The data checked once, against the task that reads it (class labels in
  # range), whoever loaded it: a loader, or the caller of `train()`.
  classes_for = (config.task if build.build_task(config).class_targets else
                 None)
  if dataset is None:
    dataset = data.load(config.dataset, config.data_dir,
                        size=config.dataset_size, seed=config.seed,
                        classes_for=classes_for)
  else:
    dataset = data.check_dataset(dataset, config.dataset, classes_for)
  n = config.num_workers
  if len(dataset.x_train) < n:
    raise ValueError(f"{len(dataset.x_train)} training examples cannot be "
                     f"sharded over {n} workers")
  windows = windows_per_worker(len(dataset.x_train), n, config.epochs,
                               config.communication_window, config.batch_size)
  if windows < 1:
    raise ValueError(
        f"each worker's share ({config.epochs:g} epochs × "
        f"{len(dataset.x_train)} / {n} samples) is less than one "
        f"communication window (λ × batch = "
        f"{config.communication_window * config.batch_size})")
  model, loss_fn = build.build_model(config, dataset.num_classes,
                                     dataset.input_shape)
  # The parameters' shapes, traced once: the fit's check and the layout.
  example = data.example_of(dataset.x_train)
  shapes = context.param_shapes(model, config, example)
  build.check_fit(config, model, loss_fn, dataset, shapes)
  layout = context.param_layout(model, config, example, shapes)
  strategy = build.build_strategy(config)
  if config.resume:
    # Before anything is written: the checkpoint's metadata, its run and its
    # fit to this config (the arrays are checked when they are restored).
    from agn_jax import checkpoint
    checkpoint.validate_for_resume(config.workdir, config.to_dict(),
                                   len(dataset.x_train), layout.metadata())
  wire = wire_lib.wire_of(strategy, layout)
  return Plan(dataset, windows, n * windows, layout, len(wire), wire)


def _alive(pid: int) -> bool:
  """Whether process `pid` runs (a zombie, killed and not yet reaped, does not)."""
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True
  try:
    with open(f"/proc/{pid}/stat") as f:
      return f.read().rpartition(")")[2].split()[0] != "Z"
  except (OSError, IndexError):
    return True


def unlink_dead_run_leftovers(workdir) -> List[str]:
  """Unlinks what an earlier run in `workdir` left in /dev/shm when it was killed with its tracker.

  pids.json names that run's processes and its segments and semaphores.
  Called with the workdir's lock held (no live run owns it); still, when
  any of those processes is alive (an orphaned part, or a reused pid),
  nothing is touched. Returns the names unlinked.
  """
  pids = read_json(pathlib.Path(workdir) / "pids.json")
  if not pids:
    return []
  processes = [pids.get("server"), pids.get("evaluator"),
               *(pids.get("workers") or []),
               *(pids.get("restarted_workers") or [])]
  if any(_alive(pid) for pid in processes
         if isinstance(pid, int) and pid > 0):
    return []  # Alive (or reused): leave everything as it is.
  return shm.unlink_leftovers(pids.get("shm_segments") or [],
                              pids.get("semaphores") or [])


class Backend(abc.ABC):
  """Supervision of one run: what differs between processes, a simulator and a cluster.

  Args:
    config: the resolved config.
    book: the run's books; every event goes to `book.handle`.
    faults: what a test injects into the workers (`context.Faults`; a
      backend without worker loops, the simulated one, has none to inject).
  """

  name: str = ""

  def __init__(self, config: TrainConfig, book,
               faults: context.Faults = context.Faults()):
    self.config = config
    self.book = book
    self.faults = faults

  @abc.abstractmethod
  def prepare(self, dataset=None) -> None:
    """Loads the data and sets up resources; nothing runs yet.

    Opens the books (`book.open`) unless the run resumes, when that waits
    for the checkpoint to be restored.

    Raises:
      ValueError: the config does not fit the data.
    """

  @abc.abstractmethod
  def run(self) -> None:
    """Starts every part and supervises until the final evaluation.

    Raises:
      RunError: a part failed beyond what the restart budget allows.
    """

  @abc.abstractmethod
  def wind_down(self, seconds: float) -> None:
    """After an interrupt: workers finish their window, the server its final checkpoint."""

  def settle(self, seconds: float) -> None:
    """After a failure: takes in what the parts sent before it, for `seconds` at most.

    A worker counts its own rejected commits and can fail on the third
    before the server's events about them have come through the queue; the
    failure's summary counts them all the same. Best effort: nothing here
    raises.
    """
    del seconds

  @abc.abstractmethod
  def final_center(self) -> Optional[np.ndarray]:
    """The center at the end, flat float32."""

  @abc.abstractmethod
  def shutdown(self) -> None:
    """Ends every part and frees every resource; safe to call twice."""


MAX_SLOTS = 8  # Enough to keep the server busy; bounded so workers feel backpressure.
GRACE_SECONDS = 1.5  # The parts poll the abort switch at least every 0.2 s.


def cache_dir_default() -> str:
  """The persistent compilation cache: `$AGN_JAX_CACHE_DIR` or ~/.cache/agn_jax/jax_cache."""
  return os.environ.get("AGN_JAX_CACHE_DIR", context.DEFAULT_CACHE_DIR)


def dataset_arrays(dataset) -> Dict[str, np.ndarray]:
  """The arrays of an `agn_jax.data.Dataset` that the parts read (`channels.DataSource.arrays`)."""
  return {"x_train": dataset.x_train, "y_train": dataset.y_train,
          "x_test": dataset.x_test, "y_test": dataset.y_test}


def worker_of(role: str) -> Optional[int]:
  """The worker index of a part's role, or None for the server and the evaluator.

  Example:
    >>> worker_of("worker 3"), worker_of("server")
    (3, None)
  """
  return int(role.split()[1]) if role.startswith("worker ") else None


def run_part(ctx, role: str, replies=None, resume: bool = False,
             incarnation: int = 0, entered: Optional[float] = None) -> bool:
  """Runs a part's loop in this process, whatever holds it: a spawned process, a Ray actor or a thread.

  Args:
    ctx: the run's `context.RunContext`, with the part's own events channel.
    role: "server", "evaluator" or "worker {w}".
    replies: the server's `channels.Replies`.
    resume: the server restores the newest checkpoint first.
    incarnation: a worker's restarts so far.
    entered: when the part's process started (a worker's timeline).

  Returns:
    False after the part reported a failure (or an abort) to the supervisor.
  """
  if role == "server":
    return server.serve(ctx, replies, resume)
  if role == "evaluator":
    return evaluator.run_evaluator(ctx)
  return worker.run_worker(ctx, worker_of(role), incarnation, entered)


def exit_cause(exitcode: Optional[int]) -> str:
  """How a process ended, from its exit code (negative: the signal that ended it).

  Example:
    >>> exit_cause(-9), exit_cause(1)
    ('killed by signal 9', 'exited with code 1')
  """
  if exitcode is not None and exitcode < 0:
    return f"killed by signal {-exitcode}"
  return f"exited with code {exitcode}"


@contextlib.contextmanager
def interrupts_held(held: List[int], block: bool = False):
  """Ctrl-C and SIGTERM are appended to `held` in this block instead of acting; the handlers in place before come back at its end.

  With `block`, they are also blocked in this thread, and so in every
  thread started meanwhile, for good; they then reach no thread that
  blocked them before (the CLI blocks them in every thread but the main
  one) until the block ends, and those that came meanwhile are appended
  then. The end puts Python's handlers back in place, over any a library
  installed meanwhile. In the main thread only (elsewhere signals are not
  this thread's).

  Example:
    >>> held = []
    >>> with interrupts_held(held):
    ...   os.kill(os.getpid(), signal.SIGINT)
    >>> held == [signal.SIGINT]
    True
  """
  if threading.current_thread() is not threading.main_thread():
    yield
    return
  signals = {signal.SIGINT, signal.SIGTERM}
  note = lambda signum, frame: held.append(signum)
  previous = {signum: signal.signal(signum, note) for signum in signals}
  mask = signal.pthread_sigmask(signal.SIG_BLOCK, signals) if block else None
  try:
    yield
  finally:
    if block:
      for signum in sorted(signals & signal.sigpending()):
        signal.sigwait({signum})  # Taken here, not by whatever handler.
        held.append(signum)
    _settle()  # A handler tripped by another thread runs now, as `note`.
    for signum, handler in previous.items():
      signal.signal(signum, handler)
    if block:
      signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _settle():
  """Nothing; Python runs the handlers of signals that arrived meanwhile when it enters a function."""


class ServerBackend(Backend):
  """A run of separate parts (a server, workers, an evaluator) that talk through a `Transport`, supervised here.

  This class owns the run's life: it starts the parts (the server first,
  and on resume waits until it has restored the checkpoint), hands their
  events to the books, answers the server's checkpoint requests, opens the
  start barrier, restarts a worker that died (within the run's restart
  budget), fails the run when the server or the evaluator dies, writes
  pids.json, winds down after an interrupt and ends every part. Ctrl-C and
  SIGTERM take effect at its own points (`_interrupt_point`), never inside
  a call to a part or to the books.

  A subclass supplies the parts' channels and how to handle a part:

  * `_set_up`: sets `transport`, `switches`, `events` and `data`;
  * `_launch(role)`: starts a part ("server", "evaluator", "worker {w}");
  * `_wait(timeout)`: the roles of parts that ended and are not yet read;
  * `_exit_cause(role)`: reads how an ended part ended, `(ok, cause)`;
  * `_take_events()`: what the parts sent; `_reply(answer)` answers the
    server;
  * `_pid(role)`, `_retire(role)`, `_end_parts()`: a part's process id, a
    dead worker's remains, and stopping every part.

  Its settings (`agn_jax.config.ServerOptions`, in `config.options`):
  `num_slots`, how many commits may wait for the server (None:
  `min(n, MAX_SLOTS)`), and `cache_dir`, JAX's persistent compilation cache
  (None: `cache_dir_default()`; "" turns it off).
  """

  poll_seconds = 0.1  # The longest the supervisor waits between two looks.
  parent_pid: Optional[int] = None  # `RunContext.parent_pid` of the parts.

  def __init__(self, config, book, faults=context.Faults()):
    super().__init__(config, book, faults)
    options = config.options
    self.num_slots = options.num_slots
    self.cache_dir = (cache_dir_default() if options.cache_dir is None else
                      options.cache_dir)
    self.transport = self.switches = self.events = self.data = None
    self.ctx = None
    self.incarnations: Dict[int, int] = {}  # worker -> restarts so far
    self.running = set()  # Roles of the parts started and not yet ended.
    self.restarted_pids: List[int] = []  # Dead workers' processes.
    self.interrupts: List[int] = []  # Ctrl-C / SIGTERM not acted upon yet.
    self.closed = False

  # What a backend supplies.

  @abc.abstractmethod
  def _set_up(self, plan: Plan, slots: int, dataset) -> None:
    """Creates `transport`, `switches`, `events` (the server's and the evaluator's) and `data`.

    Args:
      plan: the run's `Plan`.
      slots: how many commits may wait for the server.
      dataset: the dataset given to `train()`, or None (the plan loaded it).
    """

  @abc.abstractmethod
  def _launch(self, role: str) -> None:
    """Starts a part: the server (restoring the checkpoint if the run resumes), the evaluator, or worker w (incarnation `incarnations[w]`)."""

  @abc.abstractmethod
  def _wait(self, timeout: float) -> List[str]:
    """Waits up to `timeout` seconds for an event or a part's end; returns the roles that ended and were not read yet."""

  @abc.abstractmethod
  def _exit_cause(self, role: str) -> Tuple[bool, str]:
    """How an ended part ended: `(ok, cause)`, e.g. `(False, "killed by signal 9")`; it is then forgotten by `_wait`."""

  @abc.abstractmethod
  def _take_events(self) -> Iterable:
    """The events the parts sent, oldest first; each is taken once handed out."""

  @abc.abstractmethod
  def _reply(self, answer) -> None:
    """Sends `answer` to the server (`channels.Replies`)."""

  @abc.abstractmethod
  def _pid(self, role: str) -> Optional[int]:
    """The process id of a part, once it is known."""

  def _retire(self, role: str) -> None:
    """Releases what is left of a dead worker before it is started again."""

  @abc.abstractmethod
  def _end_parts(self) -> None:
    """Ends every part within `GRACE_SECONDS` (they were told to leave) and frees every resource."""

  def _pids_extra(self) -> Dict[str, Any]:
    """The backend's own entries of pids.json."""
    return {}

  # Set-up.

  def prepare(self, dataset=None):
    from agn_jax import data  # pylint: disable=g-import-not-at-top
    config, book = self.config, self.book
    the_plan = plan(config, dataset)
    self._interrupt_point()
    if config.dynamic_local_updates:
      # The windows' lengths are measured as the run goes: only the share's
      # samples are known before.
      book.expected_samples = (the_plan.expected_commits *
                               config.communication_window * config.batch_size)
    else:
      book.expected_commits = the_plan.expected_commits
    slots = self.num_slots or min(config.num_workers, MAX_SLOTS)
    book.extra_summary["num_slots"] = slots
    self._set_up(the_plan, slots, dataset)
    self.incarnations = {w: 0 for w in range(config.num_workers)}
    self.ctx = context.RunContext(
        config=config.to_dict(), data=self.data, transport=self.transport,
        events=self.events, switches=self.switches,
        layout=the_plan.layout.metadata(),
        num_classes=the_plan.dataset.num_classes,
        input_shape=tuple(the_plan.dataset.input_shape),
        example=data.example_of(the_plan.dataset.x_train),
        cache_dir=self.cache_dir, parent_pid=self.parent_pid,
        faults=self.faults)
    if not config.resume:
      book.open()

  def run(self):
    with self._interrupts_deferred():
      self._start("server")
      if self.config.resume:
        self._await_restore()
      self._interrupt_point()
      self._start("evaluator")
      for w in range(self.config.num_workers):
        self._interrupt_point()
        self._start(f"worker {w}")
      self._write_pids()
      self.book.timeline["spawned"] = time.time()
      self._supervise()

  def _start(self, role):
    self._launch(role)
    self.running.add(role)

  def _await_restore(self):
    """Waits until the server has read and checked the checkpoint, then takes over the workdir."""
    while self.book.restored is None:
      self._interrupt_point()
      ended = self._wait(self.poll_seconds)
      self._drain()
      if ended and self.book.restored is None:
        self._on_exit(ended[0])  # Raises why, if the server said.
        raise RunError("server exited before restoring the checkpoint")
    from agn_jax import checkpoint  # pylint: disable=g-import-not-at-top
    checkpoint.tell(self.book.restored.notes)
    self.book.open(self.book.restored.metrics_offset)

  def _write_pids(self):
    """pids.json, once every part's process is known: for leak checks and for attacks on the run."""
    n = self.config.num_workers
    roles = ["server", "evaluator", *(f"worker {w}" for w in range(n))]
    pids = {role: self._pid(role) for role in roles}
    if None in pids.values():
      return
    write_json(self.book.workdir / "pids.json", {
        "server": pids["server"],
        "evaluator": pids["evaluator"],
        "workers": [pids[f"worker {w}"] for w in range(n)],
        "restarted_workers": self.restarted_pids,
        "shm_segments": [],  # Names that must be gone from /dev/shm at the end.
        **self._pids_extra(),
    })

  # Supervision.

  def _supervise(self, deadline: Optional[float] = None) -> None:
    """Handles events and ended parts until the run is over (`_over`), or `deadline` (monotonic)."""
    while not self._over():
      self._interrupt_point()
      timeout = self.poll_seconds
      if deadline is not None:
        timeout = min(timeout, deadline - time.monotonic())
        if timeout <= 0:
          return
      timeout = self._stop_after_max_seconds(timeout)
      ended = self._wait(timeout)
      self._drain()
      for role in ended:
        self._on_exit(role)
      self._advance()

  def _over(self) -> bool:
    """The final evaluation is in, and every worker has ended (its last events are in), or `GRACE_SECONDS` passed."""
    final = self.book.final_eval
    return final is not None and (
        time.time() - final.time > GRACE_SECONDS or
        not any(worker_of(role) is not None for role in self.running))

  def settle(self, seconds):
    if not self.book.owns_files:
      return
    deadline = time.monotonic() + seconds
    while True:
      try:
        self._drain()
      except Exception:  # pylint: disable=broad-except
        pass  # Another part's failure: the run already ends in its own.
      if time.monotonic() >= deadline:
        return
      time.sleep(0.05)

  def _drain(self):
    for event in self._take_events():
      if isinstance(event, ev.CheckpointRequest):
        # Every event the server sent before is in the file: that is the
        # position a resume from this checkpoint cuts metrics.jsonl back to.
        self._reply((event.clock, self.book.metrics_position(),
                     self.book.wall_seconds()))
      else:
        self.book.handle(event)

  def _on_exit(self, role):
    """A part ended: a worker is started again if it must be; the server or the evaluator may only end when done."""
    ok, cause = self._exit_cause(role)
    self.running.discard(role)
    self._drain()  # Its last words (an error report) come first.
    w = worker_of(role)
    if w is None:
      self._check_exit(role, ok, cause)
    elif self._worker_exited(w, ok, cause):
      pid = self._pid(role)
      if pid is not None:
        self.restarted_pids.append(pid)
      self._retire(role)
      self._start(role)
      self._write_pids()

  def _check_exit(self, role: str, ok: bool, cause: str) -> None:
    """The server or the evaluator left: fine once its work is done, else the run fails.

    Raises:
      RunError: `"{role} {cause}"`.
    """
    expected = ((role == "server" and self.book.server_done is not None) or
                (role == "evaluator" and self.book.final_eval is not None))
    if not (ok and expected):
      raise RunError(f"{role} {cause}")

  def _worker_exited(self, w: int, ok: bool, cause: str) -> bool:
    """What worker `w`'s exit means; True when it must be started again.

    Its share done, or all its commits in: nothing to redo. Winding down: no
    restart, and the server is told it is done. Otherwise the books count a
    restart (the run fails past its budget) with the error the worker
    reported, else `cause`.
    """
    book, transport = self.book, self.transport
    if ok and w in book.worker_done:
      return False  # Its share is done.
    error = book.take_worker_error(w)
    if error:
      cause = f"failed: {error}"
    if transport.is_done(w):
      return False  # It died after finishing its share: nothing to redo.
    transport.reclaim(w)  # A commit it was writing; a queued one stays.
    if self.switches.is_set("stop"):
      # Winding down: no restart; the server must not wait for this worker.
      config = self.config
      steps = transport.steps_done(w, config.communication_window,
                                   config.dynamic_local_updates)
      done = ev.WorkerDone(w, transport.acknowledged(w),
                           steps * config.batch_size, {})
      transport.finish(done)
      book.handle(done)
      return False
    book.worker_failed(w, cause, transport.acknowledged(w),
                       self.incarnations[w] + 1)
    self.incarnations[w] += 1
    return True

  def _stop_after_max_seconds(self, timeout: float) -> float:
    """Sets `stop` once `max_seconds` have passed; returns how long to wait at most."""
    config = self.config
    if config.max_seconds and not self.switches.is_set("stop"):
      remaining = config.max_seconds - (time.time() - self.book.t0)
      if remaining <= 0:
        self.switches.set("stop")  # Workers finish their window and report done.
      timeout = max(0.0, min(timeout, remaining))
    return timeout

  def _advance(self) -> None:
    """The start barrier once every worker is ready; `final` once the server is done."""
    book = self.book
    if (not self.switches.is_set("go") and
        len(book.ready) == self.config.num_workers):
      book.start_training()
      self.switches.set("go")  # Every worker is compiled: training begins.
    if book.server_done is not None and not self.switches.is_set("final"):
      self.switches.set("final")  # The center is final: evaluate it once more.

  # Interrupts.

  @contextlib.contextmanager
  def _interrupts_deferred(self):
    """Ctrl-C and SIGTERM are raised at the supervisor's own points (`_interrupt_point`), never inside a call to a part or to the books.

    A call to Ray, say, may swallow the exception a signal handler raised
    inside it, and the run would go on as if nothing had been asked; a row
    of metrics.jsonl would be cut in half.
    """
    with interrupts_held(self.interrupts):
      yield
    self._interrupt_point()

  def _interrupt_point(self):
    """Raises the first interrupt that came (KeyboardInterrupt, or `Terminated` for SIGTERM)."""
    if self.interrupts:
      signum = self.interrupts[0]
      self.interrupts.clear()
      if signum == signal.SIGTERM:
        raise Terminated(f"received signal {signum}")
      raise KeyboardInterrupt

  # The end.

  def wind_down(self, seconds):
    if self.switches is not None and self.book.owns_files:
      self.switches.set("stop")  # Workers finish their window and report done.
      self._supervise(deadline=time.monotonic() + seconds)

  def final_center(self):
    center = np.empty(self.transport.num_params, np.float32)
    self.transport.pull(center)
    return center

  def shutdown(self):
    if self.closed:
      return
    self.closed = True
    if self.switches is not None:
      try:
        # After a normal end everyone has left already; otherwise leave now.
        self.switches.set("stop")
        self.switches.set("abort")
      except Exception:  # pylint: disable=broad-except
        pass  # The switches are gone with their holder; `_end_parts` ends all.
    self._end_parts()
