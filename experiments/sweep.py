r"""Runs a grid of strategies × n × λ, one run after another.

  python -m experiments.sweep \
      --flagfile=experiments/configs/paper_mnist_agn.flags \
      --strategies=agn,aeasgd \
      --strategy_flagfile=aeasgd=experiments/configs/paper_mnist_aeasgd.flags \
      --num_workers=10,20,40 --communication_windows=10,20,40 \
      --sweep_dir=runs/paper-grid

Every other flag of `experiments.train` applies to all runs (flags are read
in order: a --flagfile first, the grid after it); --strategy_flagfile adds
flags for one strategy only. Each run goes to
<sweep_dir>/<strategy>-n<N>-l<λ>; sweep.md, rewritten after every run, gives
per (n, λ) the final test accuracy and time of each strategy and the temporal
efficiency E(reference, other) of the first strategy against each other one,
then the paper's n × λ tables of E and the fraction of cells with E > 1.
--resume keeps the finished runs of an interrupted sweep and continues.
"""

import os
import shlex
import sys
import time
from typing import Dict, Optional, Sequence, Tuple

from absl import app
from absl import flags
from absl import logging

from agn_jax import config as config_lib
from experiments import compare
from experiments import flags as flags_lib
from experiments import train as train_lib

FLAGS = flags.FLAGS
Cell = Tuple[int, int]  # (num_workers, communication_window)


def run_dir(sweep_dir: str, strategy: str, num_workers: int,
            communication_window: int) -> str:
  return os.path.join(sweep_dir,
                      f"{strategy}-n{num_workers}-l{communication_window}")


def is_finished(workdir: str) -> bool:
  return os.path.isfile(os.path.join(workdir, "summary.json"))


def _read(workdir: str) -> Optional[compare.Run]:
  if not is_finished(workdir):
    return None
  try:
    return compare.read_run(workdir)
  except compare.RunDirError as e:
    logging.warning("%s", e)
    return None


def _fmt(value: Optional[float], spec: str = ".4f") -> str:
  return "–" if value is None else format(value, spec)


def _fraction(values: Sequence[Optional[float]]) -> str:
  known = [v for v in values if v is not None]
  if not known:
    return "–"
  above = sum(v > 1 for v in known)
  return f"{above}/{len(known)} ({above / len(known):.2f})"


