"""Programs kept across the runs of one process (`agn_jax.kept`): reused, and computing exactly what a fresh build computes."""
# pylint: disable=protected-access

import dataclasses

import numpy as np

from agn_jax import data, kept
from agn_jax.config import SimulatedOptions, TrainConfig
from agn_jax.sim.simulation import Simulation


def _config(seed, **changes):
  return dataclasses.replace(TrainConfig(
      strategy="agn", num_workers=2, communication_window=2,
      hidden_sizes=(8,), batch_size=16, epochs=0.1, seed=seed,
      backend="simulated", dataset="digits",
      options=SimulatedOptions(speed_model="speeds:2,1")), **changes)


def _center_after_rounds(sim, rounds=3):
  for _ in range(rounds):
    sim.run_round()
  return sim.center()


def test_a_second_run_reuses_the_programs_and_computes_what_a_fresh_build_does():
  digits = data.load("digits", seed=0)
  kept.forget()
  first = Simulation.from_config(_config(0), digits)
  second = Simulation.from_config(_config(1), digits)  # Another seed.
  assert second.strategy is first.strategy
  assert second._round_fn is first._round_fn
  assert second._restart_fn is first._restart_fn
  seed_0 = _center_after_rounds(first)
  reused = _center_after_rounds(second)
  assert not np.array_equal(seed_0, reused)
  kept.forget()
  fresh = Simulation.from_config(_config(1), digits)
  assert fresh._round_fn is not second._round_fn
  np.testing.assert_array_equal(_center_after_rounds(fresh), reused)


def test_another_setting_builds_its_own():
  digits = data.load("digits", seed=0)
  one = Simulation.from_config(_config(0), digits)
  for changed in (dict(communication_window=3), dict(learning_rate=1e-2),
                  dict(hidden_sizes=(9,))):
    other = Simulation.from_config(_config(0, **changed), digits)
    assert other._round_fn is not one._round_fn, changed
