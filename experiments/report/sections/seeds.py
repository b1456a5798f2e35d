"""The grid's cells with several seeds: each seed's end, which seeds recover, and the unstable cell beside the thesis' digitized curve."""

import json
import os
from typing import List, Optional, Sequence, Tuple

import numpy as np

from experiments import curves
from experiments import plots
from experiments.report import design
from experiments.report import thesis
from experiments.report.sections import Context, pct, pyplot, save, table
from experiments.report.sections import grid

Cell = Tuple[int, int]
# How many of a run's last evaluations of the center the recovery rule averages.
LAST_EVALUATIONS = 5
RECOVERY_RULE = (
    f"a seed recovers when the mean of its last {LAST_EVALUATIONS} "
    "evaluations of the center's test accuracy is at least "
    f"{design.RECOVERED_ACCURACY:.2f} (the thesis' (40, 10) curve stays "
    "below 0.90 for most of its run and ends near 0.96); the rule was "
    "stated before the refit study's runs")
# The thesis' AGN training-accuracy curve at n = 40, λ = 10, read off its
# figure (see the file's "read_by").
UNSTABLE_CURVE = os.path.join(grid.RESULTS, "thesis_unstable_curve.json")


def last_mean(values: Sequence[float], count: int = LAST_EVALUATIONS
              ) -> Optional[float]:
  """The mean of the last `count` values (of all, if fewer); None if none.

  >>> round(last_mean([0.1, 0.2, 0.9, 0.9, 0.95, 0.95, 1.0]), 6)
  0.94
  """
  if not len(values):
    return None
  return float(np.mean(np.asarray(values, float)[-count:]))


def recovers(mean: Optional[float]) -> Optional[bool]:
  """The recovery rule on a seed's `last_mean` (None if it has none)."""
  return None if mean is None else mean >= design.RECOVERED_ACCURACY


def recovered(means: Sequence[Optional[float]]) -> Tuple[int, int]:
  """(seeds that recover, seeds with evaluations) by `recovers`.

  >>> recovered([0.95, 0.2, None, 0.90])
  (2, 3)
  """
  found = [recovers(m) for m in means if m is not None]
  return sum(found), len(found)


def seed_ends(ctx: Context, cell: Cell, strategy: str
              ) -> List[Tuple[Optional[float], Optional[float]]]:
  """Each completed seed's (final test accuracy, mean of its last evaluations)."""
  out = []
  for f in ctx.results.seeds(design.GRID, strategy, cell):
    out.append((f.test_accuracy,
                last_mean(curves.eval_curve(f.run, f.time_base)[1])))
  return out


def several_seeded(ctx: Context) -> List[Cell]:
  """The grid's cells where some strategy completed more than one seed."""
  return [c for c in ctx.preset.grid_cells
          if any(len(ctx.results.seeds(design.GRID, s, c)) > 1
                 for s in (design.REFERENCE, design.BASELINE))]


def render(ctx: Context) -> List[str]:
  """Each seed of the cells with several, the recovery fractions, and the unstable cell."""
  return _seeds(ctx) + unstable(ctx)


def _seeds(ctx: Context) -> List[str]:
  cells = several_seeded(ctx)
  if not cells:
    return []
  seeded = set(ctx.preset.many_seeded_cells)
  lines = ["### Each seed", "",
           "Every seed of the cells run with several: the center's final "
           f"test accuracy and, beside it, the mean of its last "
           f"{LAST_EVALUATIONS} evaluations (one evaluation can catch a "
           "swing). At the preset's seeded cells, the fraction of seeds that "
           f"recover: {RECOVERY_RULE}.", ""]
  rows, fractions = [], []
  for n, l in cells:
    for strategy in (design.REFERENCE, design.BASELINE):
      ends = seed_ends(ctx, (n, l), strategy)
      if not ends:
        continue
      k, total = recovered([m for _, m in ends])
      rows.append([str(n), str(l), strategy.upper(), "; ".join(
          f"{pct(final)} ({pct(mean)})" for final, mean in ends),
                   f"{k} of {total}" if (n, l) in seeded and total else "–"])
      if (n, l) in seeded and total:
        fractions.append(f"{strategy.upper()} at n = {n}, λ = {l}: {k} of "
                         f"{total}")
  lines += table(["n", "λ", "strategy", "each seed: final test (mean of "
                  f"last {LAST_EVALUATIONS})", "seeds that recover"], rows)
  if fractions:
    lines += ["Seeds that recover: " + "; ".join(fractions) + ".", ""]
  return lines