def report(sweep_dir: str, strategies: Sequence[str],
           num_workers: Sequence[int], windows: Sequence[int],
           failed: Optional[Dict[Tuple[str, int, int], str]] = None,
           command: str = "") -> str:
  """sweep.md's text, from the runs found in `sweep_dir`.

  The first strategy is the reference: E(reference, other) for every other.
  """
  failed = failed or {}
  reference, others = strategies[0], list(strategies[1:])
  runs = {(s, n, l): _read(run_dir(sweep_dir, s, n, l))
          for s in strategies for n in num_workers for l in windows}
  efficiencies = {}
  for s in others:
    for n in num_workers:
      for l in windows:
        a, b = runs[(reference, n, l)], runs[(s, n, l)]
        efficiencies[(s, n, l)] = (compare.efficiency(a, b) if a and b else
                                   {"test": None, "train": None})

  lines = ["# Sweep", ""]
  if command:
    lines += ["```", command, "```", ""]
  lines += [f"Reference strategy: **{reference}**. E(a, b) = ∫₀^m f_a dt / "
            "∫₀^m f_b dt over the shorter run's time m; *test*: the center's "
            "test accuracy, *train*: the workers' mini-batch accuracy "
            f"averaged over {compare.TRAIN_WINDOW_SECONDS:g} s windows "
            "(the thesis). E > 1: the reference was better sooner.", ""]

  header = ["n", "λ"]
  for s in strategies:
    header += [f"{s} acc", f"{s} time (s)"]
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
          row += [_fmt(compare.final_accuracy(run)),
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

  if others:
    lines += [f"## Fraction of cells where E({reference}, other) > 1", "",
              "| other | E test | E train |", "|---|---|---|"]
    for s in others:
      values = [efficiencies[(s, n, l)] for n in num_workers for l in windows]
      lines.append(f"| {s} | {_fraction([v['test'] for v in values])} | "
                   f"{_fraction([v['train'] for v in values])} |")
    lines.append("")

  if failed:
    lines += ["## Failed runs", ""]
    lines += [f"- {s} n={n} λ={l}: {message}"
              for (s, n, l), message in sorted(failed.items())]
    lines.append("")
  return "\n".join(lines)


def write_report(path: str, text: str) -> None:
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    f.write(text)
  os.replace(tmp, path)  # A reader never sees half a table.


_GRID_FIELDS = ("strategy", "num_workers", "communication_window", "workdir",
                "resume")


def strategy_overrides(specs: Sequence[str]) -> Dict[str, Dict[str, object]]:
  """The TrainConfig fields each `STRATEGY=PATH` flagfile sets explicitly.

  Raises:
    flags_lib.UsageError: for an unreadable flagfile or a bad flag in it.
  """
  overrides = {}
  for spec in specs:
    strategy, _, path = spec.partition("=")
    flag_values = flags.FlagValues()
    flags_lib.define_train_flags(flag_values)
    try:
      flag_values(["sweep", f"--flagfile={path}"])
    except flags.Error as e:
      raise flags_lib.UsageError(
          f"--strategy_flagfile={spec}: "
          f"{flags_lib.one_line_error(str(e), [f'--flagfile={path}'])}"
      ) from None
    fields = {name: flag_values[name].value
              for name in config_lib.TrainConfig.__dataclass_fields__
              if name not in _GRID_FIELDS and name in flag_values and
              flag_values[name].present}
    if "hidden_sizes" in fields:
      fields["hidden_sizes"] = tuple(int(h) for h in fields["hidden_sizes"])
    overrides.setdefault(strategy, {}).update(fields)
  return overrides


def _define_flags():
  # --strategy and --communication_window stay defined, so a train flagfile
  # works here too; --strategies and --communication_windows override them.
  flags_lib.define_train_flags(skip=("num_workers", "workdir", "resume"))
  flags.DEFINE_list("strategies", None,
                    "Strategies to run, comma-separated; the first is the "
                    "reference of E. Default: --strategy alone.")
  flags.DEFINE_list("num_workers", [str(config_lib.TrainConfig.num_workers)],
                    "Numbers of workers n, comma-separated.")
  flags.DEFINE_list("communication_windows", None,
                    "Communication windows λ, comma-separated. Default: "
                    "--communication_window alone.")
  flags.DEFINE_string("sweep_dir", None,
                      "Where runs and sweep.md go; default "
                      "runs/sweep-<timestamp>.")
  flags.DEFINE_multi_string(
      "strategy_flagfile", [],
      "STRATEGY=PATH, repeatable: flags that apply to that strategy's runs "
      "only, e.g. aeasgd=experiments/configs/paper_mnist_aeasgd.flags (its "
      "strategy, num_workers, communication_window and workdir are ignored: "
      "the grid sets them).")
  flags.DEFINE_bool("resume", False,
                    "Keep the finished runs found in --sweep_dir, resume the "
                    "unfinished ones and run the rest.")
  flags.register_validator(
      "strategies",
      lambda v: v is None or (bool(v) and len(set(v)) == len(v) and all(
          s in config_lib.STRATEGIES for s in v)),
      message="--strategies accepts distinct names from "
      f"{','.join(config_lib.STRATEGIES)}, comma-separated")
  flags.register_validator(
      "strategy_flagfile",
      lambda v: all(s.partition("=")[0] in config_lib.STRATEGIES and
                    s.partition("=")[2] for s in v),
      message="--strategy_flagfile accepts STRATEGY=PATH with STRATEGY one "
      f"of {','.join(config_lib.STRATEGIES)}")
  for name in ("num_workers", "communication_windows"):
    flags.register_validator(
        name, lambda v: v is None or flags_lib.positive_int_list(v),
        message=f"--{name} accepts a comma-separated list of integers >= 1")


def main(argv):
  program = "sweep"
  del argv
  from agn_jax import runtime  # pylint: disable=g-import-not-at-top

  try:
    per_strategy = strategy_overrides(FLAGS.strategy_flagfile)
  except flags_lib.UsageError as e:
    flags_lib.exit_with_error(program, e, status=2)
  strategies = list(FLAGS.strategies or [FLAGS.strategy])
  num_workers = [int(n) for n in FLAGS.num_workers]
  windows = [int(l) for l in
             FLAGS.communication_windows or [FLAGS.communication_window]]
  sweep_dir = FLAGS.sweep_dir or os.path.join(
      "runs", "sweep-" + time.strftime("%Y%m%d-%H%M%S"))
  if os.path.isdir(sweep_dir) and os.listdir(sweep_dir) and not FLAGS.resume:
    flags_lib.exit_with_error(
        program, f"--sweep_dir={sweep_dir} already holds files; pass "
        "--resume to continue that sweep or choose another --sweep_dir",
        status=2)
  if os.path.exists(sweep_dir) and not os.path.isdir(sweep_dir):
    flags_lib.exit_with_error(program, f"--sweep_dir={sweep_dir} is a file",
                              status=2)
  os.makedirs(sweep_dir, exist_ok=True)
  report_path = os.path.join(sweep_dir, "sweep.md")
  argv = ["python", "-m", "experiments.sweep"] + sys.argv[1:]
  command = shlex.join(argv)
  failed = {}

  def update_report():
    write_report(report_path, report(sweep_dir, strategies, num_workers,
                                     windows, failed, command))

  cells = [(s, n, l) for n in num_workers for l in windows
           for s in strategies]
  for index, (s, n, l) in enumerate(cells, 1):
    workdir = run_dir(sweep_dir, s, n, l)
    if is_finished(workdir):
      logging.info("[%d/%d] %s: finished earlier, kept", index, len(cells),
                   workdir)
      continue
    if os.path.isdir(workdir):
      train_lib.remove_if_unstarted(workdir)
    resume = os.path.isdir(workdir) and bool(os.listdir(workdir))
    config = flags_lib.config_from_flags(
        FLAGS, strategy=s, num_workers=n, communication_window=l,
        workdir=workdir, resume=resume, **per_strategy.get(s, {}))
    logging.info("[%d/%d] %s n=%d λ=%d -> %s", index, len(cells), s, n, l,
                 workdir)
    with train_lib.sigterm_as_interrupt():
      try:
        _, rows = train_lib.train_and_report(config, runtime.train,
                                             command=argv)
        logging.info("%s n=%d λ=%d: %s", s, n, l, rows)
      except KeyboardInterrupt as e:
        update_report()
        if train_lib.was_terminated(e):
          flags_lib.exit_with_error(program, "terminated (SIGTERM); rerun "
                                    "with --resume to continue",
                                    status=train_lib.EXIT_TERMINATED)
        flags_lib.exit_with_error(program, "interrupted; rerun with --resume "
                                  "to continue",
                                  status=train_lib.EXIT_INTERRUPTED)
      except ValueError as e:
        # DataError or a config the data cannot satisfy: the same for every
        # run of the grid, so there is no point going on.
        train_lib.remove_if_unstarted(workdir)
        update_report()
        flags_lib.exit_with_error(program, e)
      except runtime.RunError as e:
        logging.error("%s n=%d λ=%d failed: %s", s, n, l, e)
        failed[(s, n, l)] = " ".join(str(e).split())
    update_report()
  update_report()
  print(open(report_path).read())
  print(f"report: {report_path}")
  if failed:
    flags_lib.exit_with_error(
        program, f"{len(failed)} of {len(cells)} runs failed; see "
        f"{report_path}")


if __name__ == "__main__":
  _define_flags()
  app.run(main, flags_parser=flags_lib.parse_flags_or_exit)
