"""`--cluster=this_host`: the simulator's time model, measured on this machine and cached.

A short measurement in a child process: first a short run of the processes
backend itself (as many workers as the run would have on each core, a few
windows of the run's model, optimizer and batch on random data), whose
rows, while all its workers run (`steady_state`), give a step's time and
what a commit and a pull really cost between processes (from a window's
end to its commit's apply, and from there to the next window's start);
then, in the child placed as a processes worker (its
cores and threads, `agn_jax.placement`), the server's jitted apply
and its copy into shared memory, and the worker's jitted half-steps, in the
order a worker and the server run them. The result is an
`agn_jax.sim.clock.Cluster` cached under `~/.cache/agn_jax/this_host/`, keyed
by the machine, JAX and everything the numbers depend on, so a second run of
the same shapes measures nothing.

  python -m agn_jax.runtime.backends.calibration SPEC_JSON   # the child; prints JSON
"""

import hashlib
import json
import math
import mmap
import os
import platform as platform_lib
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from agn_jax import config as config_lib
from agn_jax import placement as placement_lib
from agn_jax.sim import clock as clock_lib

DEFAULT_CACHE_DIR = os.path.join("~", ".cache", "agn_jax", "this_host")
# Fields of the run that change what a step, a commit or an apply costs.
_KEYS = config_lib.fields_where("cost")
_MEASURE_SECONDS = 0.6  # Per quantity; enough for a stable median here.
_METHOD = 5  # In the cache key: a new way of measuring measures anew.
_STEADY_WINDOWS = 8  # A worker's windows, at least, while all workers run.
_MAX_WINDOWS = 2000  # A worker's windows in a longer run, at most.
_ATTEMPTS = 3  # Processes runs, at most, to find all workers running.


def cpu_name() -> str:
  """The processor's model name (from /proc/cpuinfo where there is one)."""
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform_lib.processor()


