"""The simulated backend's engine against independent references.

n = 1 against `optax.lookahead` run by hand; an n = 3 schedule of every
strategy against the numpy pseudo-code of `strategy_reference`; the clock's
orders (constant speeds: staleness n − 1; per-worker speeds; lognormal
speeds whose fast workers lap slow ones; a FIFO server whose queue shows in
the times); rejection; determinism and restore; sharded against unsharded in
a subprocess with 4 forced host devices.
"""


from absl.testing import absltest
from absl.testing import parameterized
import jax.numpy as jnp
import numpy as np
import optax

from agn_jax import get_strategy
from agn_jax.errors import Diverged
from agn_jax.shares import BatchSampler, shard_bounds
from agn_jax.sim.clock import TimeModel
from agn_jax.sim.simulation import Simulation

import strategy_reference as ref


def _run(sim):
  return [r for records in sim for r in records]


def _quadratic_loss(params, batch):
  """`½‖θ − b‖²` with one target `b` per mini-batch, as the reference."""
  x, _ = batch
  flat = jnp.concatenate([params["a"], params["b"]])
  return 0.5 * jnp.sum((flat - x[0])**2), {}


def _split(vec):
  return {"a": jnp.asarray(vec[:3], jnp.float32),
          "b": jnp.asarray(vec[3:], jnp.float32)}


def _flat(tree):
  return np.concatenate([np.asarray(tree["a"]), np.asarray(tree["b"])])


def _strategy(name, window=ref.WINDOW):
  """`name` with the reference's settings and local optimizer."""
  kwargs = dict(communication_window=window, learning_rate=ref.LR)
  if name in ref.ELASTIC:
    kwargs.update(rho=ref.RHO, elastic_learning_rate=ref.ELASTIC_LR)
  if name == "aeasgd":
    kwargs.update(inner=optax.adam(ref.LR))
  elif name == "eamsgd":  # Its Nesterov steps are its own.
    kwargs.update(momentum=ref.MOMENTUM)
  else:
    kwargs.update(inner=optax.sgd(ref.LR))
  return get_strategy(name, **kwargs)


def _reference_dataset(windows_per_worker=4):
  """Training data laid out so that worker k's sampler yields ref.data()[k].

  Each shard holds exactly `windows_per_worker` windows of one-example
  batches, placed where the worker's `BatchSampler` (seeded `[0, k]`, as the
  processes backend seeds it) will draw them in its first pass.
  """
  data = ref.data()[:, :windows_per_worker]
  shard = windows_per_worker * ref.WINDOW
  n = ref.NUM_WORKERS
  x = np.zeros((n * shard, ref.DIM), np.float32)
  for k in range(n):
    start, stop = shard_bounds(n * shard, n, k)
    assert stop - start == shard
    order = BatchSampler(shard, np.random.default_rng([0, k])).take(shard)
    x[start + order] = data[k].reshape(shard, ref.DIM)
  return x, np.zeros(len(x), np.int32)


def _quadratic_sim(strategy, num_workers, x, epochs=1.0, **kwargs):
  return Simulation(
      strategy, _quadratic_loss, _split(ref.initial_center()), x,
      np.zeros(len(x), np.int32), num_workers=num_workers, batch_size=1,
      epochs=epochs, seed=0, **kwargs)


def _model(strategy, n, speed_model="constant", step=1.0, commit=0.0, pull=0.0,
           apply=0.0, seed=0):
  """A time model of explicit costs for `strategy` and n workers."""
  return TimeModel(step, commit, pull, apply, num_workers=n,
                   communication_window=strategy.communication_window,
                   speed_model=speed_model, seed=seed,
                   pull_before_commit=strategy.pull_before_commit)


class ScheduleTest(parameterized.TestCase):
  """The n = 3 schedule of the strategy tests, commit by commit."""

  @parameterized.parameters("agn", "downpour", "dynsgd", "adag", "aeasgd",
                            "eamsgd")
  def test_every_strategy_matches_the_reference(self, name):
    x, _ = _reference_dataset()
    ref_centers, ref_stalenesses = ref.reference(name)
    # One commit per round, so the center can be read after every commit.
    sim = _quadratic_sim(_strategy(name), ref.NUM_WORKERS, x,
                         commit_order=[[k] for k in ref.SCHEDULE])
    centers, records = [], []
    while not sim.done:
      records += sim.run_round()
      centers.append(_flat(sim.center_tree()))
    self.assertEqual([r.meta.worker for r in records], ref.SCHEDULE)
    self.assertEqual([r.staleness for r in records], ref_stalenesses)
    self.assertEqual([r.clock for r in records],
                     list(range(1, len(ref.SCHEDULE) + 1)))
    np.testing.assert_allclose(np.stack(centers), ref_centers, rtol=2e-5,
                               atol=2e-6)
    np.testing.assert_allclose(sim.center(), ref_centers[-1], rtol=2e-5,
                               atol=2e-6)

  @parameterized.parameters("adag", "eamsgd")
  def test_rounds_of_several_commits(self, name):
    # The flat schedule is cut into rounds [0 1 2] [0] [0 2 1] [1 0 2]:
    # windows run together, commits still land in schedule order.
    x, _ = _reference_dataset()
    ref_centers, ref_stalenesses = ref.reference(name)
    sim = _quadratic_sim(_strategy(name), ref.NUM_WORKERS, x,
                         commit_order=ref.SCHEDULE, workers_per_call=3)
    rounds = list(sim)
    self.assertEqual([[r.meta.worker for r in rs] for rs in rounds],
                     [[0, 1, 2], [0], [0, 2, 1], [1, 0, 2]])
    records = [r for rs in rounds for r in rs]
    self.assertEqual([r.staleness for r in records], ref_stalenesses)
    self.assertEqual([r.window for r in records if r.meta.worker == 0],
                     [0, 1, 2, 3])
    np.testing.assert_allclose(sim.center(), ref_centers[-1], rtol=2e-5,
                               atol=2e-6)
    self.assertTrue(sim.done)
    self.assertEqual(sim.run_round(), [])

  def test_bad_replay(self):
    x, _ = _reference_dataset()
    with self.assertRaisesRegex(ValueError, "distinct"):
      _quadratic_sim(_strategy("agn"), 3, x, commit_order=[[0, 0]])
    with self.assertRaisesRegex(ValueError, "4 windows"):
      _quadratic_sim(_strategy("agn"), 3, x, commit_order=[0] * 5)
    with self.assertRaisesRegex(ValueError, "commit_order must be a "
                                "sequence.*speed models"):
      _quadratic_sim(_strategy("agn"), 3, x, commit_order="random")


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


def _worker_1_diverges_first(n=2):
  """Data (8 examples per worker) on which worker 1's first window turns NaN."""
  x = np.random.default_rng(0).normal(size=(n * 8, ref.DIM)).astype(
      np.float32)
  start, _ = shard_bounds(len(x), n, 1)
  first = BatchSampler(8, np.random.default_rng([0, 1])).take(2)
  x[start + first[0]] = np.nan
  return x


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


if __name__ == "__main__":
  absltest.main()
