"""The window kernel against λ separate optax steps taken one by one in Python."""

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax

from agn_jax import agn, window_kernel


def _loss_fn(params, batch):
  x, y = batch
  logits = x @ params["w"] + params["b"]
  loss = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
  accuracy = jnp.mean(jnp.argmax(logits, -1) == y)
  return loss, {"accuracy": accuracy}


def _plain_step(inner):
  """One optax step of `inner` on one mini-batch, jitted once: the reference's step.

  Jitted so that the reference loop compiles one program instead of every
  primitive of the gradient and the update one by one; it is still plain
  optax, one Python iteration a step.
  """

  @jax.jit
  def step(params, state, x, y):
    (loss, aux), grads = jax.value_and_grad(_loss_fn, has_aux=True)(
        params, (x, y))
    updates, state = inner.update(grads, state, params)
    return optax.apply_updates(params, updates), state, loss, aux

  return step


def _lookahead_step(ref):
  """One step of `optax.lookahead` `ref` on one mini-batch, jitted once."""

  @jax.jit
  def step(params, state, x, y):
    loss, grads = jax.value_and_grad(
        lambda p: _loss_fn(p, (x, y))[0])(params.fast)
    updates, state = ref.update(grads, state, params)
    return optax.apply_updates(params, updates), state, loss

  return step


def _setup(window, batch=8, dim=5, classes=3, seed=0):
  rng = np.random.default_rng(seed)
  params = {
      "w": jnp.asarray(rng.normal(size=(dim, classes)) * 0.1, jnp.float32),
      "b": jnp.zeros(classes)
  }
  xs = jnp.asarray(rng.normal(size=(window, batch, dim)), jnp.float32)
  ys = jnp.asarray(rng.integers(0, classes, size=(window, batch)), jnp.int32)
  return params, (xs, ys)


class WindowKernelTest(parameterized.TestCase):

  @parameterized.parameters(1, 4, 7)
  def test_matches_separate_steps(self, window):
    params, (xs, ys) = _setup(window)
    inner = optax.adam(0.05)

    # Reference: λ plain optax steps, one Python iteration each, then the AGN
    # commit worked out from PAPER.md: center = anchor + (θ − anchor) / λ.
    ref_params, ref_state = params, inner.init(params)
    losses, accuracies = [], []
    step = _plain_step(inner)
    for x, y in zip(xs, ys):
      ref_params, ref_state, loss, aux = step(ref_params, ref_state, x, y)
      losses.append(loss)
      accuracies.append(aux["accuracy"])
    ref_delta = jax.tree.map(lambda p, a: (p - a) / window, ref_params, params)
    ref_center = jax.tree.map(lambda a, d: a + d, params, ref_delta)

    tx = agn(inner, window)
    kernel = window_kernel(_loss_fn, tx)
    result = kernel(jax.tree.map(jnp.copy, params), tx.init(params), (xs, ys))

    chex.assert_trees_all_close(result.params, ref_center, rtol=1e-5, atol=1e-6)
    chex.assert_trees_all_close(result.delta, ref_delta, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(result.metrics["loss"], losses, rtol=1e-5)
    np.testing.assert_allclose(result.metrics["accuracy"], accuracies)
    self.assertEqual(result.metrics["loss"].shape, (window,))

  def test_two_windows_keep_inner_state(self):
    window = 3
    params, (xs, ys) = _setup(2 * window, seed=1)
    inner = optax.adam(0.05)
    tx = agn(inner, window)
    ref = optax.lookahead(inner, window, 1 / window)
    ref_params = optax.LookaheadParams.init_synced(params)
    ref_state = ref.init(ref_params)
    step = _lookahead_step(ref)
    for x, y in zip(xs, ys):
      ref_params, ref_state, _ = step(ref_params, ref_state, x, y)

    kernel = window_kernel(_loss_fn, tx, donate=False)
    p, s = params, tx.init(params)
    for k in range(2):
      sl = slice(k * window, (k + 1) * window)
      p, s, _, _ = kernel(p, s, (xs[sl], ys[sl]))
    chex.assert_trees_all_close(p, ref_params.slow, rtol=1e-5, atol=1e-6)

  @parameterized.parameters((4, (2, 2, 4)), (4, (3, 4, 1)), (1, (2, 1)))
  def test_calls_that_cut_windows_match_lookahead(self, window, calls):
    """Calls that start inside a window or end before it, then whole ones.

    A call that runs exactly one window from its start places the commit
    statically; every other call commits where agn's state says. Both
    against `optax.lookahead` stepped one mini-batch at a time.
    """
    params, (xs, ys) = _setup(sum(calls), seed=2)
    inner = optax.adam(0.05)
    ref = optax.lookahead(inner, window, 1 / window)
    ref_params = optax.LookaheadParams.init_synced(params)
    ref_state = ref.init(ref_params)
    ref_losses = []
    step = _lookahead_step(ref)
    for x, y in zip(xs, ys):
      ref_params, ref_state, loss = step(ref_params, ref_state, x, y)
      ref_losses.append(loss)

    tx = agn(inner, window)
    kernel = window_kernel(_loss_fn, tx, donate=False)
    p, s, start, losses = params, tx.init(params), 0, []
    for steps in calls:
      sl = slice(start, start + steps)
      p, s, _, metrics = kernel(p, s, (xs[sl], ys[sl]))
      losses.extend(np.asarray(metrics["loss"]))
      start += steps
    # Between commits lookahead's fast parameters are the worker's.
    chex.assert_trees_all_close(p, ref_params.fast, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)
    self.assertEqual(int(s.count), sum(calls) % window)

  def test_plain_transform_has_no_delta(self):
    params, batches = _setup(3)
    tx = optax.sgd(0.1)
    result = window_kernel(_loss_fn, tx, donate=False)(params, tx.init(params),
                                                       batches)
    self.assertIsNone(result.delta)

  def test_inputs_are_donated(self):
    params, batches = _setup(3)
    tx = agn(optax.sgd(0.1), 3)
    params = jax.tree.map(jnp.copy, params)
    state = tx.init(params)
    window_kernel(_loss_fn, tx)(params, state, batches)
    if jax.default_backend() == "cpu" and not params["w"].is_deleted():
      self.skipTest("this jaxlib does not donate on CPU")
    self.assertTrue(params["w"].is_deleted())


if __name__ == "__main__":
  absltest.main()
