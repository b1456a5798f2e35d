"""A finished run read back from its workdir, and its curves on a chosen time base.

The one home of the curve data: `experiments.compare` computes temporal
efficiency from it and `experiments.plots` draws it; neither imports the other.

Time bases (the fields of a metrics.jsonl row):
  training: `time`, seconds since the start barrier (all workers ready,
    training begins); events before it have negative times.
  wall: `wall_time`, seconds since `train()` began (start-up included).
  simulated: `sim_time`, simulated seconds (simulated backends only).
A run written before the start barrier existed has no `wall_time`; its `time`
counted from `train()`'s start, so its one time base is `wall`.
"""

import json
import os
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from agn_jax import metrics
from agn_jax.runtime import events as ev

TRAIN_WINDOW_SECONDS = 5.0
TIME_BASES = ("training", "wall", "simulated")
TIME_BASE_DESCRIPTIONS = {
    "training": "seconds since the start barrier, when all workers are "
                "ready",
    "wall": "seconds since train() began, start-up included",
    "simulated": "simulated seconds",
}
_TIME_FIELDS = ("time", "wall_time", "sim_time")
# The rows the curves read, and their numeric fields: those of the events
# the runtime writes them from.
_NUMERIC_FIELDS = {
    ev.Committed.kind: _TIME_FIELDS + tuple(
        f for f in ev.Committed._fields if f not in _TIME_FIELDS),
    ev.Evaluated.kind: _TIME_FIELDS + ("clock", "loss", "accuracy"),
}
_COLUMN = {"training": "time", "wall": "wall_time", "simulated": "sim_time"}


class RunDirError(ValueError):
  """A run directory that is missing or holds no readable metrics."""


class Run(NamedTuple):
  """One run read back from its workdir.

  Attributes:
    path: the workdir.
    name: a short label (the workdir's base name).
    config: config.json as a dict ({} if absent).
    summary: summary.json as a dict ({} if absent).
    commits: commit events as `{field: np.ndarray}` sorted by time; a field
      a row lacks is NaN.
    evals: eval events as `{field: np.ndarray}` sorted by time.
  """
  path: str
  name: str
  config: Dict[str, object]
  summary: Dict[str, object]
  commits: Dict[str, np.ndarray]
  evals: Dict[str, np.ndarray]


def _read_json(path: str) -> Dict[str, object]:
  if not os.path.isfile(path):
    return {}
  try:
    with open(path) as f:
      content = json.load(f)
  except (OSError, ValueError) as e:
    raise RunDirError(f"{path}: not readable JSON ({e})") from None
  return content if isinstance(content, dict) else {}


def _is_number(value) -> bool:
  return value is None or (isinstance(value, (int, float)) and
                           not isinstance(value, bool))


def _columns(events: List[dict],
             fields: Sequence[str]) -> Dict[str, np.ndarray]:
  events = sorted(events, key=lambda e: e["time"])
  return {f: np.array([np.nan if e.get(f) is None else e[f] for e in events],
                      np.float64)
          for f in fields}


def read_events(path: str) -> List[dict]:
  """The events of one metrics.jsonl file.

  A last line cut short (a run killed mid-write) is ignored; any other
  malformed line, and any commit or eval event with a non-numeric field
  (e.g. `"accuracy": "abc"`), is an error naming the file and line.

  Raises:
    RunDirError: if the file is unreadable or malformed.
  """
  try:
    with open(path) as f:
      lines = f.read().splitlines()
  except (OSError, UnicodeDecodeError) as e:
    raise RunDirError(f"{path}: cannot read "
                      f"({getattr(e, 'strerror', None) or e})") from None
  events = []
  for number, line in enumerate(lines, 1):
    if not line.strip():
      continue
    try:
      event = json.loads(line)
    except ValueError as e:
      if number == len(lines):
        break  # Cut short by a kill mid-write.
      raise RunDirError(f"{path}:{number}: malformed event ({e})") from None
    if not isinstance(event, dict) or "event" not in event:
      raise RunDirError(f"{path}:{number}: malformed event (not an event "
                        "object)")
    fields = _NUMERIC_FIELDS.get(event["event"])
    if fields is not None:
      if event.get("time") is None:
        raise RunDirError(f"{path}:{number}: malformed event (no time)")
      for field in fields:
        if not _is_number(event.get(field)):
          raise RunDirError(f"{path}:{number}: field {field!r} is not a "
                            f"number: {event[field]!r}")
      event["time"] = float(event["time"])
    events.append(event)
  return events


def read_run(path: str) -> Run:
  """Reads a run's workdir: metrics.jsonl, config.json and summary.json.

  Raises:
    RunDirError: one line, if `path` is not a run directory.
  """
  if not os.path.isdir(path):
    raise RunDirError(f"{path}: no such run directory")
  metrics_path = os.path.join(path, "metrics.jsonl")
  if not os.path.isfile(metrics_path):
    raise RunDirError(f"{path}: not a run directory (no metrics.jsonl)")
  events = read_events(metrics_path)
  commits = [e for e in events if e.get("event") == ev.Committed.kind]
  evals = [e for e in events if e.get("event") == ev.Evaluated.kind]
  if not commits and not evals:
    raise RunDirError(f"{metrics_path}: holds no commit or eval events")
  return Run(path=path,
             name=os.path.basename(os.path.normpath(path)),
             config=_read_json(os.path.join(path, "config.json")),
             summary=_read_json(os.path.join(path, "summary.json")),
             commits=_columns(commits, _NUMERIC_FIELDS[ev.Committed.kind]),
             evals=_columns(evals, _NUMERIC_FIELDS[ev.Evaluated.kind]))


