"""Every strategy against PAPER.md's formulas, worked out in numpy inside the test.

A deterministic asynchronous schedule (which worker finishes its window next)
drives both the real strategy objects (window kernel and the half-steps
`worker_commit`, `server_apply`, `worker_receive`) and an independent numpy
implementation of the paper's pseudo-code. The loss is `½‖θ − b‖²` per mini-batch, so a local SGD step is
`θ ← θ − η (θ − b)`; AEASGD's local steps are Adam and EAMSGD's Nesterov
momentum, both written out in the reference.
"""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
import optax

from agn_jax import get_strategy, strategies, window_kernel
from agn_jax.strategies import WorkerState

from strategy_reference import DIM, NUM_WORKERS, SCHEDULE, WINDOW, LR
from strategy_reference import ELASTIC, ELASTIC_LR, MOMENTUM, RHO
from strategy_reference import data as _data
from strategy_reference import initial_center as _initial_center
from strategy_reference import reference as _reference
from strategy_reference import trajectory as _trajectory


def _loss_fn(params, batch):
  flat = jnp.concatenate([params["a"], params["b"]])
  return 0.5 * jnp.sum((flat - batch)**2), {}


def _split(vec, dtype=jnp.float32):
  return {"a": jnp.asarray(vec[:3], dtype), "b": jnp.asarray(vec[3:], dtype)}


def _flat(tree):
  return np.concatenate([np.asarray(tree["a"]), np.asarray(tree["b"])])


def _strategy_kwargs(name):
  """The factory arguments of `name` with the reference's settings."""
  kwargs = dict(communication_window=WINDOW, learning_rate=LR)
  if name == "aeasgd":
    kwargs.update(inner=optax.adam(LR), rho=RHO,
                  elastic_learning_rate=ELASTIC_LR)
  elif name == "eamsgd":  # Its Nesterov steps are its own, not an argument.
    kwargs.update(momentum=MOMENTUM, rho=RHO,
                  elastic_learning_rate=ELASTIC_LR)
  else:
    kwargs.update(inner=optax.sgd(LR))
  return kwargs


def _strategy(name):
  """`name` with the reference's settings and local optimizer."""
  return get_strategy(name, **_strategy_kwargs(name))


def _run_strategy(strategy, schedule=SCHEDULE, dtype=jnp.float32):
  """Drives the strategy's half-steps through `schedule`, in `dtype`.

  Returns:
    `(centers, stalenesses, params)`, one entry per commit; `params` are the
    committing worker's parameters after its commit and pull.
  """
  data = _data()
  kernel = window_kernel(_loss_fn, strategy.worker_transform, donate=False)
  center = _split(_initial_center(), dtype)
  server_state = strategy.rule.init(center)
  server_apply = jax.jit(strategy.server_apply)
  # Each worker's state, the center it last pulled and that center's clock.
  workers = [dict(state=strategy.init_worker(center), pulled=center, clock=0,
                  window=0) for _ in range(NUM_WORKERS)]
  centers, stalenesses, worker_params = [], [], []
  for k in schedule:
    w = workers[k]
    result = kernel(*w["state"], jnp.asarray(data[k, w["window"]]))
    w["window"] += 1
    if strategy.pull_before_commit:
      w["pulled"], w["clock"] = center, int(server_state.clock)
    payload, state = strategy.worker_commit(
        WorkerState(result.params, result.opt_state), w["pulled"])
    staleness = int(server_state.clock) - w["clock"]
    center, server_state, accepted = server_apply(center, server_state,
                                                  payload, staleness)
    if strategy.pulls_after_commit(bool(accepted)):
      w["pulled"], w["clock"] = center, int(server_state.clock)
    w["state"] = strategy.worker_receive(state, w["pulled"], bool(accepted))
    stalenesses.append(staleness)
    centers.append(_flat(center))
    worker_params.append(_flat(w["state"].params))
  return np.stack(centers), stalenesses, np.stack(worker_params)


