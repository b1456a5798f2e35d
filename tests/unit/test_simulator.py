"""The simulated backend's engine against independent references.

n = 1 against `optax.lookahead` run by hand; an n = 3 schedule of every
strategy against the numpy pseudo-code of `strategy_reference`; the clock's
orders (constant speeds: staleness n − 1; per-worker speeds; lognormal
speeds whose fast workers lap slow ones; a FIFO server whose queue shows in
the times); rejection; determinism and restore; sharded against unsharded in
a subprocess with 4 forced host devices. Here, the n = 3 schedule; the
others run in tests/e2e/test_simulator_e2e.py.
"""


from absl.testing import absltest
from absl.testing import parameterized
import jax.numpy as jnp
import numpy as np
import optax

from agn_jax import get_strategy
from agn_jax.shares import BatchSampler, shard_bounds
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


def _schedule_in_rounds(name):
  """`name` on the reference's flat schedule, 3 workers a call; with its centers and stalenesses."""
  x, _ = _reference_dataset()
  ref_centers, ref_stalenesses = ref.reference(name)
  sim = _quadratic_sim(_strategy(name), ref.NUM_WORKERS, x,
                       commit_order=ref.SCHEDULE, workers_per_call=3)
  return sim, ref_centers, ref_stalenesses


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
    sim, ref_centers, ref_stalenesses = _schedule_in_rounds(name)
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

  @parameterized.parameters("agn", "aeasgd")
  def test_rounds_cut_at_most_two_commits_long(self, name):
    # max_commits ends a round early; the commits, and the center after
    # each one that ends a round, are still the reference's.
    sim, ref_centers, ref_stalenesses = _schedule_in_rounds(name)
    with self.assertRaisesRegex(ValueError, "max_commits must be positive"):
      sim.run_round(max_commits=0)
    records = []
    while not sim.done:
      round_records = sim.run_round(max_commits=2)
      self.assertBetween(len(round_records), 1, 2)
      records += round_records
      self.assertEqual(sim.num_commits, len(records))
      np.testing.assert_allclose(sim.center(), ref_centers[len(records) - 1],
                                 rtol=2e-5, atol=2e-6)
    self.assertEqual([r.meta.worker for r in records], ref.SCHEDULE)
    self.assertEqual([r.staleness for r in records], ref_stalenesses)

  def test_bad_replay(self):
    x, _ = _reference_dataset()
    with self.assertRaisesRegex(ValueError, "distinct"):
      _quadratic_sim(_strategy("agn"), 3, x, commit_order=[[0, 0]])
    with self.assertRaisesRegex(ValueError, "4 windows"):
      _quadratic_sim(_strategy("agn"), 3, x, commit_order=[0] * 5)
    with self.assertRaisesRegex(ValueError, "commit_order must be a "
                                "sequence.*speed models"):
      _quadratic_sim(_strategy("agn"), 3, x, commit_order="random")


if __name__ == "__main__":
  absltest.main()
