r"""Temporal efficiency of finished runs, and their curves on one plot.

  python -m experiments.compare RUN_A RUN_B [RUN_C ...] [--output=PATH] \
      [--time_base=auto|training|wall|simulated] \
      [--efficiency_curve=thesis|commits] [--efficiency_window=SECONDS]

prints E(a, b) = ∫₀^m f_a dt / ∫₀^m f_b dt (docs/algorithms.md) for every pair of the
runs, in two versions, on the runs' task's efficiency metric (summary.json's
`efficiency_metric`, `agn_jax.tasks.Task`: classification's accuracy; on a
metric lower-is-better E is ∫f_b / ∫f_a, so E > 1 always favours a).
*E test*: f = the center's test metric (eval events). *E train*: f = the
workers' training metric, by `--efficiency_curve`:
  thesis (default): the thesis' E (`agn_jax.metrics.thesis_efficiency`):
    every local step's mini-batch metric of every worker, averaged over a
    sliding window of --efficiency_window seconds moved by a fifth of it,
    timed from each run's first step, integrated with no point invented in
    front; on a simulated clock of modeled seconds (`--cluster=this_host`
    or `paper`) the window is in those seconds, on one that counts local
    steps (`--cluster=none`) in steps at the thesis' pace
    (`curves.efficiency_window`: 5 s is 10 steps);
  commits: our earlier curve, one sample per commit (the window's mean),
    averaged over consecutive --efficiency_window windows of the time base,
    with (0, 0) in front (a metric lower-is-better: its first value).
Times are on one time base (see `experiments.curves`): by default
`training`, seconds since the start barrier, so start-up and compilation are
reported apart and do not count inside E; `simulated` when every run has
simulated times in one unit. Each run is also classified `converged`, `diverged` or
`inconclusive` by `agn_jax.metrics.convergence`, whose rule is printed. The
output names the time base and the training curve, and warns at the top
when the runs do not share a time base or a data budget. Writes the plot
and, beside it, the same numbers as JSON. The functions here are also what
`experiments.train` and `experiments.sweep` use to read a run back and
compare runs.
"""

import itertools
import json
import os
from typing import Dict, List, Optional, Sequence, Tuple

from absl import app
from absl import flags
import numpy as np
import tqdm

from agn_jax import config as config_lib
from agn_jax import metrics
from agn_jax.runtime import events
from experiments import curves
from experiments import flags as flags_lib
from experiments import plots

# The readers live in `experiments.curves`; these names are kept here for the
# modules that read runs through compare (train, sweep).
TRAIN_WINDOW_SECONDS = curves.TRAIN_WINDOW_SECONDS
TIME_BASES = ("auto",) + curves.TIME_BASES
# The training curves E train can use; the first is the default.
EFFICIENCY_CURVES = ("thesis", "commits")
Run = curves.Run
RunDirError = curves.RunDirError
read_events = curves.read_events
read_run = curves.read_run
eval_curve = curves.eval_curve
train_curve = curves.train_curve
labels = curves.labels

# What decides how much data a run trains on (and on what model): runs that
# differ in any of these are not a like-with-like comparison.
BUDGET_KEYS = config_lib.fields_where("budget")


def choose_time_base(runs: Sequence[Run], time_base: str = "auto") -> str:
  """The time base to compare `runs` on.

  Args:
    runs: the runs.
    time_base: one of `TIME_BASES`; "auto" is "simulated" when every run has
      simulated times (`sim_time`) in one unit, else "training".

  Returns:
    One of "training", "wall", "simulated".

  Raises:
    ValueError: one line, for an unknown name, or "simulated" when a run has
      no simulated times or the runs' clocks count different units (modeled
      seconds against local steps, `curves.sim_unit`).
  """
  if time_base == "auto":
    return curves.default_time_base(runs)
  for run in runs:
    curves.effective_time_base(run, time_base)  # Raises where it cannot be.
  if time_base == "simulated" and not curves.shared_sim_unit(runs):
    raise ValueError(
        "the runs' simulated clocks count different units (" + ", ".join(
            f"{run.name}: {curves.sim_unit(run)}" for run in runs) +
        "); use the training or wall time base")
  return time_base