class StrategyTrajectoryTest(parameterized.TestCase):

  @parameterized.parameters("agn", "downpour", "dynsgd", "adag", "aeasgd",
                            "eamsgd")
  def test_matches_paper_formulas(self, name):
    strategy = _strategy(name)
    centers, stalenesses, params = _run_strategy(strategy)
    ref = _trajectory(name)
    self.assertEqual(stalenesses, ref.stalenesses)
    # Adam divides by the gradients' running RMS, which makes float32's
    # rounding ~4e-6 here; in float64 the next test holds it to 1e-12.
    atol = 1e-5 if name == "aeasgd" else 2e-6
    np.testing.assert_allclose(centers, ref.centers, rtol=2e-5, atol=atol)
    np.testing.assert_allclose(params, ref.params, rtol=2e-5, atol=atol)
    # The schedule really is asynchronous.
    if name not in ELASTIC:
      self.assertGreater(max(stalenesses), 1)

  @parameterized.parameters("aeasgd", "eamsgd")
  def test_elastic_strategies_with_two_workers(self, name):
    # A few windows of two workers, pull-then-commit: every worker's
    # parameters and the center, commit by commit, against Adam (aeasgd) and
    # Zhang et al.'s Nesterov steps (eamsgd) in numpy.
    # In float64, so that the match is the algorithm's, not float32's.
    schedule = [0, 1, 1, 0, 0, 1, 1, 0]
    with jax.enable_x64(True):
      centers, stalenesses, params = _run_strategy(_strategy(name), schedule,
                                                   jnp.float64)
    self.assertEqual(centers.dtype, np.float64)
    ref = _trajectory(name, schedule=schedule)
    self.assertEqual(stalenesses, [0] * len(schedule))
    np.testing.assert_allclose(centers, ref.centers, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(params, ref.params, rtol=1e-12, atol=1e-12)
    # What the comparison tells apart: plain SGD steps, or α = ρ · LR.
    for other in (_trajectory(name, schedule=schedule, local="sgd"),
                  _trajectory(name, schedule=schedule, elastic_lr=LR)):
      self.assertGreater(np.max(np.abs(other.params - ref.params)), 1e-3)

  def test_nesterov_outer_optimizer(self):
    strategy = get_strategy(
        "agn", communication_window=WINDOW, inner=optax.sgd(LR),
        server_optimizer=strategies.make_server_optimizer("nesterov", 0.7, 0.9))
    centers, _, _ = _run_strategy(strategy)
    ref_centers, _ = _reference("agn", outer="nesterov")
    np.testing.assert_allclose(centers, ref_centers, rtol=2e-5, atol=2e-6)

  def test_delayed_nesterov_outer_optimizer(self):
    # Liu, Douillard et al. 2024's DN on the asynchronous schedule: 10
    # commits, momentum updated at the 3rd, 6th and 9th.
    strategy = get_strategy(
        "agn", communication_window=WINDOW, inner=optax.sgd(LR),
        server_optimizer=strategies.make_server_optimizer(
            "delayed_nesterov", 0.7, 0.9, every=3))
    centers, _, _ = _run_strategy(strategy)
    ref_centers, _ = _reference("agn", outer="delayed_nesterov", outer_every=3)
    np.testing.assert_allclose(centers, ref_centers, rtol=2e-5, atol=2e-6)
    # Not Nesterov on every commit.
    nesterov, _ = _reference("agn", outer="nesterov")
    self.assertGreater(np.max(np.abs(nesterov - ref_centers)), 1e-2)

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
    payload = {"delta": jnp.asarray([0.5, 0.5]),
               "stale_center": jnp.asarray([0.9, 1.0])}
    center, _ = jax.jit(rule.apply)(center, payload, rule.init(center), 0)
    np.testing.assert_allclose(center, [1.25, 1.5], rtol=1e-5)

  def test_aeasgd_alpha_is_rho_eta(self):
    # α = ρ · elastic_learning_rate; the local learning rate plays no part.
    for learning_rate in (0.01, 0.5):
      s = get_strategy("aeasgd", communication_window=2,
                       learning_rate=learning_rate, rho=5.0,
                       elastic_learning_rate=0.01)
      payload, state = s.worker_commit(WorkerState(jnp.asarray([2.0]), None),
                                       jnp.asarray([0.0]))
      np.testing.assert_allclose(payload["delta"], [0.1])  # 0.05 · 2
      np.testing.assert_allclose(state.params, [1.9])

  def test_eamsgd_pulls_on_zhangs_x_not_on_the_look_ahead(self):
    # η = 0.1, δ = 0.5, one step on gradient 1 from 0: v = -0.1, x = -0.1,
    # the worker holds y = x + δv = -0.15. With center 0 and α = 5 · 0.02:
    # E = 0.1 · x = -0.01; y -> -0.14 (x -> -0.09, v kept).
    s = get_strategy("eamsgd", learning_rate=0.1, momentum=0.5, rho=5.0,
                     elastic_learning_rate=0.02)
    y = jnp.zeros(1)
    updates, state = s.worker_transform.update(jnp.ones(1),
                                               s.worker_transform.init(y), y)
    y = optax.apply_updates(y, updates)
    np.testing.assert_allclose(y, [-0.15], rtol=1e-6)
    payload, (y, _) = s.worker_commit(WorkerState(y, state), jnp.zeros(1))
    np.testing.assert_allclose(payload["delta"], [-0.01], rtol=1e-5)
    np.testing.assert_allclose(y, [-0.14], rtol=1e-6)


_ALL = ("agn", "downpour", "dynsgd", "adag", "aeasgd", "eamsgd")


def _after_one_window(strategy):
  """`(state, center, payload)`: worker 0's first window and commit."""
  center = _split(_initial_center())
  result = window_kernel(_loss_fn, strategy.worker_transform, donate=False)(
      *strategy.init_worker(center), jnp.asarray(_data()[0, 0]))
  payload, state = strategy.worker_commit(
      WorkerState(result.params, result.opt_state), center)
  return state, center, payload


def _poisoned(payload):
  """`payload` with one NaN in its first vector."""
  delta = dict(payload["delta"], a=payload["delta"]["a"].at[1].set(jnp.nan))
  return dict(payload, delta=delta)


class HalfStepTest(parameterized.TestCase):
  """The pull order and the rejected commit, half-step by half-step."""

  @parameterized.parameters(*_ALL)
  def test_pull_order(self, name):
    # PAPER.md: the elastic strategies pull, then commit and keep their
    # parameters; the others commit, then restart from a fresh pull. A
    # rejected worker always pulls, to start afresh from the center.
    strategy = _strategy(name)
    self.assertEqual(strategy.pull_before_commit, name in ELASTIC)
    self.assertEqual(strategy.pulls_after_commit(True), name not in ELASTIC)
    self.assertTrue(strategy.pulls_after_commit(False))

  @parameterized.parameters(*_ALL)
  def test_a_non_finite_payload_changes_nothing_on_the_server(self, name):
    strategy = get_strategy(
        name, **dict(_strategy_kwargs(name), server_optimizer=(
            strategies.make_server_optimizer("nesterov"))))
    _, center, payload = _after_one_window(strategy)
    server_apply = jax.jit(strategy.server_apply)
    # One applied commit first, so that the outer optimizer has a trace.
    center, server_state, accepted = server_apply(
        center, strategy.rule.init(center), payload, 0)
    self.assertTrue(bool(accepted))
    self.assertEqual(int(server_state.clock), 1)
    new_center, new_state, accepted = server_apply(
        center, server_state, _poisoned(payload), 0)
    self.assertFalse(bool(accepted))
    self.assertFalse(bool(strategy.accepts(_poisoned(payload))))
    jax.tree.map(np.testing.assert_array_equal, (new_center, new_state),
                 (center, server_state))

  @parameterized.parameters(*_ALL)
  def test_a_rejected_worker_starts_afresh_from_the_center(self, name):
    strategy = _strategy(name)
    state, center, _ = _after_one_window(strategy)
    fresh = (center, strategy.worker_transform.init(center))
    # Python bools (the process worker) and traced ones (the simulator).
    receive = jax.jit(strategy.worker_receive)
    for rejected in (strategy.worker_receive(state, center, False),
                     receive(state, center, jnp.asarray(False))):
      jax.tree.map(np.testing.assert_array_equal, tuple(rejected), fresh)
    jax.tree.map(np.testing.assert_array_equal,
                 receive(state, center, jnp.asarray(True)),
                 strategy.worker_receive(state, center, True))
    # An accepted commit: what the paper's pull does to the parameters.
    params = _flat(strategy.worker_receive(state, center, True).params)
    expected = _flat(state.params if name in ELASTIC else center)
    np.testing.assert_array_equal(params, expected)

  def test_an_accepted_pull_keeps_the_leaves_it_does_not_change(self):
    # The simulator writes back only the leaves a half-step changed.
    strategy = get_strategy("agn", communication_window=WINDOW,
                            inner=optax.adam(LR))
    state, center, _ = _after_one_window(strategy)
    kept = strategy.worker_receive(state, center, True)
    adam, adam_kept = state.opt_state.inner_state[0], kept.opt_state.inner_state[0]
    self.assertIs(adam_kept.mu, adam.mu)
    self.assertIs(kept.opt_state.delta, state.opt_state.delta)
    self.assertIsNot(kept.params, state.params)


class RegistryTest(parameterized.TestCase):

  def test_all_paper_strategies(self):
    self.assertEqual(
        set(strategies.available()),
        {"agn", "downpour", "aeasgd", "eamsgd", "dynsgd", "adag",
         "sync_data_parallel", "diloco"})

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
    with self.assertRaisesRegex(ValueError, "elastic_learning_rate"):
      get_strategy("eamsgd", elastic_learning_rate=0.0)
    with self.assertRaisesRegex(ValueError, "momentum"):
      get_strategy("eamsgd", momentum=1.0)
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
    # EAMSGD's local steps are Nesterov's by definition.
    with self.assertRaisesRegex(TypeError, "'inner'"):
      get_strategy("eamsgd", inner=optax.sgd(0.1))

  def test_paper_defaults(self):
    # PAPER.md: AGN, DOWNPOUR, DynSGD and the thesis' ADAG with Adam 1e-3;
    # AEASGD as the thesis' grid ran it: Adam 1e-3, ρ = 5, elastic η = 0.01;
    # EAMSGD: Nesterov δ = 0.9, η = 0.01 for the steps and for α, ρ = 5.
    # AGN (and ADAG on AGN's delta) divide by the window.
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
        "worker_optimizer": "adam", "learning_rate": 1e-3, "rho": 5.0,
        "elastic_learning_rate": 0.01, "normalization": "none"})
    self.assertEqual(strategies.paper_defaults("eamsgd"), {
        "worker_optimizer": "nesterov", "learning_rate": 0.01,
        "momentum": 0.9, "rho": 5.0, "elastic_learning_rate": 0.01,
        "normalization": "none"})
    # A copy: changing it changes nothing.
    strategies.paper_defaults("agn")["learning_rate"] = 1.0
    self.assertEqual(strategies.paper_defaults("agn")["learning_rate"], 1e-3)
    with self.assertRaisesRegex(ValueError, "unknown strategy 'sgdx'"):
      strategies.paper_defaults("sgdx")

  def test_factory_defaults_are_the_paper_defaults(self):
    # Without arguments, aeasgd's workers are Adam(1e-3) and its α is 0.05:
    # Adam's first step on gradient 1 moves θ by -1e-3 (float32's 1 − β₂
    # aside); E = 0.05 (θ − θ̃).
    s = get_strategy("aeasgd")
    state = s.worker_transform.init(jnp.zeros(1))
    updates, _ = s.worker_transform.update(jnp.ones(1), state, jnp.zeros(1))
    np.testing.assert_allclose(updates, [-1e-3], rtol=1e-4)
    payload, _ = s.worker_commit(WorkerState(jnp.asarray([2.0]), None),
                                 jnp.asarray([0.0]))
    np.testing.assert_allclose(payload["delta"], [0.1])
    # eamsgd's: Nesterov, η = 0.01, δ = 0.9, on gradients 1, 1 (Zhang's
    # x + δv by hand: -0.019, then -0.0461): steps -0.019 and -0.0271.
    s = get_strategy("eamsgd")
    y = jnp.zeros(1)
    state = s.worker_transform.init(y)
    steps = []
    for _ in range(2):
      updates, state = s.worker_transform.update(jnp.ones(1), state, y)
      y = optax.apply_updates(y, updates)
      steps.append(float(updates[0]))
    np.testing.assert_allclose(steps, [-0.019, -0.0271], rtol=1e-6)
    payload, _ = s.worker_commit(
        WorkerState(jnp.asarray([2.0]), s.worker_transform.init(jnp.zeros(1))),
        jnp.asarray([0.0]))
    np.testing.assert_allclose(payload["delta"], [0.1])

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
