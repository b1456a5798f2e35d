"""Beyond the paper: Delayed Nesterov, Dynamic Local Updates and compressed commits.

AGN with DN, AGN with DyLU and AEASGD beside plain AGN under heterogeneous
speeds, on modeled time, and AGN's accuracy against the bytes each codec
moved. Every row names the claim it tests; its verdict follows a rule fixed
here before the runs (`RULES`), on one seed: "supported", "not supported"
or "inconclusive".
"""

from typing import List, Optional, Sequence, Tuple

import numpy as np

from experiments import curves
from experiments.report import design
from experiments.report import results as results_lib
from experiments.report.sections import (Context, duration, num, pct, pyplot,
                                         runs_line, save, table)

SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE = (
    "supported", "not supported", "inconclusive")
# Accuracy tolerance of "at least as good": half a point (as the report's
# accuracy rule); a codec's, one point (its issue's done-when).
POINTS = 0.005
CODEC_POINTS = 0.01

# (strategy, variant, label, the claim it tests: its rule's name).
METHODS = (
    (design.REFERENCE, design.DN, "AGN + Delayed Nesterov", "DN"),
    (design.REFERENCE, design.DYLU, "AGN + Dynamic Local Updates", "DyLU"),
    (design.BASELINE, design.PLAIN, "AEASGD", "AEASGD"),
)
CLAIMS = (
    ("DN", "Liu, Douillard et al. 2024: an outer Nesterov momentum that "
     "moves once per N commits does not compound staleness, so it trains at "
     "least as well as the plain asynchronous outer step."),
    ("DyLU", "Liu, Douillard et al. 2024: with workers of unequal speed, "
     "windows proportional to each worker's speed reach good accuracy sooner "
     "in time."),
    ("AEASGD", "Hermans et al. 2017: AGN's E over AEASGD is above 1 (here "
     "under heterogeneous speeds)."),
    ("codec", "Streaming DiLoCo (4-bit), INTELLECT-1 (int8), SparseLoCo "
     "(top-k with error feedback): compressed outer deltas train as well as "
     "uncompressed ones and move far fewer bytes."),
)

RULES = (
    ("DN", "AGN + DN's test accuracy at least plain AGN's − 0.5 points and "
     "E test(AGN + DN, AGN) ≥ 1: supported; more than 0.5 points below: not "
     "supported; else inconclusive."),
    ("DyLU", "E test(AGN + DyLU, AGN) > 1 on modeled time and its test "
     "accuracy at least plain AGN's − 0.5 points: supported; E test < 1: not "
     "supported; else inconclusive."),
    ("AEASGD", "E train(AGN, AEASGD) > 1: supported; < 1: not supported "
     "(one seed; the paper's claim is over cells)."),
    ("codec", "the codec's AGN test accuracy within 1 point of uncompressed "
     "AGN's: supported; else not supported; the bytes are reported beside "
     "it."),
)


def at_least_as_good(a: Optional[float], b: Optional[float],
                     e: Optional[float], strict: bool,
                     tolerance: float = POINTS, higher: bool = True) -> str:
  """Verdict of 'a at least as good as b (within `tolerance`)' with E(a, b) ≥ 1 (> 1 if strict).

  `higher`: whether a higher value of the metric is better (accuracy) or
  a lower one (bits per byte).

  >>> at_least_as_good(0.95, 0.952, 1.02, strict=False)
  'supported'
  >>> at_least_as_good(3.10, 3.05, 1.2, strict=True, tolerance=0.02,
  ...                  higher=False)
  'not supported'
  >>> at_least_as_good(3.06, 3.05, 0.98, strict=False, tolerance=0.02,
  ...                  higher=False)
  'inconclusive'
  """
  if a is None or b is None:
    return INCONCLUSIVE + " (not run yet)"
  if (a < b - tolerance) if higher else (a > b + tolerance):
    return NOT_SUPPORTED
  if e is None:
    return INCONCLUSIVE
  if strict:
    return SUPPORTED if e > 1 else NOT_SUPPORTED if e < 1 else INCONCLUSIVE
  return SUPPORTED if e >= 1 else INCONCLUSIVE