def describe_train_curve(curve: str, window: float, time_base: str,
                         sim_unit: str = "steps",
                         metric: str = "accuracy") -> str:
  """One line saying what E train's f is.

  `sim_unit` is what the runs' simulated clock counts (`curves.sim_unit`),
  `metric` the one E reads.

  Example:
    >>> print(describe_train_curve("thesis", 5.0, "simulated"))
    ... # doctest: +NORMALIZE_WHITESPACE
    every local step's training accuracy of every worker, timed from the
    run's first step and averaged over a sliding window of 10 local steps
    (5 s at 0.5 s per step, the thesis' pace) moved by 2
    >>> print(describe_train_curve("thesis", 5.0, "simulated", "seconds"))
    ... # doctest: +NORMALIZE_WHITESPACE
    every local step's training accuracy of every worker, timed from the
    run's first step and averaged over a sliding window of 5 modeled s moved
    by 1 s
  """
  if curve == "thesis":
    if time_base == "simulated" and sim_unit == "seconds":
      span = f"{window:g} modeled s moved by {window / 5:g} s"
    elif time_base == "simulated":
      size = curves.efficiency_window(window, time_base)
      span = (f"{size:g} local steps ({window:g} s at "
              f"{curves.THESIS_SECONDS_PER_STEP:g} s per step, the thesis' "
              f"pace) moved by {size / 5:g}")
    else:
      span = f"{window:g} s moved by {window / 5:g} s"
    return (f"every local step's training {metric} of every worker, timed "
            "from the run's first step and averaged over a sliding window "
            f"of {span}")
  unit = ("s" if time_base != "simulated" else "modeled s"
          if sim_unit == "seconds" else "local steps")
  return (f"each commit's mean training {metric}, averaged over consecutive "
          f"windows of {window:g} {unit}, with (0, 0) in front")


def _train_efficiency(run_a: Run, run_b: Run, window: float, base: str,
                      curve: str, metric: str,
                      higher: bool) -> Optional[float]:
  """E train of `curve` on `metric` (see `efficiency`), or None."""
  if curve == "thesis":
    (times_a, values_a), (times_b, values_b) = (
        curves.step_curve(run_a, base, metric),
        curves.step_curve(run_b, base, metric))
    size = curves.efficiency_window(window, base, curves.sim_unit(run_a))
    compute = lambda: metrics.thesis_efficiency(
        times_a, values_a, times_b, values_b, size, higher_is_better=higher)
  else:
    (times_a, values_a), (times_b, values_b) = (
        curves.train_curve(run_a, window, base, metric),
        curves.train_curve(run_b, window, base, metric))
    compute = lambda: metrics.temporal_efficiency(
        times_a, values_a, times_b, values_b,
        initial_value=0.0 if higher else None, higher_is_better=higher)
  if not len(times_a) or not len(times_b):
    return None
  try:
    return compute()
  except ValueError:
    return None


def shared_metric(runs: Sequence[Run]) -> Optional[str]:
  """The efficiency metric every run's task declares (`curves.efficiency_metric`), or None if they differ."""
  found = {curves.efficiency_metric(run) for run in runs}
  return found.pop() if len(found) == 1 else None


