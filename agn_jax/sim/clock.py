"""The simulator's clock: what a cluster's steps, messages and server cost, and when each commit lands.

Pure numpy, no JAX and no runtime: the simulator engine asks an
`EventSchedule` which commit the server applies next and when, and runs the
numerics in that order. The times never depend on the numbers.

**Events.** Each worker repeats: compute a window (λ local steps), send the
commit, wait for the server, receive the center. The server is one FIFO
queue: a commit that arrives while it is busy waits. A commit-then-pull
worker (agn, downpour, dynsgd, adag) waits for its commit's reply, the
center right after its commit (read-your-writes, as a processes worker
waits for its acknowledgement before it pulls), and starts its next window
when that center has arrived. A pull-before-commit worker (aeasgd, eamsgd)
pulls the center when its window is done, sends its commit and goes on with
its next window without waiting for the server; the simulator applies such
a pull and commit together (staleness 0), so a commit that lands between
them in a real cluster is not seen.

**The time model** (`TimeModel`): a window lasts λ × a speed-1 worker's step
time × the worker's speed factor for that window (`SpeedModel`), or a
processes run's own window times, each worker starting its first window
when that run's worker did and as much slower at its messages as at its
windows (`trace:RUN_DIR`); a message lasts
`latency + bytes / bandwidth` (the commit's payload, the pull's center); an
apply lasts the server's apply time. The presets (`Cluster`):

* `none`: the step counter: a speed-1 step lasts 1 (time is counted in
  local steps, not seconds); messages and the server take no time.
* `this_host`: measured on this machine (`agn_jax.runtime.calibration`):
  the run's own step time with its optimizer, model and batch as a
  processes worker runs it (one thread, one core), and the shared-memory
  transport's and server's times for its payload.
* `paper` (`PAPER`): the thesis' 15 nodes (2× Xeon E5-2650 v2, one core per
  worker, one Python parameter server on the driver), fitted to its
  published run times (see `PAPER`).

Example:
  >>> model = TimeModel(step_seconds=0.1, commit_seconds=0.05,
  ...                   pull_seconds=0.05, server_apply_seconds=0.01,
  ...                   num_workers=2, communication_window=10)
  >>> schedule = EventSchedule(model, num_windows=2)
  >>> [(c.worker, round(c.applied, 2)) for c in schedule.drain()]
  [(0, 1.06), (1, 1.07), (0, 2.17), (1, 2.18)]
"""

import functools
import json
import heapq
import math
import os
from typing import (Any, Dict, Iterator, List, NamedTuple, Optional, Sequence,
                    Tuple)

import numpy as np

from agn_jax.shares import Windows

CLUSTERS = ("none", "this_host", "paper")
SPEED_MODELS = ("constant", "lognormal", "random", "straggler", "speeds",
                "trace", "thesis")
SPEED_MODEL_FORMS = ("constant", "lognormal:SIGMA", "random:SIGMA",
                     "straggler:P:SLOWDOWN", "speeds:S0,S1,...",
                     "trace:RUN_DIR", "thesis")
# `--speed_model=thesis`: the thesis' cluster, fitted to its staleness
# histogram of AGN at n = 20, λ = 15 by `scripts/fit_cluster.py` from the
# clock alone (no training): of lognormal:σ and random:σ, σ on a grid of
# 0.01 and 5 seeds each, random:0.26 is closest, at a total-variation
# distance of 0.147 (lognormal:0.26: 0.174; round robin: 0.871). Its
# quartiles and 90th percentile (16, 19, 21, 23; the thesis' 15, 19, 21,
# 23) match; it puts 1.5 % of commits below τ = 10, the thesis 9.8 %
# (those came early in its run, when two workers were slow).
# experiments/results/cluster_fit.{json,png}.
THESIS_SPEED_MODEL = "random:0.26"
BYTES_PER_PARAM = 4  # float32 everywhere: the center, payloads, messages.
_SALT = 0x0D3E5  # Keeps the speed draws apart from the samplers' [seed, k].
_CHUNK = 1024  # Per-window draws come in chunks, independent of the share.


# --- Clusters -----------------------------------------------------------------


