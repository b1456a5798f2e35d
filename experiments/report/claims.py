"""The paper's claims, each with the paper's figure, ours and a verdict by a rule stated here.

The rules were written before any run of the full-scale study, and nothing
is tuned to meet them. A verdict is "reproduced", "not reproduced" or
"inconclusive"; a claim without the runs it needs is "inconclusive (not run
yet)".
"""

import math
from typing import List, NamedTuple, Optional, Tuple

import numpy as np

from experiments.report import design
from experiments.report import results as results_lib
from experiments.report import thesis
from experiments.report.sections import Context, estimate_text, pct, table
from experiments.report.sections import ablation
from experiments.report.sections import downpour
from experiments.report.sections import grid
from experiments.report.sections import heuristic
from experiments.report.sections import staleness

REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE = (
    "reproduced", "not reproduced", "inconclusive")
# Accuracy tolerance: half a point, or the seeds' 95 % interval if wider.
ACCURACY_POINTS = 0.005
TIME_TOLERANCE = 0.10
STALENESS_TOLERANCE = 0.10
FRACTION_MAX_WIDTH = 0.30
ABOUT_98 = 0.975

RULES = (
    ("E", "the Wilson 95 % interval of our fraction of cells with E train > 1"
     " contains the paper's figure and is at most 30 points wide: "
     "reproduced; it excludes it: not reproduced; wider: inconclusive (too "
     "few cells)."),
    ("acc", "|ours − paper| ≤ max(0.5 points, the seeds' 95 % half width): "
     "reproduced; else not reproduced."),
    ("order", "AGN's accuracy minus AEASGD's has the paper's sign (and, with "
     "several seeds, an interval that excludes 0): reproduced; the opposite "
     "sign with such an interval, or with one seed: not reproduced; else "
     "inconclusive."),
    ("time", "within ±10 % of the paper's seconds: reproduced; else not "
     "reproduced; a figure the time model was fitted to: inconclusive (it "
     "cannot test itself)."),
    ("tau", "real processes' steady mean staleness within ±10 % of n − 1: "
     "reproduced; else not reproduced (the simulator's round robin gives "
     "n − 1 by construction and is not evidence)."),
    ("downpour", "every seed at n = 10 classified converged and every seed at "
     "n = 20 diverged by the divergence rule: reproduced; a seed classified "
     "the other way: not reproduced; else inconclusive."),
    ("lambda", "over the n with at least two λ run at full budget, the "
     "heuristic's mean AGN accuracy at least that of always-smallest and "
     "always-largest λ, and more than 0.1 points above one of them: "
     "reproduced; below either by more than 0.1 points: not reproduced; "
     "else (ties, or its picks equal a constant rule's everywhere): "
     "inconclusive."),
    ("98", "AGN's mean final test accuracy over the full-budget cells shown "
     "≥ 97.5 %: reproduced; else not reproduced."),
)
RULE_TEXT = dict(RULES)


class Claim(NamedTuple):
  claim: str
  paper: str
  ours: str
  verdict: str
  rule: str


def wilson(k: int, n: int, z: float = 1.959963984540054
           ) -> Tuple[float, float]:
  """The Wilson score interval of k successes in n trials.

  >>> [round(v, 3) for v in wilson(4, 5)]
  [0.376, 0.964]
  """
  if n == 0:
    return 0.0, 1.0
  p = k / n
  center = (p + z * z / (2 * n)) / (1 + z * z / n)
  half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
  return max(center - half, 0.0), min(center + half, 1.0)


def _missing(claim: str, paper: str, rule: str) -> Claim:
  return Claim(claim, paper, "–", f"{INCONCLUSIVE} (not run yet)", rule)


def fraction_claim(ctx: Context, cells) -> Claim:
  paper = thesis.CLAIMED_FRACTION_EFFICIENCY_ABOVE_ONE
  name = "AGN's E over AEASGD above 1 in most cells"
  paper_text = (f"{pct(paper)} (its table: 33/49 = 67.35 % with E > 1)")
  known = [s["e_train"].mean for s in cells.values()
           if s["e_train"].mean is not None]
  if not known:
    return _missing(name, paper_text, "E")
  k = sum(e > 1 for e in known)
  lo, hi = wilson(k, len(known))
  cells_text = f"{len(known)} cell" + ("s" if len(known) > 1 else "")
  verdict = (NOT_REPRODUCED if not lo <= paper <= hi else
             REPRODUCED if hi - lo <= FRACTION_MAX_WIDTH else
             f"{INCONCLUSIVE} ({cells_text})")
  return Claim(name, paper_text, f"{k}/{len(known)} = {pct(k / len(known))} "
               f"(95 %: {pct(lo, 0)}–{pct(hi, 0)})", verdict, "E")


