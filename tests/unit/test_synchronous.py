"""Synchronous rounds (sync_data_parallel, diloco) against numpy references written here.

The quadratic is `test_simulator`'s: `½‖θ − b‖²` per one-example
mini-batch, gradient `θ − b`, worker k's s-th step's target
`strategy_reference.data()[k]` in order. The references below are the
algorithms' own formulas in numpy (float64): synchronous data-parallel SGD
and Adam, DiLoCo with Adam workers and a Nesterov outer step; the round's
time is worked out by hand from the speeds.
"""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
import optax

from agn_jax import build, get_strategy
from agn_jax.config import SimulatedOptions, TrainConfig
from agn_jax.data import load_synthetic
from agn_jax.shares import BatchSampler, Windows
from agn_jax.sim.clock import TimeModel
from agn_jax.sim.simulation import Simulation
from agn_jax.sim.synchronous import RoundSchedule

import strategy_reference as ref
from test_simulator import _flat, _quadratic_sim, _reference_dataset

N = ref.NUM_WORKERS
ADAM = dict(b1=0.9, b2=0.999, eps=1e-8)  # Kingma & Ba's, optax's defaults.


def _steps():
  """`[N, steps, DIM]`: worker k's s-th step's target, its share in order."""
  return ref.data()[:, :4].reshape(N, 4 * ref.WINDOW, ref.DIM).astype(
      np.float64)


class _Adam:
  """Adam on one vector, as Kingma & Ba write it."""

  def __init__(self, lr):
    self.lr, self.m, self.v, self.t = lr, 0.0, 0.0, 0

  def step(self, grad):
    self.t += 1
    self.m = ADAM["b1"] * self.m + (1 - ADAM["b1"]) * grad
    self.v = ADAM["b2"] * self.v + (1 - ADAM["b2"]) * grad**2
    m_hat = self.m / (1 - ADAM["b1"]**self.t)
    v_hat = self.v / (1 - ADAM["b2"]**self.t)
    return -self.lr * m_hat / (np.sqrt(v_hat) + ADAM["eps"])


def _data_parallel_reference(optimizer, lr):
  """Every step: the mean of the n workers' gradients at the center, one step of `optimizer`."""
  center, targets = ref.initial_center(), _steps()
  adam = _Adam(lr)
  centers = []
  for s in range(targets.shape[1]):
    grad = np.mean([center - targets[k, s] for k in range(N)], axis=0)
    center = center + (adam.step(grad) if optimizer == "adam" else -lr * grad)
    centers.append(center)
  return np.stack(centers)


