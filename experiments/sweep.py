r"""Runs a grid of strategies × n × λ, one run after another.

  python -m experiments.sweep \
      --flagfile=experiments/configs/paper_mnist_agn.flags \
      --strategies=agn,aeasgd \
      --strategy_flagfile=aeasgd=experiments/configs/paper_mnist_aeasgd.flags \
      --num_workers=10,20,40 --communication_windows=10,20,40 \
      --sweep_dir=runs/paper-grid

Every flag of `experiments.train` applies to all runs. Which value a
strategy setting (`agn_jax.config.STRATEGY_SETTINGS`: optimizer, learning
rate, ρ, ...) takes, most specific first:
  1. a flag typed on the sweep's command line itself: every run;
  2. the strategy's --strategy_flagfile: that strategy's runs;
  3. a --flagfile on the command line: every run;
  4. the strategy's paper default (`agn_jax.strategies.paper_defaults`).
A --strategy_flagfile may set only strategy settings. It may repeat a shared
setting (dataset, epochs, batch size, ...) with the value every run gets, as
the paper's flagfiles do; a different value is an error naming the setting,
so no strategy ever trains on another data budget. Its strategy, num_workers,
communication_window and workdir are ignored: the grid sets them.

Each run goes to <sweep_dir>/<strategy>-n<N>-l<λ>; sweep.md, rewritten after
every run, gives per (n, λ) the final test accuracy and time of each strategy
and the temporal efficiency E(reference, other) of the first strategy against
each other one (on --time_base, with E train's curve from --efficiency_curve
and --efficiency_window, as `experiments.compare` computes them; it states
both), the paper's n × λ tables of E, the fraction of cells with E > 1, each
run's convergence (`agn_jax.metrics.convergence`, whose rule it states),
every setting that differs between strategies, and a warning at the top when
their data budgets differ.

--resume keeps the runs whose summary.json says they completed, resumes the
ones with a checkpoint, and reruns from scratch those that failed before
their first checkpoint (their files are moved aside, not deleted). A cell that
fails is reported in sweep.md and the sweep goes on; the exit status is then 1
with one line naming the failed cells.
"""

import json
import os
import shlex
import sys
import time
from typing import Dict, List, Optional, Sequence, Tuple

from absl import app
from absl import flags
from absl import logging

from agn_jax import config as config_lib
from agn_jax import metrics
from agn_jax import workdir as workdir_lib
from agn_jax.data import DataError
from agn_jax.errors import CheckpointError, WorkdirBusy, WorkdirError
from experiments import compare
from experiments import curves
from experiments import flags as flags_lib
from experiments import rundirs
from experiments import startup
from experiments import train as train_lib

FLAGS = flags.FLAGS
Cell = Tuple[str, int, int]  # (strategy, num_workers, communication_window)

# Set per run by the grid, never by a flag or a strategy flagfile.
_GRID_FIELDS = config_lib.fields_where("per_run")


def run_dir(sweep_dir: str, strategy: str, num_workers: int,
            communication_window: int) -> str:
  return os.path.join(sweep_dir,
                      f"{strategy}-n{num_workers}-l{communication_window}")


def _read(workdir: str) -> Optional[compare.Run]:
  """The run, if it completed and can be read; a result counts only then."""
  if not rundirs.completed(workdir):
    return None
  try:
    return compare.read_run(workdir)
  except compare.RunDirError as e:
    logging.warning("%s", e)
    return None


# Configs: what the command line and the strategy flagfiles say.


def shared_fields(flag_values: flags.FlagValues) -> Dict[str, object]:
  """Every `TrainConfig` field the flags give every run (the grid's excepted).

  Passed through generically, so a field added to `TrainConfig` and its flag
  (e.g. a `--backend`) reaches every run without a change here.
  """
  return {name: flags_lib.field_value(name, flag_values[name].value)
          for name in config_lib.setting_names()
          if name not in _GRID_FIELDS and name in flag_values}


