"""Benchmark: the simulated backend's samples/s against one model's window kernel, a big-batch step, and the processes backend.

Paper MLP (784-1000-2000-1000-10), n = 40, λ = 40, batch 128, AGN with Adam,
on 784-dim synthetic data, by default. Measured in one run, side by side:

* `simulator`: `agn_jax.sim.simulation.Simulation`, `--rounds` windows per worker
  on the clock of `--speed_model` (constant: every worker one window per
  round, round robin; lognormal:0.5: each worker's own speed, so a round
  holds the windows whose centers exist). Steady state excludes the first
  round (it compiles); end to end counts construction, compilation and
  every round.
* `window_kernel`: one model's jitted window kernel at the same batch size,
  fed host-sampled batches as a process worker feeds it: the per-worker
  floor, since every simulated worker updates its own parameters and
  optimizer state. Timed for `--seconds / 2` before and again after the
  simulator, and averaged, so slow drift of the machine's load cancels.
* `big_batch_step`: one jitted Adam step of one model on an n × batch batch:
  the same FLOPs with a single optimizer state.
* `processes` (unless `--skip_processes`): `agn_jax.runtime.train` with n
  workers and the same windows per worker (via `bench_runtime.run_runtime`),
  steady state and end to end.
* `k_comparison` (with `--compare_k 1,40`): the simulator's steady samples/s
  for each k (`workers_per_call`), a shorter run each.

Prints one JSON object. Full run (minutes, on a quiet machine):

    python scripts/bench_simulator.py --rounds 3 --seconds 60 --compare_k 1,40
    python scripts/bench_simulator.py --rounds 3 --seconds 60 \
        --speed_model lognormal:0.5 --skip_processes

The paper's headline configuration (n = 40, λ = 40, 40 epochs over 60,000
MNIST-shaped training examples: 11 windows per worker), its time end to end
(on a GPU host, add `--platform gpu`):

    python scripts/bench_simulator.py --epochs 40 --size 75000 \
        --skip_processes --seconds 10

A quick check of the script itself:

    python scripts/bench_simulator.py --workers 4 --window 4 --batch 16 \
        --hidden 64 --rounds 2 --seconds 2 --size 4000 --skip_processes
"""

import argparse
import json
import os
import resource
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import benchlib  # pylint: disable=g-import-not-at-top
from bench_transport import machine  # pylint: disable=g-import-not-at-top

DIM = 784


def _peak_rss_mb():
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _config(args, windows, train_size, workers_per_call=None):
  from agn_jax.config import SimulatedOptions, TrainConfig  # pylint: disable=g-import-not-at-top
  epochs = benchlib.epochs_for(windows, args.workers, args.window, args.batch,
                               train_size)
  return TrainConfig(strategy="agn", num_workers=args.workers,
                     communication_window=args.window, dataset="synthetic",
                     model="mlp", hidden_sizes=tuple(args.hidden),
                     batch_size=args.batch, epochs=epochs,
                     worker_optimizer="adam", learning_rate=1e-3,
                     eval_every_seconds=0.0, seed=0, backend="simulated",
                     options=SimulatedOptions(
                         speed_model=args.speed_model, cluster=args.cluster,
                         workers_per_call=workers_per_call))


def run_simulator(args, dataset, rounds, workers_per_call=None):
  """Steady-state and end-to-end samples/s of `rounds` simulated rounds."""
  return benchlib.run_simulator(
      _config(args, rounds, len(dataset.x_train), workers_per_call), dataset)


def run_big_batch_step(args, dataset, seconds):
  """One jitted Adam step of one model on an n × batch batch."""
  import jax  # pylint: disable=g-import-not-at-top
  import optax  # pylint: disable=g-import-not-at-top
  _, loss_fn, params = benchlib.model_of(
      _config(args, 1, len(dataset.x_train)), dataset)
  tx = optax.adam(1e-3)
  opt_state = tx.init(params)
  size = args.workers * args.batch
  rng = np.random.default_rng(0)

  def step(params, opt_state, batch):
    grads, _ = jax.grad(loss_fn, has_aux=True)(params, batch)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state

  step = jax.jit(step, donate_argnums=(0, 1))

  def batch():
    idx = rng.integers(0, len(dataset.x_train), size)
    return dataset.x_train[idx], dataset.y_train[idx]

  params, opt_state = step(params, opt_state, batch())  # Compiles.
  jax.block_until_ready(params)
  steps, t = 0, time.perf_counter()
  while steps == 0 or time.perf_counter() - t < seconds:
    params, opt_state = step(params, opt_state, batch())
    jax.block_until_ready(params)
    steps += 1
  elapsed = time.perf_counter() - t
  return {"samples_per_second": round(steps * size / elapsed, 1),
          "steps": steps, "batch_size": size,
          "measured_seconds": round(elapsed, 2)}


