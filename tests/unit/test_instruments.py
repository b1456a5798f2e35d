"""The per-commit instruments (`agn_jax.instruments`) against numpy on a hand-built trajectory.

The trajectory is written here in float64 numpy: 3 workers, 6 commits, on a
2-layer parameter pytree (26 parameters); each worker takes λ = 2 local SGD
steps on a quadratic loss of its own and commits `a / λ`; the server adds it
(AGN) or damps it element-wise as the thesis' ADAG does, so that the commit
as sent and the center's step differ in direction. Every expected value is
computed from those numpy vectors with numpy; the library only sees them as
pytrees. μ̂ is also checked to recover a known slope on a synthetic AR(1)
trajectory, within a tolerance derived from the sample size.
"""

import math
from typing import List, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agn_jax import instruments
from agn_jax.wire import FlatLayout
from agn_jax.instruments import (MomentumEstimate, Subsample,
                                 commit_instruments)

# The pytree's leaves in `jax.tree.leaves` order (dict keys sorted), each
# raveled row-major: the flat order a `Subsample` indexes.
LEAVES = ((("layer1", "b"), (4,)), (("layer1", "w"), (3, 4)),
          (("layer2", "b"), (2,)), (("layer2", "w"), (4, 2)))
NUM_PARAMS = 26
NUM_WORKERS = 3
WINDOW = 2
LR = 0.3
SCHEDULE = (0, 1, 2, 0, 2, 1)  # Which worker's commit the server applies next.
# Staleness in commits of each, for reading the expectations: 0 1 2 2 1 3.
# Coordinates in all four leaves (offsets 0, 4, 16, 18).
INDICES = (0, 2, 5, 9, 16, 17, 21, 25)


def to_tree(flat):
  """The test's own unravel: numpy float32 leaves in LEAVES order."""
  tree, start = {"layer1": {}, "layer2": {}}, 0
  for (layer, name), shape in LEAVES:
    size = int(np.prod(shape))
    tree[layer][name] = np.asarray(
        flat[start:start + size], np.float32).reshape(shape)
    start += size
  return tree


class Commit(NamedTuple):
  delta: np.ndarray   # Δ as sent.
  pulled: np.ndarray  # θ̃ the worker pulled.
  before: np.ndarray  # θ̃ just before the server applied Δ.
  after: np.ndarray   # θ̃ just after.


def trajectory(rule: str, zero_commit: int = -1) -> List[Commit]:
  """The hand-built run, float64 flat vectors (every value exact in float32).

  The commit at index `zero_commit` sends zeros (a window that went nowhere).
  """
  rng = np.random.default_rng(3)
  targets = rng.normal(size=(NUM_WORKERS, NUM_PARAMS))
  center = rng.normal(size=NUM_PARAMS).astype(np.float32).astype(np.float64)
  pulled = [center.copy() for _ in range(NUM_WORKERS)]
  commits = []
  for i, k in enumerate(SCHEDULE):
    theta = pulled[k].copy()
    accumulated = np.zeros(NUM_PARAMS)
    for _ in range(WINDOW):
      update = -LR * (theta - targets[k])  # ∇ ½‖θ − b_k‖² = θ − b_k
      accumulated += update
      theta += update
    delta = (accumulated / WINDOW).astype(np.float32).astype(np.float64)
    if i == zero_commit:
      delta = np.zeros(NUM_PARAMS)
    if rule == "add":
      applied = delta
    else:  # ADAG: Δ ⊘ ((θ̃ − θ̃_pulled)² / η + 1), element by element.
      applied = delta / ((center - pulled[k])**2 / LR + 1.0)
    after = (center + applied).astype(np.float32).astype(np.float64)
    commits.append(Commit(delta, pulled[k], center, after))
    center = after
    pulled[k] = center.copy()
  return commits


def np_cosine(a, b):
  den = np.linalg.norm(a) * np.linalg.norm(b)
  return np.nan if den == 0 else float(a @ b / den)


