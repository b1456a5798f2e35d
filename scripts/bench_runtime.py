"""Benchmark: aggregate training samples/s of the runtime at n workers vs single-process training.

Paper MLP (784-1000-2000-1000-10) on 784-dim synthetic data, batch 128, λ = 40,
AGN, evaluator off. Each configuration runs a fixed number of windows per
worker (about --seconds of work at the baseline's speed); throughput counts
the samples of every window overlapping the interval in which all workers
were running (pro rata), so start-up is excluded and reported separately. The baseline is the
same window kernel in one process with JAX's default threading. With
--backend=ray each configuration also runs on Ray (a private local instance,
the same windows, right after the processes run) and the JSON gives the ratio
of the two. Prints one JSON object.

  python scripts/bench_runtime.py [--workers 1,2,4,40] [--seconds 60]
      [--backend processes|ray]
"""

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import benchlib  # pylint: disable=g-import-not-at-top
from bench_transport import machine  # pylint: disable=g-import-not-at-top

HIDDEN = (1000, 2000, 1000)
BATCH = 128
WINDOW = 40
DIM = 784


def _dataset(size, seed=0):
  from agn_jax.data import load_synthetic
  return load_synthetic(size=size, seed=seed, dim=DIM)


def _config(n, workdir, epochs=1.0, backend="processes", cache_dir=None):
  from agn_jax import config
  # processes and ray both have a cache_dir (`config.ServerOptions`).
  return config.TrainConfig(
      strategy="agn", num_workers=n, communication_window=WINDOW,
      dataset="synthetic", model="mlp", hidden_sizes=HIDDEN,
      batch_size=BATCH, epochs=epochs, eval_every_seconds=0.0,
      workdir=workdir, backend=backend,
      options=config.options_class(backend)(cache_dir=cache_dir))


def steady_throughput(events, window_samples):
  """Samples/s while every worker was running, each window counted pro rata.

  The interval runs from the last worker's start to the first worker's last
  commit; a window overlapping it contributes its overlapping fraction.
  """
  ready = {e["worker"]: e["time"] for e in events
           if e["event"] == "worker_ready"}
  commits = [e for e in events if e["event"] == "commit"]
  last_commit = {}
  for e in commits:
    last_commit[e["worker"]] = e["time"]
  start, stop = max(ready.values()), min(last_commit.values())
  last = dict(ready)
  inside = 0.0
  for e in commits:
    begin, end = last[e["worker"]], e["time"]
    last[e["worker"]] = end
    overlap = max(0.0, min(end, stop) - max(begin, start))
    if end > begin:
      inside += window_samples * overlap / (end - begin)
  return inside / (stop - start), stop - start


def run_runtime(n, windows, dataset, cache_dir, backend="processes"):
  """Trains with `n` workers for exactly `windows` windows each."""
  from agn_jax.runtime import train
  workdir = tempfile.mkdtemp(prefix=f"agn_bench_{backend}_n{n}_")
  epochs = benchlib.epochs_for(windows, n, WINDOW, BATCH, len(dataset.x_train))
  t = time.time()
  # The ray backend starts (and stops) a private local Ray instance.
  summary = train(_config(n, workdir, epochs, backend, cache_dir),
                  dataset=dataset)
  wall = time.time() - t
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    events = [json.loads(line) for line in f]
  samples_s, measured = steady_throughput(events, WINDOW * BATCH)
  peak = [m for m in summary["worker_peak_rss_mb"] if m]
  uss = [m for m in summary["worker_uss_mb"] if m]
  return {
      "backend": backend,
      "num_workers": n,
      "samples_per_second": round(samples_s, 1),
      "measured_seconds": round(measured, 1),
      "windows_per_worker": windows,
      "num_commits": summary["num_commits"],
      "mean_staleness": summary["mean_staleness"],
      "startup_seconds_first_commit": summary["startup_seconds_first_commit"],
      "startup_seconds_all_workers": summary["startup_seconds_all_workers"],
      "startup": summary["startup"],
      "worker_peak_rss_mb_max": round(max(peak), 1) if peak else None,
      "worker_peak_rss_mb_mean": round(float(np.mean(peak)), 1) if peak else None,
      "worker_uss_mb_mean": round(float(np.mean(uss)), 1) if uss else None,
      "workers_uss_total_gib": round(sum(uss) / 1024, 2) if uss else None,
      "wall_seconds": round(wall, 1),
  }