def _all_finite(run: Run, field: str) -> bool:
  columns = [run.commits[field], run.evals[field]]
  return (sum(len(c) for c in columns) > 0 and
          all(np.all(np.isfinite(c)) for c in columns))


def time_bases(run: Run) -> Tuple[str, ...]:
  """The time bases `run`'s metrics.jsonl has, best first.

  `("training", "wall")`, plus `"simulated"` when every row has `sim_time`;
  just `("wall",)` for a run written before rows had `wall_time`.

  Example:
    >>> import numpy as np
    >>> columns = {f: np.zeros(1) for f in ("time", "wall_time", "sim_time")}
    >>> columns["sim_time"][:] = np.nan
    >>> time_bases(Run("r", "r", {}, {}, columns, columns))
    ('training', 'wall')
  """
  if not (np.any(np.isfinite(run.commits["wall_time"])) or
          np.any(np.isfinite(run.evals["wall_time"]))):
    return ("wall",)
  bases = ("training", "wall")
  if _all_finite(run, "sim_time"):
    bases += ("simulated",)
  return bases


def default_time_base(runs: Sequence[Run]) -> str:
  """`auto`: "simulated" when every run has simulated times, else "training".

  Runs that all predate the start barrier have only "wall".
  """
  if runs and all("simulated" in time_bases(r) for r in runs):
    return "simulated"
  if runs and all(time_bases(r) == ("wall",) for r in runs):
    return "wall"
  return "training"


def effective_time_base(run: Run, time_base: str) -> str:
  """The base `run`'s curves are on when `time_base` is asked for.

  A run that lacks the base falls back to its own: an old run (no
  `wall_time`) is always on "wall". Compare the results across runs: when
  they differ, the runs do not share a time base.

  Raises:
    ValueError: for an unknown base, or "simulated" for a run without
      simulated times.
  """
  if time_base not in TIME_BASES:
    raise ValueError(f"time_base must be one of {', '.join(TIME_BASES)}, got "
                     f"{time_base!r}")
  bases = time_bases(run)
  if time_base in bases:
    return time_base
  if time_base == "simulated":
    raise ValueError(f"{run.path}: has no simulated times (sim_time); use "
                     "the training or wall time base")
  return bases[0]


def event_times(run: Run, events: Dict[str, np.ndarray],
                time_base: str) -> np.ndarray:
  """The times of `events` (`run.commits` or `run.evals`) on `time_base`, row by row."""
  base = effective_time_base(run, time_base)
  if time_bases(run) == ("wall",):  # An old run: `time` is its wall time.
    return events["time"]
  return events[_COLUMN[base]]


def eval_curve(run: Run, time_base: str = "training"):
  """`(times, accuracies)` of the center on the test set, on `time_base`.

  On the training base, evaluations before the start barrier have negative
  times.
  """
  evals = run.evals
  times = event_times(run, evals, time_base)
  keep = np.isfinite(evals["accuracy"]) & np.isfinite(times)
  order = np.argsort(times[keep], kind="stable")
  return times[keep][order], evals["accuracy"][keep][order]


def from_zero(times, values) -> Tuple[np.ndarray, np.ndarray]:
  """The part of a curve at t >= 0, starting at t = 0 if it had earlier points.

  What the center held before the start barrier it still holds at t = 0, so
  the last earlier value is carried to t = 0.

  Example:
    >>> t, v = from_zero([-3.0, -1.0, 2.0], [0.1, 0.2, 0.5])
    >>> t.tolist(), v.tolist()
    ([0.0, 2.0], [0.2, 0.5])
  """
  times = np.asarray(times, np.float64)
  values = np.asarray(values, np.float64)
  before = times < 0
  if not np.any(before):
    return times, values
  keep = ~before
  carried = values[before][np.argmax(times[before])]
  if np.any(keep) and times[keep][0] == 0:
    return times[keep], values[keep]
  return (np.append(0.0, times[keep]), np.append(carried, values[keep]))


def train_curve(run: Run, window: float = TRAIN_WINDOW_SECONDS,
                time_base: str = "training"):
  """The workers' mini-batch accuracy, averaged over `window`-second windows.

  Commits before t = 0 of the time base (there should be none) are dropped.
  """
  commits = run.commits
  times = event_times(run, commits, time_base)
  keep = np.isfinite(commits["accuracy"]) & np.isfinite(times) & (times >= 0)
  if not np.any(keep):
    return np.zeros(0), np.zeros(0)
  order = np.argsort(times[keep], kind="stable")
  return metrics.windowed_mean(times[keep][order],
                               commits["accuracy"][keep][order], window)


def commit_times(run: Run, time_base: str = "training") -> np.ndarray:
  """The commits' times on `time_base`, sorted."""
  return np.sort(event_times(run, run.commits, time_base))


def labels(runs: Sequence[Run]) -> List[str]:
  """Distinct short labels: the base names, numbered where they repeat."""
  names = [run.name for run in runs]
  return [f"{name} ({i + 1})" if names.count(name) > 1 else name
          for i, name in enumerate(names)]


def startup_seconds(run: Run) -> Optional[float]:
  """Seconds from `train()`'s start to the start barrier.

  summary.json's `startup_seconds` if it has one, else the rows' `wall_time
  - time`; None for an old run that has no start barrier.
  """
  value = run.summary.get("startup_seconds")
  if isinstance(value, (int, float)) and not isinstance(value, bool):
    return float(value)
  offsets = np.concatenate([run.commits["wall_time"] - run.commits["time"],
                            run.evals["wall_time"] - run.evals["time"]])
  offsets = offsets[np.isfinite(offsets)]
  return float(np.median(offsets)) if len(offsets) else None
