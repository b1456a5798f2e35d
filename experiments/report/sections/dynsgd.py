"""RQ3: AGN against the other staleness answers, AEASGD and DynSGD, at cells of the grid.

DynSGD (Jiang et al. 2017) commits the raw accumulated delta and the server
scales it by 1/(τ + 1); it runs at the grid's full budget and setting beside
the grid's own AGN and AEASGD runs of the same cells.
"""

from typing import List

from experiments.report import design
from experiments.report import results as results_lib
from experiments.report.sections import (Context, duration, estimate_text,
                                         num, runs_line, table)

STRATEGY = "dynsgd"
# AGN is ahead of a baseline in a cell when its final test accuracy is more
# than this higher; behind in the mirror case; else level.
POINTS = 0.005


def standing(agn: float, other: float) -> str:
  """AGN against one baseline in one cell, by `POINTS`.

  >>> standing(0.97, 0.95), standing(0.95, 0.952), standing(0.90, 0.95)
  ('ahead', 'level with', 'behind')
  """
  if abs(agn - other) <= POINTS:
    return "level with"
  return "ahead" if agn > other else "behind"


def _of(standing_text: str) -> str:
  return standing_text if standing_text == "level with" else standing_text + " of"


def render(ctx: Context) -> List[str]:
  specs = ctx.preset.section_runs(design.DYNSGD)
  if not specs:
    return []
  lines = ["## RQ3: AGN against AEASGD and DynSGD", ""]
  lines += runs_line(ctx, specs)
  lines += ["**Question.** How does AGN compare with the other answers to "
            "staleness: AEASGD's elastic pull and DynSGD's 1/(τ + 1) scaling "
            "of a raw delta? **Measurement.** DynSGD at "
            + ", ".join(f"(n = {s.num_workers}, λ = {s.communication_window})"
                        for s in specs)
            + ", at the grid's full budget and setting, beside the grid's AGN "
            "and AEASGD runs of the same cells (seed 0). AGN is ahead of a "
            "baseline when its final test accuracy is more than 0.5 points "
            "higher, behind in the mirror case, else level; E is E(AGN, the "
            "baseline). The whole grid (RQ5) is the grid section's.", ""]
  rows, said = [], []
  for spec in specs:
    cell = spec.cell
    d = ctx.results.get(spec)
    agn = ctx.results.seeds(design.GRID, design.REFERENCE, cell)
    aeasgd = ctx.results.seeds(design.GRID, design.BASELINE, cell)
    a = agn[0] if agn else None
    row = [str(cell[0]), str(cell[1])]
    for f in (a, aeasgd[0] if aeasgd else None, d):
      row.append("–" if f is None else estimate_text(
          results_lib.estimate([f.test_accuracy]), 100, ".2f", " %"))
    e = ctx.efficiency_of(a, d) if a is not None and d is not None else {}
    row += [num(e.get("train")), num(e.get("test"))]
    if d is None:
      row.append(ctx.results.status(spec))
    else:
      row.append(f"{num(d.seconds, '.0f')} s")
    rows.append(row)
    if a is not None and d is not None and None not in (a.test_accuracy,
                                                         d.test_accuracy):
      said.append(f"at n = {cell[0]}, λ = {cell[1]} AGN is "
                  f"{_of(standing(a.test_accuracy, d.test_accuracy))} DynSGD")
      if aeasgd and aeasgd[0].test_accuracy is not None:
        said[-1] += (" and " + _of(standing(a.test_accuracy,
                                            aeasgd[0].test_accuracy))
                     + " AEASGD")
  lines += table(["n", "λ", "AGN test", "AEASGD test", "DynSGD test",
                  "E train (AGN, DynSGD)", "E test (AGN, DynSGD)",
                  "DynSGD time"], rows)
  text = "; ".join(said)
  lines += ["**Answer.** " + (text[:1].upper() + text[1:] + "." if said else
                              "Not run yet."), ""]
  seconds = ctx.results.ledger_seconds(ctx.study.ledger, design.DYNSGD)
  lines += [f"Compute: {duration(seconds)} here.", ""]
  return lines
