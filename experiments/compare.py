r"""Temporal efficiency of finished runs, and their curves on one plot.

  python -m experiments.compare RUN_A RUN_B [RUN_C ...] [--output=PATH]

prints E(a, b) = ∫₀^m f_a dt / ∫₀^m f_b dt (PAPER.md) for every pair of the
runs, in two versions: f = the center's test accuracy (eval events) and f =
the workers' mini-batch training accuracy averaged over 5-second windows
(commit events; the thesis' version). The functions here are also what
`experiments.train` and `experiments.sweep` use to read a run back.
"""

import itertools
import json
import os
from typing import Dict, List, NamedTuple, Optional, Sequence

from absl import app
from absl import flags
import numpy as np

from agn_jax import metrics
from experiments import flags as flags_lib

TRAIN_WINDOW_SECONDS = 5.0
_COMMIT_FIELDS = ("time", "worker", "clock", "staleness", "loss", "accuracy")
_EVAL_FIELDS = ("time", "clock", "loss", "accuracy")


class RunDirError(ValueError):
  """A run directory that is missing or holds no readable metrics."""


class Run(NamedTuple):
  """One run read back from its workdir.

  Attributes:
    path: the workdir.
    name: a short label (the workdir's base name).
    config: config.json as a dict ({} if absent).
    summary: summary.json as a dict ({} if absent).
    commits: commit events as `{field: np.ndarray}` sorted by time.
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


def _columns(events: List[dict],
             fields: Sequence[str]) -> Dict[str, np.ndarray]:
  events = sorted(events, key=lambda e: e["time"])
  return {f: np.array([e.get(f, np.nan) for e in events], np.float64)
          for f in fields}


def read_events(path: str) -> List[dict]:
  """The events of one metrics.jsonl file.

  A last line cut short (a run killed mid-write) is ignored; any other
  malformed line is an error.

  Raises:
    RunDirError: if the file is unreadable or malformed.
  """
  try:
    with open(path) as f:
      lines = f.read().splitlines()
  except OSError as e:
    raise RunDirError(f"{path}: cannot read ({e.strerror or e})") from None
  events = []
  for number, line in enumerate(lines, 1):
    if not line.strip():
      continue
    try:
      event = json.loads(line)
      if not isinstance(event, dict) or "event" not in event:
        raise ValueError("not an event object")
      if event["event"] in ("commit", "eval"):
        event["time"] = float(event["time"])
    except (ValueError, KeyError, TypeError) as e:
      if number == len(lines):
        break
      raise RunDirError(f"{path}:{number}: malformed event ({e})") from None
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
  commits = [e for e in events if e.get("event") == "commit"]
  evals = [e for e in events if e.get("event") == "eval"]
  if not commits and not evals:
    raise RunDirError(f"{metrics_path}: holds no commit or eval events")
  return Run(path=path,
             name=os.path.basename(os.path.normpath(path)),
             config=_read_json(os.path.join(path, "config.json")),
             summary=_read_json(os.path.join(path, "summary.json")),
             commits=_columns(commits, _COMMIT_FIELDS),
             evals=_columns(evals, _EVAL_FIELDS))


def eval_curve(run: Run):
  """`(times, accuracies)` of the center on the test set."""
  evals = run.evals
  keep = np.isfinite(evals["accuracy"])
  return evals["time"][keep], evals["accuracy"][keep]


def train_curve(run: Run, window: float = TRAIN_WINDOW_SECONDS):
  """The workers' mini-batch accuracy, averaged over `window`-second windows."""
  commits = run.commits
  keep = np.isfinite(commits["accuracy"])
  if not np.any(keep):
    return np.zeros(0), np.zeros(0)
  return metrics.windowed_mean(commits["time"][keep],
                               commits["accuracy"][keep], window)


def efficiency(run_a: Run, run_b: Run,
               window: float = TRAIN_WINDOW_SECONDS
              ) -> Dict[str, Optional[float]]:
  """E(a, b) on test accuracy ("test") and windowed training accuracy ("train").

  A version is None when either run lacks the events it needs, or the ratio
  is undefined (run b's curve integrates to 0).
  """
  result = {}
  for key, curve in (("test", eval_curve),
                     ("train", lambda r: train_curve(r, window))):
    (times_a, values_a), (times_b, values_b) = curve(run_a), curve(run_b)
    if not len(times_a) or not len(times_b):
      result[key] = None
      continue
    try:
      result[key] = metrics.temporal_efficiency(times_a, values_a,
                                                times_b, values_b)
    except ValueError:
      result[key] = None
  return result


