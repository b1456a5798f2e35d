"""The ablation: which of the likely causes moves our figures away from the thesis'.

At one cell and a reduced budget it varies one thing at a time from the
grid's setting (the simulator's round robin, the thesis' α = 0.05, E on the
thesis' curve): the commit order (random speeds, real processes), AEASGD's
α, and the E curve. Real processes beside the simulator is also the check of
simulation against reality.
"""

from typing import Dict, List, Optional

import numpy as np

from experiments.report import budget
from experiments.report import design
from experiments.report import results as results_lib
from experiments.report.sections import (Context, duration, num, pct, pyplot,
                                         runs_line, save, table)

ORDERS = (design.ROUND_ROBIN, design.RANDOM, design.PROCESSES)
ORDER_TEXT = {
    design.ROUND_ROBIN: "simulator, equal speeds (round robin, as the grid)",
    design.RANDOM: f"simulator, `--speed_model={design.RANDOM_SPEEDS}`",
    design.PROCESSES: "real processes on this machine's cores",
    design.LOGNORMAL: (f"simulator, `--speed_model={design.LOGNORMAL_SPEEDS}`"
                       " (each worker its own speed)"),
}


def alpha_variant() -> str:
  return f"alpha{design.ALPHA_VARIANT:g}"


def variant_text(variant: str) -> str:
  """What an ablation variant changes, in words."""
  if variant in ORDER_TEXT:
    return ORDER_TEXT[variant]
  if variant == alpha_variant():
    return f"α = {design.ALPHA_VARIANT:g}"
  return "the other E curve"


def largest_gap_order(gap: Optional[Dict[str, Optional[float]]]
                      ) -> Optional[tuple]:
  """`(variant, moved)`: the commit order that moves AGN's accuracy furthest from round robin at the gap cell."""
  moves = {v: order_moved(gap, key) for key, v in (
      ("agn_random", design.RANDOM), ("agn_lognormal", design.LOGNORMAL))}
  moves = {v: m for v, m in moves.items() if m is not None}
  if not moves:
    return None
  v = max(moves, key=lambda k: abs(moves[k]))
  return v, moves[v]


def figures(ctx: Context) -> Dict[str, Dict[str, Optional[float]]]:
  """Per variant: AGN and AEASGD test accuracy, E train and E test."""
  cell = ctx.preset.ablation_cell
  out = {}
  for order in ORDERS:
    a = ctx.results.seeds(design.ABLATION, design.REFERENCE, cell, order)
    b = ctx.results.seeds(design.ABLATION, design.BASELINE, cell, order)
    a, b = (a[0] if a else None), (b[0] if b else None)
    e = (ctx.efficiency_of(a, b) if a and b else {"train": None, "test": None})
    out[order] = {"agn": a and a.test_accuracy,
                  "aeasgd": b and b.test_accuracy,
                  "e_train": e["train"], "e_test": e["test"]}
  a = ctx.results.seeds(design.ABLATION, design.REFERENCE, cell,
                        design.ROUND_ROBIN)
  b = ctx.results.seeds(design.ABLATION, design.BASELINE, cell,
                        alpha_variant())
  a, b = (a[0] if a else None), (b[0] if b else None)
  e = ctx.efficiency_of(a, b) if a and b else {"train": None, "test": None}
  out[alpha_variant()] = {"agn": a and a.test_accuracy,
                          "aeasgd": b and b.test_accuracy,
                          "e_train": e["train"], "e_test": e["test"]}
  # The other E curve on the round-robin pair.
  a = ctx.results.seeds(design.ABLATION, design.REFERENCE, cell,
                        design.ROUND_ROBIN)
  b = ctx.results.seeds(design.ABLATION, design.BASELINE, cell,
                        design.ROUND_ROBIN)
  other = "commits" if ctx.efficiency[0] == "thesis" else "thesis"
  e = (results_lib.efficiency(a[0], b[0], other, ctx.efficiency[1])
       if a and b else {"train": None})
  out["curve"] = {"agn": None, "aeasgd": None, "e_train": e["train"],
                  "e_test": None, "name": other}
  return out


