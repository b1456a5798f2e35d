"""The λ heuristic λ ≈ (n + layers)/2 against always the smallest and always the largest λ."""

from typing import Dict, List, Optional

import numpy as np

from experiments.report import design
from experiments.report import formulas
from experiments.report.sections import Context, pct, table
from experiments.report.sections import grid

CHOICES = ("heuristic", "smallest", "largest")


def picks(ctx: Context) -> Dict[int, Dict[str, object]]:
  """Per n with at least two λ run at full budget: each rule's λ and AGN's accuracy there."""
  cells = grid.shown_cells(ctx)
  by_n: Dict[int, Dict[int, float]] = {}
  for (n, l), s in cells.items():
    if s[design.REFERENCE]["test"].mean is not None:
      by_n.setdefault(n, {})[l] = s[design.REFERENCE]["test"].mean
  out = {}
  for n, accuracy in sorted(by_n.items()):
    if len(accuracy) < 2:
      continue
    target = formulas.heuristic_window(n, ctx.preset.layers)
    chosen = {"heuristic": min(accuracy, key=lambda l: (abs(l - target), l)),
              "smallest": min(accuracy), "largest": max(accuracy)}
    out[n] = {"target": target, "windows": sorted(accuracy),
              **{k: (l, accuracy[l]) for k, l in chosen.items()}}
  return out


def scores(found: Dict[int, Dict[str, object]]) -> Dict[str, Optional[float]]:
  """Each rule's mean AGN accuracy over the n's."""
  return {k: (float(np.mean([f[k][1] for f in found.values()]))
              if found else None) for k in CHOICES}


def render(ctx: Context) -> List[str]:
  layers = ctx.preset.layers
  lines = ["## The λ heuristic", ""]
  lines += [f"λ ≈ (n + layers)/2 with {layers} weight layers, taken as the "
            "nearest λ run at the grid's full budget, against always the "
            "smallest and always the largest λ run at that n; scored by "
            "AGN's final test accuracy.", ""]
  found = picks(ctx)
  if not found:
    return lines + ["No n has two λ with completed full-budget runs yet.", ""]
  rows = [[str(n), ", ".join(map(str, f["windows"])), f"{f['target']:g}"] +
          [f"λ={f[k][0]}: {pct(f[k][1])}" for k in CHOICES]
          for n, f in found.items()]
  lines += table(["n", "λ run", "(n + layers)/2"] + list(CHOICES), rows)
  s = scores(found)
  lines += ["Mean over n: " + ", ".join(f"{k} {pct(v)}" for k, v in s.items())
            + ".", ""]
  return lines
