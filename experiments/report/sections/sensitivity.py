"""The sensitivity table: the grid in the thesis' setting against the old one.

The grid runs in the thesis' setting: each epoch a fresh random slice of the
data per worker (`--data_assignment=epoch_slices`) and the speeds fitted to
its staleness histogram (`--speed_model=thesis`). Its first cells run again
as the study committed before that (every worker cycling one fixed shard,
all equally fast: the round robin). This section sets the two side by side,
recomputes every grid verdict on the old runs, and says which change.
"""

from typing import Dict, List, Optional, Tuple

import numpy as np

from experiments.report import design
from experiments.report import results as results_lib
from experiments.report.sections import Context, duration, pct, table
from experiments.report.sections import grid


def old_setting(ctx: Context) -> Context:
  """`ctx` with the sensitivity runs standing in for the grid."""
  view = ctx.preset.as_sensitivity()
  return ctx._replace(preset=view,
                      results=results_lib.Results(view, ctx.results.dir))


def _test(s: Optional[Dict[str, object]], strategy: str,
          key: str = "test") -> Optional[float]:
  return None if s is None else s[strategy][key].mean


def _diff(new: Optional[float], old: Optional[float]) -> str:
  return "–" if new is None or old is None else f"{100 * (new - old):+.2f}"


def changed_verdicts(new, old) -> List[Tuple[object, object]]:
  """(new, old) claim pairs, matched by name, whose verdicts differ.

  >>> from experiments.report.claims import Claim
  >>> a = Claim("x", "p", "1", "reproduced", "acc")
  >>> b = Claim("x", "p", "2", "not reproduced", "acc")
  >>> [(n.ours, o.ours) for n, o in changed_verdicts([a], [b])]
  [('1', '2')]
  """
  by_name = {c.claim: c for c in old}
  return [(c, by_name[c.claim]) for c in new
          if c.claim in by_name and c.verdict != by_name[c.claim].verdict]


def render(ctx: Context) -> List[str]:
  # pylint: disable=g-import-not-at-top
  from experiments.report import claims as claims_lib
  specs = ctx.preset.section_runs(design.SENSITIVITY)
  if not specs:
    return []
  before = old_setting(ctx)
  lines = ["## Sensitivity: the thesis' setting against round robin over "
           "fixed shards", ""]
  lines += [f"- **Runs:** {sum(ctx.results.get(s) is not None for s in specs)}"
            f" of {len(specs)} completed: the grid's first "
            f"{len(before.preset.grid_cells)} cells again, seed 0, as the "
            "study committed before this one ran them: every worker cycles "
            "one fixed 1/n shard of the data (`--data_assignment=shards`) and "
            "all are equally fast (`--speed_model=constant`, commits in "
            "round robin). Same budget, model, optimizer and clock.", ""]
  new_cells, old_cells = grid.shown_cells(ctx), grid.shown_cells(before)
  rows = []
  for cell in before.preset.grid_cells:
    a, b = new_cells.get(cell), old_cells.get(cell)
    row = [str(cell[0]), str(cell[1])]
    for strategy in (design.REFERENCE, design.BASELINE):
      x, y = _test(a, strategy), _test(b, strategy)
      row += [pct(x), pct(y), _diff(x, y)]
    tx, ty = (_test(a, design.BASELINE, "train"),
              _test(b, design.BASELINE, "train"))
    row += [pct(tx), pct(ty)]
    ex = a["e_train"].mean if a else None
    ey = b["e_train"].mean if b else None
    row += ["–" if ex is None else f"{ex:.3f}",
            "–" if ey is None else f"{ey:.3f}"]
    rows.append(row)
  lines += ["Test accuracy (the center's) in the thesis' setting, in the old "
            "one, and the difference in points; AEASGD's training accuracy "
            "(its workers' last mini-batches), where fixed shards would show "
            "as overfitting; E train in each.", ""]
  lines += table(["n", "λ", "AGN new", "AGN old", "Δ", "AEASGD new",
                  "AEASGD old", "Δ", "AEASGD train new", "AEASGD train old",
                  "E train new", "E train old"], rows)
  both = [c for c in before.preset.grid_cells
          if c in new_cells and c in old_cells]
  if both:
    moved = {s: [100 * (_test(new_cells[c], s) - _test(old_cells[c], s))
                 for c in both if _test(new_cells[c], s) is not None
                 and _test(old_cells[c], s) is not None]
             for s in (design.REFERENCE, design.BASELINE)}
    lines += ["Over the " + str(len(both)) + " cells with both settings run, "
              "the thesis' setting moves test accuracy by "
              + "; ".join(f"{name} {np.mean(v):+.2f} points on average (from "
                          f"{min(v):+.2f} to {max(v):+.2f})"
                          for name, v in (("AGN", moved[design.REFERENCE]),
                                          ("AEASGD", moved[design.BASELINE]))
                          if v) + ".", ""]
  new, old = claims_lib.claims(ctx), claims_lib.claims(before)
  changed = changed_verdicts(new, old)
  grid_rules = {"E", "E cell", "acc", "order", "time", "lambda", "98"}
  compared = [c for c in new if c.rule in grid_rules and
              any(o.claim == c.claim for o in old)]
  lines += [f"Of the {len(compared)} verdicts that rest on the grid, "
            f"{len(changed)} change between the two settings"
            + (":" if changed else "."), ""]
  if changed:
    lines += table(["claim", "thesis' setting", "verdict", "old setting",
                    "verdict"],
                   [[n.claim, n.ours, n.verdict, o.ours, o.verdict]
                    for n, o in changed])
    lines += ["Each changes because the figure in its \"ours\" column "
              "crossed its rule's line when the data assignment and the "
              "commit timing changed; nothing else differs between the "
              "runs.", ""]
  seconds = ctx.results.ledger_seconds(ctx.study.ledger, design.SENSITIVITY)
  lines += [f"Compute: {duration(seconds)} here.", ""]
  return lines
