"""Every strategy against PAPER.md's formulas, worked out in numpy inside the test.

A deterministic asynchronous schedule (which worker finishes its window next)
drives both the real strategy objects (window kernel, commit_fn, pull_fn,
server rule) and an independent numpy implementation of the paper's
pseudo-code. The loss is `½‖θ − b‖²` per mini-batch, so a local SGD step is
`θ ← θ − η (θ − b)`.
"""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
import optax

from agn_jax import get_strategy, strategies, window_kernel

from strategy_reference import DIM, NUM_WORKERS, SCHEDULE, WINDOW, LR
from strategy_reference import data as _data
from strategy_reference import initial_center as _initial_center
from strategy_reference import reference as _reference


def _loss_fn(params, batch):
  flat = jnp.concatenate([params["a"], params["b"]])
  return 0.5 * jnp.sum((flat - batch)**2), {}


def _split(vec):
  return {"a": jnp.asarray(vec[:3], jnp.float32),
          "b": jnp.asarray(vec[3:], jnp.float32)}


def _flat(tree):
  return np.concatenate([np.asarray(tree["a"]), np.asarray(tree["b"])])


def _run_strategy(strategy):
  """Drives the real strategy objects through SCHEDULE; returns centers."""
  data = _data()
  kernel = window_kernel(_loss_fn, strategy.worker_transform, donate=False)
  center = _split(_initial_center())
  server_state = strategy.rule.init(center)
  apply = jax.jit(strategy.rule.apply)
  workers = []
  for _ in range(NUM_WORKERS):
    params, opt_state = strategy.init_worker(center)
    workers.append(dict(params=params, opt_state=opt_state, pulled=center,
                        clock=0, window=0))
  centers, stalenesses = [], []
  for k in SCHEDULE:
    w = workers[k]
    params, opt_state, _, _ = kernel(w["params"], w["opt_state"],
                                     jnp.asarray(data[k, w["window"]]))
    w["window"] += 1
    clock = int(server_state.clock)
    if strategy.protocol == strategies.COMMIT_THEN_PULL:
      commit, params, opt_state = strategy.commit_fn(params, opt_state,
                                                     w["pulled"])
      staleness = clock - w["clock"]
    else:  # Pull, then commit against what was pulled.
      commit, params, opt_state = strategy.commit_fn(params, opt_state, center)
      staleness = 0
    center, server_state = apply(center, commit, server_state, staleness)
    stalenesses.append(staleness)
    w["pulled"], w["clock"] = center, int(server_state.clock)
    w["params"], w["opt_state"] = strategy.pull_fn(params, opt_state, center)
    centers.append(_flat(center))
  return np.stack(centers), stalenesses


class StrategyTrajectoryTest(parameterized.TestCase):

  @parameterized.parameters("agn", "downpour", "dynsgd", "adag", "aeasgd",
                            "eamsgd")
  def test_matches_paper_formulas(self, name):
    inner = (optax.sgd(LR, momentum=0.9) if name == "eamsgd" else
             optax.sgd(LR))
    extra = {"rho": 5.0} if name in ("aeasgd", "eamsgd") else {}
    strategy = get_strategy(name, communication_window=WINDOW, inner=inner,
                            learning_rate=LR, **extra)
    centers, stalenesses = _run_strategy(strategy)
    ref_centers, ref_stalenesses = _reference(name)
    self.assertEqual(stalenesses, ref_stalenesses)
    np.testing.assert_allclose(centers, ref_centers, rtol=2e-5, atol=2e-6)
    # The schedule really is asynchronous.
    if strategy.protocol == strategies.COMMIT_THEN_PULL:
      self.assertGreater(max(stalenesses), 1)

  def test_nesterov_outer_optimizer(self):
    strategy = get_strategy(
        "agn", communication_window=WINDOW, inner=optax.sgd(LR),
        server_optimizer=strategies.make_server_optimizer("nesterov", 0.7, 0.9))
    centers, _ = _run_strategy(strategy)
    ref_centers, _ = _reference("agn", outer="nesterov")
    np.testing.assert_allclose(centers, ref_centers, rtol=2e-5, atol=2e-6)

  def test_outer_sgd_one_is_the_plain_rule(self):
    plain = get_strategy("dynsgd", communication_window=WINDOW,
                         inner=optax.sgd(LR))
    outer = get_strategy("dynsgd", communication_window=WINDOW,
                         inner=optax.sgd(LR),
                         server_optimizer=optax.sgd(1.0))
    np.testing.assert_allclose(_run_strategy(outer)[0], _run_strategy(plain)[0],
                               rtol=1e-6)


