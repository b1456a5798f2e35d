"""Overhead of the per-commit instruments on the server's apply of a paper-MLP commit.

Run from the repository root:

    . .venv/bin/activate && python scripts/bench_instruments.py

(about a minute on an idle 2-core CPU; `--reps`, `--commits_per_rep` trade
time for precision). Three jitted variants apply the same commit to the
paper MLP's center (784-1000-2000-1000-10, 4,798,010 parameters, the
flax model of `agn_jax.models`):

* `plain`: `θ̃ ← θ̃ + Δ`, nothing else, the center donated;
* `instruments`: the apply as one jitted call (the center kept, since the
  instruments need `θ̃_before`), then `commit_instruments().update` on
  `(Δ, θ̃_pulled, θ̃_before, θ̃_after)` as another, every instrument over all
  parameters (its state, the previous commit and center step, not donated:
  on XLA's CPU backend a donated state makes the update twice as slow);
* `instruments_subsample`: the same on a 1 % `Subsample` (`--fraction`);
* `instruments_fused`: `instruments` with the apply and the update in one
  jitted function, the center donated: slower on XLA's CPU backend, timed
  so that an integrator sees it.

Repetitions are interleaved (plain, instruments, subsample, plain, ...),
each applies `--commits_per_rep` commits and ends in `block_until_ready`;
the medians over repetitions give milliseconds per commit, and `ratio` is
instruments / plain measured side by side in this run (`ratio_best`: of the
fastest repetitions, the less load-sensitive companion). Also timed, once
per repetition: `gradient_cosine` on a probe batch of `--probe_examples`
random inputs, the instrument a caller takes every k-th commit. This is the
apply alone; a simulated round also runs λ local steps per commit, against
which the same milliseconds weigh far less. One JSON object goes to stdout.
"""

import argparse
import functools
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # pylint: disable=g-import-not-at-top
import jax.numpy as jnp
import numpy as np

from agn_jax import instruments, models
from bench_transport import machine  # pylint: disable=g-import-not-at-top


def _paper_mlp(seed):
  model = models.create_model("mlp", 10, (784,),
                              hidden_sizes=models.PAPER_HIDDEN_SIZES)
  params = models.init_params(model, jax.random.key(seed), 784)
  return model, params


def _fresh(tree):
  """A copy with buffers of its own (donation must not see shared buffers)."""
  return jax.tree.map(lambda x: jnp.array(x, copy=True), tree)


def _add(center, commit):
  return jax.tree.map(jnp.add, center, commit)


class _Plain:
  """`θ̃ ← θ̃ + Δ`, the center donated."""

  def __init__(self, center, commit, pulled):
    del pulled
    self.apply = jax.jit(_add, donate_argnums=0)
    self.center, self.commit = _fresh(center), commit

  def __call__(self, commits):
    for _ in range(commits):
      self.center = self.apply(self.center, self.commit)
    jax.block_until_ready(self.center)


class _Instrumented:
  """`θ̃ ← θ̃ + Δ`, then `CommitInstruments.update`.

  As a server loop calls them: the apply its own jitted call, which keeps
  `θ̃_before` (not donated) for the instruments' call that follows. With
  `fused`, both in one jitted function, the center donated: on XLA's CPU
  backend that is slower (the apply's add is fused into the instruments'
  reduction), so it is timed as a warning, not as the way to do it.
  """

  def __init__(self, center, commit, pulled, subsample=None, fused=False):
    tools = instruments.commit_instruments(subsample)
    self.fused = fused
    if fused:

      @functools.partial(jax.jit, donate_argnums=(0, 1))
      def apply(center, state, commit, pulled):
        after = _add(center, commit)
        state, scalars = tools.update(state, commit, pulled, center, after)
        return after, state, scalars

      self.apply = apply
    else:
      self.add = jax.jit(_add)
      # Not donated: XLA's CPU backend then writes the new state inside the
      # reduction that reads the old one, about twice as slow (measured).
      self.update = jax.jit(tools.update)
    self.center, self.commit, self.pulled = _fresh(center), commit, pulled
    self.state = tools.init(center)

  def __call__(self, commits):
    for _ in range(commits):
      if self.fused:
        self.center, self.state, scalars = self.apply(
            self.center, self.state, self.commit, self.pulled)
      else:
        after = self.add(self.center, self.commit)
        self.state, scalars = self.update(self.state, self.commit,
                                          self.pulled, self.center, after)
        self.center = after
    jax.block_until_ready((self.center, self.state, scalars))