def strategy_overrides(specs: Sequence[str],
                       shared: Optional[Dict[str, object]] = None
                       ) -> Dict[str, Dict[str, object]]:
  """The strategy settings each `STRATEGY=PATH` flagfile sets explicitly.

  Args:
    specs: the --strategy_flagfile values.
    shared: the values every run gets (`shared_fields`); a flagfile may
      repeat one of them, not change it. None: any non-strategy setting is
      an error.

  Returns:
    `{strategy: {field: value}}`, fields from `config.STRATEGY_SETTINGS`.

  Raises:
    flags_lib.UsageError: one line, for an unreadable flagfile, a bad flag in
      it, another strategy's flagfile, or a setting outside
      `STRATEGY_SETTINGS` that differs from the shared value.
  """
  overrides = {}
  allowed = config_lib.STRATEGY_SETTINGS
  for spec in specs:
    strategy, _, path = spec.partition("=")
    path = flags_lib.shipped_config(path) or path  # A --config name too.
    flag_values = flags.FlagValues()
    flags_lib.define_train_flags(flag_values)
    try:
      flags_lib.parse(["sweep", f"--flagfile={path}"], flag_values)
    except flags_lib.UsageError as e:
      raise flags_lib.UsageError(
          f"--strategy_flagfile={spec}: {e}") from None
    given = {name: flags_lib.field_value(name, flag_values[name].value)
             for name in config_lib.setting_names()
             if name in flag_values and flag_values[name].present}
    if given.get("strategy", strategy) != strategy:
      raise flags_lib.UsageError(
          f"--strategy_flagfile={spec}: sets --strategy={given['strategy']}, "
          f"not {strategy}")
    for name, value in given.items():
      if name in allowed or name in _GRID_FIELDS:
        continue
      if shared is not None and name in shared and shared[name] == value:
        continue  # A repetition of the shared setting, not a change.
      now = (f"; every run of the sweep has {name}={shared[name]!r}"
             if shared is not None and name in shared else "")
      raise flags_lib.UsageError(
          f"--strategy_flagfile={spec}: sets {name}={value!r}{now}; a "
          f"strategy flagfile may set only {', '.join(allowed)} (settings "
          "that apply to every run go on the sweep's command line)")
    overrides.setdefault(strategy, {}).update(
        {k: v for k, v in given.items() if k in allowed})
  return overrides


def run_config(flag_values: flags.FlagValues, typed: set,
               per_strategy: Dict[str, Dict[str, object]], strategy: str,
               num_workers: int, communication_window: int, workdir: str,
               resume: bool) -> config_lib.TrainConfig:
  """One cell's config: shared flags, then the strategy's flagfile, then what was typed."""
  own = {name: value
         for name, value in per_strategy.get(strategy, {}).items()
         if name not in typed}
  return flags_lib.config_from_flags(
      flag_values, typed, strategy=strategy, num_workers=num_workers,
      communication_window=communication_window, workdir=workdir,
      resume=resume, **own)


def _used(config: config_lib.TrainConfig) -> Dict[str, object]:
  """The values a run uses: paper defaults filled in (`TrainConfig.resolved`)."""
  try:
    config = config.resolved()
  except ValueError:  # An unknown strategy: what was asked for.
    pass
  return config.to_dict()


def differing_settings(configs: Dict[str, Dict[str, object]]
                      ) -> Dict[str, Dict[str, object]]:
  """`{field: {strategy: value}}` for every field whose value differs between strategies."""
  names = [n for n in config_lib.setting_names() if n not in _GRID_FIELDS]
  out = {}
  for name in names:
    values = {s: c.get(name) for s, c in configs.items()}
    if len({json.dumps(v, sort_keys=True) for v in values.values()}) > 1:
      out[name] = values
  return out


# The report.


def _fmt(value: Optional[float], spec: str = ".4f") -> str:
  return "–" if value is None else format(value, spec)


def _fraction(values: Sequence[Optional[float]]) -> str:
  known = [v for v in values if v is not None]
  if not known:
    return "–"
  above = sum(v > 1 for v in known)
  return f"{above}/{len(known)} ({above / len(known):.2f})"


def _setting_text(value) -> str:
  if isinstance(value, str):
    return value
  if isinstance(value, float):
    return format(value, "g")
  return json.dumps(value)


def _efficiency(a: compare.Run, b: compare.Run, time_base: str, curve: str,
                window: float) -> dict:
  try:
    return compare.efficiency(a, b, window, time_base, curve)
  except (TypeError, ValueError) as e:
    logging.warning("E(%s, %s): %s", a.name, b.name, e)
    return {"test": None, "train": None}


