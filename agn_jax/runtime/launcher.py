"""`train()`: spawns the server, the workers and the evaluator, supervises them, restarts dead workers, shuts down, writes results.

The launcher itself never starts a JAX backend (that would claim accelerator
memory the workers need); it only traces shapes, and the server restores
checkpoints. Every shared-memory segment is created and unlinked here, so
nothing outlives the run.
"""

import contextlib
import json
import os
import pathlib
import signal
import threading
import time
from typing import Callable, Dict, List, Optional

import numpy as np

from agn_jax.checkpoint import CheckpointError
from agn_jax.config import TrainConfig
from agn_jax.runtime import _child
from agn_jax.runtime import placement as placement_lib
from agn_jax.runtime import shm
from agn_jax.runtime.evaluator import evaluator_main
from agn_jax.runtime.server import server_main
from agn_jax.runtime.transport import SharedMemoryTransport, WorkerDone
from agn_jax.runtime.worker import windows_per_worker, worker_main

Progress = Callable[[Dict[str, object]], None]

MAX_SLOTS = 8  # Enough to keep the server busy; bounded so workers feel backpressure.
_GRACE_SECONDS = 1.5  # Children poll the abort flag at least every 0.2 s.
# After Ctrl-C / SIGTERM: time for the workers' last windows, the final
# checkpoint and evaluation, so that the whole run ends within 10 s.
_WIND_DOWN_SECONDS = 5.0
_SPAWN_LOCK = threading.Lock()


class RunError(RuntimeError):
  """A process of the run failed; the message is one line naming it and the cause."""


def _resume_error(workdir, message) -> CheckpointError:
  return CheckpointError(f"cannot resume from {workdir}: {message}")


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


class Terminated(KeyboardInterrupt):
  """SIGTERM, raised like Ctrl-C so that a run shuts down the same way."""


def _raise_interrupt(signum, frame):
  del frame
  raise Terminated(f"received signal {signum}")


