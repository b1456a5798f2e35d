"""Tests for TrainConfig.resolved and build.build_strategy: paper defaults reach the strategy.

Every expected number is worked out by hand from PAPER.md's settings.
"""

import dataclasses

import jax.numpy as jnp
import numpy as np
import optax
import pytest

from agn_jax import build, commit_delta
from agn_jax import config as config_lib
from agn_jax import strategies
from agn_jax.config import TrainConfig


def test_config_keeps_no_copy_of_the_owners_lists():
  for name in ("STRATEGIES", "MODELS", "PLATFORMS", "DATASETS",
               "WORKER_OPTIMIZERS", "SERVER_OPTIMIZERS"):
    assert not hasattr(config_lib, name), name


def test_strategy_settings_default_to_none_and_name_config_fields():
  config = TrainConfig()
  for name in ("worker_optimizer", "learning_rate", "momentum", "rho",
               "elastic_learning_rate", "normalization"):
    assert getattr(config, name) is None, name
  fields = {f.name for f in dataclasses.fields(TrainConfig)}
  assert set(config_lib.STRATEGY_SETTINGS) <= fields
  assert set(config_lib.STRATEGY_SETTINGS) == {
      "worker_optimizer", "learning_rate", "momentum", "rho",
      "elastic_learning_rate", "normalization", "server_optimizer",
      "server_learning_rate", "server_momentum", "server_every"}


@pytest.mark.parametrize("strategy, expected, alpha", [
    ("agn", ("adam", 1e-3, 0.9, 5.0, 0.01, "window"), None),
    ("downpour", ("adam", 1e-3, 0.9, 5.0, 0.01, "none"), None),
    ("dynsgd", ("adam", 1e-3, 0.9, 5.0, 0.01, "none"), None),
    ("adag", ("adam", 1e-3, 0.9, 5.0, 0.01, "window"), None),
    # The thesis' AEASGD: Adam 1e-3 locally, α = 5 · 0.01.
    ("aeasgd", ("adam", 1e-3, 0.9, 5.0, 0.01, "none"), 0.05),
    ("eamsgd", ("nesterov", 0.01, 0.9, 5.0, 0.01, "none"), 0.05),
])
def test_resolved_fills_the_paper_defaults(strategy, expected, alpha):
  resolved = TrainConfig(strategy=strategy).resolved()
  assert (resolved.worker_optimizer, resolved.learning_rate,
          resolved.momentum, resolved.rho, resolved.elastic_learning_rate,
          resolved.normalization) == expected
  assert resolved.elastic_alpha() == pytest.approx(alpha)
  assert resolved.to_record()["elastic_alpha"] == pytest.approx(alpha)
  assert resolved.is_resolved()
  assert resolved.resolved() == resolved  # Idempotent.


def test_resolved_keeps_what_was_set():
  config = TrainConfig(strategy="aeasgd", learning_rate=0.1, rho=2.0)
  resolved = config.resolved()
  assert (resolved.worker_optimizer, resolved.learning_rate, resolved.rho) == (
      "adam", 0.1, 2.0)
  assert resolved.elastic_alpha() == pytest.approx(2.0 * 0.01)
  assert config.elastic_alpha() is None  # Not resolved yet.
  assert config.learning_rate == 0.1 and config.worker_optimizer is None
  assert not config.is_resolved()
  with pytest.raises(ValueError, match="unknown strategy 'nope'"):
    TrainConfig(strategy="nope").resolved()


def _local_updates(strategy, grads, params):
  """The worker transformation's updates for a sequence of gradients."""
  tx = strategy.worker_transform
  state = tx.init(params)
  out = []
  for g in grads:
    updates, state = tx.update(jnp.asarray(g), state, params)
    params = optax.apply_updates(params, updates)
    out.append(np.asarray(updates))
  return out, params, state


