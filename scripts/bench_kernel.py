"""Throughput of the AGN window kernel against a plain per-step optax loop.

Run from the repository root:

    . .venv/bin/activate && python scripts/bench_kernel.py

(about 25 s on an idle 2-core CPU, ~1.5 min with `--diagnose`, which adds the
variants that split the AGN kernel's cost apart; `--reps`, `--windows_per_rep`,
`--small_reps`, `--small_windows_per_rep` trade time for precision). Other
load on the machine skews the medians: `ratio_best` (fastest repetition of
each) is the less load-sensitive companion of `ratio`.

Two variants train the same model on the same pre-stacked device batches:

* `agn`: `window_kernel(loss_fn, agn(optax.adam(1e-3), λ), donate=True)`, λ
  local steps in one dispatch (one `lax.scan`).
* `plain`: `jax.jit(step, donate_argnums=(0, 1))` with `optax.adam(1e-3)`, one
  dispatch per step (λ per window), fed batches pre-split into a list of device
  arrays so that slicing is not timed.

Both are compiled and warmed up first; then repetitions are interleaved
(agn, plain, agn, plain, ...), each ends in `block_until_ready`, and the median
over repetitions is reported. Two setups: the paper's MLP 784-1000-2000-1000-10
(4,798,010 parameters, batch 128), which is compute-bound, and a small
64-32-10 MLP on 64-dim digits-like inputs (batch 32), which is dispatch-bound.
The inputs are random (no download). One JSON object goes to stdout.

With `--diagnose` both setups also time
* `scan_plain`: the window kernel with plain `optax.adam` (scan cost, no AGN),
* `agn_select`: AGN with the commit as `jnp.where` selects on every step,
* `agn_cond`: AGN with the commit in a `lax.cond` (what `transform.agn` did
  before it moved the commit into a 0-or-1-trip `lax.while_loop`: the cond
  copies anchor and delta on every local step),
* `agn_per_step`: `transform.agn` itself with the commit decided at every
  step (its 0-or-1-trip loop), as the kernel ran every window before it placed
  a whole window's commit statically (`transform.WindowPhases`): XLA cannot
  fuse the optimizer's update into the parameters' across that loop,
so that `agn` vs `plain` can be split into scan cost and AGN cost
(`agn_over_scan_plain`: what AGN itself costs in the kernel).
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # pylint: disable=g-import-not-at-top
import jax.numpy as jnp
import numpy as np
import optax

from agn_jax import transform
import benchlib  # pylint: disable=g-import-not-at-top
from benchlib import KernelRunner  # pylint: disable=g-import-not-at-top

PAPER_PARAMS = 4_798_010


def _build_model(hidden, num_classes, input_dim, seed):
  """Returns (loss_fn, params) using agn_jax.models when it is there."""
  try:
    from agn_jax import models  # pylint: disable=g-import-not-at-top
    model = models.create_model("mlp", num_classes, (input_dim,),
                                hidden_sizes=hidden)
    params = models.init_params(model, jax.random.key(seed), input_dim)
    loss_fn = models.classification_loss(model.apply)
    source = "agn_jax.models"
  except ImportError:
    import flax.linen as nn  # pylint: disable=g-import-not-at-top

    class MLP(nn.Module):
      hidden_sizes: tuple
      num_classes: int

      @nn.compact
      def __call__(self, x):
        x = x.reshape((x.shape[0], -1))
        for w in self.hidden_sizes:
          x = nn.relu(nn.Dense(w)(x))
        return nn.Dense(self.num_classes)(x)

    model = MLP(tuple(hidden), num_classes)
    params = model.init(jax.random.key(seed), jnp.zeros((1, input_dim)))

    def loss_fn(p, batch):
      x, y = batch
      logits = model.apply(p, x)
      loss = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
      return loss, {"accuracy": jnp.mean(jnp.argmax(logits, -1) == y)}

    source = "script"
  return loss_fn, params, source


def _agn_select(inner, window):
  """AGN ("window" normalization) with `jnp.where` selects instead of lax.cond.

  A diagnostic copy of `transform.agn`: both branches are computed every step
  and selected elementwise.
  """

  init_fn = transform.agn(inner, window).init

  def update_fn(updates, state, params):
    updates, inner_state = inner.update(updates, state.inner_state, params)
    commit_now = state.count == window - 1
    sel = lambda a, b: jnp.where(commit_now, a, b)
    delta_c = jax.tree.map(lambda p, u, c: (p + u - c) / window, params,
                           updates, state.anchor)
    center = jax.tree.map(lambda c, d: c + d, state.anchor, delta_c)
    new_updates = jax.tree.map(lambda c, p, u: sel(c - p, u), center, params,
                               updates)
    anchor = jax.tree.map(sel, center, state.anchor)
    delta = jax.tree.map(sel, delta_c, state.delta)
    count = jnp.where(commit_now, 0, state.count + 1).astype(jnp.int32)
    return new_updates, transform.AGNState(inner_state, anchor, count, delta,
                                           state.window)

  return optax.GradientTransformation(init_fn, update_fn)


def _agn_cond(inner, window):
  """AGN ("window" normalization) with the commit in a `lax.cond`.

  A diagnostic copy of the first version of `transform.agn`. Inside the
  kernel's scan, `lax.cond` makes XLA copy the anchor and delta that the local
  branch passes through (and the anchor again in the scan body): three
  parameter-sized copies on every local step. `transform.agn` therefore runs
  the commit in a 0-or-1-trip `while_loop`, which updates its carry in place.
  """

  init_fn = transform.agn(inner, window).init

  def update_fn(updates, state, params):
    updates, inner_state = inner.update(updates, state.inner_state, params)
    commit_now = state.count == window - 1

    def commit(_):
      delta = jax.tree.map(lambda p, u, c: (p + u - c) / window, params,
                           updates, state.anchor)
      center = jax.tree.map(lambda c, d: c + d, state.anchor, delta)
      return jax.tree.map(lambda c, p: c - p, center, params), center, delta

    def local(_):
      return updates, state.anchor, state.delta

    updates, anchor, delta = jax.lax.cond(commit_now, commit, local, None)
    count = jnp.where(commit_now, 0, state.count + 1).astype(jnp.int32)
    return updates, transform.AGNState(inner_state, anchor, count, delta,
                                       state.window)

  return optax.GradientTransformation(init_fn, update_fn)


def _agn_per_step(inner, window):
  """`transform.agn` under another `update`, so the kernel finds no `WindowPhases`.

  The kernel then runs `agn`'s own update at every step, which decides the
  commit at run time.
  """
  tx = transform.agn(inner, window)
  return optax.GradientTransformation(
      tx.init, lambda updates, state, params=None: tx.update(updates, state,
                                                              params))


def _runners(loss_fn, params, batches, args):
  """The two compared variants, plus the diagnostic ones with --diagnose."""
  lam, adam = args.window, lambda: optax.adam(args.lr)
  runners = benchlib.kernel_and_plain(loss_fn, params, batches, lam, args.lr)
  if args.diagnose:
    runners["scan_plain"] = KernelRunner(loss_fn, adam(), params, batches)
    runners["agn_select"] = KernelRunner(loss_fn, _agn_select(adam(), lam),
                                         params, batches)
    runners["agn_cond"] = KernelRunner(loss_fn, _agn_cond(adam(), lam),
                                       params, batches)
    runners["agn_per_step"] = KernelRunner(
        loss_fn, _agn_per_step(adam(), lam), params, batches)
  return runners


def _setup(hidden, input_dim, batch, lam, seed):
  loss_fn, params, source = _build_model(hidden, 10, input_dim, seed)
  rng = np.random.default_rng(seed)
  xs = jax.device_put(rng.standard_normal((lam, batch, input_dim), np.float32))
  ys = jax.device_put(rng.integers(0, 10, (lam, batch)).astype(np.int32))
  return loss_fn, params, (xs, ys), source


def _record(out, prefix, runners, rates, best):
  """Adds `<prefix>agn/plain_samples_per_s`, `<prefix>ratio` and the diagnostics."""
  out[f"{prefix}agn_samples_per_s"] = rates["agn"]
  out[f"{prefix}plain_samples_per_s"] = rates["plain"]
  out[f"{prefix}ratio"] = rates["agn"] / rates["plain"]
  # Fastest repetition of each: less sensitive to other load on the machine.
  out[f"{prefix}ratio_best"] = best["agn"] / best["plain"]
  for name in runners:
    if name not in ("agn", "plain"):
      out[f"{prefix}{name}_samples_per_s"] = rates[name]
      out[f"{prefix}{name}_ratio"] = rates[name] / rates["plain"]
      out[f"{prefix}{name}_ratio_best"] = best[name] / best["plain"]
  if "scan_plain" in runners:
    out[f"{prefix}agn_over_scan_plain"] = rates["agn"] / rates["scan_plain"]
    out[f"{prefix}agn_per_step_over_scan_plain"] = (rates["agn_per_step"] /
                                                   rates["scan_plain"])


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--window", type=int, default=40, help="λ, local steps per window")
  p.add_argument("--batch_size", type=int, default=128)
  p.add_argument("--lr", type=float, default=1e-3)
  p.add_argument("--reps", type=int, default=5, help="paper-MLP repetitions")
  p.add_argument("--windows_per_rep", type=int, default=1)
  p.add_argument("--warmup", type=int, default=1, help="warm-up windows")
  p.add_argument("--small_batch_size", type=int, default=32)
  p.add_argument("--small_reps", type=int, default=15)
  p.add_argument("--small_windows_per_rep", type=int, default=100)
  p.add_argument("--skip_small", action="store_true")
  p.add_argument("--skip_paper", action="store_true")
  p.add_argument("--diagnose", action="store_true",
                 help="also time scan_plain, agn_select, agn_cond, agn_per_step")
  p.add_argument("--raw", action="store_true", help="include per-rep times")
  p.add_argument("--seed", type=int, default=0)
  args = p.parse_args(argv)
  lam = args.window
  out = {}

  if not args.skip_paper:
    loss_fn, params, batches, source = _setup((1000, 2000, 1000), 784,
                                              args.batch_size, lam, args.seed)
    n = sum(x.size for x in jax.tree.leaves(params))
    assert n == PAPER_PARAMS, n
    runners = _runners(loss_fn, params, batches, args)
    rates, best, times = benchlib.interleaved(
        runners, args.windows_per_rep, args.reps, args.warmup,
        lam * args.batch_size)
    out["params"] = n
    out["model_source"] = source
    _record(out, "", runners, rates, best)
    if args.raw:
      out["times_s"] = times
    del runners

  if not args.skip_small:
    loss_fn, params, batches, _ = _setup((32,), 64, args.small_batch_size, lam,
                                         args.seed)
    runners = _runners(loss_fn, params, batches, args)
    rates, best, times = benchlib.interleaved(
        runners, args.small_windows_per_rep, args.small_reps, args.warmup,
        lam * args.small_batch_size)
    out["small_params"] = sum(x.size for x in jax.tree.leaves(params))
    _record(out, "small_", runners, rates, best)
    if args.raw:
      out["small_times_s"] = times

  out["targets"] = {"ratio": 0.97, "small_ratio": 1.5}
  out["machine"] = benchlib.jax_machine()
  out["flags"] = vars(args)
  print(json.dumps(out, indent=2, sort_keys=False))


if __name__ == "__main__":
  main()
