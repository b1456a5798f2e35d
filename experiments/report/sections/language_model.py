"""Beyond the paper on the language model: the MNIST section's claims on next-byte prediction.

AGN + Delayed Nesterov, AGN + Dynamic Local Updates and AEASGD beside plain
AGN on the built-in next-byte task (`experiments.report.language_model`),
each claim judged by the MNIST section's rule (`beyond.RULES`) with bits per
byte in the place of accuracy (lower is better) and `TOLERANCE` in the
place of half a point, over the seeds' means. Where a claim's verdict here
differs from its verdict at an MNIST cell, the section says so.
"""

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from experiments import compare
from experiments import curves
from experiments.report import design
from experiments.report import language_model
from experiments.report import results as results_lib
from experiments.report.sections import (Context, beyond, duration, num,
                                         pyplot, runs_line, save, table)

METRIC = "bits_per_byte"
# "At least as good" within this many bits per byte: the language model's
# counterpart of the MNIST rule's half a point of accuracy, fixed before the
# runs.
TOLERANCE = 0.02
RULES = (
    ("DN", "mean test bits per byte of AGN + DN at most plain AGN's + 0.02 "
     "and mean E test(AGN + DN, AGN) ≥ 1: supported; more than 0.02 above: "
     "not supported; else inconclusive."),
    ("DyLU", "mean E test(AGN + DyLU, AGN) > 1 and its mean test bits per "
     "byte at most plain AGN's + 0.02: supported; mean E test < 1 (or more "
     "than 0.02 above): not supported; else inconclusive."),
    ("AEASGD", "mean E train(AGN, AEASGD) > 1: supported; < 1: not "
     "supported."),
)


def _figures(ctx: Context, strategy: str, variant: str
             ) -> Dict[int, results_lib.Figures]:
  """{seed: figures} of the method's completed runs."""
  specs = ctx.results.find(design.BEYOND_LM, strategy, _cell(ctx), variant)
  found = {s.seed: ctx.results.get(s) for s in specs}
  return {seed: f for seed, f in found.items() if f is not None}


def _cell(ctx: Context) -> Tuple[int, int]:
  return ctx.preset.section_runs(design.BEYOND_LM)[0].cell


def _mean(values: Sequence[Optional[float]]) -> Optional[float]:
  known = [v for v in values if v is not None]
  return float(np.mean(known)) if known else None


def _per_seed(values: Sequence[Optional[float]], spec: str = ".3f") -> str:
  """"a / b" over the completed seeds, or "–"."""
  return " / ".join(num(v, spec) for v in values) if values else "–"


def final_test(f: Optional[results_lib.Figures]) -> Optional[float]:
  return compare.final_metric(f.run, METRIC) if f else None


def final_train(f: Optional[results_lib.Figures]) -> Optional[float]:
  return results_lib.final_train_metric(f.run, METRIC) if f else None


def method_figures(ctx: Context, strategy: str, variant: str,
                   plain: Dict[int, results_lib.Figures]) -> dict:
  """The method's figures over its seeds, E against plain AGN of the same seed."""
  runs = _figures(ctx, strategy, variant)
  seeds = sorted(runs)
  es = [ctx.efficiency_of(runs[s], plain[s]) for s in seeds if s in plain]
  return {
      "seeds": seeds,
      "test": [final_test(runs[s]) for s in seeds],
      "train": [final_train(runs[s]) for s in seeds],
      "seconds": [runs[s].seconds for s in seeds],
      "e_train": _mean([e["train"] for e in es]),
      "e_test": _mean([e["test"] for e in es]),
      "staleness": np.concatenate([runs[s].staleness for s in seeds])
                   if seeds else np.zeros(0, np.int64),
      "runs": runs,
  }


def _staleness(st: np.ndarray) -> str:
  stats = results_lib.staleness_summary(st)
  return f"{stats['mean']:.1f} / {stats['max']}" if stats else "–"


