"""The end-to-end half of tests/unit/test_dylu.py: real processes, subprocesses or whole runs."""

import dataclasses

import pytest

from agn_jax import TrainConfig
from agn_jax.config import ProcessesOptions
from agn_jax.data import load
from agn_jax.runtime import train
from agn_jax.runtime.context import Faults, Slowdown
from agn_jax.shares import windows_per_worker
from helpers import metrics_rows, train_in_process
from test_dylu import _rows_samples, _slowed_run


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
