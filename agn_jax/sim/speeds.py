"""The simulator's speed models: how fast each worker is, per worker or per window.

`--speed_model` is parsed here (`parse_speed_model`); a `trace:RUN_DIR` model
reads a processes run's window times (`read_trace`). Pure numpy: the clock
(`agn_jax.sim.clock.TimeModel`) turns a model into each window's duration.

The models: `constant` (with equal costs the commits go round robin,
staleness exactly n − 1 after the first round), `lognormal:SIGMA` and
`speeds:S0,...` (each worker's own speed), `random:SIGMA` and
`straggler:P:SLOWDOWN` and `exponential` (each window's own duration, so a
fast window can lap a slow one), `mixed:SIGMA_WORKER:SIGMA_WINDOW[:P:SLOWDOWN[:Q:SPEEDUP]]`
(both: each worker's own speed, its slowest workers slower still and its
fastest faster, and each window's draw around it), `trace:RUN_DIR` (a processes run's
window times); `thesis_refit` names the fit to the thesis' cluster, `thesis`
the fit before it.

Example:
  >>> parse_speed_model("lognormal:0.5")
  SpeedModel(kind='lognormal', sigma=0.5, probability=0.0, slowdown=1.0, speeds=(), trace_dir=None, sigma_window=0.0, fast=0.0, speedup=1.0)
"""

import functools
import json
import math
import os
from typing import Dict, List, NamedTuple, Optional

import numpy as np

SPEED_MODELS = ("constant", "lognormal", "random", "straggler", "speeds",
                "mixed", "trace", "thesis_refit", "thesis", "exponential")
SPEED_MODEL_FORMS = ("constant", "lognormal:SIGMA", "random:SIGMA",
                     "straggler:P:SLOWDOWN", "speeds:S0,S1,...",
                     "mixed:SIGMA_WORKER:SIGMA_WINDOW[:P:SLOWDOWN[:Q:SPEEDUP]]",
                     "trace:RUN_DIR",
                     "thesis_refit", "thesis", "exponential")
# `--speed_model=thesis`: the first fit to the thesis' cluster, to its
# staleness histogram of n = 20, λ = 15 alone by `scripts/fit_cluster.py` from
# the clock alone (no training): of lognormal:σ and random:σ, σ on a grid of
# 0.01 and 5 seeds each, random:0.26 is closest, at a total-variation
# distance of 0.147 (lognormal:0.26: 0.174; round robin: 0.871). Its
# quartiles and 90th percentile (16, 19, 21, 23; the thesis' 15, 19, 21,
# 23) match; it puts 1.5 % of commits below τ = 10, the thesis 9.8 %.
# Per-window draws average out over a run: every worker finishes at about
# the same time. experiments/results/cluster_fit_v1.{json,png}.
THESIS_SPEED_MODEL = "random:0.26"
# `--speed_model=thesis_refit`: the thesis' cluster as `scripts/fit_cluster.py`
# fits it jointly with `agn_jax.sim.clock.PAPER_REFIT` to the thesis' 98 run
# times, its staleness histogram and its workers' staleness traces (a
# persistent speed per worker: the thesis' n = 20 run had one worker about
# half as fast as the others, finishing alone, and two faster ones): each
# worker's speed exp(0.1 z), the slowest one in 20 (rounded up) twice as
# slow still, the fastest one in 10 1.6 times as fast, each window's
# duration × exp(0.1 z). It puts 10.5 % of that run's commits below τ = 10
# (the thesis 9.8 %) at a TV distance of 0.16; its slowest worker runs the
# last 50 % of its commits alone (the thesis' worker 15: 47 %), its two
# fastest commit 40 % of theirs below τ = 10 (workers 14 and 19: 32 %).
# experiments/results/cluster_fit.{json,png}.
THESIS_REFIT_SPEED_MODEL = "mixed:0.1:0.1:0.05:2:0.1:1.6"