def verdict(variant: str, strategy: str, method: Optional[results_lib.Figures],
            plain: Optional[results_lib.Figures],
            e: dict) -> str:
  """A method row's verdict by `RULES` (`e`: E(method, plain AGN))."""
  if method is None or plain is None:
    return INCONCLUSIVE + " (not run yet)"
  return rule_verdict(variant, strategy, method.test_accuracy,
                      plain.test_accuracy, e)


def rule_verdict(variant: str, strategy: str, value: Optional[float],
                 plain: Optional[float], e: dict, tolerance: float = POINTS,
                 higher: bool = True) -> str:
  """The verdict of `RULES`' claim for a method's final test `value` against plain AGN's.

  Args:
    variant, strategy: the method (`METHODS`).
    value, plain: the final test metric of the method and of plain AGN.
    e: E(method, plain AGN), `{"train": ..., "test": ...}`.
    tolerance: "at least as good" within this much of the metric.
    higher: whether a higher value of the metric is better.

  >>> rule_verdict("plain", "aeasgd", 0.9, 0.95, {"train": 0.8})
  'supported'
  >>> rule_verdict("dylu", "agn", 2.9, 3.0, {"test": 1.1}, 0.02, False)
  'supported'
  """
  if strategy == design.BASELINE:
    # The paper's E is AGN's over AEASGD: the inverse of E(AEASGD, AGN).
    train = e.get("train")
    if train is None or train == 0:
      return INCONCLUSIVE
    return SUPPORTED if 1 / train > 1 else NOT_SUPPORTED
  if variant in (design.DN, design.DYLU):
    return at_least_as_good(value, plain, e.get("test"),
                            strict=variant == design.DYLU,
                            tolerance=tolerance, higher=higher)
  raise ValueError(f"no rule for {strategy} {variant}")


def judged(ctx: Context, cell: Tuple[int, int]):
  """Plain AGN's figures at an MNIST cell, and each of `METHODS` there: (its entry of `METHODS`, its figures, E(it, plain AGN), its verdict)."""
  plain = _one(ctx, design.REFERENCE, cell, design.PLAIN)
  found = []
  for method in METHODS:
    strategy, variant, _, _ = method
    f = _one(ctx, strategy, cell, variant)
    e = (ctx.efficiency_of(f, plain) if f and plain else
         {"train": None, "test": None})
    found.append((method, f, e, verdict(variant, strategy, f, plain, e)))
  return plain, found


def verdicts(ctx: Context, cell: Tuple[int, int]) -> dict:
  """`{claim: verdict}` of every method at an MNIST cell (`METHODS`)."""
  return {method[3]: v for method, _, _, v in judged(ctx, cell)[1]}


def codec_verdict(codec: Optional[results_lib.Figures],
                  plain: Optional[results_lib.Figures]) -> str:
  if codec is None or plain is None:
    return INCONCLUSIVE + " (not run yet)"
  if codec.test_accuracy is None or plain.test_accuracy is None:
    return INCONCLUSIVE
  return (SUPPORTED if abs(codec.test_accuracy - plain.test_accuracy)
          <= CODEC_POINTS else NOT_SUPPORTED)


def megabytes(value: Optional[float]) -> str:
  """Bytes as MB (GB from 10 GB on), or "–".

  >>> megabytes(8444497600), megabytes(2.5e6), megabytes(None)
  ('8,444 MB', '2.50 MB', '–')
  """
  if value is None:
    return "–"
  if value >= 1e10:
    return f"{value / 1e9:,.1f} GB"
  return f"{value / 1e6:,.0f} MB" if value >= 1e8 else f"{value / 1e6:.2f} MB"


