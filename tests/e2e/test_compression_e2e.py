"""The end-to-end half of tests/unit/test_compression.py: real processes, subprocesses or whole runs."""

import math

import numpy as np
import pytest

from agn_jax import TrainConfig, data
from agn_jax.sim.simulation import Simulation
from test_compression import _digits_sim, digits_runs  # pylint: disable=unused-import


def test_a_restored_simulation_keeps_its_residuals(digits_runs):
  int8, _ = digits_runs["int8"]
  config = TrainConfig(strategy="agn", num_workers=4, communication_window=5,
                       dataset="digits", hidden_sizes=(32,), batch_size=16,
                       epochs=4.0, learning_rate=3e-3,
                       commit_compression="int8", backend="simulated")
  ds = data.load("digits", seed=0)
  first = Simulation.from_config(config, ds)
  for _ in range(3):
    first.run_round()
  state = first.state()
  assert np.any(state["arrays"]["workers"].residual)
  second = Simulation.from_config(config, ds)
  second.restore(state)
  for _ in second:
    pass
  np.testing.assert_array_equal(second.center(), int8.center())


# soak: test_a_lossless_code_commits_exactly_as_none covers topk:1 keeping
# the centers and the worker's parameters bit for bit as none's, through the
# strategy the simulator runs, in the suite.
@pytest.mark.soak
def test_a_lossless_code_simulates_exactly_as_none(digits_runs):
  none, _ = digits_runs["none"]
  lossless, _ = _digits_sim("topk:1")
  np.testing.assert_array_equal(lossless.center(), none.center())


@pytest.mark.parametrize("backend", [
    "processes", "simulated",
    # soak: [processes] covers the count of a process worker's int8 commits
    # and pulls (the books Ray's workers share) in the suite, and
    # tests/e2e/test_transport_conformance_e2e.py's [ray] cases the Ray transport
    # carrying a commit's arrays whole.
    pytest.param("ray", marks=pytest.mark.soak)])
def test_every_backend_counts_the_int8_bytes_it_moved(tmp_path, backend):
  if backend == "ray":
    pytest.importorskip("ray")
  from agn_jax.runtime import train  # pylint: disable=g-import-not-at-top
  summary = train(TrainConfig(num_workers=2, communication_window=5,
                              hidden_sizes=(16,), batch_size=32, epochs=2.0,
                              eval_every_seconds=0.0, backend=backend,
                              commit_compression="int8",
                              workdir=str(tmp_path / "run")))
  p = 64 * 16 + 16 + 16 * 10 + 10
  commits = sum(summary["worker_commits"])
  assert summary["completed"] and summary["rejected_commits"] == 0
  assert summary["bytes_committed"] == commits * (p + 4 * math.ceil(p / 1024))
  # A process worker pulls to start and after each commit; the simulator
  # charges one center per commit.
  pulls = commits + (0 if backend == "simulated" else 2)
  assert summary["bytes_pulled"] == pulls * 4 * p