def _budget_warning(configs: Dict[str, Dict[str, object]],
                    runs: Dict[Cell, Optional[compare.Run]]) -> List[str]:
  differ = [k for k in compare.BUDGET_KEYS
            if len({json.dumps(c.get(k)) for c in configs.values()}) > 1]
  # What the runs on disk say (kept runs may predate this command line).
  cells = {(n, l) for (_, n, l) in runs}
  for n, l in sorted(cells):
    found = [r for (s, nn, ll), r in runs.items()
             if (nn, ll) == (n, l) and r is not None]
    if len(found) > 1:
      same, keys = compare.same_budget(found)
      differ += [k for k in keys if not same and k not in differ]
  if not differ:
    return []
  return [f"> **Warning: the strategies do not train on the same data budget** "
          f"({', '.join(differ)} differ; see Settings). E compares unlike "
          "runs.", ""]


def report(sweep_dir: str, strategies: Sequence[str],
           num_workers: Sequence[int], windows: Sequence[int],
           failed: Optional[Dict[Cell, str]] = None,
           command: str = "",
           configs: Optional[Dict[str, Dict[str, object]]] = None,
           time_base: str = "auto",
           curve: str = compare.EFFICIENCY_CURVES[0],
           window: float = compare.TRAIN_WINDOW_SECONDS) -> str:
  """sweep.md's text, from the completed runs found in `sweep_dir`.

  The first strategy is the reference: E(reference, other) for every other.

  Args:
    sweep_dir: the sweep's directory.
    strategies: the strategies, reference first.
    num_workers: the grid's n.
    windows: the grid's λ.
    failed: `{(strategy, n, λ): message}` of the cells that failed.
    command: the sweep's command line.
    configs: `{strategy: config dict}` each strategy's runs use (values
      resolved); its differences are listed, its data budget compared.
    time_base: the time base of E (`compare.TIME_BASES`).
    curve: E train's curve (`compare.EFFICIENCY_CURVES`).
    window: E train's window in seconds (`compare.efficiency`).
  """
  failed = failed or {}
  configs = configs or {}
  reference, others = strategies[0], list(strategies[1:])
  runs = {(s, n, l): _read(run_dir(sweep_dir, s, n, l))
          for s in strategies for n in num_workers for l in windows}
  efficiencies = {}
  bases = set()
  for s in others:
    for n in num_workers:
      for l in windows:
        a, b = runs[(reference, n, l)], runs[(s, n, l)]
        e = (_efficiency(a, b, time_base, curve, window) if a and b else
             {"test": None, "train": None})
        efficiencies[(s, n, l)] = e
        if e.get("time_base"):
          bases.add(e["time_base"])
        if e.get("same_time_base") is False:
          bases.add("mixed: " + " vs ".join(e.get("time_bases", ())))

  lines = ["# Sweep", ""]
  lines += _budget_warning(configs, runs)
  if command:
    lines += ["```", command, "```", ""]
  described = curves.TIME_BASE_DESCRIPTIONS
  if bases:
    base_text = "; ".join(
        f"{b} ({described[b]})" if b in described else b
        for b in sorted(bases))
  else:
    base_text = f"{time_base} (no E computed yet)"
  train_base = (next(iter(bases)) if len(bases) == 1 else
                time_base if time_base != "auto" else "training")
  metric = compare.shared_metric([r for r in runs.values() if r]) or "metric"
  lines += [f"Reference strategy: **{reference}**. E(a, b) = ∫₀^m f_a dt / "
            "∫₀^m f_b dt over the shorter run's time m; *test*: the center's "
            f"test {metric}; *train* (`--efficiency_curve={curve}`): "
            + compare.describe_train_curve(
                curve, window, train_base, curves.shared_sim_unit(
                    [r for r in runs.values() if r]) or "steps", metric)
            + ". E > 1: the reference was better sooner.", "",
            f"Time base of E: {base_text}.", ""]

  header = ["n", "λ"]
  for s in strategies:
    header += [f"{s} {'acc' if metric == 'accuracy' else metric}",
               f"{s} time (s)"]
  for s in others:
    header += [f"E test ({reference}, {s})", f"E train ({reference}, {s})"]
  lines += ["## Runs", "", "| " + " | ".join(header) + " |",
            "|" + "---|" * len(header)]
  for n in num_workers:
    for l in windows:
      row = [str(n), str(l)]
      for s in strategies:
        run = runs[(s, n, l)]
        if run is None:
          status = "failed" if (s, n, l) in failed else "–"
          row += [status, "–"]
        else:
          row += [_fmt(compare.final_metric(run)),
                  _fmt(compare.wall_time(run), ".1f")]
      for s in others:
        e = efficiencies[(s, n, l)]
        row += [_fmt(e["test"]), _fmt(e["train"])]
      lines.append("| " + " | ".join(row) + " |")
  lines.append("")

  for s in others:
    for version in ("test", "train"):
      lines += [f"## E {version} ({reference}, {s}): n × λ", "",
                "| n \\ λ | " + " | ".join(str(l) for l in windows) + " |",
                "|" + "---|" * (len(windows) + 1)]
      for n in num_workers:
        lines.append(f"| {n} | " + " | ".join(
            _fmt(efficiencies[(s, n, l)][version], ".3f")
            for l in windows) + " |")
      lines.append("")

  lines += ["## Convergence", "",
            f"Rule: {metrics.CONVERGENCE_RULE}.", "",
            "| n | λ | " + " | ".join(strategies) + " |",
            "|" + "---|" * (len(strategies) + 2)]
  for n in num_workers:
    for l in windows:
      lines.append(f"| {n} | {l} | " + " | ".join(
          "–" if runs[(s, n, l)] is None else
          curves.convergence(runs[(s, n, l)])
          for s in strategies) + " |")
  lines.append("")

  if others:
    lines += [f"## Fraction of cells where E({reference}, other) > 1", "",
              "| other | E test | E train |", "|---|---|---|"]
    for s in others:
      values = [efficiencies[(s, n, l)] for n in num_workers for l in windows]
      lines.append(f"| {s} | {_fraction([v['test'] for v in values])} | "
                   f"{_fraction([v['train'] for v in values])} |")
    lines.append("")

  if configs:
    differ = differing_settings(configs)
    lines += ["## Settings that differ between strategies", ""]
    if differ:
      lines += ["| setting | " + " | ".join(strategies) + " |",
                "|" + "---|" * (len(strategies) + 1)]
      for name, values in differ.items():
        lines.append(f"| {name} | " + " | ".join(
            _setting_text(values.get(s)) for s in strategies) + " |")
    else:
      lines.append("None: every strategy runs with the same settings.")
    lines.append("")

  if failed:
    lines += ["## Failed runs", ""]
    lines += [f"- {s} n={n} λ={l}: {message}"
              for (s, n, l), message in sorted(failed.items())]
    lines.append("")
  return "\n".join(lines)


