"""A finished run read back from its workdir, and its curves on a chosen time base.

The one home of the curve data: `experiments.compare` computes temporal
efficiency from it and `experiments.plots` draws it; neither imports the other.

Time bases (the fields of a metrics.jsonl row):
  training: `time`, seconds since the start barrier (all workers ready,
    training begins); events before it have negative times.
  wall: `wall_time`, seconds since `train()` began (start-up included).
  simulated: `sim_time`, the simulated clock (simulated backends only):
    modeled seconds of the run's `--cluster`, or local steps of a speed-1
    worker for `--cluster=none` (`sim_unit`).
A run written before the start barrier existed has no `wall_time`; its `time`
counted from `train()`'s start, so its one time base is `wall`.

Commit and eval rows carry the run's task's named metrics by name
(`agn_jax.tasks.Task`: classification's `accuracy`); summary.json names them
(`metrics`, with their directions) and the one temporal efficiency reads by
default (`efficiency_metric`); a run written before tasks had names is
classification's. The curves read that metric unless told another.

Each commit row also carries every local step's training value of the
efficiency metric (`step_<metric>`: `step_accuracy`) and its window's bounds
(`window_start`, `window_end` on the `time` base; `sim_window_start`,
`sim_window_end` on the simulated one): `step_curve` gives every step of
every worker its time from them.
"""

import collections
import gzip
import json
import os
import zlib
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from agn_jax import metrics
from agn_jax.runtime import bookkeeping
from agn_jax.runtime import events as ev
from experiments import run_checks

