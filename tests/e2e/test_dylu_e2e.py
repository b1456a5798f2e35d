"""The end-to-end half of tests/unit/test_dylu.py: real processes, subprocesses or whole runs."""

import dataclasses

import numpy as np
import pytest

from agn_jax import TrainConfig
from agn_jax.config import ProcessesOptions, SimulatedOptions
from agn_jax.data import load
from agn_jax.runtime import train
from agn_jax.runtime.context import Faults, Slowdown
from agn_jax.shares import windows_per_worker
from agn_jax.sim.simulation import Simulation
from helpers import metrics_rows, tiny_config, train_in_process
from test_dylu import _by_hand


def _digits_config(dynamic, speed_model, **overrides):
  values = dict(strategy="agn", num_workers=3, communication_window=6,
                dataset="digits", hidden_sizes=(16,), batch_size=8,
                epochs=0.5, learning_rate=3e-3, seed=0, backend="simulated",
                dynamic_local_updates=dynamic,
                options=SimulatedOptions(speed_model=speed_model))
  values.update(overrides)
  return TrainConfig(**values)


def _rows_samples(workdir):
  return sum(r["num_samples"] for r in metrics_rows(workdir, ["worker_done"]))


def _slowed_run(tmp_path, run):
  """A real run of 2 workers in which worker 1 sleeps 10 ms a local step.

  A digits step of this MLP takes well under 1 ms: once the planner has
  both workers' step times, worker 1's windows shrink to 1 or 2 steps and
  worker 0 keeps λ = 8. A worker's first window is no measurement (it holds
  the kernel's set-up), and until worker 0's is measured worker 1 is the
  only speed known, so its windows stay λ: on a loaded machine worker 0's
  set-up can take that long, so the checks count from there. Two epochs
  (worker 1's share about 1.8 s of sleep) leave room for it. `run(config,
  faults)` trains.
  """
  lam, batch = 8, 8
  config = tiny_config(tmp_path, num_workers=2, communication_window=lam,
                       hidden_sizes=(16,), batch_size=batch, epochs=2.0,
                       dynamic_local_updates=True,
                       options=ProcessesOptions(cache_dir="")).resolved()
  summary = run(config, Faults(slowdown=Slowdown(worker=1, seconds=0.01)))
  assert summary["completed"] and summary["expected_commits"] is None
  assert summary["local_updates"][0] == lam
  assert summary["local_updates"][1] in (1, 2)
  fast, slow = summary["local_updates_histogram"]
  assert fast.get(str(lam), 0) >= sum(fast.values()) - 1, fast
  # Each window worker 1 was given once both step times were known (after
  # worker 0's second commit and its own second) follows the speeds.
  commits = metrics_rows(tmp_path / "run", ["commit"])
  measured = max([i for i, r in enumerate(commits) if r["worker"] == 0][1],
                 [i for i, r in enumerate(commits) if r["worker"] == 1][1])
  planned = [r["local_updates"] for i, r in enumerate(commits)
             if r["worker"] == 1 and i > measured][1:]
  assert planned and max(planned) <= 2, planned
  share = windows_per_worker(len(load("digits", seed=0).x_train), 2, 2.0, lam,
                             batch) * lam
  assert sum(int(k) * v for k, v in slow.items()) == share
  assert sum(slow.values()) == summary["worker_commits"][1] > 2 * sum(
      fast.values())
  assert _rows_samples(tmp_path / "run") == 2 * share * batch
  assert all(len(r["step_accuracy"]) == r["local_updates"] for r in commits)


@pytest.fixture(scope="module")
def digits():
  return load("digits", seed=0)


# soak: test_real_loops_give_a_slowed_worker_a_shorter_window covers the
# planner shortening a slowed worker's windows, through the same server and
# worker loops (as threads), in the suite.
@pytest.mark.soak
def test_real_processes_give_a_slowed_worker_a_shorter_window(tmp_path):
  _slowed_run(tmp_path,
              lambda config, faults: train(config, faults=faults))


def test_real_loops_resume_each_worker_at_its_local_steps(tmp_path):
  # The server's checkpoint holds each worker's local steps; resumed with
  # more epochs, each worker goes on from there to its new share.
  slow = Faults(slowdown=Slowdown(worker=1, seconds=0.005))
  config = TrainConfig(strategy="agn", num_workers=2, communication_window=8,
                       dataset="digits", hidden_sizes=(16,), batch_size=8,
                       epochs=0.5, eval_every_seconds=0.0,
                       dynamic_local_updates=True,
                       workdir=str(tmp_path / "run"),
                       options=ProcessesOptions(cache_dir="")).resolved()
  train_in_process(config, slow)
  summary, _, _ = train_in_process(
      dataclasses.replace(config, epochs=1.0, resume=True), slow)
  assert summary["completed"]
  share = windows_per_worker(len(load("digits", seed=0).x_train), 2, 1.0, 8,
                             8) * 8
  for counts in summary["local_updates_histogram"]:
    assert sum(int(k) * v for k, v in counts.items()) == share
  done = metrics_rows(tmp_path / "run", ["worker_done"])[-2:]
  assert [r["num_samples"] for r in done] == [share * 8] * 2


