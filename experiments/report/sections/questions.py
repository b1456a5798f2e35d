"""The research questions RQ1–RQ5 in one table: each question and its answer by its section's rule."""

from typing import List

from experiments.report.sections import Context, table
from experiments.report.sections import alignment
from experiments.report.sections import dynsgd
from experiments.report.sections import momentum
from experiments.report.sections import normalization
from experiments.report.sections import scaling

# Each module names its question (`RQ`, `TITLE`, `QUESTION`) and answers it
# (`answer(ctx)`) by the rule its section states.
MODULES = (normalization, momentum, dynsgd, alignment, scaling)


def render(ctx: Context) -> List[str]:
  rows = []
  for module in MODULES:
    a = module.answer(ctx)
    rows.append([module.RQ, module.QUESTION, f"**{a.verdict}**"])
  lines = ["## Research questions", ""]
  lines += ["Each question has a section of its own below (titled by its "
            "number) with its measurement, figure, rule and the runs behind "
            "the answer. An answer says whether the thesis' answer to the "
            "question holds in our runs, fails, or cannot be told from "
            "them, by a rule fixed before the runs; it is reported as found.",
            ""]
  lines += table(["", "question", "answer"], rows)
  return lines