def gap_figures(ctx: Context) -> Optional[Dict[str, Optional[float]]]:
  """AEASGD's test accuracy at the gap cell with the thesis' α and the other.

  Returns None where the preset has no gap cell (or runs none there); else
  the cell and the two accuracies (None until run).
  """
  cell = ctx.preset.gap_cell
  if cell is None or not ctx.results.find(design.ABLATION, design.BASELINE,
                                          cell, design.THESIS_ALPHA):
    return None
  out = {"cell": cell}
  for key, strategy, variant in (
      ("thesis_alpha", design.BASELINE, design.THESIS_ALPHA),
      ("alpha", design.BASELINE, alpha_variant()),
      ("agn_round_robin", design.REFERENCE, design.ROUND_ROBIN),
      ("agn_random", design.REFERENCE, design.RANDOM),
      ("agn_lognormal", design.REFERENCE, design.LOGNORMAL)):
    found = ctx.results.seeds(design.ABLATION, strategy, cell, variant)
    out[key] = found[0].test_accuracy if found else None
  return out


def order_moved(gap: Optional[Dict[str, Optional[float]]], key: str
                ) -> Optional[float]:
  """How far a commit order (`key`) moves AGN's accuracy from round robin at the gap cell."""
  if not gap or gap.get(key) is None or gap.get("agn_round_robin") is None:
    return None
  return gap[key] - gap["agn_round_robin"]


def gap_moved(gap: Optional[Dict[str, Optional[float]]]) -> Optional[float]:
  """How far α = `design.ALPHA_VARIANT` moves AEASGD's accuracy at the gap cell."""
  if not gap or gap["alpha"] is None or gap["thesis_alpha"] is None:
    return None
  return gap["alpha"] - gap["thesis_alpha"]


def largest_effect(found: Dict[str, Dict[str, Optional[float]]], key: str
                   ) -> Optional[str]:
  """The variant that moves `key` furthest from the round-robin baseline."""
  base = found[design.ROUND_ROBIN][key]
  if base is None:
    return None
  moves = {v: abs(f[key] - base) for v, f in found.items()
           if v != design.ROUND_ROBIN and f.get(key) is not None}
  return max(moves, key=moves.get) if moves else None


def render(ctx: Context) -> List[str]:
  p = ctx.preset
  specs = (p.section_runs(design.ABLATION))
  n, l = p.ablation_cell
  lines = ["## The ablation: commit order, α and the E curve", ""]
  lines += runs_line(ctx, specs)
  if specs:
    lines += [f"- **Cell and budget:** n = {n}, λ = {l}, {specs[0].epochs:g} "
              "epochs (reduced from the grid's, so it fits the preset's time;"
              " an ablation compares variants with each other, not with the "
              "thesis).", ""]
  found = figures(ctx)
  rows = []
  for order in ORDERS:
    f = found[order]
    rows.append([ORDER_TEXT[order], pct(f["agn"]), pct(f["aeasgd"]),
                 num(f["e_train"]), num(f["e_test"])])
  if any(r.cell == p.ablation_cell and r.variant == alpha_variant()
         for r in specs):  # Else α varies only at the gap cell.
    f = found[alpha_variant()]
    rows.append([f"AEASGD with α = {design.ALPHA_VARIANT:g} (thesis 0.05), "
                 "round robin", pct(f["agn"]), pct(f["aeasgd"]),
                 num(f["e_train"]), num(f["e_test"])])
  f = found["curve"]
  rows.append([f"E train on `--efficiency_curve={f['name']}`, round robin",
               "", "", num(f["e_train"]), ""])
  lines += table(["variant", "AGN test", "AEASGD test", "E train", "E test"],
                 rows)
  said = []
  for key, what in (("e_train", "E train"), ("aeasgd", "AEASGD's accuracy"),
                    ("agn", "AGN's accuracy")):
    v = largest_effect(found, key)
    if v is not None:
      base = found[design.ROUND_ROBIN][key]
      moved = found[v][key] - base
      said.append(f"{what} moves most with {variant_text(v)}: "
                  + (f"{100 * moved:+.2f} points" if key != "e_train" else
                     f"{moved:+.3f}") + " from the round-robin baseline.")
  lines += [" ".join(said) if said else "No ablation run has completed.", ""]
  lines += _gap(ctx, specs)
  path = _plot(ctx, found)
  lines += ctx.link(path, "ablation")
  seconds = ctx.results.ledger_seconds(ctx.study.ledger, design.ABLATION)
  lines += [f"Compute: {duration(seconds)} here. Real processes count "
            "seconds since their start barrier; the simulator counts modeled "
            "seconds of the paper's cluster: E on each is a ratio on its "
            "own clock.", ""]
  return lines


