"""REPORT.md, one module per section; `write` puts them together.

Each section module has `render(ctx) -> List[str]` (Markdown lines); a
five-line summary and the claims table open the report, the research
questions follow in order, the compute ledger and what has not run yet
close it.
"""

import os
import shlex
import time
from typing import List, NamedTuple, Optional, Sequence, Tuple

from experiments import plots
from experiments import rundirs
from experiments.report import design
from experiments.report import results as results_lib
from experiments.report import runner


class Context(NamedTuple):
  """What every section reads.

  Attributes:
    preset: the study's preset.
    study: its books (command, ledger).
    results: its runs.
    output_dir: where REPORT.md and the plots go.
    efficiency: E train's curve and window (`--efficiency_curve`,
      `--efficiency_window`).
    paper: a `--preset=paper` study's runs, if one was found (else None).
  """
  preset: design.Preset
  study: runner.Study
  results: results_lib.Results
  output_dir: str
  efficiency: Tuple[str, float]
  paper: Optional[results_lib.Results] = None

  @classmethod
  def build(cls, p: design.Preset, study: runner.Study, output_dir: str,
            efficiency: Tuple[str, float],
            paper_study_dir: Optional[str] = None) -> "Context":
    paper = None
    if (p.name != "paper" and paper_study_dir and
        os.path.isfile(os.path.join(paper_study_dir, runner.STUDY_FILE))):
      paper = results_lib.Results(design.preset("paper"), paper_study_dir)
    return cls(p, study, results_lib.Results(p, study.dir), output_dir,
               efficiency, paper)

  @property
  def command(self) -> str:
    return self.study.data.get("command") or (
        f"python -m experiments.report --preset={self.preset.name}")

  def figure(self, name: str) -> str:
    return os.path.join(self.output_dir, name)

  def link(self, path: Optional[str], alt: str) -> List[str]:
    if not path:
      return []
    return [f"![{alt}]({os.path.relpath(path, self.output_dir)})", ""]

  def efficiency_of(self, a, b):
    return results_lib.efficiency(a, b, *self.efficiency)


def pyplot():
  return plots.pyplot()


def save(fig, path: str) -> str:
  return plots.save(fig, path, dpi=100)


# A research question's answer, by the rule its section states before any
# run: the thesis' answer holds, fails, or the runs cannot tell; a question
# none of whose runs has completed is not run yet.
HOLDS, FAILS = "holds", "fails"
CANNOT_TELL, NOT_RUN_YET = "cannot be told from these runs", "not run yet"


class Answer(NamedTuple):
  """A research question's answer.

  Attributes:
    verdict: `HOLDS`, `FAILS`, `CANNOT_TELL` or `NOT_RUN_YET`.
    detail: what the runs showed that decided it, one sentence or "".
  """
  verdict: str
  detail: str = ""


def answer_lines(answer: Answer) -> List[str]:
  """The section's closing answer: the verdict in bold, then why."""
  return [f"**Answer: {answer.verdict}.**"
          + (f" {answer.detail}" if answer.detail else ""), ""]


def heading(rq: str, title: str) -> str:
  """A research question's section heading, `## RQk: its title`."""
  return f"## {rq}: {title}"


def pct(value: Optional[float], digits: int = 2) -> str:
  return "–" if value is None else f"{100 * value:.{digits}f} %"


def num(value: Optional[float], spec: str = ".3f") -> str:
  return "–" if value is None else format(value, spec)


def spread_text(half_width: float, spec: str = ".3f") -> str:
  """A half width in `spec`, or to one significant figure where `spec` would show 0.

  Seeds that agree to the third decimal have a spread, not none.

  >>> spread_text(0.0123), spread_text(0.00031), spread_text(0.0)
  ('0.012', '0.0003', '0.000')
  """
  text = format(half_width, spec.replace("+", ""))
  if half_width > 0 and float(text) == 0:
    text = format(half_width, ".1g")
  return text


