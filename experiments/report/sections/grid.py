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
from experiments.report.sections import (CANNOT_TELL, FAILS, HOLDS,
                                         NOT_RUN_YET, Answer, Context,
                                         answer_lines, duration,
                                         estimate_text, heading, pct, pyplot,
                                         runs_line, save, table)

Cell = Tuple[int, int]
RQ, TITLE = "RQ5", "AGN and AEASGD across n and λ"
QUESTION = ("How do the number of workers n and the communication window λ "
            "change AGN's accuracy against AEASGD's? The thesis: AGN copes "
            "with more workers better than AEASGD; its test accuracy "
            "\"remains stable even with 40 workers\" while AEASGD's drops as "
            "n grows.")
# AGN's drop from the smallest to the largest n is smaller (more robust)
# or larger (less robust) than AEASGD's when they part by more than this.
DROP_POINTS = 0.005
MORE, LESS, LEVEL = "more robust", "less robust", "level"
RULE = ("At each λ the grid shows at two or more n, each strategy's drop in "
        "final test accuracy (mean over seeds) from the smallest to the "
        "largest n; AGN is more robust at that λ when its drop is smaller "
        "than AEASGD's by more than 0.5 points, less robust in the mirror "
        "case, else level. The thesis' answer holds when AGN is more robust "
        "at a majority of those λ, fails when it is less robust at a "
        "majority, else (or with no λ at two n) the runs cannot tell. On the "
        "thesis' whole table the rule gives its answer: from n = 10 to 40 "
        "AGN is more robust at 5 of its 7 λ (less at λ = 10, level at 15). "
        "It is applied to the thesis' table at our cells too.")


def cell_summary(ctx: Context, cell: Cell,
                 results: Optional[results_lib.Results] = None
                 ) -> Optional[Dict[str, object]]:
  """Our figures of one grid cell over seeds, or None if no seed has both runs.

  Returns:
    {"windows": per worker, "agn"/"aeasgd": {"test", "train", "seconds"}
    estimates, "e_train"/"e_test": estimates of E(AGN, AEASGD), "seeds"}.
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
  fig, axes = plt.subplots(1, 4, figsize=(19, 4.2))
  for ax, (title, value) in zip(axes, panels):
    grid = np.full((len(p.workers), len(p.windows)), np.nan)
    for (n, l), s in cells.items():
      t = thesis.cell(n, l)
      v = value(s, t) if t is not None else None
      if v is not None and n in p.workers and l in p.windows:
        grid[p.workers.index(n), p.windows.index(l)] = v
    center = 1.0 if "/" in title else 0.0
    spread = (np.nanmax(np.abs(grid - center)) if np.any(np.isfinite(grid))
              else 1.0) or 1e-3
    image = ax.imshow(grid, cmap="RdBu", origin="lower", aspect="auto",
                      vmin=center - spread, vmax=center + spread)
    for i in range(len(p.workers)):
      for j in range(len(p.windows)):
        if np.isfinite(grid[i, j]):
          ax.text(j, i, f"{grid[i, j]:.2f}", ha="center", va="center",
                  fontsize=7)
    ax.set_xticks(range(len(p.windows)), [str(l) for l in p.windows])
    ax.set_yticks(range(len(p.workers)), [str(n) for n in p.workers])
    ax.set_xlabel("communication window λ")
    ax.set_ylabel("workers n")
    ax.set_title(title, fontsize=9)
    fig.colorbar(image, ax=ax, shrink=0.8)
  fig.suptitle("Ours against the thesis' table (blank: not run)")
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


def below_seconds(times: np.ndarray, values: np.ndarray,
                  level: float = 0.90) -> Optional[float]:
  """Seconds from the start until a curve last comes up through `level` (None if it never does).

  >>> below_seconds(np.array([1., 2., 3., 4.]), np.array([.5, .95, .8, .97]))
  3.0
  """
  if not len(times):
    return None
  below = np.flatnonzero(values < level)
  if not len(below):
    return 0.0
  if below[-1] == len(values) - 1:
    return None
  return float(times[below[-1]])


def _unstable(ctx: Context) -> List[str]:
  """Our curve at the thesis' unstable cell beside the shape its figure shows."""
  t = thesis.UNSTABLE
  runs = ctx.results.seeds(design.GRID, design.REFERENCE, t.cell)
  if not runs or ctx.preset.name == "quick":
    return []
  f = runs[0]
  base = f.time_base
  train = curves.train_curve(f.run, 5.0, base)
  test = curves.eval_curve(f.run, base)
  below = below_seconds(*train)
  end = f.seconds
  lines = [f"At n = {t.cell[0]}, λ = {t.cell[1]} the thesis' AGN training "
           f"accuracy stays below 0.90 for about {t.below_090_seconds:.0f} of "
           f"its {t.seconds:.0f} s ({t.below_090_seconds / t.seconds:.0%}) "
           f"and climbs to about {t.end_accuracy:.2f} only as workers finish. "
           "Ours (seed 0, training accuracy averaged over 5 modeled seconds): "
           + ("never above 0.90 at its end" if below is None else
              f"below 0.90 for {below:.0f} of {end:.0f} s "
              f"({below / end:.0%})" if end else "–")
           + f"; final test accuracy {pct(f.test_accuracy)}.", ""]
  plt = pyplot()
  fig, ax = plt.subplots(figsize=(8, 4.2))
  ax.plot(*train, label="ours: workers' training accuracy (5 s mean)")
  ax.plot(*test, marker=".", label="ours: center's test accuracy")
  ax.plot([0, t.below_090_seconds, t.seconds], [0.90, 0.90, t.end_accuracy],
          "k:", label="thesis (as described): < 0.90 until ~520 s, "
          "~0.96 at 749 s")
  ax.set_xlabel(plots.time_label(base))
  ax.set_ylabel("accuracy")
  ax.set_ylim(0.5, 1.0)
  ax.set_title(f"AGN at n = {t.cell[0]}, λ = {t.cell[1]}")
  ax.legend(fontsize=7)
  fig.tight_layout()
  return lines + ctx.link(save(fig, ctx.figure("grid-unstable.png")),
                          "the unstable cell")


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
            "modeled seconds of the thesis' cluster (`--cluster=paper`, "
            "fitted to four of its AGN times: n = λ = 10, 20, 40 and "
            "n = 10, λ = 40, under equal speeds); training accuracy is the workers' last "
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
  lines += _unstable(ctx)
  seconds = ctx.results.ledger_seconds(ctx.study.ledger, design.GRID)
  lines += [f"Compute: {duration(seconds)} here.", ""]
  return lines + render_rq5(ctx)


