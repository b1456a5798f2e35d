"""The end-to-end half of tests/unit/test_simulator.py: real processes, subprocesses or whole runs."""

import json
import os
import re
import subprocess
import sys
import textwrap

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
import optax

from agn_jax import TrainConfig, build, get_strategy
from agn_jax.config import SimulatedOptions
from agn_jax.data import load_synthetic
from agn_jax.errors import Diverged
from agn_jax.shares import BatchSampler, shard_bounds
from agn_jax.sim.clock import TimeModel
from agn_jax.sim.simulation import Simulation
import helpers
import strategy_reference as ref
from test_simulator import _quadratic_sim, _run, _strategy


REPO = str(helpers.REPO)


def _model(strategy, n, speed_model="constant", step=1.0, commit=0.0, pull=0.0,
           apply=0.0, seed=0):
  """A time model of explicit costs for `strategy` and n workers."""
  return TimeModel(step, commit, pull, apply, num_workers=n,
                   communication_window=strategy.communication_window,
                   speed_model=speed_model, seed=seed,
                   pull_before_commit=strategy.pull_before_commit)


def _worker_1_diverges_first(n=2):
  """Data (8 examples per worker) on which worker 1's first window turns NaN."""
  x = np.random.default_rng(0).normal(size=(n * 8, ref.DIM)).astype(
      np.float32)
  start, _ = shard_bounds(len(x), n, 1)
  first = BatchSampler(8, np.random.default_rng([0, 1])).take(2)
  x[start + first[0]] = np.nan
  return x


def _tiny_config(**overrides):
  settings = dict(strategy="agn", num_workers=3, communication_window=2,
                  dataset="synthetic", hidden_sizes=(8,), batch_size=4,
                  epochs=0.2, seed=0, learning_rate=1e-2)
  settings.update(overrides)
  return TrainConfig(**settings)


