"""The simulator's clock: what a cluster's steps, messages and server cost, and when each commit lands.

Pure numpy, no JAX and no runtime: the simulator engine asks an
`agn_jax.sim.schedule.EventSchedule` which commit the server applies next and when, and runs the
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
* `this_host`: measured on this machine (`agn_jax.runtime.backends.calibration`):
  the run's own step time with its optimizer, model and batch as a
  processes worker runs it (one thread, one core), and the shared-memory
  transport's and server's times for its payload.
* `paper_refit` (`PAPER_REFIT`): the thesis' 15 nodes (2× Xeon E5-2650 v2, one core per
  worker, one Python parameter server on the driver), fitted with
  `--speed_model=thesis_refit` (`agn_jax.sim.speeds.THESIS_REFIT_SPEED_MODEL`: each
  worker's own speed, a persistent straggler, each window's jitter) to its
  98 published run times, its staleness histogram and its workers'
  staleness traces by `scripts/fit_cluster.py` (see `PAPER_REFIT`).
* `paper` (`PAPER`): the first fit, to four of those times with
  every worker equally fast; kept so that runs on it can be told apart.

The speed models are `agn_jax.sim.speeds`; the schedule of commits these
times give, `agn_jax.sim.schedule`.

Example:
  >>> model = TimeModel(step_seconds=0.1, commit_seconds=0.05,
  ...                   pull_seconds=0.05, server_apply_seconds=0.01,
  ...                   num_workers=2, communication_window=10)
  >>> model.window_seconds(0, 0), model.commit_seconds_of(1)
  (1.0, 0.05)
"""

import json
import math
from typing import Any, Dict, List, NamedTuple, Optional, Sequence

import numpy as np

from agn_jax.sim.speeds import (SpeedModel, parse_speed_model, read_trace,
                                read_trace_starts)

CLUSTERS = ("none", "this_host", "paper_refit", "paper")
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
    pull_waits_for_server: a pull-before-commit worker (aeasgd, eamsgd)
      waits for its turn at the server before its next window, as one
      whose pull the server itself answers (dist-keras': one Python
      process serves pulls and commits); False: it goes on once its commit
      is sent.
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
  pull_waits_for_server: bool = False


NONE = Cluster("none", step_seconds=1.0, server_apply_seconds=0.0,
               unit="steps")

# `paper`: the thesis' cluster as first fitted, to four of its published
# times of AGN with Adam on the paper MLP (4,798,010 parameters, batch 128, 40 epochs of 60,000 examples:
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
# Its server is the bottleneck of every cell of the grid (20 of the thesis'
# 49 AGN times are shorter than its commits times its apply):
# experiments/results/cluster_fit_v1.{json,png}.
PAPER = Cluster("paper", bandwidth_gbps=0.305, latency_ms=1.0,
                   flops_per_second=9.25e9, update_bytes_per_second=5e9,
                   server_bytes_per_second=38.8e6)
# `paper_refit`: the thesis' cluster fitted jointly with `--speed_model=thesis_refit`
# (`agn_jax.sim.speeds.THESIS_REFIT_SPEED_MODEL`, mixed:0.1:0.1:0.05:2:0.1:1.6:
# each worker's own speed, one worker in 20 twice as slow, one in 10 1.6
# times as fast, 10 % jitter a window) by `python scripts/fit_cluster.py`,
# on the clock alone, to the thesis' 98 published times (AGN and AEASGD at
# 49 cells), its staleness histogram at n = 20, λ = 15 and its workers'
# staleness traces there (experiments/results/cluster_fit.{json,png}). A
# step of 0.1915 s for AGN with Adam, a message of 0.014 s, an apply of
# 0.3727 s: the longest the thesis' times allow (its (35, 10) AGN run
# applied 1,855 commits in 691.38 s). The server answers pulls itself
# (`pull_waits_for_server`: an AEASGD worker waits for its turn, as in
# dist-keras, one Python process on the driver). Median |leave-one-out
# residual| over the 98 times: 4.7 % (AGN 3.9 %, AEASGD 5.2 %). The server
# is busy back to back through most of each run at n >= 20: the thesis'
# rows of λ <= 25 take about as long at n = 40 as at n = 25 (0.37-0.46 s
# a commit), which only a serial resource does. The rates behind the
# three times:
# * bandwidth_gbps = 11.9: 19.19 MB × 8 / (0.0139 s − 1 ms). Above the
#   nodes' 10 Gb/s: the fit leaves a message nearly free and puts its
#   serial part (the driver's socket and unpickling) in the apply.
# * server_bytes_per_second = 51.49 MB/s: 19.19 MB / 0.3727 s (the single
#   Python server deserialises, adds and answers under one lock).
# * flops_per_second = 23.35 GFLOP/s: 3.484 GFLOP over 0.1915 s − 42 ms
#   (`PAPER`'s memory rate). A run lasts longer than a typical worker's
#   share because its slowest worker sets its end.
PAPER_REFIT = Cluster("paper_refit", bandwidth_gbps=11.902, latency_ms=1.0,
                flops_per_second=2.3346e10, update_bytes_per_second=5e9,
                server_bytes_per_second=51.494e6, pull_waits_for_server=True)


