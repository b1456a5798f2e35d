"""A DiLoCo-style outer step made fair for asynchrony, beside plain AGN."""

from typing import List

from experiments.report import design
from experiments.report.sections import Context, duration, num, pct, table


def render(ctx: Context) -> List[str]:
  cell = ctx.preset.ablation_cell
  n, l = cell
  lines = ["## DiLoCo's outer step, made fair for asynchrony", ""]
  lines += ["DiLoCo applies Nesterov (lr 0.7, momentum 0.9) once per round "
            "to the mean of n workers' deltas. Here every asynchronous commit "
            "is one worker's delta, so the outer learning rate is divided by "
            f"n: 0.7/{n} = {0.7 / n:.3g}, momentum 0.9, applied by the server "
            "to each AGN commit. Plain AGN adds the commit. Same cell and "
            "budget as the ablation.", ""]
  specs = ctx.preset.section_runs(design.DILOCO)
  with_ = ctx.results.seeds(design.DILOCO, design.REFERENCE, cell, "nesterov")
  plain = ctx.results.seeds(design.ABLATION, design.REFERENCE, cell,
                            design.ROUND_ROBIN)
  a, b = (with_[0] if with_ else None), (plain[0] if plain else None)
  e = ctx.efficiency_of(a, b) if a and b else {"train": None, "test": None}
  lines += table(["n", "λ", "AGN test", "AGN + outer Nesterov test",
                  "E train (Nesterov, plain)", "E test (Nesterov, plain)"],
                 [[str(n), str(l), pct(b and b.test_accuracy),
                   pct(a and a.test_accuracy), num(e["train"]),
                   num(e["test"])]])
  seconds = ctx.results.ledger_seconds(ctx.study.ledger, design.DILOCO)
  lines += [f"Compute: {duration(seconds)} here ({len(specs)} run).", ""]
  return lines