class ServerRuleTest(absltest.TestCase):

  def test_dynsgd_by_hand(self):
    rule = strategies.server_rule(strategies.dynsgd_increment)
    center = {"x": jnp.asarray([1.0, 2.0])}
    state = rule.init(center)
    center, state = rule.apply(center, {"delta": {"x": jnp.asarray([3.0, -3.0])}},
                               state, 2)
    np.testing.assert_allclose(center["x"], [2.0, 1.0])
    self.assertEqual(int(state.clock), 1)

  def test_adag_by_hand(self):
    # θ̃ = 1, θ̃_stale = 0.9, η = 0.01: divisor = 0.01/0.01 + 1 = 2.
    rule = strategies.server_rule(strategies.adag_increment(0.01))
    center = jnp.asarray([1.0, 1.0])
    commit = {"delta": jnp.asarray([0.5, 0.5]),
              "stale_center": jnp.asarray([0.9, 1.0])}
    center, _ = jax.jit(rule.apply)(center, commit, rule.init(center), 0)
    np.testing.assert_allclose(center, [1.25, 1.5], rtol=1e-5)

  def test_aeasgd_alpha_is_rho_eta(self):
    s = get_strategy("aeasgd", communication_window=2, learning_rate=0.01,
                     rho=5.0)
    commit, params, _ = s.commit_fn(jnp.asarray([2.0]), None, jnp.asarray([0.0]))
    np.testing.assert_allclose(commit["delta"], [0.1])  # 0.05 · 2
    np.testing.assert_allclose(params, [1.9])
    self.assertEqual(s.protocol, strategies.PULL_THEN_COMMIT)


