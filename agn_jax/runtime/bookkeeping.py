"""The run's books, written once for every backend: workdir, metrics.jsonl, progress, summary.json.

A backend's supervisor starts, watches and stops its parts and hands every
event (`agn_jax.runtime.events`) to `RunBook.handle`; the books turn them
into rows with the run's time bases, keep the counts the summary needs,
apply the restart budget and decide whether the run's outcome is a result.

Time bases of a row:
  * `time`: seconds since training began, i.e. since the start barrier
    (every worker compiled and ready). Start-up and compilation are not in
    it; events before the barrier have negative times. A resumed run
    continues from the time of the checkpoint's last row.
  * `wall_time`: seconds since `train()` was called in this session.
  * `sim_time`: simulated seconds (simulated backend only).
"""

import json
import math
import pathlib
import time
from typing import Callable, Dict, List, Optional

import numpy as np

from agn_jax import metric_writers, metrics
from agn_jax.config import TrainConfig
from agn_jax.errors import RunError, resume_error
from agn_jax.runtime import events as ev

Progress = Callable[[Dict[str, object]], None]

# A run fails when more of its commits were rejected (non-finite) than applied.
MAX_REJECTED_FRACTION = 0.5


def outcome_error(summary: Dict[str, object]) -> Optional[str]:
  """Why a run that ended is no result (one line), or None: the one rule of "completed".

  Every backend's books apply it to the run's summary. A run fails when:
  no commit was applied (all rejected as non-finite: diverged; or none was
  made at all); more of its commits were rejected than applied; its final
  test loss or any of its task's final test metrics is not finite
  (`agn_jax.metrics.non_finite_final`); or its simulated clock is not
  finite (a speed model whose times overflow).

  Example:
    >>> ok = dict(num_commits=8, rejected_commits=4, final_test_loss=0.3)
    >>> outcome_error(ok) is None
    True
    >>> outcome_error(dict(ok, final_test_loss=float("nan")))
    "the final center's test loss is nan: the center diverged (lower --learning_rate or --server_learning_rate?)"
    >>> outcome_error(dict(num_commits=0, rejected_commits=0))
    'no commit was made: the run ended before any worker finished a window (--max_seconds too short?)'
  """
  applied, rejected = summary["num_commits"], summary["rejected_commits"]
  if not applied and not rejected:
    return ("no commit was made: the run ended before any worker finished a "
            "window (--max_seconds too short?)")
  if not applied:
    return (f"no commit was applied: all {rejected} commits were rejected as "
            f"non-finite (diverged; lower --learning_rate?)")
  if rejected > MAX_REJECTED_FRACTION * (applied + rejected):
    return (f"{rejected} of {applied + rejected} commits were rejected as "
            f"non-finite (diverged; lower --learning_rate?)")
  final = metrics.non_finite_final(summary)
  if final:
    return final
  seconds = summary.get("simulated_seconds")
  if seconds is not None and not metrics.is_finite_number(seconds):
    return (f"the simulated clock ended at {seconds} seconds: the "
            "--speed_model's times are not finite")
  return None


def read_json(path: pathlib.Path) -> Optional[dict]:
  """A JSON object from `path`, or None if it is missing or not one."""
  try:
    with open(path) as f:
      value = json.load(f)
  except (OSError, ValueError):
    return None
  return value if isinstance(value, dict) else None


def cannot_write(path, error: OSError) -> RunError:
  """The one-line failure of a write to the run's books: the path and the errno."""
  return RunError(f"cannot write {path}: [Errno {error.errno}] "
                  f"{error.strerror or type(error).__name__}")


def write_json(path, obj):
  """Writes `obj` as JSON atomically (a temporary file, then a rename), following no symlink.

  Raises:
    RunError: the file cannot be written (`cannot_write`: a full disk, ...).
  """
  from agn_jax import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  path = pathlib.Path(path)
  try:
    workdir_lib.write_atomic(str(path.parent), path.name,
                             ev.strict_json(obj, indent=2) + "\n")
  except OSError as e:
    raise cannot_write(path, e) from None


def completed_summary(workdir) -> Optional[dict]:
  """The summary.json of a run that did its whole share, else None."""
  summary = read_json(pathlib.Path(workdir) / "summary.json")
  if summary and outcome(summary) == "completed":
    return summary
  return None


OUTCOMES = ("completed", "interrupted", "failed")