def expected(commits, indices=None):
  """Every scalar of `update`, per commit, in numpy (on `indices` if given)."""
  pick = (lambda x: x) if indices is None else (lambda x: x[list(indices)])
  scale = 1.0 if indices is None else math.sqrt(NUM_PARAMS / len(indices))
  rows, steps = [], []
  previous = np.zeros(len(pick(commits[0].delta)))
  for c in commits:
    delta, moved = pick(c.delta), pick(c.before - c.pulled)
    steps.append(pick(c.after - c.before))
    cross = sum(steps[t] @ steps[t - 1] for t in range(1, len(steps)))
    square = sum(steps[t - 1] @ steps[t - 1] for t in range(1, len(steps)))
    rows.append({
        "commit_norm": np.linalg.norm(delta) * scale,
        "distance_staleness": np.linalg.norm(moved) * scale,
        "cosine_previous_commit": np_cosine(delta, previous),
        "cosine_center_movement": np_cosine(delta, moved),
        "center_step_norm": np.linalg.norm(steps[-1]) * scale,
        "implicit_momentum": cross / square if square > 0 else np.nan,
    })
    previous = delta
  return rows


def run(commits, subsample=None, jit=False):
  tools = commit_instruments(subsample)
  update = jax.jit(tools.update) if jit else tools.update
  state = tools.init(to_tree(commits[0].before))
  rows = []
  for c in commits:
    state, scalars = update(state, to_tree(c.delta), to_tree(c.pulled),
                            to_tree(c.before), to_tree(c.after))
    rows.append(instruments.scalars_to_floats(scalars))
  return rows, state


def assert_rows_close(actual, wanted, rtol=2e-5, atol=1e-6):
  assert len(actual) == len(wanted)
  for i, (a, w) in enumerate(zip(actual, wanted)):
    assert sorted(a) == sorted(instruments.SCALARS)
    for name in instruments.SCALARS:
      np.testing.assert_allclose(a[name], w[name], rtol=rtol, atol=atol,
                                 err_msg=f"commit {i}: {name}")


def test_the_test_layout_is_the_flat_layout():
  flat = np.arange(NUM_PARAMS, dtype=np.float32)
  tree = to_tree(flat)
  np.testing.assert_array_equal(FlatLayout.from_tree(tree).ravel_numpy(tree),
                                flat)


def test_trajectory_has_the_cases_it_is_for():
  commits = trajectory("adag")
  # The first commit finds the center where its worker pulled it; the others
  # do not; and under ADAG at least one step is not parallel to its Δ.
  assert np.all(commits[0].before == commits[0].pulled)
  assert all(np.any(c.before != c.pulled) for c in commits[1:])
  assert any(
      abs(np_cosine(c.delta, c.after - c.before)) < 0.999 for c in commits)


# --- Every instrument against numpy, full and subsampled ----------------------


@pytest.mark.parametrize("rule", ["add", "adag"])
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_update_matches_numpy(rule, jit):
  commits = trajectory(rule)
  rows, _ = run(commits, jit=jit)
  wanted = expected(commits)
  assert_rows_close(rows, wanted)
  # The first commit: no previous commit, a center that did not move.
  assert math.isnan(rows[0]["cosine_previous_commit"])
  assert math.isnan(rows[0]["cosine_center_movement"])
  assert rows[0]["distance_staleness"] == 0.0
  assert math.isnan(rows[0]["implicit_momentum"])
  assert all(np.isfinite(list(r.values())).all() for r in rows[1:])


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_update_on_a_subsample_matches_numpy(jit):
  commits = trajectory("adag")
  sub = Subsample(INDICES, NUM_PARAMS)
  rows, state = run(commits, sub, jit=jit)
  assert_rows_close(rows, expected(commits, INDICES))
  # The state holds the sampled coordinates only.
  assert state.previous_commit.shape == (len(INDICES),)
  np.testing.assert_allclose(state.previous_commit,
                             commits[-1].delta[list(INDICES)], rtol=1e-6)


def test_gathered_vectors_give_the_subsample_values():
  # A caller that keeps only the sampled coordinates (the simulator's
  # pulled centers) passes them gathered: the same values, scaled alike.
  commits = trajectory("adag")
  sub = Subsample(INDICES, NUM_PARAMS)
  tools = commit_instruments(sub, gathered=True)
  pick = lambda v: jnp.asarray(v[list(INDICES)], jnp.float32)
  state = tools.init(pick(commits[0].before))
  rows = []
  for c in commits:
    state, scalars = tools.update(state, pick(c.delta), pick(c.pulled),
                                  pick(c.before), pick(c.after))
    rows.append(instruments.scalars_to_floats(scalars))
  assert_rows_close(rows, expected(commits, INDICES))


