"""Dynamic Local Updates (`--dynamic_local_updates`) against references worked out here.

λ_k = λ s_k / max_j s_j, rounded to the nearest integer, at least 1 (Liu,
Douillard et al. 2024): the formula by hand; AGN's commit of a window of
λ_k SGD steps as their sum over λ_k in numpy; a two-worker simulation whose
commit order and windows are worked out by hand, against a float64 numpy
run of the same algorithm; the real loops' planner against measured step
times. The runs (equal speeds change nothing, bit for bit; the data budget
stays the run's; a restored simulation continues exactly; real loops on
threads give a deliberately slowed worker a shorter window) are
tests/e2e/test_dylu_e2e.py.
"""

import math

import jax.numpy as jnp
import numpy as np
import optax
import pytest
from absl import flags

from agn_jax import TrainConfig, agn, commit_delta, get_strategy, window_kernel
from agn_jax.runtime.server import WindowPlanner
from agn_jax.runtime.transports.base import WindowPlan
from agn_jax.wire import CommitMeta
from agn_jax.shares import Windows, local_updates
from agn_jax.sim.clock import TimeModel
from agn_jax.sim.simulation import Simulation
from agn_jax.transform import find_agn_state, reanchor, set_window
from experiments import flags as flags_lib

LR = 0.1


def _by_hand(lam, speeds):
  """λ_k = λ s_k / max s, rounded half up, at least 1."""
  return tuple(max(1, int(math.floor(lam * s / max(speeds) + 0.5)))
               for s in speeds)


# --- The formula and the windows ------------------------------------------------


def test_local_updates_follow_the_formula():
  assert local_updates(8, [1.0, 0.5, 0.3]) == (8, 4, 2)  # 2.4 -> 2
  assert local_updates(10, [2.0, 0.5, 0.01]) == (10, 3, 1)  # 2.5 -> 3; 0.05 -> 1
  assert local_updates(4, [3.0, 3.0]) == (4, 4)
  rng = np.random.default_rng(0)
  for _ in range(20):
    speeds = list(np.exp(rng.normal(size=5)))
    assert local_updates(16, speeds) == _by_hand(16, speeds)
  with pytest.raises(ValueError, match="speeds"):
    local_updates(4, [1.0, 0.0])


def test_windows_keep_the_share_and_end_with_what_remains():
  w = Windows(share_steps=8, local_updates=(4, 3))
  assert [w.steps(0, j) for j in range(w.count(0))] == [4, 4]
  assert [w.steps(1, j) for j in range(w.count(1))] == [3, 3, 2]
  assert w.steps(1, 3) == 0 and w.total() == 5
  assert [w.steps_before(1, j) for j in range(4)] == [0, 3, 6, 8]


# --- AGN's commit of λ_k steps ------------------------------------------------------


def test_agn_commit_of_a_short_window_is_its_sgd_updates_over_its_steps():
  lam, steps = 5, 3
  rng = np.random.default_rng(1)
  grads = rng.normal(size=(2 * steps, 4))
  tx = agn(optax.sgd(LR), communication_window=lam)
  params = jnp.zeros(4)
  state = set_window(tx.init(params), steps)
  theta, anchor = np.zeros(4), np.zeros(4)
  for i, g in enumerate(grads):
    updates, state = tx.update(jnp.asarray(g, jnp.float32), state, params)
    params = params + updates
    theta = theta - LR * g
    if (i + 1) % steps == 0:  # Its own window: the next keeps the length.
      delta = (theta - anchor) / steps  # The window's SGD updates over λ_k.
      np.testing.assert_allclose(np.asarray(commit_delta(state)), delta,
                                 rtol=1e-6, atol=1e-7)
      theta = anchor = anchor + delta
      np.testing.assert_allclose(np.asarray(params), theta, rtol=1e-6,
                                 atol=1e-7)
  # A pull restarts the window at the center and keeps its length.
  _, state = reanchor(state, params)
  assert int(find_agn_state(state).window) == steps


def test_kernel_runs_only_the_window_steps_and_takes_nothing_from_the_rest():
  loss_fn = lambda p, b: (0.5 * jnp.sum((p - b)**2), {"accuracy": p[0]})
  tx = agn(optax.sgd(LR), communication_window=4)
  kernel = window_kernel(loss_fn, tx, donate=False)
  rng = np.random.default_rng(2)
  batches = rng.normal(size=(4, 3)).astype(np.float32)
  params = jnp.zeros(3)
  result = kernel(params, set_window(tx.init(params), 2), batches, 2)
  theta = np.zeros(3)
  for b in batches[:2]:
    theta = theta - LR * (theta - b)
  delta = theta / 2
  np.testing.assert_allclose(np.asarray(result.delta), delta, rtol=1e-6)
  np.testing.assert_allclose(np.asarray(result.params), delta, rtol=1e-6)
  assert int(find_agn_state(result.opt_state).count) == 0
  assert np.isnan(np.asarray(result.metrics["loss"])[2:]).all()
  assert np.isfinite(np.asarray(result.metrics["loss"])[:2]).all()


def test_an_elastic_worker_begins_a_window_as_it_is():
  s = get_strategy("aeasgd", communication_window=4)
  state = s.init_worker(jnp.zeros(2))
  assert s.begin_window(state, 2) is state


# --- The simulated backend ------------------------------------------------------------


def _linear_loss(params, batch):
  x, y = batch
  residual = x @ params["w"] + params["b"] - y
  return 0.5 * jnp.mean(residual**2), {}


