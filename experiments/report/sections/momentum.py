"""RQ2: staleness as the distance the center moved, and the implicit momentum, against n.

The mechanism section's sweep (`design.Mechanism`): AGN, unnormalized
accumulation and DOWNPOUR at each n, every commit measured
(`agn_jax.instruments`); at the largest n the thesis' unstable cell, where
the distance-staleness trace is drawn beside the test accuracy under both
commit orders.
"""

from typing import Dict, List, Optional, Tuple

import numpy as np

from experiments import curves
from experiments import plots
from experiments.report import design
from experiments.report import thesis
from experiments.report.sections import (CANNOT_TELL, FAILS, HOLDS,
                                         NOT_RUN_YET, Answer, Context,
                                         answer_lines, duration, heading, num,
                                         pct, pyplot, runs_line, save, table)

RQ, TITLE = "RQ2", "staleness and implicit momentum against n"
QUESTION = ("As n grows, how far does the center move under a worker while "
            "it computes (the thesis' distance staleness), does normalizing "
            "the commit keep that distance down, and does normalizing lower "
            "the implicit momentum of the center's path (the thesis' claim; "
            "Mitliagkas et al. 2016 predict 1 − 1/n for plain asynchronous "
            "SGD, which the thesis calls descriptive)?")
RULE = ("(a) Normalization keeps the center close: part (a) holds when AGN's "
        "mean distance staleness is below unnormalized accumulation's at "
        "every (commit order, n) where both ran, fails when it is not below "
        "at more than half of them, else the runs cannot tell; beside it "
        "each method's staleness per unit of its mean commit norm (a commit "
        "divided by λ moves the center about λ times less), which decides "
        "nothing. (b) "
        "Normalizing lowers μ̂: part (b) holds when AGN's μ̂ at the end of "
        "each sweep run (the fitted cluster) is below unnormalized "
        "accumulation's at every n where both ran, fails when it is not "
        "below at more than half of them, else the runs cannot tell (μ̂ is "
        "compared between methods, not with 1 − 1/n: mini-batch noise pulls "
        "a lag-1 slope toward 0, docs/algorithms.md; part (b) was restated "
        "after the cpu study's runs: it first asked for μ̂ near "
        "1 − 1/n, which the thesis does not claim). "
        "RQ2's answer holds when both parts hold, fails when either fails, "
        "else the runs cannot tell. DOWNPOUR is shown beside them and enters "
        "no part.")
METHOD_TEXT = {design.NORMALIZED: "AGN",
               design.UNNORMALIZED: "unnormalized accumulation",
               "downpour": "DOWNPOUR (λ = 1)"}
SETTING_TEXT = {design.THESIS_SPEEDS: "fitted cluster",
                design.ROUND_ROBIN: "round robin"}


def summary_value(f, name: str) -> Optional[float]:
  """A completed run's summary.json figure, or None (absent, null or not finite)."""
  if f is None:
    return None
  value = f.run.summary.get(name)
  if not isinstance(value, (int, float)) or not np.isfinite(value):
    return None
  return float(value)


def measured(ctx: Context) -> Dict[Tuple[str, int, str], dict]:
  """Per (setting, n, method) of seed 0: the spec, its figures and instrument means."""
  out = {}
  for spec in ctx.preset.section_runs(design.MECHANISM):
    if spec.seed:
      continue
    f = ctx.results.get(spec)
    out[(design.mechanism_setting(spec), spec.num_workers,
         design.mechanism_method(spec))] = {
             "spec": spec, "figures": f,
             "staleness": summary_value(f, "mean_distance_staleness"),
             "commit_norm": summary_value(f, "mean_commit_norm"),
             "momentum": summary_value(f, "implicit_momentum")}
  return out


def lower_verdict(below: List[bool]) -> str:
  """Either part from, per comparison, whether AGN's figure is below unnormalized's.

  Part (a) compares the mean distance staleness per (order, n), part (b)
  μ̂ per n.

  >>> lower_verdict([True, True]), lower_verdict([True, False, False])
  ('holds', 'fails')
  >>> lower_verdict([True, False]), lower_verdict([])
  ('cannot be told from these runs', 'not run yet')
  """
  if not below:
    return NOT_RUN_YET
  if all(below):
    return HOLDS
  if below.count(False) > len(below) / 2:
    return FAILS
  return CANNOT_TELL


def per_commit_norm(key: str, row: dict, other: dict) -> str:
  """For the distance staleness, both methods' per unit of mean commit norm, else "".

  A commit divided by λ moves the center about λ times less, so part (a)
  alone says little; per unit of commit norm the methods compare as moves.

  >>> per_commit_norm("staleness", {"staleness": 4.0, "commit_norm": 2.0},
  ...                 {"staleness": 30.0, "commit_norm": 5.0})
  ', per unit of commit norm 2 against 6'
  >>> per_commit_norm("momentum", {}, {})
  ''
  """
  if key != "staleness" or not (row.get("commit_norm") and
                                other.get("commit_norm")):
    return ""
  return (f", per unit of commit norm "
          f"{row['staleness'] / row['commit_norm']:.3g} against "
          f"{other['staleness'] / other['commit_norm']:.3g}")