def _check_name(name: str) -> None:
  """Raises `ValueError` (one line) unless `name` names a strategy, as `--strategy` takes it: registered, or package.module:function."""
  # The registry imports JAX: read only when a flag names strategies.
  from agn_jax import strategies  # pylint: disable=g-import-not-at-top
  strategies.check_name(name)


def _check_strategies(value) -> bool:
  if value is None:
    return True
  if not value or len(set(value)) != len(value):
    raise flags.ValidationError(
        "--strategies accepts distinct strategies, comma-separated")
  for name in value:
    try:
      _check_name(name)
    except ValueError as e:
      raise flags.ValidationError(str(e)) from None
  return True


def _check_strategy_flagfile(value) -> bool:
  for spec in value or ():
    name, _, path = spec.partition("=")
    try:
      if not path:
        raise ValueError("no PATH")
      _check_name(name)
    except ValueError as e:
      raise flags.ValidationError(
          f"--strategy_flagfile accepts STRATEGY=PATH, STRATEGY as "
          f"--strategy takes it: {spec!r}: {e}") from None
  return True


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """The training flags (every run's) plus the grid's."""
  # --strategy and --communication_window stay defined, so a train flagfile
  # works here too; --strategies and --communication_windows override them.
  flags_lib.define_train_flags(flag_values,
                               skip=("num_workers", "workdir", "resume"))
  flags.DEFINE_list("strategies", None,
                    "Strategies to run, comma-separated, each as --strategy "
                    "takes it (a registered name, or package.module:function);"
                    " the first is the reference of E. Default: --strategy "
                    "alone.",
                    flag_values=flag_values)
  flags.DEFINE_list("num_workers", [str(config_lib.TrainConfig.num_workers)],
                    "Numbers of workers n, comma-separated.",
                    flag_values=flag_values)
  flags.DEFINE_list("communication_windows", None,
                    "Communication windows λ, comma-separated. Default: "
                    "--communication_window alone.", flag_values=flag_values)
  flags.DEFINE_string("sweep_dir", None,
                      "Where runs and sweep.md go; default "
                      "runs/sweep-<timestamp>.", flag_values=flag_values)
  flags.DEFINE_multi_string(
      "strategy_flagfile", [],
      "STRATEGY=PATH, repeatable: that strategy's own settings ("
      f"{', '.join(config_lib.STRATEGY_SETTINGS)}) for its runs only, e.g. "
      "aeasgd=experiments/configs/paper_mnist_aeasgd.flags, or the name of "
      "a shipped configuration (aeasgd=paper_mnist_aeasgd). Flags typed on "
      "the command line win over it; any other setting in it must equal "
      "the one every run gets.", flag_values=flag_values)
  flags.DEFINE_enum(
      "time_base", "auto", list(compare.TIME_BASES),
      "Time base of E in sweep.md (see experiments.compare).",
      flag_values=flag_values)
  compare.define_efficiency_flags(flag_values)
  flags.DEFINE_bool("resume", False,
                    "Keep the completed runs found in --sweep_dir, resume the "
                    "ones with a checkpoint, rerun the others.",
                    flag_values=flag_values)
  flags.register_validator("strategies", _check_strategies,
                           flag_values=flag_values)
  flags.register_validator("strategy_flagfile", _check_strategy_flagfile,
                           flag_values=flag_values)
  for name in ("num_workers", "communication_windows"):
    flags.register_validator(
        name, lambda v: v is None or (flags_lib.positive_int_list(v) and len(
            {int(x) for x in v}) == len(v)),
        message=f"--{name} accepts distinct integers in [1, "
        f"{config_lib.MAX_INT}], comma-separated", flag_values=flag_values)