TRAIN_WINDOW_SECONDS = 5.0
# The thesis' pace, for its 5-s window on a simulated clock that counts local
# steps (`--cluster=none`): its runs took 0.47 to 0.59 s per local step
# (n = λ = 20: 432.93 s for 46 windows of 20 steps per worker; n = λ = 40:
# 257.62 s for 11 of 40; n = λ = 10: 1066.08 s for 187 of 10), so its 5 s
# held about 10 steps. A clock of modeled seconds needs no conversion.
THESIS_SECONDS_PER_STEP = 0.5
SIM_UNITS = ("steps", "seconds")
# Every dataset `agn_jax.data` loads has 10 classes; a run whose summary
# records `num_classes` says otherwise.
DEFAULT_NUM_CLASSES = 10
TIME_BASES = ("training", "wall", "simulated")
TIME_BASE_DESCRIPTIONS = {
    "training": "seconds since the start barrier, when all workers are "
                "ready",
    "wall": "seconds since train() began, start-up included",
    "simulated": "the simulated clock (modeled seconds of the run's "
                 "--cluster; local steps for --cluster=none)",
}
_TIME_FIELDS = ("time", "wall_time", "sim_time")
# What a run written before tasks had names was trained for.
DEFAULT_METRICS = {"accuracy": "max"}
DEFAULT_EFFICIENCY_METRIC = "accuracy"
# The rows the curves read and the numeric fields each always has a column
# of: those of the events the runtime writes them from, with classification's
# accuracy. Every other field of such a row is a number too (a task's
# metric) but the list fields `step_<metric>` and an eval's `final`.
_NUMERIC_FIELDS = {
    ev.Committed.kind: _TIME_FIELDS + tuple(
        f for f in ev.COMMIT_ROW if f not in _TIME_FIELDS) + ("accuracy",),
    ev.Evaluated.kind: _TIME_FIELDS + tuple(
        f for f in ev.EVAL_ROW if f not in _TIME_FIELDS + ("final",)) + (
            "accuracy",),
}
_NOT_NUMERIC = {"event", "final"}
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
    commits: commit events as `{field: np.ndarray}` sorted by time: every
      numeric field (a task's metrics among them); a field a row lacks is
      NaN; each `step_<metric>` is an object array of float arrays (empty
      where a row has none).
    evals: eval events as `{field: np.ndarray}` sorted by time.
    non_finite_evals: whether an eval row's loss or metric was non-finite
      (NaN or infinite, not merely absent).
  """
  path: str
  name: str
  config: Dict[str, object]
  summary: Dict[str, object]
  commits: Dict[str, np.ndarray]
  evals: Dict[str, np.ndarray]
  non_finite_evals: bool = False


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


def _columns(events: List[dict], fields: Sequence[str],
             lists: Sequence[str] = ()) -> Dict[str, np.ndarray]:
  """`fields`, `lists` and every other field the rows have, as columns; `step_*` lists as object arrays."""
  events = sorted(events, key=lambda e: e["time"])
  fields, lists = list(fields), list(lists)
  for e in events:
    for f in e:
      if f.startswith("step_"):
        if f not in lists:
          lists.append(f)
      elif f not in _NOT_NUMERIC and f not in fields:
        fields.append(f)
  columns = {
      f: np.array([np.nan if e.get(f) is None else e[f] for e in events],
                  np.float64)
      for f in fields}
  for f in lists:
    columns[f] = np.empty(len(events), object)
    columns[f][:] = [np.asarray(e.get(f) or (), np.float64) for e in events]
  return columns


def read_events(path: str) -> List[dict]:
  """The events of one metrics.jsonl file (gzipped where its name ends in .gz, as an archive keeps it).

  A last line cut short (a run killed mid-write) is ignored; any other
  malformed line, and any commit or eval event with a non-numeric field
  (e.g. `"accuracy": "abc"`; every field but `event`, an eval's `final`
  and the step lists is a number), is an error naming the file and line.

  Raises:
    RunDirError: if the file is unreadable or malformed.
  """
  try:
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
      lines = f.read().splitlines()
  except (OSError, EOFError, zlib.error, UnicodeDecodeError) as e:
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
      for field in event:
        if field in _NOT_NUMERIC or field.startswith("step_"):
          continue
        if not _is_number(event.get(field)):
          raise RunDirError(f"{path}:{number}: field {field!r} is not a "
                            f"number: {event[field]!r}")
      for field in [f for f in event if f.startswith("step_")]:
        value = event.get(field)
        if value is not None and not (isinstance(value, list) and all(
            v is not None and _is_number(v) for v in value)):
          raise RunDirError(f"{path}:{number}: field {field!r} is not a "
                            f"list of numbers: {value!r}")
      event["time"] = float(event["time"])
    events.append(event)
  return events


def read_run(path: str) -> Run:
  """Reads a run's workdir: metrics.jsonl, config.json and summary.json.

  An archived run (`experiments.report.archive`) keeps its rows gzipped, as
  metrics.jsonl.gz. Its files are checked against each other
  (`run_checks`): summary.json's fields must have their types, and the rows
  must hold what the summary says the run did (a metrics.jsonl cut short,
  or a summary.json of another run, disagrees).

  Raises:
    RunDirError: one line, if `path` is not a run directory, or its files
      are malformed or disagree (naming the file and what disagrees).
  """
  if not os.path.isdir(path):
    raise RunDirError(f"{path}: no such run directory")
  metrics_path = os.path.join(path, "metrics.jsonl")
  if not os.path.isfile(metrics_path) and os.path.isfile(metrics_path +
                                                          ".gz"):
    metrics_path += ".gz"
  if not os.path.isfile(metrics_path):
    raise RunDirError(f"{path}: not a run directory (no metrics.jsonl)")
  events = read_events(metrics_path)
  commits = [e for e in events if e.get("event") == ev.Committed.kind]
  evals = [e for e in events if e.get("event") == ev.Evaluated.kind]
  if not commits and not evals:
    raise RunDirError(f"{metrics_path}: holds no commit or eval events")
  summary_path = os.path.join(path, "summary.json")
  summary = _read_json(summary_path)
  wrong = run_checks.summary_type_error(summary)
  if wrong:
    raise RunDirError(f"{summary_path}: {wrong}")
  differ = run_checks.disagreements(summary, commits, evals)
  if differ:
    raise RunDirError(
        f"{path}: {os.path.basename(metrics_path)} and summary.json disagree "
        f"({'; '.join(differ)}): a file cut short or from another run")
  non_finite_evals = any(
      isinstance(e.get(f), float) and not np.isfinite(e[f])
      for e in evals for f in e
      if f not in _NOT_NUMERIC and f not in _TIME_FIELDS + ("clock",))
  return Run(path=path,
             name=os.path.basename(os.path.normpath(path)),
             config=_read_json(os.path.join(path, "config.json")),
             summary=summary,
             commits=_columns(commits, _NUMERIC_FIELDS[ev.Committed.kind],
                              ("step_accuracy",)),
             evals=_columns(evals, _NUMERIC_FIELDS[ev.Evaluated.kind]),
             non_finite_evals=non_finite_evals)


def _config(run: Run) -> Dict[str, object]:
  """config.json, else summary.json's `config`, else {}."""
  config = run.config
  if not config and isinstance(run.summary.get("config"), dict):
    config = run.summary["config"]
  return config if isinstance(config, dict) else {}


def metrics_of(run: Run) -> Dict[str, str]:
  """The run's task's named metrics and their goals, `{name: "max" or "min"}` (summary.json's `metrics`).

  A run whose summary names none (written before tasks had names) is
  classification's: `{"accuracy": "max"}`.

  Example:
    >>> metrics_of(Run("r", "r", {}, {"metrics": {"mae": "min"}}, {}, {}))
    {'mae': 'min'}
    >>> metrics_of(Run("r", "r", {}, {}, {}, {}))
    {'accuracy': 'max'}
  """
  named = run.summary.get("metrics")
  if isinstance(named, dict) and all(v in ("max", "min")
                                     for v in named.values()):
    return dict(named)
  return dict(DEFAULT_METRICS)


def efficiency_metric(run: Run) -> str:
  """The metric temporal efficiency reads by default: summary.json's `efficiency_metric`, else accuracy."""
  value = run.summary.get("efficiency_metric")
  if isinstance(value, str) and (value == "loss" or value in metrics_of(run)):
    return value
  return DEFAULT_EFFICIENCY_METRIC


def higher_is_better(run: Run, metric: str) -> bool:
  """The direction of `metric` in `run` (`metrics_of`; the loss: lower is better).

  Example:
    >>> run = Run("r", "r", {}, {"metrics": {"mae": "min"}}, {}, {})
    >>> higher_is_better(run, "mae"), higher_is_better(run, "loss")
    (False, False)
  """
  if metric == "loss":
    return False
  goal = metrics_of(run).get(metric)
  if goal is None:
    raise ValueError(f"{run.path}: its task has no metric {metric!r}; it "
                     f"has {', '.join(['loss', *metrics_of(run)])}")
  return goal == "max"


def _column(events: Dict[str, np.ndarray], field: str) -> np.ndarray:
  """`events[field]`, or NaN where no row has it."""
  if field in events:
    return np.asarray(events[field], np.float64)
  length = len(next(iter(events.values()))) if events else 0
  return np.full(length, np.nan)


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


def sim_unit(run: Run) -> str:
  """What `run`'s simulated clock counts: "seconds" (modeled), or "steps".

  A run's config.json (else its summary's `config`) names its `cluster`;
  `none`, and a run that names none (written before the time model), count
  local steps of a speed-1 worker.

  Example:
    >>> sim_unit(Run("r", "r", {"cluster": "paper"}, {}, {}, {}))
    'seconds'
    >>> sim_unit(Run("r", "r", {}, {}, {}, {}))
    'steps'
  """
  config = run.config
  if not config and isinstance(run.summary.get("config"), dict):
    config = run.summary["config"]
  cluster = config.get("cluster") if isinstance(config, dict) else None
  return "seconds" if cluster not in (None, "none") else "steps"


def shared_sim_unit(runs: Sequence[Run]) -> Optional[str]:
  """The unit every run's simulated clock counts (`sim_unit`), or None if they differ."""
  units = {sim_unit(r) for r in runs}
  return units.pop() if len(units) == 1 else None


def default_time_base(runs: Sequence[Run]) -> str:
  """`auto`: "simulated" when every run has simulated times in one unit, else "training".

  Runs that all predate the start barrier have only "wall".
  """
  if (runs and all("simulated" in time_bases(r) for r in runs) and
      shared_sim_unit(runs)):
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


def eval_curve(run: Run, time_base: str = "training",
               metric: Optional[str] = None):
  """`(times, values)` of `metric` of the center on the test set, on `time_base`.

  `metric` defaults to the run's efficiency metric (`efficiency_metric`:
  classification's accuracy). On the training base, evaluations before the
  start barrier have negative times.
  """
  metric = metric or efficiency_metric(run)
  evals = run.evals
  times = event_times(run, evals, time_base)
  values = _column(evals, metric)
  keep = np.isfinite(values) & np.isfinite(times)
  order = np.argsort(times[keep], kind="stable")
  return times[keep][order], values[keep][order]


def bytes_curve(run: Run, metric: Optional[str] = None
                ) -> Optional[Tuple[np.ndarray, np.ndarray]]:
  """`(bytes, values)`: the center's test `metric` (default: `efficiency_metric`) against the payload bytes the run had moved.

  The bytes are the commits' and pulls' as sent (`summary.json`'s
  `bytes_committed` and `bytes_pulled`, so a compressed commit counts its
  compressed size), spread evenly over the commits: an evaluation after
  commit `c` of `N` is at `c / N` of the total. None for a run without byte
  counts or commits.

  Example:
    >>> import numpy as np
    >>> run = Run("r", "r", {}, {"bytes_committed": 300, "bytes_pulled": 900,
    ...                          "num_commits": 3}, {},
    ...           {"clock": np.array([0.0, 3.0, 1.0]),
    ...            "accuracy": np.array([0.1, 0.9, 0.5])})
    >>> [a.tolist() for a in bytes_curve(run)]
    [[0.0, 400.0, 1200.0], [0.1, 0.5, 0.9]]
  """
  summary = run.summary
  committed = summary.get("bytes_committed")
  commits = summary.get("num_commits")
  if not isinstance(committed, (int, float)) or not commits or (
      "clock" not in run.evals):
    return None
  per_commit = (committed + float(summary.get("bytes_pulled") or 0)) / commits
  clock = np.asarray(run.evals["clock"], np.float64)
  values = _column(run.evals, metric or efficiency_metric(run))
  keep = np.isfinite(values) & np.isfinite(clock)
  order = np.argsort(clock[keep], kind="stable")
  return clock[keep][order] * per_commit, values[keep][order]


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
                time_base: str = "training", metric: Optional[str] = None):
  """The workers' mini-batch `metric` (default: `efficiency_metric`), each commit's window mean, averaged over `window`-second windows.

  Commits before t = 0 of the time base (there should be none) are dropped.
  """
  commits = run.commits
  times = event_times(run, commits, time_base)
  values = _column(commits, metric or efficiency_metric(run))
  keep = np.isfinite(values) & np.isfinite(times) & (times >= 0)
  if not np.any(keep):
    return np.zeros(0), np.zeros(0)
  order = np.argsort(times[keep], kind="stable")
  return metrics.windowed_mean(times[keep][order], values[keep][order],
                               window)


