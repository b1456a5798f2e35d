"""AGN as an optax transformation, checked against optax.lookahead and hand-computed values."""

from absl.testing import absltest
from absl.testing import parameterized
import chex
from flax.training import train_state
import jax
import jax.numpy as jnp
import numpy as np
import optax

from agn_jax import agn, commit_delta, reanchor
from agn_jax.transform import AGNState, find_agn_state


def _grads_sequence(num_steps, seed=0):
  """A fixed sequence of gradient pytrees, independent of the parameters."""
  rng = np.random.default_rng(seed)
  return [{
      "w": jnp.asarray(rng.normal(size=(3, 2)), jnp.float32),
      "b": jnp.asarray(rng.normal(size=(2,)), jnp.float32)
  } for _ in range(num_steps)]


def _params():
  return {"w": jnp.ones((3, 2)), "b": jnp.full((2,), -0.5)}


def _quadratic_grad(params, step):
  """A parameter-dependent gradient, so that trajectories really interact."""
  target = jax.tree.map(lambda p: jnp.sin(step + jnp.arange(p.size).reshape(p.shape)),
                        params)
  return jax.tree.map(lambda p, t: p - t, params, target)



def _stateful_fake():

  def init(params):
    del params
    return jnp.zeros([], jnp.int32)

  def update(updates, count, params=None):
    del params
    scale = -(0.1 + 0.05 * count.astype(jnp.float32))
    return jax.tree.map(lambda g: scale * g, updates), count + 1

  return optax.GradientTransformation(init, update)


class LookaheadEquivalenceTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(
      ("adam_w1", "adam", 1), ("adam_w3", "adam", 3),
      ("fake_w4", "fake", 4), ("momentum_w2", "momentum", 2))
  def test_one_worker_equals_lookahead(self, inner_name, window):
    inner = {
        "adam": lambda: optax.adam(0.05),
        "fake": _stateful_fake,
        "momentum": lambda: optax.sgd(0.1, momentum=0.9)
    }[inner_name]()
    tx = agn(inner, window)
    ref = optax.lookahead(inner, sync_period=window, slow_step_size=1 / window)

    params = _params()
    state = tx.init(params)
    ref_params = optax.LookaheadParams.init_synced(_params())
    ref_state = ref.init(ref_params)
    update = self.variant(tx.update)
    ref_update = self.variant(ref.update)

    for step in range(3 * window + 1):
      grads = _quadratic_grad(params, step)
      ref_grads = _quadratic_grad(ref_params.fast, step)
      updates, state = update(grads, state, params)
      params = optax.apply_updates(params, updates)
      ref_updates, ref_state = ref_update(ref_grads, ref_state, ref_params)
      ref_params = optax.apply_updates(ref_params, ref_updates)
      # Between commits AGN follows the fast weights; at a commit both become
      # the slow (center) weights.
      chex.assert_trees_all_close(params, ref_params.fast, rtol=1e-5, atol=1e-6)
      if (step + 1) % window == 0:
        chex.assert_trees_all_close(params, ref_params.slow, rtol=1e-5,
                                    atol=1e-6)
    # The inner state is kept across windows, as in lookahead without reset.
    chex.assert_trees_all_close(
        find_agn_state(state).inner_state, ref_state.fast_state, rtol=1e-5,
        atol=1e-6)

  @chex.variants(with_jit=True, without_jit=True)
  def test_window_one_equals_inner(self):
    inner = optax.adam(0.1)
    tx = agn(inner, communication_window=1)
    params, ref_params = _params(), _params()
    state, ref_state = tx.init(params), inner.init(ref_params)
    update = self.variant(tx.update)
    for grads in _grads_sequence(6):
      updates, state = update(grads, state, params)
      params = optax.apply_updates(params, updates)
      ref_updates, ref_state = inner.update(grads, ref_state, ref_params)
      ref_params = optax.apply_updates(ref_params, ref_updates)
      chex.assert_trees_all_close(params, ref_params, rtol=1e-6, atol=1e-6)


class HandComputedTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  def test_sgd_trajectory_by_hand(self):
    # SGD lr 0.5, λ = 2, gradients 1, 2 | 4, 2 on a scalar starting at 0.
    # Window 1: θ = 0 → -0.5 → -1.5; a = -1.5; center = 0 + a/2 = -0.75.
    # Window 2: θ = -0.75 → -2.75 → -3.75; a = -3; center = -0.75 - 1.5 = -2.25.
    tx = agn(optax.sgd(0.5), communication_window=2)
    params = jnp.zeros([])
    state = tx.init(params)
    update = self.variant(tx.update)
    expected = [-0.5, -0.75, -2.75, -2.25]
    expected_delta = [0.0, -0.75, -0.75, -1.5]
    for g, want, want_delta in zip([1.0, 2.0, 4.0, 2.0], expected,
                                   expected_delta):
      updates, state = update(jnp.asarray(g), state, params)
      params = optax.apply_updates(params, updates)
      np.testing.assert_allclose(params, want, rtol=1e-6)
      np.testing.assert_allclose(commit_delta(state), want_delta, rtol=1e-6)
    np.testing.assert_allclose(find_agn_state(state).anchor, -2.25)
    self.assertEqual(int(find_agn_state(state).count), 0)

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(
      # a = (-1, -1) + (-3, -1) = (-4, -2) after two SGD(1.0) steps.
      ("window", "window", [-2.0, -1.0]),
      ("none", "none", [-4.0, -2.0]),
      ("l2", "l2", [-4.0 / np.sqrt(20.0), -2.0 / np.sqrt(20.0)]),
      ("callable", lambda a, w: jax.tree.map(lambda x: x / (10 * w), a),
       [-0.2, -0.1]))
  def test_normalizations(self, normalization, want_delta):
    tx = agn(optax.sgd(1.0), 2, normalization=normalization)
    params = jnp.zeros(2)
    state = tx.init(params)
    update = self.variant(tx.update)
    for g in ([1.0, 1.0], [3.0, 1.0]):
      updates, state = update(jnp.asarray(g), state, params)
      params = optax.apply_updates(params, updates)
    np.testing.assert_allclose(commit_delta(state), want_delta, rtol=1e-6)
    np.testing.assert_allclose(params, want_delta, rtol=1e-6)

  def test_l2_of_zero_window_is_zero(self):
    tx = agn(optax.sgd(1.0), 2, normalization="l2")
    params = jnp.ones(3)
    state = tx.init(params)
    for _ in range(2):
      updates, state = tx.update(jnp.zeros(3), state, params)
      params = optax.apply_updates(params, updates)
    np.testing.assert_array_equal(commit_delta(state), np.zeros(3))
    np.testing.assert_array_equal(params, np.ones(3))


class CompositionTest(chex.TestCase):

  def test_in_chain_after_clip(self):
    window = 3
    tx = optax.chain(optax.clip_by_global_norm(0.5),
                     agn(optax.sgd(0.3), window))
    ref = optax.lookahead(
        optax.chain(optax.clip_by_global_norm(0.5), optax.sgd(0.3)), window,
        1 / window)
    params = _params()
    state = tx.init(params)
    ref_params = optax.LookaheadParams.init_synced(_params())
    ref_state = ref.init(ref_params)
    update = jax.jit(tx.update)
    for step in range(2 * window + 1):
      updates, state = update(_quadratic_grad(params, step), state, params)
      params = optax.apply_updates(params, updates)
      ref_updates, ref_state = ref.update(
          _quadratic_grad(ref_params.fast, step), ref_state, ref_params)
      ref_params = optax.apply_updates(ref_params, ref_updates)
      chex.assert_trees_all_close(params, ref_params.fast, rtol=1e-5, atol=1e-6)
    # commit_delta and reanchor find the AGN state inside the chain.
    self.assertEqual(jax.tree.structure(commit_delta(state)),
                     jax.tree.structure(params))
    # 2λ + 1 steps leave the window one step in: reanchoring restarts it at
    # the pulled center and keeps the inner (clip, sgd) state.
    self.assertEqual(int(find_agn_state(state).count), 1)
    center = jax.tree.map(lambda p: p + 1.0, params)
    inner_before = find_agn_state(state).inner_state
    new_params, state = reanchor(state, center)
    chex.assert_trees_all_equal(new_params, center)
    agn_state = find_agn_state(state)
    chex.assert_trees_all_equal(agn_state.anchor, center)
    self.assertEqual(int(agn_state.count), 0)
    chex.assert_trees_all_equal(agn_state.inner_state, inner_before)

  def test_flax_train_state(self):
    window = 2

    def apply_fn(variables, x):
      return x @ variables["w"] + variables["b"]

    def loss(p, x, y):
      return jnp.mean((apply_fn(p, x) - y)**2)

    rng = np.random.default_rng(1)
    xs = jnp.asarray(rng.normal(size=(5, 4, 3)), jnp.float32)
    ys = jnp.asarray(rng.normal(size=(5, 4, 2)), jnp.float32)
    ts = train_state.TrainState.create(
        apply_fn=apply_fn, params=_params(), tx=agn(optax.adam(0.1), window))
    ref = optax.lookahead(optax.adam(0.1), window, 1 / window)
    ref_params = optax.LookaheadParams.init_synced(_params())
    ref_state = ref.init(ref_params)

    @jax.jit
    def train_step(ts, x, y):
      return ts.apply_gradients(grads=jax.grad(loss)(ts.params, x, y))

    for x, y in zip(xs, ys):
      ts = train_step(ts, x, y)
      g = jax.grad(loss)(ref_params.fast, x, y)
      ref_updates, ref_state = ref.update(g, ref_state, ref_params)
      ref_params = optax.apply_updates(ref_params, ref_updates)
      chex.assert_trees_all_close(ts.params, ref_params.fast, rtol=1e-5,
                                  atol=1e-6)
    self.assertEqual(int(ts.step), 5)

  def test_vmap_matches_separate_runs(self):
    tx = agn(optax.adam(0.1), 2)
    grads = jnp.asarray(np.random.default_rng(2).normal(size=(5, 4, 3)),
                        jnp.float32)  # 5 steps, 4 replicas.
    params = jnp.arange(12.0).reshape(4, 3)
    state = jax.vmap(tx.init)(params)
    vupdate = jax.jit(jax.vmap(tx.update))
    for g in grads:
      updates, state = vupdate(g, state, params)
      params = params + updates
    for replica in range(4):
      p = jnp.arange(12.0).reshape(4, 3)[replica]
      s = tx.init(p)
      for g in grads:
        u, s = tx.update(g[replica], s, p)
        p = p + u
      np.testing.assert_allclose(params[replica], p, rtol=1e-6)