def cells(ctx: Context) -> List[Tuple[int, int]]:
  seen = []
  for r in ctx.preset.section_runs(design.BEYOND):
    if r.cell not in seen:
      seen.append(r.cell)
  return seen


def _one(ctx: Context, strategy: str, cell: Tuple[int, int],
         variant: str) -> Optional[results_lib.Figures]:
  runs = ctx.results.seeds(design.BEYOND, strategy, cell, variant)
  return runs[0] if runs else None


def _staleness(f: Optional[results_lib.Figures]) -> str:
  stats = results_lib.staleness_summary(f.staleness) if f else {}
  return f"{stats['mean']:.1f} / {stats['max']}" if stats else "–"


def _bytes(f: Optional[results_lib.Figures]) -> Optional[float]:
  if f is None:
    return None
  value = f.run.summary.get("bytes_committed")
  return float(value) if isinstance(value, (int, float)) else None


def local_updates(f: Optional[results_lib.Figures]) -> str:
  """The workers' windows (λ_k) of a DyLU run, as min–max, or "–"."""
  if f is None:
    return "–"
  value = f.run.summary.get("local_updates")
  if isinstance(value, (list, tuple)) and value:
    found = [v for v in value if isinstance(v, (int, float))]
    if found:
      return f"λ_k {min(found):g}–{max(found):g}"
  return "–"


def method_rows(ctx: Context, cell: Tuple[int, int]) -> List[List[str]]:
  plain, found = judged(ctx, cell)
  rows = [["AGN", "(reference)", pct(plain and
                                                    plain.test_accuracy),
           pct(plain and plain.train_accuracy),
           num(plain and plain.seconds, ".0f"), "1", "1", _staleness(plain),
           "–"]]
  for (_, variant, label, claim), f, e, judgement in found:
    note = local_updates(f) if variant == design.DYLU else ""
    rows.append([label + (f" ({note})" if note and note != "–" else ""),
                 claim, pct(f and f.test_accuracy), pct(f and f.train_accuracy),
                 num(f and f.seconds, ".0f"), num(e["train"]), num(e["test"]),
                 _staleness(f), judgement])
  return rows


def codec_rows(ctx: Context, cell: Tuple[int, int]
               ) -> List[Tuple[str, Optional[results_lib.Figures]]]:
  """("none" or the codec, its AGN run) at the codecs' cell."""
  out = [("none", _one(ctx, design.REFERENCE, cell, design.PLAIN))]
  codecs = [r.variant for r in ctx.preset.section_runs(design.BEYOND)
            if r.variant not in (design.PLAIN, design.DN, design.DYLU)]
  for variant in codecs:
    out.append((variant, _one(ctx, design.REFERENCE, cell, variant)))
  return out