def _check_config(config: TrainConfig) -> None:
  from agn_jax import config as config_lib
  if config.strategy not in config_lib.STRATEGIES:
    raise ValueError(f"strategy must be one of {config_lib.STRATEGIES}, "
                     f"got {config.strategy!r}")
  for name in ("num_workers", "communication_window", "batch_size"):
    value = getattr(config, name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
      raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
  restarts = config.max_worker_restarts
  if isinstance(restarts, bool) or not isinstance(restarts, int) or restarts < 0:
    raise ValueError(f"max_worker_restarts must be an integer >= 0, got "
                     f"{restarts!r}")
  if not config.epochs > 0:
    raise ValueError(f"epochs must be > 0, got {config.epochs!r}")
  if config.platform not in (None,) + placement_lib.PLATFORMS:
    raise ValueError(f"platform must be one of {placement_lib.PLATFORMS} or "
                     f"None, got {config.platform!r}")
  if config.max_seconds is not None and not config.max_seconds > 0:
    raise ValueError(f"max_seconds must be > 0 or None, got "
                     f"{config.max_seconds!r}")


def _check_resume_dir(workdir: pathlib.Path) -> None:
  """Cheap checks before anything starts; the server reads and checks the checkpoint itself."""
  if not workdir.is_dir():
    raise _resume_error(workdir, "no such directory")
  directory = workdir / "checkpoints"
  steps = [p for p in directory.iterdir() if p.name.isdigit()
          ] if directory.is_dir() else []
  if not steps:
    raise _resume_error(workdir, f"no checkpoint in {directory}")


def train(config: TrainConfig,
          progress: Optional[Progress] = None,
          *,
          num_slots: Optional[int] = None,
          cache_dir: Optional[str] = None,
          dataset=None) -> Dict[str, object]:
  """Trains with one server process and `config.num_workers` worker processes.

  Writes `config.json`, `pids.json`, `metrics.jsonl`, `summary.json`,
  `center.npy` and `checkpoints/` to `config.workdir`. Every process ends and
  every shared-memory segment is unlinked however the run ends: normally, by
  a failure (raised here as `RunError`), or by Ctrl-C / SIGTERM (re-raised as
  `KeyboardInterrupt` after a final checkpoint and `summary.json` with
  `interrupted`).

  Reliability:
    * A worker that dies (killed, out of memory, an exception) is restarted
      with a fresh pull and the rest of its data share; at most
      `config.max_worker_restarts` restarts in total per run (over all
      workers, counted anew by each `--resume` session). One more death ends
      the run with `RunError`. A slot the dead worker had acquired but not
      committed is reclaimed; a commit it had queued is complete and applied,
      so commits applied + rejected == commits the workers made, exactly.
    * The server checkpoints the center, its state, the commit count, each
      worker's progress and the position in metrics.jsonl every
      `config.checkpoint_every_seconds` and at the end.
    * `config.resume` continues the run in `config.workdir` from its newest
      checkpoint: the clock continues, metrics.jsonl is cut back to the
      checkpoint and appended to, each worker continues its share. A missing,
      corrupt or incompatible checkpoint (see
      `agn_jax.checkpoint.RESUME_MUST_MATCH`) raises `CheckpointError`
      before any file is written.

  Args:
    config: the run.
    progress: called in this process with every commit and evaluation event
      (the dicts written to metrics.jsonl), e.g. to drive a progress bar.
    num_slots: capacity of the commit ring (default `min(n, 8)`).
    cache_dir: JAX's persistent compilation cache shared by all processes
      (default `cache_dir_default()`; "" turns it off).
    dataset: an `agn_jax.data.Dataset` to train on instead of loading
      `config.dataset` (e.g. synthetic data of another dimension).

  Returns:
    The summary (also written to summary.json).

  Raises:
    ValueError: a bad config (before any process starts).
    CheckpointError: (a ValueError) `config.resume` cannot resume.
    RunError: a process failed.

  Example:
    >>> from agn_jax import TrainConfig
    >>> from agn_jax.runtime import train
    >>> summary = train(TrainConfig(num_workers=2, epochs=1.0,
    ...                             workdir="/tmp/agn_doc"))  # doctest: +SKIP
    >>> summary["num_commits"] == sum(summary["worker_commits"])  # doctest: +SKIP
    True
  """
  _check_config(config)
  run = _Run(config, progress, num_slots,
             cache_dir_default() if cache_dir is None else cache_dir, dataset)
  in_main_thread = threading.current_thread() is threading.main_thread()
  old_term = (signal.signal(signal.SIGTERM, _raise_interrupt)
              if in_main_thread else None)
  try:
    return run.execute()
  finally:
    if in_main_thread:
      signal.signal(signal.SIGTERM, old_term)


class _Run:
  """One run's resources and state, kept together so shutdown finds everything."""

  def __init__(self, config, progress, num_slots, cache_dir, dataset):
    self.dataset = dataset
    self.config = config
    self.progress = progress
    self.num_slots = num_slots
    self.cache_dir = cache_dir
    self.workdir = pathlib.Path(config.workdir)
    self.t0 = time.time()
    self.data = None
    self.transport = None
    self.events = None
    self.flags = None
    self.replies = None
    self.processes: Dict[str, object] = {}  # role -> Process
    self.live: Dict[object, str] = {}  # sentinel -> role, of running processes
    self.worker_pipes: Dict[int, object] = {}  # worker -> its events' reader
    self.metrics_file = None
    # What the events tell.
    self.staleness: List[int] = []
    self.commit_times: List[float] = []
    self.ready: Dict[int, float] = {}
    self.worker_timelines: Dict[int, dict] = {}
    self.timeline: Dict[str, float] = {}
    self.worker_done: Dict[int, dict] = {}
    self.worker_errors: Dict[int, str] = {}
    self.incarnations: Dict[int, int] = {}
    self.previous_pids: List[int] = []
    self.restarts = 0
    self.restored = None
    self.server_done = None
    self.last_eval = None
    self.final_eval = None
    self.last_checkpoint = None
    self.rejected = 0
    self.expected_commits = None

  # The phases.

  def execute(self):
    try:
      self._prepare()
      self.timeline["prepared"] = time.time()
      self._spawn()
      self.timeline["spawned"] = time.time()
      self._supervise()
      self._save_center()
      return self._write_summary(interrupted=False)
    except KeyboardInterrupt:
      # Let the workers commit their last window and the server write its
      # final checkpoint; a second interrupt (or the deadline) cuts it short.
      try:
        if self.flags is not None and self.metrics_file is not None:
          self.flags.set("stop")
          self._supervise(deadline=time.monotonic() + _WIND_DOWN_SECONDS)
      except (KeyboardInterrupt, RunError):
        pass
      self._shutdown()
      if self.metrics_file is not None:  # Only once this run owns the files.
        self._write_summary(interrupted=True)
      raise
    finally:
      self._shutdown()

  def _prepare(self):
    from agn_jax import build, data
    config = self.config
    if config.resume:
      _check_resume_dir(self.workdir)
    dataset = self.dataset or data.load(config.dataset, config.data_dir,
                                        size=config.dataset_size,
                                        seed=config.seed)
    self.dataset = None  # Shared memory holds it from here on.
    n = config.num_workers
    if len(dataset.x_train) < n:
      raise ValueError(f"{len(dataset.x_train)} training examples cannot be "
                       f"sharded over {n} workers")
    self.windows = windows_per_worker(len(dataset.x_train), n, config.epochs,
                                      config.communication_window,
                                      config.batch_size)
    if self.windows < 1:
      raise ValueError(
          f"each worker's share ({config.epochs:g} epochs × "
          f"{len(dataset.x_train)} / {n} samples) is less than one "
          f"communication window (λ × batch = "
          f"{config.communication_window * config.batch_size})")
    self.expected_commits = n * self.windows
    model, _ = build.build_model(config, dataset.num_classes,
                                 dataset.input_shape)
    layout = _child.param_layout(model, config, dataset.input_shape)
    strategy = build.build_strategy(config)

    platform = config.platform or placement_lib.detect_platform()
    devices = placement_lib.visible_devices(platform)
    cores = placement_lib.available_cores()
    xla_flags = os.environ.get("XLA_FLAGS", "")
    self.platform = platform
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
        self.mp, layout.num_params, len(strategy.payload), slots, n)
    self.num_slots_used = slots
    self.flags = shm.Flags.create(_child.FLAG_NAMES)
    # Only the server and the evaluator write here; each worker has a pipe.
    self.events = self.mp.Queue()
    if self.cache_dir:
      os.makedirs(os.path.expanduser(self.cache_dir), exist_ok=True)
    self.ctx = _child.RunContext(
        config=config.to_dict(), data=self.data, transport=self.transport,
        events=self.events, flags=self.flags, layout=layout.metadata(),
        num_classes=dataset.num_classes,
        input_shape=tuple(dataset.input_shape), cache_dir=self.cache_dir,
        parent_pid=os.getpid())
    if not config.resume:
      self._open_files(None)

  def _open_files(self, metrics_offset: Optional[int]):
    """Writes config.json and opens metrics.jsonl: from here on the workdir is this run's."""
    self.workdir.mkdir(parents=True, exist_ok=True)
    _write_json(self.workdir / "config.json", self.config.to_dict())
    path = self.workdir / "metrics.jsonl"
    if self.config.resume:
      # Events after the checkpoint happen again in this session.
      if (metrics_offset is not None and path.exists() and
          metrics_offset <= path.stat().st_size):
        os.truncate(path, metrics_offset)
      self.metrics_file = open(path, "a")
    else:
      self.metrics_file = open(path, "w")

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
    while self.restored is None:
      ready = connection.wait([reader] + list(self.live), 0.5)
      self._drain_events()
      for sentinel in ready:
        if sentinel in self.live and self.restored is None:
          self._on_exit(self.live.pop(sentinel))
          raise RunError("server exited before restoring the checkpoint")
    self._open_files(self.restored["metrics_offset"])

  def _write_pids(self):
    n = self.config.num_workers
    _write_json(self.workdir / "pids.json", {
        "server": self.processes["server"].pid,
        "evaluator": self.processes["evaluator"].pid,
        "workers": [self.processes[f"worker {i}"].pid for i in range(n)],
        "restarted_workers": self.previous_pids,  # Dead, replaced ones.
        # For leak checks: these names must be gone from /dev/shm at the end.
        "shm_segments": [*self.transport.names, self.data.name,
                         self.flags.name],
    })

  def _supervise(self, deadline: Optional[float] = None):
    """Waits on events and process sentinels until the final evaluation (or `deadline`).

    A dead worker's sentinel leads to a restart (`_on_exit`); the server's
    final checkpoint leads to the final evaluation.
    """
    from multiprocess import connection
    config = self.config
    reader = self.events._reader  # pylint: disable=protected-access
    while self.final_eval is None:
      timeout = 0.5
      if deadline is not None:
        timeout = deadline - time.monotonic()
        if timeout <= 0:
          return
      if config.max_seconds and not self.flags.is_set("stop"):
        remaining = config.max_seconds - (time.time() - self.t0)
        if remaining <= 0:
          self.flags.set("stop")  # Workers finish their window and report done.
        timeout = max(0.0, min(timeout, remaining))
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
      if (not self.flags.is_set("go") and
          len(self.ready) == config.num_workers):
        self.flags.set("go")  # The start barrier: every worker is compiled.
      if self.server_done is not None and not self.flags.is_set("final"):
        self.flags.set("final")  # The center is final: evaluate it once more.

  def _on_exit(self, role):
    process = self.processes[role]
    process.join()
    self._drain_events()  # Its last words (an error report) come first.
    code = process.exitcode
    if role.startswith("worker"):
      return self._on_worker_exit(int(role.split()[1]), code)
    expected = ((role == "server" and self.server_done is not None) or
                (role == "evaluator" and self.final_eval is not None))
    if code == 0 and expected:
      return
    raise RunError(f"{role} {_cause(code)}")

  def _on_worker_exit(self, w, code):
    """Restarts a dead worker with the rest of its share, within the run's budget."""
    self._drain_pipe(w, to_end=True)
    if code == 0 and w in self.worker_done:
      return  # Its share is done.
    error = self.worker_errors.pop(w, None)
    cause = f"failed: {error}" if error else _cause(code)
    if self.transport.is_done(w):
      return  # It died after finishing its share: nothing to redo.
    self.transport.reclaim(w)  # A slot it was filling; its queued one stays.
    if self.flags.is_set("stop"):
      # Winding down: no restart; the server must not wait for this worker.
      acked = self.transport.acknowledged(w)
      samples = acked * self.config.communication_window * self.config.batch_size
      self.transport.finish(WorkerDone(w, acked, samples, {}))
      self.worker_done[w] = {"worker": w, "num_commits": acked,
                             "num_samples": samples, "stats": {}}
      return
    limit = self.config.max_worker_restarts
    if self.restarts >= limit:
      raise RunError(f"worker {w} {cause}; no restarts left "
                     f"(--max_worker_restarts={limit})")
    self.restarts += 1
    self.incarnations[w] += 1
    self.previous_pids.append(self.processes[f"worker {w}"].pid)
    self._record({"event": "worker_restart", "time": round(
        time.time() - self.t0, 6), "worker": w, "cause": cause,
                  "incarnation": self.incarnations[w],
                  "commits_done": self.transport.acknowledged(w)})
    self._start_worker(w)
    self._write_pids()

  def _drain_pipe(self, w, to_end=False):
    """Handles what worker `w` sent; closes its pipe at EOF."""
    reader = self.worker_pipes.get(w)
    while reader is not None and reader.poll(0 if not to_end else 0.05):
      try:
        kind, event = reader.recv()
      except Exception:  # EOF, or a message cut short by a kill.
        reader.close()
        del self.worker_pipes[w]
        return
      self._handle(kind, event)

  def _drain_events(self):
    import queue
    while True:
      try:
        kind, event = self.events.get_nowait()
      except queue.Empty:
        return
      self._handle(kind, event)

  def _record(self, record):
    if self.metrics_file is not None:
      self.metrics_file.write(json.dumps(record) + "\n")

  def _handle(self, kind, event):
    rel = lambda t: round(t - self.t0, 6)
    if kind == "error":
      role = event["role"]
      if self.metrics_file is not None:
        with open(self.workdir / "error.log", "a") as f:
          f.write(f"{role}: {event['traceback']}\n")
      if role.startswith("worker"):
        # Its exit decides: restart, or fail the run with this message.
        self.worker_errors[int(role.split()[1])] = event["message"]
        return
      raise RunError(f"{role} failed: {event['message']}")
    if kind == "resume_error":
      raise _resume_error(self.workdir, event["message"])
    if kind == "restored":
      self.restored = event
      return
    if kind == "checkpoint_request":
      # Every event the server sent before is in the file: that is the
      # position a resume from this checkpoint cuts metrics.jsonl back to.
      self.metrics_file.flush()
      self.replies.send((event["clock"], self.metrics_file.tell()))
      return
    if kind == "ready":
      if "worker" not in event:
        return
      self.ready.setdefault(event["worker"], event["time"])
      self.worker_timelines.setdefault(event["worker"], event["timeline"])
      record = {"event": "worker_ready", "time": rel(event["time"]),
                "worker": event["worker"],
                "incarnation": event.get("incarnation", 0)}
    elif kind == "commit":
      record = {"event": "commit", "time": rel(event["time"]),
                "worker": event["worker"], "clock": event["clock"],
                "staleness": event["staleness"], "loss": event["loss"],
                "accuracy": event["accuracy"],
                "expected_commits": self.expected_commits}
      self.staleness.append(event["staleness"])
      self.commit_times.append(event["time"])
    elif kind == "eval":
      record = {"event": "eval", "time": rel(event["time"]),
                "clock": event["clock"], "loss": event["loss"],
                "accuracy": event["accuracy"], "final": event["final"]}
      self.last_eval = record
      if event["final"]:
        self.final_eval = record
    elif kind == "rejected":
      self.rejected += 1
      record = {"event": "rejected", "time": rel(event["time"]),
                "worker": event["worker"], "clock": event["clock"]}
    elif kind == "checkpoint":
      self.last_checkpoint = event["clock"]
      record = {"event": "checkpoint", "time": rel(event["time"]),
                "clock": event["clock"], "final": event["final"],
                "seconds": round(event["seconds"], 3)}
    elif kind == "worker_done":
      self.worker_done[event["worker"]] = event
      record = {"event": "worker_done", "time": rel(time.time()),
                "worker": event["worker"],
                "num_commits": event["num_commits"],
                "num_samples": event["num_samples"]}
    elif kind == "server_done":
      self.server_done = event
      record = {"event": "server_done", "time": rel(event["time"]),
                "num_commits": event["num_commits"],
                "rejected_commits": event["rejected_commits"]}
    else:
      return
    self._record(record)
    if kind in ("commit", "eval"):
      self.metrics_file.flush()
      if self.progress is not None:
        self.progress(record)

  def _startup(self):
    """Seconds from `train()` to each start-up milestone (the slowest worker's)."""
    out = {key: round(t - self.t0, 3) for key, t in self.timeline.items()}
    for key in ("entered", "built", "compiled"):
      times = [tl[key] for tl in self.worker_timelines.values() if key in tl]
      if times:
        out[f"workers_{key}"] = round(max(times) - self.t0, 3)
    if 0 in self.worker_timelines and "compiled" in self.worker_timelines[0]:
      out["leader_compiled"] = round(
          self.worker_timelines[0]["compiled"] - self.t0, 3)
    if self.commit_times:
      out["first_commit"] = round(self.commit_times[0] - self.t0, 3)
    return out

  def _save_center(self):
    """Writes the final center as `center.npy` (flat float32; load with `allow_pickle=False`)."""
    center = np.empty(self.transport.num_params, np.float32)
    self.transport.pull(center)
    np.save(self.workdir / "center.npy", center, allow_pickle=False)

  def _shutdown(self):
    """Ends every process and removes every segment; safe to call twice."""
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
    if self.metrics_file is not None and not self.metrics_file.closed:
      self.metrics_file.close()

  def _write_summary(self, interrupted: bool):
    config = self.config
    n = config.num_workers
    done = self.worker_done
    evaluation = self.final_eval or self.last_eval or {}
    restored = self.restored or {}
    if self.server_done:
      applied = self.server_done["num_commits"]
      rejected = self.server_done["rejected_commits"]
      acknowledged = sum(self.server_done["acknowledged"])
    else:
      applied = restored.get("clock", 0) + len(self.commit_times)
      rejected = restored.get("rejected_commits", 0) + self.rejected
      acknowledged = None
    samples = len(self.commit_times) * config.communication_window * (
        config.batch_size)
    started = min(self.ready.values()) if self.ready else None
    ended = self.commit_times[-1] if self.commit_times else None
    training_seconds = (ended - started) if started and ended else None
    stats = [done.get(i, {}).get("stats", {}) for i in range(n)]
    peak = [s.get("peak_rss_mb") for s in stats]
    summary = {
        "strategy": config.strategy,
        "num_workers": n,
        "communication_window": config.communication_window,
        "batch_size": config.batch_size,
        "dataset": config.dataset,
        "platform": getattr(self, "platform", None),
        "final_test_accuracy": evaluation.get("accuracy"),
        "final_test_loss": evaluation.get("loss"),
        "final_clock": evaluation.get("clock"),
        "wall_seconds": time.time() - self.t0,
        "num_commits": applied,
        "commits_acknowledged": acknowledged,
        "worker_commits": [done.get(i, {}).get("num_commits") for i in range(n)],
        "mean_staleness": (float(np.mean(self.staleness))
                           if self.staleness else None),
        "max_staleness": int(np.max(self.staleness)) if self.staleness else None,
        "samples_per_second": (samples / training_seconds
                               if training_seconds else None),
        "rejected_commits": rejected,
        "startup_seconds_first_commit": (self.commit_times[0] - self.t0
                                         if self.commit_times else None),
        "startup_seconds_all_workers": (max(self.ready.values()) - self.t0
                                        if len(self.ready) == n else None),
        "startup": self._startup(),
        "worker_peak_rss_mb": peak,
        "worker_uss_mb": [s.get("uss_mb") for s in stats],
        "num_slots": getattr(self, "num_slots_used", None),
        "worker_restarts": self.restarts,
        "last_checkpoint": self.last_checkpoint,
        "interrupted": interrupted,
        "resumed_from_commit": restored.get("clock"),
    }
    _write_json(self.workdir / "summary.json", summary)
    return summary


def _cause(exitcode) -> str:
  if exitcode is not None and exitcode < 0:
    return f"killed by signal {-exitcode}"
  return f"exited with code {exitcode}"


def _write_json(path, obj):
  tmp = pathlib.Path(str(path) + ".tmp")
  with open(tmp, "w") as f:
    json.dump(obj, f, indent=2)
    f.write("\n")
  os.replace(tmp, path)