def outcome(summary: dict) -> Optional[str]:
  """How the run of a summary.json ended: its `outcome`, one of `OUTCOMES`, or None if it says none.

  Example:
    >>> outcome({"outcome": "failed", "completed": False}), outcome({})
    ('failed', None)
  """
  value = summary.get("outcome")
  return value if value in OUTCOMES else None


class RunBook:
  """One run's books.

  Args:
    config: the resolved config of the run.
    progress: called with every commit and eval row.
    backend: the backend's name, recorded in the summary.
  """

  def __init__(self, config: TrainConfig, progress: Optional[Progress],
               backend: str):
    from agn_jax import tasks  # pylint: disable=g-import-not-at-top
    self.config = config
    # What the run is trained for: the metrics its rows and summary name.
    self.task = tasks.get_task(config.task)
    self.progress = progress
    self.backend = backend
    self.workdir = pathlib.Path(config.workdir)
    self.t0 = time.time()
    self.metrics_file = None
    # Where every row also goes (`--metric_writers`), opened with the books.
    self.writers: List[metric_writers.MetricWriter] = []
    self.expected_commits: Optional[int] = None
    # Where the commits are not known before (Dynamic Local Updates on real
    # workers): the samples of every worker's share.
    self.expected_samples: Optional[int] = None
    self.extra_summary: Dict[str, object] = {}
    self.timeline: Dict[str, float] = {}
    # When training began (the start barrier), and the `time` it began at.
    self.started: Optional[float] = None
    self.time_offset = 0.0
    self._pending: List = []  # Rows before the barrier, written at it.
    # What the events tell.
    self.staleness: List[int] = []  # Over the whole run (a resume included).
    self.kept_clock: Optional[int] = None  # A resume's last clock kept.
    self.kept_since_eval: List[int] = []  # Its staleness after its last eval.
    self.commit_times: List[float] = []  # This session's.
    self.commit_steps: List[int] = []  # Their windows' local steps.
    # Dynamic Local Updates: each worker's windows by their local steps,
    # over the whole run (a resume's kept rows included).
    self.local_updates: List[Dict[int, int]] = [
        {} for _ in range(config.num_workers)]
    self.first_sim_time = None
    self.last_sim_time = None
    # `--diagnostics`: each instrument's values over the whole run (a
    # resume's kept rows included; NaN where a cosine has no value).
    self.instruments: Dict[str, List[float]] = {}
    self.ready: Dict[int, float] = {}
    self.worker_timelines: Dict[int, dict] = {}
    self.worker_done: Dict[int, ev.WorkerDone] = {}
    self.worker_errors: Dict[int, str] = {}
    # The whole run's (a resume's kept rows included); `_rejected_kept` of
    # them were read back from the kept rows.
    self.rejected_per_worker = [0] * config.num_workers
    self._rejected_kept = 0
    self.restarts = 0
    self.restored: Optional[ev.Restored] = None
    self.server_done: Optional[ev.ServerDone] = None
    self.last_eval = None
    self.final_eval = None
    self.last_checkpoint = None
    self.previous_summary = None
    # Whether this session's summary.json says how it ended.
    self.summary_written = False
    self._handlers = {
        ev.WorkerReady: self._on_worker_ready,
        ev.ServerReady: lambda e: None,
        ev.Restored: self._on_restored,
        ev.ResumeFailed: self._on_resume_failed,
        ev.Committed: self._on_commit,
        ev.Rejected: self._on_rejected,
        ev.Evaluated: self._on_eval,
        ev.CheckpointSaved: self._on_checkpoint,
        ev.WorkerDone: self._on_worker_done,
        ev.ServerDone: self._on_server_done,
        ev.Failed: self._on_failed,
    }

  # The workdir.

  @property
  def owns_files(self) -> bool:
    return self.metrics_file is not None

  def open(self, metrics_offset: Optional[int] = None):
    """Writes config.json and opens metrics.jsonl: from here on the workdir is this run's.

    On resume, metrics.jsonl is cut back to `metrics_offset` (the rows of
    the checkpoint) and appended to, and the whole run's statistics so far
    are read back from it.
    """
    try:
      self._open(metrics_offset)
    except OSError as e:
      raise cannot_write(getattr(e, "filename", None) or self.workdir,
                         e) from None

  def _open(self, metrics_offset):
    from agn_jax import workdir as workdir_lib
    self.workdir.mkdir(parents=True, exist_ok=True)
    workdir_lib.check_no_symlinks(self.workdir)
    path = self.workdir / "metrics.jsonl"
    if self.config.resume:
      self.previous_summary = read_json(self.workdir / "summary.json")
      if metrics_offset is not None and path.exists():
        if not 0 <= metrics_offset <= path.stat().st_size:
          raise resume_error(self.workdir, f"the checkpoint's metrics offset "
                             f"{metrics_offset} is outside metrics.jsonl")
        with workdir_lib.safe_open(self.workdir, "metrics.jsonl", "r+b") as f:
          f.truncate(metrics_offset)
      self._read_back(path)
      self.metrics_file = workdir_lib.safe_open(self.workdir, "metrics.jsonl",
                                                "a")
      write_json(self.workdir / "config.json", self.config.to_record())
    else:
      # config.json first: a run interrupted the moment metrics.jsonl
      # appears must leave the config a --resume starts afresh from.
      write_json(self.workdir / "config.json", self.config.to_record())
      self.metrics_file = workdir_lib.safe_open(self.workdir, "metrics.jsonl",
                                                "w")
    purge_step = None
    if self.config.resume:
      purge_step = 0 if self.kept_clock is None else self.kept_clock + 1
    self.writers = metric_writers.open_writers(
        self.config.metric_writers, str(self.workdir), self.config.to_record(),
        purge_step, self.kept_since_eval, self.task.metric_names())

  def _read_back(self, path):
    """The staleness, time and rejections of the rows a resume keeps."""
    if not path.exists():
      return

    def worker_of(row) -> Optional[int]:
      """The row's worker, where it is one of this run's."""
      w = row.get("worker")
      ok = isinstance(w, int) and 0 <= w < len(self.local_updates)
      return w if ok else None

    with open(path) as f:
      for line in f:
        try:
          row = json.loads(line)
        except ValueError:
          continue
        t = row.get("time")
        if isinstance(t, (int, float)):
          self.time_offset = max(self.time_offset, float(t))
        if isinstance(row.get("clock"), int):
          self.kept_clock = max(self.kept_clock or 0, row["clock"])
        if row.get("event") == "commit" and isinstance(
            row.get("sim_time"), (int, float)):
          if self.first_sim_time is None:
            self.first_sim_time = float(row["sim_time"])
          self.last_sim_time = float(row["sim_time"])
        w = worker_of(row)
        if row.get("event") == "commit":
          self._keep_instruments(row)
        if row.get("event") == "commit" and isinstance(
            row.get("staleness"), int):
          self.staleness.append(row["staleness"])
          self.kept_since_eval.append(row["staleness"])
        if (row.get("event") == "commit" and
            isinstance(row.get("local_updates"), int) and w is not None):
          self._count_local_updates(w, row["local_updates"])
        elif row.get("event") == "eval":
          self.kept_since_eval = []
        elif row.get("event") == "rejected" and w is not None:
          self.rejected_per_worker[w] += 1
          self._rejected_kept += 1

  def save_center(self, center: np.ndarray) -> None:
    """Writes the final center as `center.npy` (flat float32; load with `allow_pickle=False`)."""
    from agn_jax import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
    try:
      with workdir_lib.safe_open(self.workdir, "center.npy", "wb") as f:
        np.save(f, center, allow_pickle=False)
    except OSError as e:
      raise cannot_write(self.workdir / "center.npy", e) from None

  def _flush(self):
    try:
      self.metrics_file.flush()
    except OSError as e:
      raise cannot_write(self.workdir / "metrics.jsonl", e) from None

  def metrics_position(self) -> int:
    """How far metrics.jsonl goes, with every event handled so far in it."""
    self._flush()
    return self.metrics_file.tell()

  def close(self):
    """Closes metrics.jsonl and the writers; never raises (the summary flushed them, or the run failed already)."""
    if self.metrics_file is not None and not self.metrics_file.closed:
      try:
        self.metrics_file.close()
      except OSError:
        pass  # Closed anyway; its failure to flush was raised before.
    for writer in self.writers:
      writer.close()

  # Time bases.

  def start_training(self, when: Optional[float] = None):
    """The start barrier: `time` counts from here. Writes the rows held back until now."""
    if self.started is not None:
      return
    self.started = time.time() if when is None else when
    self.timeline["training_started"] = self.started
    for event, extra in self._pending:
      self._record(event, **extra)
    self._pending = []

  def _relative(self, t: float) -> Optional[float]:
    return round(t - self.started + self.time_offset, 6)

  def _record(self, event, **extra):
    if self.metrics_file is None:
      return
    if self.started is None:
      self._pending.append((event, extra))
      return
    when = getattr(event, "time", None)
    if when is None:
      when = extra.pop("at", time.time())
      extra["time"] = self._relative(when)
    extra.pop("at", None)
    record = ev.row(event, self._relative,
                    wall_time=round(when - self.t0, 6), **extra)
    try:
      self.metrics_file.write(ev.strict_json(record) + "\n")
    except OSError as e:
      raise cannot_write(self.workdir / "metrics.jsonl", e) from None
    for writer in self.writers:
      try:
        writer.write(record)
      except OSError as e:
        raise cannot_write(writer.path, e) from None
    if event.kind in ("commit", "eval"):
      self._flush()
      if self.progress is not None:
        self.progress(record)

  # Events.

  def handle(self, event) -> None:
    """Books one event; raises `RunError` / `CheckpointError` for a failure."""
    self._handlers[type(event)](event)

  def _on_worker_ready(self, e: ev.WorkerReady):
    self.ready.setdefault(e.worker, e.time)
    self.worker_timelines.setdefault(e.worker, e.timeline or {})
    self._record(e)

  def _on_restored(self, e: ev.Restored):
    self.restored = e

  def _on_resume_failed(self, e: ev.ResumeFailed):
    raise resume_error(self.workdir, e.message)

  def _count_local_updates(self, worker: int, steps: int) -> None:
    counts = self.local_updates[worker]
    counts[steps] = counts.get(steps, 0) + 1

  def _keep_instruments(self, fields) -> None:
    """Keeps a commit's instruments (`--diagnostics`), a null as NaN."""
    for name in ev.INSTRUMENTS:
      if name in fields:
        value = fields[name]
        self.instruments.setdefault(name, []).append(
            float("nan") if value is None else float(value))

  def _instruments_summary(self) -> Dict[str, object]:
    """summary.json's aggregates of the instruments; {} without them.

    `implicit_momentum` is μ̂ at the last commit (since the run's start, or
    since its last resume: the instruments are not checkpointed) beside the
    theory's `theory_momentum` `1 − 1/n`; `mean_<instrument>` the nanmean
    of each per-commit instrument (None where no commit had a value).
    """
    if not self.instruments:
      return {}
    n = self.config.num_workers
    out = {"theory_momentum": 1.0 - 1.0 / n}
    final = self.instruments.get("implicit_momentum")
    out["implicit_momentum"] = final[-1] if final else None
    for name in ev.INSTRUMENTS:
      if name == "implicit_momentum":
        continue
      values = np.asarray(self.instruments.get(name, []), np.float64)
      finite = values[np.isfinite(values)]
      out[f"mean_{name}"] = float(finite.mean()) if finite.size else None
    out["instrumented_commits"] = len(
        self.instruments.get("commit_norm", []))
    return out

  def _on_commit(self, e: ev.Committed):
    self._keep_instruments(e.instruments or {})
    self.staleness.append(e.staleness)
    self.commit_times.append(e.time)
    steps = e.meta.local_updates
    self.commit_steps.append(steps or self.config.communication_window)
    if steps:
      self._count_local_updates(e.meta.worker, steps)
    if e.sim_time is not None:
      if self.first_sim_time is None:
        self.first_sim_time = e.sim_time
      self.last_sim_time = e.sim_time
    self._record(e, expected_commits=self.expected_commits)

  def _on_rejected(self, e: ev.Rejected):
    self.rejected_per_worker[e.worker] += 1
    self._record(e)

  def _on_eval(self, e: ev.Evaluated):
    self.last_eval = e
    if e.final:
      self.final_eval = e
    self._record(e)

  def _on_checkpoint(self, e: ev.CheckpointSaved):
    self.last_checkpoint = e.clock
    self._record(e)

  def _on_worker_done(self, e: ev.WorkerDone):
    self.worker_done[e.worker] = e
    self._record(e, at=time.time())

  def _on_server_done(self, e: ev.ServerDone):
    self.server_done = e
    self._record(e)

  def _on_failed(self, e: ev.Failed):
    if self.owns_files:
      try:
        self.log_error(f"{e.role}: {e.traceback}")
      except RunError:
        pass  # The failure itself is what the run reports.
    if e.role.startswith("worker") and not e.fatal:
      # Its exit decides: restart, or fail the run with this message.
      self.worker_errors[int(e.role.split()[1])] = e.message
      return
    raise RunError(f"{e.role} failed: {e.message}")

  def worker_failed(self, worker: int, cause: str, commits_done: int,
                    incarnation: int) -> None:
    """A worker died: books its restart, or raises `RunError` past the budget."""
    limit = self.config.max_worker_restarts
    if self.restarts >= limit:
      raise RunError(f"worker {worker} {cause}; no restarts left "
                     f"(--max_worker_restarts={limit})")
    self.restarts += 1
    self._record(ev.WorkerRestarted(time.time(), worker, cause, incarnation,
                                    commits_done))

  def take_worker_error(self, worker: int) -> Optional[str]:
    return self.worker_errors.pop(worker, None)

  def log_error(self, text: str) -> None:
    """Appends `text` to error.log; raises `RunError` if it cannot be written."""
    from agn_jax import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
    try:
      with workdir_lib.safe_open(self.workdir, "error.log", "a") as f:
        f.write(text.rstrip("\n") + "\n")
    except OSError as e:
      raise cannot_write(self.workdir / "error.log", e) from None

  # The end.

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

  def wall_seconds(self) -> float:
    """The run's wall seconds so far: this session's, and a resume's earlier sittings' as its checkpoint books them (`checkpoint.Meta.wall_seconds`: up to the checkpoint), or, from a checkpoint that records none, as their `summary.json` did."""
    earlier = self.restored.wall_seconds if self.restored else None
    if earlier is None:
      earlier = (self.previous_summary or {}).get("wall_seconds")
    return time.time() - self.t0 + (
        earlier if isinstance(earlier, (int, float)) else 0.0)

  def _traffic(self, stats) -> Dict[str, Optional[int]]:
    """`bytes_committed` and `bytes_pulled`: payload bytes as sent, over every worker that reported them, a resume's earlier sessions included.

    A commit counts its payload as the transport carried it (compressed with
    `--commit_compression`), a pull the float32 center; a simulated run
    counts the messages its time model charges. A resume books the earlier
    sittings' bytes as its checkpoint records them (`checkpoint.Meta.traffic`:
    those of the commits it keeps, however the last sitting ended), or,
    from a checkpoint that records none, as their `summary.json` did. A
    worker that died before reporting is missing; None where no worker
    reported.
    """
    restored = self.restored.traffic if self.restored else None
    previous = self.previous_summary or {}
    out = {}
    for key in ("bytes_committed", "bytes_pulled"):
      values = [s[key] for s in stats if s.get(key) is not None]
      if restored is not None:
        values.extend(restored[key])
      elif isinstance(previous.get(key), int):
        values.append(previous[key])
      out[key] = int(sum(values)) if values else None
    return out

  def summary(self, interrupted: bool) -> Dict[str, object]:
    """The run's summary.json (whole-run statistics, a resume included)."""
    config = self.config
    n = config.num_workers
    done = self.worker_done
    evaluation = self.final_eval or self.last_eval
    restored = self.restored
    if self.server_done:
      applied = self.server_done.num_commits
      rejected = self.server_done.rejected_commits
      acknowledged = sum(self.server_done.acknowledged)
    else:
      applied = (restored.clock if restored else 0) + len(self.commit_times)
      rejected = ((restored.rejected_commits if restored else 0) +
                  sum(self.rejected_per_worker) - self._rejected_kept)
      acknowledged = None
    samples = sum(self.commit_steps) * config.batch_size
    ended = self.commit_times[-1] if self.commit_times else None
    training_seconds = (ended - self.started
                        if self.started and ended else None)
    stats = [done[i].stats if i in done else {} for i in range(n)]
    wall = self.wall_seconds()
    trained = sum(e.num_samples for e in done.values())
    completed = (not interrupted and self.server_done is not None and
                 (self.expected_commits is not None or
                  self.expected_samples is not None) and
                 (self.expected_commits is None or
                  applied + rejected >= self.expected_commits) and
                 (self.expected_samples is None or
                  trained >= self.expected_samples))
    summary = {
        "strategy": config.strategy,
        "backend": self.backend,
        "num_workers": n,
        "communication_window": config.communication_window,
        "batch_size": config.batch_size,
        "epochs": config.epochs,
        "dataset": config.dataset,
        # The task's named metrics and their directions, and the one
        # temporal efficiency reads by default (`agn_jax.tasks.Task`).
        "task": config.task,
        "metrics": self.task.goals(),
        "efficiency_metric": self.task.efficiency_metric,
        "config": config.to_record(),
        # completed: its whole share; interrupted: Ctrl-C, SIGTERM or
        # --max_seconds ended it first; `write_summary` and `write_failure`
        # say when it failed.
        "outcome": "completed" if completed else "interrupted",
        "completed": completed,
        "interrupted": interrupted,
        **{f"final_test_{name}": (evaluation.metrics.get(name)
                                  if evaluation else None)
           for name in self.task.metric_names()},
        "final_test_loss": evaluation.loss if evaluation else None,
        "final_clock": evaluation.clock if evaluation else None,
        "wall_seconds": wall,
        "training_seconds": training_seconds,
        "time_base": "seconds since the start barrier (all workers ready)",
        "num_commits": applied,
        "expected_commits": self.expected_commits,
        "commits_acknowledged": acknowledged,
        "worker_commits": [done[i].num_commits if i in done else None
                           for i in range(n)],
        # Each worker's training samples over the whole run (its windows'
        # local steps times the batch size), as `data_assignment` gave them.
        "data_assignment": config.data_assignment,
        "samples_per_worker": [done[i].num_samples if i in done else None
                               for i in range(n)],
        "rejected_commits": rejected,
        "rejected_commits_per_worker": self.rejected_per_worker,
        "mean_staleness": (float(np.mean(self.staleness))
                           if self.staleness else None),
        "max_staleness": int(np.max(self.staleness)) if self.staleness else None,
        "samples_per_second": (samples / training_seconds
                               if training_seconds else None),
        "startup_seconds": (round(self.started - self.t0, 3)
                            if self.started else None),
        "startup_seconds_first_commit": (self.commit_times[0] - self.t0
                                         if self.commit_times else None),
        "startup_seconds_all_workers": (max(self.ready.values()) - self.t0
                                        if len(self.ready) == n else None),
        "startup": self._startup(),
        "worker_peak_rss_mb": [s.get("peak_rss_mb") for s in stats],
        "worker_uss_mb": [s.get("uss_mb") for s in stats],
        **self._traffic(stats),
        "worker_restarts": self.restarts,
        "last_checkpoint": self.last_checkpoint,
        "resumed_from_commit": restored.clock if restored else None,
    }
    if self.last_sim_time is not None:
      summary["simulated_seconds"] = self.last_sim_time
    if config.dynamic_local_updates:
      # Each worker's λ_k: the local steps of most of its applied commits
      # (None before its first), and all of them counted by steps.
      summary["local_updates"] = [
          max(counts, key=lambda steps: (counts[steps], steps))
          if counts else None for counts in self.local_updates]
      summary["local_updates_histogram"] = [
          {str(steps): count for steps, count in sorted(counts.items())}
          for counts in self.local_updates]
    summary.update(self._instruments_summary())
    summary.update(self.extra_summary)
    return summary

  def write_summary(self, interrupted: bool) -> Dict[str, object]:
    """Writes summary.json of a run that ended or was interrupted; raises `RunError` when a finished run is no result.

    Raises:
      RunError: the run's outcome is no result (its summary says `failed`
        and why), or metrics.jsonl or summary.json cannot be written.
    """
    if self.metrics_file is not None and not self.metrics_file.closed:
      self._flush()  # Rows lost to a full disk must not pass unnoticed.
    for writer in self.writers:
      try:
        writer.finish(self.staleness)
      except OSError as e:
        raise cannot_write(writer.path, e) from None
    summary = self.summary(interrupted)
    failure = None if interrupted else outcome_error(summary)
    if failure:
      summary.update(completed=False, outcome="failed", failure=failure)
    write_json(self.workdir / "summary.json", summary)
    self.summary_written = True
    if failure:
      raise RunError(failure)
    return summary

  def write_failure(self, reason: str) -> None:
    """After a failure: summary.json says `failed`, `reason` and the counts so far.

    Only once the run owns its workdir, and only if this session wrote no
    summary yet. When summary.json cannot be written (a full disk),
    error.log says so if it can. Never raises.
    """
    if not self.owns_files or self.summary_written:
      return
    summary = self.summary(interrupted=False)
    summary.update(completed=False, outcome="failed", failure=reason)
    try:
      write_json(self.workdir / "summary.json", summary)
      self.summary_written = True
    except RunError as e:
      try:
        self.log_error(f"run failed: {reason}; no summary.json: {e}")
      except RunError:
        pass  # Nothing can be written: the caller's one line says why.