def final_accuracy(run: Run) -> Optional[float]:
  """The last test accuracy: the summary's, else the last eval event's."""
  value = run.summary.get("final_test_accuracy")
  if isinstance(value, (int, float)):
    return float(value)
  _, accuracies = eval_curve(run)
  return float(accuracies[-1]) if len(accuracies) else None


def wall_time(run: Run) -> Optional[float]:
  """The run's wall time: the summary's, else its last event's time."""
  value = run.summary.get("wall_seconds")
  if isinstance(value, (int, float)):
    return float(value)
  times = np.concatenate([run.commits["time"], run.evals["time"]])
  return float(times.max()) if len(times) else None


def _format(value: Optional[float], spec: str = ".4f") -> str:
  return "n/a" if value is None else format(value, spec)


def labels(runs: Sequence[Run]) -> List[str]:
  """Distinct short labels: the base names, numbered where they repeat."""
  names = [run.name for run in runs]
  return [f"{name} ({i + 1})" if names.count(name) > 1 else name
          for i, name in enumerate(names)]


def comparison_table(runs: Sequence[Run],
                     window: float = TRAIN_WINDOW_SECONDS) -> str:
  """The text `compare` prints: one line per run, then E for every pair."""
  names = labels(runs)
  width = max(len(n) for n in names) + 2
  lines = [f"{'run':<{width}}{'test acc':>10}{'time (s)':>10}{'commits':>9}"]
  for name, run in zip(names, runs):
    lines.append(f"{name:<{width}}{_format(final_accuracy(run)):>10}"
                 f"{_format(wall_time(run), '.2f'):>10}"
                 f"{len(run.commits['time']):>9d}")
  lines.append("")
  lines.append(f"{'a':<{width}}{'b':<{width}}{'E test':>10}"
               f"{f'E train({window:g}s)':>16}")
  for (i, a), (j, b) in itertools.combinations(enumerate(runs), 2):
    e = efficiency(a, b, window)
    lines.append(f"{names[i]:<{width}}{names[j]:<{width}}"
                 f"{_format(e['test']):>10}{_format(e['train']):>16}")
  return "\n".join(lines)


def default_output(first_run: str) -> str:
  """compare.png beside the first run, or in the cwd if that is not writable."""
  parent = os.path.dirname(os.path.abspath(first_run))
  if os.access(parent, os.W_OK):
    return os.path.join(parent, "compare.png")
  return os.path.abspath("compare.png")


def main(argv):
  # plots imports this module: import it late.
  from experiments import plots  # pylint: disable=g-import-not-at-top

  run_dirs = argv[1:]
  if len(run_dirs) < 2:
    flags_lib.exit_with_error(
        "compare", "give two or more run directories: "
        "python -m experiments.compare RUN_A RUN_B [RUN_C ...]", status=2)
  try:
    runs = [read_run(d) for d in run_dirs]
  except RunDirError as e:
    flags_lib.exit_with_error("compare", e)
  window = flags.FLAGS.window_seconds
  print(comparison_table(runs, window))
  output = flags.FLAGS.output or default_output(run_dirs[0])
  try:
    plots.plot_comparison(runs, output, labels(runs), window)
  except OSError as e:
    flags_lib.exit_with_error("compare", f"--output={output}: cannot write "
                              f"({e.strerror or e})")
  print(f"\nplot: {output}")


def _define_flags():
  flags.DEFINE_string("output", None, "Where to draw the curves of all runs; "
                      "default compare.png beside the first run.")
  flags.DEFINE_float("window_seconds", TRAIN_WINDOW_SECONDS,
                     "Window over which the workers' training accuracy is "
                     "averaged.")
  flags.register_validator("window_seconds", lambda v: v is not None and v > 0,
                           message="--window_seconds accepts a number > 0")


if __name__ == "__main__":
  # Flags are defined only when run as a program, so train and sweep can
  # import the readers above without clashing flag names.
  _define_flags()
  app.run(main, flags_parser=lambda argv: flags_lib.parse_flags_or_exit(
      argv, allow_positional=True))