def _single_process(seconds, size, out):
  """The baseline, in its own process so its threads are JAX's defaults."""
  import jax
  from agn_jax import build, kernel
  from agn_jax.shares import BatchSampler
  ds = _dataset(size)
  config = _config(1, "/tmp/unused")
  strategy = build.build_strategy(config)
  model, loss_fn = build.build_model(config, ds.num_classes, ds.input_shape)
  params = jax.tree.map(jax.numpy.asarray,
                        build.initial_center(config, model, DIM))
  opt_state = strategy.worker_transform.init(params)
  fn = kernel.window_kernel(loss_fn, strategy.worker_transform)
  sampler = BatchSampler(len(ds.x_train), np.random.default_rng(0))

  def batches():
    idx = sampler.take(WINDOW * BATCH)
    return (ds.x_train[idx].reshape(WINDOW, BATCH, -1),
            ds.y_train[idx].reshape(WINDOW, BATCH))

  result = fn(params, opt_state, batches())  # Compile.
  jax.block_until_ready(result.params)
  params, opt_state = result.params, result.opt_state
  windows, t = 0, time.perf_counter()
  while time.perf_counter() - t < seconds:
    result = fn(params, opt_state, batches())
    params, opt_state = result.params, result.opt_state
    jax.block_until_ready(params)
    windows += 1
  elapsed = time.perf_counter() - t
  import resource
  out.put({"samples_per_second": round(windows * WINDOW * BATCH / elapsed, 1),
           "windows": windows, "measured_seconds": round(elapsed, 1),
           "peak_rss_mb": round(resource.getrusage(
               resource.RUSAGE_SELF).ru_maxrss / 1024, 1)})


def run_single_process(seconds, size):
  import multiprocess
  ctx = multiprocess.get_context("spawn")
  out = ctx.Queue()
  p = ctx.Process(target=_single_process, args=(seconds, size, out))
  p.start()
  result = out.get()
  p.join()
  return result


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--workers", default="1,2,4,40")
  parser.add_argument("--seconds", type=float, default=60.0,
                      help="target training seconds per configuration (sets "
                      "the windows per worker from the baseline's speed)")
  parser.add_argument("--min_windows", type=int, default=1,
                      help="windows per worker at least")
  parser.add_argument("--size", type=int, default=20000,
                      help="synthetic examples (train + test)")
  parser.add_argument("--cache_dir", default=None,
                      help="compilation cache (default: a fresh temporary "
                      "one, so start-up includes one compile)")
  parser.add_argument("--backend", choices=("processes", "ray"),
                      default="processes",
                      help="ray: run every configuration on Ray too")
  args = parser.parse_args()
  cache_dir = args.cache_dir or tempfile.mkdtemp(prefix="agn_bench_cache_")
  dataset = _dataset(args.size)
  baseline = run_single_process(args.seconds, args.size)
  runs = []
  for n in (int(w) for w in args.workers.split(",")):
    windows = max(args.min_windows, round(
        args.seconds * baseline["samples_per_second"] / (n * WINDOW * BATCH)))
    runs.append(run_runtime(n, windows, dataset, cache_dir))
    print(json.dumps(runs[-1]), file=sys.stderr)
    if args.backend == "ray":
      runs.append(run_runtime(n, windows, dataset, cache_dir, "ray"))
      runs[-1]["ray_over_processes"] = round(
          runs[-1]["samples_per_second"] / runs[-2]["samples_per_second"], 3)
      print(json.dumps(runs[-1]), file=sys.stderr)
  for r in runs:
    r["vs_single_process"] = round(
        r["samples_per_second"] / baseline["samples_per_second"], 3)
  targets = {"n=2": ">= 0.85 x single process",
             "n=40": ">= 0.7 x single process, fits in 24 GiB"}
  if args.backend == "ray":
    targets["ray n=2"] = ">= 0.9 x processes (ray_over_processes)"
  print(json.dumps({
      "benchmark": "runtime_throughput",
      "model": "mlp 784-1000-2000-1000-10 (4,798,010 parameters)",
      "strategy": "agn", "batch_size": BATCH, "communication_window": WINDOW,
      "dataset": f"synthetic dim {DIM}, {args.size} examples",
      "single_process": baseline,
      "runtime": runs,
      "targets": targets,
      "machine": machine(),
  }, indent=2))


if __name__ == "__main__":
  main()
