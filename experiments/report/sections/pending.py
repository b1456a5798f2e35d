"""What has not run yet, in one short list at the end of the report."""

from typing import List

from experiments.report import design
from experiments.report.sections import Context
from experiments.report.sections import paper


def items(ctx: Context) -> List[str]:
  """One line per section with runs still to run, and the paper's whole grid if it has not run."""
  out = []
  for section in design.RUN_SECTIONS:
    specs = ctx.preset.section_runs(section)
    done = sum(ctx.results.get(s) is not None for s in specs)
    if done < len(specs):
      out.append(f"{section}: {done} of {len(specs)} runs completed; "
                 f"`{ctx.command}` runs the rest (it resumes where it "
                 "stopped).")
  whole = paper.not_run(ctx)
  if whole:
    out.append(whole)
  return out


def render(ctx: Context) -> List[str]:
  found = items(ctx)
  if not found:
    return []
  return ["## Not yet run", ""] + [f"- {line}" for line in found] + [""]