def estimate_text(e: results_lib.Estimate, scale: float = 1.0,
                  spec: str = ".2f", unit: str = "") -> str:
  """"mean ± half width unit" (no ± for one seed), or "–".

  A sign in `spec` (`"+.2f"`) signs the mean only.

  >>> estimate_text(results_lib.Estimate(-0.012, 0.004, 3), 100, "+.2f")
  '-1.20 ± 0.40'
  >>> estimate_text(results_lib.Estimate(0.9991, 0.0002, 3), 1, ".3f")
  '0.999 ± 0.0002'
  """
  if e.mean is None:
    return "–"
  text = format(scale * e.mean, spec)
  if e.half_width is not None:
    text += " ± " + spread_text(scale * e.half_width, spec)
  return text + unit


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> List[str]:
  return (["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] +
          ["| " + " | ".join(r) + " |" for r in rows] + [""])


def duration(seconds: float) -> str:
  return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def by_hand(spec: design.RunSpec, study_dir: str) -> str:
  """The shell command that trains `spec` by hand, quoted for a POSIX shell.

  >>> spec = design.RunSpec(design.GRID, "agn", 2, 4, 0, 1.0, ())
  >>> by_hand(spec, "my study")  # doctest: +NORMALIZE_WHITESPACE
  "python -m experiments.train --strategy=agn --num_workers=2
  --communication_window=4 --seed=0 --epochs=1
  '--workdir=my study/grid/agn-n2-l4-s0'"
  """
  return shlex.join(["python", "-m", "experiments.train",
                     *_relative(spec.argv()),
                     f"--workdir={spec.path(study_dir)}"])


def runs_line(ctx: Context, specs: Sequence[design.RunSpec]) -> List[str]:
  """The command of one of the section's runs, how many completed, and each completed run left out and why."""
  if not specs:
    return []
  done = sum(ctx.results.get(s) is not None for s in specs)
  refused = [why for why in map(ctx.results.refusal, specs) if why]
  return [f"- **Runs:** {done} of {len(specs)} completed. One by hand: "
          f"`{by_hand(specs[0], ctx.study.dir)}`.", ""] + (
              [f"- **Left out:** {why}" for why in refused] + [""]
              if refused else [])


def _relative(argv: Sequence[str]) -> List[str]:
  out = []
  for a in argv:
    if a.startswith("--flagfile="):
      a = "--flagfile=" + os.path.relpath(a.split("=", 1)[1])
    out.append(a)
  return out


BEYOND_REPORT = os.path.join("beyond", "REPORT.md")


def _beyond_link(ctx: Context) -> List[str]:
  """A line pointing to the beyond study's report beside this one, if written."""
  if not os.path.isfile(os.path.join(ctx.output_dir, BEYOND_REPORT)):
    return []
  return ["Methods after the paper (Delayed Nesterov, Dynamic Local Updates, "
          "compressed commits) beside AGN and AEASGD under heterogeneous "
          f"speeds: [{BEYOND_REPORT}]({BEYOND_REPORT}) "
          "(`python -m experiments.report --preset=beyond`).", ""]


def write(ctx: Context) -> str:
  """Writes REPORT.md and its plots into `ctx.output_dir`; returns its path."""
  # pylint: disable=g-import-not-at-top
  from experiments.report import claims
  from experiments.report.sections import ablation
  from experiments.report.sections import alignment
  from experiments.report.sections import diloco
  from experiments.report.sections import downpour
  from experiments.report.sections import dynsgd
  from experiments.report.sections import grid
  from experiments.report.sections import heuristic
  from experiments.report.sections import ledger
  from experiments.report.sections import momentum
  from experiments.report.sections import normalization
  from experiments.report.sections import paper
  from experiments.report.sections import pending
  from experiments.report.sections import questions
  from experiments.report.sections import scaling
  from experiments.report.sections import seeds
  from experiments.report.sections import sensitivity
  from experiments.report.sections import staleness
  from experiments.report.sections import summary
  from experiments.report.sections import beyond
  from experiments.report.sections import language_model
  # pylint: enable=g-import-not-at-top
  os.makedirs(ctx.output_dir, exist_ok=True)
  p = ctx.preset
  title = ("# Beyond *Accumulated Gradient Normalization*: methods after "
           "the paper, in the same harness" if p.name == "beyond" else
           "# Reproducing *Accumulated Gradient Normalization* "
           "(Hermans et al., ACML 2017)")
  lines = [title, ""]
  lines += [f"Written by `{ctx.command}` on {time.strftime('%Y-%m-%d')} from "
            f"the runs in `{ctx.study.dir}`: preset **{p.name}**, "
            f"{p.description}."
            + (" **This is the test's shrink; it says nothing about the "
               "paper.**" if p.name == "quick" else ""), ""]
  if p.name == "beyond":
    order = (language_model, beyond, ledger)
  else:
    found = claims.claims(ctx)
    lines += summary.render(ctx, found)
    lines += claims.render(ctx, found)
    lines += questions.render(ctx)
    lines += _beyond_link(ctx)
    # The reproduction first (the grid and what explains it), then the
    # research questions in their order, then what lies beyond the paper;
    # what has not run closes the report.
    order = (grid, seeds, sensitivity, paper, ablation, staleness, downpour,
             heuristic, normalization, momentum, dynsgd, alignment, scaling,
             diloco, beyond, ledger, pending)
  for section in order:
    lines += section.render(ctx)
  path = os.path.join(ctx.output_dir, "REPORT.md")
  rundirs.write_report(path, "\n".join(lines))
  return path