def combined(parts: List[str]) -> str:
  """Both parts hold: holds; either fails: fails; none ran: not run yet; else cannot tell.

  >>> combined(["holds", "holds"]), combined(["holds", "fails"])
  ('holds', 'fails')
  >>> combined(["not run yet", "not run yet"]), combined(["holds", "not run yet"])
  ('not run yet', 'cannot be told from these runs')
  """
  if FAILS in parts:
    return FAILS
  if all(p == HOLDS for p in parts):
    return HOLDS
  if all(p == NOT_RUN_YET for p in parts):
    return NOT_RUN_YET
  return CANNOT_TELL


def parts(ctx: Context) -> Tuple[Tuple[str, str], Tuple[str, str]]:
  """((verdict, detail) of part (a), (verdict, detail) of part (b))."""
  found = measured(ctx)

  def compare(key, settings, what):
    below, said = [], []
    for (setting, n, method), row in sorted(found.items()):
      other = found.get((setting, n, design.UNNORMALIZED), {})
      if (method != design.NORMALIZED or setting not in settings or
          row[key] is None or other.get(key) is None):
        continue
      below.append(row[key] < other[key])
      said.append(f"{row[key]:.4g} against {other[key]:.4g} at n = {n}" +
                  (f" ({SETTING_TEXT[setting]})" if len(settings) > 1 else "")
                  + per_commit_norm(key, row, other))
    return (lower_verdict(below), f"AGN's {what} against unnormalized "
            "accumulation's: " + "; ".join(said) if said else
            "no n has both runs yet")

  a = compare("staleness", tuple(SETTING_TEXT), "mean distance staleness")
  b = compare("momentum", (design.THESIS_SPEEDS,), "μ̂")
  return a, b


def answer(ctx: Context) -> Answer:
  """RQ2's answer by `RULE`: each part's verdict and what decided it."""
  a, b = parts(ctx)
  verdict = combined([a[0], b[0]])
  if verdict == NOT_RUN_YET:
    return Answer(verdict)
  return Answer(verdict, f"(a) {a[0]}: {a[1]}. (b) {b[0]}: {b[1]}.")


def _plot_sweep(ctx: Context, found) -> Optional[str]:
  """Mean distance staleness and μ̂ against n, a line per method."""
  if not any(row["figures"] is not None for row in found.values()):
    return None
  plt = pyplot()
  fig, axes = plt.subplots(1, 2, figsize=(14, 4.2))
  for i, method in enumerate(design.MECHANISM_METHODS):
    for setting, style in ((design.THESIS_SPEEDS, "-o"),
                           (design.ROUND_ROBIN, "s")):
      for ax, key in zip(axes, ("staleness", "momentum")):
        points = sorted((n, row[key]) for (s, n, m), row in found.items()
                        if (s, m) == (setting, method) and
                        row[key] is not None)
        if points:
          ax.plot(*zip(*points), style, color=f"C{i}",
                  markerfacecolor="none" if setting == design.ROUND_ROBIN
                  else None,
                  label=f"{METHOD_TEXT[method]}, {SETTING_TEXT[setting]}")
  ns = np.array(sorted({n for _, n, _ in found}), np.float64)
  axes[1].plot(ns, 1 - 1 / ns, "k--", label="1 − 1/n")
  axes[0].set_yscale("log")
  axes[0].set_ylabel("mean distance staleness ‖θ̃_before − θ̃_pulled‖")
  axes[1].set_ylabel("μ̂ at the run's end")
  for ax in axes:
    ax.set_xlabel("workers n")
    ax.set_xticks(ns)
    ax.grid(alpha=0.3)
  # Beside the panels, not over their points.
  axes[1].legend(fontsize=8, loc="center left", bbox_to_anchor=(1.02, 0.5))
  fig.tight_layout()
  return save(fig, ctx.figure("rq2-staleness-momentum.png"))


def _plot_unstable(ctx: Context, found, n: int) -> Optional[str]:
  """At the largest n, per commit order: distance staleness (running mean) beside test accuracy."""
  panels = [s for s in (design.THESIS_SPEEDS, design.ROUND_ROBIN)
            if any(found.get((s, n, m), {}).get("figures") is not None
                   for m in design.MECHANISM_METHODS)]
  if not panels:
    return None
  plt = pyplot()
  fig, axes = plt.subplots(1, len(panels), figsize=(7 * len(panels), 4.2),
                           squeeze=False)
  for ax, setting in zip(axes.flat, panels):
    right = ax.twinx()
    base = "simulated"
    for i, method in enumerate(design.MECHANISM_METHODS):
      f = found.get((setting, n, method), {}).get("figures")
      if f is None:
        continue
      base = f.time_base
      times, _, mean = curves.instrument_trace(f.run, "distance_staleness",
                                               base)
      ax.plot(times, mean, color=f"C{i}", label=METHOD_TEXT[method])
      right.plot(*curves.eval_curve(f.run, base), ":.", color=f"C{i}")
    ax.set_yscale("log")
    ax.set_xlabel(plots.time_label(base))
    ax.set_ylabel("distance staleness (solid, running mean)")
    right.set_ylabel("center's test accuracy (dotted)")
    ax.set_title(f"n = {n}, {SETTING_TEXT[setting]}")
    ax.legend(fontsize=7, loc="lower right")
  fig.tight_layout()
  return save(fig, ctx.figure("rq2-unstable.png"))