def _mnist(ctx: Context) -> Dict[Tuple[int, int], Dict[str, str]]:
  """{MNIST cell: {claim: verdict}} of the MNIST part's completed cells."""
  return {cell: beyond.verdicts(ctx, cell) for cell in beyond.cells(ctx)}


def _settled(v: str) -> bool:
  return v in (beyond.SUPPORTED, beyond.NOT_SUPPORTED)


def agreement(here: str, mnist: Dict[Tuple[int, int], str]) -> str:
  """How the language model's verdict stands to the MNIST cells' verdicts.

  >>> agreement("supported", {(40, 40): "supported", (40, 10): "not supported"})
  'disagrees with n = 40, λ = 10'
  >>> agreement("supported", {(40, 40): "supported"})
  'agrees'
  >>> agreement("inconclusive", {(40, 40): "supported"})
  '–'
  """
  settled = {c: v for c, v in mnist.items() if _settled(v)}
  if not _settled(here) or not settled:
    return "–"
  differ = [c for c, v in settled.items() if v != here]
  if not differ:
    return "agrees"
  return "disagrees with " + ", ".join(f"n = {n}, λ = {l}" for n, l in differ)


def rows(ctx: Context) -> Tuple[List[List[str]], List[str]]:
  """The table's rows and the sentences on where MNIST and the language model disagree."""
  seeds = sorted({s.seed for s in ctx.preset.section_runs(design.BEYOND_LM)})
  plain_runs = _figures(ctx, design.REFERENCE, design.PLAIN)
  plain = method_figures(ctx, design.REFERENCE, design.PLAIN, plain_runs)
  mnist = _mnist(ctx)
  out = [["AGN", "(reference)", _per_seed(plain["test"]),
          num(_mean(plain["test"])), num(_mean(plain["train"])),
          num(_mean(plain["seconds"]), ".0f"), "1", "1",
          _staleness(plain["staleness"]), "–", "–", "–"]]
  notes = []
  for strategy, variant, label, claim in beyond.METHODS:
    m = method_figures(ctx, strategy, variant, plain_runs)
    # Over the seeds both have: a method's mean against plain AGN's.
    paired = [s for s in m["seeds"] if s in plain_runs]
    if not paired:
      here = beyond.INCONCLUSIVE + " (not run yet)"
    else:
      here = beyond.rule_verdict(
          variant, strategy,
          _mean([v for s, v in zip(m["seeds"], m["test"]) if s in paired]),
          _mean([final_test(plain_runs[s]) for s in paired]),
          {"train": m["e_train"], "test": m["e_test"]}, TOLERANCE,
          higher=False)
      if len(paired) < len(seeds):
        here += f" ({len(paired)} of {len(seeds)} seeds so far)"
    theirs = {cell: v[claim] for cell, v in mnist.items()}
    mnist_text = "; ".join(f"n = {n}, λ = {l}: {v}"
                           for (n, l), v in theirs.items()) or "not run yet"
    stands = agreement(here, theirs)
    if stands.startswith("disagrees"):
      notes.append(f"- **{claim}**: {here} on the language model, but "
                   + "; ".join(f"{v} at n = {n}, λ = {l}"
                               for (n, l), v in theirs.items()
                               if _settled(v) and v != here)
                   + " on MNIST.")
    if variant == design.DYLU and m["seeds"]:
      note = beyond.local_updates(m["runs"][m["seeds"][0]])
      label += f" ({note}, seed {m['seeds'][0]})" if note != "–" else ""
    out.append([label, claim, _per_seed(m["test"]), num(_mean(m["test"])),
                num(_mean(m["train"])), num(_mean(m["seconds"]), ".0f"),
                num(m["e_train"]), num(m["e_test"]),
                _staleness(m["staleness"]), here, mnist_text, stands])
  return out, notes