def accuracy_claim(name: str, ours: results_lib.Estimate,
                   paper: float) -> Claim:
  if ours.mean is None:
    return _missing(name, pct(paper), "acc")
  tolerance = max(ACCURACY_POINTS, ours.half_width or 0.0)
  verdict = (REPRODUCED if abs(ours.mean - paper) <= tolerance else
             NOT_REPRODUCED)
  return Claim(name, pct(paper), estimate_text(ours, 100, ".2f", " %"),
               verdict, "acc")


def order_claim(ctx: Context, cell) -> Claim:
  name = f"AGN ahead of AEASGD at n = {cell[0]}, λ = {cell[1]}"
  h = thesis.cell(*cell)
  paper_gap = h.agn_test_accuracy - h.aeasgd_test_accuracy
  paper_text = f"{100 * paper_gap:+.2f} points"
  pairs = ctx.results.pairs(design.GRID, cell)
  gaps = [a.test_accuracy - b.test_accuracy for a, b in pairs
          if a.test_accuracy is not None and b.test_accuracy is not None]
  if not gaps:
    return _missing(name, paper_text, "order")
  e = results_lib.estimate(gaps)
  same = np.sign(e.mean) == np.sign(paper_gap)
  if e.half_width is None:
    verdict = REPRODUCED if same else NOT_REPRODUCED
  elif abs(e.mean) > e.half_width:
    verdict = REPRODUCED if same else NOT_REPRODUCED
  else:
    verdict = INCONCLUSIVE
  return Claim(name, paper_text, estimate_text(e, 100, "+.2f", " points"),
               verdict, "order")


def time_claim(name: str, ours: results_lib.Estimate, paper: float,
               fitted: bool) -> Claim:
  if ours.mean is None:
    return _missing(name, f"{paper:.2f} s", "time")
  within = abs(ours.mean / paper - 1) <= TIME_TOLERANCE
  verdict = (f"{INCONCLUSIVE} (the time model was fitted to it)" if fitted
             else REPRODUCED if within else NOT_REPRODUCED)
  return Claim(name, f"{paper:.2f} s", estimate_text(ours, 1, ".1f", " s")
               + " (modeled)", verdict, "time")


def staleness_claim(ctx: Context) -> Claim:
  name = "E[τ] = n − 1"
  n, _ = ctx.preset.ablation_cell
  runs = ctx.results.seeds(design.ABLATION, design.REFERENCE,
                           ctx.preset.ablation_cell, design.PROCESSES)
  steady = staleness.steady_mean(runs[0], n) if runs else None
  if steady is None:
    return _missing(name, f"{n - 1} at n = {n}", "tau")
  verdict = (REPRODUCED if abs(steady / (n - 1) - 1) <= STALENESS_TOLERANCE
             else NOT_REPRODUCED)
  return Claim(name, f"{n - 1} at n = {n}",
               f"{steady:.2f} (real processes, steady mean)", verdict, "tau")


def downpour_claim(ctx: Context) -> Claim:
  name = "DOWNPOUR converges at n = 10 and diverges at n = 20"
  found = downpour.verdicts(ctx)
  small, large = sorted(found)[:1], sorted(found)[1:]
  paper_text = "converges at n = 10, diverges at n = 20"
  if not small or not large or not found[small[0]] or not found[large[0]]:
    return _missing(name, paper_text, "downpour")
  a, b = found[small[0]], found[large[0]]
  ours = f"n = {small[0]}: {', '.join(a)}; n = {large[0]}: {', '.join(b)}"
  if ctx.preset.name == "quick":
    ours += " (quick: n = 2, 4)"
  if all(v == "converged" for v in a) and all(v == "diverged" for v in b):
    verdict = REPRODUCED
  elif "diverged" in a or "converged" in b:
    verdict = NOT_REPRODUCED
  else:
    verdict = INCONCLUSIVE
  return Claim(name, paper_text, ours, verdict, "downpour")


def lambda_claim(ctx: Context) -> Claim:
  name = "λ ≈ (n + layers)/2 is a good choice"
  found = heuristic.picks(ctx)
  if not found:
    return _missing(name, thesis.LAMBDA_HEURISTIC, "lambda")
  s = heuristic.scores(found)
  h = s["heuristic"]
  others = [s["smallest"], s["largest"]]
  same = any(all(f["heuristic"][0] == f[rule][0] for f in found.values())
             for rule in ("smallest", "largest"))
  if any(h < o - 0.001 for o in others):
    verdict = NOT_REPRODUCED
  elif not same and any(h > o + 0.001 for o in others):
    verdict = REPRODUCED
  else:
    verdict = INCONCLUSIVE + (" (its picks equal a constant rule's)" if same
                              else " (a tie)")
  ours = (f"heuristic {pct(h)}, smallest λ {pct(s['smallest'])}, largest λ "
          f"{pct(s['largest'])} (mean AGN test accuracy over "
          f"{len(found)} n)")
  return Claim(name, thesis.LAMBDA_HEURISTIC, ours, verdict, "lambda")


