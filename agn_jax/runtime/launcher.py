"""`train()`: spawns the server, the workers and the evaluator, supervises them, shuts down, writes results.

The launcher itself never starts a JAX backend (that would claim accelerator
memory the workers need); it only traces shapes. Every shared-memory segment
is created and unlinked here, so nothing outlives the run.
"""

import contextlib
import json
import os
import pathlib
import signal
import threading
import time
import traceback
from typing import Callable, Dict, List, Optional

import numpy as np

from agn_jax.config import TrainConfig
from agn_jax.runtime import _child
from agn_jax.runtime import placement as placement_lib
from agn_jax.runtime import shm
from agn_jax.runtime.evaluator import evaluator_main
from agn_jax.runtime.server import server_main
from agn_jax.runtime.transport import SharedMemoryTransport
from agn_jax.runtime.worker import windows_per_worker, worker_main

Progress = Callable[[Dict[str, object]], None]

MAX_SLOTS = 8  # Enough to keep the server busy; bounded so workers feel backpressure.
_GRACE_SECONDS = 3.0
_SPAWN_LOCK = threading.Lock()


class RunError(RuntimeError):
  """A process of the run failed; the message is one line naming it and the cause."""


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


def _raise_interrupt(signum, frame):
  del frame
  raise KeyboardInterrupt(f"received signal {signum}")