def efficiency(run_a: Run, run_b: Run,
               window: float = TRAIN_WINDOW_SECONDS,
               time_base: str = "auto",
               curve: str = EFFICIENCY_CURVES[0],
               metric: Optional[str] = None) -> Dict[str, object]:
  """E(a, b) on the center's test metric ("test") and on the workers' training metric ("train").

  The test curve starts at t = 0 of the time base: on "training", the start
  barrier; what happened before it (start-up, compilation) does not count.
  The training curve is `curve`'s (module docstring): the thesis' starts at
  each run's first local step.

  Args:
    run_a: run a.
    run_b: run b.
    window: the training curve's window, in seconds (`--efficiency_window`).
    time_base: one of `TIME_BASES` ("auto": `choose_time_base([a, b])`).
    curve: one of `EFFICIENCY_CURVES`.
    metric: what f is: "loss" or one of the runs' task's metrics; None:
      their shared efficiency metric (`shared_metric`; classification's
      accuracy). On a metric lower-is-better E is ∫f_b / ∫f_a
      (`agn_jax.metrics.temporal_efficiency`), and a test curve that
      starts late holds its first value back to t = 0 (not 0, its best).

  Returns:
    `{"test": E or None, "train": E or None, "metric": metric or None,
    "curve": curve, "time_base":
    the base asked for, "time_bases": (run a's base, run b's base),
    "same_time_base": bool}`. An E is None when the runs' tasks share no
    efficiency metric (or one of them lacks `metric`), when either run
    lacks the events it needs (a run written before commit rows had step
    accuracies has no
    thesis curve), a curve is too short (the thesis' ends at its last window
    start, which must come after its first) or the ratio is undefined (run
    b's curve integrates to 0). A run without the base asked for (an old run
    has only "wall") is on its own base, and `same_time_base` is then False:
    its E compares unlike times.

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
  if curve not in EFFICIENCY_CURVES:
    raise ValueError(f"curve must be one of {', '.join(EFFICIENCY_CURVES)}, "
                     f"got {curve!r}")
  base = choose_time_base([run_a, run_b], time_base)
  bases = (curves.effective_time_base(run_a, base),
           curves.effective_time_base(run_b, base))
  metric = metric or shared_metric([run_a, run_b])
  result = {"test": None, "train": None, "metric": metric}
  try:
    directions = {curves.higher_is_better(r, metric)
                  for r in (run_a, run_b)} if metric else set()
  except ValueError:  # A run's task has no such metric.
    directions = set()
  if len(directions) == 1:
    higher = directions.pop()
    (times_a, values_a), (times_b, values_b) = (
        curves.from_zero(*curves.eval_curve(r, base, metric))
        for r in (run_a, run_b))
    if len(times_a) and len(times_b):
      try:
        result["test"] = metrics.temporal_efficiency(
            times_a, values_a, times_b, values_b,
            initial_value=0.0 if higher else None, higher_is_better=higher)
      except ValueError:
        pass
    result["train"] = _train_efficiency(run_a, run_b, window, base, curve,
                                        metric, higher)
  result.update(curve=curve, time_base=base, time_bases=bases,
                same_time_base=bases[0] == bases[1])
  return result


def data_budget(run: Run) -> Dict[str, object]:
  """How much data `run` trained on, and on what model.

  Read from config.json, else from a `config` object in summary.json.

  Args:
    run: a run.

  Returns:
    `{key: value}` for every key of `BUDGET_KEYS`: task (classification
    for a run written before tasks had names), dataset, dataset_size
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
  if config and budget.get("task") is None:
    budget["task"] = "classification"  # Written before tasks had names.
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


def final_metric(run: Run, metric: Optional[str] = None) -> Optional[float]:
  """The last test value of `metric` (default: the run's efficiency metric, `curves.efficiency_metric`): the summary's `final_test_<metric>`, else the last eval event's."""
  metric = metric or curves.efficiency_metric(run)
  value = run.summary.get(f"final_test_{metric}")
  if isinstance(value, (int, float)) and not isinstance(value, bool):
    return float(value)
  _, values = eval_curve(run, metric=metric)
  return float(values[-1]) if len(values) else None


def wall_time(run: Run) -> Optional[float]:
  """The run's wall time: the summary's, else its last event's time."""
  value = run.summary.get("wall_seconds")
  if isinstance(value, (int, float)):
    return float(value)
  times = np.concatenate([run.commits["time"], run.evals["time"]])
  return float(times.max()) if len(times) else None