def about_98_claim(cells) -> Claim:
  name = "AGN reaches about 98 % test accuracy on MNIST"
  values = [s[design.REFERENCE]["test"].mean for s in cells.values()
            if s[design.REFERENCE]["test"].mean is not None]
  if not values:
    return _missing(name, "≈ 98 %", "98")
  mean = float(np.mean(values))
  return Claim(name, "≈ 98 % (98.18 % at n = λ = 40)",
               f"{pct(mean)} (mean of {len(values)} cell"
               f"{'s' if len(values) > 1 else ''})",
               REPRODUCED if mean >= ABOUT_98 else NOT_REPRODUCED, "98")


def claims(ctx: Context) -> List[Claim]:
  cells = grid.shown_cells(ctx)
  headline = ctx.preset.grid_cells[0]
  s = cells.get(headline)
  empty = results_lib.Estimate(None, None, 0)
  h = thesis.cell(*headline) or thesis.HEADLINE
  fitted = ctx.preset.name != "quick"  # The paper cluster's fit.
  n, l = headline
  out = [fraction_claim(ctx, cells)]
  out.append(accuracy_claim(f"AGN test accuracy at n = {n}, λ = {l}",
                            s[design.REFERENCE]["test"] if s else empty,
                            h.agn_test_accuracy))
  out.append(accuracy_claim(f"AEASGD test accuracy at n = {n}, λ = {l}",
                            s[design.BASELINE]["test"] if s else empty,
                            h.aeasgd_test_accuracy))
  out.append(order_claim(ctx, headline) if thesis.cell(*headline) else
             _missing("AGN ahead of AEASGD", "–", "order"))
  out.append(time_claim(f"AGN time at n = {n}, λ = {l}",
                        s[design.REFERENCE]["seconds"] if s else empty,
                        h.agn_seconds, fitted))
  out.append(time_claim(f"AEASGD time at n = {n}, λ = {l}",
                        s[design.BASELINE]["seconds"] if s else empty,
                        h.aeasgd_seconds, False))
  out.append(staleness_claim(ctx))
  out.append(downpour_claim(ctx))
  out.append(lambda_claim(ctx))
  out.append(about_98_claim(cells))
  return out


def render(ctx: Context) -> List[str]:
  found = claims(ctx)
  lines = ["## The paper's claims, and our verdicts", ""]
  if ctx.preset.name == "quick":
    lines += ["(The quick preset's cells stand in for the paper's; the "
              "verdicts only exercise the rules.)", ""]
  lines += table(["claim", "paper", "ours", "verdict", "rule"],
                 [[c.claim, c.paper, c.ours, c.verdict, c.rule]
                  for c in found])
  lines += ["Rules, fixed before the runs:", ""]
  lines += [f"- **{key}**: {text}" for key, text in RULES] + [""]
  counts = {v: sum(c.verdict.startswith(v) for c in found)
            for v in (NOT_REPRODUCED, REPRODUCED, INCONCLUSIVE)}
  lines += [f"{counts[REPRODUCED]} reproduced, {counts[NOT_REPRODUCED]} not "
            f"reproduced, {counts[INCONCLUSIVE]} inconclusive.", ""]
  lines += _differences(ctx, found)
  return lines


def _differences(ctx: Context, found: List[Claim]) -> List[str]:
  """Where ours differ from the thesis' beyond the seeds' spread, what the ablation says."""
  differing = [c for c in found if c.verdict == NOT_REPRODUCED]
  if not differing:
    return []
  n, l = ctx.preset.ablation_cell
  lines = ["Where we differ, the ablation (below) varies the likely causes. "
           f"At n = {n}, λ = {l}: "]
  f = ablation.figures(ctx)
  said = []
  for key, what in (("e_train", "E train"), ("aeasgd", "AEASGD's accuracy")):
    v = ablation.largest_effect(f, key)
    if v is not None:
      said.append(f"{what} moves most with {ablation.variant_text(v)}")
  lines[0] += ("; ".join(said) + "." if said else
               "no ablation run has completed yet.")
  gap = ablation.gap_figures(ctx)
  moved = ablation.gap_moved(gap)
  order = ablation.largest_gap_order(gap)
  if moved is not None or order is not None:
    n, l = gap["cell"]
    lines[0] += f" At n = {n}, λ = {l}, where many workers widen the gap:"
    if moved is not None:
      lines[0] += (f" α = {design.ALPHA_VARIANT:g} moves AEASGD's test "
                   f"accuracy by {100 * moved:+.2f} points")
    if order is not None:
      lines[0] += ((";" if moved is not None else "") +
                   f" AGN's test accuracy moves most with "
                   f"{ablation.variant_text(order[0])}, by "
                   f"{100 * order[1]:+.2f} points from the round robin")
    lines[0] += "."
  return lines + [""]