def thesis_curve(path: str = UNSTABLE_CURVE) -> Optional[dict]:
  """The digitized thesis curve: {"points": [[seconds, accuracy or None]], "axis_floor", ...}."""
  if not os.path.isfile(path):
    return None
  with open(path) as f:
    return json.load(f)


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


def _plot_thesis(ax, curve: dict) -> None:
  """The thesis' points where its figure shows them; a mark at its floor where the line is below it."""
  floor = curve["axis_floor"]
  points = curve["points"]
  hidden = [t for t, a in points if a is None]
  # Break the line where the figure hides it.
  segments, current = [], []
  for t, a in points:
    if a is None:
      if current:
        segments.append(current)
      current = []
    else:
      current.append((t, a))
  if current:
    segments.append(current)
  for i, seg in enumerate(segments):
    seg = np.array(seg)
    ax.plot(seg[:, 0], seg[:, 1], "k-", linewidth=1.5,
            label="thesis: workers' training accuracy, digitized"
            if i == 0 else None)
  ax.plot(hidden, [floor] * len(hidden), "kv", markersize=4,
          label=f"thesis: below {floor:.2f} (its figure's floor)")
  ax.fill_between([0, curve["first_visible_seconds"]], 0, floor, color="k",
                  alpha=0.07, linewidth=0,
                  label=f"thesis: below {floor:.2f}, off its figure")


def unstable(ctx: Context) -> List[str]:
  """Our curve at the thesis' unstable cell beside the thesis' digitized one."""
  t = thesis.UNSTABLE
  runs = ctx.results.seeds(design.GRID, design.REFERENCE, t.cell)
  if not runs or ctx.preset.name == "quick":
    return []
  f = runs[0]
  base = f.time_base
  train = curves.train_curve(f.run, 5.0, base)
  below = below_seconds(*train)
  end = f.seconds
  curve = thesis_curve()
  first = (curve or {}).get("first_visible_seconds", t.below_090_seconds)
  lines = [f"At n = {t.cell[0]}, λ = {t.cell[1]} the thesis' AGN training "
           f"accuracy stays below 0.90 for about {first:.0f} of its "
           f"{t.seconds:.0f} s and climbs to about "
           f"{t.end_accuracy:.2f} only as workers finish. Ours (seed 0, "
           "training accuracy averaged over 5 modeled seconds): "
           + ("never above 0.90 at its end" if below is None else
              f"below 0.90 for {below:.0f} of {end:.0f} s "
              f"({below / end:.0%})" if end else "–")
           + f"; final test accuracy {pct(f.test_accuracy)}.", ""]
  plt = pyplot()
  fig, ax = plt.subplots(figsize=(9, 4.5))
  for i, r in enumerate(runs):
    ax.plot(*curves.train_curve(r.run, 5.0, base), color="C0",
            alpha=1.0 if i == 0 else 0.4, linewidth=1,
            label="ours: workers' training accuracy (5 s mean)"
            + (", each seed" if len(runs) > 1 else "") if i == 0 else None)
    ax.plot(*curves.eval_curve(r.run, base), ".-", color="C1",
            alpha=1.0 if i == 0 else 0.4, markersize=3, linewidth=0.8,
            label="ours: center's test accuracy" if i == 0 else None)
  if curve:
    _plot_thesis(ax, curve)
  ax.set_xlabel(plots.time_label(base))
  ax.set_ylabel("accuracy")
  ax.set_ylim(0.0, 1.0)
  ax.set_xlim(left=0)
  ax.grid(alpha=0.3)
  ax.set_title(f"AGN at n = {t.cell[0]}, λ = {t.cell[1]}")
  ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
  fig.tight_layout()
  source = ([f"The thesis' curve is read off its figure "
             "(`agn_experiments_workers_40.png`), whose y-axis starts at "
             f"{curve['axis_floor']:.2f}: below that its line is not drawn "
             "(triangles), so only its last ~200 s are points "
             "(`experiments/results/thesis_unstable_curve.json` says how "
             "they were read).", ""] if curve else [])
  return lines + source + ctx.link(
      save(fig, ctx.figure("grid-unstable.png")), "the unstable cell")