def _gap(ctx: Context, specs) -> List[str]:
  """AEASGD's α again where many workers are expected to widen the gap."""
  gap = gap_figures(ctx)
  if gap is None:
    return []
  n, l = gap["cell"]
  epochs = next((r.epochs for r in specs if r.cell == gap["cell"]), None)
  epochs_note = f" ({epochs:g} epochs)" if epochs is not None else ""
  lines = [f"AEASGD's α again at n = {n}, λ = {l}{epochs_note}, the "
           "cell with the most workers, then the longest window, that keeps "
           f"{budget.MIN_WINDOWS} windows a worker at this budget (chosen "
           "before the runs: with many workers the center, which moves by α "
           "of one worker's distance a commit, lags furthest):", ""]
  lines += table(["α", "AEASGD test"], [
      ["0.05 (the thesis')", pct(gap["thesis_alpha"])],
      [f"{design.ALPHA_VARIANT:g}", pct(gap["alpha"])]])
  moved = gap_moved(gap)
  if moved is not None:
    lines += [f"α = {design.ALPHA_VARIANT:g} moves AEASGD's test accuracy "
              f"there by {100 * moved:+.2f} points.", ""]
  ratios = sorted({c[0] / c[1] for c in ctx.preset.grid_cells})
  lines += [f"AGN's commit order at the same cell and budget. Each commit "
            f"is 1/λ of a window's update and n workers commit, so per local "
            f"step of one worker the center moves n/λ = {n / l:g} times as "
            "far as that worker's own optimizer would, with staleness about "
            f"n − 1; the grid's n/λ are {', '.join(f'{r:.3g}' for r in ratios)}"
            ". Random speeds (redrawn every window) replace the round "
            "robin's fixed delay n − 1 with a spread one; lognormal speeds "
            "(one per worker for the whole run) also let the fast workers "
            "finish their shares first, so the last commits come from few "
            "workers, as on a real cluster of unequal nodes:", ""]
  rows, said = [], []
  for key, variant in (("agn_round_robin", design.ROUND_ROBIN),
                       ("agn_random", design.RANDOM),
                       ("agn_lognormal", design.LOGNORMAL)):
    rows.append([ORDER_TEXT[variant], pct(gap.get(key))])
    moved = order_moved(gap, key)
    if moved is not None and variant != design.ROUND_ROBIN:
      said.append(f"{variant} speeds move AGN's test accuracy there by "
                  f"{100 * moved:+.2f} points from the round robin.")
  lines += table(["commit order", "AGN test"], rows)
  if said:
    lines += [" ".join(said), ""]
  return lines


def _plot(ctx: Context, found) -> Optional[str]:
  if all(found[o]["agn"] is None for o in ORDERS):
    return None
  plt = pyplot()
  fig, axes = plt.subplots(1, 2, figsize=(12, 3.8))
  x = np.arange(len(ORDERS))
  for i, key in enumerate(("agn", "aeasgd")):
    axes[0].bar(x + (i - 0.5) * 0.35,
                [np.nan if found[o][key] is None else found[o][key]
                 for o in ORDERS], width=0.35, label=key)
  axes[0].set_xticks(x, ORDERS)
  axes[0].set_ylabel("final test accuracy")
  axes[0].legend(fontsize=8)
  values = [found[o]["e_train"] for o in ORDERS]
  axes[1].bar(x, [np.nan if v is None else v for v in values])
  axes[1].axhline(1.0, color="k", lw=0.8)
  axes[1].set_xticks(x, ORDERS)
  axes[1].set_ylabel("E train (AGN, AEASGD)")
  fig.tight_layout()
  return save(fig, ctx.figure("ablation.png"))
