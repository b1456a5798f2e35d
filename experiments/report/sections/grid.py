"""The grid: AGN against AEASGD cell by cell, beside the thesis' own table."""

import json
import os
from typing import Dict, List, Optional, Tuple

import numpy as np

from experiments import curves
from experiments import plots
from experiments.report import budget
from experiments.report import design
from experiments.report import results as results_lib
from experiments.report import thesis
from experiments.report.sections import (Context, duration, estimate_text,
                                         pyplot, runs_line, save, table)

Cell = Tuple[int, int]


def cell_summary(ctx: Context, cell: Cell,
                 results: Optional[results_lib.Results] = None
                 ) -> Optional[Dict[str, object]]:
  """Our figures of one grid cell over seeds, or None if no seed has both runs.

  Returns:
    {"windows": per worker, "agn"/"aeasgd": {"test", "train", "seconds"}
    estimates, "e_train"/"e_test": estimates of E(AGN, AEASGD),
    "e_train_seeds": each seed's E train, "seeds"}.
  """
  results = results or ctx.results
  pairs = results.pairs(design.GRID, cell)
  if not pairs:
    return None
  out = {"windows": min(min(a.windows, b.windows) for a, b in pairs),
         "seeds": len(pairs)}
  for i, name in enumerate((design.REFERENCE, design.BASELINE)):
    runs = [pair[i] for pair in pairs]
    out[name] = {
        "test": results_lib.estimate([r.test_accuracy for r in runs]),
        "train": results_lib.estimate([r.train_accuracy for r in runs]),
        "seconds": results_lib.estimate([r.seconds for r in runs])}
  es = [ctx.efficiency_of(a, b) for a, b in pairs]
  out["e_train_seeds"] = [e["train"] for e in es]
  out["e_train"] = results_lib.estimate([e["train"] for e in es])
  out["e_test"] = results_lib.estimate([e["test"] for e in es])
  return out


def shown_cells(ctx: Context, results: Optional[results_lib.Results] = None
                ) -> Dict[Cell, Dict[str, object]]:
  """The cells with results and `budget.MIN_WINDOWS` or more windows a worker."""
  results = results or ctx.results
  out = {}
  for cell in results.preset.grid_cells:
    summary = cell_summary(ctx, cell, results)
    if summary is not None and summary["windows"] >= budget.MIN_WINDOWS:
      out[cell] = summary
  return out


def _beside(ours: results_lib.Estimate, theirs: Optional[float],
            scale: float = 100.0, spec: str = ".2f") -> str:
  text = estimate_text(ours, scale, spec)
  if theirs is not None:
    text += f" ({format(scale * theirs, spec)})"
  return text


def colour_limit(offsets: np.ndarray, percentile: float = 90.0) -> float:
  """A symmetric colour limit: the `percentile` of the finite |offsets| (1e-3 at least; 1 if none).

  The percentile is one of the values, never between two, so with two or
  more cells the largest alone never sets the scale.

  >>> colour_limit(np.array([0.1, -0.2, 0.3, np.nan, -80.0]))
  0.3
  >>> colour_limit(np.array([np.nan])), colour_limit(np.array([0.0]))
  (1.0, 0.001)
  """
  found = np.abs(offsets[np.isfinite(offsets)])
  if not len(found):
    return 1.0
  return max(float(np.percentile(found, percentile, method="lower")), 1e-3)


def _heatmaps(ctx: Context, cells: Dict[Cell, Dict[str, object]]
              ) -> Optional[str]:
  """Ours − the thesis', on the thesis' 7 × 7 axes."""
  p = ctx.preset
  panels = (
      ("AGN test accuracy, ours − thesis (points)",
       lambda s, t: 100 * (s["agn"]["test"].mean - t.agn_test_accuracy)),
      ("AEASGD test accuracy, ours − thesis (points)",
       lambda s, t: 100 * (s["aeasgd"]["test"].mean - t.aeasgd_test_accuracy)),
      ("E train, ours − thesis",
       lambda s, t: (None if s["e_train"].mean is None or t.efficiency is None
                     else s["e_train"].mean - t.efficiency)),
      ("AGN time, ours / thesis",
       lambda s, t: (None if s["agn"]["seconds"].mean is None else
                     s["agn"]["seconds"].mean / t.agn_seconds)))
  if not cells or p.name == "quick":
    return None
  plt = pyplot()
  fig, axes = plt.subplots(2, 2, figsize=(13, 9))
  for ax, (title, value) in zip(axes.flat, panels):
    grid = np.full((len(p.workers), len(p.windows)), np.nan)
    for (n, l), s in cells.items():
      t = thesis.cell(n, l)
      v = value(s, t) if t is not None else None
      if v is not None and n in p.workers and l in p.windows:
        grid[p.workers.index(n), p.windows.index(l)] = v
    center = 1.0 if "/" in title else 0.0
    spread = colour_limit(grid - center)
    image = ax.imshow(grid, cmap="RdBu", origin="lower", aspect="auto",
                      vmin=center - spread, vmax=center + spread)
    for i in range(len(p.workers)):
      for j in range(len(p.windows)):
        if np.isfinite(grid[i, j]):
          dark = abs(grid[i, j] - center) > 0.6 * spread
          ax.text(j, i, f"{grid[i, j]:.2f}", ha="center", va="center",
                  fontsize=11, color="white" if dark else "black")
    ax.set_xticks(range(len(p.windows)), [str(l) for l in p.windows],
                  fontsize=11)
    ax.set_yticks(range(len(p.workers)), [str(n) for n in p.workers],
                  fontsize=11)
    ax.set_xlabel("communication window λ", fontsize=11)
    ax.set_ylabel("workers n", fontsize=11)
    ax.set_title(title, fontsize=12)
    bar = fig.colorbar(image, ax=ax, shrink=0.85, extend="both")
    bar.ax.tick_params(labelsize=10)
  fig.suptitle("Ours against the thesis' table (blank: not run)\ncolours "
               "saturate at the 90th percentile of each panel's distance "
               "from no difference, so one outlier cannot wash out the rest",
               fontsize=12)
  fig.tight_layout()
  return save(fig, ctx.figure("grid-vs-thesis.png"))