def run_outcome(run: Run) -> Optional[str]:
  """How the run ended by its summary.json: completed, interrupted, failed, or None (no summary)."""
  from agn_jax.runtime import bookkeeping  # pylint: disable=g-import-not-at-top
  return bookkeeping.outcome(run.summary or {})


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


# `--pairs`: which pairs of runs get an E. Every pair is n(n - 1)/2 of them
# (45 for 10 runs, 2 million for 2,000); past ALL_PAIRS_UP_TO runs `auto`
# takes the first run as the reference of every other, as a sweep does.
PAIRS = ("auto", "all", "first")
PROGRESS_FROM = 100  # Runs from which reading them shows a progress bar.
ALL_PAIRS_UP_TO = 10


def chosen_pairs(n: int, pairs: str = "auto") -> List[Tuple[int, int]]:
  """The (a, b) index pairs that get an E among `n` runs (`PAIRS`).

  Example:
    >>> chosen_pairs(3), chosen_pairs(3, "first")
    ([(0, 1), (0, 2), (1, 2)], [(0, 1), (0, 2)])
    >>> len(chosen_pairs(2000))
    1999
  """
  if pairs not in PAIRS:
    raise ValueError(f"--pairs accepts {', '.join(PAIRS)}, got {pairs!r}")
  if pairs == "all" or (pairs == "auto" and n <= ALL_PAIRS_UP_TO):
    return list(itertools.combinations(range(n), 2))
  return [(0, j) for j in range(1, n)]


def comparison(runs: Sequence[Run], window: float = TRAIN_WINDOW_SECONDS,
               time_base: str = "auto",
               curve: str = EFFICIENCY_CURVES[0],
               pairs: str = "auto") -> Dict[str, object]:
  """Everything `compare` reports, as a JSON-ready dict.

  Args:
    runs: two or more runs.
    window: seconds of the training-accuracy window (`efficiency`).
    time_base: one of `TIME_BASES`.
    curve: E train's curve, one of `EFFICIENCY_CURVES`.
    pairs: which pairs get an E (`chosen_pairs`).

  Returns:
    `{"time_base", "time_base_description", "efficiency_curve",
    "efficiency_window", "train_curve_description", "convergence_rule",
    "metric": the runs' shared efficiency metric (None if they differ),
    "runs": [per run: name, path, time_base, metric (its efficiency
    metric), final_test_<metric>, training_seconds, startup_seconds,
    commits, convergence, data_budget, instruments
    (`instruments_summary`)],
    "same_time_base", "same_budget", "differing_budget", "warnings":
    [lines], "pairs": [a, b, test, train]}`.

  Raises:
    ValueError: as `choose_time_base`.
  """
  base = choose_time_base(runs, time_base)
  names = labels(runs)
  per_run = []
  for name, run in zip(names, runs):
    run_base = curves.effective_time_base(run, base)
    metric = curves.efficiency_metric(run)
    per_run.append({
        "name": name, "path": run.path, "time_base": run_base,
        "metric": metric, f"final_test_{metric}": final_metric(run, metric),
        "training_seconds": training_seconds(run, base),
        "startup_seconds": curves.startup_seconds(run),
        "commits": int(len(run.commits["time"])),
        "convergence": curves.convergence(run),
        "outcome": run_outcome(run),
        "data_budget": data_budget(run),
        "instruments": instruments_summary(run)})
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
  unfinished = [f"{r['name']} {r['outcome']}" +
                (f" ({run.summary['failure']})"
                 if isinstance(run.summary.get("failure"), str) else "")
                for r, run in zip(per_run, runs)
                if r["outcome"] not in ("completed", None)]
  if unfinished:
    warnings.append("not every run completed (summary.json): " +
                    "; ".join(unfinished) + "; its curves end where it "
                    "stopped")
  if shared_metric(runs) is None:
    warnings.append(
        "the runs' tasks declare different efficiency metrics (" +
        ", ".join(f"{r['name']}: {r['metric']}" for r in per_run) +
        "); E is n/a")
  same, differing = same_budget(runs)
  if not same:
    warnings.append(
        "the runs do not share a data budget: " + "; ".join(
            f"{key} differs (" + ", ".join(
                f"{r['name']}: {_budget_text(r['data_budget'][key])}"
                for r in per_run) + ")" for key in differing) +
        "; E compares runs that saw different data")
  chosen = []
  for i, j in chosen_pairs(len(runs), pairs):
    e = efficiency(runs[i], runs[j], window, base, curve)
    chosen.append({"a": names[i], "b": names[j], "test": e["test"],
                   "train": e["train"]})
  return {"time_base": base,
          "time_base_description": curves.TIME_BASE_DESCRIPTIONS[base],
          "metric": shared_metric(runs),
          "efficiency_curve": curve, "efficiency_window": window,
          "train_curve_description": describe_train_curve(
              curve, window, base, curves.shared_sim_unit(runs) or "steps",
              shared_metric(runs) or "metric"),
          "convergence_rule": metrics.CONVERGENCE_RULE, "runs": per_run,
          "same_time_base": same_base, "same_budget": same,
          "differing_budget": differing, "warnings": warnings,
          "pairs": chosen}