def run_processes(args, dataset, windows, cache_dir):
  """The processes backend at n workers, `windows` windows each."""
  import bench_runtime  # pylint: disable=g-import-not-at-top
  # bench_runtime reads its model and shapes from module constants.
  bench_runtime.HIDDEN = tuple(args.hidden)
  bench_runtime.WINDOW = args.window
  bench_runtime.BATCH = args.batch
  result = bench_runtime.run_runtime(args.workers, windows, dataset, cache_dir)
  samples = result["num_commits"] * args.window * args.batch
  result["end_to_end_samples_per_second"] = round(
      samples / result["wall_seconds"], 1)
  return result


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--workers", type=int, default=40)
  parser.add_argument("--window", type=int, default=40)
  parser.add_argument("--batch", type=int, default=128)
  parser.add_argument("--hidden", default="1000,2000,1000",
                      help="MLP hidden widths, comma-separated")
  parser.add_argument("--rounds", type=int, default=3,
                      help="simulated rounds = windows per worker (the first "
                      "compiles and is left out of the steady state)")
  parser.add_argument("--seconds", type=float, default=30.0,
                      help="time of each single-model baseline (split in two "
                      "halves around the simulator)")
  parser.add_argument("--workers_per_call", type=int, default=None,
                      help="k of the main simulator run (default: the "
                      "platform's, as Simulation chooses it)")
  parser.add_argument("--epochs", type=float, default=None,
                      help="set --rounds to the whole windows per worker of "
                      "this many epochs over the training split (40: the "
                      "paper's headline run)")
  parser.add_argument("--platform", default=None, choices=["cpu", "gpu", "tpu"],
                      help="JAX platform (default: whatever JAX finds)")
  parser.add_argument("--compare_k", default="",
                      help="comma-separated k values to time the simulator "
                      "with, --compare_rounds rounds each")
  parser.add_argument("--compare_rounds", type=int, default=2)
  parser.add_argument("--skip_processes", action="store_true")
  parser.add_argument("--speed_model", default="constant",
                      help="the simulator's --speed_model (constant: round "
                      "robin; lognormal:0.5: the event-driven schedule's "
                      "target case)")
  parser.add_argument("--cluster", default="none",
                      choices=["none", "paper"],
                      help="the simulator's --cluster (the clock does not "
                      "change the numerics' cost)")
  parser.add_argument("--size", type=int, default=None,
                      help="synthetic examples, train + test (default "
                      "60,000, MNIST's size; epochs give the windows)")
  parser.add_argument("--cache_dir", default=None,
                      help="compilation cache of the processes backend "
                      "(default: a fresh temporary one)")
  args = parser.parse_args()
  args.hidden = [int(h) for h in args.hidden.split(",") if h]
  for name in ("workers", "window", "batch", "rounds", "compare_rounds"):
    if getattr(args, name) < 1:
      parser.error(f"--{name} must be >= 1")

  if args.epochs is not None and not args.epochs > 0:
    parser.error("--epochs must be > 0")
  if args.platform:
    os.environ["JAX_PLATFORMS"] = args.platform
  import jax  # pylint: disable=g-import-not-at-top
  from agn_jax.data import load_synthetic  # pylint: disable=g-import-not-at-top
  # MNIST-sized by default: the windows come from epochs over it (as in the
  # paper's 40 epochs of 60,000), so the host holds 188 MB of data, not a
  # copy sized to the whole run.
  size = args.size or 60000
  dataset = load_synthetic(size=size, seed=0, dim=DIM)
  if args.epochs is not None:
    args.rounds = int(args.epochs * len(dataset.x_train) //
                      (args.workers * args.window * args.batch))
    if args.rounds < 1:
      parser.error(f"--epochs {args.epochs} hold less than one window per "
                   f"worker")

  def measure():
    big_batch = run_big_batch_step(args, dataset, args.seconds / 2)
    rss_before = _peak_rss_mb()
    simulator = run_simulator(args, dataset, args.rounds,
                              args.workers_per_call)
    simulator["peak_rss_mb"] = round(_peak_rss_mb(), 1)
    simulator["peak_rss_mb_before"] = round(rss_before, 1)
    return big_batch, simulator

  (big_batch, simulator), window_kernel = benchlib.floor_around(
      _config(args, 1, len(dataset.x_train)), dataset, args.seconds, measure)
  k_comparison = [
      run_simulator(args, dataset, args.compare_rounds, int(k))
      for k in args.compare_k.split(",") if k
  ]
  processes = None
  if not args.skip_processes:
    cache_dir = args.cache_dir or tempfile.mkdtemp(prefix="agn_bench_cache_")
    processes = run_processes(args, dataset, args.rounds, cache_dir)

  sim_rate = simulator["samples_per_second"]
  print(json.dumps({
      "benchmark": "simulator_throughput",
      "model": f"mlp {DIM}-{'-'.join(map(str, args.hidden))}-10",
      "strategy": "agn (adam 1e-3)",
      "num_workers": args.workers,
      "communication_window": args.window,
      "speed_model": args.speed_model,
      "batch_size": args.batch,
      "dataset": f"synthetic dim {DIM}, {size} examples "
                 f"({len(dataset.x_train)} for training)",
      "epochs": (args.rounds * args.workers * args.window * args.batch /
                 len(dataset.x_train)),
      "workers_per_call": simulator["workers_per_call"],
      "simulator": simulator,
      "window_kernel": window_kernel,
      "big_batch_step": big_batch,
      "processes": processes,
      "k_comparison": k_comparison,
      "ratios": {
          "vs_window_kernel": benchlib.ratio(sim_rate,
                                     window_kernel["samples_per_second"]),
          "vs_big_batch_step": benchlib.ratio(sim_rate,
                                      big_batch["samples_per_second"]),
          "vs_processes_steady": benchlib.ratio(
              sim_rate, processes and processes["samples_per_second"]),
          "vs_processes_end_to_end": benchlib.ratio(
              simulator["end_to_end_samples_per_second"],
              processes and processes["end_to_end_samples_per_second"]),
      },
      "targets": {
          "vs_window_kernel": ">= 0.95 on CPU with constant speeds, "
                              ">= 0.85 with lognormal:0.5",
          "vs_processes_steady": ">= 1.05 (n=40, 2-core CPU)",
          "vs_processes_end_to_end": ">= 1.5 (n=40, 2-core CPU)",
          "vs_big_batch_step": "report; >= 0.8 on a GPU",
      },
      "machine": dict(machine(), jax=jax.__version__,
                      backend=jax.default_backend(),
                      devices=[str(d) for d in jax.local_devices()]),
  }, indent=2))


if __name__ == "__main__":
  main()