def _curves(ctx: Context, cells: Dict[Cell, Dict[str, object]]
            ) -> Optional[str]:
  """Test accuracy over time at a fixed n and at a fixed λ."""
  if not cells:
    return None
  by_n, by_l = {}, {}
  for n, l in cells:
    by_n.setdefault(n, []).append(l)
    by_l.setdefault(l, []).append(n)
  n = max(by_n, key=lambda k: (len(by_n[k]), k))
  l = max(by_l, key=lambda k: (len(by_l[k]), k))
  plt = pyplot()
  fig, axes = plt.subplots(1, 2, figsize=(13, 4.2))
  panels = ((axes[0], f"n = {n}", [(n, w) for w in sorted(by_n[n])]),
            (axes[1], f"λ = {l}", [(m, l) for m in sorted(by_l[l])]))
  base = "training"
  for ax, title, panel_cells in panels:
    for i, cell in enumerate(panel_cells):
      for strategy, style in ((design.REFERENCE, "-"),
                              (design.BASELINE, "--")):
        runs = ctx.results.seeds(design.GRID, strategy, cell)
        if not runs:
          continue
        base = runs[0].time_base
        ax.plot(*curves.eval_curve(runs[0].run, base), style, color=f"C{i}",
                label=f"{strategy} n={cell[0]} λ={cell[1]}")
    ax.set_title(f"Learning curves at {title} (seed 0)")
    ax.set_xlabel(plots.time_label(base))
    ax.set_ylabel("center's test accuracy")
    if ctx.preset.name != "quick":
      ax.set_ylim(0.8, 1.0)
    ax.legend(fontsize=7)
  fig.tight_layout()
  return save(fig, ctx.figure("grid-curves.png"))


def _row(ctx: Context, cell: Cell) -> List[str]:
  """One cell's table row: each strategy's figures as far as its runs completed."""
  n, l = cell
  t = thesis.cell(n, l)
  row, windows = [str(n), str(l)], []
  for name in (design.REFERENCE, design.BASELINE):
    runs = ctx.results.seeds(design.GRID, name, cell)
    windows += [r.windows for r in runs]
    if not runs:
      status = ctx.results.status(ctx.results.find(design.GRID, name,
                                                   cell)[0])
      row += [status, "–", "–"]
      continue
    row += [_beside(results_lib.estimate([r.seconds for r in runs]),
                    t and getattr(t, f"{name}_seconds"), 1.0, ".0f"),
            _beside(results_lib.estimate([r.train_accuracy for r in runs]),
                    t and getattr(t, f"{name}_train_accuracy")),
            _beside(results_lib.estimate([r.test_accuracy for r in runs]),
                    t and getattr(t, f"{name}_test_accuracy"))]
  if windows and min(windows) < budget.MIN_WINDOWS:
    return [str(n), str(l), f"{min(windows):.0f}",
            f"not shown: < {budget.MIN_WINDOWS} windows a worker"] + [""] * 7
  s = cell_summary(ctx, cell)
  e_train = s["e_train"] if s else results_lib.Estimate(None, None, 0)
  e_test = s["e_test"] if s else results_lib.Estimate(None, None, 0)
  return (row[:2] + [f"{min(windows):.0f}" if windows else "–"] + row[2:] +
          [_beside(e_train, t and t.efficiency, 1.0, ".3f"),
           estimate_text(e_test, 1.0, ".3f")])


RESULTS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "results")
# Each fitted speed model's fit, committed before any accuracy run on it.
FITS = {design.THESIS_SPEEDS: os.path.join(RESULTS, "cluster_fit_v1.json"),
        design.REFIT_SPEEDS: os.path.join(RESULTS, "cluster_fit.json")}


def _fit(speeds: str) -> dict:
  if not os.path.isfile(FITS[speeds]):
    return {}
  with open(FITS[speeds]) as f:
    return json.load(f)


