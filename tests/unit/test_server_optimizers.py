"""Delayed Nesterov (Liu, Douillard et al. 2024) against numpy and optax.

The numpy reference is the paper's DN update written out here: for the t-th
pseudo-gradient `g_t` (the paper's `θ_start − θ_end`, so `−Δ` of a commit
that adds `Δ`), `Δ_buf ← Δ_buf + g_t`; at every N-th update
`m ← β m + Δ_buf / N`, `θ ← θ − ε (β m + g_t / N)`, `Δ_buf ← 0`; between
them `θ ← θ − ε g_t / N`.
"""


import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from agn_jax import build, get_strategy, strategies
from agn_jax.config import TrainConfig

LR, BETA = 0.7, 0.9


def _deltas(count, seed=0):
  """`count` commits' deltas, each a pytree of two leaves."""
  rng = np.random.default_rng(seed)
  return [{"w": rng.normal(size=(2, 3)), "b": rng.normal(size=3)}
          for _ in range(count)]


def _flat(tree):
  return np.concatenate([np.ravel(tree["w"]), np.ravel(tree["b"])])


def _reference(deltas, center, every, lr=LR, beta=BETA):
  """The center after each commit, by the paper's DN update (float64)."""
  theta = _flat(center).astype(np.float64)
  momentum = np.zeros_like(theta)
  buffer = np.zeros_like(theta)
  centers = []
  for t, delta in enumerate(deltas, start=1):
    g = -_flat(delta)
    buffer = buffer + g
    if t % every == 0:
      momentum = beta * momentum + buffer / every
      theta = theta - lr * (beta * momentum + g / every)
      buffer = np.zeros_like(theta)
    else:
      theta = theta - lr * g / every
    centers.append(theta.copy())
  return np.stack(centers)


def _center():
  return {"w": jnp.linspace(-1.0, 1.0, 6).reshape(2, 3),
          "b": jnp.array([0.5, 0.0, -0.5])}


def _run_rule(outer, deltas):
  """The center after each commit through `server_rule(add_increment, outer)`."""
  rule = strategies.server_rule(strategies.add_increment, outer)
  center = _center()
  state = rule.init(center)
  apply = jax.jit(rule.apply)
  centers = []
  for delta in deltas:
    payload = {"delta": jax.tree.map(lambda d: jnp.asarray(d, jnp.float32),
                                     delta)}
    center, state = apply(center, payload, state, 0)
    centers.append(_flat(center))
  return np.stack(centers), state


@pytest.mark.parametrize("every", [3, 2, 7])
def test_delayed_nesterov_matches_the_papers_update(every):
  deltas = _deltas(7)
  centers, state = _run_rule(
      strategies.make_server_optimizer("delayed_nesterov", LR, BETA, every),
      deltas)
  expected = _reference(deltas, _center(), every)
  np.testing.assert_allclose(centers, expected, rtol=1e-5, atol=1e-5)
  assert int(state.outer_state.count) == 7 % every
  # The buffer holds the pseudo-gradients since the last momentum update.
  since = 7 % every
  buffered = -sum((_flat(d) for d in deltas[7 - since:]), np.zeros(9))
  np.testing.assert_allclose(_flat(state.outer_state.accumulated), buffered,
                             rtol=1e-5, atol=1e-5)
  # The reference tells DN apart from Nesterov on every commit.
  nesterov, _ = _run_rule(optax.sgd(LR, BETA, nesterov=True), deltas)
  assert np.max(np.abs(nesterov - expected)) > 0.1


@pytest.mark.parametrize("jit", [False, True])
def test_every_one_is_optax_nesterov(jit):
  rng = np.random.default_rng(1)
  params = jnp.zeros(4)
  dn = strategies.delayed_nesterov(LR, BETA, every=1)
  nesterov = optax.sgd(LR, momentum=BETA, nesterov=True)
  dn_update = jax.jit(dn.update) if jit else dn.update
  dn_state, nesterov_state = dn.init(params), nesterov.init(params)
  for _ in range(6):
    g = jnp.asarray(rng.normal(size=4), jnp.float32)
    mine, dn_state = dn_update(g, dn_state)
    theirs, nesterov_state = nesterov.update(g, nesterov_state)
    np.testing.assert_allclose(mine, theirs, rtol=1e-6, atol=1e-7)
  # On the server: one worker's commits, every = 1, is DiLoCo's Nesterov.
  deltas = _deltas(5, seed=2)
  np.testing.assert_allclose(
      _run_rule(strategies.make_server_optimizer("delayed_nesterov", LR, BETA,
                                                 1), deltas)[0],
      _run_rule(strategies.make_server_optimizer("nesterov", LR, BETA),
                deltas)[0], rtol=1e-6, atol=1e-6)