@pytest.mark.parametrize("settings, step, delta", [
    # Adam 1e-3: its first step on gradient 1 is -1e-3. α = ρη = 5 · 0.01:
    # θ = 2, θ̃ = 0 -> E = 0.1, θ -> 1.9.
    ({}, -1e-3, 0.1),
    # --learning_rate is the local optimizer's alone; α follows
    # --elastic_learning_rate (5 · 0.02 · 2 = 0.2).
    (dict(learning_rate=0.5), -0.5, 0.1),
    (dict(elastic_learning_rate=0.02), -1e-3, 0.2),
])
def test_aeasgd_is_built_with_its_paper_defaults(settings, step, delta):
  strategy = build.build_strategy(
      TrainConfig(strategy="aeasgd", communication_window=2, **settings))
  updates, _, _ = _local_updates(strategy, [[1.0]], jnp.zeros(1))
  np.testing.assert_allclose(updates[0], [step], rtol=1e-4)
  commit, params, _ = strategy.commit_fn(jnp.asarray([2.0]), None,
                                         jnp.asarray([0.0]))
  np.testing.assert_allclose(commit["delta"], [delta], rtol=1e-6)
  np.testing.assert_allclose(params, [2.0 - delta], rtol=1e-6)


def test_eamsgd_workers_use_nesterov_09():
  # Zhang et al.'s v ← δv − η ∇f(x + δv), x ← x + v with η = 0.01, δ = 0.9,
  # gradients 1, 1; the worker holds y = x + δv: v = -0.01, -0.019;
  # x = -0.01, -0.029; y = -0.019, -0.0461: updates -0.019, -0.0271.
  strategy = build.build_strategy(
      TrainConfig(strategy="eamsgd", communication_window=2))
  updates, _, _ = _local_updates(strategy, [[1.0], [1.0]], jnp.zeros(1))
  np.testing.assert_allclose(np.concatenate(updates), [-0.019, -0.0271],
                             rtol=1e-6)


def test_agn_is_built_with_adam_1e3():
  # Adam's first step is -lr · g / |g| (bias-corrected, eps negligible).
  strategy = build.build_strategy(
      TrainConfig(strategy="agn", communication_window=1))
  _, params, state = _local_updates(strategy, [[3.0, -0.5]], jnp.zeros(2))
  # λ = 1: the committed delta is the step itself.
  np.testing.assert_allclose(commit_delta(state), [-1e-3, 1e-3], rtol=1e-4)
  np.testing.assert_allclose(params, [-1e-3, 1e-3], rtol=1e-4)


@pytest.mark.parametrize("normalization, expected", [
    # SGD(0.5), λ = 2, gradient (3, 4) twice: a = -0.5 · 2 · (3, 4) = (-3, -4).
    ("window", [-1.5, -2.0]),  # a / λ
    ("none", [-3.0, -4.0]),  # a
    ("l2", [-0.6, -0.8]),  # a / ‖a‖ = a / 5
])
def test_normalization_reaches_agn(normalization, expected):
  strategy = build.build_strategy(TrainConfig(
      strategy="agn", communication_window=2, worker_optimizer="sgd",
      learning_rate=0.5, normalization=normalization))
  _, _, state = _local_updates(strategy, [[3.0, 4.0]] * 2, jnp.zeros(2))
  np.testing.assert_allclose(commit_delta(state), expected, rtol=1e-6)


@pytest.mark.parametrize("changes, message", [
    (dict(strategy="eamsgd", worker_optimizer="adam"), "momentum"),
    (dict(strategy="eamsgd", worker_optimizer="momentum"), "nesterov"),
    (dict(strategy="downpour", normalization="l2"), "normalization"),
    (dict(strategy="aeasgd", normalization="window"), "normalization"),
    (dict(strategy="agn", normalization="max"), "normalization"),
    (dict(worker_optimizer="rmsprop"), "worker_optimizer"),
    (dict(server_optimizer="adamw"), "server_optimizer"),
    (dict(strategy="sgdx"), "unknown strategy"),
])
def test_settings_a_strategy_cannot_honour_are_errors(changes, message):
  config = TrainConfig(**changes)
  with pytest.raises(ValueError, match=message):
    build.check_strategy_settings(config)
  with pytest.raises(ValueError, match=message):
    build.build_strategy(config)


def test_the_strategy_own_normalization_is_accepted():
  # DOWNPOUR's raw delta is "none"; saying so explicitly is fine.
  config = TrainConfig(strategy="downpour", normalization="none")
  assert build.check_strategy_settings(config) == config.resolved()
  assert build.build_strategy(config).name == "downpour"


def test_every_registered_strategy_builds_from_a_default_config():
  for name in strategies.available():
    # A synchronous strategy runs on the simulator, with its own window.
    settings = (dict(backend="simulated", communication_window=(
        strategies.get_strategy(name).communication_window))
                if strategies.is_synchronous(name) else {})
    assert build.build_strategy(TrainConfig(strategy=name,
                                            **settings)).name == name