def instruments_summary(run: Run) -> Optional[Dict[str, object]]:
  """What `--diagnostics` measured over the run (summary.json's `implicit_momentum`, `theory_momentum`, `mean_<instrument>`, `instrumented_commits`), or None without them."""
  keys = ("implicit_momentum", "theory_momentum", "instrumented_commits",
          *(f"mean_{name}" for name in events.INSTRUMENTS))
  if "instrumented_commits" not in run.summary:
    return None
  return {key: run.summary.get(key) for key in keys}


def comparison_table(runs: Sequence[Run],
                     window: float = TRAIN_WINDOW_SECONDS,
                     time_base: str = "auto",
                     report: Optional[Dict[str, object]] = None,
                     curve: str = EFFICIENCY_CURVES[0]) -> str:
  """The text `compare` prints: warnings, the time base, one line per run, then E for every pair."""
  report = report or comparison(runs, window, time_base, curve)
  names = [r["name"] for r in report["runs"]]
  width = max(len(n) for n in names) + 2
  lines = [f"WARNING: {w}" for w in report["warnings"]]
  if lines:
    lines.append("")
  lines.append(f"time base: {report['time_base']} "
               f"({report['time_base_description']})")
  lines.append("")
  test = f"test {report['metric'] or 'metric'}"
  column = max(10, len(test) + 2)
  lines.append(f"{'run':<{width}}{test:>{column}}{'time (s)':>10}"
               f"{'start-up (s)':>14}{'commits':>9}  convergence")
  for r in report["runs"]:
    final = r[f"final_test_{r['metric']}"]
    lines.append(f"{r['name']:<{width}}{_format(final):>{column}}"
                 f"{_format(r['training_seconds'], '.2f'):>10}"
                 f"{_format(r['startup_seconds'], '.2f'):>14}"
                 f"{r['commits']:>9d}  {r['convergence']}")
  lines.append(f"convergence: {report['convergence_rule']}")
  lines.append("")
  lines.append(f"E train ({report['efficiency_curve']}): "
               f"{report['train_curve_description']}")
  lines.append(f"{'a':<{width}}{'b':<{width}}{'E test':>10}"
               f"{'E train':>10}")
  for pair in report["pairs"]:
    lines.append(f"{pair['a']:<{width}}{pair['b']:<{width}}"
                 f"{_format(pair['test']):>10}{_format(pair['train']):>10}")
  if any(pair["train"] is None for pair in report["pairs"]):
    lines += ["", "E train n/a: a run has no rows the curve needs (step "
              "values: rows older than them), its curve ends within one "
              "step of its window (a run shorter than that; see "
              "--efficiency_window), or b's curve integrates to 0."]
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
    # Many runs (a sweep's, a study's) take seconds to read: say how far.
    runs = [read_run(d) for d in tqdm.tqdm(
        run_dirs, desc="reading runs", unit="run", leave=False,
        disable=len(run_dirs) < PROGRESS_FROM)]
  except RunDirError as e:
    flags_lib.exit_with_error(program, e)
  window = flags.FLAGS.efficiency_window
  try:
    report = comparison(runs, window, flags.FLAGS.time_base,
                        flags.FLAGS.efficiency_curve, flags.FLAGS.pairs)
  except ValueError as e:
    flags_lib.exit_with_error(program, f"--time_base={flags.FLAGS.time_base}: "
                              f"{e}", status=2)
  print(comparison_table(runs, window, report=report))
  output = flags.FLAGS.output or default_output(run_dirs[0])
  json_path = os.path.splitext(output)[0] + ".json"
  try:
    plots.plot_comparison(runs, output, labels(runs), window,
                          time_base=report["time_base"])
    traces = plots.plot_instruments(
        runs, os.path.splitext(output)[0] + "-instruments.png", labels(runs),
        time_base=report["time_base"])
    with open(json_path, "w") as f:
      f.write(events.strict_json(report, indent=2))
      f.write("\n")
  except OSError as e:
    flags_lib.exit_with_error(program, f"--output={output}: cannot write "
                              f"({e.strerror or e})")
  print(f"\nplot: {output}\nnumbers: {json_path}")
  if traces:
    print(f"instruments: {traces}")