def test_a_rejected_commit_does_not_count():
  # The server keeps its state on a non-finite commit: DN's count too, so
  # the momentum steps at the 3rd and 6th applied commit.
  strategy = get_strategy("agn", communication_window=2,
                          server_optimizer=strategies.make_server_optimizer(
                              "delayed_nesterov", LR, BETA, every=3))
  center = _center()
  state = strategy.rule.init(center)
  apply = jax.jit(strategy.server_apply)
  deltas = _deltas(6, seed=3)
  centers = []
  for i, delta in enumerate(deltas):
    payload = {"delta": jax.tree.map(lambda d: jnp.asarray(d, jnp.float32),
                                     delta)}
    if i == 2:
      poisoned = {"delta": jax.tree.map(lambda d: d.at[0].set(jnp.nan),
                                        payload["delta"])}
      new_center, new_state, accepted = apply(center, state, poisoned, 0)
      assert not bool(accepted)
      jax.tree.map(np.testing.assert_array_equal, (new_center, new_state),
                   (center, state))
    center, state, accepted = apply(center, state, payload, 0)
    assert bool(accepted)
    centers.append(_flat(center))
  np.testing.assert_allclose(np.stack(centers),
                             _reference(deltas, _center(), 3),
                             rtol=1e-5, atol=1e-5)


def test_the_config_reaches_the_server_optimizer():
  strategy = build.build_strategy(TrainConfig(
      server_optimizer="delayed_nesterov", server_every=4))
  center = _center()
  state = strategy.rule.init(center)
  assert isinstance(state.outer_state, strategies.DelayedNesterovState)
  for expected in (1, 2, 3, 0):
    center, state, _ = strategy.server_apply(
        center, state, {"delta": jax.tree.map(jnp.ones_like, center)}, 0)
    assert int(state.outer_state.count) == expected


@pytest.mark.parametrize("kwargs, message", [
    (dict(every=0), "server_every must be an integer >= 1, got 0"),
    (dict(every=1.5), "server_every must be an integer >= 1, got 1.5"),
    (dict(every=True), "server_every must be an integer >= 1, got True"),
    (dict(momentum=1.0), "server_momentum must be in"),
    (dict(learning_rate=0.0), "server_learning_rate must be > 0"),
])
def test_bad_arguments_are_one_line_errors(kwargs, message):
  args = dict(dict(learning_rate=LR, momentum=BETA, every=2), **kwargs)
  with pytest.raises(ValueError, match=message):
    strategies.delayed_nesterov(**args)


def test_a_bad_server_every_is_refused_before_anything_is_built():
  with pytest.raises(ValueError, match="server_every"):
    strategies.make_server_optimizer("nesterov", every=0)
  with pytest.raises(ValueError, match=r"^server_every accepts an integer "
                     r"in \[1, 2147483647\], got 0$"):
    TrainConfig(server_every=0).validate()


@pytest.mark.parametrize("name", strategies.SERVER_OPTIMIZERS)
def test_each_server_optimizer_reads_exactly_its_declared_settings(name):
  # What `SERVER_OPTIMIZER_SETTINGS` declares, checked against behaviour:
  # changing a declared setting changes the updates, changing any other
  # leaves them bit for bit the same.
  base = dict(learning_rate=LR, momentum=BETA, every=2)
  changed = dict(learning_rate=0.3, momentum=0.5, every=3)
  setting_of = dict(learning_rate="server_learning_rate",
                    momentum="server_momentum", every="server_every")

  def updates(**kwargs):
    tx = strategies.make_server_optimizer(name, **kwargs)
    if tx is None:
      return None
    params = jnp.zeros(3)
    state = tx.init(params)
    out = []
    for g in (jnp.array([1.0, -2.0, 0.5]), jnp.array([0.25, 1.0, -1.0]),
              jnp.array([2.0, 0.0, 1.0])):
      u, state = tx.update(g, state, params)
      out.append(np.asarray(u))
    return np.stack(out)

  reference = updates(**base)
  declared = strategies.SERVER_OPTIMIZER_SETTINGS[name]
  for arg, setting in setting_of.items():
    got = updates(**dict(base, **{arg: changed[arg]}))
    same = (got is None and reference is None) or (
        got is not None and np.array_equal(got, reference))
    assert same == (setting not in declared), (name, setting)