def spec(config, input_shape: Sequence[int], num_classes: int,
         cores: Optional[Sequence[int]] = None) -> Dict[str, Any]:
  """What the measurement needs and what its cache key holds.

  Example:
    >>> from agn_jax import TrainConfig
    >>> s = spec(TrainConfig(num_workers=4), (8,), 10, cores=(0, 1))
    >>> s["threads"], s["cores"], s["run"]["strategy"]
    (1, [0], 'agn')
  """
  import importlib.metadata  # pylint: disable=g-import-not-at-top
  config = config.resolved()
  cores = tuple(cores if cores is not None else
                placement_lib.available_cores())
  worker = placement_lib.worker_placement("cpu", 0, config.num_workers,
                                          cores=cores)
  return {
      "method": _METHOD,
      "run": {key: getattr(config, key) if key != "hidden_sizes" else
              list(config.hidden_sizes) for key in _KEYS},
      "learning_rate": config.learning_rate,
      "input_shape": [int(d) for d in input_shape],
      "num_classes": int(num_classes),
      "threads": max(1, len(cores) // config.num_workers),
      "cores": list(worker.cpu_affinity or cores[:1]),
      "machine": {"cpu": cpu_name(), "cores": len(cores),
                  "jax": importlib.metadata.version("jax")},
  }


def _key(s: Dict[str, Any]) -> str:
  what = {k: v for k, v in s.items() if k not in ("cores", "learning_rate")}
  return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


def to_cluster(measured: Dict[str, Any], cores: int) -> clock_lib.Cluster:
  """The `this_host` cluster of a measurement: messages as latency plus bytes over bandwidth.

  The bandwidth is the measured copy rate through shared memory; the
  latency is what a commit and a pull cost beyond their bytes at that rate
  (the jitted half-steps, the next window's batches), half each.

  Example:
    >>> c = to_cluster({"step_seconds": 0.01, "commit_seconds": 0.003,
    ...                 "pull_seconds": 0.003, "apply_seconds": 0.002,
    ...                 "copy_gbps": 8.0, "payload_bytes": 1e6,
    ...                 "center_bytes": 1e6}, cores=2)
    >>> c.name, c.bandwidth_gbps, round(c.latency_ms, 3), c.cores
    ('this_host', 8.0, 2.0, 2)
  """
  bandwidth = float(measured["copy_gbps"])
  wire = 8.0 * (measured["payload_bytes"] + measured["center_bytes"]) / (
      bandwidth * 1e9)
  latency = max(0.0, (measured["commit_seconds"] + measured["pull_seconds"] -
                      wire) / 2)
  return clock_lib.Cluster(
      "this_host", bandwidth_gbps=bandwidth, latency_ms=latency * 1e3,
      step_seconds=float(measured["step_seconds"]),
      server_apply_seconds=float(measured["apply_seconds"]), cores=cores,
      measured=dict(measured))


def this_host(config, input_shape: Sequence[int], num_classes: int,
              cache_dir: Optional[str] = None,
              timeout: float = 600.0) -> clock_lib.Cluster:
  """The `this_host` cluster for `config`'s workload: cached, else measured now.

  Args:
    config: the run's `TrainConfig`.
    input_shape: one example's shape.
    num_classes: of the dataset.
    cache_dir: where measurements are kept (default
      `~/.cache/agn_jax/this_host`).
    timeout: seconds the measurement may take.

  Returns:
    An `agn_jax.sim.clock.Cluster` named "this_host".

  Raises:
    RuntimeError: one line, if the measurement failed.
  """
  s = spec(config, input_shape, num_classes)
  cache_dir = os.path.expanduser(cache_dir or DEFAULT_CACHE_DIR)
  path = os.path.join(cache_dir, _key(s) + ".json")
  measured = None
  try:
    with open(path) as f:
      measured = json.load(f)
  except (OSError, ValueError):
    pass
  if not isinstance(measured, dict):
    measured = measure(s, timeout)
    os.makedirs(cache_dir, exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
      json.dump(dict(measured, spec=s), f, indent=2, sort_keys=True)
    os.replace(tmp, path)
  measured = {k: v for k, v in measured.items() if k != "spec"}
  return to_cluster(dict(measured, cache=path), s["machine"]["cores"])


def measure(s: Dict[str, Any], timeout: float = 600.0) -> Dict[str, Any]:
  """Runs the measurement in a child placed as a processes worker; returns its numbers."""
  env = dict(os.environ)
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
      os.path.abspath(__file__)))))
  env["PYTHONPATH"] = os.pathsep.join(
      [root] + [p for p in [os.environ.get("PYTHONPATH")] if p])
  try:
    result = subprocess.run(
        [sys.executable, "-m", "agn_jax.runtime.backends.calibration", json.dumps(s)],
        env=env, capture_output=True, text=True, timeout=timeout, check=False)
  except subprocess.TimeoutExpired:
    raise RuntimeError(f"--cluster=this_host: the measurement took more than "
                       f"{timeout:g} s") from None
  lines = result.stdout.strip().splitlines()
  if result.returncode != 0 or not lines:
    last = (result.stderr.strip().splitlines() or ["no output"])[-1]
    raise RuntimeError(f"--cluster=this_host: the measurement failed: {last}")
  return json.loads(lines[-1])


def _median_seconds(fn, seconds: float = _MEASURE_SECONDS,
                    at_least: int = 3) -> float:
  times, started = [], time.perf_counter()
  while len(times) < at_least or time.perf_counter() - started < seconds:
    t = time.perf_counter()
    fn()
    times.append(time.perf_counter() - t)
  return float(np.median(times))


