"""Soak test: many workers on synthetic data while workers are SIGKILLed at random.

Runs `--workers` workers (default 40) of a small MLP for `--seconds` of wall
time (start-up included: 40 workers take about a minute to start on 2
cores), and kills up to `--kills` random workers with SIGKILL once training
has started. Checks that:
  * commits applied + rejected == commits the workers made (acknowledged);
  * every kill was survived (one restart each);
  * the server's memory does not grow (RSS sampled every second after the
    first commit: mean of the last third <= mean of the first third + 5 %
    + 8 MiB);
  * no /dev/shm segment and no process of the run is left behind.
Prints one JSON object (figures, checks, pass) and exits 1 if a check fails.

  python scripts/soak.py [--workers 40] [--seconds 180] [--kills 10]
"""

import argparse
import json
import os
import random
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench_transport import machine  # pylint: disable=g-import-not-at-top


def _mean(values):
  return sum(values) / len(values) if values else None


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--workers", type=int, default=40)
  parser.add_argument("--seconds", type=float, default=180.0,
                      help="wall-time limit of the run (start-up included)")
  parser.add_argument("--kills", type=int, default=10)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--workdir", default=None)
  args = parser.parse_args()

  import psutil
  from agn_jax import TrainConfig
  from agn_jax.runtime import train

  workdir = args.workdir or os.path.join(tempfile.mkdtemp(prefix="agn_soak_"),
                                         "run")
  config = TrainConfig(
      strategy="agn", num_workers=args.workers, communication_window=10,
      dataset="synthetic", dataset_size=20_000, model="mlp",
      hidden_sizes=(32,), batch_size=32, epochs=10_000.0,
      learning_rate=1e-3, eval_every_seconds=5.0, max_seconds=args.seconds,
      checkpoint_every_seconds=10.0, max_worker_restarts=args.kills,
      seed=args.seed, workdir=workdir)
  rng = random.Random(args.seed)
  started = threading.Event()
  finished = threading.Event()
  kills, server_rss, worker_rss = [], [], {}
  t0 = time.time()

  def pids():
    with open(os.path.join(workdir, "pids.json")) as f:
      return json.load(f)

  def chaos():
    if not started.wait(args.seconds):
      return
    # Spread the kills over the training time, leaving the last 15 s calm.
    train_left = max(1.0, args.seconds - (time.time() - t0) - 15.0)
    times = sorted(rng.uniform(0, train_left) for _ in range(args.kills))
    begin = time.time()
    for at in times:
      if finished.wait(max(0.0, begin + at - time.time())):
        return
      pid = rng.choice(pids()["workers"])
      try:
        os.kill(pid, 9)
        kills.append({"time": round(time.time() - t0, 2), "pid": pid})
      except ProcessLookupError:
        pass

  def sample():
    while not finished.wait(1.0):
      if not started.is_set():
        continue
      try:
        p = pids()
        server_rss.append(psutil.Process(p["server"]).memory_info().rss / 2**20)
        for pid in p["workers"]:
          rss = psutil.Process(pid).memory_info().rss / 2**20
          worker_rss[pid] = max(worker_rss.get(pid, 0.0), rss)
      except (OSError, ValueError, psutil.Error):
        pass  # A worker just died or pids.json is being replaced.

  def progress(event):
    if event["event"] == "commit":
      started.set()

  threads = [threading.Thread(target=chaos, daemon=True),
             threading.Thread(target=sample, daemon=True)]
  for t in threads:
    t.start()
  try:
    summary = train(config, progress=progress)
  finally:
    finished.set()
    for t in threads:
      t.join()

  third = max(1, len(server_rss) // 3)
  first, last = _mean(server_rss[:third]), _mean(server_rss[-third:])
  p = pids()
  leftover_shm = [n for n in p["shm_segments"]
                  if os.path.exists(f"/dev/shm/{n}")]
  leftover_pids = [
      pid for pid in [p["server"], p["evaluator"], *p["workers"],
                      *p["restarted_workers"]]
      if psutil.pid_exists(pid) and
      psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
  ]
  children = [c.pid for c in psutil.Process().children(recursive=True)
              if "resource_tracker" not in " ".join(c.cmdline())]
  applied, rejected = summary["num_commits"], summary["rejected_commits"]
  checks = {
      "commits_applied_equal_acknowledged":
          applied + rejected == summary["commits_acknowledged"] ==
          sum(c or 0 for c in summary["worker_commits"]),
      "kills_survived": summary["worker_restarts"] == len(kills) > 0,
      "server_memory_flat": (first is not None and len(server_rss) >= 6 and
                             last <= first * 1.05 + 8.0),
      "no_shm_left": not leftover_shm,
      "no_process_left": not leftover_pids and not children,
  }
  result = {
      "benchmark": "soak",
      "machine": machine(),
      "workers": args.workers,
      "seconds": args.seconds,
      "wall_seconds": round(summary["wall_seconds"], 1),
      "startup_seconds_all_workers": summary["startup_seconds_all_workers"],
      "commits": applied,
      "commits_acknowledged": summary["commits_acknowledged"],
      "rejected_commits": rejected,
      "kills": len(kills),
      "kill_times": [k["time"] for k in kills],
      "worker_restarts": summary["worker_restarts"],
      "final_test_accuracy": summary["final_test_accuracy"],
      "mean_staleness": summary["mean_staleness"],
      "checkpoint_commit": summary["last_checkpoint"],
      "server_rss_mb": {
          "first_third_mean": round(first, 1) if first else None,
          "last_third_mean": round(last, 1) if last else None,
          "peak": round(max(server_rss), 1) if server_rss else None,
          "samples": len(server_rss),
      },
      "worker_rss_mb": {
          "peak": round(max(worker_rss.values()), 1) if worker_rss else None,
          "mean_of_peaks": (round(_mean(list(worker_rss.values())), 1)
                            if worker_rss else None),
      },
      "checks": checks,
      "pass": all(checks.values()),
      "workdir": workdir,
  }
  print(json.dumps(result, indent=2))
  return 0 if result["pass"] else 1


if __name__ == "__main__":
  sys.exit(main())