def setting_lines(run: design.RunSpec) -> List[str]:
  """How the grid's data reached its workers and how fast they were."""
  assignment = design.flag_value(run.flags, "data_assignment")
  speeds = design.flag_value(run.flags, "speed_model")
  text = (f"- **Setting:** `--data_assignment={assignment}`"
          + (" (each epoch a fresh seeded random 1/n slice of the data per "
             "worker, as the thesis' dist-keras repartitioned it)"
             if assignment == "epoch_slices" else
             " (each worker cycles one fixed 1/n shard)")
          + f", `--speed_model={speeds}`")
  if speeds == design.THESIS_SPEEDS:
    fit = _fit(speeds)
    text += (f" ({fit.get('speed_model', 'the fitted model')}: each window's "
             "duration drawn around the cluster's, fitted by "
             "`scripts/fit_cluster.py` on the clock alone to the thesis' "
             "staleness histogram at n = 20, λ = 15, total-variation "
             f"distance {fit.get('tv_distance', '–')}; the fit was committed "
             "before any accuracy run of this grid)")
  elif speeds == design.REFIT_SPEEDS:
    fit = _fit(speeds)
    text += (f" ({fit.get('speed_model', 'the fitted model')}: each "
             "worker's own speed, a persistent straggler and each window's "
             "jitter, fitted with `--cluster=paper_refit` by "
             "`scripts/fit_cluster.py` on the clock alone to the thesis' 98 "
             "run times (median |leave-one-out residual| "
             f"{fit.get('median_abs_loo_residual', '–')}), its staleness "
             "histogram at n = 20, λ = 15 (total-variation distance "
             f"{fit.get('tv_distance', '–')}) and its workers' staleness "
             "traces; the fit was committed before any accuracy run of this "
             "grid)")
  return [text + ".", ""]


def _clock(specs: List[design.RunSpec]) -> str:
  """Which fit of the thesis' cluster the grid's times are modeled on."""
  cluster = design.flag_value(specs[0].flags, "cluster") if specs else None
  if cluster == design.REFIT_CLUSTER:
    return (f"`--cluster={cluster}`, refitted to all 98 of its published "
            "times, its staleness histogram and its workers' traces")
  return ("`--cluster=paper`, fitted to four of its AGN times: n = λ = 10, "
          "20, 40 and n = 10, λ = 40, under equal speeds")


def render(ctx: Context) -> List[str]:
  p = ctx.preset
  specs = p.section_runs(design.GRID)
  lines = ["## The grid: AGN against AEASGD, beside the thesis", ""]
  lines += runs_line(ctx, specs)
  if specs:
    run = specs[0]
    steps = run.epochs * p.train_examples / p.batch_size()
    seeds = f"{p.seeds} seed{'s' if p.seeds > 1 else ''}"
    if p.headline_seeds and p.headline_seeds != p.seeds:
      seeds += f"; {p.headline_seeds} at " + " and ".join(
          f"n = {n}, λ = {l}" for n, l in p.many_seeded_cells)
    lines += [f"- **Budget:** {run.epochs:g} epochs of {p.train_examples:,} "
              f"training examples, batch {p.batch_size()}: {steps:,.0f} local "
              "steps a run, split over the n workers, for both strategies in "
              f"every cell ({seeds}). The thesis' runs had the same budget.",
              ""]
    lines += setting_lines(run)
  cells = shown_cells(ctx)
  rows = [_row(ctx, cell) for cell in p.grid_cells]
  lines += ["Each figure is ours, the thesis' in brackets "
            "(`table:agn_experiments_summary` and "
            "`table:agn_temporal_efficiency` of its AGN chapter). Times are "
            f"modeled seconds of the thesis' cluster ({_clock(specs)}); "
            "training accuracy is the workers' last "
            "mini-batch, averaged over workers, as the thesis' \"Acc.\"; test "
            "accuracy is the center's on the 10,000 test images, its "
            "\"Val.\". E train is E(AGN, AEASGD) on "
            f"`--efficiency_curve={ctx.efficiency[0]}`, E test on the "
            "center's test accuracy (the thesis has no such column).", ""]
  lines += table(["n", "λ", "windows/worker", "AGN s", "AGN train %",
                  "AGN test %", "AEASGD s", "AEASGD train %", "AEASGD test %",
                  "E train", "E test"], rows)
  if cells:
    diffs = [100 * (s[name]["test"].mean - getattr(
        thesis.cell(*c), f"{name}_test_accuracy"))
             for c, s in cells.items() if thesis.cell(*c)
             for name in (design.REFERENCE, design.BASELINE)]
    if diffs:
      lines += [f"Over the {len(cells)} cells shown, our test accuracy minus "
                f"the thesis' is {np.mean(diffs):+.2f} points on average "
                f"(from {min(diffs):+.2f} to {max(diffs):+.2f}).", ""]
  lines += ctx.link(_heatmaps(ctx, cells), "ours against the thesis")
  lines += ctx.link(_curves(ctx, cells), "learning curves")
  seconds = ctx.results.ledger_seconds(ctx.study.ledger, design.GRID)
  lines += [f"Compute: {duration(seconds)} here.", ""]
  return lines