def steady_state(rows: Sequence[Dict[str, Any]], warm_up: int = 2,
                 all_running: bool = True) -> Dict[str, float]:
  """What a window, a commit and a pull cost while every worker of a processes run runs.

  A worker's first window holds the first call of its window kernel (its
  tracing, 0.1 to 3.6 s on a loaded 2-core machine), so the workers that
  are through theirs early run alone meanwhile, and the late ones alone at
  the end. A lone worker's commit and pull took 2 to 3 times as long as
  while all ran (window end to next window start, medians within the same
  runs of digits: 4.1 against 1.3 ms, 4.2 against 1.4 ms), and a run of
  16 windows a worker was often lone from start to end. The time model's
  workers all run, so only windows of the phase in which all do count:
  those that start once every worker's first window has ended and are
  followed by another window of the same worker before any worker's last
  commit was applied; each worker's first `warm_up` windows never count
  (caches and pages are still cold there). Means, not medians: the time
  model adds these costs up, and they are skewed (mean ÷ median of a gap:
  1.1 to 1.6 here).

  Args:
    rows: the run's metrics.jsonl rows.
    warm_up: each worker's first windows left out.
    all_running: False counts every window after the first `warm_up` ones,
      whoever ran meanwhile.

  Returns:
    `window_seconds`, `end_to_applied_seconds` (a window's end to its
    commit's apply) and `gap_seconds` (a window's end to the next one's
    start): means over the phase; `windows`: how many it holds;
    `stagger_seconds`: from the first window's start until every worker's
    first window had ended; `cycle_seconds`: the median of a window plus
    its gap over all windows but the first ones.

  Example:
    Worker 1's first window lasts until 3.0; worker 0 runs alone until
    then (gaps of 0.7) and finishes alone after worker 1's last commit at
    5.0. Worker 0's window from 3.2 and worker 1's from 3.2, 3.7 and 4.2
    (gaps of 0.3) count:

    >>> def row(worker, start, end, applied):
    ...   return {"event": "commit", "worker": worker, "time": applied,
    ...           "window_start": start, "window_end": end}
    >>> rows = ([row(0, 0.0, 1.0, 1.1)] +
    ...         [row(0, 1.2 + i, 1.5 + i, 1.6 + i) for i in range(5)] +
    ...         [row(1, 0.0, 3.0, 3.1), row(1, 3.2, 3.4, 3.5),
    ...          row(1, 3.7, 3.9, 4.0), row(1, 4.2, 4.4, 4.5),
    ...          row(1, 4.7, 4.9, 5.0)])
    >>> s = steady_state(rows, warm_up=1)
    >>> s["windows"], round(s["gap_seconds"], 3), s["stagger_seconds"]
    (4, 0.4, 3.0)
  """
  mine: Dict[int, List[Dict[str, Any]]] = {}
  for r in rows:
    if (r.get("event") == "commit" and
        isinstance(r.get("window_start"), (int, float)) and
        isinstance(r.get("window_end"), (int, float))):
      mine.setdefault(int(r["worker"]), []).append(r)
  if not mine:
    raise RuntimeError("the processes run made no timed commits")
  for m in mine.values():
    m.sort(key=lambda r: r["time"])
  begin = max(m[0]["window_end"] for m in mine.values())
  end = min(m[-1]["time"] for m in mine.values())
  window, applied, gap, cycle = [], [], [], []
  for m in mine.values():
    for i, (before, after) in enumerate(zip(m, m[1:])):
      if i == 0:
        continue
      between = after["window_start"] - before["window_end"]
      cycle.append(before["window_end"] - before["window_start"] + between)
      if i >= warm_up and (not all_running or (
          before["window_start"] >= begin and after["window_start"] <= end)):
        window.append(before["window_end"] - before["window_start"])
        applied.append(before["time"] - before["window_end"])
        gap.append(between)
  first = min(m[0]["window_start"] for m in mine.values())
  out = {"windows": len(window), "stagger_seconds": begin - first,
         "cycle_seconds": float(np.median(cycle)) if cycle else math.nan}
  if window:
    out.update(window_seconds=float(np.mean(window)),
               end_to_applied_seconds=float(np.mean(applied)),
               gap_seconds=float(np.mean(gap)))
  return out