def step_curve(run: Run, time_base: str = "training",
               metric: Optional[str] = None
               ) -> Tuple[np.ndarray, np.ndarray]:
  """`(times, values)` of every local step of every worker, sorted by time: its `metric` (`step_<metric>`; default `efficiency_metric`).

  The thesis' f before smoothing. A window's λ steps ran in one dispatch and
  have no times of their own: they are spread evenly over the window, step
  i (from 0) ending at `start + (i + 1) (end − start) / λ`, as the thesis'
  workers stamped each mini-batch when it was done. On the training and wall
  bases `[start, end]` is `[window_start, window_end]` (on the simulated
  backend, the round the window ran in); on the simulated base it is
  `[sim_window_start, sim_window_end]`, where those times are exact (a row
  without `sim_window_end` ends at its `sim_time`). Rows without step
  values (runs written before rows had them, or a metric whose steps the
  rows do not keep) add nothing; a non-finite value is dropped.
  """
  base = effective_time_base(run, time_base)
  commits = run.commits
  steps = commits.get(f"step_{metric or efficiency_metric(run)}")
  if steps is None or not len(steps):
    return np.zeros(0), np.zeros(0)
  column = lambda f: commits.get(f, np.full(len(steps), np.nan))
  if base == "simulated":
    start, end = column("sim_window_start"), column("sim_window_end")
    end = np.where(np.isfinite(end), end, column("sim_time"))
  else:
    start, end = column("window_start"), column("window_end")
    if base == "wall" and time_bases(run) != ("wall",):
      offset = column("wall_time") - column("time")
      start, end = start + offset, end + offset
  times, values = [], []
  for t0, t1, samples in zip(start, end, steps):
    if len(samples) and np.isfinite(t0) and np.isfinite(t1):
      times.append(t0 + (t1 - t0) * np.arange(1, len(samples) + 1) /
                   len(samples))
      values.append(samples)
  if not times:
    return np.zeros(0), np.zeros(0)
  times, values = np.concatenate(times), np.concatenate(values)
  keep = np.isfinite(values)
  order = np.argsort(times[keep], kind="stable")
  return times[keep][order], values[keep][order]