class Cluster(NamedTuple):
  """What one kind of cluster's parts cost; `time_model` applies it to a run.

  A step costs `step_seconds` if given (measured for the run's own model,
  optimizer and batch), else `flops / flops_per_second + update_bytes /
  update_bytes_per_second` (see `Workload`). An apply costs
  `server_apply_seconds` if given, else the payload's bytes over
  `server_bytes_per_second`.

  Attributes:
    name: one of `CLUSTERS`.
    bandwidth_gbps: a message's bandwidth in Gb/s (inf: free).
    latency_ms: a message's fixed cost in ms.
    flops_per_second: a worker's rate on the forward and backward pass.
    update_bytes_per_second: a worker's memory rate on its optimizer update.
    server_bytes_per_second: the server's rate on a payload.
    step_seconds: a speed-1 worker's step, measured; wins over the rates.
    server_apply_seconds: one apply, measured; wins over the rate.
    cores: workers that compute at full speed at once (more share them: a
      step, and the commit and pull a worker computes and copies, last
      `n / cores` times longer); None: one core each.
    unit: what the clock counts, "seconds" (or "steps" for `none`).
    measured: how a measured cluster was measured (for the record).
  """
  name: str
  bandwidth_gbps: float = math.inf
  latency_ms: float = 0.0
  flops_per_second: Optional[float] = None
  update_bytes_per_second: Optional[float] = None
  server_bytes_per_second: Optional[float] = None
  step_seconds: Optional[float] = None
  server_apply_seconds: Optional[float] = None
  cores: Optional[int] = None
  unit: str = "seconds"
  measured: Optional[Dict[str, Any]] = None


NONE = Cluster("none", step_seconds=1.0, server_apply_seconds=0.0,
               unit="steps")

# The thesis' cluster, fitted to its published times of AGN with Adam on the
# paper MLP (4,798,010 parameters, batch 128, 40 epochs of 60,000 examples:
# 2.4 M samples split over n workers, each running the whole windows of λ
# steps in its 2.4 M / (128 n) steps: the last partial window is dropped,
# so at n = λ = 40 a worker runs 440 of its 468.75 steps): n = 10, λ = 10:
# 1,066.08 s; n = 10, λ = 40: 845 s; n = λ = 20: 432.93 s; n = λ = 40:
# 257.62 s. A least-squares fit of this module's event model to those four
# times (relative errors; `python scripts/fit_cluster.py`, "paper_times")
# gives a step of 0.419 s, a message of 0.504 s for the 19.19 MB of a commit
# or a pull, and an apply of 0.495 s; the model then gives the four times
# within +0.2 %, −0.1 %, +7.2 % and −8.8 %. (The fit before partial windows
# were dropped, 0.405 s, 0.512 s and 0.480 s, is off by −11.6 % at n = λ =
# 40 on the steps actually run.) Each number:
# * latency_ms = 1: assumed (gigabit Ethernet plus Python's socket calls);
#   with 19 MB messages it hardly matters.
# * bandwidth_gbps = 0.305: 19.19 MB × 8 / (0.504 s − 1 ms). The thesis'
#   nodes had a 10 Gb/s interconnect; the pickled arrays crossed Python
#   sockets (Spark's driver) at 3 % of it.
# * server_bytes_per_second = 38.8 MB/s: 19.19 MB / 0.495 s (the single
#   Python server deserialises, adds and answers under one lock). Beyond
#   n = 30 its queue is what made commits wait.
# * update_bytes_per_second = 5 GB/s: assumed, one core's share of a Xeon
#   E5-2650 v2's memory bandwidth (59.7 GB/s a socket over 8 cores, less
#   what a core sustains); it only weighs one optimizer's update against
#   another's (AGN with Adam touches 44 bytes a parameter a step: 42 ms).
# * flops_per_second = 9.25 GFLOP/s: XLA counts 3.484 GFLOP for a forward
#   and backward pass of the paper MLP at batch 128, and 0.419 s − 42 ms
#   remain for it (a quarter of one core's AVX peak of 41.6 GFLOP/s).
PAPER = Cluster("paper", bandwidth_gbps=0.305, latency_ms=1.0,
                flops_per_second=9.25e9, update_bytes_per_second=5e9,
                server_bytes_per_second=38.8e6)


def preset(name: str) -> Cluster:
  """The `none` or `paper` cluster (`this_host` is measured, not preset).

  Raises:
    ValueError: for `this_host` or an unknown name.

  Example:
    >>> preset("paper").bandwidth_gbps
    0.305
  """
  if name == "none":
    return NONE
  if name == "paper":
    return PAPER
  if name == "this_host":
    raise ValueError("cluster this_host is measured on this machine "
                     "(agn_jax.runtime.calibration.this_host), not a preset")
  raise ValueError(f"cluster must be one of {', '.join(CLUSTERS)}, got "
                   f"{name!r}")


