"""The compute ledger: runs, samples, seconds, machine and device, per section and in total."""

from typing import List

from experiments.report import design
from experiments.report import runner
from experiments.report.sections import Context, duration, table


def cpu_text(seconds: float, partial: bool) -> str:
  """A CPU time, "≥" where some sitting's is missing, "–" for none."""
  if not seconds:
    return "–"
  return ("≥ " if partial else "") + duration(seconds)


def render(ctx: Context) -> List[str]:
  ledger = ctx.study.ledger
  lines = ["## Compute ledger", ""]
  rows, total, any_partial = [], [0, 0, 0.0, 0.0, 0.0], False
  for section in design.RUN_SECTIONS:
    specs = ctx.preset.section_runs(section)
    if not specs:
      continue
    entries = [ledger.get(f"{s.section}/{s.name}") for s in specs]
    done = sum(ctx.results.get(s) is not None for s in specs)
    samples = sum(ctx.preset.samples(s) for s in specs
                  if ctx.results.get(s) is not None)
    seconds = sum(e["seconds"] for e in entries if e)
    cpu = sum(e.get("cpu_seconds", 0.0) for e in entries if e)
    # CPU time of a sitting recorded before the ledger kept it is missing.
    partial = any(runner.cpu_sittings(e) < e["sittings"] for e in entries if e)
    where = sorted({f"{e.get('machine', '?')}; {e.get('device', '?')}"
                    for e in entries if e})
    rows.append([section, f"{done} of {len(specs)}", f"{samples / 1e6:.2f} M",
                 duration(seconds), cpu_text(cpu, partial),
                 "; ".join(where) or "–"])
    any_partial |= partial
    for i, v in enumerate((done, len(specs), samples, seconds, cpu)):
      total[i] += v
  rows.append(["**total**", f"{total[0]} of {total[1]}",
               f"{total[2] / 1e6:.2f} M", duration(total[3]),
               cpu_text(total[4], any_partial), ""])
  lines += table(["section", "runs completed", "samples", "wall time here",
                  "CPU time", "machine; device"], rows)
  lines += ["Wall time is this program's, summed over the sittings that ran "
            "each run (a study resumes where it stopped); it grows when "
            "other work shares the machine. CPU time is user + system time "
            "of this program and of the processes it started, on all cores "
            "together; \"≥\" marks a sum missing a sitting recorded before "
            "the ledger kept it.", ""]
  return lines
