r"""Temporal efficiency of finished runs, and their curves on one plot.

  python -m experiments.compare RUN_A RUN_B [RUN_C ...] [--output=PATH] \
      [--time_base=auto|training|wall|simulated]

prints E(a, b) = ∫₀^m f_a dt / ∫₀^m f_b dt (PAPER.md) for every pair of the
runs, in two versions: f = the center's test accuracy (eval events) and f =
the workers' mini-batch training accuracy averaged over 5-second windows
(commit events; the thesis' version). Times are on one time base (see
`experiments.curves`): by default `training`, seconds since the start
barrier, so start-up and compilation are reported apart and do not count
inside E; `simulated` when every run has simulated times. The output names
the time base, and warns at the top when the runs do not share a time base
or a data budget. Writes the plot and, beside it, the same numbers as JSON.
The functions here are also what `experiments.train` and `experiments.sweep`
use to read a run back and compare runs.
"""

import itertools
import json
import os
from typing import Dict, List, Optional, Sequence, Tuple

from absl import app
from absl import flags
import numpy as np

from agn_jax import metrics
from experiments import curves
from experiments import flags as flags_lib
from experiments import plots

# The readers live in `experiments.curves`; these names are kept here for the
# modules that read runs through compare (train, sweep).
TRAIN_WINDOW_SECONDS = curves.TRAIN_WINDOW_SECONDS
TIME_BASES = ("auto",) + curves.TIME_BASES
Run = curves.Run
RunDirError = curves.RunDirError
read_events = curves.read_events
read_run = curves.read_run
eval_curve = curves.eval_curve
train_curve = curves.train_curve
labels = curves.labels

# What decides how much data a run trains on (and on what model): runs that
# differ in any of these are not a like-with-like comparison.
BUDGET_KEYS = ("dataset", "dataset_size", "epochs", "batch_size", "model",
               "hidden_sizes")


def choose_time_base(runs: Sequence[Run], time_base: str = "auto") -> str:
  """The time base to compare `runs` on.

  Args:
    runs: the runs.
    time_base: one of `TIME_BASES`; "auto" is "simulated" when every run has
      simulated times (`sim_time`), else "training".

  Returns:
    One of "training", "wall", "simulated".

  Raises:
    ValueError: one line, for an unknown name, or "simulated" when a run has
      no simulated times.
  """
  if time_base == "auto":
    return curves.default_time_base(runs)
  for run in runs:
    curves.effective_time_base(run, time_base)  # Raises where it cannot be.
  return time_base


def efficiency(run_a: Run, run_b: Run,
               window: float = TRAIN_WINDOW_SECONDS,
               time_base: str = "auto") -> Dict[str, object]:
  """E(a, b) on test accuracy ("test") and windowed training accuracy ("train").

  Both curves start at t = 0 of the time base: on "training", the start
  barrier; what happened before it (start-up, compilation) does not count.

  Args:
    run_a: run a.
    run_b: run b.
    window: seconds over which the workers' training accuracy is averaged.
    time_base: one of `TIME_BASES` ("auto": `choose_time_base([a, b])`).

  Returns:
    `{"test": E or None, "train": E or None, "time_base": the base asked
    for, "time_bases": (run a's base, run b's base), "same_time_base":
    bool}`. An E is None when either run lacks the events it needs or the
    ratio is undefined (run b's curve integrates to 0). A run without the
    base asked for (an old run has only "wall") is on its own base, and
    `same_time_base` is then False: its E compares unlike times.

  Raises:
    ValueError: as `choose_time_base`.

  Example:
    >>> import numpy as np
    >>> from experiments.curves import Run
    >>> evals = {"time": np.array([0.0, 2.0]), "accuracy": np.array([0.5, 0.5]),
    ...          "wall_time": np.array([3.0, 5.0]), "sim_time": np.full(2, np.nan)}
    >>> commits = {f: np.zeros(0) for f in ("time", "wall_time", "sim_time",
    ...                                      "accuracy")}
    >>> a = Run("a", "a", {}, {}, commits, evals)
    >>> b = Run("b", "b", {}, {}, commits, dict(evals, accuracy=np.ones(2)))
    >>> e = efficiency(a, b)
    >>> e["test"], e["train"], e["time_base"], e["same_time_base"]
    (0.5, None, 'training', True)
  """
  base = choose_time_base([run_a, run_b], time_base)
  bases = (curves.effective_time_base(run_a, base),
           curves.effective_time_base(run_b, base))
  result = {}
  for key, curve in (("test", lambda r: curves.from_zero(
      *curves.eval_curve(r, base))),
                     ("train", lambda r: curves.train_curve(r, window, base))):
    (times_a, values_a), (times_b, values_b) = curve(run_a), curve(run_b)
    if not len(times_a) or not len(times_b):
      result[key] = None
      continue
    try:
      result[key] = metrics.temporal_efficiency(times_a, values_a,
                                                times_b, values_b)
    except ValueError:
      result[key] = None
  result.update(time_base=base, time_bases=bases,
                same_time_base=bases[0] == bases[1])
  return result


