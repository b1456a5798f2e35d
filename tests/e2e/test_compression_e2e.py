"""The end-to-end half of tests/unit/test_compression.py: real processes, subprocesses or whole runs."""

import json
import math
import os

import numpy as np
import pytest

from agn_jax import TrainConfig, data
from agn_jax.config import ProcessesOptions, SimulatedOptions
from agn_jax.sim.simulation import Simulation
from helpers import train_in_process


def _digits_sim(compress, epochs=4.0, seed=0):
  config = TrainConfig(strategy="agn", num_workers=4, communication_window=5,
                       dataset="digits", hidden_sizes=(32,), batch_size=16,
                       epochs=epochs, learning_rate=3e-3, seed=seed,
                       commit_compression=compress, backend="simulated")
  ds = data.load("digits", seed=seed)
  sim = Simulation.from_config(config, ds)
  for _ in sim:
    pass
  return sim, ds


@pytest.fixture(scope="module")
def digits_runs():
  return {name: _digits_sim(name) for name in ("none", "int8")}


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
    # soak: tests/e2e/test_workloads_e2e.py's
    # test_the_language_model_on_processes_with_int8_commits covers the count
    # of a process worker's int8 commits and pulls, and
    # test_threads_backend_counts_the_bytes_it_sent two workers' counts summed
    # by the books they share, in the suite.
    pytest.param("processes", marks=pytest.mark.soak),
    "simulated",
    # soak: the same two tests cover the count of a worker's int8 commits
    # and pulls (the books Ray's workers share), and the transport
    # conformance suite's [ray] cases (in tests/e2e/test_ray_backend.py) the
    # Ray transport carrying a commit's arrays whole, in the suite.
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


def test_int8_commits_train_as_well_as_float32(digits_runs):
  (none, ds), (int8, _) = digits_runs["none"], digits_runs["int8"]
  accuracy_none = none.evaluate(ds.x_test, ds.y_test)[1]["accuracy"]
  accuracy_int8 = int8.evaluate(ds.x_test, ds.y_test)[1]["accuracy"]
  assert accuracy_none > 0.8
  assert abs(float(accuracy_int8) - float(accuracy_none)) <= 0.01
  assert np.abs(int8.center() - none.center()).max() > 0  # It did compress.


def test_the_simulator_counts_and_charges_compressed_bytes(digits_runs):
  none, _ = digits_runs["none"]
  int8, _ = digits_runs["int8"]
  p = none.layout.num_params
  assert none.commit_bytes == 4 * p
  assert int8.commit_bytes == p + 4 * math.ceil(p / 1024)
  commits = int8.clock // 4
  assert int8.traffic(0) == {"bytes_committed": commits * int8.commit_bytes,
                             "bytes_pulled": commits * 4 * p}


def test_threads_backend_counts_the_bytes_it_sent(tmp_path):
  lam, batch, windows = 5, 32, 3
  ds = data.load("digits", seed=0)
  epochs = (windows * lam * batch * 2 + 1) / len(ds.x_train)
  config = TrainConfig(num_workers=2, communication_window=lam,
                       dataset="digits", hidden_sizes=(16,), batch_size=batch,
                       epochs=epochs, eval_every_seconds=0.0,
                       commit_compression="topk:0.05",
                       workdir=str(tmp_path / "run"),
                       options=ProcessesOptions(cache_dir="")).resolved()
  summary, _, _ = train_in_process(config)
  p = 64 * 16 + 16 + 16 * 10 + 10
  k = math.ceil(0.05 * p)
  assert summary["num_commits"] == 2 * windows
  assert summary["bytes_committed"] == 2 * windows * 8 * k
  # Each worker pulls once to start and once after each of its commits.
  assert summary["bytes_pulled"] == 2 * (windows + 1) * 4 * p


# --- Accuracy against bytes ------------------------------------------------------


def test_compare_plots_accuracy_against_the_bytes_each_run_moved(tmp_path):
  from agn_jax.runtime import train  # pylint: disable=g-import-not-at-top
  from experiments import curves, plots  # pylint: disable=g-import-not-at-top
  p = 64 * 16 + 16 + 16 * 10 + 10
  # What one commit moves, by hand: the commit as sent plus a float32 center.
  per_commit = {"none": 4 * p + 4 * p,
                "int8": p + 4 * math.ceil(p / 1024) + 4 * p}
  runs = []
  for code in per_commit:
    summary = train(TrainConfig(
        num_workers=2, communication_window=5, hidden_sizes=(16,),
        batch_size=32, epochs=2.0, backend="simulated",
        commit_compression=code, workdir=str(tmp_path / code),
        options=SimulatedOptions(eval_every_rounds=2)))
    run = curves.read_run(str(tmp_path / code))
    moved, accuracy = curves.bytes_curve(run)
    with open(tmp_path / code / "metrics.jsonl") as f:
      evals = [r for r in map(json.loads, f) if r.get("event") == "eval"]
    assert moved.tolist() == sorted(e["clock"] * per_commit[code]
                                    for e in evals)
    assert moved[-1] == summary["num_commits"] * per_commit[code]
    assert accuracy[-1] == summary["final_test_accuracy"]
    runs.append(run)
  path = plots.plot_comparison(runs, str(tmp_path / "compare.png"))
  assert os.path.getsize(path) > 0