def efficiency_window(seconds: float, time_base: str,
                      unit: str = "steps") -> float:
  """The thesis curve's window on `time_base`, for a window of `seconds`.

  Seconds on the training and wall bases, and on a simulated clock of
  modeled seconds; on a simulated clock that counts local steps
  (`unit="steps"`, `--cluster=none`), the steps the thesis took in that
  time (`THESIS_SECONDS_PER_STEP`): 5 s is 10 steps.

  Example:
    >>> efficiency_window(5.0, "training"), efficiency_window(5.0, "simulated")
    (5.0, 10.0)
    >>> efficiency_window(5.0, "simulated", unit="seconds")
    5.0
  """
  if unit not in SIM_UNITS:
    raise ValueError(f"unit must be one of {', '.join(SIM_UNITS)}, got "
                     f"{unit!r}")
  if time_base == "simulated" and unit == "steps":
    return seconds / THESIS_SECONDS_PER_STEP
  return float(seconds)


def num_classes(run: Run) -> int:
  """The classes of the run's dataset: the summary's `num_classes`, else 10."""
  value = run.summary.get("num_classes")
  if isinstance(value, int) and not isinstance(value, bool) and value >= 2:
    return value
  return DEFAULT_NUM_CLASSES


def non_finite(run: Run) -> bool:
  """Whether the run went non-finite: the center's test loss or metrics, or most commits.

  True for a non-finite eval row, a non-finite final test loss or metric
  (`final_test_<name>`) in summary.json, or more commits rejected as
  non-finite than the run's books accept
  (`bookkeeping.MAX_REJECTED_FRACTION`, when the books call the run
  diverged).
  """
  summary = run.summary
  if run.non_finite_evals or any(
      isinstance(summary.get(key), float) and not np.isfinite(summary[key])
      for key in ["final_test_loss"] + [f"final_test_{name}"
                                        for name in metrics_of(run)]):
    return True
  applied, rejected = summary.get("num_commits"), summary.get(
      "rejected_commits")
  if isinstance(applied, int) and isinstance(rejected, int) and rejected:
    return rejected > bookkeeping.MAX_REJECTED_FRACTION * (applied + rejected)
  return False


