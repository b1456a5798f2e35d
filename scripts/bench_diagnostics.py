"""Benchmark: the cost of `--diagnostics` in the simulator, as a ratio measured in one run.

Two `agn_jax.sim.simulation.Simulation`s of the same config, one with the
instruments (`agn_jax.instruments`, measured inside the jitted round) and
one without, built side by side and run round for round alternately, so
slow drift of the machine's load falls on both alike. The first round of
each compiles and is left out. Paper MLP (784-1000-2000-1000-10, 4.8 M
parameters: the instruments' default 1 % subsample) with AGN and Adam on
784-dim synthetic data, round robin (`--speed_model=constant`), by default.

Prints one JSON object: each side's steady seconds per round and samples/s,
and `overhead_ratio` = seconds with / seconds without (the issue's target:
at most 1.15). Measured on a busy 2-core CPU (2026-12-03), paper MLP,
n = 2, λ = 4, batch 32, 11 rounds: 1.26 with `--every 10` and 1.07 with
`--every 1000`: with such short windows the probe's forward and backward
pass (1,000 examples every 10 commits, against 128 training samples per
commit) is most of the cost; it shrinks in proportion to λ · batch: at the
paper's λ = 40, batch 128 (`--window 40 --batch 128 --rounds 7 --size
20000`, load 7–9) it was 1.030.
A quick check of the script itself:

    python scripts/bench_diagnostics.py --workers 2 --window 2 --batch 16 \
        --hidden 64 --rounds 3 --size 2000
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

DIM = 784  # MNIST-shaped inputs: the paper MLP.


def _config(args, train_size, diagnostics):
  from agn_jax.config import TrainConfig  # pylint: disable=g-import-not-at-top
  # Just over `rounds` windows per worker.
  epochs = ((args.rounds * args.window * args.batch + 0.5) * args.workers /
            train_size)
  return TrainConfig(
      strategy="agn", num_workers=args.workers,
      communication_window=args.window, dataset="synthetic", model="mlp",
      hidden_sizes=tuple(args.hidden), batch_size=args.batch, epochs=epochs,
      worker_optimizer="adam", learning_rate=1e-3, seed=0,
      backend="simulated", diagnostics=diagnostics,
      diagnostics_subsample=args.subsample, diagnostics_every=args.every)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--workers", type=int, default=4)
  parser.add_argument("--window", type=int, default=10)
  parser.add_argument("--batch", type=int, default=128)
  parser.add_argument("--hidden", type=lambda s: [int(h) for h in
                                                  s.split(",")],
                      default=[1000, 2000, 1000])
  parser.add_argument("--rounds", type=int, default=4,
                      help="rounds of each side (the first compiles)")
  parser.add_argument("--size", type=int, default=20000,
                      help="synthetic examples")
  parser.add_argument("--subsample", type=float, default=None,
                      help="--diagnostics_subsample (default: the setting's)")
  parser.add_argument("--every", type=int, default=10,
                      help="--diagnostics_every")
  args = parser.parse_args(argv)
  if args.rounds < 2:
    parser.error("--rounds must be at least 2 (the first compiles)")
  # pylint: disable=g-import-not-at-top
  import jax
  from agn_jax.data import load_synthetic
  from agn_jax.sim.simulation import Simulation
  dataset = load_synthetic(size=args.size, seed=0, dim=DIM)
  sims = {side: Simulation.from_config(
      _config(args, len(dataset.x_train), side == "on"), dataset)
          for side in ("off", "on")}
  seconds = {side: [] for side in sims}
  commits = {side: 0 for side in sims}
  for _ in range(args.rounds):
    for side, sim in sims.items():
      if sim.done:
        continue
      start = time.perf_counter()
      records = sim.run_round()
      jax.block_until_ready(sim._center)  # pylint: disable=protected-access
      seconds[side].append(time.perf_counter() - start)
      commits[side] += len(records)
  samples_round = args.workers * args.window * args.batch
  result = {"config": {k: v for k, v in vars(args).items()},
            "platform": jax.devices()[0].platform,
            "num_params": sims["off"].layout.num_params,
            "diagnostics": sims["on"].diagnostics_info}
  steady = {}
  for side in sims:
    measured = seconds[side][1:]
    steady[side] = sum(measured) / len(measured) if measured else None
    result[side] = {
        "rounds": len(seconds[side]),
        "first_round_seconds": round(seconds[side][0], 3),
        "seconds_per_round": round(steady[side], 4) if measured else None,
        "samples_per_second": (round(samples_round / steady[side], 1)
                               if measured else None),
    }
  result["overhead_ratio"] = (round(steady["on"] / steady["off"], 4)
                              if steady["on"] and steady["off"] else None)
  print(json.dumps(result))


if __name__ == "__main__":
  main()
