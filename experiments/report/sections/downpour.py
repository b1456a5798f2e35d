"""DOWNPOUR at n = 10 and n = 20 as the thesis ran it, classified by the divergence rule."""

from typing import List

from agn_jax import metrics
from experiments import curves
from experiments import plots
from experiments.report import design
from experiments.report import thesis
from experiments.report.sections import (Context, duration, pct, pyplot,
                                         runs_line, save, table)


def classified(convergence: str, rejected_commits) -> str:
  """A run's class, where a rejected (non-finite) commit counts as divergence.

  The thesis' dist-keras applied every commit, so a commit our server
  rejected as non-finite would have diverged its center.

  >>> classified("converged", 0), classified("converged", 3)
  ('converged', 'diverged')
  """
  if isinstance(rejected_commits, (int, float)) and rejected_commits > 0:
    return "diverged"
  return convergence


def verdicts(ctx: Context):
  """{n: [class of each completed seed]} (see `classified`)."""
  out = {}
  for spec in ctx.preset.section_runs(design.DOWNPOUR):
    f = ctx.results.get(spec)
    out.setdefault(spec.num_workers, [])
    if f is not None:
      out[spec.num_workers].append(classified(
          f.convergence, f.run.summary.get("rejected_commits")))
  return out


def render(ctx: Context) -> List[str]:
  specs = ctx.preset.section_runs(design.DOWNPOUR)
  lines = ["## DOWNPOUR at n = 10 and n = 20", ""]
  lines += runs_line(ctx, specs)
  t = thesis.DOWNPOUR
  lines += [f"As the thesis ran it: a commit of the raw delta after every "
            f"mini-batch (λ = {t.runs[0].communication_window}), "
            f"{t.epochs} epochs' worth of data, batch {t.batch_size}. The "
            "thesis names no optimizer or learning rate; we use Adam 1e-3, "
            "what its other runs used. It saw n = 10 converge and n = 20 "
            f"diverge. Classified by the rule: {metrics.CONVERGENCE_RULE}; "
            "a run with a rejected (non-finite) commit counts as diverged, "
            "since dist-keras applied every commit.",
            ""]
  rows, plotted = [], []
  expected = {r.workers: r.converged for r in t.runs
              if r.communication_window == 1}
  for spec in specs:
    f = ctx.results.get(spec)
    thesis_says = ("converged" if expected.get(spec.num_workers) else
                   "diverged") if spec.num_workers in expected else "–"
    if f is None:
      rows.append([str(spec.num_workers), str(spec.seed),
                   ctx.results.status(spec), "–", "–", "–", thesis_says])
      continue
    peak = max(curves.eval_curve(f.run)[1], default=None)
    rows.append([str(spec.num_workers), str(spec.seed),
                 classified(f.convergence,
                            f.run.summary.get("rejected_commits")),
                 pct(f.test_accuracy), pct(peak),
                 str(f.run.summary.get("rejected_commits", "–")),
                 thesis_says])
    plotted.append((f"n={spec.num_workers} seed {spec.seed}", f))
  lines += table(["n", "seed", "ours", "final test acc", "peak test acc",
                  "rejected commits", "thesis"], rows)
  if plotted:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for label, f in plotted:
      ax.plot(*curves.eval_curve(f.run, f.time_base), marker=".", label=label)
    ax.set_xlabel(plots.time_label(plotted[0][1].time_base))
    ax.set_ylabel("center's test accuracy")
    ax.legend(fontsize=8)
    fig.tight_layout()
    lines += ctx.link(save(fig, ctx.figure("downpour.png")), "DOWNPOUR")
  seconds = ctx.results.ledger_seconds(ctx.study.ledger, design.DOWNPOUR)
  lines += [f"Compute: {duration(seconds)} here.", ""]
  return lines
