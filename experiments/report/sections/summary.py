"""Five plain lines at the top of the report: the headline, the grid, the claims, the questions and what the numbers rest on."""

from typing import List

from experiments.report import claims
from experiments.report import design
from experiments.report import thesis
from experiments.report.sections import Context, estimate_text, pct
from experiments.report.sections import grid
from experiments.report.sections import questions


def _headline(ctx: Context, cells) -> str:
  n, l = claims.headline_cell(ctx.preset)
  s = cells.get((n, l))
  if s is None:
    return f"The headline cell (n = {n}, λ = {l}) has not run yet."
  t = thesis.cell(n, l)
  theirs = (f" (the thesis: {pct(t.agn_test_accuracy)} and "
            f"{pct(t.aeasgd_test_accuracy)})" if t else "")
  return (f"At the headline cell, n = {n} workers and communication window "
          f"λ = {l}, AGN ends at "
          f"{estimate_text(s[design.REFERENCE]['test'], 100, '.2f', ' %')} "
          "test accuracy and AEASGD at "
          f"{estimate_text(s[design.BASELINE]['test'], 100, '.2f', ' %')}"
          f"{theirs}.")


def _grid(cells) -> str:
  shown = sorted((c, s[design.REFERENCE]["test"].mean)
                 for c, s in cells.items()
                 if s[design.REFERENCE]["test"].mean is not None)
  if not shown:
    return "No cell of the grid has run yet."
  low = [f"({n}, {l}) {pct(v)}" for (n, l), v in shown
         if v < claims.ABOUT_98]
  return (f"Across the {len(shown)} grid cells run, AGN reaches "
          f"{pct(claims.ABOUT_98, 1)} test accuracy in "
          f"{len(shown) - len(low)} of them"
          + (f"; it falls short at (n, λ) = {', '.join(low)}" if low else "")
          + ".")


def render(ctx: Context, found) -> List[str]:
  """The summary; `found` is the claims table's rows (`claims.claims`)."""
  cells = grid.shown_cells(ctx)
  counts = {v: sum(c.verdict.startswith(v) for c in found)
            for v in (claims.REPRODUCED, claims.NOT_REPRODUCED,
                      claims.INCONCLUSIVE)}
  answers = ", ".join(f"{m.RQ} {m.answer(ctx).verdict}"
                      for m in questions.MODULES)
  total = len(ctx.preset.runs)
  done = sum(ctx.results.get(r) is not None for r in ctx.preset.runs)
  return ["## Summary", "",
          "- " + _headline(ctx, cells),
          "- " + _grid(cells),
          f"- Of the paper's {len(found)} claims tested below, "
          f"{counts[claims.REPRODUCED]} are reproduced, "
          f"{counts[claims.NOT_REPRODUCED]} not and "
          f"{counts[claims.INCONCLUSIVE]} inconclusive, each by a rule "
          "stated with it.",
          f"- Research questions: {answers}.",
          f"- {done} of {total} runs completed, on a simulated cluster whose "
          "clock is fitted to the thesis' published times (times are its "
          "modeled seconds); what has not run is listed at the end.", ""]