class NonFiniteTest(chex.TestCase):

  def test_nan_gradient_makes_the_commit_non_finite(self):
    # Without protection a NaN poisons that window's delta (the server then
    # rejects the commit); the next window after a re-anchor is clean again.
    tx = agn(optax.sgd(1.0), 2)
    params = jnp.zeros(2)
    state = tx.init(params)
    for g in ([1.0, jnp.nan], [1.0, 1.0]):
      updates, state = tx.update(jnp.asarray(g), state, params)
      params = optax.apply_updates(params, updates)
    delta = np.asarray(commit_delta(state))
    self.assertTrue(np.isfinite(delta[0]))
    self.assertTrue(np.isnan(delta[1]))
    params, state = reanchor(state, jnp.zeros(2))
    for g in ([1.0, 1.0], [1.0, 3.0]):
      updates, state = tx.update(jnp.asarray(g), state, params)
      params = optax.apply_updates(params, updates)
    np.testing.assert_allclose(commit_delta(state), [-1.0, -2.0])

  @chex.variants(with_jit=True, without_jit=True)
  def test_apply_if_finite_skips_the_bad_step(self):
    # SGD(1): steps g = 1, inf (skipped), 3 | window 3 → a = -4, delta = -4/3.
    tx = agn(optax.apply_if_finite(optax.sgd(1.0), max_consecutive_errors=5),
             3)
    params = jnp.zeros([])
    state = tx.init(params)
    update = self.variant(tx.update)
    for g in (1.0, jnp.inf, 3.0):
      updates, state = update(jnp.asarray(g), state, params)
      params = optax.apply_updates(params, updates)
    np.testing.assert_allclose(params, -4.0 / 3.0, rtol=1e-6)
    np.testing.assert_allclose(commit_delta(state), -4.0 / 3.0, rtol=1e-6)


class WorkerApiTest(absltest.TestCase):

  def test_reanchor_keeps_inner_state(self):
    tx = agn(optax.adam(0.1), 3)
    params = jnp.zeros(2)
    state = tx.init(params)
    updates, state = tx.update(jnp.ones(2), state, params)
    params = optax.apply_updates(params, updates)
    before = find_agn_state(state).inner_state
    center = jnp.asarray([5.0, -5.0])
    new_params, state = reanchor(state, center)
    after = find_agn_state(state)
    np.testing.assert_array_equal(new_params, center)
    np.testing.assert_array_equal(after.anchor, center)
    self.assertEqual(int(after.count), 0)
    chex.assert_trees_all_equal(after.inner_state, before)

  def test_state_type(self):
    state = agn(optax.sgd(1.0), 2).init(jnp.zeros(1))
    self.assertIsInstance(state, AGNState)

  def test_find_agn_state_errors(self):
    with self.assertRaisesRegex(ValueError, "exactly one AGNState"):
      commit_delta(optax.adam(1.0).init(jnp.zeros(1)))


class BadArgumentsTest(parameterized.TestCase):

  @parameterized.parameters(0, -1, 1.5, True, "3")
  def test_bad_window(self, window):
    with self.assertRaisesRegex(ValueError, "communication_window"):
      agn(optax.sgd(1.0), window)

  @parameterized.parameters("L2", "mean", 3)
  def test_bad_normalization(self, normalization):
    with self.assertRaisesRegex(ValueError, "normalization"):
      agn(optax.sgd(1.0), 2, normalization=normalization)

  def test_update_needs_params(self):
    tx = agn(optax.sgd(1.0), 2)
    with self.assertRaisesRegex(ValueError, "params"):
      tx.update(jnp.ones(1), tx.init(jnp.ones(1)))


if __name__ == "__main__":
  absltest.main()
