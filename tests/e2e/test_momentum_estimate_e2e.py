"""μ̂ (`agn_jax.instruments.MomentumEstimate`) on whole simulated runs, against momentum known by construction.

One worker committing every local step (DOWNPOUR, λ = 1) moves the center
by exactly its optimizer's steps. With heavy-ball momentum δ those steps are
`s_t = δ s_{t−1} − η g_t`, the model μ̂ is the least-squares slope of, so μ̂
must find δ; plain SGD (δ = 0) must find about 0. Small batches keep the
fresh gradient noise `g_t` dominant over the drift of its mean, which
otherwise lifts the slope (docs/algorithms.md, "how far off and why").
"""

import pytest

from agn_jax import TrainConfig
from agn_jax.config import SimulatedOptions
from agn_jax.sim.simulation import Simulation
from test_diagnostics import digits  # pylint: disable=unused-import


def _momentum_estimate(dataset, **overrides):
  """μ̂ after a whole simulated run, at its last applied commit."""
  values = dict(strategy="downpour", num_workers=1, communication_window=1,
                dataset="digits", hidden_sizes=(16,), batch_size=2,
                epochs=0.5, learning_rate=0.05, seed=0, backend="simulated",
                diagnostics=True)
  values.update(overrides)
  sim = Simulation.from_config(TrainConfig(**values), dataset)
  last = None
  while not sim.done:
    for handled in sim.run_round():
      last = handled
  assert sim.num_commits > 300  # Enough pairs: standard error ~ 0.02.
  return last.instruments["implicit_momentum"]


@pytest.mark.parametrize("optimizer,momentum", [("momentum", 0.9),
                                                ("sgd", 0.0)])
def test_one_worker_gives_its_optimizers_momentum(digits, optimizer,
                                                  momentum):
  extra = {"momentum": momentum} if optimizer == "momentum" else {}
  mu = _momentum_estimate(digits, worker_optimizer=optimizer, **extra)
  assert abs(mu - momentum) <= 0.05, mu


def test_asynchronys_momentum_is_lost_in_the_noise(digits):
  # Plain-SGD DOWNPOUR with exponential window times, Mitliagkas et al.'s
  # setting: their 1 − 1/n = 0.75 is the expected step's momentum. A stale
  # gradient's fresh mini-batch noise is not carried into the next step, so
  # with batches of 2 the lag-1 slope stays near 0 (docs/algorithms.md).
  mu = _momentum_estimate(digits, num_workers=4, worker_optimizer="sgd",
                          options=SimulatedOptions(speed_model="exponential"))
  assert abs(mu) <= 0.1, mu