def preset(name: str) -> Cluster:
  """The `none`, `paper_refit` or `paper` cluster (`this_host` is measured, not preset).

  Raises:
    ValueError: for `this_host` or an unknown name.

  Example:
    >>> preset("paper_refit").bandwidth_gbps, preset("paper").bandwidth_gbps
    (11.902, 0.305)
  """
  if name == "none":
    return NONE
  if name == "paper_refit":
    return PAPER_REFIT
  if name == "paper":
    return PAPER
  if name == "this_host":
    raise ValueError("cluster this_host is measured on this machine "
                     "(agn_jax.runtime.backends.calibration.this_host), not a preset")
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
    pull_waits_for_server: such a worker starts its next window when the
      server has handled it, not once its commit is sent
      (`Cluster.pull_waits_for_server`).
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
               pull_before_commit: bool = False,
               pull_waits_for_server: bool = False, cluster: str = "custom",
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
    self.pull_waits_for_server = bool(pull_waits_for_server)
    self.cluster = cluster
    self.unit = unit
    self.record = dict(record or {})
    n = self.num_workers
    self._speeds = np.ones(n)
    self._chunks: Dict[tuple, np.ndarray] = {}
    self._trace = None
    self._starts = [0.0]
    self._message_scales = [1.0]
    if speed_model.kind in ("lognormal", "mixed"):
      z = np.random.default_rng([self.seed, _SALT, 2**31]).standard_normal(n)
      self._speeds = np.exp(speed_model.sigma * z)
      if speed_model.kind == "mixed":
        self._speeds[stragglers(z, speed_model.probability)] /= (
            speed_model.slowdown)
        self._speeds[stragglers(-z, speed_model.fast)] *= speed_model.speedup
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

    A worker's own speed for `lognormal`, `mixed` and `speeds` (a mixed
    window's draw is centred on it in log terms); one over its mean
    step time for `trace` (its windows after the first, as
    `commit_seconds_of` takes them); 1 for every worker of `constant`,
    `random`, `straggler` and `exponential`, whose windows are drawn alike for every
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
    """The window's own draw: z ~ N(0, 1) (random, mixed), e ~ Exp(1) (exponential) or u ~ U(0, 1) (straggler)."""
    key = (worker, window // _CHUNK)
    chunk = self._chunks.get(key)
    if chunk is None:
      rng = np.random.default_rng([self.seed, _SALT, worker, key[1]])
      kind = self.speed_model.kind
      chunk = (rng.standard_normal(_CHUNK) if kind in ("random", "mixed")
               else rng.standard_exponential(_CHUNK)
               if kind == "exponential" else rng.random(_CHUNK))
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
    if model.kind == "mixed":
      return base * math.exp(model.sigma_window * self._draw(worker, window))
    if model.kind == "exponential":
      return base * self._draw(worker, window)
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
    if self.pull_waits_for_server:
      out["pull_waits_for_server"] = True
    if self.speed_model.kind in ("lognormal", "mixed", "speeds"):
      out["worker_speeds"] = self.worker_speeds()
    if self.speed_model.kind == "trace":
      out["worker_starts"] = [self.start_seconds(k)
                              for k in range(self.num_workers)]
      out["worker_message_scales"] = [
          self._message_scales[k % len(self._message_scales)]
          for k in range(self.num_workers)]
    out.update(self.record)
    return out


def stragglers(z: np.ndarray, fraction: float) -> np.ndarray:
  """The workers that straggle: the ⌈fraction · n⌉ of the lowest draws `z` (ties by index); of `-z`, the fastest.

  Example:
    >>> stragglers(np.array([0.3, -1.0, 0.5, -0.2]), 0.3).tolist()
    [1, 3]
  """
  count = math.ceil(fraction * len(z) - 1e-9)
  return np.argsort(z, kind="stable")[:count]


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
      pull_before_commit=workload.pull_before_commit,
      pull_waits_for_server=cluster.pull_waits_for_server,
      cluster=cluster.name,
      unit=cluster.unit, record=json.loads(json.dumps(record)))