class RegistryTest(parameterized.TestCase):

  def test_all_paper_strategies(self):
    self.assertEqual(
        set(strategies.available()),
        {"agn", "downpour", "aeasgd", "eamsgd", "dynsgd", "adag"})

  @parameterized.parameters(
      ("agn", ("delta",)), ("adag", ("delta", "stale_center")))
  def test_payload(self, name, payload):
    self.assertEqual(get_strategy(name).payload, payload)

  def test_unknown_strategy(self):
    with self.assertRaisesRegex(ValueError, "unknown strategy 'sgdx'.*agn"):
      get_strategy("sgdx")

  def test_bad_arguments(self):
    with self.assertRaisesRegex(ValueError, "communication_window"):
      get_strategy("agn", communication_window=0)
    with self.assertRaisesRegex(ValueError, "communication_window"):
      get_strategy("aeasgd", communication_window=0)
    with self.assertRaisesRegex(ValueError, "rho"):
      get_strategy("aeasgd", rho=0.0)
    with self.assertRaisesRegex(ValueError, "worker_optimizer"):
      strategies.make_worker_optimizer("rmsprop", 0.1)
    with self.assertRaisesRegex(ValueError, "server_optimizer"):
      strategies.make_server_optimizer("adamw")

  @parameterized.parameters(*[(name,) for name in (
      "agn", "downpour", "aeasgd", "eamsgd", "dynsgd", "adag")])
  def test_misspelled_keyword_is_an_error_naming_it(self, name):
    with self.assertRaisesRegex(TypeError, "'comunication_window'"):
      get_strategy(name, comunication_window=3)

  def test_keywords_a_strategy_does_not_take_are_errors(self):
    # AGN has no elasticity; DOWNPOUR commits the raw delta, whatever one asks.
    with self.assertRaisesRegex(TypeError, "'rho'"):
      get_strategy("agn", rho=5.0)
    with self.assertRaisesRegex(TypeError, "'normalization'"):
      get_strategy("downpour", normalization="window")
    self.assertIn("rho", strategies.parameters("eamsgd"))
    self.assertNotIn("rho", strategies.parameters("dynsgd"))

  def test_paper_defaults(self):
    # PAPER.md: AGN, DOWNPOUR, DynSGD and the thesis' ADAG with Adam 1e-3;
    # AEASGD with SGD, η = 0.01, ρ = 5; EAMSGD with momentum 0.9, η = 0.01,
    # ρ = 5. AGN (and ADAG on AGN's delta) divide by the window.
    adam = {"worker_optimizer": "adam", "learning_rate": 1e-3}
    self.assertEqual(strategies.paper_defaults("agn"),
                     dict(adam, normalization="window"))
    self.assertEqual(strategies.paper_defaults("adag"),
                     dict(adam, normalization="window"))
    self.assertEqual(strategies.paper_defaults("downpour"),
                     dict(adam, normalization="none"))
    self.assertEqual(strategies.paper_defaults("dynsgd"),
                     dict(adam, normalization="none"))
    self.assertEqual(strategies.paper_defaults("aeasgd"), {
        "worker_optimizer": "sgd", "learning_rate": 0.01, "rho": 5.0,
        "normalization": "none"})
    self.assertEqual(strategies.paper_defaults("eamsgd"), {
        "worker_optimizer": "momentum", "learning_rate": 0.01,
        "momentum": 0.9, "rho": 5.0, "normalization": "none"})
    # A copy: changing it changes nothing.
    strategies.paper_defaults("agn")["learning_rate"] = 1.0
    self.assertEqual(strategies.paper_defaults("agn")["learning_rate"], 1e-3)
    with self.assertRaisesRegex(ValueError, "unknown strategy 'sgdx'"):
      strategies.paper_defaults("sgdx")

  def test_factory_defaults_are_the_paper_defaults(self):
    # Without arguments, aeasgd's workers are SGD(0.01) and its α is 0.05:
    # one local step on gradient 1 moves θ by -0.01; E = 0.05 (θ − θ̃).
    s = get_strategy("aeasgd")
    state = s.worker_transform.init(jnp.zeros(1))
    updates, _ = s.worker_transform.update(jnp.ones(1), state, jnp.zeros(1))
    np.testing.assert_allclose(updates, [-0.01])
    commit, _, _ = s.commit_fn(jnp.asarray([2.0]), None, jnp.asarray([0.0]))
    np.testing.assert_allclose(commit["delta"], [0.1])

  def test_a_newly_registered_strategy_is_reachable(self):
    @strategies.register("test_only", paper_defaults={"learning_rate": 0.5})
    def test_only(communication_window: int = 10):
      return get_strategy("downpour", communication_window=communication_window)

    try:
      # The CLI asks the registry: --strategy accepts the new name.
      from absl import flags  # pylint: disable=g-import-not-at-top
      from experiments import flags as flags_lib  # pylint: disable=g-import-not-at-top
      flag_values = flags.FlagValues()
      flags_lib.define_train_flags(flag_values)
      flag_values(["train", "--strategy=test_only"])
      self.assertEqual(flag_values.strategy, "test_only")
      self.assertIn("test_only", strategies.available())
      self.assertEqual(strategies.paper_defaults("test_only"),
                       {"learning_rate": 0.5})
      self.assertEqual(get_strategy("test_only", communication_window=2)
                       .communication_window, 2)
    finally:
      del strategies._REGISTRY["test_only"]  # pylint: disable=protected-access
      del strategies._PAPER_DEFAULTS["test_only"]  # pylint: disable=protected-access


if __name__ == "__main__":
  absltest.main()