def test_equal_speeds_change_nothing(digits):
  plain = Simulation.from_config(_digits_config(False, "constant"), digits)
  dynamic = Simulation.from_config(_digits_config(True, "constant"), digits)
  assert dynamic.local_updates == (6, 6, 6)
  a = [r._replace(window_round=0) for rr in plain for r in rr]
  b = [r._replace(window_round=0) for rr in dynamic for r in rr]
  assert a == b
  np.testing.assert_array_equal(plain.center(), dynamic.center())


def test_per_worker_speeds_give_the_formula_and_keep_the_data_budget(digits):
  speeds = (1.0, 0.5, 0.3)
  model = "speeds:1,0.5,0.3"
  plain = Simulation.from_config(_digits_config(False, model), digits)
  dynamic = Simulation.from_config(_digits_config(True, model), digits)
  assert dynamic.local_updates == _by_hand(6, speeds) == (6, 3, 2)
  share = windows_per_worker(len(digits.x_train), 3, 0.5, 6, 8)
  a = [r for rr in plain for r in rr]
  b = [r for rr in dynamic for r in rr]
  for k, lam_k in enumerate(dynamic.local_updates):
    steps = [r.meta.local_updates for r in b if r.meta.worker == k]
    assert sum(steps) == share * 6 == sum(
        r.meta.local_updates for r in a if r.meta.worker == k)
    assert steps[:-1] == [lam_k] * (len(steps) - 1)
    assert len(steps) == -(-share * 6 // lam_k)
    assert len(b[0].meta.step_metrics["accuracy"]) == b[0].meta.local_updates


def test_a_restored_simulation_continues_exactly(digits):
  config = _digits_config(True, "speeds:1,0.5,0.3")
  whole = Simulation.from_config(config, digits)
  expected = [r for rr in whole for r in rr]
  first = Simulation.from_config(config, digits)
  records = first.run_round() + first.run_round() + first.run_round()
  second = Simulation.from_config(config, digits)
  second.restore(first.state())
  records += [r for rr in second for r in rr]
  assert [(r.meta.worker, r.meta.local_updates, r.staleness) for r in records] == [
      (r.meta.worker, r.meta.local_updates, r.staleness) for r in expected]
  np.testing.assert_array_equal(second.center(), whole.center())


def test_a_simulated_run_records_each_workers_local_updates(tmp_path):
  runs = {}
  for dynamic in (False, True):
    workdir = str(tmp_path / f"run-{dynamic}")
    config = _digits_config(dynamic, "speeds:1,0.5,0.3", epochs=4.0,
                            eval_every_seconds=0.0, workdir=workdir)
    runs[dynamic] = train(config), workdir
  summary, workdir = runs[True]
  assert summary["completed"]
  examples = len(load("digits", seed=0).x_train)
  share = windows_per_worker(examples, 3, 4.0, 6, 8) * 6  # Local steps each.
  counts = {str(lam_k): share // lam_k for lam_k in (6, 3, 2)}
  assert summary["local_updates"] == summary["simulation"]["local_updates"] == [
      6, 3, 2]
  assert summary["local_updates_histogram"] == [
      {"6": counts["6"]}, {"3": counts["3"]}, {"2": counts["2"]}]
  assert summary["num_commits"] == summary["expected_commits"] == sum(
      counts.values())
  assert "local_updates" not in runs[False][0]
  assert "local_updates_histogram" not in runs[False][0]
  assert _rows_samples(workdir) == _rows_samples(runs[False][1]) == (
      3 * share * 8)
  assert summary["final_test_accuracy"] > 0.8


def test_a_simulated_run_trains_longer_on_resume(tmp_path):
  # Its checkpoint counts each worker's windows (more than the share's
  # windows of λ) and local steps; a resume with more epochs goes on.
  workdir = str(tmp_path / "run")
  config = _digits_config(True, "speeds:1,0.5,0.3", epochs=2.0,
                          eval_every_seconds=0.0, workdir=workdir)
  first = train(config)
  share = windows_per_worker(len(load("digits", seed=0).x_train), 3, 2.0, 6,
                             8) * 6
  assert first["worker_commits"] == [share // 6, share // 3, share // 2]
  longer = train(dataclasses.replace(config, epochs=4.0, resume=True))
  share = windows_per_worker(len(load("digits", seed=0).x_train), 3, 4.0, 6,
                             8) * 6
  assert longer["completed"]
  assert longer["worker_commits"] == [share // 6, share // 3, share // 2]
  assert longer["local_updates_histogram"] == [
      {"6": share // 6}, {"3": share // 3}, {"2": share // 2}]
  done = metrics_rows(workdir, ["worker_done"])[-3:]
  assert [r["num_samples"] for r in done] == [share * 8] * 3


def test_real_loops_give_a_slowed_worker_a_shorter_window(tmp_path):
  """The server, workers and evaluator as threads (`helpers.train_in_process`)."""
  _slowed_run(tmp_path,
              lambda config, faults: train_in_process(config, faults)[0])