def data_budget(run: Run) -> Dict[str, object]:
  """How much data `run` trained on, and on what model.

  Read from config.json, else from a `config` object in summary.json.

  Args:
    run: a run.

  Returns:
    `{key: value}` for every key of `BUDGET_KEYS`: dataset, dataset_size
    (None: the dataset's own size), epochs (a float), batch_size, model and
    hidden_sizes (a list of ints; None for a model other than the mlp, which
    ignores it). A value the run does not record is None.

  Example:
    >>> from experiments.curves import Run
    >>> run = Run("r", "r", {"dataset": "mnist", "epochs": 40, "model": "cnn",
    ...                      "hidden_sizes": [8]}, {}, {}, {})
    >>> data_budget(run)["epochs"], data_budget(run)["hidden_sizes"]
    (40.0, None)
  """
  config = run.config
  if not config and isinstance(run.summary.get("config"), dict):
    config = run.summary["config"]
  budget = {key: config.get(key) for key in BUDGET_KEYS}
  if isinstance(budget["epochs"], (int, float)):
    budget["epochs"] = float(budget["epochs"])
  if budget["model"] not in (None, "mlp"):
    budget["hidden_sizes"] = None
  elif isinstance(budget["hidden_sizes"], (list, tuple)):
    budget["hidden_sizes"] = [int(h) for h in budget["hidden_sizes"]]
  return budget


def same_budget(runs: Sequence[Run]) -> Tuple[bool, List[str]]:
  """Whether `runs` trained on the same data budget (see `data_budget`).

  Args:
    runs: two or more runs.

  Returns:
    `(same, differing_keys)`: `differing_keys` lists, in `BUDGET_KEYS` order,
    every key whose value is not the same in all runs (a key no run records
    counts as the same; one only some runs record counts as differing).

  Example:
    >>> from experiments.curves import Run
    >>> a = Run("a", "a", {"dataset": "mnist", "epochs": 40}, {}, {}, {})
    >>> b = Run("b", "b", {"dataset": "mnist", "epochs": 100.0}, {}, {}, {})
    >>> same_budget([a, b])
    (False, ['epochs'])
  """
  budgets = [data_budget(run) for run in runs]
  differing = [key for key in BUDGET_KEYS
               if any(b[key] != budgets[0][key] for b in budgets[1:])]
  return not differing, differing


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


def training_seconds(run: Run, time_base: str = "training") -> Optional[float]:
  """The time of the run's last commit or evaluation on `time_base`."""
  times = np.concatenate([curves.commit_times(run, time_base),
                          curves.eval_curve(run, time_base)[0]])
  times = times[np.isfinite(times)]
  return float(times.max()) if len(times) else None


def _budget_text(value) -> str:
  if isinstance(value, list):
    return ",".join(str(v) for v in value)
  return "unset" if value is None else f"{value:g}" if isinstance(
      value, float) else str(value)


def comparison(runs: Sequence[Run], window: float = TRAIN_WINDOW_SECONDS,
               time_base: str = "auto") -> Dict[str, object]:
  """Everything `compare` reports, as a JSON-ready dict.

  Args:
    runs: two or more runs.
    window: seconds of the training-accuracy windows.
    time_base: one of `TIME_BASES`.

  Returns:
    `{"time_base", "time_base_description", "window_seconds", "runs": [per
    run: name, path, time_base, final_test_accuracy, training_seconds,
    startup_seconds, commits, data_budget], "same_time_base", "same_budget",
    "differing_budget", "warnings": [lines], "pairs": [a, b, test, train]}`.

  Raises:
    ValueError: as `choose_time_base`.
  """
  base = choose_time_base(runs, time_base)
  names = labels(runs)
  per_run = []
  for name, run in zip(names, runs):
    run_base = curves.effective_time_base(run, base)
    per_run.append({
        "name": name, "path": run.path, "time_base": run_base,
        "final_test_accuracy": final_accuracy(run),
        "training_seconds": training_seconds(run, base),
        "startup_seconds": curves.startup_seconds(run),
        "commits": int(len(run.commits["time"])),
        "data_budget": data_budget(run)})
  warnings = []
  same_base = len({r["time_base"] for r in per_run}) == 1
  if not same_base:
    warnings.append(
        "the runs do not share a time base (" + ", ".join(
            f"{r['name']}: {r['time_base']}" for r in per_run) +
        "); a run without a start barrier (an older run) counts its start-up "
        "inside E, so E compares unlike times")
  unrecorded = [r["name"] for r, run in zip(per_run, runs)
                if all(v is None for v in r["data_budget"].values())]
  if unrecorded:
    warnings.append(f"no config.json for {', '.join(unrecorded)}: its data "
                    "budget is unknown")
  same, differing = same_budget(runs)
  if not same:
    warnings.append(
        "the runs do not share a data budget: " + "; ".join(
            f"{key} differs (" + ", ".join(
                f"{r['name']}: {_budget_text(r['data_budget'][key])}"
                for r in per_run) + ")" for key in differing) +
        "; E compares runs that saw different data")
  pairs = []
  for (i, a), (j, b) in itertools.combinations(enumerate(runs), 2):
    e = efficiency(a, b, window, base)
    pairs.append({"a": names[i], "b": names[j], "test": e["test"],
                  "train": e["train"]})
  return {"time_base": base,
          "time_base_description": curves.TIME_BASE_DESCRIPTIONS[base],
          "window_seconds": window, "runs": per_run,
          "same_time_base": same_base, "same_budget": same,
          "differing_budget": differing, "warnings": warnings,
          "pairs": pairs}