def _cell_name(cell: Cell) -> str:
  s, n, l = cell
  return f"{s} n={n} λ={l}"


def main(argv):
  program = "sweep"
  del argv
  startup.redeliver_dropped_interrupts()
  from agn_jax import runtime  # pylint: disable=g-import-not-at-top

  typed = flags_lib.typed_flags(sys.argv, FLAGS)
  try:
    per_strategy = strategy_overrides(FLAGS.strategy_flagfile,
                                      shared_fields(FLAGS))
  except flags_lib.UsageError as e:
    flags_lib.exit_with_error(program, e, status=2)
  strategies = list(FLAGS.strategies or [FLAGS.strategy])
  num_workers = [int(n) for n in FLAGS.num_workers]
  windows = [int(l) for l in
             FLAGS.communication_windows or [FLAGS.communication_window]]
  # Every cell is checked before the first runs: a grid that fails at its
  # last cell would otherwise have spent the others' time.
  for s in strategies:
    for n in num_workers:
      for l in windows:
        try:
          run_config(FLAGS, typed, per_strategy, s, n, l, "", False).validate()
        except (flags_lib.UsageError, ValueError) as e:
          flags_lib.exit_with_error(
              program, f"the cell {_cell_name((s, n, l))}: {e}", status=2)
  sweep_dir = FLAGS.sweep_dir or os.path.join(
      "runs", "sweep-" + time.strftime("%Y%m%d-%H%M%S"))
  if os.path.lexists(sweep_dir) and not os.path.isdir(sweep_dir):
    flags_lib.exit_with_error(program, f"--sweep_dir={sweep_dir} is a file",
                              status=2)
  argv = ["python", "-m", "experiments.sweep"] + sys.argv[1:]
  command = shlex.join(argv)
  try:
    # One sweep per directory: a second one (say, two --resume at once)
    # would run the same cells twice.
    lock = workdir_lib.lock_workdir(sweep_dir, create=True, owner=command,
                                    flag="--sweep_dir")
  except (WorkdirError, WorkdirBusy) as e:
    flags_lib.exit_with_error(program, e, status=2)
  with lock:
    if workdir_lib.entries(sweep_dir) and not FLAGS.resume:
      flags_lib.exit_with_error(
          program, f"--sweep_dir={sweep_dir} already holds files; pass "
          "--resume to continue that sweep or choose another --sweep_dir",
          status=2)
    _sweep(program, runtime, sweep_dir, command, argv, typed, per_strategy,
           strategies, num_workers, windows)


