"""`--diagnostics` without a run: its instruments' names, the round without them, its settings.

The runs that measure them, against numpy on the center's trajectory, are
tests/e2e/test_diagnostics_e2e.py.
"""

import pytest

from agn_jax import TrainConfig, instruments
from agn_jax.data import load
from agn_jax.runtime import events
from agn_jax.sim.simulation import Simulation

NAMES = instruments.SCALARS + ("gradient_cosine",)


def test_the_row_fields_are_the_instruments():
  assert events.INSTRUMENTS == NAMES


@pytest.fixture(scope="module")
def digits():
  return load("digits")


def test_the_round_off_has_no_instrument_outputs(digits):
  config = TrainConfig(strategy="agn", num_workers=2, communication_window=2,
                       dataset="digits", hidden_sizes=(16,), batch_size=16,
                       epochs=0.1, backend="simulated")
  sim = Simulation.from_config(config, digits)
  assert sim.diagnostics is None and sim.diagnostics_info is None
  out = sim.lower_round().out_info
  assert out[3].instruments is None and len(out) == 4


@pytest.mark.parametrize("setting,value", [
    ("diagnostics_subsample", 1.5), ("diagnostics_subsample", 0.0),
    ("diagnostics_every", 0)])
def test_bad_settings_are_refused(setting, value):
  with pytest.raises(ValueError, match=f"{setting} accepts"):
    TrainConfig.from_dict({"backend": "simulated", setting: value}).validate()