class Workload(NamedTuple):
  """What one worker of a run computes and sends.

  Attributes:
    num_params: parameters of the model.
    flops_per_step: a forward and backward pass at the run's batch size.
    optimizer_floats: the local optimizer's state, in floats per parameter
      (Adam: 2; AGN with Adam: 4, its anchor and delta too).
    payload_vectors: model-sized vectors in a commit (adag: 2, else 1).
    pull_before_commit: the strategy pulls before it commits.
    payload_bytes: a commit's bytes as sent (`--commit_compression`);
      None: `payload_vectors` float32 vectors of the model's size. The
      server's apply still reads and writes whole vectors.
  """
  num_params: int
  flops_per_step: float = 0.0
  optimizer_floats: float = 0.0
  payload_vectors: int = 1
  pull_before_commit: bool = False
  payload_bytes: Optional[float] = None

  def update_bytes(self) -> float:
    """Memory an optimizer step touches: the parameters, their gradient, the state.

    Example:
      >>> Workload(10, optimizer_floats=4.0).update_bytes()  # 4 B × 10 × 11
      440.0
    """
    return float(BYTES_PER_PARAM * self.num_params *
                 (3 + 2 * self.optimizer_floats))


# --- Speed models -------------------------------------------------------------


class SpeedModel(NamedTuple):
  """How fast each worker is, per worker or per window (`parse_speed_model`).

  Attributes:
    kind: one of `SPEED_MODELS`.
    sigma: lognormal, random: the σ of `exp(σ z)`.
    probability: straggler: the chance that a window is slowed down.
    slowdown: straggler: how many times longer such a window lasts.
    speeds: speeds: each worker's speed.
    trace_dir: trace: the processes run whose window times are replayed.
  """
  kind: str = "constant"
  sigma: float = 0.0
  probability: float = 0.0
  slowdown: float = 1.0
  speeds: tuple = ()
  trace_dir: Optional[str] = None

  def text(self) -> str:
    """The flag value that gives this model back.

    Example:
      >>> parse_speed_model("straggler:0.1:4").text()
      'straggler:0.1:4'
    """
    if self.kind == "constant":
      return "constant"
    if self.kind in ("lognormal", "random"):
      return f"{self.kind}:{self.sigma:g}"
    if self.kind == "straggler":
      return f"straggler:{self.probability:g}:{self.slowdown:g}"
    if self.kind == "speeds":
      return "speeds:" + ",".join(f"{s:g}" for s in self.speeds)
    return f"trace:{self.trace_dir}"


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
  * `trace:RUN_DIR`: each worker's window times are those of the processes
    run in RUN_DIR (its metrics.jsonl), per local step; worker k replays
    worker k mod n of the trace, its windows in order, cycled, starts
    its first window as long after time 0 as that worker did after the
    run's start barrier, and its commits and pulls last as much longer or
    shorter than the cluster's as its windows are than the trace's mean.
  * `thesis`: the thesis' cluster, `THESIS_SPEED_MODEL` (random:0.26),
    fitted to its staleness histogram by `scripts/fit_cluster.py`.

  Raises:
    ValueError: one line naming what is wrong.

  Example:
    >>> parse_speed_model("lognormal:0.5")
    SpeedModel(kind='lognormal', sigma=0.5, probability=0.0, slowdown=1.0, speeds=(), trace_dir=None)
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
  if kind in ("constant", "thesis"):
    if rest:
      raise bad(f"{kind} takes no value")
    return (SpeedModel() if kind == "constant" else
            parse_speed_model(THESIS_SPEED_MODEL))
  if not rest:
    form = [f for f in SPEED_MODEL_FORMS if f.startswith(kind + ":")][0]
    raise bad(f"{kind} needs "
              f"{'a σ' if 'SIGMA' in form else 'its values'}, as {form}")
  if kind in ("lognormal", "random"):
    return SpeedModel(kind, sigma=number(
        rest, "σ", lambda x: 0 <= x <= MAX_SIGMA, f"a number in [0, {MAX_SIGMA:g}]"))
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
    steps = len(row.get("step_accuracy") or ()) or lam
    if steps and end >= start:
      windows.setdefault(worker, []).append(
          (values["time"], start, (end - start) / steps))
  if not windows:
    raise ValueError(f"--speed_model=trace:{run_dir}: its metrics.jsonl has "
                     "no commit rows with window times (a processes run's)")
  return windows


# --- The time model -----------------------------------------------------------