def test_a_subsample_of_every_coordinate_is_the_full_computation():
  commits = trajectory("adag")
  sub = Subsample.from_seed(7, NUM_PARAMS, fraction=1.0)
  assert sub.indices.tolist() == list(range(NUM_PARAMS)) and sub.scale == 1.0
  assert_rows_close(run(commits, sub)[0], expected(commits))


def test_jit_gives_the_eager_values():
  commits = trajectory("adag")
  for sub in (None, Subsample(INDICES, NUM_PARAMS)):
    eager, eager_state = run(commits, sub)
    jitted, jit_state = run(commits, sub, jit=True)
    assert_rows_close(jitted, eager, rtol=1e-6, atol=1e-7)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6),
                 eager_state, jit_state)


def test_single_instruments_match_numpy():
  commits = trajectory("adag")
  sub = Subsample(INDICES, NUM_PARAMS)
  idx, scale = list(INDICES), math.sqrt(NUM_PARAMS / len(INDICES))
  for c in commits[1:]:
    delta, before, pulled = map(to_tree, (c.delta, c.before, c.pulled))
    np.testing.assert_allclose(instruments.norm(delta),
                               np.linalg.norm(c.delta), rtol=1e-6)
    np.testing.assert_allclose(instruments.norm(delta, sub),
                               np.linalg.norm(c.delta[idx]) * scale, rtol=1e-6)
    np.testing.assert_allclose(
        instruments.distance_staleness(before, pulled),
        np.linalg.norm(c.before - c.pulled), rtol=1e-5)
    np.testing.assert_allclose(
        instruments.distance_staleness(before, pulled, sub),
        np.linalg.norm((c.before - c.pulled)[idx]) * scale, rtol=1e-5)
    moved = to_tree(c.before - c.pulled)
    np.testing.assert_allclose(instruments.cosine(delta, moved),
                               np_cosine(c.delta, c.before - c.pulled),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        instruments.cosine(delta, moved, sub),
        np_cosine(c.delta[idx], (c.before - c.pulled)[idx]),
        rtol=1e-5, atol=1e-6)


# --- The gradient cosine ------------------------------------------------------


def _probe():
  """Weights `w` and a probe batch of targets: L(θ) = ½ mean_i Σ w (θ − b_i)²."""
  rng = np.random.default_rng(11)
  weights = rng.uniform(0.5, 2.0, NUM_PARAMS)
  batch = rng.normal(size=(5, NUM_PARAMS))
  return weights, batch


def _loss(weights):
  w = to_tree(weights)

  def loss_fn(params, batch):
    per_leaf = jax.tree.map(
        lambda p, b, c: 0.5 * jnp.sum(c * (p[None] - b)**2) / b.shape[0],
        params, batch, w)
    return sum(jax.tree.leaves(per_leaf))

  return loss_fn


def _batch_tree(batch):
  trees = [to_tree(row) for row in batch]
  return jax.tree.map(lambda *rows: np.stack(rows), *trees)


@pytest.mark.parametrize("has_aux", [False, True])
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_gradient_cosine_matches_numpy(has_aux, jit):
  weights, batch = _probe()
  loss_fn = _loss(weights)
  if has_aux:
    loss_fn = (lambda f: lambda p, b: (f(p, b), {"accuracy": 0.0}))(loss_fn)
  sub = Subsample(INDICES, NUM_PARAMS)
  idx = list(INDICES)
  fn = lambda center, b, delta, s: instruments.gradient_cosine(
      loss_fn, center, b, delta, subsample=s, has_aux=has_aux)
  if jit:
    fn = jax.jit(fn, static_argnums=3)
  batch_tree = _batch_tree(batch)
  for c in trajectory("adag"):
    descent = -weights * (c.before - batch.mean(axis=0))  # −∇L(θ̃_before)
    np.testing.assert_allclose(
        fn(to_tree(c.before), batch_tree, to_tree(c.delta), None),
        np_cosine(c.delta, descent), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        fn(to_tree(c.before), batch_tree, to_tree(c.delta), sub),
        np_cosine(c.delta[idx], descent[idx]), rtol=1e-5, atol=1e-6)


# --- Zero vectors: NaN cosines, no crash, no NaN left in the state -------------