def drops(accuracy: Dict[Cell, Tuple[float, float]]
          ) -> Dict[int, Tuple[int, int, float, float]]:
  """Per λ at two or more n: (smallest n, largest n, AGN's drop, AEASGD's drop).

  Args:
    accuracy: per cell, (AGN's, AEASGD's) final test accuracy.

  >>> drops({(10, 10): (0.98, 0.98), (40, 10): (0.95, 0.97),
  ...        (10, 40): (0.98, 0.98)})
  {10: (10, 40, 0.030000000000000027, 0.010000000000000009)}
  """
  by_window = {}
  for (n, l), pair in accuracy.items():
    by_window.setdefault(l, {})[n] = pair
  out = {}
  for l, row in sorted(by_window.items()):
    if len(row) > 1:
      lo, hi = min(row), max(row)
      out[l] = (lo, hi, row[lo][0] - row[hi][0], row[lo][1] - row[hi][1])
  return out


def robustness(agn_drop: float, aeasgd_drop: float) -> str:
  """AGN against AEASGD at one λ, by `DROP_POINTS`.

  >>> robustness(0.002, 0.02), robustness(0.03, 0.01), robustness(0.01, 0.012)
  ('more robust', 'less robust', 'level')
  """
  if abs(agn_drop - aeasgd_drop) <= DROP_POINTS:
    return LEVEL
  return MORE if agn_drop < aeasgd_drop else LESS


def verdict(standings: List[str]) -> str:
  """RQ5's verdict from each λ's standing (see `RULE`).

  >>> verdict(["more robust", "more robust", "less robust"])
  'holds'
  >>> verdict(["less robust", "level", "less robust"])
  'fails'
  >>> verdict(["more robust", "less robust"]), verdict([])
  ('cannot be told from these runs', 'cannot be told from these runs')
  """
  if standings.count(MORE) > len(standings) / 2:
    return HOLDS
  if standings.count(LESS) > len(standings) / 2:
    return FAILS
  return CANNOT_TELL


