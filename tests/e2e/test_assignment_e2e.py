"""The end-to-end half of tests/unit/test_assignment.py: real processes, subprocesses or whole runs."""

import pytest

from agn_jax import shares
from test_assignment import _stream_config


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