class OneWorkerTest(absltest.TestCase):

  def test_equals_lookahead(self):
    lam, batch, lr = 3, 4, 1e-2
    config = _tiny_config(num_workers=1, communication_window=lam,
                          batch_size=batch, epochs=0.3, learning_rate=lr)
    ds = load_synthetic(size=200, seed=0)
    sim = Simulation.from_config(config, ds)
    self.assertEqual(sim.num_windows, 4)

    # The reference: optax.lookahead on the same model, init and batches.
    model, loss_fn = build.build_model(config, ds.num_classes, ds.input_shape)
    init = build.initial_center(config, model, 32)
    tx = optax.lookahead(optax.adam(lr), sync_period=lam,
                         slow_step_size=1 / lam)
    params = optax.LookaheadParams.init_synced(
        jax.tree.map(jnp.asarray, init))
    opt_state = tx.init(params)

    @jax.jit
    def step(params, opt_state, batch):
      grads = jax.grad(lambda p: loss_fn(p, batch)[0])(params.fast)
      updates, opt_state = tx.update(grads, opt_state, params)
      return optax.apply_updates(params, updates), opt_state

    sampler = BatchSampler(len(ds.x_train), np.random.default_rng([0, 0]))
    for _ in range(sim.num_windows):
      for idx in sampler.take(lam * batch).reshape(lam, batch):
        params, opt_state = step(params, opt_state,
                                 (ds.x_train[idx], ds.y_train[idx]))
      (record,) = sim.run_round()
      self.assertEqual(record.staleness, 0)
      for a, b in zip(jax.tree.leaves(sim.center_tree()),
                      jax.tree.leaves(params.slow)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    self.assertTrue(sim.done)


class CompiledRoundTest(parameterized.TestCase):
  """The compiled round copies no stacked worker state (a performance guard)."""

  # One strategy per commit and pull code path: the window's delta and a
  # re-anchoring pull (downpour and dynsgd take agn's), adag's kept pulled
  # center, the elastic commit with eamsgd's momentum.
  @parameterized.parameters("agn", "adag", "eamsgd")
  def test_no_copy_of_the_stacked_workers(self, strategy):
    # Writing an unchanged stacked leaf back in the commit loop makes XLA
    # copy that leaf of all n workers on every commit.
    n = 3  # No other dimension of this model is 3.
    sim = Simulation.from_config(
        _tiny_config(strategy=strategy, num_workers=n, hidden_sizes=(8,)),
        load_synthetic(size=200, seed=0, dim=5))
    hlo = sim.lower_round().compile().as_text()
    stacked = re.findall(rf"= f32\[{n},[0-9,]*\]\S* copy\(", hlo)
    self.assertEqual(stacked, [])
    # The pattern's shapes are the stacked leaves' as the HLO writes them.
    self.assertRegex(hlo, rf"f32\[{n},5,8\]")


class DeterminismTest(absltest.TestCase):

  def test_same_run_twice_and_restore(self):
    ds = load_synthetic(size=600, seed=0)
    config = _tiny_config(strategy="adag", num_workers=3,
                          backend="simulated",
                          options=SimulatedOptions(speed_model="random:0.5"))
    full = Simulation.from_config(config, ds)
    full_records = _run(full)
    self.assertGreater(len(full_records), 9)
    for r in full_records:  # λ = 2 steps of batch 4 each.
      steps = r.meta.step_metrics["accuracy"]
      self.assertLen(steps, 2)
      self.assertTrue(all(4 * a == int(4 * a) for a in steps))
      self.assertAlmostEqual(np.mean(steps), r.meta.metrics["accuracy"],
                             places=6)
    orders = {tuple(r.meta.worker for r in full_records[i:i + 3])
              for i in range(0, len(full_records), 3)}
    self.assertGreater(len(orders), 1)  # Really random.

    first = Simulation.from_config(config, ds)
    records = first.run_round() + first.run_round()
    saved = first.state()
    saved["meta"] = json.loads(json.dumps(saved["meta"]))
    saved["arrays"] = jax.tree.leaves(saved["arrays"])  # As a checkpoint.
    second = Simulation.from_config(config, ds)
    second.restore(saved)
    records += _run(second)
    self.assertEqual(records, full_records)  # Bit for bit.
    np.testing.assert_array_equal(second.center(), full.center())
    self.assertEqual(second.state()["meta"], full.state()["meta"])
    loss, metrics = second.evaluate(ds.x_test, ds.y_test)
    self.assertTrue(np.isfinite(loss) and 0 <= metrics["accuracy"] <= 1)

    with self.assertRaisesRegex(ValueError, "speed_model random:0.5"):
      Simulation.from_config(_tiny_config(strategy="adag"), ds).restore(saved)


_SHARDED = textwrap.dedent("""
    import json
    import jax
    import numpy as np
    from jax.sharding import Mesh
    from agn_jax.config import SimulatedOptions, TrainConfig
    from agn_jax.data import load_synthetic
    from agn_jax.sim.engine import default_mesh
    from agn_jax.sim.simulation import Simulation

    ds = load_synthetic(size=600, seed=0)
    out = {"devices": jax.local_device_count()}
    for name, n, speeds, k in (("adag", 8, "random:0.5", 2),
                               ("aeasgd", 4, "lognormal:0.5", None)):
      config = TrainConfig(strategy=name, num_workers=n,
                           communication_window=2, hidden_sizes=(8,),
                           batch_size=4, epochs=0.3, seed=0,
                           backend="simulated", options=SimulatedOptions(
                               speed_model=speeds, workers_per_call=k))
      runs = []
      for mesh in (None, Mesh(np.array(jax.devices()[:1]), ("workers",))):
        sim = Simulation.from_config(config, ds, mesh=mesh)
        records = [[r.meta.worker, r.window, r.clock, r.staleness,
                    r.meta.loss, r.meta.metrics["accuracy"], r.rejected,
                    r.simulated_time, r.round, r.window_round]
                   for rs in sim for r in rs]
        loss, metrics = sim.evaluate(ds.x_test, ds.y_test)
        runs.append({"info": sim.info, "records": records,
                     "center": sim.center().tolist(),
                     "evaluation": [loss, metrics["accuracy"]]})
      out[name] = runs
    out["mesh_sizes"] = {n: default_mesh(n).size for n in (4, 6, 10, 7)}
    print(json.dumps(out))
""")


class ShardedTest(absltest.TestCase):

  def test_sharded_equals_unsharded(self):
    xla_flags = os.environ.get("XLA_FLAGS", "")  # The session's, kept.
    env = dict(os.environ, PYTHONPATH=REPO, XLA_FLAGS=(
        f"{xla_flags} --xla_force_host_platform_device_count=4").strip())
    result = subprocess.run([sys.executable, "-c", _SHARDED], env=env,
                            capture_output=True, text=True, timeout=300,
                            cwd=REPO)
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    out = json.loads(result.stdout.strip().splitlines()[-1])
    self.assertEqual(out["devices"], 4)
    for name in ("adag", "aeasgd"):
      sharded, single = out[name]
      self.assertEqual(sharded["info"]["num_devices"], 4, name)
      self.assertEqual(single["info"]["num_devices"], 1, name)
      self.assertNotEmpty(sharded["records"])
      for a, b in zip(sharded["records"], single["records"]):
        self.assertEqual(a[:4], b[:4])  # worker, window, clock, staleness
        np.testing.assert_allclose(a[4:6], b[4:6], rtol=1e-5)
        self.assertEqual(a[6:], b[6:])
      self.assertLen(sharded["records"], len(single["records"]))
      np.testing.assert_allclose(sharded["center"], single["center"],
                                 rtol=1e-5, atol=1e-6)
      np.testing.assert_allclose(sharded["evaluation"], single["evaluation"],
                                 rtol=1e-5)
    # The most devices that divide n: nobody is padded.
    self.assertEqual(out["mesh_sizes"], {"4": 4, "6": 3, "10": 2, "7": 1})


class CommitOrderTest(parameterized.TestCase):

  @parameterized.parameters(2, 5, 10)
  def test_round_robin_staleness(self, n):
    x = np.random.default_rng(0).normal(size=(n * 6, ref.DIM)).astype(
        np.float32)
    sim = _quadratic_sim(_strategy("agn", window=2), n, x)
    records = _run(sim)
    self.assertLen(records, 3 * n)
    self.assertEqual([r.meta.worker for r in records], list(range(n)) * 3)
    self.assertEqual([r.staleness for r in records[:n]], list(range(n)))
    self.assertEqual({r.staleness for r in records[n:]}, {n - 1})
    # The step counter: every worker's window of λ = 2 steps ends at 2, 4,
    # 6, and messages and the server take no time.
    times = np.repeat([2.0, 4.0, 6.0], n)
    np.testing.assert_allclose([r.simulated_time for r in records], times)
    np.testing.assert_allclose([r.meta.time for r in records], times)
    np.testing.assert_allclose([r.meta.window_start for r in records], times - 2)
    # The quadratic loss has no metrics: none, and no step values.
    self.assertEqual({(tuple(r.meta.metrics), tuple(r.meta.step_metrics))
                      for r in records}, {((), ())})

  def test_speeds(self):
    # Worker 0 is twice as fast as worker 1; each has 20 windows.
    x = np.random.default_rng(0).normal(size=(2 * 40, ref.DIM)).astype(
        np.float32)
    strategy = _strategy("dynsgd", window=2)
    sim = _quadratic_sim(strategy, 2, x,
                         time_model=_model(strategy, 2, "speeds:2,1"))
    records = _run(sim)
    both = [r for r in records if r.simulated_time <= 20.0]  # 0 finishes.
    self.assertEqual(sum(r.meta.worker == 0 for r in both), 20)
    self.assertEqual(sum(r.meta.worker == 1 for r in both), 10)
    self.assertLen(records, 40)
    for k, speed in ((0, 2.0), (1, 1.0)):
      times = [r.simulated_time for r in records if r.meta.worker == k]
      np.testing.assert_allclose(times, 2 * np.arange(1, 21) / speed)
      # Each window starts where the worker's previous one ended.
      starts = [r.meta.window_start for r in records if r.meta.worker == k]
      np.testing.assert_allclose(starts, 2 * np.arange(20) / speed)
    times = [r.simulated_time for r in records]
    self.assertEqual(times, sorted(times))
    self.assertEqual(sim.info["time_model"]["worker_speeds"], [2.0, 1.0])
    # Worker 1's windows wait for their commits while worker 0 commits
    # twice: each ran in the round before its commit.
    self.assertTrue(any(r.window_round < r.round for r in records
                        if r.meta.worker == 1))

  def test_lognormal_speeds_masked_and_vmapped(self):
    # A seeded spread; k = 1 (masked workers skipped) and k = n (masked
    # workers computed and discarded) give the same run.
    n = 4
    x = np.random.default_rng(1).normal(size=(n * 12, ref.DIM)).astype(
        np.float32)
    runs = []
    strategy = _strategy("adag", window=2)
    for k in (1, n):
      sim = _quadratic_sim(strategy, n, x, workers_per_call=k,
                           time_model=_model(strategy, n, "lognormal:0.5"))
      records = _run(sim)
      runs.append((records, sim.center()))
    speeds = sim.info["time_model"]["worker_speeds"]
    self.assertLen(set(speeds), n)
    (r1, c1), (r2, c2) = runs
    self.assertEqual([r.meta.worker for r in r1], [r.meta.worker for r in r2])
    self.assertEqual([r.staleness for r in r1], [r.staleness for r in r2])
    np.testing.assert_allclose(c1, c2, rtol=1e-6, atol=1e-7)
    self.assertGreater(len({r.round for r in r1}), 6)  # Some rounds masked.
    fastest = int(np.argmax(speeds))
    self.assertEqual(r1[0].meta.worker, fastest)


class ClockTest(absltest.TestCase):
  """The time model's schedule drives the numerics (agn_jax.sim.schedule)."""

  def test_round_robin_through_a_fifo_server(self):
    # Constant speeds, a window of λ = 2 steps of 0.5 s, a commit of 0.1 s,
    # an apply of 0.2 s, a pull of 0.3 s. All n windows end at 1.0 and
    # arrive at 1.1; the server applies them one by one: worker k at
    # 1.1 + 0.2 (k + 1). Worker k's next window starts when its center
    # arrives, 0.3 s later, so the order (and staleness n − 1) repeats.
    n = 4
    strategy = _strategy("agn", window=2)
    x = np.random.default_rng(0).normal(size=(n * 6, ref.DIM)).astype(
        np.float32)
    sim = _quadratic_sim(strategy, n, x, time_model=_model(
        strategy, n, step=0.5, commit=0.1, pull=0.3, apply=0.2))
    records = _run(sim)
    self.assertEqual([r.meta.worker for r in records], list(range(n)) * 3)
    self.assertEqual([r.staleness for r in records[n:]], [n - 1] * 2 * n)
    first = [1.1 + 0.2 * (k + 1) for k in range(n)]
    np.testing.assert_allclose([r.simulated_time for r in records[:n]], first)
    second_start = [t + 0.3 for t in first]
    np.testing.assert_allclose([r.meta.window_start for r in records[n:2 * n]],
                               second_start)
    np.testing.assert_allclose([r.meta.time for r in records[n:2 * n]],
                               [t + 1.0 for t in second_start])
    # Worker k's second commit arrives at 1.1 + 0.2 (k + 1) + 1.4; the
    # server is free by then (the queue of the first round is over at 1.9).
    np.testing.assert_allclose([r.simulated_time for r in records[n:2 * n]],
                               [t + 1.6 for t in first])
    self.assertEqual(sim.simulated_time, records[-1].simulated_time)

  def test_lognormal_workers_lap_slow_ones(self):
    # σ = 1: the fastest of 4 workers commits several times while the
    # slowest computes one window, so that window's commit is staler than
    # any round could make it (2n − 2).
    n = 4
    strategy = _strategy("agn", window=2)
    model = _model(strategy, n, "lognormal:1.0", step=0.01, commit=0.001,
                   pull=0.001, apply=0.0005)
    x = np.random.default_rng(0).normal(size=(n * 40, ref.DIM)).astype(
        np.float32)
    sim = _quadratic_sim(strategy, n, x, time_model=model)
    records = _run(sim)
    self.assertLen(records, 4 * 20)
    staleness = [r.staleness for r in records]
    self.assertGreater(max(staleness), 2 * n - 2)
    # The server's staleness is the one the order implies.
    from agn_jax.sim import schedule as schedule_lib  # pylint: disable=g-import-not-at-top
    order = [schedule_lib.ScheduledCommit(r.meta.worker, r.window, 0, 0, 0, 0)
             for r in records]
    self.assertEqual(staleness, schedule_lib.staleness_of(order, n))
    times = [r.simulated_time for r in records]
    self.assertEqual(times, sorted(times))

  def test_random_windows_lap_each_other(self):
    # Each window's own duration: the same worker commits twice in a row
    # somewhere, which no round of the step counter's orders allows.
    n = 3
    strategy = _strategy("downpour", window=2)
    x = np.random.default_rng(0).normal(size=(n * 40, ref.DIM)).astype(
        np.float32)
    sim = _quadratic_sim(strategy, n, x,
                         time_model=_model(strategy, n, "random:1.0"))
    workers = [r.meta.worker for r in _run(sim)]
    self.assertTrue(any(a == b for a, b in zip(workers, workers[1:])))


class RejectionTest(absltest.TestCase):

  def test_non_finite_commit_is_rejected_and_worker_restarts(self):
    sim = _quadratic_sim(_strategy("agn", window=2), 2,
                         _worker_1_diverges_first())
    records = sim.run_round()
    self.assertEqual([r.rejected for r in records], [False, True])
    self.assertEqual([r.clock for r in records], [1, 1])
    center = sim.center()
    self.assertTrue(np.isfinite(center).all())
    # It restarted from the center: its next commit is finite and applied.
    records = sim.run_round()
    self.assertEqual([r.rejected for r in records], [False, False])
    self.assertEqual(records[-1].clock, 3)
    self.assertEqual(sim.state()["meta"]["rejected_commits"], 1)

  def test_rejected_worker_state_is_a_fresh_start(self):
    # Adam's moments and AGN's delta are leaves the commit and pull leave
    # untouched; after a rejection they too must be a fresh start.
    strategy = get_strategy("agn", communication_window=2,
                            inner=optax.adam(0.1), learning_rate=ref.LR)
    sim = _quadratic_sim(strategy, 2, _worker_1_diverges_first())
    records = sim.run_round()
    self.assertEqual([r.rejected for r in records], [False, True])
    center = sim.center_tree()
    w = sim.state()["arrays"]["workers"]
    adam, _ = w.opt_state.inner_state
    for key in center:
      # Worker 1 (rejected): params and anchor at the center, moments zero.
      np.testing.assert_array_equal(w.params[key][1], center[key])
      np.testing.assert_array_equal(w.opt_state.anchor[key][1], center[key])
      np.testing.assert_array_equal(adam.mu[key][1], 0)
      np.testing.assert_array_equal(adam.nu[key][1], 0)
      np.testing.assert_array_equal(w.opt_state.delta[key][1], 0)
      # Worker 0 (applied) keeps its moments and its window's delta.
      self.assertTrue(np.any(adam.mu[key][0] != 0))
      self.assertTrue(np.any(w.opt_state.delta[key][0] != 0))
    self.assertEqual(int(adam.count[1]), 0)
    self.assertEqual(int(adam.count[0]), 2)
    self.assertEqual(int(w.opt_state.count[1]), 0)

  def test_diverged(self):
    x = np.full((8, ref.DIM), np.nan, np.float32)
    sim = _quadratic_sim(_strategy("aeasgd", window=2), 1, x)
    sim.run_round()
    sim.run_round()
    with self.assertRaises(Diverged) as caught:
      sim.run_round()
    self.assertTrue(caught.exception.records[0].rejected)
    self.assertEqual(sim.clock, 0)