def comparison_table(runs: Sequence[Run],
                     window: float = TRAIN_WINDOW_SECONDS,
                     time_base: str = "auto",
                     report: Optional[Dict[str, object]] = None) -> str:
  """The text `compare` prints: warnings, the time base, one line per run, then E for every pair."""
  report = report or comparison(runs, window, time_base)
  names = [r["name"] for r in report["runs"]]
  width = max(len(n) for n in names) + 2
  lines = [f"WARNING: {w}" for w in report["warnings"]]
  if lines:
    lines.append("")
  lines.append(f"time base: {report['time_base']} "
               f"({report['time_base_description']})")
  lines.append("")
  lines.append(f"{'run':<{width}}{'test acc':>10}{'time (s)':>10}"
               f"{'start-up (s)':>14}{'commits':>9}")
  for r in report["runs"]:
    lines.append(f"{r['name']:<{width}}{_format(r['final_test_accuracy']):>10}"
                 f"{_format(r['training_seconds'], '.2f'):>10}"
                 f"{_format(r['startup_seconds'], '.2f'):>14}"
                 f"{r['commits']:>9d}")
  lines.append("")
  lines.append(f"{'a':<{width}}{'b':<{width}}{'E test':>10}"
               f"{f'E train({window:g}s)':>16}")
  for pair in report["pairs"]:
    lines.append(f"{pair['a']:<{width}}{pair['b']:<{width}}"
                 f"{_format(pair['test']):>10}{_format(pair['train']):>16}")
  return "\n".join(lines)


def default_output(first_run: str) -> str:
  """compare.png beside the first run, or in the cwd if that is not writable."""
  parent = os.path.dirname(os.path.abspath(first_run))
  if os.access(parent, os.W_OK):
    return os.path.join(parent, "compare.png")
  return os.path.abspath("compare.png")


def main(argv):
  program = "compare"
  run_dirs = argv[1:]
  if len(run_dirs) < 2:
    flags_lib.exit_with_error(
        program, "give two or more run directories: "
        "python -m experiments.compare RUN_A RUN_B [RUN_C ...]", status=2)
  try:
    runs = [read_run(d) for d in run_dirs]
  except RunDirError as e:
    flags_lib.exit_with_error(program, e)
  window = flags.FLAGS.window_seconds
  try:
    report = comparison(runs, window, flags.FLAGS.time_base)
  except ValueError as e:
    flags_lib.exit_with_error(program, f"--time_base={flags.FLAGS.time_base}: "
                              f"{e}", status=2)
  print(comparison_table(runs, window, report=report))
  output = flags.FLAGS.output or default_output(run_dirs[0])
  json_path = os.path.splitext(output)[0] + ".json"
  try:
    plots.plot_comparison(runs, output, labels(runs), window,
                          time_base=report["time_base"])
    with open(json_path, "w") as f:
      json.dump(report, f, indent=2)
      f.write("\n")
  except OSError as e:
    flags_lib.exit_with_error(program, f"--output={output}: cannot write "
                              f"({e.strerror or e})")
  print(f"\nplot: {output}\nnumbers: {json_path}")


def _define_flags():
  flags.DEFINE_string("output", None, "Where to draw the curves of all runs; "
                      "default compare.png beside the first run. The numbers "
                      "go beside it as JSON (compare.json).")
  flags.DEFINE_float("window_seconds", TRAIN_WINDOW_SECONDS,
                     "Window over which the workers' training accuracy is "
                     "averaged.")
  flags.register_validator(
      "window_seconds", lambda v: v is not None and np.isfinite(v) and v > 0,
      message="--window_seconds accepts a finite number > 0")
  flags.DEFINE_enum(
      "time_base", "auto", list(TIME_BASES),
      "Time base of E and the plots: training (seconds since the start "
      "barrier, when all workers are ready; start-up is reported apart), "
      "wall (since train() began, start-up included), simulated (simulated "
      "seconds), or auto: simulated when every run has simulated times, "
      "else training.")


if __name__ == "__main__":
  # Flags are defined only when run as a program, so train and sweep can
  # import the readers above without clashing flag names.
  _define_flags()
  app.run(main, flags_parser=lambda argv: flags_lib.parse_flags_or_exit(
      argv, allow_positional=True))