def test_zero_vectors():
  zero, x = np.zeros(NUM_PARAMS), np.arange(1.0, NUM_PARAMS + 1)
  assert float(instruments.norm(to_tree(zero))) == 0.0
  assert float(instruments.distance_staleness(to_tree(x), to_tree(x))) == 0.0
  for a, b in ((zero, x), (x, zero), (zero, zero)):
    assert math.isnan(float(instruments.cosine(to_tree(a), to_tree(b))))
    assert math.isnan(float(jax.jit(instruments.cosine)(to_tree(a),
                                                         to_tree(b))))
  # A probe batch at the minimum: the gradient is zero.
  loss_fn = _loss(np.ones(NUM_PARAMS))
  batch = _batch_tree(np.stack([x, x]))
  assert math.isnan(float(instruments.gradient_cosine(
      loss_fn, to_tree(x), batch, to_tree(x))))
  # μ̂ of no steps, and of zero steps only.
  state = MomentumEstimate.init(jnp.zeros(3))
  assert math.isnan(float(MomentumEstimate.value(state)))
  for _ in range(3):
    state = MomentumEstimate.update(state, jnp.zeros(3))
  assert math.isnan(float(MomentumEstimate.value(state)))


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_a_zero_commit_and_a_still_center_leave_the_run_measurable(jit):
  # Commit 2 sends zeros; the server's add leaves the center where it was.
  commits = trajectory("add", zero_commit=2)
  assert np.all(commits[2].after == commits[2].before)
  rows, state = run(commits, jit=jit)
  assert_rows_close(rows, expected(commits))
  assert rows[2]["commit_norm"] == 0.0 and rows[2]["center_step_norm"] == 0.0
  assert math.isnan(rows[2]["cosine_previous_commit"])
  assert math.isnan(rows[2]["cosine_center_movement"])
  assert math.isnan(rows[3]["cosine_previous_commit"])  # Its previous is 0.
  assert np.isfinite(rows[4]["cosine_previous_commit"])
  assert np.isfinite(rows[-1]["implicit_momentum"])
  assert all(np.isfinite(leaf).all() for leaf in jax.tree.leaves(state))


# --- μ̂ ----------------------------------------------------------------------


def _ar1(mu, steps, dim, seed):
  """s_t = μ s_{t−1} + ε_t, ε ~ N(0, I), started in its stationary law."""
  rng = np.random.default_rng(seed)
  s = np.empty((steps, dim))
  s[0] = rng.normal(size=dim) / math.sqrt(1.0 - mu**2)
  for t in range(1, steps):
    s[t] = mu * s[t - 1] + rng.normal(size=dim)
  return s


def _fold(steps):
  update = jax.jit(MomentumEstimate.update)
  state = MomentumEstimate.init(jnp.zeros(steps.shape[1], jnp.float32))
  for step in steps.astype(np.float32):
    state = update(state, step)
  return state


@pytest.mark.parametrize("mu", [instruments.theory_momentum(10), 0.5, 0.0,
                                -0.5])
def test_momentum_estimate_recovers_an_ar1_slope(mu):
  steps, dim = 400, 100
  s = _ar1(mu, steps, dim, seed=int(100 * mu) + 1000)
  state = _fold(s)
  assert int(state.count) == steps
  # The streaming sums are the batch formula's, in float32.
  batch = np.sum(s[1:] * s[:-1]) / np.sum(s[:-1]**2)
  np.testing.assert_allclose(MomentumEstimate.value(state), batch, rtol=1e-4)
  # The slope's standard error with N = (T − 1)·d pairs is √((1 − μ²)/N);
  # 5 of them: a correct estimator fails with probability below 1e-6.
  tolerance = 5.0 * math.sqrt((1.0 - mu**2) / ((steps - 1) * dim))
  assert abs(float(MomentumEstimate.value(state)) - mu) < tolerance


