"""The end-to-end half of tests/unit/test_assignment.py: real processes, subprocesses or whole runs."""

import numpy as np
import pytest

from agn_jax import shares
from agn_jax.config import TrainConfig
from agn_jax.runtime.context import Faults, Slowdown


def _stream_simulation(speed_model, seed=0, epochs=2.0):
  # pylint: disable=g-import-not-at-top
  from agn_jax import data
  from agn_jax.config import SimulatedOptions
  from agn_jax.sim.simulation import Simulation
  config = TrainConfig(dataset="digits", num_workers=4, communication_window=4,
                       epochs=epochs, batch_size=16, hidden_sizes=(16,),
                       backend="simulated", data_assignment="stream",
                       seed=seed, options=SimulatedOptions(
                           cluster="none", speed_model=speed_model))
  return config, Simulation.from_config(config.validate(), data.load("digits"))


def _stream_config(tmp_path, **changes):
  from agn_jax.config import ProcessesOptions  # pylint: disable=g-import-not-at-top
  from helpers import tiny_config  # pylint: disable=g-import-not-at-top
  settings = dict(num_workers=3, communication_window=4, hidden_sizes=(16,),
                  batch_size=8, epochs=1.0, data_assignment="stream",
                  options=ProcessesOptions(cache_dir=""))
  return tiny_config(tmp_path, **dict(settings, **changes)).resolved()


@pytest.mark.parametrize("assignment", ["stream"])
def test_a_simulated_digits_run_records_each_workers_samples(tmp_path,
                                                             assignment):
  import json  # pylint: disable=g-import-not-at-top
  from tests.helpers import run_cli  # pylint: disable=g-import-not-at-top
  result = run_cli("--dataset=digits",
                   "--backend=simulated", "--num_workers=4",
                   "--communication_window=4", "--epochs=4",
                   "--hidden_sizes=16", "--speed_model=lognormal:1.0",
                   f"--data_assignment={assignment}", "--noplots",
                   "--nocheckpoints", f"--workdir={tmp_path}")
  assert result.returncode == 0, result.stderr[-2000:]
  summary = json.loads((tmp_path / "summary.json").read_text())
  samples = summary["samples_per_worker"]
  assert summary["data_assignment"] == assignment
  # The same budget in every mode: 4 windows of 4 × 16 samples a worker
  # for each of 4 epochs × 1,438 / 4 = 1,438 samples, 22 whole windows.
  share = (4 * 1438 // 4) // 64 * 64
  assert sum(samples) == 4 * share
  if assignment == "stream":
    assert max(samples) >= 1.5 * min(samples), samples
  else:
    assert samples == [share] * 4


def test_real_loops_resume_a_stream_where_its_checkpoint_stopped(tmp_path):
  # The server, workers and evaluator as threads: the server's checkpoint
  # records the stream's tickets, and a resume with more epochs goes on
  # from the tickets it had handed out, to the new budget, each step once.
  import dataclasses  # pylint: disable=g-import-not-at-top
  from helpers import metrics_rows, train_in_process  # pylint: disable=g-import-not-at-top
  first = _stream_config(tmp_path, epochs=0.5)
  train_in_process(first)
  summary, _, _ = train_in_process(
      dataclasses.replace(first, epochs=1.0, resume=True))
  assert summary["completed"], summary.get("outcome")
  share = shares.windows_per_worker(1438, 3, 1.0, 4, 8) * 4 * 8
  done = metrics_rows(tmp_path / "run", ["worker_done"])
  # Each sitting's workers report the samples of the whole run so far.
  assert sum(r["num_samples"] for r in done[-3:]) == 3 * share
  assert sum(r["num_samples"] for r in done[:3]) == 3 * (
      shares.windows_per_worker(1438, 3, 0.5, 4, 8) * 4 * 8)


@pytest.mark.parametrize("speed_model,fastest_over_slowest", [
    ("constant", (1.0, 1.0)), ("speeds:4,1,1,1", (2.5, 6.0))])
def test_a_simulated_stream_gives_fast_workers_more_and_spends_the_budget(
    speed_model, fastest_over_slowest):
  config, sim = _stream_simulation(speed_model)
  records = [r for rnd in sim for r in rnd]
  n, batch = config.num_workers, config.batch_size
  # The budget: every worker's share of whole windows, as in the other modes.
  share = shares.windows_per_worker(1438, n, config.epochs, 4, batch) * 4
  steps = [sim.steps_done(k) for k in range(n)]
  assert sum(steps) == n * share
  assert len(records) == n * share // 4
  # Each step of the stream was trained on once: the windows' tickets tile
  # [0, n × share) (from the schedule's state, as a checkpoint stores it).
  tickets = sorted(tuple(t) for mine in sim.state()["meta"]["schedule"][
      "tickets"] for t in mine)
  assert tickets[0][0] == 0 and all(a[0] + a[1] == b[0]
                                    for a, b in zip(tickets, tickets[1:]))
  low, high = fastest_over_slowest
  assert low <= max(steps) / min(steps) <= high, steps
  if speed_model != "constant":
    assert steps[0] == max(steps)  # Worker 0 is four times as fast.


def test_a_simulated_stream_is_deterministic_and_resumes_exactly():
  _, a = _stream_simulation("lognormal:1.0", seed=3, epochs=1.0)
  first = [[(r.meta.worker, r.staleness) for r in rnd] for rnd in a]
  _, b = _stream_simulation("lognormal:1.0", seed=3, epochs=1.0)
  for _ in range(3):
    b.run_round()
  saved = b.state()
  _, c = _stream_simulation("lognormal:1.0", seed=3, epochs=1.0)
  c.restore(saved)
  rest = [[(r.meta.worker, r.staleness) for r in rnd] for rnd in c]
  assert first[3:] == rest
  np.testing.assert_array_equal(a.center(), c.center())


# The stream on real loops: the server hands out its steps.


@pytest.mark.parametrize("strategy", ["agn", "aeasgd"])
def test_real_loops_hand_a_slowed_worker_fewer_of_the_streams_steps(
    tmp_path, strategy):
  from helpers import train_in_process  # pylint: disable=g-import-not-at-top
  # Worker 1 sleeps 100 ms a local step; the others train a step in well
  # under that, so they take most of the stream. (At 5 ms, and once at
  # 30 ms with a load average of 11 on 2 cores, thread scheduling left
  # another worker fewer steps.)
  config = _stream_config(tmp_path, strategy=strategy)
  summary, _, _ = train_in_process(
      config, Faults(slowdown=Slowdown(worker=1, seconds=0.1)))
  assert summary["completed"], summary.get("outcome")
  samples = summary["samples_per_worker"]
  # The budget: three shares of whole windows, as with shards.
  share = shares.windows_per_worker(1438, 3, 1.0, 4, 8) * 4 * 8
  assert sum(samples) == 3 * share
  # The slowed worker takes the fewest, and fewer than an equal share. (On
  # a loaded machine one fast thread can starve the other: a tie at one
  # window is then allowed.)
  assert samples[1] == min(samples) and samples[1] < share, samples
  # Every commit's window was a whole λ (the budget divides into them).
  assert sum(summary["worker_commits"]) == 3 * share // 32
