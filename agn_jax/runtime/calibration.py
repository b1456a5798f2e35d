"""`--cluster=this_host`: the simulator's time model, measured on this machine and cached.

A short measurement in a child process: first a short run of the processes
backend itself (as many workers as the run would have on each core, a few
windows of the run's model, optimizer and batch on random data), whose
rows give a step's time and what a commit and a pull really cost between
processes (from a window's end to its commit's apply, and from there to the
next window's start); then, in the child placed as a processes worker (its
cores and threads, `agn_jax.runtime.placement`), the server's jitted apply
and its copy into shared memory, and the worker's jitted half-steps, in the
order a worker and the server run them. The result is an
`agn_jax.cluster.Cluster` cached under `~/.cache/agn_jax/this_host/`, keyed
by the machine, JAX and everything the numbers depend on, so a second run of
the same shapes measures nothing.

  python -m agn_jax.runtime.calibration SPEC_JSON   # the child; prints JSON
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
from typing import Any, Dict, Optional, Sequence

import numpy as np

from agn_jax import cluster as cluster_lib
from agn_jax.runtime import placement as placement_lib

DEFAULT_CACHE_DIR = os.path.join("~", ".cache", "agn_jax", "this_host")
# Fields of the run that change what a step, a commit or an apply costs.
_KEYS = ("strategy", "model", "hidden_sizes", "batch_size",
         "communication_window", "worker_optimizer", "normalization",
         "server_optimizer")
_MEASURE_SECONDS = 0.6  # Per quantity; enough for a stable median here.
_METHOD = 4  # In the cache key: a new way of measuring measures anew.


def _cpu_name() -> str:
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
      "machine": {"cpu": _cpu_name(), "cores": len(cores),
                  "jax": importlib.metadata.version("jax")},
  }


def _key(s: Dict[str, Any]) -> str:
  what = {k: v for k, v in s.items() if k not in ("cores", "learning_rate")}
  return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


def to_cluster(measured: Dict[str, Any], cores: int) -> cluster_lib.Cluster:
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
  return cluster_lib.Cluster(
      "this_host", bandwidth_gbps=bandwidth, latency_ms=latency * 1e3,
      step_seconds=float(measured["step_seconds"]),
      server_apply_seconds=float(measured["apply_seconds"]), cores=cores,
      measured=dict(measured))


def this_host(config, input_shape: Sequence[int], num_classes: int,
              cache_dir: Optional[str] = None,
              timeout: float = 600.0) -> cluster_lib.Cluster:
  """The `this_host` cluster for `config`'s workload: cached, else measured now.

  Args:
    config: the run's `TrainConfig`.
    input_shape: one example's shape.
    num_classes: of the dataset.
    cache_dir: where measurements are kept (default
      `~/.cache/agn_jax/this_host`).
    timeout: seconds the measurement may take.

  Returns:
    An `agn_jax.cluster.Cluster` named "this_host".

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
  root = os.path.dirname(os.path.dirname(os.path.dirname(
      os.path.abspath(__file__))))
  env["PYTHONPATH"] = os.pathsep.join(
      [root] + [p for p in [os.environ.get("PYTHONPATH")] if p])
  try:
    result = subprocess.run(
        [sys.executable, "-m", "agn_jax.runtime.calibration", json.dumps(s)],
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


def _processes_run(s: Dict[str, Any], lam: int, windows: int = 16,
                   warm_up: int = 2) -> Dict[str, float]:
  """A short run of the processes backend on random data: medians of its rows.

  As many workers as the run has on each core (`cores // threads`), `windows`
  windows each of `lam` steps. Each worker's first `warm_up` windows (and
  their gaps) are left out: caches and pages are still cold there (they ran
  at up to 3 times the later windows' time here).
  """
  import shutil  # pylint: disable=g-import-not-at-top
  import tempfile  # pylint: disable=g-import-not-at-top
  from agn_jax.config import TrainConfig  # pylint: disable=g-import-not-at-top
  from agn_jax.data.dataset import Dataset  # pylint: disable=g-import-not-at-top
  from agn_jax.runtime.launcher import train  # pylint: disable=g-import-not-at-top
  workers = max(1, s["machine"]["cores"] // s["threads"])
  batch = s["run"]["batch_size"]
  per_worker = windows * lam * batch + 1
  rng = np.random.default_rng(0)
  shape = tuple(s["input_shape"])
  classes = s["num_classes"]
  data = Dataset(
      rng.standard_normal((per_worker * workers,) + shape).astype(np.float32),
      rng.integers(0, classes, per_worker * workers).astype(np.int32),
      rng.standard_normal((64,) + shape).astype(np.float32),
      rng.integers(0, classes, 64).astype(np.int32), classes, shape,
      "calibration")
  workdir = tempfile.mkdtemp(prefix="agn_calibration_")
  try:
    run = dict(s["run"], learning_rate=s["learning_rate"],
               communication_window=lam, num_workers=workers,
               dataset="synthetic", epochs=1.0, backend="processes",
               eval_every_seconds=0.0, checkpoints=False,
               workdir=os.path.join(workdir, "run"))
    train(TrainConfig.from_dict(run), dataset=data)
    with open(os.path.join(workdir, "run", "metrics.jsonl")) as f:
      rows = [json.loads(line) for line in f if line.strip()]
  finally:
    shutil.rmtree(workdir, ignore_errors=True)
  commits = {}
  for row in rows:
    if row.get("event") == "commit" and row.get("window_start") is not None:
      commits.setdefault(row["worker"], []).append(row)
  window, applied, gap = [], [], []
  for mine in commits.values():
    mine.sort(key=lambda r: r["time"])
    for before, after in zip(mine[warm_up:], mine[warm_up + 1:] + [None]):
      window.append(before["window_end"] - before["window_start"])
      applied.append(before["time"] - before["window_end"])
      if after is not None:
        gap.append(after["window_start"] - before["window_end"])
  if not window or not gap:
    raise RuntimeError("the processes run made too few commits to measure")
  return {"window_seconds": float(np.median(window)),
          "end_to_applied_seconds": float(np.median(applied)),
          "gap_seconds": float(np.median(gap)), "workers": workers}


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
  from agn_jax.flat import FlatLayout  # pylint: disable=g-import-not-at-top
  from agn_jax.runtime.server import server_apply_fn  # pylint: disable=g-import-not-at-top
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
  # holds the center and a ring slot of the payload.
  num_params = layout.num_params
  vectors = len(strategy.payload)
  shared = mmap.mmap(-1, 4 * num_params * (1 + vectors))
  published = np.frombuffer(shared, np.float32, num_params)
  slot = np.frombuffer(shared, np.float32, num_params * vectors,
                       4 * num_params).reshape(vectors, num_params)
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
  del published, slot
  shared.close()
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
      "payload_bytes": 4 * num_params * vectors,
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
