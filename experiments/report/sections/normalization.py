"""RQ1: AGN with its normalization on against off ("DOWNPOUR with accumulation").

At one n and a few λ, AGN commits the window's accumulated delta divided by
λ (normalized) or whole (unnormalized: the thesis' "DOWNPOUR with
accumulation", its motivation for normalizing). Everything else is the
grid's setting, at a reduced budget.
"""

from typing import Dict, List, Optional, Tuple

from experiments import curves
from experiments import plots
from experiments.report import design
from experiments.report import thesis
from experiments.report.sections import (CANNOT_TELL, FAILS, HOLDS,
                                         NOT_RUN_YET, Answer, Context,
                                         answer_lines, duration, heading, num,
                                         pct, pyplot, runs_line, save, table)
from experiments.report.sections import downpour

RQ, TITLE = "RQ1", "does normalizing the accumulated delta matter?"
QUESTION = ("Does dividing the accumulated delta by λ make AGN train better "
            "than committing it whole (the thesis' \"DOWNPOUR with "
            "accumulation\")?")

# A λ's runs differ when one diverged and the other did not, or when their
# final test accuracies part by more than this.
POINTS = 0.005
HELPS, HURTS, SAME = "helps", "hurts", "no difference"
RULE = ("At each λ, normalization helps when the unnormalized run diverged "
        "(or failed) and the normalized one did not, or when the normalized "
        "run's final test accuracy is more than 0.5 points higher; it hurts "
        "in the mirror case; else no difference. The paper's explanation "
        "holds when it helps at a majority of the λ run and hurts at none; "
        "it fails when it hurts at a majority and helps at none; else the "
        "runs cannot tell.")


def effect(normalized: Tuple[str, Optional[float]],
           unnormalized: Tuple[str, Optional[float]]) -> str:
  """What normalization does at one λ, from each run's (class, final test accuracy).

  >>> effect(("converged", 0.95), ("diverged", 0.11))
  'helps'
  >>> effect(("converged", 0.95), ("converged", 0.952))
  'no difference'
  >>> effect(("converged", 0.90), ("converged", 0.93))
  'hurts'
  """
  bad = ("diverged", "failed")
  (ca, a), (cb, b) = normalized, unnormalized
  if (ca in bad) != (cb in bad):
    return HURTS if ca in bad else HELPS
  if a is None or b is None or abs(a - b) <= POINTS:
    return SAME
  return HELPS if a > b else HURTS


def verdict(effects: List[str]) -> str:
  """The section's verdict from the λ's effects (see `RULE`).

  >>> verdict(["helps", "helps", "no difference"])
  'holds'
  >>> verdict(["helps", "hurts", "helps"])
  'cannot be told from these runs'
  >>> verdict([])
  'not run yet'
  """
  if not effects:
    return NOT_RUN_YET
  helps, hurts = effects.count(HELPS), effects.count(HURTS)
  if helps > len(effects) / 2 and not hurts:
    return HOLDS
  if hurts > len(effects) / 2 and not helps:
    return FAILS
  return CANNOT_TELL


def answer(ctx: Context) -> Answer:
  """RQ1's answer by `RULE`, naming each λ's effect."""
  found = figures(ctx)
  effects = [(l, found[l]["effect"]) for l in sorted(found)
             if found[l]["effect"]]
  said = "; ".join(f"at λ = {l} normalization "
                   + ("makes no difference" if e == SAME else e)
                   for l, e in effects)
  return Answer(verdict([e for _, e in effects]),
                said[:1].upper() + said[1:] + "." if said else "")


def thesis_unnormalized(n: int, l: int) -> Optional[bool]:
  """Whether the thesis' "DOWNPOUR with accumulation" converged at (n, λ), None where it has no run.

  >>> thesis_unnormalized(10, 5), thesis_unnormalized(40, 5)
  (False, None)
  """
  for r in thesis.DOWNPOUR.runs:
    if (r.workers, r.communication_window) == (n, l) and l > 1:
      return r.converged
  return None


