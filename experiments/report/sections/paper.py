"""The paper preset's whole grid, when a GPU ran it; else (`not_run`) the command that runs it, for the report's closing list."""

from typing import List

from experiments.report import design
from experiments.report.sections import Context, estimate_text, table
from experiments.report.sections import grid


COMMAND = "python -m experiments.report --preset=paper"


def _cells(ctx: Context):
  return grid.shown_cells(ctx, ctx.paper) if ctx.paper is not None else {}


def not_run(ctx: Context) -> str:
  """A line saying the paper's whole grid has not run, and how to run it; "" where it has or this is it."""
  if ctx.preset.name == "paper" or _cells(ctx):
    return ""
  return ("the paper's whole 7 × 7 grid (3 seeds, 294 runs at the full "
          "budget): no GPU was lent to the sessions that wrote this report. "
          f"On a GPU host: `{COMMAND}` (`bash scripts/device_report.sh` runs "
          "as much of it as fits in 9 minutes and writes the results back); "
          "it resumes where it stops.")


def render(ctx: Context) -> List[str]:
  if ctx.preset.name == "paper":
    return []
  cells = _cells(ctx)
  if not cells:
    return []
  lines = ["## The whole grid at the paper's scale", ""]
  command = COMMAND
  ledger = runner_ledger(ctx)
  lines += [f"From `{command}` in `{ctx.paper.dir}` on "
            f"{', '.join(ledger) or 'an unrecorded device'}: "
            f"{len(cells)} of 49 cells completed.", ""]
  rows = []
  for (n, l), s in sorted(cells.items()):
    rows.append([str(n), str(l), str(s["seeds"]),
                 estimate_text(s[design.REFERENCE]["test"], 100),
                 estimate_text(s[design.BASELINE]["test"], 100),
                 estimate_text(s["e_train"], 1, ".3f"),
                 estimate_text(s["e_test"], 1, ".3f")])
  lines += table(["n", "λ", "seeds", "AGN test %", "AEASGD test %", "E train",
                  "E test"], rows)
  return lines


def runner_ledger(ctx: Context) -> List[str]:
  """The devices the paper study's runs were recorded on."""
  from experiments.report import runner  # pylint: disable=g-import-not-at-top
  study = runner.Study(ctx.paper.dir)
  return sorted({e.get("device", "?") for e in study.ledger.values()})