def drops_verdict(found: Dict[int, Tuple[int, int, float, float]]) -> str:
  """`verdict` of `drops`' λ."""
  return verdict([robustness(a, b) for _, _, a, b in found.values()])


def _said(found: Dict[int, Tuple[int, int, float, float]]) -> str:
  return "; ".join(
      f"at λ = {l}, from n = {lo} to {hi}: AGN {-100 * a:+.2f} points, "
      f"AEASGD {-100 * b:+.2f} ({robustness(a, b)})"
      for l, (lo, hi, a, b) in found.items())


def answer(ctx: Context) -> Answer:
  """RQ5's answer by `RULE`, and the thesis' own by the same rule."""
  cells = shown_cells(ctx)
  if not cells:
    return Answer(NOT_RUN_YET)
  ours = drops({c: (s[design.REFERENCE]["test"].mean,
                    s[design.BASELINE]["test"].mean)
                for c, s in cells.items()
                if None not in (s[design.REFERENCE]["test"].mean,
                                s[design.BASELINE]["test"].mean)})
  if not ours:
    return Answer(CANNOT_TELL, "No λ is shown at two n yet.")
  detail = ("The change in final test accuracy from the smallest to the "
            f"largest n: {_said(ours)}.")
  theirs = {c: (thesis.cell(*c).agn_test_accuracy,
                thesis.cell(*c).aeasgd_test_accuracy)
            for c in cells if thesis.cell(*c)}
  if len(theirs) == len(cells):
    found = drops(theirs)
    detail += (f" The thesis' table at the same cells: {_said(found)}, so "
               f"by the same rule its own answer {drops_verdict(found)}.")
  return Answer(drops_verdict(ours), detail)


def _plot_rq5(ctx: Context, cells: Dict[Cell, Dict[str, object]]
              ) -> Optional[str]:
  """Test accuracy and E train against n, a line per λ; the thesis' faint beside."""
  if not cells:
    return None
  plt = pyplot()
  fig, axes = plt.subplots(1, 2, figsize=(13, 4.2))
  windows = sorted({l for _, l in cells})
  for i, l in enumerate(windows):
    ns = sorted(n for n, w in cells if w == l)
    color = f"C{i}"
    for name, style in ((design.REFERENCE, "-o"), (design.BASELINE, "--s")):
      axes[0].plot(ns, [cells[(n, l)][name]["test"].mean for n in ns], style,
                   color=color, label=f"{name.upper()} λ={l}")
    axes[1].plot(ns, [cells[(n, l)]["e_train"].mean for n in ns], "-o",
                 color=color, label=f"λ={l}")
    if ctx.preset.name != "quick":
      theirs = [(n, thesis.cell(n, l)) for n in thesis.WORKERS
                if thesis.cell(n, l)]
      if theirs:
        tn = [n for n, _ in theirs]
        for name, style in ((design.REFERENCE, "-"), (design.BASELINE, "--")):
          axes[0].plot(tn, [getattr(t, f"{name}_test_accuracy")
                            for _, t in theirs], style, color=color,
                       alpha=0.3, linewidth=1)
        axes[1].plot(tn, [t.efficiency for _, t in theirs], "-", color=color,
                     alpha=0.3, linewidth=1)
  axes[1].axhline(1.0, color="k", linewidth=0.5)
  axes[0].set_ylabel("center's final test accuracy")
  axes[1].set_ylabel("E train (AGN, AEASGD)")
  for ax in axes:
    ax.set_xlabel("workers n")
    ax.set_xticks(sorted({n for n, _ in cells}))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
  fig.suptitle("Ours (markers; mean over seeds) and, faint, the thesis' table "
               "at the same λ")
  fig.tight_layout()
  return save(fig, ctx.figure("rq5-workers.png"))


def render_rq5(ctx: Context) -> List[str]:
  """The RQ5 section: the grid's cells read across n and λ."""
  cells = shown_cells(ctx)
  lines = [heading(RQ, TITLE), ""]
  lines += [f"**Question.** {QUESTION} **Measurement.** The grid's cells "
            "above (full budget, the thesis' setting), AGN's and AEASGD's "
            "final test accuracy and E train per cell, read along n at each "
            "λ. The cells are not a uniform sample of the thesis' 7 × 7 "
            "grid. **Rule, fixed before any of its results was read.** "
            + RULE, ""]
  lines += ctx.link(_plot_rq5(ctx, cells), "across n and λ")
  lines += answer_lines(answer(ctx))
  return lines