def _diloco_reference(lr, window, outer_lr=0.7, outer_momentum=0.9):
  """Douillard et al.'s Algorithm 1: λ Adam steps per worker from the center, Nesterov on `θ̃ − mean θ_k`."""
  center, targets = ref.initial_center(), _steps()
  inner = [_Adam(lr) for _ in range(N)]  # Each worker's state, kept.
  trace = np.zeros_like(center)
  centers = []
  for r in range(targets.shape[1] // window):
    ends = []
    for k in range(N):
      theta = center.copy()
      for j in range(window):
        theta = theta + inner[k].step(theta - targets[k, r * window + j])
      ends.append(theta)
    outer_grad = center - np.mean(ends, axis=0)
    trace = outer_grad + outer_momentum * trace
    center = center - outer_lr * (outer_grad + outer_momentum * trace)
    centers.append(center)
  return np.stack(centers)


def _rounds(sim):
  """The center after every round, and every round's records."""
  centers, rounds = [], []
  while not sim.done:
    rounds.append(sim.run_round())
    centers.append(_flat(sim.center_tree()))
  return np.stack(centers), rounds


class SyncDataParallelTest(parameterized.TestCase):

  @parameterized.parameters("sgd", "adam")
  def test_matches_the_numpy_reference(self, optimizer):
    x, _ = _reference_dataset()
    inner = (optax.adam(ref.LR) if optimizer == "adam" else
             optax.sgd(ref.LR))
    sim = _quadratic_sim(get_strategy("sync_data_parallel", inner=inner), N,
                         x, workers_per_call=2)
    centers, rounds = _rounds(sim)
    # Adam's steps m̂/√v̂ carry float32's error up to about 5e-6 here.
    np.testing.assert_allclose(
        centers, _data_parallel_reference(optimizer, ref.LR), rtol=2e-5,
        atol=1e-5 if optimizer == "adam" else 2e-6)
    # A commit is one worker's message: n a round, the clock moves by n,
    # nothing is stale; each worker pulled the round's first center.
    self.assertLen(rounds, 12)
    for r, records in enumerate(rounds):
      self.assertEqual(sorted(c.meta.worker for c in records), [0, 1, 2])
      self.assertEqual({(c.clock, c.staleness, c.meta.clock, c.window)
                        for c in records}, {(N * (r + 1), 0, N * r, r)})
    self.assertEqual(sim.clock, 12 * N)

  def test_a_rejected_commit_is_left_out_of_the_mean(self):
    x, _ = _reference_dataset()
    x[np.flatnonzero(np.all(x == ref.data()[1, 0, 0], axis=1))] = np.nan
    sim = _quadratic_sim(get_strategy("sync_data_parallel",
                                      inner=optax.sgd(ref.LR)), N, x)
    records = sim.run_round()
    self.assertEqual([(c.meta.worker, c.rejected) for c in records],
                     [(0, False), (1, True), (2, False)])
    center, targets = ref.initial_center(), _steps()
    grad = np.mean([center - targets[k, 0] for k in (0, 2)], axis=0)
    np.testing.assert_allclose(sim.center(), center - ref.LR * grad,
                               rtol=2e-5, atol=2e-6)
    self.assertEqual(sim.clock, 2)


class DilocoTest(absltest.TestCase):

  def test_matches_the_numpy_reference(self):
    x, _ = _reference_dataset()
    strategy = get_strategy("diloco", communication_window=ref.WINDOW,
                            inner=optax.adam(ref.LR))
    centers, rounds = _rounds(_quadratic_sim(strategy, N, x))
    np.testing.assert_allclose(
        centers, _diloco_reference(ref.LR, ref.WINDOW), rtol=2e-5,
        atol=1e-5)
    self.assertEqual([[c.staleness for c in rs] for rs in rounds],
                     [[0] * N] * 4)

  def test_restore_continues_exactly(self):
    x, _ = _reference_dataset()
    strategy = get_strategy("diloco", communication_window=ref.WINDOW,
                            inner=optax.adam(ref.LR))
    whole = _quadratic_sim(strategy, N, x)
    _rounds(whole)
    first = _quadratic_sim(strategy, N, x)
    first.run_round()
    first.run_round()
    second = _quadratic_sim(strategy, N, x)
    second.restore(first.state())
    _, rest = _rounds(second)
    self.assertLen(rest, 2)
    np.testing.assert_array_equal(second.center(), whole.center())

  def test_one_worker_is_local_steps_then_an_outer_step(self):
    # DiLoCo with n = 1: λ Adam steps from the center, then one Nesterov
    # step (0.7, 0.9) on the pseudo-gradient θ̃ − θ, by hand with optax.
    lam, batch, lr = 3, 4, 1e-2
    config = TrainConfig(strategy="diloco", num_workers=1,
                         communication_window=lam, dataset="synthetic",
                         hidden_sizes=(8,), batch_size=batch, epochs=0.3,
                         seed=0, learning_rate=lr, backend="simulated")
    ds = load_synthetic(size=200, seed=0)
    sim = Simulation.from_config(config, ds)
    self.assertEqual(sim.num_windows, 4)
    model, loss_fn = build.build_model(config, ds.num_classes, ds.input_shape)
    center = jax.tree.map(jnp.asarray,
                          build.initial_center(config, model, 32))
    inner, outer = optax.adam(lr), optax.sgd(0.7, momentum=0.9,
                                             nesterov=True)
    inner_state, outer_state = inner.init(center), outer.init(center)

    @jax.jit
    def step(params, state, batch):
      grads = jax.grad(lambda p: loss_fn(p, batch)[0])(params)
      updates, state = inner.update(grads, state, params)
      return optax.apply_updates(params, updates), state

    sampler = BatchSampler(len(ds.x_train), np.random.default_rng([0, 0]))
    for _ in range(sim.num_windows):
      params = center
      for idx in sampler.take(lam * batch).reshape(lam, batch):
        params, inner_state = step(params, inner_state,
                                   (ds.x_train[idx], ds.y_train[idx]))
      pseudo_grad = jax.tree.map(lambda c, p: c - p, center, params)
      updates, outer_state = outer.update(pseudo_grad, outer_state, center)
      center = optax.apply_updates(center, updates)
      (record,) = sim.run_round()
      self.assertEqual(record.staleness, 0)
      for a, b in zip(jax.tree.leaves(sim.center_tree()),
                      jax.tree.leaves(center)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    self.assertTrue(sim.done)


class RoundTimeTest(absltest.TestCase):

  def test_a_round_lasts_as_long_as_its_slowest_worker(self):
    # --cluster=none, speeds 1, 0.5, 0.25, λ = 3: windows of 3, 6 and 12
    # steps' time; every round ends at the slowest one's, 12 later.
    x, _ = _reference_dataset()
    strategy = get_strategy("diloco", communication_window=ref.WINDOW,
                            inner=optax.sgd(ref.LR))
    model = TimeModel(1.0, 0.0, 0.0, 0.0, num_workers=N,
                      communication_window=ref.WINDOW,
                      speed_model="speeds:1,0.5,0.25")
    _, rounds = _rounds(_quadratic_sim(strategy, N, x, time_model=model))
    for r, records in enumerate(rounds):
      self.assertEqual(
          [(c.meta.worker, c.meta.window_start, c.meta.time,
            c.simulated_time) for c in records],
          [(k, 12.0 * r, 12.0 * r + 3 * 2**k, 12.0 * (r + 1))
           for k in range(N)])

  def test_messages_and_the_server_queue(self):
    # Step 1 s, commit 0.5 s, pull 0.25 s, apply 0.1 s, speeds 1 and 0.5,
    # λ = 3. Round 0: windows end at 3 and 6, arrive at 3.5 and 6.5, are
    # applied at 3.6 and 6.6: the step lands at 6.6, both workers hold the
    # center at 6.85. Round 1: 6.85 + 6 + 0.5 + 0.1 = 13.45.
    model = TimeModel(1.0, 0.5, 0.25, 0.1, num_workers=2,
                      communication_window=3, speed_model="speeds:1,0.5")
    commits = list(RoundSchedule(model, Windows.fixed(2, 3, 2)).drain())
    got = [(c.worker, c.window, c.window_start, c.window_end, c.arrival,
            c.applied, c.barrier) for c in commits]
    want = [(0, 0, 0.0, 3.0, 3.5, 6.6, True),
            (1, 0, 0.0, 6.0, 6.5, 6.6, False),
            (0, 1, 6.85, 9.85, 10.35, 13.45, True),
            (1, 1, 6.85, 12.85, 13.35, 13.45, False)]
    for g, w in zip(got, want):
      self.assertEqual(g[:2] + g[-1:], w[:2] + w[-1:])
      np.testing.assert_allclose(g[2:6], w[2:6], rtol=1e-12)
    self.assertLen(got, 4)


class RefusalTest(parameterized.TestCase):

  @parameterized.parameters(
      (dict(backend="processes"), "simulated backend only"),
      (dict(backend="ray"), "simulated backend only"),
      (dict(dynamic_local_updates=True), "dynamic_local_updates"),
      (dict(data_assignment="stream"), "stream"),
      (dict(diagnostics=True), "diagnostics"),
      (dict(options=SimulatedOptions(cluster="this_host")),
       "--cluster=this_host times a processes run"),
      (dict(strategy="sync_data_parallel"), "communication_window=1, got 3"),
      (dict(strategy="sync_data_parallel", communication_window=1,
            server_optimizer="nesterov"), "no --server_optimizer"))
  def test_the_config_refuses_in_one_line(self, settings, message):
    values = dict(strategy="diloco", backend="simulated",
                  communication_window=3)
    values.update(settings)
    if values["backend"] != "simulated":
      values["options"] = None
    with self.assertRaisesRegex(ValueError, message) as caught:
      TrainConfig(**values).validate()
    self.assertNotIn("\n", str(caught.exception))

  def test_diloco_defaults_to_the_papers_outer_step(self):
    config = TrainConfig(strategy="diloco", backend="simulated").validate()
    self.assertEqual((config.server_optimizer, config.server_learning_rate,
                      config.server_momentum), ("nesterov", 0.7, 0.9))
    self.assertEqual(TrainConfig().validate().server_optimizer, "none")

  def test_a_simulation_from_parts_refuses_a_replayed_order(self):
    x, _ = _reference_dataset()
    with self.assertRaisesRegex(ValueError, "no commit_order"):
      _quadratic_sim(get_strategy("diloco", communication_window=3), N, x,
                     commit_order=[0, 1, 2])


if __name__ == "__main__":
  absltest.main()