def _processes_run(s: Dict[str, Any], lam: int,
                   windows: int = 16) -> Dict[str, float]:
  """A run of the processes backend on random data: `steady_state` of its rows.

  As many workers as the run has on each core (`cores // threads`), each
  `windows` windows of `lam` steps at first. When the phase in which all
  run holds fewer than `_STEADY_WINDOWS` windows a worker (a small model's
  windows are milliseconds long, a worker's first window 0.1 to 3.6 s on a
  loaded machine), the run is made again, at least twice as long and long
  enough to outlast the longest stagger seen twice over, up to
  `_ATTEMPTS` runs. If the workers never all ran at once, the windows
  after each worker's first count (`all_ran` False in the result): the
  costs of lone workers, higher than those of a run's steady state.
  """
  workers = max(1, s["machine"]["cores"] // s["threads"])
  longest = 0.0
  for attempt in range(_ATTEMPTS):
    rows = _one_processes_run(s, lam, windows, workers)
    result = steady_state(rows)
    if (result["windows"] >= _STEADY_WINDOWS * workers or
        attempt + 1 == _ATTEMPTS or not result["cycle_seconds"] > 0):
      break
    longest = max(longest, result["stagger_seconds"])
    windows = int(min(_MAX_WINDOWS, max(2 * windows, 2 * _STEADY_WINDOWS +
                                        math.ceil(2 * longest /
                                                  result["cycle_seconds"]))))
  all_ran = result["windows"] > 0
  if not all_ran:
    result = steady_state(rows, all_running=False)
  if "gap_seconds" not in result:
    raise RuntimeError("the processes run made too few commits to measure")
  return dict(result, workers=workers, windows_per_worker=windows,
              runs=attempt + 1, all_ran=all_ran)


def _one_processes_run(s: Dict[str, Any], lam: int, windows: int,
                       workers: int) -> List[Dict[str, Any]]:
  import shutil  # pylint: disable=g-import-not-at-top
  import tempfile  # pylint: disable=g-import-not-at-top
  from agn_jax.config import TrainConfig  # pylint: disable=g-import-not-at-top
  from agn_jax.data.dataset import Dataset  # pylint: disable=g-import-not-at-top
  from agn_jax.runtime.launcher import train  # pylint: disable=g-import-not-at-top
  batch = s["run"]["batch_size"]
  # The workers sample their shards over and over: the data need not grow
  # with the windows.
  per_worker = min(windows, 64) * lam * batch + 1
  rng = np.random.default_rng(0)
  shape = tuple(s["input_shape"])
  classes = s["num_classes"]
  data = Dataset(
      rng.standard_normal((per_worker * workers,) + shape).astype(np.float32),
      rng.integers(0, classes, per_worker * workers).astype(np.int32),
      rng.standard_normal((64,) + shape).astype(np.float32),
      rng.integers(0, classes, 64).astype(np.int32), classes, shape,
      "calibration")
  epochs = (windows * lam * batch + 0.5) / per_worker
  workdir = tempfile.mkdtemp(prefix="agn_calibration_")
  try:
    run = dict(s["run"], learning_rate=s["learning_rate"],
               communication_window=lam, num_workers=workers,
               dataset="synthetic", epochs=epochs, backend="processes",
               eval_every_seconds=0.0, checkpoints=False,
               workdir=os.path.join(workdir, "run"))
    train(TrainConfig.from_dict(run), dataset=data)
    with open(os.path.join(workdir, "run", "metrics.jsonl")) as f:
      rows = [json.loads(line) for line in f if line.strip()]
  finally:
    shutil.rmtree(workdir, ignore_errors=True)
  return rows


def _measure_here(s: Dict[str, Any]) -> Dict[str, Any]:
  """The child's side: the processes run, then each piece alone; returns the numbers."""
  lam = min(s["run"]["communication_window"], 8)
  real = _processes_run(s, lam)
  # Now as a worker of the run is placed, before JAX starts here.
  worker = placement_lib.worker_placement(
      "cpu", 0, real["workers"], cores=tuple(range(s["machine"]["cores"])))
  os.environ.update(worker.env)
  if hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, s["cores"])
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from agn_jax import build  # pylint: disable=g-import-not-at-top
  from agn_jax.config import TrainConfig  # pylint: disable=g-import-not-at-top
  from agn_jax.runtime.transports import shm  # pylint: disable=g-import-not-at-top
  from agn_jax.runtime.server import server_apply_fn  # pylint: disable=g-import-not-at-top
  from agn_jax.wire import FlatLayout, wire_bytes, wire_of  # pylint: disable=g-import-not-at-top
  from agn_jax.runtime.worker import worker_functions  # pylint: disable=g-import-not-at-top

  run = dict(s["run"], learning_rate=s["learning_rate"])
  config = TrainConfig.from_dict(run).resolved()
  input_shape = tuple(s["input_shape"])
  strategy = build.build_strategy(config)
  model, loss_fn = build.build_model(config, s["num_classes"], input_shape)
  tree = build.initial_center(config, model, int(np.prod(input_shape)))
  layout = FlatLayout.from_tree(tree)
  fns = worker_functions(strategy, loss_fn, layout)
  batch = config.batch_size
  rng = np.random.default_rng(0)
  rows = max(lam * batch, 1024)
  x = rng.standard_normal((rows,) + input_shape).astype(np.float32)
  y = rng.integers(0, s["num_classes"], rows).astype(np.int32)
  center_host = layout.ravel_numpy(tree)
  center = jnp.asarray(center_host)
  state = fns.init(center)

  def batches():
    idx = rng.integers(0, rows, lam * batch)
    return (x[idx].reshape(lam, batch, -1), y[idx].reshape(lam, batch))

  # Shared memory as the transport maps it: one anonymous shared mapping
  # holds the center and a ring slot of the payload as it is sent (a
  # codec's arrays with --commit_compression), each array on its own lines.
  num_params = layout.num_params
  wire = wire_of(strategy, layout)
  vectors = len(wire)
  offsets = np.cumsum([0, shm.aligned(4 * num_params)] + [
      shm.aligned(n * np.dtype(d).itemsize) for n, d in wire]).tolist()
  shared = mmap.mmap(-1, offsets[-1])
  published = np.frombuffer(shared, np.float32, num_params)
  slot = [np.frombuffer(shared, np.dtype(d), n, offset)
          for (n, d), offset in zip(wire, offsets[1:])]
  published[:] = center_host
  apply = server_apply_fn(strategy, layout)
  server = {"center": jnp.asarray(center_host),
            "state": strategy.rule.init(layout.unravel(center))}

  def window():
    """The window kernel, as a worker dispatches it and waits for it."""
    nonlocal state
    data = batches()
    started = time.perf_counter()
    result = fns.kernel(state.params, state.opt_state, data)
    jax.block_until_ready(result.metrics)
    state = state._replace(params=result.params, opt_state=result.opt_state)
    return time.perf_counter() - started

  def commit():
    nonlocal state
    payload, state, accepted = fns.commit(state, center)
    payload = tuple(np.asarray(v) for v in payload)
    bool(accepted)
    for i, vector in enumerate(payload):
      np.copyto(slot[i], vector)

  def apply_one():
    c, st, accepted = apply(server["center"], server["state"],
                            tuple(slot[i] for i in range(vectors)),
                            np.int32(1))
    bool(accepted)
    np.copyto(published, np.asarray(c))
    server["center"], server["state"] = c, st

  def pull():
    nonlocal state, center
    out = np.empty(num_params, np.float32)
    np.copyto(out, published)
    center = jnp.asarray(out)
    state = fns.receive(state, center, True)
    jax.block_until_ready(state.params)
    batches()  # The next window's, gathered on the host.

  def timed(fn):
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started

  # Whole cycles in the worker's and server's order: a piece timed alone,
  # over and over, finds its buffers warm and its memory already mapped,
  # and ran at a third of its cost within a cycle here (a commit and apply
  # of the paper MLP: 23 ms alone, 70 to 230 ms in turn with a window).
  window()
  commit()
  apply_one()
  pull()
  times = {"window": [], "commit": [], "apply": [], "pull": []}
  started = time.perf_counter()
  while (len(times["window"]) < 5 or
         time.perf_counter() - started < 4 * _MEASURE_SECONDS):
    times["window"].append(window())
    times["commit"].append(timed(commit))
    times["apply"].append(timed(apply_one))
    times["pull"].append(timed(pull))
  median = {key: float(np.median(value)) for key, value in times.items()}
  scratch = np.empty(num_params, np.float32)
  copy_seconds = _median_seconds(lambda: np.copyto(published, scratch))
  # JAX on CPU may alias a NumPy argument's memory without a copy (the
  # slot's views passed to the server's apply), and such a buffer keeps the
  # mapping exported after the views are gone: the mapping is unmapped with
  # the last of them, and the measurement process ends right after.
  del published, slot
  try:
    shared.close()
  except BufferError:
    pass
  batch_seconds = _median_seconds(batches)
  # The processes run's steps and messages, with everything a commit and a
  # pull cost between processes (the ring, its polling, the other parts on
  # the same cores); the server's own share is the apply measured here.
  step_seconds = real["window_seconds"] / lam
  apply_seconds = median["apply"]
  commit_seconds = max(median["commit"],
                       real["end_to_applied_seconds"] - apply_seconds)
  pull_seconds = max(median["pull"], real["gap_seconds"] -
                     real["end_to_applied_seconds"])
  return {
      "step_seconds": max(step_seconds, 1e-7),
      "commit_seconds": commit_seconds,
      "pull_seconds": pull_seconds,
      "apply_seconds": apply_seconds,
      "batch_seconds": batch_seconds,
      "copy_gbps": 8.0 * 4 * num_params / max(copy_seconds, 1e-9) / 1e9,
      "payload_bytes": wire_bytes(wire),
      "center_bytes": 4 * num_params,
      "threads": s["threads"],
      "alone": median,
      "processes": real,
      "measured_at": time.time(),
  }


if __name__ == "__main__":
  measured = _measure_here(json.loads(sys.argv[1]))
  if not all(math.isfinite(v) for v in measured.values()
             if isinstance(v, float)):
    sys.exit("non-finite measurement")
  print(json.dumps(measured))
