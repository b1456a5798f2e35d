"""The fifth strategy (tests/fifth_strategy.py) on one simulated worker, real processes and Ray.

The rest of the suite, and the numpy replay every run is checked against,
is tests/unit/test_fifth_strategy.py.
"""

import numpy as np
import pytest

from agn_jax.runtime import train
from test_fifth_strategy import WINDOWS, _check, _config, _dataset, check_simulated


# One worker on the simulator costs a compilation of its own; two run in
# tests/unit/test_fifth_strategy.py.
@pytest.mark.parametrize("num_workers", [1])
def test_simulated(tmp_path, num_workers):
  check_simulated(tmp_path, num_workers)


# Real processes and a real local Ray.
@pytest.mark.parametrize("backend", [
    "processes",
    # soak: [processes] covers a strategy named by its import path reaching
    # the backends' worker and server in the suite (Ray actors build it the
    # same way, from the same config).
    pytest.param("ray", marks=pytest.mark.soak)])
def test_processes_and_ray(tmp_path, backend):
  if backend == "ray":
    pytest.importorskip("ray")
  dataset = _dataset()
  config = _config(tmp_path / "run", backend, 1)
  summary = train(config, dataset=dataset)
  assert summary["num_commits"] == summary["expected_commits"] == WINDOWS
  center = np.load(tmp_path / "run" / "center.npy")
  commits = _check(config, dataset, center, tmp_path / "run")
  assert [row["staleness"] for row in commits] == [0] * WINDOWS