def render(ctx: Context) -> List[str]:
  specs = ctx.preset.section_runs(design.BEYOND)
  if not specs:
    return []
  shown = cells(ctx)
  lines = ["## Beyond the paper: Delayed Nesterov, Dynamic Local Updates "
           "and compressed commits", ""]
  lines += runs_line(ctx, specs)
  budget = specs[0].epochs
  lines += [f"- **Setting:** every worker's speed is drawn once from "
            f"`--speed_model={design.HETEROGENEOUS_SPEEDS}` (the same draws "
            f"in every run of a seed), {budget:g} epochs a run, split over "
            "the n workers in equal shares, for every method: the same data "
            "budget and the same time base (the simulator's modeled time). "
            "With DyLU a slower worker runs its share in more, shorter "
            "windows, and each window's commit costs its message time "
            "again: here every worker keeps its equal share (the thesis' "
            "partitioning), unlike Liu et al.'s shared data stream, where a "
            "fast worker also takes more of the data. E is against "
            "plain AGN of the same cell (E(method, AGN); AEASGD's row gives "
            "E(AEASGD, AGN), whose inverse is the paper's E).",
            "- **DN:** `--server_optimizer=delayed_nesterov "
            "--server_learning_rate=0.7 --server_momentum=0.9 "
            "--server_every=n` (DiLoCo's outer settings, the momentum moved "
            "once per n commits). **DyLU:** `--dynamic_local_updates`, "
            "λ_k = λ · s_k / max(s).", ""]
  lines += ["Claims tested:", ""]
  lines += [f"- **{name}**: {claim}" for name, claim in CLAIMS] + [""]
  for cell in shown:
    n, l = cell
    lines += [f"### n = {n}, λ = {l}", ""]
    lines += table(["method", "claim", "test", "train", "modeled time",
                    "E train", "E test", "staleness mean / max", "verdict"],
                   method_rows(ctx, cell))
  lines += ["Rules, fixed before the runs:", ""]
  lines += [f"- **{name}**: {rule}" for name, rule in RULES] + [""]
  path = _plot_methods(ctx, shown)
  lines += ctx.link(path, "methods under heterogeneous speeds")

  cell = shown[0]
  found = codec_rows(ctx, cell)
  base = _bytes(found[0][1])
  rows = []
  for codec, f in found:
    sent = _bytes(f)
    rows.append([codec, "codec" if codec != "none" else "(reference)",
                 pct(f and f.test_accuracy), megabytes(sent),
                 num(sent / base if sent is not None and base else None),
                 "–" if codec == "none" else codec_verdict(f, found[0][1])])
  lines += [f"### Compressed commits, AGN at n = {cell[0]}, λ = {cell[1]}",
            ""]
  lines += table(["codec", "claim", "test", "bytes committed",
                  "÷ uncompressed", "verdict"], rows)
  path = _plot_codecs(ctx, found)
  lines += ctx.link(path, "test accuracy against bytes moved")
  seconds = ctx.results.ledger_seconds(ctx.study.ledger, design.BEYOND)
  lines += [f"Compute: {duration(seconds)} here.", ""]
  return lines


def _plot_methods(ctx: Context, shown: Sequence[Tuple[int, int]]
                  ) -> Optional[str]:
  panels = []
  for cell in shown:
    found = [("AGN", _one(ctx, design.REFERENCE, cell, design.PLAIN))]
    for strategy, variant, label, _ in METHODS:
      found.append((label, _one(ctx, strategy, cell, variant)))
    found = [(label, f) for label, f in found if f is not None]
    if found:
      panels.append((cell, found))
  if not panels:
    return None
  plt = pyplot()
  fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.6),
                           squeeze=False)
  for ax, (cell, found) in zip(axes[0], panels):
    for label, f in found:
      times, values = curves.from_zero(*curves.eval_curve(f.run, f.time_base))
      ax.plot(times, values, label=label)
    ax.set_title(f"n = {cell[0]}, λ = {cell[1]}, "
                 f"{design.HETEROGENEOUS_SPEEDS}")
    ax.set_xlabel(f"modeled time ({curves.sim_unit(found[0][1].run)})")
    ax.set_ylabel("center's test accuracy")
    ax.legend(fontsize=7)
  fig.tight_layout()
  return save(fig, ctx.figure("beyond-methods.png"))


def _plot_codecs(ctx: Context, found) -> Optional[str]:
  shown = [(codec, curves.bytes_curve(f.run)) for codec, f in found if f]
  shown = [(codec, c) for codec, c in shown if c is not None]
  if not shown:
    return None
  plt = pyplot()
  fig, ax = plt.subplots(figsize=(6, 3.6))
  for codec, (sent, accuracy) in shown:
    ax.plot(np.asarray(sent) / 1e9, accuracy, label=codec)
  ax.set_xlabel("GB committed and pulled")
  ax.set_ylabel("center's test accuracy")
  ax.legend(fontsize=7)
  fig.tight_layout()
  return save(fig, ctx.figure("beyond-codecs.png"))