def _check_config(config: TrainConfig) -> None:
  from agn_jax import config as config_lib
  if config.strategy not in config_lib.STRATEGIES:
    raise ValueError(f"strategy must be one of {config_lib.STRATEGIES}, "
                     f"got {config.strategy!r}")
  for name in ("num_workers", "communication_window", "batch_size"):
    value = getattr(config, name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
      raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
  if not config.epochs > 0:
    raise ValueError(f"epochs must be > 0, got {config.epochs!r}")
  if config.platform not in (None,) + placement_lib.PLATFORMS:
    raise ValueError(f"platform must be one of {placement_lib.PLATFORMS} or "
                     f"None, got {config.platform!r}")
  if config.max_seconds is not None and not config.max_seconds > 0:
    raise ValueError(f"max_seconds must be > 0 or None, got "
                     f"{config.max_seconds!r}")
  if config.resume:
    raise ValueError("resume is not supported by this runtime yet")


def train(config: TrainConfig,
          progress: Optional[Progress] = None,
          *,
          num_slots: Optional[int] = None,
          cache_dir: Optional[str] = None,
          dataset=None) -> Dict[str, object]:
  """Trains with one server process and `config.num_workers` worker processes.

  Writes `config.json`, `pids.json`, `metrics.jsonl` and `summary.json` to
  `config.workdir`. Every process ends and every shared-memory segment is
  unlinked however the run ends: normally, by an exception in any process
  (raised here as `RunError`), or by Ctrl-C / SIGTERM (re-raised as
  `KeyboardInterrupt` after `summary.json` is written with `interrupted`).

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
    self.processes: Dict[str, object] = {}  # role -> Process
    self.metrics_file = None
    # What the events tell.
    self.staleness: List[int] = []
    self.commit_times: List[float] = []
    self.ready: Dict[int, float] = {}
    self.worker_timelines: Dict[int, dict] = {}
    self.timeline: Dict[str, float] = {}
    self.worker_done: Dict[int, dict] = {}
    self.server_done = None
    self.last_eval = None
    self.final_eval = None
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
      self._shutdown()
      self._write_summary(interrupted=True)
      raise
    finally:
      self._shutdown()

  def _prepare(self):
    from agn_jax import build, data
    config = self.config
    self.workdir.mkdir(parents=True, exist_ok=True)
    _write_json(self.workdir / "config.json", config.to_dict())
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
    self.events = self.mp.Queue()
    self.stop = self.mp.Event()
    self.final = self.mp.Event()
    self.compiled = self.mp.Event()
    if self.cache_dir:
      os.makedirs(os.path.expanduser(self.cache_dir), exist_ok=True)
    self.ctx = _child.RunContext(
        config=config.to_dict(), data=self.data, transport=self.transport,
        events=self.events, stop=self.stop, layout=layout.metadata(),
        num_classes=dataset.num_classes,
        input_shape=tuple(dataset.input_shape), cache_dir=self.cache_dir,
        parent_pid=os.getpid())
    self.metrics_file = open(self.workdir / "metrics.jsonl", "w")

  def _start(self, role, placement, target, *args):
    process = self.mp.Process(target=target, args=(self.ctx, *args),
                              name=f"agn-{role}", daemon=True)
    with _spawn_environment(placement):
      process.start()
    self.processes[role] = process

  def _spawn(self):
    self._start("server", self.host_placement, server_main,
                self.host_placement)
    self._start("evaluator", self.host_placement, evaluator_main,
                self.host_placement, self.final)
    for i, placement in enumerate(self.worker_placements):
      self._start(f"worker {i}", placement, worker_main, i, placement,
                  self.compiled)
    _write_json(self.workdir / "pids.json", {
        "server": self.processes["server"].pid,
        "evaluator": self.processes["evaluator"].pid,
        "workers": [
            self.processes[f"worker {i}"].pid
            for i in range(self.config.num_workers)
        ],
        # For leak checks: these names must be gone from /dev/shm at the end.
        "shm_segments": [*self.transport.names, self.data.name],
    })

  def _supervise(self):
    """Waits on events and process sentinels until the final evaluation.

    Restarts (a dead worker's sentinel → free its slots, respawn it with the
    rest of its share) and periodic checkpoints slot into this loop.
    """
    from multiprocess import connection
    config = self.config
    live = {p.sentinel: role for role, p in self.processes.items()}
    reader = self.events._reader  # pylint: disable=protected-access
    while self.final_eval is None:
      timeout = 0.5
      if config.max_seconds and not self.stop.is_set():
        remaining = config.max_seconds - (time.time() - self.t0)
        if remaining <= 0:
          self.stop.set()  # Workers finish their window and report done.
        timeout = max(0.0, min(timeout, remaining))
      ready = connection.wait([reader] + list(live), timeout)
      self._drain_events()
      for sentinel in ready:
        if sentinel in live:
          role = live.pop(sentinel)
          self._on_exit(role)
      if self.server_done is not None and not self.final.is_set():
        self.final.set()  # The center is final: evaluate it once more.

  def _on_exit(self, role):
    process = self.processes[role]
    process.join()
    self._drain_events()  # Its last words (an error report) come first.
    expected = (role.startswith("worker") or
                (role == "server" and self.server_done is not None) or
                (role == "evaluator" and self.final_eval is not None))
    if process.exitcode == 0 and expected:
      return
    code = process.exitcode
    cause = (f"killed by signal {-code}" if code is not None and code < 0 else
             f"exited with code {code}")
    raise RunError(f"{role} {cause}")

  def _drain_events(self):
    import queue
    while True:
      try:
        kind, event = self.events.get_nowait()
      except queue.Empty:
        return
      self._handle(kind, event)

  def _handle(self, kind, event):
    rel = lambda t: round(t - self.t0, 6)
    if kind == "error":
      with open(self.workdir / "error.log", "a") as f:
        f.write(f"{event['role']}: {event['traceback']}\n")
      raise RunError(f"{event['role']} failed: {event['message']}")
    if kind == "ready":
      if "worker" not in event:
        return
      self.ready[event["worker"]] = event["time"]
      self.worker_timelines[event["worker"]] = event["timeline"]
      record = {"event": "worker_ready", "time": rel(event["time"]),
                "worker": event["worker"]}
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
    self.metrics_file.write(json.dumps(record) + "\n")
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
    if 0 in self.worker_timelines:
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
    if getattr(self, "stop", None) is not None:
      self.stop.set()
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
    if self.events is not None:
      self.events.cancel_join_thread()
      self.events.close()
    if self.transport is not None:
      self.transport.close()
      self.transport.unlink()
    if self.data is not None:
      self.data.close()
      self.data.unlink()
    if self.metrics_file is not None and not self.metrics_file.closed:
      self.metrics_file.close()

  def _write_summary(self, interrupted: bool):
    config = self.config
    n = config.num_workers
    done = self.worker_done
    evaluation = self.final_eval or self.last_eval or {}
    applied = self.server_done["num_commits"] if self.server_done else len(
        self.commit_times)
    samples = applied * config.communication_window * config.batch_size
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
        "worker_commits": [done.get(i, {}).get("num_commits") for i in range(n)],
        "mean_staleness": (float(np.mean(self.staleness))
                           if self.staleness else None),
        "max_staleness": int(np.max(self.staleness)) if self.staleness else None,
        "samples_per_second": (samples / training_seconds
                               if training_seconds else None),
        "rejected_commits": self.rejected,
        "startup_seconds_first_commit": (self.commit_times[0] - self.t0
                                         if self.commit_times else None),
        "startup_seconds_all_workers": (max(self.ready.values()) - self.t0
                                        if len(self.ready) == n else None),
        "startup": self._startup(),
        "worker_peak_rss_mb": peak,
        "worker_uss_mb": [s.get("uss_mb") for s in stats],
        "num_slots": self.transport.num_slots if self.transport else None,
        "worker_restarts": 0,
        "interrupted": interrupted,
        "resumed_from_commit": None,
    }
    _write_json(self.workdir / "summary.json", summary)
    return summary


def _write_json(path, obj):
  tmp = pathlib.Path(str(path) + ".tmp")
  with open(tmp, "w") as f:
    json.dump(obj, f, indent=2)
    f.write("\n")
  os.replace(tmp, path)
