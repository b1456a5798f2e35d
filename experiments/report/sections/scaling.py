"""RQ5: AGN against AEASGD across the number of workers n and the communication window λ, read from the grid's cells."""

from typing import Dict, List, Optional, Tuple

from experiments.report import design
from experiments.report import thesis
from experiments.report.sections import (CANNOT_TELL, FAILS, HOLDS,
                                         NOT_RUN_YET, Answer, Context,
                                         answer_lines, heading, pyplot, save)
from experiments.report.sections import grid

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
  cells = grid.shown_cells(ctx)
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


def render(ctx: Context) -> List[str]:
  """The RQ5 section: the grid's cells read across n and λ."""
  cells = grid.shown_cells(ctx)
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
