"""The compute ledger: runs, samples, seconds, machine and device, per section and in total."""

from typing import List

from experiments.report import design
from experiments.report.sections import Context, duration, table

SECTIONS = (design.GRID, design.DOWNPOUR, design.ABLATION, design.DILOCO)


def render(ctx: Context) -> List[str]:
  ledger = ctx.study.ledger
  lines = ["## Compute ledger", ""]
  rows, total = [], [0, 0, 0.0, 0.0]
  for section in SECTIONS:
    specs = ctx.preset.section_runs(section)
    entries = [ledger.get(f"{s.section}/{s.name}") for s in specs]
    done = sum(ctx.results.get(s) is not None for s in specs)
    samples = sum(ctx.preset.samples(s) for s in specs
                  if ctx.results.get(s) is not None)
    seconds = sum(e["seconds"] for e in entries if e)
    where = sorted({f"{e.get('machine', '?')}; {e.get('device', '?')}"
                    for e in entries if e})
    rows.append([section, f"{done} of {len(specs)}", f"{samples / 1e6:.2f} M",
                 duration(seconds), "; ".join(where) or "–"])
    for i, v in enumerate((done, len(specs), samples, seconds)):
      total[i] += v
  rows.append(["**total**", f"{total[0]} of {total[1]}",
               f"{total[2] / 1e6:.2f} M", duration(total[3]), ""])
  lines += table(["section", "runs completed", "samples", "seconds here",
                  "machine; device"], rows)
  lines += ["Seconds are wall time of this program's runs, summed over the "
            "sittings that ran them (a study resumes where it stopped).", ""]
  return lines
