"""RQ3: AGN against the other staleness answers, AEASGD and DynSGD, at cells of the grid.

DynSGD (Jiang et al. 2017) commits the raw accumulated delta and the server
scales it by 1/(τ + 1); it runs at the grid's full budget and setting beside
the grid's own AGN and AEASGD runs of the same cells.
"""

from typing import List, Optional, Tuple

from experiments import curves
from experiments import plots
from experiments.report import design
from experiments.report import results as results_lib
from experiments.report.sections import (CANNOT_TELL, FAILS, HOLDS,
                                         NOT_RUN_YET, Answer, Context,
                                         answer_lines, duration,
                                         estimate_text, heading, num, pyplot,
                                         runs_line, save, table)

STRATEGY = "dynsgd"
RQ, TITLE = "RQ3", "AGN against AEASGD and DynSGD"
QUESTION = ("Does AGN train better than the other answers to staleness, "
            "AEASGD's elastic pull and DynSGD's 1/(τ + 1) scaling of a raw "
            "delta?")
# AGN is ahead of a baseline in a cell when its final test accuracy is more
# than this higher; behind in the mirror case; else level.
POINTS = 0.005
AHEAD, LEVEL, BEHIND = "ahead", "level with", "behind"
RULE = ("In each cell, AGN is ahead of a baseline when its final test "
        "accuracy is more than 0.5 points higher, behind in the mirror case, "
        "else level. The thesis' answer (AGN trains better than both) holds "
        "when AGN is ahead in at least one (cell, baseline) pair and behind "
        "in none; it fails when AGN is behind in more pairs than it is "
        "ahead; else the runs cannot tell.")


def standing(agn: float, other: float) -> str:
  """AGN against one baseline in one cell, by `POINTS`.

  >>> standing(0.97, 0.95), standing(0.95, 0.952), standing(0.90, 0.95)
  ('ahead', 'level with', 'behind')
  """
  if abs(agn - other) <= POINTS:
    return LEVEL
  return AHEAD if agn > other else BEHIND


def verdict(standings: List[str]) -> str:
  """RQ3's verdict from every (cell, baseline) pair's standing (see `RULE`).

  >>> verdict(["ahead", "level with"]), verdict(["ahead", "behind"])
  ('holds', 'cannot be told from these runs')
  >>> verdict(["behind", "level with"]), verdict([])
  ('fails', 'not run yet')
  """
  if not standings:
    return NOT_RUN_YET
  ahead, behind = standings.count(AHEAD), standings.count(BEHIND)
  if ahead and not behind:
    return HOLDS
  if behind > ahead:
    return FAILS
  return CANNOT_TELL


def _of(standing_text: str) -> str:
  return standing_text if standing_text == LEVEL else standing_text + " of"


Runs = Tuple[Optional[results_lib.Figures], Optional[results_lib.Figures],
             Optional[results_lib.Figures]]


def cell_runs(ctx: Context, spec: design.RunSpec) -> Runs:
  """AGN's and AEASGD's grid runs of the DynSGD run's cell (seed 0), and the DynSGD run."""
  agn = ctx.results.seeds(design.GRID, design.REFERENCE, spec.cell)
  aeasgd = ctx.results.seeds(design.GRID, design.BASELINE, spec.cell)
  return (agn[0] if agn else None, aeasgd[0] if aeasgd else None,
          ctx.results.get(spec))


def answer(ctx: Context) -> Answer:
  """RQ3's answer by `RULE`, cell by cell."""
  standings, said = [], []
  for spec in ctx.preset.section_runs(design.DYNSGD):
    a, b, d = cell_runs(ctx, spec)
    if a is None or a.test_accuracy is None:
      continue
    parts = []
    for name, other in (("DynSGD", d), ("AEASGD", b)):
      if other is None or other.test_accuracy is None:
        continue
      standings.append(standing(a.test_accuracy, other.test_accuracy))
      parts.append(f"{_of(standings[-1])} {name}")
    if parts:
      said.append(f"at n = {spec.num_workers}, λ = "
                  f"{spec.communication_window} AGN is " + " and ".join(parts))
  text = "; ".join(said)
  return Answer(verdict(standings),
                text[:1].upper() + text[1:] + "." if text else "")


def _plot(ctx: Context, specs) -> Optional[str]:
  """The center's test accuracy over time of the three strategies, a panel per cell."""
  panels = [(spec, cell_runs(ctx, spec)) for spec in specs]
  panels = [(spec, runs) for spec, runs in panels if any(runs)]
  if not panels:
    return None
  plt = pyplot()
  fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.2),
                           squeeze=False)
  for ax, (spec, runs) in zip(axes.flat, panels):
    base = next(f for f in runs if f is not None).time_base
    for f, label, style in zip(runs, ("AGN", "AEASGD", "DynSGD"),
                               ("-", "--", ":")):
      if f is not None:
        ax.plot(*curves.eval_curve(f.run, base), style, label=label)
    ax.set_title(f"n = {spec.num_workers}, λ = {spec.communication_window} "
                 "(seed 0)")
    ax.set_xlabel(plots.time_label(base))
    ax.set_ylabel("center's test accuracy")
    ax.legend(fontsize=7)
  fig.tight_layout()
  return save(fig, ctx.figure("rq3-dynsgd.png"))


def render(ctx: Context) -> List[str]:
  specs = ctx.preset.section_runs(design.DYNSGD)
  if not specs:
    return []
  lines = [heading(RQ, TITLE), ""]
  lines += runs_line(ctx, specs)
  lines += [f"**Question.** {QUESTION} **Measurement.** DynSGD at "
            + ", ".join(f"(n = {s.num_workers}, λ = {s.communication_window})"
                        for s in specs)
            + ", at the grid's full budget and setting, beside the grid's AGN "
            "and AEASGD runs of the same cells (seed 0); E is E(AGN, "
            "DynSGD). The whole grid is RQ5's. **Rule, fixed before any of "
            "its results was read.** " + RULE, ""]
  rows = []
  for spec in specs:
    a, b, d = cell_runs(ctx, spec)
    row = [str(spec.num_workers), str(spec.communication_window)]
    for f in (a, b, d):
      row.append("–" if f is None else estimate_text(
          results_lib.estimate([f.test_accuracy]), 100, ".2f", " %"))
    e = ctx.efficiency_of(a, d) if a is not None and d is not None else {}
    row += [num(e.get("train")), num(e.get("test"))]
    if d is None:
      row.append(ctx.results.status(spec))
    else:
      row.append(f"{num(d.seconds, '.0f')} s")
    rows.append(row)
  lines += table(["n", "λ", "AGN test", "AEASGD test", "DynSGD test",
                  "E train (AGN, DynSGD)", "E test (AGN, DynSGD)",
                  "DynSGD time"], rows)
  lines += ctx.link(_plot(ctx, specs), "AGN, AEASGD and DynSGD")
  lines += answer_lines(answer(ctx))
  seconds = ctx.results.ledger_seconds(ctx.study.ledger, design.DYNSGD)
  lines += [f"Compute: {duration(seconds)} here.", ""]
  return lines