def _linear_data(n=16, d=3, seed=3):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(n, d)).astype(np.float32)
  y = (x @ np.array([1.0, -2.0, 0.5]) + 0.3).astype(np.float32)
  return x, y


def _linear_sim(speeds, lam, epochs, dynamic=True, **kwargs):
  x, y = _linear_data()
  n = len(speeds)
  strategy = get_strategy("agn", communication_window=lam,
                          inner=optax.sgd(LR))
  model = TimeModel(1.0, 0.0, 0.0, 0.0, num_workers=n,
                    communication_window=lam,
                    speed_model="speeds:" + ",".join(map(str, speeds)),
                    cluster="none", unit="steps")
  center = {"w": np.zeros(3, np.float32), "b": np.zeros((), np.float32)}
  # A mini-batch is the whole shard: each step's gradient is the shard's,
  # whatever order the sampler draws it in.
  return Simulation(
      strategy, _linear_loss, center, x, y, num_workers=n,
      batch_size=len(x) // n, epochs=epochs, time_model=model,
      dynamic_local_updates=dynamic, **kwargs)


def test_simulated_agn_with_local_updates_matches_numpy():
  # λ = 4, speeds 1 and 0.7: λ_1 = round(2.8) = 3. A share of 8 local steps
  # (epochs 8: 8 passes of a whole-shard batch) is windows 4, 4 and 3, 3, 2.
  # On the step clock they end at 4, 8 and 3/0.7, 6/0.7, 8/0.7: the server
  # takes 0, 1, 0, 1, 1.
  lam, speeds = 4, (1.0, 0.7)
  sim = _linear_sim(speeds, lam, epochs=8.0)
  assert sim.local_updates == _by_hand(lam, speeds) == (4, 3)
  records = [r for rr in sim for r in rr]
  assert [(r.meta.worker, r.meta.local_updates) for r in records] == [
      (0, 4), (1, 3), (0, 4), (1, 3), (1, 2)]
  # The clock times each window by its own steps at its worker's speed.
  np.testing.assert_allclose(
      [r.meta.time - r.meta.window_start for r in records],
      [4.0, 3 / 0.7, 4.0, 3 / 0.7, 2 / 0.7], rtol=1e-9)
  assert [r.staleness for r in records] == [0, 1, 1, 1, 0]

  x, y = (a.astype(np.float64) for a in _linear_data())
  shards = [(x[:8], y[:8]), (x[8:], y[8:])]

  def grad(theta, k):
    xs, ys = shards[k]
    residual = xs @ theta[:3] + theta[3] - ys
    return np.concatenate([xs.T @ residual, [residual.sum()]]) / len(ys)

  center = np.zeros(4)
  pulled = [center, center]  # Each worker's window starts where it pulled.
  for worker, steps in [(0, 4), (1, 3), (0, 4), (1, 3), (1, 2)]:
    theta = pulled[worker].copy()
    for _ in range(steps):
      theta -= LR * grad(theta, worker)
    # AGN: the window's SGD updates over its own steps, added to the center.
    center = center + (theta - pulled[worker]) / steps
    pulled[worker] = center
  got = np.concatenate([np.ravel(sim.center_tree()["w"]),
                        np.ravel(sim.center_tree()["b"])])
  np.testing.assert_allclose(got, center, rtol=1e-5, atol=1e-6)


# --- Real loops -----------------------------------------------------------------------


def test_the_planner_follows_the_measured_step_times():
  planner = WindowPlanner(8, [0, 0, 0])

  def meta(worker, seconds, steps):
    return CommitMeta(worker, 0, 0.0, {}, time=10.0 + seconds,
                      window_start=10.0, local_updates=steps)

  # A first window (the kernel's first call) is no measurement: λ.
  assert planner.plan(meta(1, 90.0, 8)) == WindowPlan(0, 8)
  assert planner.plan(meta(0, 90.0, 8)) == WindowPlan(0, 8)
  # Alone, a worker keeps λ; 2.5 s a step against 1 s: round(3.2) = 3.
  assert planner.plan(meta(1, 20.0, 8)) == WindowPlan(8, 16)
  assert planner.plan(meta(0, 8.0, 8)) == WindowPlan(8, 16)
  assert planner.plan(meta(1, 7.5, 3)) == WindowPlan(3, 19)
  # Worker 0 slows to 3 s a step: worker 1 (2.5 s) is the fastest now.
  assert planner.plan(meta(0, 24.0, 8)) == WindowPlan(7, 24)  # 6.67 -> 7
  assert planner.step_seconds == {0: 3.0, 1: 2.5}
  assert planner.plan(meta(2, 1.0, 8)) == WindowPlan(0, 8)  # Not measured.


# --- Settings ---------------------------------------------------------------------------


@pytest.mark.parametrize("overrides, says", [
    (dict(communication_window=1), "communication_window > 1"),
    (dict(strategy="agn_jax.strategies:agn_strategy"),
     "this package's strategies"),
])
def test_settings_that_do_not_fit_are_one_line_errors(overrides, says):
  config = TrainConfig(dynamic_local_updates=True, **overrides)
  with pytest.raises(ValueError, match=says) as error:
    config.validate()
  assert "\n" not in str(error.value)


def test_the_flag_is_a_setting():
  values = flags.FlagValues()
  flags_lib.define_train_flags(values)
  values(["train", "--dynamic_local_updates"])
  assert values.dynamic_local_updates is True
  for name in ("agn", "downpour", "dynsgd", "adag", "aeasgd", "eamsgd"):
    TrainConfig(strategy=name, dynamic_local_updates=True).validate()