class SpeedModel(NamedTuple):
  """How fast each worker is, per worker or per window (`parse_speed_model`).

  Attributes:
    kind: one of `SPEED_MODELS`.
    sigma: lognormal, random: the σ of `exp(σ z)`; mixed: its worker's σ.
    probability: straggler: the chance that a window is slowed down; mixed:
      the fraction of workers (rounded up) that straggle.
    slowdown: straggler: how many times longer such a window lasts; mixed:
      how many times slower a straggling worker is.
    speeds: speeds: each worker's speed.
    trace_dir: trace: the processes run whose window times are replayed.
    sigma_window: mixed: the σ of each window's `exp(σ z)`.
    fast: mixed: the fraction of workers (rounded up) that are faster.
    speedup: mixed: how many times faster such a worker is.
  """
  kind: str = "constant"
  sigma: float = 0.0
  probability: float = 0.0
  slowdown: float = 1.0
  speeds: tuple = ()
  trace_dir: Optional[str] = None
  sigma_window: float = 0.0
  fast: float = 0.0
  speedup: float = 1.0

  def text(self) -> str:
    """The flag value that gives this model back.

    Example:
      >>> parse_speed_model("straggler:0.1:4").text()
      'straggler:0.1:4'
    """
    if self.kind in ("constant", "exponential"):
      return self.kind
    if self.kind in ("lognormal", "random"):
      return f"{self.kind}:{self.sigma:g}"
    if self.kind == "straggler":
      return f"straggler:{self.probability:g}:{self.slowdown:g}"
    if self.kind == "speeds":
      return "speeds:" + ",".join(f"{s:g}" for s in self.speeds)
    if self.kind == "mixed":
      return (f"mixed:{self.sigma:g}:{self.sigma_window:g}" +
              (f":{self.probability:g}:{self.slowdown:g}"
               if self.probability or self.fast else "") +
              (f":{self.fast:g}:{self.speedup:g}" if self.fast else ""))
    return f"trace:{self.trace_dir}"


MIXED_FORM = SPEED_MODEL_FORMS[5]

# The widest spread of speeds a clock models. σ = 5 already makes one worker
# of 40 about e^(5·2.2) ≈ 6·10^4 times another; wider ones would overflow the
# clock's times or starve every worker but one of windows.
MAX_SIGMA = 5.0
MAX_SPEED_RATIO = 1e6


