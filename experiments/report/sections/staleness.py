"""Staleness: the measured means beside the formula, histograms, maxima and spread."""

from typing import List, Optional, Tuple

import numpy as np

from experiments.report import design
from experiments.report import formulas
from experiments.report import results as results_lib
from experiments.report.sections import Context, num, pyplot, save, table
from experiments.report.sections import ablation


def sources(ctx: Context) -> List[Tuple[str, results_lib.Figures]]:
  """(label, AGN run) of the grid (seed 0) and of the ablation's commit orders."""
  out = []
  for cell in ctx.preset.grid_cells:
    specs = ctx.results.find(design.GRID, design.REFERENCE, cell)
    runs = ctx.results.seeds(design.GRID, design.REFERENCE, cell)
    if runs:
      speeds = design.flag_value(specs[0].flags, "speed_model")
      order = ("fitted cluster" if speeds == design.THESIS_SPEEDS else
               "round robin" if speeds == "constant" else speeds)
      out.append((f"grid n={cell[0]} λ={cell[1]}, {order}", runs[0]))
  for order in ablation.ORDERS:
    runs = ctx.results.seeds(design.ABLATION, design.REFERENCE,
                             ctx.preset.ablation_cell, order)
    if runs:
      n, l = ctx.preset.ablation_cell
      out.append((f"ablation n={n} λ={l}, {order}", runs[0]))
  return out


def steady_mean(f: results_lib.Figures, n: int) -> Optional[float]:
  """Mean staleness after the first n commits (the first round's are lower)."""
  st = f.run.commits["staleness"]
  keep = np.isfinite(st)
  if keep.sum() <= n:
    return None
  order = np.argsort(f.run.commits["clock"][keep], kind="stable")
  return float(st[keep][order][n:].mean())


def render(ctx: Context) -> List[str]:
  lines = ["## Staleness", ""]
  lines += ["The thesis expects E[τ] = n − 1. With commit-then-pull and W "
            "commits a worker, round robin gives exactly "
            "(n − 1)(1 − 1/(2W)): each worker's first commit sees 0 … n − 1 "
            "earlier ones, every later one n − 1. So a round-robin run's "
            "simulated mean is that formula by construction (the grid runs "
            "on the fitted cluster, whose speeds spread it); the measured "
            "evidence is real processes, and the random speed model is the "
            "simulator's stand-in for them.", ""]
  rows, found = [], sources(ctx)
  for label, f in found:
    n = int(f.run.summary.get("num_workers") or 1)
    w = f.windows
    stats = results_lib.staleness_summary(f.staleness)
    if not stats:
      continue
    rows.append([label, str(stats["count"]), f"{w:.1f}",
                 num(formulas.mean_staleness_formula(n, w), ".2f"),
                 num(stats["mean"], ".2f"), num(steady_mean(f, n), ".2f"),
                 str(n - 1), num(float(np.std(f.staleness)), ".2f"),
                 str(stats["max"])])
  lines += table(["run (AGN)", "commits", "W", "(n − 1)(1 − 1/(2W))",
                  "measured mean", "steady mean", "n − 1", "std",
                  "max"], rows)
  lines += ["*Steady* leaves out each run's first n commits. *std* is the "
            "spread: round robin has almost none after the first round; "
            "real processes and random speeds spread around n − 1.", ""]
  path = _plot(ctx, found)
  lines += ctx.link(path, "staleness histograms")
  return lines


def _plot(ctx: Context, found) -> Optional[str]:
  shown = [(label, f) for label, f in found if len(f.staleness)]
  if not shown:
    return None
  plt = pyplot()
  fig, ax = plt.subplots(figsize=(8, 4))
  for label, f in shown:
    counts = np.bincount(f.staleness)
    ax.plot(np.arange(len(counts)), counts / counts.sum(), marker=".",
            label=label)
  ax.set_xlabel("staleness τ")
  ax.set_ylabel("fraction of commits")
  ax.legend(fontsize=7)
  fig.tight_layout()
  return save(fig, ctx.figure("staleness.png"))