class TimeModel:
  """One run's times: steps, messages, the server and each window's speed.

  Args:
    step_seconds: a speed-1 worker's local step (the clock's unit: 1 for
      the `none` cluster, which counts steps).
    commit_seconds: a commit's message.
    pull_seconds: a pull's message (the center).
    server_apply_seconds: the server's time for one commit.
    num_workers: n.
    communication_window: λ.
    speed_model: a `SpeedModel` or its text (`parse_speed_model`).
    seed: seeds the speed draws.
    pull_before_commit: the strategy pulls before its commit (see the
      module docstring).
    cluster: the cluster's name, for the record.
    unit: "seconds", or "steps" for the `none` cluster.
    record: more to record (`describe`), e.g. bandwidth and latency.
    trace: for `trace:` models, `read_trace`'s arrays (None: read them).
    trace_starts: for `trace:` models, `read_trace_starts`' times (None:
      read them with the arrays, or 0 for every worker when `trace` is
      given).

  Raises:
    ValueError: a `speeds:` model without one speed per worker, or a trace
      on a clock that counts steps.

  Example:
    >>> model = TimeModel(step_seconds=2.0, commit_seconds=0.0,
    ...                   pull_seconds=0.0, server_apply_seconds=0.0,
    ...                   num_workers=2, communication_window=3,
    ...                   speed_model="speeds:1,2")
    >>> model.window_seconds(0, 0), model.window_seconds(1, 5)
    (6.0, 3.0)
  """

  def __init__(self, step_seconds: float, commit_seconds: float,
               pull_seconds: float, server_apply_seconds: float, *,
               num_workers: int, communication_window: int,
               speed_model="constant", seed: int = 0,
               pull_before_commit: bool = False, cluster: str = "custom",
               unit: str = "seconds", record: Optional[Dict] = None,
               trace: Optional[Sequence[np.ndarray]] = None,
               trace_starts: Optional[Sequence[float]] = None):
    for name, value in (("step_seconds", step_seconds),
                        ("commit_seconds", commit_seconds),
                        ("pull_seconds", pull_seconds),
                        ("server_apply_seconds", server_apply_seconds)):
      if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    if isinstance(speed_model, str):
      speed_model = parse_speed_model(speed_model)
    self.step_seconds = float(step_seconds)
    self.commit_seconds = float(commit_seconds)
    self.pull_seconds = float(pull_seconds)
    self.server_apply_seconds = float(server_apply_seconds)
    self.num_workers = int(num_workers)
    self.communication_window = int(communication_window)
    self.speed_model = speed_model
    self.seed = int(seed)
    self.pull_before_commit = bool(pull_before_commit)
    self.cluster = cluster
    self.unit = unit
    self.record = dict(record or {})
    n = self.num_workers
    self._speeds = np.ones(n)
    self._chunks: Dict[tuple, np.ndarray] = {}
    self._trace = None
    self._starts = [0.0]
    self._message_scales = [1.0]
    if speed_model.kind == "lognormal":
      z = np.random.default_rng([self.seed, _SALT, 2**31]).standard_normal(n)
      self._speeds = np.exp(speed_model.sigma * z)
    elif speed_model.kind == "speeds":
      if len(speed_model.speeds) != n:
        raise ValueError(f"--speed_model={speed_model.text()} has "
                         f"{len(speed_model.speeds)} speeds for {n} workers")
      self._speeds = np.array(speed_model.speeds, np.float64)
    elif speed_model.kind == "trace":
      error = clock_error(unit, speed_model)
      if error:
        raise ValueError(error)
      self._trace = (list(trace) if trace is not None else
                     read_trace(speed_model.trace_dir))
      if trace_starts is not None:
        self._starts = [float(t) for t in trace_starts]
      elif trace is None:
        self._starts = read_trace_starts(speed_model.trace_dir)
      # A worker's commit and pull are its own work too (the jitted commit,
      # the copies, waking to poll): one whose core is shared with more is
      # as much slower at them as at its windows. In processes runs of
      # digits here, the worker with 1.8 to 3 times the other's window time
      # took 1.8 to 3.5 times its time between windows. The first window
      # (the kernel's first call) says nothing of that.
      typical = [float(np.mean(t[1:] if len(t) > 1 else t))
                 for t in self._trace]
      middle = float(np.mean(typical))
      self._message_scales = [t / middle if middle > 0 else 1.0
                              for t in typical]

  def start_seconds(self, worker: int) -> float:
    """When `worker` begins its first window (0 but for a trace)."""
    return self._starts[worker % len(self._starts)]

  def commit_seconds_of(self, worker: int) -> float:
    """`worker`'s commit message: `commit_seconds`, scaled for a trace.

    A trace's worker sends it as much faster or slower as its windows are
    than the mean of the trace's workers' (each without its first window).
    """
    return self.commit_seconds * self._message_scales[
        worker % len(self._message_scales)]

  def pull_seconds_of(self, worker: int) -> float:
    """`worker`'s pull message (see `commit_seconds_of`)."""
    return self.pull_seconds * self._message_scales[
        worker % len(self._message_scales)]

  def worker_speeds(self) -> List[float]:
    """Each worker's speed factor (1 for models that vary by window)."""
    return [float(s) for s in self._speeds]

  def mean_speeds(self) -> List[float]:
    """Each worker's speed over its whole run, relative: what Dynamic Local Updates scale λ by.

    A worker's own speed for `lognormal` and `speeds`; one over its mean
    step time for `trace` (its windows after the first, as
    `commit_seconds_of` takes them); 1 for every worker of `constant`,
    `random` and `straggler`, whose windows are drawn alike for every
    worker (their mean is the same for all: a draw says how long a window
    took once it ran, not how fast its worker is).

    Example:
      >>> TimeModel(1.0, 0.0, 0.0, 0.0, num_workers=2, communication_window=4,
      ...           speed_model="speeds:1,0.5").mean_speeds()
      [1.0, 0.5]
    """
    if self._trace is None:
      return self.worker_speeds()
    return [1.0 / self._message_scales[k % len(self._message_scales)]
            for k in range(self.num_workers)]

  def _draw(self, worker: int, window: int) -> float:
    """The window's own draw: z ~ N(0, 1) (random) or u ~ U(0, 1) (straggler)."""
    key = (worker, window // _CHUNK)
    chunk = self._chunks.get(key)
    if chunk is None:
      rng = np.random.default_rng([self.seed, _SALT, worker, key[1]])
      chunk = (rng.standard_normal(_CHUNK) if self.speed_model.kind == "random"
               else rng.random(_CHUNK))
      self._chunks[key] = chunk
    return float(chunk[window % _CHUNK])

  def window_seconds(self, worker: int, window: int,
                     steps: Optional[int] = None) -> float:
    """How long window `window` (from 0) of `worker` computes, `steps` local steps of it (None: λ)."""
    model = self.speed_model
    lam = self.communication_window if steps is None else int(steps)
    if model.kind == "trace":
      times = self._trace[worker % len(self._trace)]
      return lam * float(times[window % len(times)])
    base = lam * self.step_seconds / self._speeds[worker]
    if model.kind == "random":
      return base * math.exp(model.sigma * self._draw(worker, window))
    if model.kind == "straggler":
      slow = self._draw(worker, window) < model.probability
      return base * (model.slowdown if slow else 1.0)
    return float(base)

  def describe(self) -> Dict[str, Any]:
    """What summary.json records: the cluster, the unit, every cost, the speeds."""
    out = {
        "cluster": self.cluster,
        "unit": self.unit,
        "speed_model": self.speed_model.text(),
        "step_seconds": self.step_seconds,
        "commit_seconds": self.commit_seconds,
        "pull_seconds": self.pull_seconds,
        "server_apply_seconds": self.server_apply_seconds,
        "pull_before_commit": self.pull_before_commit,
    }
    if self.speed_model.kind in ("lognormal", "speeds"):
      out["worker_speeds"] = self.worker_speeds()
    if self.speed_model.kind == "trace":
      out["worker_starts"] = [self.start_seconds(k)
                              for k in range(self.num_workers)]
      out["worker_message_scales"] = [
          self._message_scales[k % len(self._message_scales)]
          for k in range(self.num_workers)]
    out.update(self.record)
    return out


def message_seconds(num_bytes: float, bandwidth_gbps: float,
                    latency_ms: float) -> float:
  """`latency + bytes / bandwidth`, in seconds.

  Example:
    >>> round(message_seconds(125e6, 1.0, 2.0), 3)  # 1 Gb at 1 Gb/s
    1.002
  """
  return latency_ms / 1e3 + (8.0 * num_bytes / (bandwidth_gbps * 1e9)
                             if bandwidth_gbps != math.inf else 0.0)


def clock_error(unit: str, speed_model="constant",
                **seconds: Optional[float]) -> Optional[str]:
  """Why a clock that counts `unit` cannot take these settings (one line), or None.

  A clock of local steps (the `none` cluster's) has no seconds: a message
  or server cost in seconds (`seconds`: `bandwidth_gbps`, `latency_ms`,
  `server_apply_ms`, None where not given) or a replayed trace of seconds
  means nothing to it.

  Example:
    >>> clock_error("steps", "trace:runs/a")
    '--speed_model=trace:runs/a replays seconds; it needs --cluster=this_host or paper (--cluster=none counts local steps)'
    >>> clock_error("seconds", latency_ms=1.0) is None
    True
  """
  if unit != "steps":
    return None
  for name, value in seconds.items():
    if value is not None:
      return (f"--{name} needs --cluster=this_host or paper (--cluster=none "
              "counts local steps, not seconds)")
  text = speed_model if isinstance(speed_model, str) else speed_model.text()
  if text.strip().startswith("trace:"):
    return (f"--speed_model={text.strip()} replays seconds; it needs "
            "--cluster=this_host or paper (--cluster=none counts local steps)")
  return None


def time_model(cluster: Cluster, workload: Workload, *, num_workers: int,
               communication_window: int, speed_model="constant",
               seed: int = 0, bandwidth_gbps: Optional[float] = None,
               latency_ms: Optional[float] = None,
               server_apply_ms: Optional[float] = None) -> TimeModel:
  """A run's `TimeModel`: the cluster's costs for this workload, with the overrides.

  Args:
    cluster: a `Cluster` (`preset(name)` or a measured one).
    workload: what a worker computes and sends.
    num_workers: n.
    communication_window: λ.
    speed_model: `--speed_model` (text or `SpeedModel`).
    seed: seeds the speed draws.
    bandwidth_gbps, latency_ms, server_apply_ms: override the cluster's
      (`--bandwidth_gbps`, `--latency_ms`, `--server_apply_ms`).

  Raises:
    ValueError: one line, for overrides on the `none` cluster (whose clock
      counts steps, not seconds), or a bad speed model.

  Example:
    >>> work = Workload(num_params=4_798_010, flops_per_step=3.484e9,
    ...                 optimizer_floats=4.0)
    >>> model = time_model(PAPER, work, num_workers=40,
    ...                    communication_window=40)
    >>> round(model.step_seconds, 3), round(model.commit_seconds, 3)
    (0.419, 0.504)
    >>> round(time_model(PAPER, work, num_workers=40, communication_window=40,
    ...                  bandwidth_gbps=1.0).commit_seconds, 3)
    0.155
  """
  # Also checked with the config (`SimulatedOptions.fit_error`); a caller
  # may pass any `Cluster` here.
  error = clock_error(cluster.unit, bandwidth_gbps=bandwidth_gbps,
                      latency_ms=latency_ms, server_apply_ms=server_apply_ms)
  if error:
    raise ValueError(error)
  bandwidth = cluster.bandwidth_gbps if bandwidth_gbps is None else float(
      bandwidth_gbps)
  latency = cluster.latency_ms if latency_ms is None else float(latency_ms)
  center_bytes = BYTES_PER_PARAM * workload.num_params
  apply_bytes = center_bytes * workload.payload_vectors
  payload_bytes = (apply_bytes if workload.payload_bytes is None else
                   float(workload.payload_bytes))
  if cluster.step_seconds is not None:
    step = cluster.step_seconds
  else:
    step = (workload.flops_per_step / cluster.flops_per_second +
            workload.update_bytes() / cluster.update_bytes_per_second)
  share = max(1.0, num_workers / cluster.cores) if cluster.cores else 1.0
  step *= share
  if server_apply_ms is not None:
    apply = server_apply_ms / 1e3
  elif cluster.server_apply_seconds is not None:
    apply = cluster.server_apply_seconds
  else:
    apply = apply_bytes / cluster.server_bytes_per_second
  record = {"bandwidth_gbps": bandwidth, "latency_ms": latency,
            "payload_bytes": payload_bytes, "center_bytes": center_bytes}
  if cluster.unit == "steps":
    record = {}
  if cluster.measured:
    record["measured"] = cluster.measured
  return TimeModel(
      step, share * message_seconds(payload_bytes, bandwidth, latency),
      share * message_seconds(center_bytes, bandwidth, latency), apply,
      num_workers=num_workers, communication_window=communication_window,
      speed_model=speed_model, seed=seed,
      pull_before_commit=workload.pull_before_commit, cluster=cluster.name,
      unit=cluster.unit, record=json.loads(json.dumps(record)))


# --- The event schedule -------------------------------------------------------


class ScheduledCommit(NamedTuple):
  """One commit as the clock sees it.

  Attributes:
    worker: the committing worker.
    window: its window index over its share (from 0).
    window_start: when the window's first step began.
    window_end: when its last step was done.
    arrival: when the commit reached the server.
    applied: when the server had applied it: the commit's time.
    barrier: a replayed round begins here (see `ReplaySchedule`).
  """
  worker: int
  window: int
  window_start: float
  window_end: float
  arrival: float
  applied: float
  barrier: bool = False


class EventSchedule:
  """The commits of n workers and one FIFO server, in the order the server applies them.

  Args:
    model: the `TimeModel`.
    num_windows: windows in each worker's share, λ local steps each; or an
      `agn_jax.shares.Windows` that gives each worker's count and each
      window's steps (Dynamic Local Updates).

  Ties (commits that arrive at the same time) go by worker index. Every
  worker starts at time 0, or when the replayed run's did
  (`TimeModel.start_seconds`).

  Example:
    >>> model = TimeModel(1.0, 0.0, 0.0, 0.0, num_workers=3,
    ...                   communication_window=2)
    >>> [c.worker for c in EventSchedule(model, num_windows=2).drain()]
    [0, 1, 2, 0, 1, 2]
  """

  def __init__(self, model: TimeModel, num_windows, tickets=None):
    self.model = model
    n = model.num_workers
    self.windows = _windows(num_windows, model.communication_window, n)
    # `data_assignment=stream`: no worker has a share of its own; each takes
    # the stream's next steps (an `agn_jax.shares.Tickets`) when it starts a
    # window, its first at the start and each next one with the center its
    # commit's reply carries, so a fast worker takes more.
    self.tickets = tickets
    self._assigned: List[List[Tuple[int, int]]] = [[] for _ in range(n)]
    if tickets is not None:
      for k in range(n):
        self._give(k)
    self._ready = [model.start_seconds(k) for k in range(n)]
    self._next_window = [0] * n
    self._server_free = 0.0
    self._build_heap()

  def _give(self, worker: int) -> None:
    ticket = self.tickets.take(self.windows.local_updates[worker])
    if ticket is not None:
      self._assigned[worker].append(ticket)

  def window_count(self, worker: int) -> int:
    """Windows of `worker`: its share's, or on a stream the tickets it took so far."""
    if self.tickets is None:
      return self.windows.count(worker)
    return len(self._assigned[worker])

  def window_steps(self, worker: int, window: int) -> int:
    """Local steps of `worker`'s window `window` (from 0)."""
    if self.tickets is None:
      return self.windows.steps(worker, window)
    return self._assigned[worker][window][1]

  def steps_before(self, worker: int, window: int) -> int:
    """Local steps of `worker`'s first `window` windows."""
    if self.tickets is None:
      return self.windows.steps_before(worker, window)
    return sum(steps for _, steps in self._assigned[worker][:window])

  def ticket(self, worker: int, window: int) -> Tuple[int, int]:
    """`(start_step, steps)` of the stream that `worker`'s window `window` trains on."""
    return self._assigned[worker][window]

  def _arrival(self, worker: int):
    m = self.model
    start = self._ready[worker]
    window = self._next_window[worker]
    end = start + m.window_seconds(worker, window,
                                   self.window_steps(worker, window))
    arrival = end + m.commit_seconds_of(worker) + (
        m.pull_seconds_of(worker) if m.pull_before_commit else 0.0)
    return arrival, worker, start, end

  def _build_heap(self):
    self._heap = [self._arrival(k) for k in range(self.model.num_workers)
                  if self._next_window[k] < self.window_count(k)]
    heapq.heapify(self._heap)

  def peek(self) -> Optional[ScheduledCommit]:
    """The next commit the server applies, or None once every share is done."""
    if not self._heap:
      return None
    arrival, worker, start, end = self._heap[0]
    applied = max(arrival, self._server_free) + self.model.server_apply_seconds
    return ScheduledCommit(worker, self._next_window[worker], start, end,
                           arrival, applied)

  def pop(self) -> Optional[ScheduledCommit]:
    """`peek()`, and the clock moves past that commit."""
    commit = self.peek()
    if commit is None:
      return None
    heapq.heappop(self._heap)
    k = commit.worker
    self._server_free = commit.applied
    # A pull-before-commit worker goes on once its commit is sent; the
    # others once the center their commit's reply carries has arrived.
    self._ready[k] = (commit.arrival if self.model.pull_before_commit else
                      commit.applied + self.model.pull_seconds_of(k))
    self._next_window[k] += 1
    if self.tickets is not None:
      self._give(k)
    if self._next_window[k] < self.window_count(k):
      heapq.heappush(self._heap, self._arrival(k))
    return commit

  def drain(self) -> Iterator[ScheduledCommit]:
    """Pops every remaining commit, in order."""
    while True:
      commit = self.pop()
      if commit is None:
        return
      yield commit

  def state(self) -> Dict[str, Any]:
    """The clock's position, JSON-able (`restore` takes it back)."""
    out = {"ready": list(self._ready), "next_window": list(self._next_window),
           "server_free": self._server_free}
    if self.tickets is not None:
      out["tickets"] = [[list(t) for t in mine] for mine in self._assigned]
      out["tickets_taken"] = self.tickets.taken
    return out

  def restore(self, state: Dict[str, Any]) -> None:
    """Continues from `state()`; the share (`windows`) may have grown."""
    n = self.model.num_workers
    if len(state["ready"]) != n or len(state["next_window"]) != n:
      raise ValueError(f"the schedule's state is of {len(state['ready'])} "
                       f"workers, this one has {n}")
    self._ready = [float(t) for t in state["ready"]]
    self._next_window = [int(w) for w in state["next_window"]]
    self._server_free = float(state["server_free"])
    if self.tickets is not None:
      if "tickets" not in state:
        raise ValueError("the schedule's state has no stream tickets: it is "
                         "of a run with another data assignment")
      self._assigned = [[(int(a), int(b)) for a, b in mine]
                        for mine in state["tickets"]]
      self.tickets.taken = int(state["tickets_taken"])
    self._build_heap()


class ReplaySchedule:
  """A given commit order (tests, references): times count commits.

  Args:
    order: a flat sequence of worker indices, or a sequence of rounds (each
      a sequence of distinct workers, applied in one call of the simulator).
    num_workers: n.
    num_windows: windows in each worker's share, or an
      `agn_jax.shares.Windows` (as `EventSchedule` takes it).

  The j-th commit (from 0) happens at j + 1; its window began at its
  worker's previous commit (0 for the first).

  Raises:
    ValueError: a round with a repeated worker, an unknown worker, or more
      commits of a worker than its share holds.

  Example:
    >>> s = ReplaySchedule([[0, 1], [1]], num_workers=2, num_windows=2)
    >>> [(c.worker, c.applied, c.barrier) for c in s.drain()]
    [(0, 1.0, True), (1, 2.0, False), (1, 3.0, True)]
  """

  def __init__(self, order, num_workers: int, num_windows):
    windows = _windows(num_windows, 1, num_workers)
    if isinstance(order, str):
      raise ValueError(f"commit_order must be a sequence of workers or of "
                       f"rounds, got {order!r} (the clock's orders are speed "
                       f"models: {', '.join(SPEED_MODEL_FORMS)})")
    order = list(order)
    nested = bool(order) and not isinstance(order[0], (int, np.integer))
    rounds = ([[int(k) for k in r] for r in order] if nested else
              [[int(k)] for k in order])
    counts = [0] * num_workers
    for r in rounds:
      if nested and (not r or len(set(r)) != len(r)):
        raise ValueError(f"commit_order: every round needs distinct workers, "
                         f"got {r}")
      for k in r:
        if not 0 <= k < num_workers:
          raise ValueError(f"commit_order: worker {k} is not in [0, "
                           f"{num_workers})")
        counts[k] += 1
    over = [k for k in range(num_workers) if counts[k] > windows.count(k)]
    if over:
      raise ValueError(f"commit_order: worker {over[0]} commits "
                       f"{counts[over[0]]} times, but its share holds "
                       f"{windows.count(over[0])} windows")
    self.rounds = rounds
    self.nested = nested
    self.num_windows = num_windows
    self._flat = [(k, nested and i == 0) for r in rounds
                  for i, k in enumerate(r)]
    self._position = 0
    self._last = [0.0] * num_workers
    self._windows = [0] * num_workers

  def peek(self) -> Optional[ScheduledCommit]:
    if self._position >= len(self._flat):
      return None
    k, barrier = self._flat[self._position]
    time = float(self._position + 1)
    return ScheduledCommit(k, self._windows[k], self._last[k], time, time,
                           time, barrier)

  def pop(self) -> Optional[ScheduledCommit]:
    commit = self.peek()
    if commit is not None:
      self._position += 1
      self._last[commit.worker] = commit.applied
      self._windows[commit.worker] += 1
    return commit

  drain = EventSchedule.drain

  def state(self) -> Dict[str, Any]:
    return {"position": self._position}

  def restore(self, state: Dict[str, Any]) -> None:
    target = int(state["position"])
    self.__init__([r for r in self.rounds] if self.nested else
                  [r[0] for r in self.rounds], len(self._last),
                  self.num_windows)
    while self._position < target:
      self.pop()

  def describe(self) -> Dict[str, Any]:
    return {"cluster": "replay", "unit": "commits",
            "rounds": [list(r) for r in self.rounds]}


def _windows(num_windows, communication_window: int,
             num_workers: int) -> Windows:
  """`num_windows` as `Windows`: itself, or that many windows of λ for each worker."""
  if isinstance(num_windows, Windows):
    if len(num_windows.local_updates) != num_workers:
      raise ValueError(f"windows of {len(num_windows.local_updates)} workers "
                       f"for {num_workers}")
    return num_windows
  return Windows.fixed(num_windows, communication_window, num_workers)


def staleness_of(commits: Sequence[ScheduledCommit], num_workers: int,
                 pull_before_commit: bool = False) -> List[int]:
  """Each commit's staleness: server clock at its apply − clock of the center it started from.

  What the simulator's server counts, from the order alone (every commit
  applied).

  Example:
    >>> model = TimeModel(1.0, 0.0, 0.0, 0.0, num_workers=3,
    ...                   communication_window=2)
    >>> staleness_of(list(EventSchedule(model, 3).drain()), 3)
    [0, 1, 2, 2, 2, 2, 2, 2, 2]
  """
  pulled = [0] * num_workers
  out = []
  for clock, c in enumerate(commits):
    out.append(0 if pull_before_commit else clock - pulled[c.worker])
    pulled[c.worker] = clock + 1
  return out