def convergence(run: Run) -> str:
  """`metrics.convergence` of the run's center: "converged", "diverged" or "inconclusive".

  From its test accuracy over every evaluation in time order, its dataset's
  classes and `non_finite(run)`. A run whose task has no accuracy (whose
  chance level the rule needs) is "diverged" when `non_finite`, else
  "inconclusive".
  """
  if "accuracy" not in metrics_of(run):
    return "diverged" if non_finite(run) else "inconclusive"
  _, accuracies = eval_curve(run, metric="accuracy")
  return metrics.convergence(accuracies, num_classes(run), non_finite(run))


def commit_times(run: Run, time_base: str = "training") -> np.ndarray:
  """The commits' times on `time_base`, sorted."""
  return np.sort(event_times(run, run.commits, time_base))


def labels(runs: Sequence[Run]) -> List[str]:
  """Distinct short labels: the base names, numbered where they repeat."""
  names = [run.name for run in runs]
  counts = collections.Counter(names)
  return [f"{name} ({i + 1})" if counts[name] > 1 else name
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


def instrument_names(run: Run) -> Tuple[str, ...]:
  """The instruments (`--diagnostics`) this run recorded in any commit row, in row order."""
  return tuple(name for name in ev.INSTRUMENTS
               if np.isfinite(run.commits.get(name, np.array([]))).any())


def instrument_trace(run: Run, name: str, time_base: str = "training",
                     smooth: int = 25) -> Tuple[np.ndarray, np.ndarray,
                                                np.ndarray]:
  """`(times, values, running mean)` of one instrument over the run's commits.

  Commits without a value (a NaN or null, e.g. a cosine with a zero vector,
  or the gradient cosine between its k-th commits) are left out; the running
  mean is over the last `smooth` values with one, the trace a reader sees
  through the per-commit noise.

  Example:
    >>> import numpy as np
    >>> values = np.array([1.0, np.nan, 3.0, 5.0])
    >>> np.round(_running_mean(values[np.isfinite(values)], 2), 3)
    array([1., 2., 4.])
  """
  times = event_times(run, run.commits, time_base)
  values = np.asarray(run.commits[name], np.float64)
  keep = np.isfinite(values) & np.isfinite(times)
  return times[keep], values[keep], _running_mean(values[keep], smooth)


def _running_mean(values: np.ndarray, width: int) -> np.ndarray:
  """The mean of each value and the `width - 1` before it (fewer at the start)."""
  sums = np.cumsum(np.concatenate([[0.0], values]))
  ends = np.arange(1, len(values) + 1)
  starts = np.maximum(ends - width, 0)
  return (sums[ends] - sums[starts]) / (ends - starts)