def render(ctx: Context) -> List[str]:
  specs = [s for s in ctx.preset.section_runs(design.MECHANISM) if not s.seed]
  m = ctx.preset.mechanism
  if not specs or m is None:
    return []
  ns, window = sorted(m.workers), m.window
  unstable = (max(ns), window)
  lines = [heading(RQ, TITLE), ""]
  lines += runs_line(ctx, specs)
  section_runs = ctx.preset.section_runs(design.MECHANISM)
  budget = (f"{m.epochs:g} epochs a run"
            + (f", the first {m.epochs:g} of the thesis' 40 at its unstable "
               f"cell" if unstable == thesis.UNSTABLE.cell and m.epochs < 40
               else ""))
  lines += [f"- **Budget:** the mechanism section (RQ2 and RQ4) is "
            f"{len(section_runs)} runs of {m.epochs:g} epochs, "
            f"{sum(ctx.preset.samples(r) for r in section_runs) / 1e6:.1f} M "
            f"samples, chosen before any run: {m.budget}.", ""]
  lines += [f"**Question.** {QUESTION} **Measurement.** AGN, unnormalized "
            f"accumulation (AGN with `--normalization=none`, the thesis' "
            f"\"DOWNPOUR with accumulation\") at λ = {window}, and DOWNPOUR "
            f"(a commit every step, λ = 1), all with Adam 1e-3, at "
            f"n ∈ {{{', '.join(map(str, ns))}}}, {budget}, seed 0, in the "
            "grid's setting (epoch slices, the fitted cluster); at "
            f"n = {unstable[0]} again under round robin (every worker equally "
            "fast, the same epoch slices). Every applied commit is measured "
            "(`--diagnostics`; above 10⁶ parameters, as the paper MLP's, on a "
            "fixed 1 % of them, norms scaled to the whole): the distance staleness "
            "‖θ̃_before − θ̃_pulled‖, how far the center moved between the "
            "worker's pull and its commit's apply, averaged over the run's "
            "commits; and μ̂, the least-squares slope of each center step on "
            "the one before, over the whole run (`agn_jax.instruments`, "
            "docs/algorithms.md). Runs keep no checkpoint, so μ̂ always "
            "covers the whole run. **Rule, fixed before the runs (part (b) "
            "restated after them).** " + RULE,
            ""]
  found = measured(ctx)
  rows = []
  for (setting, n, method), row in sorted(
      found.items(), key=lambda kv: (kv[0][0] != design.THESIS_SPEEDS,
                                     kv[0][1], design.MECHANISM_METHODS.index(
                                         kv[0][2]))):
    f = row["figures"]
    head = [SETTING_TEXT[setting], str(n), METHOD_TEXT[method]]
    if f is None:
      rows.append(head + [ctx.results.status(row["spec"])] + ["–"] * 5)
      continue
    rows.append(head + [
        str(f.run.summary.get("instrumented_commits", "–")),
        num(row["staleness"], ".4g"), num(row["commit_norm"], ".4g"),
        num(row["momentum"], ".3f"), f"{1 - 1 / n:.3f}",
        pct(f.test_accuracy)])
  lines += table(["commit order", "n", "method", "commits measured",
                  "mean distance staleness", "mean commit norm", "μ̂",
                  "1 − 1/n", "test acc"], rows)
  lines += ctx.link(_plot_sweep(ctx, found),
                    "distance staleness and μ̂ against n")
  lines += [f"At n = {unstable[0]}, λ = {unstable[1]}"
            + (" (the thesis' unstable cell)"
               if unstable == thesis.UNSTABLE.cell else "")
            + ": each method's distance staleness over the run (running mean "
            "of 25 commits) beside its center's test accuracy, under each "
            "commit order.", ""]
  lines += ctx.link(_plot_unstable(ctx, found, unstable[0]),
                    "distance staleness beside test accuracy")
  at_unstable = [(f"{METHOD_TEXT[m]}, {SETTING_TEXT[s]}", row["figures"].run)
                 for (s, n, m), row in sorted(found.items())
                 if n == unstable[0] and row["figures"] is not None]
  if at_unstable:
    labels, runs = zip(*at_unstable)
    lines += ["Every instrument of those runs (`experiments.plots."
              "plot_instruments`):", ""]
    lines += ctx.link(plots.plot_instruments(
        runs, ctx.figure("rq2-instruments.png"), list(labels)),
                      "the instruments at the largest n")
  lines += answer_lines(answer(ctx))
  seconds = ctx.results.ledger_seconds(ctx.study.ledger, design.MECHANISM)
  lines += [f"Compute of the mechanism section (RQ2 and RQ4): "
            f"{duration(seconds)} here.", ""]
  return lines