def _class(f) -> str:
  return downpour.classified(f.convergence,
                             f.run.summary.get("rejected_commits"))


def figures(ctx: Context) -> Dict[int, Dict[str, object]]:
  """Per λ: each variant's run figures (None if not completed) and the effect."""
  out = {}
  for spec in ctx.preset.section_runs(design.NORMALIZATION):
    row = out.setdefault(spec.communication_window, {})
    row[spec.variant] = ctx.results.get(spec)
    row.setdefault("specs", {})[spec.variant] = spec
  for l, row in out.items():
    a, b = row.get(design.NORMALIZED), row.get(design.UNNORMALIZED)
    row["effect"] = (effect((_class(a), a.test_accuracy),
                            (_class(b), b.test_accuracy))
                     if a is not None and b is not None else None)
  return out


def render(ctx: Context) -> List[str]:
  specs = ctx.preset.section_runs(design.NORMALIZATION)
  if not specs:
    return []
  n = specs[0].num_workers
  windows = ", ".join(str(l) for l in sorted({s.communication_window
                                              for s in specs}))
  lines = [heading(RQ, TITLE), ""]
  lines += runs_line(ctx, specs)
  lines += [f"**Question.** {QUESTION} **Measurement.** AGN at "
            f"n = {n}, λ ∈ {{{windows}}}, "
            f"{specs[0].epochs:g} epochs, in the grid's setting, with "
            "`--normalization=window` against `--normalization=none`; "
            "nothing else differs. The thesis ran the unnormalized runs as "
            "DOWNPOUR with accumulation at n = 10, λ ∈ {5, 10, 20}, and none "
            "converged. **Rule, fixed before the runs.** " + RULE, ""]
  found = figures(ctx)
  rows = []
  for l in sorted(found):
    row = found[l]
    cells = [str(l)]
    for variant in (design.NORMALIZED, design.UNNORMALIZED):
      f = row.get(variant)
      if f is None:
        spec = row["specs"].get(variant)
        cells += [ctx.results.status(spec) if spec else "–", "–", "–"]
      else:
        cells += [_class(f), pct(f.test_accuracy),
                  str(f.run.summary.get("rejected_commits", "–"))]
    theirs = thesis_unnormalized(n, l)
    cells.append("–" if theirs is None else
                 ("converged" if theirs else "diverged"))
    a, b = row.get(design.NORMALIZED), row.get(design.UNNORMALIZED)
    e = ctx.efficiency_of(a, b) if a is not None and b is not None else {}
    cells += [num(e.get("train")), num(e.get("test")), row["effect"] or "–"]
    rows.append(cells)
  lines += table(["λ", "normalized", "test acc", "rejected",
                  "unnormalized", "test acc", "rejected",
                  "thesis' unnormalized",
                  "E train (norm., unnorm.)", "E test (norm., unnorm.)",
                  "normalization"], rows)
  plotted = [(l, v, found[l][v]) for l in sorted(found)
             for v in (design.NORMALIZED, design.UNNORMALIZED)
             if found[l].get(v) is not None]
  if plotted:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    colors = {l: f"C{i}" for i, l in enumerate(sorted(found))}
    for l, v, f in plotted:
      ax.plot(*curves.eval_curve(f.run, f.time_base), color=colors[l],
              linestyle="-" if v == design.NORMALIZED else "--",
              label=f"λ={l} {v}")
    ax.set_xlabel(plots.time_label(plotted[0][2].time_base))
    ax.set_ylabel("center's test accuracy")
    ax.set_title(f"AGN at n = {n}: normalized (solid) against unnormalized "
                 "(dashed)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    lines += ctx.link(save(fig, ctx.figure("normalization.png")),
                      "normalization on against off")
  lines += answer_lines(answer(ctx))
  seconds = ctx.results.ledger_seconds(ctx.study.ledger, design.NORMALIZATION)
  lines += [f"Compute: {duration(seconds)} here.", ""]
  return lines