def parse_speed_model(text: str) -> SpeedModel:
  """Parses `--speed_model`.

  * `constant`: every worker and window alike; with equal costs the commits
    go round robin, each (after the first round) with staleness n − 1.
  * `lognormal:SIGMA`: worker k's speed is `exp(σ z_k)`, drawn once for the
    run (seeded): persistently faster and slower workers.
  * `random:SIGMA`: each window of each worker lasts `exp(σ z)` times the
    speed-1 window, drawn anew for every window: a fast draw can lap a slow
    one.
  * `straggler:P:SLOWDOWN`: each window is, with probability P, SLOWDOWN
    times longer.
  * `speeds:S0,S1,...`: worker k's speed is S_k (one per worker).
  * `mixed:SIGMA_WORKER:SIGMA_WINDOW[:P:SLOWDOWN[:Q:SPEEDUP]]`: worker
    k's speed is `exp(σ_worker z_k)`, drawn once for the run (as
    `lognormal`'s), and each of its windows lasts `exp(σ_window z)` times
    its own window, drawn anew (as `random`'s): persistent speeds with
    jitter around them. With P and SLOWDOWN, the ⌈P n⌉ slowest workers of
    that draw are SLOWDOWN times slower still, for the whole run:
    persistent stragglers; with Q and SPEEDUP, the ⌈Q n⌉ fastest SPEEDUP
    times faster.
  * `exponential`: each window of each worker lasts an Exp(1) draw times
    the speed-1 window, drawn anew for every window (seeded as `random`'s):
    Mitliagkas et al.'s (2016) model, under which `n` asynchronous workers
    act like momentum `1 − 1/n` on the center.
  * `trace:RUN_DIR`: each worker's window times are those of the processes
    run in RUN_DIR (its metrics.jsonl), per local step; worker k replays
    worker k mod n of the trace, its windows in order, cycled, starts
    its first window as long after time 0 as that worker did after the
    run's start barrier, and its commits and pulls last as much longer or
    shorter than the cluster's as its windows are than the trace's mean.
  * `thesis_refit`: the thesis' cluster, `THESIS_REFIT_SPEED_MODEL`, fitted with
    `--cluster=paper_refit` by `scripts/fit_cluster.py`; `thesis`: the fit
    before it, `THESIS_SPEED_MODEL` (random:0.26, to the staleness
    histogram alone).

  Raises:
    ValueError: one line naming what is wrong.

  Example:
    >>> parse_speed_model("lognormal:0.5")
    SpeedModel(kind='lognormal', sigma=0.5, probability=0.0, slowdown=1.0, speeds=(), trace_dir=None, sigma_window=0.0, fast=0.0, speedup=1.0)
    >>> parse_speed_model("lognormal")
    Traceback (most recent call last):
    ...
    ValueError: --speed_model=lognormal: lognormal needs a σ, as lognormal:SIGMA
  """
  text = str(text).strip()
  kind, _, rest = text.partition(":")

  def bad(why):
    return ValueError(f"--speed_model={text}: {why}")

  def number(value, what, check, accepts):
    try:
      x = float(value)
    except ValueError:
      raise bad(f"{what} must be {accepts}, got {value!r}") from None
    if not (math.isfinite(x) and check(x)):
      raise bad(f"{what} must be {accepts}, got {value!r}")
    return x

  if kind not in SPEED_MODELS:
    raise bad(f"not one of {', '.join(SPEED_MODEL_FORMS)}")
  if kind in ("constant", "exponential", "thesis_refit", "thesis"):
    if rest:
      raise bad(f"{kind} takes no value")
    if kind in ("constant", "exponential"):
      return SpeedModel(kind)
    return parse_speed_model(THESIS_REFIT_SPEED_MODEL if kind == "thesis_refit" else
                             THESIS_SPEED_MODEL)
  if not rest:
    form = [f for f in SPEED_MODEL_FORMS if f.startswith(kind + ":")][0]
    raise bad(f"{kind} needs "
              f"{'a σ' if form.endswith(':SIGMA') else 'its values'}, as "
              f"{form}")
  sigma_range = f"a number in [0, {MAX_SIGMA:g}]"
  if kind in ("lognormal", "random"):
    return SpeedModel(kind, sigma=number(
        rest, "σ", lambda x: 0 <= x <= MAX_SIGMA, sigma_range))
  if kind == "mixed":
    parts = rest.split(":")
    if len(parts) not in (2, 4, 6):
      raise bad("mixed needs two σ, then optionally P and SLOWDOWN, then Q "
                "and SPEEDUP, as " + MIXED_FORM)
    worker, window = (number(v, what, lambda x: 0 <= x <= MAX_SIGMA,
                             sigma_range)
                      for v, what in zip(parts, ("SIGMA_WORKER",
                                                 "SIGMA_WINDOW")))
    fractions = [0.0, 1.0, 0.0, 1.0]  # P, SLOWDOWN, Q, SPEEDUP.
    for i, (value, what) in enumerate(zip(parts[2:], ("P", "SLOWDOWN", "Q",
                                                       "SPEEDUP"))):
      fractions[i] = (
          number(value, what, lambda x: 0 <= x <= 1, "a number in [0, 1]")
          if i % 2 == 0 else
          number(value, what, lambda x: 1 <= x <= MAX_SPEED_RATIO,
                 f"a number in [1, {MAX_SPEED_RATIO:g}]"))
    return SpeedModel(kind, sigma=worker, sigma_window=window,
                      probability=fractions[0], slowdown=fractions[1],
                      fast=fractions[2], speedup=fractions[3])
  if kind == "straggler":
    parts = rest.split(":")
    if len(parts) != 2:
      raise bad("straggler needs P and SLOWDOWN, as straggler:P:SLOWDOWN")
    return SpeedModel(
        kind, probability=number(parts[0], "P", lambda x: 0 <= x <= 1,
                                 "a number in [0, 1]"),
        slowdown=number(parts[1], "SLOWDOWN",
                        lambda x: 1 <= x <= MAX_SPEED_RATIO,
                        f"a number in [1, {MAX_SPEED_RATIO:g}]"))
  if kind == "speeds":
    speeds = tuple(number(v, "a speed", lambda x: x > 0, "a finite number > 0")
                   for v in rest.split(","))
    if max(speeds) / min(speeds) > MAX_SPEED_RATIO:
      raise bad(f"the fastest speed is {max(speeds) / min(speeds):.3g} times "
                f"the slowest; at most {MAX_SPEED_RATIO:g} is modeled")
    return SpeedModel(kind, speeds=speeds)
  path = os.path.join(rest, "metrics.jsonl")
  if not os.path.isfile(path):
    raise bad(f"{rest} holds no metrics.jsonl (a processes run's workdir)")
  _trace_windows(rest)  # Its rows are checked now, before any run starts.
  return SpeedModel(kind, trace_dir=rest)


def read_trace(run_dir: str) -> List[np.ndarray]:
  """Each worker's local-step durations, window by window, from a run's metrics.jsonl.

  A commit row's `window_end − window_start` over the run's λ (its
  config.json) is that window's step time. Only rows with both bounds count.

  Returns:
    One array per worker of the run (0 to the highest worker seen), each
    holding that worker's step times in commit order.

  Raises:
    ValueError: one line, when the run has no timed windows.
  """
  windows = _trace_windows(run_dir)
  everyone = [t for w in windows.values() for _, _, t in w]
  return [np.array([t for _, _, t in sorted(windows[k])]) if k in windows
          else np.array([float(np.median(everyone))])
          for k in range(max(windows) + 1)]


