"""RQ4: whether commits point down the center's gradient, over whole trajectories.

The mechanism section's seeds at one cell (`design.Mechanism`): AGN,
unnormalized accumulation and DOWNPOUR (λ = 1), each commit's cosine with
the negative gradient of the center it lands on, probed every few local
steps.
"""

from typing import Dict, List, Optional
import warnings

import numpy as np

from experiments.report import design
from experiments.report import results as results_lib
from experiments.report.sections import (CANNOT_TELL, FAILS, HOLDS,
                                         NOT_RUN_YET, Answer, Context,
                                         answer_lines, estimate_text,
                                         heading, pct, pyplot, runs_line,
                                         save, table)
from experiments.report.sections import momentum

RQ, TITLE = "RQ4", "do commits point down the gradient over training?"
QUESTION = ("Over the whole of training, do AGN's commits point further down "
            "the gradient of the center they land on than the accumulated "
            "delta committed whole, or a commit after every step (λ = 1)? "
            "Normalizing only rescales a commit, so one commit's cosine is "
            "the same either way; what normalizing can change is the path, "
            "so whole trajectories are compared, seed against seed.")
RULE = ("For each seed, a run's figure is the mean of its probed gradient "
        "cosines; AGN is compared with each other method by the paired "
        "difference (AGN − other) over the seeds, with its 95 % t-interval. "
        "The thesis' answer (AGN's commits point down the gradient better) "
        "holds when the interval lies above 0 against both methods; it fails "
        "when it lies below 0 against either; else (or with fewer than two "
        "seeds) the runs cannot tell.")
OTHERS = (design.UNNORMALIZED, "downpour")
# Bins of the trajectories' band, over the run's epochs.
BINS = 20


def cosine_specs(ctx: Context) -> Dict[str, List[design.RunSpec]]:
  """Per method, its runs at RQ4's cell (the fitted cluster), in seed order."""
  m = ctx.preset.mechanism
  if m is None:
    return {}
  out = {}
  for method in design.MECHANISM_METHODS:
    for seed in range(m.cosine_seeds):
      spec = design.mechanism_spec(ctx.preset, method, m.cosine_workers,
                                   design.THESIS_SPEEDS, seed)
      if spec is not None:
        out.setdefault(method, []).append(spec)
  return out


def run_means(ctx: Context, specs) -> Dict[str, Dict[int, float]]:
  """Per method, per seed: the run's mean gradient cosine (summary.json)."""
  out = {}
  for method, runs in specs.items():
    for spec in runs:
      value = momentum.summary_value(ctx.results.get(spec),
                                     "mean_gradient_cosine")
      if value is not None:
        out.setdefault(method, {})[spec.seed] = value
  return out


def paired(means: Dict[str, Dict[int, float]], other: str
           ) -> results_lib.Estimate:
  """AGN − `other` over the seeds both have, mean and 95 % t half width."""
  agn, theirs = means.get(design.NORMALIZED, {}), means.get(other, {})
  return results_lib.estimate([agn[k] - theirs[k] for k in sorted(agn)
                               if k in theirs])


def verdict(differences: List[results_lib.Estimate]) -> str:
  """RQ4's verdict from AGN − each other method (see `RULE`).

  >>> E = results_lib.Estimate
  >>> verdict([E(0.1, 0.05, 3), E(0.2, 0.1, 3)])
  'holds'
  >>> verdict([E(0.1, 0.05, 3), E(-0.2, 0.1, 3)])
  'fails'
  >>> verdict([E(0.1, 0.2, 3), E(0.2, None, 1)])
  'cannot be told from these runs'
  >>> verdict([E(None, None, 0), E(None, None, 0)])
  'not run yet'
  """
  if all(d.mean is None for d in differences):
    return NOT_RUN_YET
  above = [d.half_width is not None and d.mean - d.half_width > 0
           for d in differences]
  below = [d.half_width is not None and d.mean + d.half_width < 0
           for d in differences]
  if any(below):
    return FAILS
  if differences and all(above):
    return HOLDS
  return CANNOT_TELL


def answer(ctx: Context) -> Answer:
  """RQ4's answer by `RULE`, with each paired difference."""
  means = run_means(ctx, cosine_specs(ctx))
  differences = {o: paired(means, o) for o in OTHERS}
  said = [f"AGN − {momentum.METHOD_TEXT[o]}: "
          f"{estimate_text(d, 1, '+.3f')} over {d.count} seed"
          f"{'s' if d.count != 1 else ''}"
          for o, d in differences.items() if d.mean is not None]
  return Answer(verdict(list(differences.values())),
                "; ".join(said) + "." if said else "")


def epochs_of_commits(count: int, window: int, train_examples: int,
                      batch_size: int) -> np.ndarray:
  """The epochs of data the center has taken in after each of `count` applied commits.

  The k-th commit brings k windows of λ local steps of a batch each.

  >>> epochs_of_commits(3, 2, 64, 16)
  array([0.5, 1. , 1.5])
  """
  return np.arange(1, count + 1) * window * batch_size / train_examples