def _timed(fn, *args):
  start = time.perf_counter()
  fn(*args)
  return time.perf_counter() - start


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--reps", type=int, default=15)
  parser.add_argument("--commits_per_rep", type=int, default=20)
  parser.add_argument("--fraction", type=float, default=0.01)
  parser.add_argument("--probe_examples", type=int, default=1000)
  parser.add_argument("--seed", type=int, default=0)
  args = parser.parse_args()

  model, center = _paper_mlp(args.seed)
  num_params = sum(x.size for x in jax.tree.leaves(center))
  keys = iter(jax.random.split(jax.random.key(args.seed + 1), 16))
  noise = lambda scale: jax.tree.map(
      lambda x: scale * jax.random.normal(next(keys), x.shape, x.dtype), center)
  commit = noise(1e-4)
  pulled = jax.tree.map(jnp.subtract, center, noise(1e-3))
  subsample = instruments.Subsample.from_seed(args.seed, num_params,
                                              args.fraction)
  variants = {
      "plain": _Plain(center, commit, pulled),
      "instruments": _Instrumented(center, commit, pulled),
      "instruments_subsample": _Instrumented(center, commit, pulled,
                                             subsample),
      "instruments_fused": _Instrumented(center, commit, pulled, fused=True),
  }
  loss_fn = models.classification_loss(model.apply)
  rng = np.random.default_rng(args.seed)
  probe = (jnp.asarray(rng.random((args.probe_examples, 784), np.float32)),
           jnp.asarray(rng.integers(0, 10, args.probe_examples), jnp.int32))
  probe_fn = jax.jit(lambda c, b, d: instruments.gradient_cosine(
      loss_fn, c, b, d, has_aux=True))

  for run in variants.values():  # Compile and warm up.
    run(2)
  jax.block_until_ready(probe_fn(center, probe, commit))
  seconds = {name: [] for name in list(variants) + ["gradient_cosine"]}
  for _ in range(args.reps):
    for name, run in variants.items():
      seconds[name].append(_timed(run, args.commits_per_rep) /
                           args.commits_per_rep)
    seconds["gradient_cosine"].append(_timed(
        lambda: jax.block_until_ready(probe_fn(center, probe, commit))))

  ms = {name: 1e3 * statistics.median(s) for name, s in seconds.items()}
  best = {name: 1e3 * min(s) for name, s in seconds.items()}
  print(json.dumps({
      "benchmark": "per-commit instruments on the server's apply",
      "machine": machine(),
      "device": str(jax.devices()[0]),
      "num_params": int(num_params),
      "subsample_size": len(subsample),
      "reps": args.reps,
      "commits_per_rep": args.commits_per_rep,
      "probe_examples": args.probe_examples,
      "ms_per_commit": {k: round(v, 4) for k, v in ms.items()
                        if k != "gradient_cosine"},
      "ms_gradient_cosine": round(ms["gradient_cosine"], 3),
      "ratio": round(ms["instruments"] / ms["plain"], 3),
      "ratio_subsample": round(ms["instruments_subsample"] / ms["plain"], 3),
      "ratio_fused": round(ms["instruments_fused"] / ms["plain"], 3),
      "ratio_best": round(best["instruments"] / best["plain"], 3),
      "ratio_subsample_best": round(
          best["instruments_subsample"] / best["plain"], 3),
  }))


if __name__ == "__main__":
  main()