def define_efficiency_flags(flag_values: flags.FlagValues = flags.FLAGS
                            ) -> None:
  """--efficiency_curve and --efficiency_window, for every program that computes E."""
  flags.DEFINE_enum(
      "efficiency_curve", EFFICIENCY_CURVES[0], list(EFFICIENCY_CURVES),
      "The workers' training curve of E train, on the runs' efficiency "
      "metric (their task's: classification's accuracy): thesis (every local "
      "step's value, a sliding --efficiency_window moved by a fifth of "
      "it, from each run's first step, as the thesis computed E) or commits "
      "(one sample per commit, consecutive windows, (0, 0) in front). E test "
      "(the center's test value) is always computed.",
      flag_values=flag_values)
  flags.DEFINE_float(
      "efficiency_window", TRAIN_WINDOW_SECONDS,
      "Seconds over which E train's curve averages the training metric "
      "(the thesis: 5). On simulated time the thesis curve counts local "
      f"steps, {1 / curves.THESIS_SECONDS_PER_STEP:g} per second (the "
      "thesis' pace); the commits curve takes it in the time base's units.",
      flag_values=flag_values)
  flags.register_validator(
      "efficiency_window", lambda v: v is not None and np.isfinite(v) and v > 0,
      message="--efficiency_window accepts a finite number > 0",
      flag_values=flag_values)


def _define_flags():
  flags.DEFINE_string("output", None, "Where to draw the curves of all runs; "
                      "default compare.png beside the first run. The numbers "
                      "go beside it as JSON (compare.json).")
  define_efficiency_flags()
  flags.DEFINE_enum(
      "time_base", "auto", list(TIME_BASES),
      "Time base of E and the plots: training (seconds since the start "
      "barrier, when all workers are ready; start-up is reported apart), "
      "wall (since train() began, start-up included), simulated (simulated "
      "seconds), or auto: simulated when every run has simulated times, "
      "else training.")
  flags.DEFINE_enum(
      "pairs", "auto", list(PAIRS),
      "Which pairs of runs get an E: all (every pair: n(n-1)/2 of them), "
      "first (the first run against each other one) or auto: all for up to "
      f"{ALL_PAIRS_UP_TO} runs, else first.")


if __name__ == "__main__":
  # Flags are defined only when run as a program, so train and sweep can
  # import the readers above without clashing flag names.
  _define_flags()
  app.run(main, flags_parser=lambda argv: flags_lib.parse_flags_or_exit(
      argv, allow_positional=True))