def read_trace_starts(run_dir: str) -> List[float]:
  """When each worker of a run began its first window, in seconds after the start barrier.

  A worker does not compute from the barrier on: it wakes, pulls the
  initial center and sets up its state first, while the others do the same
  on the same cores (tens of milliseconds on a loaded 2-core machine). A
  worker without timed windows starts at the others' median.

  Raises:
    ValueError: one line, when the run has no timed windows.
  """
  windows = _trace_windows(run_dir)
  first = {k: min(start for _, start, _ in w) for k, w in windows.items()}
  middle = float(np.median(list(first.values())))
  return [max(0.0, first.get(k, middle)) for k in range(max(windows) + 1)]


# A trace's worker numbers: those of its config.json's run, or below this.
MAX_TRACE_WORKERS = 4096


def _not_a_number(text):
  raise ValueError(f"{text} is not a finite number")


def _trace_windows(run_dir: str) -> Dict[int, List[tuple]]:
  """Per worker: (commit time, window start, step time) of each timed window.

  The one reader of a trace. Every commit row must hold a worker number of
  the run and finite times; any other row is refused in one line naming
  the file, the line and the field. Only the file's last line may be cut
  short (by a kill) and is then skipped.

  Raises:
    ValueError: `--speed_model=trace:DIR: FILE, line N: what is wrong`, or
      when the run has no timed windows.
  """
  path = os.path.join(run_dir, "metrics.jsonl")
  try:
    info = os.stat(path)
    key = (info.st_size, info.st_mtime_ns)
  except OSError:
    key = (None, None)
  # Read once per version of the file: the flag check, the config's
  # validation and the clock each ask for the same trace.
  return _read_trace_windows(run_dir, path, *key)


@functools.lru_cache(maxsize=8)
def _read_trace_windows(run_dir: str, path: str, size, mtime_ns
                        ) -> Dict[int, List[tuple]]:
  """`_trace_windows`, read from the file (`size` and `mtime_ns` key the cache)."""
  del size, mtime_ns
  windows: Dict[int, List[tuple]] = {}
  lam, workers = None, MAX_TRACE_WORKERS
  try:
    with open(os.path.join(run_dir, "config.json")) as f:
      config = json.load(f)
    lam = int(config["communication_window"])
    workers = int(config.get("num_workers") or MAX_TRACE_WORKERS)
  except (OSError, ValueError, KeyError, TypeError, AttributeError):
    pass

  def bad(number, why):
    return ValueError(f"--speed_model=trace:{run_dir}: {path}, line "
                      f"{number}: {why}")

  try:
    with open(path, encoding="utf-8") as f:
      lines = f.read().split("\n")
  except UnicodeDecodeError as e:
    with open(path, "rb") as f:
      line = 1 + f.read(e.start).count(b"\n")
    raise bad(line, "not UTF-8 text (is it a metrics.jsonl?)") from None
  except OSError as e:
    raise ValueError(f"--speed_model=trace:{run_dir}: cannot read {path}: "
                     f"{e.strerror or e}") from None
  last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
  for index, line in enumerate(lines):
    number = index + 1
    if not line.strip():
      continue
    try:
      row = json.loads(line, parse_constant=_not_a_number)
    except ValueError as e:
      if index == last and "is not a finite number" not in str(e):
        continue  # The last line, cut short by a kill.
      raise bad(number, str(e) if "finite" in str(e) else
                "not a JSON object") from None
    if not isinstance(row, dict) or row.get("event") != "commit":
      continue
    worker = row.get("worker")
    if (not isinstance(worker, int) or isinstance(worker, bool) or
        not 0 <= worker < workers):
      raise bad(number, f"worker is {json.dumps(worker)}, not a worker "
                f"number of the run (an integer in [0, {workers}))")
    values = {}
    for field in ("time", "window_start", "window_end"):
      value = row.get(field)
      if value is None and field != "time":
        continue  # A commit without its window's bounds is not timed.
      if (not isinstance(value, (int, float)) or isinstance(value, bool) or
          not math.isfinite(value)):
        raise bad(number, f"{field} is {json.dumps(value)}, not a finite "
                  "number of seconds")
      values[field] = float(value)
    start, end = values.get("window_start"), values.get("window_end")
    if start is None or end is None:
      continue
    # The window's local steps: its row's step values (`step_<metric>`,
    # `step_accuracy` for classification) count them.
    listed = [v for k, v in row.items()
              if k.startswith("step_") and isinstance(v, list)]
    steps = (len(listed[0]) if listed else 0) or lam
    if steps and end >= start:
      windows.setdefault(worker, []).append(
          (values["time"], start, (end - start) / steps))
  if not windows:
    raise ValueError(f"--speed_model=trace:{run_dir}: its metrics.jsonl has "
                     "no commit rows with window times (a processes run's)")
  return windows