def trajectory(f: results_lib.Figures, train_examples: int, batch_size: int,
               edges: np.ndarray) -> np.ndarray:
  """A run's mean gradient cosine in each epoch bin (NaN where none was probed)."""
  values = np.asarray(f.run.commits["gradient_cosine"], np.float64)
  epochs = epochs_of_commits(
      len(values), int(f.run.summary.get("communication_window", 1)),
      train_examples, batch_size)
  keep = np.isfinite(values)
  which = np.clip(np.digitize(epochs[keep], edges) - 1, 0, len(edges) - 2)
  out = np.full(len(edges) - 1, np.nan)
  for b in np.unique(which):
    out[b] = values[keep][which == b].mean()
  return out


def _plot(ctx: Context, specs) -> Optional[str]:
  """Each method's mean gradient cosine over the run, the seeds' range as a band."""
  found = {m: [f for f in (ctx.results.get(s) for s in runs) if f is not None]
           for m, runs in specs.items()}
  if not any(found.values()):
    return None
  p = ctx.preset
  epochs = next(iter(specs.values()))[0].epochs
  edges = np.linspace(0.0, epochs, BINS + 1)
  centers = (edges[:-1] + edges[1:]) / 2
  plt = pyplot()
  fig, ax = plt.subplots(figsize=(8, 4.2))
  for i, method in enumerate(design.MECHANISM_METHODS):
    runs = found.get(method) or []
    if not runs:
      continue
    bins = np.array([trajectory(f, p.train_examples, p.batch_size(), edges)
                     for f in runs])
    with warnings.catch_warnings():  # A bin no seed probed is NaN.
      warnings.simplefilter("ignore", RuntimeWarning)
      mean = np.nanmean(bins, axis=0)
      low, high = np.nanmin(bins, axis=0), np.nanmax(bins, axis=0)
    ax.fill_between(centers, low, high, color=f"C{i}", alpha=0.2)
    ax.plot(centers, mean, color=f"C{i}",
            label=f"{momentum.METHOD_TEXT[method]} ({len(runs)} seeds)")
  ax.axhline(0, color="k", linewidth=0.5)
  ax.set_xlabel("epochs of data the center has taken in")
  ax.set_ylabel("cos(Δ, −∇L(θ̃_before)) on the probe set")
  ax.set_title("Gradient cosine over training: mean over seeds, band = "
               "the seeds' range")
  ax.legend(fontsize=7)
  fig.tight_layout()
  return save(fig, ctx.figure("rq4-gradient-cosine.png"))


def render(ctx: Context) -> List[str]:
  specs = cosine_specs(ctx)
  if not specs:
    return []
  first = specs[design.NORMALIZED][0]
  seeds = ctx.preset.mechanism.cosine_seeds
  every = {m: design.flag_value(v[0].flags, "diagnostics_every")
           for m, v in specs.items()}
  lines = [heading(RQ, TITLE), ""]
  lines += runs_line(ctx, [s for v in specs.values() for s in v])
  lines += [f"**Question.** {QUESTION} **Measurement.** At n = "
            f"{first.num_workers}, λ = {first.communication_window} (DOWNPOUR "
            f"λ = 1), {first.epochs:g} epochs, {seeds} seeds, in the grid's "
            "setting: every probed commit's cosine with the negative "
            "gradient of the center just before it is applied, "
            "cos(Δ, −∇L(θ̃_before)), the gradient over the first 1,000 "
            "training examples. Every run probes once per "
            f"{first.communication_window * every[design.NORMALIZED]} local "
            "steps (`--diagnostics_every` "
            + ", ".join(f"{k} for {momentum.METHOD_TEXT[m]}"
                        for m, k in every.items())
            + "), so every method is probed as often per sample. The "
            "seeds' first run is RQ2's. **Rule, fixed before the runs.** "
            + RULE, ""]
  means = run_means(ctx, specs)
  rows = []
  for method, runs in specs.items():
    row = [momentum.METHOD_TEXT[method]]
    for spec in runs:
      value = means.get(method, {}).get(spec.seed)
      row.append(f"{value:.4f}" if value is not None else
                 ctx.results.status(spec))
    row += [""] * (seeds - len(runs))
    row.append(estimate_text(results_lib.estimate(
        list(means.get(method, {}).values())), 1, ".4f"))
    row.append(estimate_text(paired(means, method), 1, "+.4f")
               if method != design.NORMALIZED else "–")
    accuracies = [ctx.results.get(s) for s in runs]
    row.append(", ".join(pct(f.test_accuracy) for f in accuracies
                         if f is not None) or "–")
    rows.append(row)
  lines += table(["method"] + [f"seed {k}" for k in range(seeds)] +
                 ["mean ± 95 %", "AGN − method, paired", "test acc"], rows)
  lines += ctx.link(_plot(ctx, specs), "gradient cosine over training")
  lines += answer_lines(answer(ctx))
  return lines
