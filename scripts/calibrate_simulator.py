"""Calibration: the simulator's clock (`--cluster=this_host`) against real processes on this machine.

For each configuration (digits with the default MLP, and the paper MLP
784-1000-2000-1000-10 on synthetic 784-dim data) and each n in `--workers`:

1. the processes backend trains (real processes, shared memory, one FIFO
   server);
2. the simulated backend trains the same configuration with
   `--cluster=this_host --speed_model=trace:RUN_DIR`: each worker's windows
   last what that processes run's did, and the commits, pulls and applies
   cost what `agn_jax.runtime.backends.calibration` measures here right after that
   run (a fresh measurement for each run, not the shared cache: on a loaded
   shared machine a digits commit and pull, window end to next window
   start, took from 1.6 to 7.8 ms on average within one hour);
3. the same with `--speed_model=constant`: the measured step time alone.

Per run it reports `projected_over_measured` (the simulated time of the last
commit ÷ the processes run's, both from the start barrier; target 0.85 to
1.15) and `staleness_tv_distance` (the total-variation distance between the
two runs' staleness histograms, ½ Σ |p − q|; target ≤ 0.2), and beside them
`gap_ms`: the mean time from a window's end to the same worker's next window
while all workers ran (`calibration.steady_state`), in the processes run and
in the time model (its commit, apply and pull), and `with_run_costs`: both
numbers again for the trace's schedule with the run's own mean commit and
pull (`with_run_costs`), which tell a miss of this_host's measurement from
one of the event model. Prints one JSON object. Minutes on a quiet 2-core
machine:

    python scripts/calibrate_simulator.py

A quicker, noisier one:

    python scripts/calibrate_simulator.py --windows 15 --paper_windows 8
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
from bench_transport import machine  # pylint: disable=g-import-not-at-top

TARGETS = {"projected_over_measured": [0.85, 1.15],
           "staleness_tv_distance": 0.2}


def _rows(workdir, kind="commit"):
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    rows = [json.loads(line) for line in f if line.strip()]
  return [r for r in rows if r.get("event") == kind]


def tv_distance(a, b) -> float:
  """½ Σ |p − q| of two samples' histograms over the integers.

  >>> tv_distance([0, 1, 1, 1], [1, 1, 2, 2])
  0.5
  """
  a, b = np.asarray(a, int), np.asarray(b, int)
  top = int(max(a.max(initial=0), b.max(initial=0))) + 1
  p = np.bincount(a, minlength=top) / max(len(a), 1)
  q = np.bincount(b, minlength=top) / max(len(b), 1)
  return float(0.5 * np.abs(p - q).sum())


def _histogram(values):
  counts = np.bincount(np.asarray(values, int))
  return {int(s): int(c) for s, c in enumerate(counts) if c}


def with_run_costs(run_dir, rows, model):
  """The trace's schedule with the processes run's own mean commit and pull.

  Every window but each worker's first gives a window's end to its apply
  (commit and apply) and to the next window's start (and the pull); the
  apply stays the model's. What is left of a miss then is the event model's
  own (the order, the server's queue), not what the messages cost at the
  moment this_host was measured.

  Returns:
    (its last commit's time ÷ the run's, the staleness TV distance).
  """
  from agn_jax.sim import clock as clock_lib  # pylint: disable=g-import-not-at-top
  from agn_jax.sim import schedule as schedule_lib  # pylint: disable=g-import-not-at-top
  mine = {}
  for r in rows:
    mine.setdefault(r["worker"], []).append(r)
  applied, gap = [], []
  for m in mine.values():
    m.sort(key=lambda r: r["time"])
    for before, after in zip(m[1:], m[2:] + [None]):
      applied.append(before["time"] - before["window_end"])
      if after is not None:
        gap.append(after["window_start"] - before["window_end"])
  if not gap:
    return None, None
  apply = model["server_apply_seconds"]
  commit = max(0.0, float(np.mean(applied)) - apply)
  n = model.get("num_workers", len(mine))
  times = clock_lib.TimeModel(
      1.0, commit, max(0.0, float(np.mean(gap)) - commit - apply), apply,
      num_workers=n, communication_window=model["communication_window"],
      speed_model=f"trace:{run_dir}")
  schedule = list(schedule_lib.EventSchedule(
      times, max(len(m) for m in mine.values())).drain())
  ratio = schedule[-1].applied / max(r["time"] for r in rows)
  return round(ratio, 3), round(tv_distance(
      [r["staleness"] for r in rows], schedule_lib.staleness_of(schedule, n)), 3)


def _setups(args):
  from agn_jax.data import load_digits, load_synthetic  # pylint: disable=g-import-not-at-top
  digits = load_digits()
  paper = load_synthetic(size=args.paper_size, seed=0, dim=784)
  return [
      ("digits", digits, dict(dataset="digits", hidden_sizes=(256, 128),
                              batch_size=16, communication_window=5),
       args.windows),
      ("paper_mlp", paper, dict(dataset="synthetic",
                                hidden_sizes=(1000, 2000, 1000),
                                batch_size=args.paper_batch,
                                communication_window=5),
       args.paper_windows),
  ]


def calibrate(name, dataset, settings, n, windows, root, cache_dir,
              this_host_cache=None):
  """One configuration at n workers: the processes run and its two simulations."""
  from agn_jax.config import ProcessesOptions, SimulatedOptions, TrainConfig  # pylint: disable=g-import-not-at-top
  from agn_jax.runtime import train
  from agn_jax.runtime.backends import calibration  # pylint: disable=g-import-not-at-top
  lam, batch = settings["communication_window"], settings["batch_size"]
  epochs = (windows * lam * batch + 0.5) * n / len(dataset.x_train)

  def config(tag, **more):
    return TrainConfig(strategy="agn", num_workers=n, epochs=epochs, seed=0,
                       eval_every_seconds=0.0, checkpoints=False,
                       workdir=os.path.join(root, f"{name}-n{n}-{tag}"),
                       **settings, **more)

  real = config("processes", backend="processes",
                options=ProcessesOptions(cache_dir=cache_dir))
  t = time.time()
  train(real, dataset=dataset)
  processes_wall = time.time() - t
  measured = _rows(real.workdir)
  result = {"num_workers": n, "windows_per_worker": windows,
            "communication_window": lam, "batch_size": batch,
            "processes_wall_seconds": round(processes_wall, 1)}
  # The simulations find this_host's numbers here; a fresh directory
  # measures them now, under the load the processes run just had.
  calibration.DEFAULT_CACHE_DIR = this_host_cache or os.path.join(
      root, "this_host", f"{name}-n{n}")
  simulations = {}
  for tag, speed_model in (("trace", f"trace:{real.workdir}"),
                           ("constant", "constant")):
    sim = config(tag, backend="simulated", options=SimulatedOptions(
        cluster="this_host", speed_model=speed_model, eval_every_rounds=0))
    summary = train(sim, dataset=dataset)
    simulations[tag] = (summary, _rows(sim.workdir))
  summary, projected = simulations["trace"]
  measured_seconds = max(r["time"] for r in measured)
  projected_seconds = max(r["sim_time"] for r in projected)
  constant_seconds = max(r["sim_time"] for r in simulations["constant"][1])
  real_staleness = [r["staleness"] for r in measured]
  sim_staleness = [r["staleness"] for r in projected]
  model = dict(summary["simulation"]["time_model"], num_workers=n,
               communication_window=lam)
  steady = calibration.steady_state(measured)
  own_ratio, own_tv = with_run_costs(real.workdir, measured, model)
  result.update(
      projected_over_measured=round(projected_seconds / measured_seconds, 3),
      staleness_tv_distance=round(tv_distance(real_staleness, sim_staleness),
                                  3),
      measured_seconds=round(measured_seconds, 3),
      projected_seconds=round(projected_seconds, 3),
      constant_projected_over_measured=round(
          constant_seconds / measured_seconds, 3),
      constant_staleness_tv_distance=round(tv_distance(
          real_staleness,
          [r["staleness"] for r in simulations["constant"][1]]), 3),
      gap_ms={"measured": (round(1e3 * steady["gap_seconds"], 3)
                           if steady["windows"] else None),
              "modeled": round(1e3 * (model["commit_seconds"] +
                                      model["server_apply_seconds"] +
                                      model["pull_seconds"]), 3),
              "windows": steady["windows"]},
      with_run_costs={"projected_over_measured": own_ratio,
                      "staleness_tv_distance": own_tv},
      commits=[len(measured), len(projected)],
      staleness_measured=_histogram(real_staleness),
      staleness_projected=_histogram(sim_staleness),
      time_model={k: v for k, v in summary["simulation"]["time_model"].items()
                  if k != "measured"})
  return result


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--workers", default="2,4",
                      help="comma-separated n values")
  parser.add_argument("--windows", type=int, default=40,
                      help="windows per worker on digits")
  parser.add_argument("--paper_windows", type=int, default=16,
                      help="windows per worker with the paper MLP")
  parser.add_argument("--paper_batch", type=int, default=32)
  parser.add_argument("--paper_size", type=int, default=12000,
                      help="synthetic examples for the paper MLP")
  parser.add_argument("--only", default="",
                      help="comma-separated configurations (digits, "
                      "paper_mlp); default both")
  parser.add_argument("--root", default=None,
                      help="where the runs go (default: a fresh temporary "
                      "directory)")
  parser.add_argument("--this_host_cache", default=None,
                      help="the this_host measurements to use, e.g. "
                      "~/.cache/agn_jax/this_host (default: measured anew "
                      "after each processes run, under ROOT/this_host)")
  args = parser.parse_args()
  workers = [int(n) for n in args.workers.split(",") if n]
  if not workers or min(workers) < 1 or args.windows < 2:
    parser.error("--workers needs integers >= 1 and --windows >= 2")
  root = args.root or tempfile.mkdtemp(prefix="agn_calibrate_")
  cache_dir = os.path.join(root, "jax_cache")
  import jax  # pylint: disable=g-import-not-at-top
  only = {s for s in args.only.split(",") if s}
  runs = {}
  for name, dataset, settings, windows in _setups(args):
    if only and name not in only:
      continue
    for n in workers:
      runs[f"{name}-n{n}"] = calibrate(name, dataset, settings, n, windows,
                                       root, cache_dir, args.this_host_cache)
  print(json.dumps({
      "benchmark": "simulator_calibration",
      "runs": runs,
      "targets": TARGETS,
      "within_targets": {
          key: (TARGETS["projected_over_measured"][0] <=
                r["projected_over_measured"] <=
                TARGETS["projected_over_measured"][1] and
                r["staleness_tv_distance"] <= TARGETS["staleness_tv_distance"])
          for key, r in runs.items()},
      "root": root,
      "machine": dict(machine(), jax=jax.__version__),
  }, indent=2))


if __name__ == "__main__":
  main()