def _sweep(program, runtime, sweep_dir, command, argv, typed, per_strategy,
           strategies, num_workers, windows):
  """Runs every cell in order, keeping the report up to date."""
  report_path = os.path.join(sweep_dir, "sweep.md")
  failed: Dict[Cell, str] = {}
  cells = [(s, n, l) for n in num_workers for l in windows
           for s in strategies]
  # Each strategy's settings (those of its first cell: only the grid varies).
  configs = {
      s: _used(run_config(FLAGS, typed, per_strategy, s, num_workers[0],
                          windows[0], "", False)) for s in strategies}

  def update_report():
    rundirs.write_report(report_path, report(
        sweep_dir, strategies, num_workers, windows, failed, command, configs,
        FLAGS.time_base, FLAGS.efficiency_curve, FLAGS.efficiency_window))

  for index, cell in enumerate(cells, 1):
    s, n, l = cell
    workdir = run_dir(sweep_dir, s, n, l)
    action = rundirs.cell_action(workdir)
    if action == "keep":
      logging.info("[%d/%d] %s: completed earlier, kept", index, len(cells),
                   workdir)
      continue
    if action == "restart":
      try:
        moved = rundirs.move_aside(workdir)
      except (WorkdirBusy, WorkdirError) as e:  # A run of its own holds it.
        failed[cell] = " ".join(str(e).split())
        update_report()
        continue
      logging.warning("[%d/%d] %s failed before its first checkpoint; its "
                      "files are in %s, running it again", index, len(cells),
                      workdir, moved)
    for attempt in ("resume", "fresh") if action == "resume" else ("fresh",):
      config = run_config(FLAGS, typed, per_strategy, s, n, l, workdir,
                          resume=attempt == "resume")
      logging.info("[%d/%d] %s n=%d λ=%d -> %s (%s)", index, len(cells), s, n,
                   l, workdir, attempt)
      outcome = _run_cell(program, runtime, config, argv, update_report)
      if (attempt == "resume" and isinstance(outcome, CheckpointError)):
        moved = rundirs.move_aside(workdir)
        logging.warning("%s: cannot resume (%s); its files are in %s, "
                        "running it again", workdir, outcome, moved)
        continue
      break
    if isinstance(outcome, Exception):
      failed[cell] = " ".join(str(outcome).split())
      logging.error("%s failed: %s", _cell_name(cell), failed[cell])
    elif not rundirs.completed(workdir):
      summary = rundirs.read_summary(workdir) or {}
      how = summary.get("outcome") or "without completing its share"
      if summary.get("failure"):
        how += f": {summary['failure']}"
      failed[cell] = (f"ended {how} (see "
                      f"{os.path.join(workdir, 'summary.json')})")
    update_report()
  update_report()
  with open(report_path) as f:
    print(f.read())
  print(f"report: {report_path}")
  if failed:
    names = ", ".join(_cell_name(c) for c in cells if c in failed)
    flags_lib.exit_with_error(
        program, f"{len(failed)} of {len(cells)} runs failed ({names}); see "
        f"{report_path}")


def _run_cell(program, runtime, config, argv, update_report):
  """Trains one cell; returns None, or the exception that ended it (not an interrupt)."""
  with train_lib.sigterm_as_interrupt():
    try:
      _, rows = train_lib.train_and_report(config, runtime.train,
                                           command=argv,
                                           plots=FLAGS.plots)
      logging.info("%s: %s", config.workdir, rows)
      return None
    except runtime.NothingToDo as e:
      logging.info("%s", e)  # Completed already: nothing was touched.
      return None
    except KeyboardInterrupt as e:
      update_report()
      if train_lib.was_terminated(e):
        flags_lib.exit_with_error(program, "terminated (SIGTERM); rerun "
                                  "with --resume to continue",
                                  status=train_lib.EXIT_TERMINATED)
      flags_lib.exit_with_error(program, "interrupted; rerun with --resume "
                                "to continue",
                                status=train_lib.EXIT_INTERRUPTED)
    except DataError as e:
      # The data cannot be loaded: the same for every cell of the grid.
      train_lib.remove_if_unstarted(config.workdir)
      update_report()
      flags_lib.exit_with_error(program, e)
    except (runtime.RunError, ValueError, RuntimeError, OSError) as e:
      # A run error, a config the data cannot satisfy at this (n, λ), a
      # checkpoint that cannot be resumed, a workdir held by another run.
      train_lib.remove_if_unstarted(config.workdir)
      return e


if __name__ == "__main__":
  define_flags()
  app.run(main, flags_parser=flags_lib.parse_flags_or_exit)