def render(ctx: Context) -> List[str]:
  specs = ctx.preset.section_runs(design.BEYOND_LM)
  if not specs:
    return []
  n, l = _cell(ctx)
  first = specs[0]
  seeds = sorted({s.seed for s in specs})
  lines = ["## Beyond the paper on a language model: next-byte prediction",
           ""]
  lines += runs_line(ctx, specs)
  model = design.flag_value(first.flags, "model")
  lines += ["- **Setting:** the next-byte task on Shakespeare "
            f"(`--task=next_token --model={model}`"
            + (": the 1.9 M-parameter decoder" if model == "transformer"
               else "") + "; docs/language_model.md), batch "
            f"{design.flag_value(first.flags, 'batch_size')} windows, each "
            f"strategy's paper optimizer; n = {n}, λ = {l}, chosen before "
            "the runs; every worker's speed "
            f"drawn once from `--speed_model={design.HETEROGENEOUS_SPEEDS}`; "
            "one shared data stream (`--data_assignment=stream`: a faster "
            "worker takes more of the data, as asynchronous Local-SGD "
            f"assumes), {first.epochs:g} epochs of the training split a run "
            f"(the same {ctx.preset.samples(first):,.0f} windows of 128 "
            f"bytes for every method), {len(seeds)} seeds; the center "
            f"evaluated on every {language_model.EVAL_STRIDE}th held-out "
            "window. Time is the simulator's modeled time "
            "(`--cluster=none`: local steps of a speed-1 worker). E is on "
            "bits per byte (lower is better: E(a, b) = ∫f_b / ∫f_a), "
            "against plain AGN of the same seed, averaged over the seeds.",
            "- Synchronous-round DiLoCo is not run: the simulator has no "
            "synchronous round.", ""]
  found, notes = rows(ctx)
  lines += table(["method", "claim", "test bits/byte by seed",
                  "test bits/byte (mean)", "train bits/byte",
                  "modeled time (steps)",
                  "E train", "E test", "staleness mean / max", "verdict",
                  "MNIST verdicts", "against MNIST"], found)
  lines += ["Rules, fixed before the runs (the MNIST section's, on bits per "
            "byte):", ""]
  lines += [f"- **{name}**: {rule}" for name, rule in RULES] + [""]
  if notes:
    lines += ["Where the language model and MNIST disagree:", ""]
    lines += notes + [""]
  path = _plot(ctx)
  lines += ctx.link(path, "the language model's methods")
  seconds = ctx.results.ledger_seconds(ctx.study.ledger, design.BEYOND_LM)
  lines += [f"Compute: {duration(seconds)} here ({len(specs)} runs).", ""]
  return lines


def _plot(ctx: Context) -> Optional[str]:
  found = [("AGN", _figures(ctx, design.REFERENCE, design.PLAIN))]
  for strategy, variant, label, _ in beyond.METHODS:
    found.append((label, _figures(ctx, strategy, variant)))
  found = [(label, runs) for label, runs in found if runs]
  if not found:
    return None
  plt = pyplot()
  fig, ax = plt.subplots(figsize=(6.5, 3.8))
  for i, (label, runs) in enumerate(found):
    for seed, f in sorted(runs.items()):
      times, values = curves.from_zero(
          *curves.eval_curve(f.run, f.time_base, METRIC))
      ax.plot(times, values, color=f"C{i}", linestyle="-" if seed == 0
              else "--", label=label if seed == min(runs) else None)
  n, l = _cell(ctx)
  ax.set_title(f"next-byte model, n = {n}, λ = {l}, "
               f"{design.HETEROGENEOUS_SPEEDS} (dashed: seed 1)")
  any_run = next(iter(found[0][1].values())).run
  ax.set_xlabel(f"modeled time ({curves.sim_unit(any_run)})")
  ax.set_ylabel("center's test bits per byte")
  ax.legend(fontsize=7)
  fig.tight_layout()
  return save(fig, ctx.figure("beyond-language-model.png"))
