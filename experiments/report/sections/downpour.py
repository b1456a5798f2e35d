"""DOWNPOUR at n = 10 and n = 20 as the thesis ran it, over a small sweep of its optimizer, classified by the divergence rule."""

from typing import Dict, List, Optional

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


def verdicts(ctx: Context) -> Dict[str, Dict[int, List[str]]]:
  """{setting (the run's variant): {n: [class of each completed seed]}} (see `classified`)."""
  out: Dict[str, Dict[int, List[str]]] = {}
  for spec in ctx.preset.section_runs(design.DOWNPOUR):
    f = ctx.results.get(spec)
    found = out.setdefault(spec.variant, {}).setdefault(spec.num_workers, [])
    if f is not None:
      found.append(classified(f.convergence,
                              f.run.summary.get("rejected_commits")))
  return out


def thesis_pattern(found: Dict[int, List[str]]) -> Optional[bool]:
  """Whether one setting shows the thesis' pattern: the smaller n converges, the larger diverges.

  True: every seed of the smaller n converged and every seed of the larger
  diverged; False: a seed went the other way; None: runs missing, or
  neither.

  >>> thesis_pattern({10: ["converged"], 20: ["diverged"]})
  True
  >>> thesis_pattern({10: ["converged"], 20: ["converged"]})
  False
  >>> thesis_pattern({10: ["converged"], 20: []}) is None
  True
  """
  ns = sorted(found)
  if len(ns) < 2 or not found[ns[0]] or not found[ns[-1]]:
    return None
  small, large = found[ns[0]], found[ns[-1]]
  if all(v == "converged" for v in small) and all(v == "diverged"
                                                  for v in large):
    return True
  if "diverged" in small or "converged" in large:
    return False
  return None


def setting_text(variant: str) -> str:
  """`adam0.001` -> "Adam 0.001", `keras_adam0.001` -> "Keras' Adam 0.001"."""
  for optimizer, lr in design.KERAS_DOWNPOUR_OPTIMIZERS:
    if variant == design.downpour_variant(optimizer, lr):
      return f"{_NAMES.get(optimizer, optimizer)} {lr:g}"
  return variant or "Adam 0.001"


# Adam and Adagrad are optax's; Keras' start their moments and place epsilon
# as Keras 2.0 did (agn_jax.strategies.keras_optimizers).
_NAMES = {"adam": "Adam", "adagrad": "Adagrad", "sgd": "SGD",
          "keras_adam": "Keras' Adam", "keras_adagrad": "Keras' Adagrad"}


def render(ctx: Context) -> List[str]:
  specs = ctx.preset.section_runs(design.DOWNPOUR)
  lines = ["## DOWNPOUR at n = 10 and n = 20: a sweep over its optimizer", ""]
  lines += runs_line(ctx, specs)
  t = thesis.DOWNPOUR
  settings = list(dict.fromkeys(s.variant for s in specs))
  lines += [f"As the thesis ran it: a commit of the raw delta after every "
            f"mini-batch (λ = {t.runs[0].communication_window}), "
            f"{t.epochs} epochs' worth of data, batch {t.batch_size}, in the "
            "grid's setting. The thesis names no optimizer or learning rate, "
            "so each runs here: " + ", ".join(setting_text(v) for v in settings)
            + ". The thesis saw n = 10 converge and n = 20 diverge. "
            f"Classified by the rule: {metrics.CONVERGENCE_RULE}; a run with a "
            "rejected (non-finite) commit counts as diverged, since "
            "dist-keras applied every commit.", ""]
  rows, plotted = [], []
  expected = {r.workers: r.converged for r in t.runs
              if r.communication_window == 1}
  for spec in specs:
    f = ctx.results.get(spec)
    thesis_says = ("converged" if expected.get(spec.num_workers) else
                   "diverged") if spec.num_workers in expected else "–"
    head = [setting_text(spec.variant), str(spec.num_workers), str(spec.seed)]
    if f is None:
      rows.append(head + [ctx.results.status(spec), "–", "–", "–",
                          thesis_says])
      continue
    peak = max(curves.eval_curve(f.run)[1], default=None)
    rows.append(head + [classified(f.convergence,
                                   f.run.summary.get("rejected_commits")),
                        pct(f.test_accuracy), pct(peak),
                        str(f.run.summary.get("rejected_commits", "–")),
                        thesis_says])
    plotted.append((f"{setting_text(spec.variant)}, n={spec.num_workers}", f))
  lines += table(["setting", "n", "seed", "ours", "final test acc",
                  "peak test acc", "rejected commits", "thesis"], rows)
  found = verdicts(ctx)
  shown = {v: thesis_pattern(found[v]) for v in settings if v in found}
  matching = [setting_text(v) for v, m in shown.items() if m]
  lines += [("The thesis' pattern (n = 10 converges, n = 20 diverges) shows "
             "under: " + ", ".join(matching) + "." if matching else
             "No setting shows the thesis' pattern"
             + ("." if all(m is not None for m in shown.values()) and
                len(shown) == len(settings) else " so far.")), ""]
  if plotted:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, (label, f) in enumerate(plotted):
      ax.plot(*curves.eval_curve(f.run, f.time_base), marker=".",
              color=f"C{i // 2}", linestyle="-" if i % 2 == 0 else "--",
              label=label)
    ax.set_xlabel(plots.time_label(plotted[0][1].time_base))
    ax.set_ylabel("center's test accuracy")
    ax.legend(fontsize=7)
    fig.tight_layout()
    lines += ctx.link(save(fig, ctx.figure("downpour.png")), "DOWNPOUR")
  seconds = ctx.results.ledger_seconds(ctx.study.ledger, design.DOWNPOUR)
  lines += [f"Compute: {duration(seconds)} here.", ""]
  return lines