def test_momentum_through_commit_instruments():
  # A center whose steps are an AR(1) with μ = 1 − 1/4, each applied as sent.
  mu = instruments.theory_momentum(4)
  s = _ar1(mu, 300, NUM_PARAMS, seed=5)
  center = np.cumsum(np.vstack([np.zeros(NUM_PARAMS), s]), axis=0)
  center = center.astype(np.float32).astype(np.float64)
  commits = [Commit(center[t + 1] - center[t], center[t], center[t],
                    center[t + 1]) for t in range(len(s))]
  rows, _ = run(commits, jit=True)
  applied = np.diff(center, axis=0)
  batch = np.sum(applied[1:] * applied[:-1]) / np.sum(applied[:-1]**2)
  np.testing.assert_allclose(rows[-1]["implicit_momentum"], batch, rtol=1e-4)
  tolerance = 5.0 * math.sqrt((1.0 - mu**2) / ((len(s) - 1) * NUM_PARAMS))
  assert abs(rows[-1]["implicit_momentum"] - mu) < tolerance


def test_theory_momentum():
  assert instruments.theory_momentum(1) == 0.0
  assert instruments.theory_momentum(2) == 0.5
  assert instruments.theory_momentum(40) == pytest.approx(0.975)
  for bad in (0, -3, 1.5, True):
    with pytest.raises(ValueError, match="num_workers"):
      instruments.theory_momentum(bad)


# --- Subsample ----------------------------------------------------------------


def test_subsample_from_seed():
  sub = Subsample.from_seed(3, 4_798_010, fraction=0.01)
  assert len(sub) == math.ceil(0.01 * 4_798_010)
  assert np.all(np.diff(sub.indices) > 0)
  assert 0 <= sub.indices[0] and sub.indices[-1] < 4_798_010
  assert sub.scale == pytest.approx(math.sqrt(4_798_010 / len(sub)))
  again = Subsample.from_seed(3, 4_798_010, fraction=0.01)
  np.testing.assert_array_equal(sub.indices, again.indices)
  other = Subsample.from_seed(4, 4_798_010, fraction=0.01)
  assert not np.array_equal(sub.indices, other.indices)
  assert len(Subsample.from_seed(0, 10, fraction=1e-6)) == 1


def test_subsample_gathers_across_leaves():
  flat = np.arange(NUM_PARAMS, dtype=np.float32) * 10.0
  sub = Subsample(INDICES, NUM_PARAMS)
  np.testing.assert_array_equal(sub.gather(to_tree(flat)), flat[list(INDICES)])
  np.testing.assert_array_equal(
      jax.jit(sub.gather)(to_tree(flat)), flat[list(INDICES)])
  # A flat vector is a tree of one leaf: a server loop's center works as is.
  np.testing.assert_array_equal(sub.gather(flat), flat[list(INDICES)])


@pytest.mark.parametrize("args, match", [
    (((), 5), "at least one"),
    (((2, 1), 5), "sorted and distinct"),
    (((1, 1), 5), "sorted and distinct"),
    (((0, 5), 5), r"\[0, num_params=5\)"),
    (((-1, 2), 5), r"\[0, num_params=5\)"),
    (((0,), 0), "num_params"),
])
def test_subsample_rejects_bad_indices(args, match):
  with pytest.raises(ValueError, match=match):
    Subsample(*args)


def test_subsample_rejects_bad_arguments():
  for fraction in (0.0, -0.1, 1.5):
    with pytest.raises(ValueError, match="fraction"):
      Subsample.from_seed(0, 100, fraction)
  with pytest.raises(ValueError, match="num_params"):
    Subsample.from_seed(0, 0)
  with pytest.raises(ValueError, match="the tree has 26"):
    Subsample((0, 1), 27).gather(to_tree(np.zeros(NUM_PARAMS)))


def test_long_flat_vectors_sum_in_rows_and_a_tail():
  # 4 whole rows of 1024 products and a tail of 904, as one flat center.
  rng = np.random.default_rng(2)
  a, b = rng.normal(size=(2, 5000)).astype(np.float32)
  a64, b64 = a.astype(np.float64), b.astype(np.float64)
  np.testing.assert_allclose(instruments.norm(a), np.linalg.norm(a64),
                             rtol=1e-6)
  np.testing.assert_allclose(jax.jit(instruments.cosine)(a, b),
                             np_cosine(a64, b64), rtol=1e-5, atol=1e-7)
  state = MomentumEstimate.update(MomentumEstimate.init(a), a)
  state = MomentumEstimate.update(state, b)
  np.testing.assert_allclose(MomentumEstimate.value(state),
                             a64 @ b64 / (a64 @ a64), rtol=1e-5, atol=1e-7)
