"""The workload of tests/regression_workload.py on real processes (the command line), on the simulator and on the real loops as threads, each run against numpy's replay; the built-in language-model task on processes (its commits int8-compressed).

The names, the evaluation and E are tests/unit/test_workloads.py. On Ray,
tests/e2e/test_ray_backend.py's SIGKILLed driver's workers train the
workload (its run against the replay there is soak), and the language model
runs on that module's Ray instance.
"""

import json
import math

import numpy as np
import pytest

from agn_jax import TrainConfig
from agn_jax.config import ProcessesOptions
from agn_jax.runtime import train
from agn_jax.runtime.backends.inprocess import InProcessBackend
from agn_jax.runtime.bookkeeping import RunBook
from helpers import (assert_nothing_left, metrics_rows, run_cli,
                     shakespeare_data_dir)
from test_workloads import (DATASET, EXAMPLES, LR, MODEL, TASK, WINDOW,
                            WINDOWS, check_run, workload_config)
from test_metric_writers import assert_events_match_metrics


def test_processes_from_the_command_line(tmp_path):
  workdir = tmp_path / "run"
  result = run_cli(
      f"--task={TASK}", f"--model={MODEL}", f"--dataset={DATASET}",
      f"--dataset_size={EXAMPLES}", "--strategy=downpour",
      "--worker_optimizer=sgd", f"--learning_rate={LR}", "--num_workers=2",
      f"--communication_window={WINDOW}", f"--batch_size={EXAMPLES // 2}",
      f"--epochs={WINDOW * WINDOWS}", "--eval_every_seconds=0",
      "--nocheckpoints", "--noplots", "--backend=processes",
      f"--workdir={workdir}", timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  # The end-of-run table names the task's metrics.
  assert "final test mae" in result.stdout
  assert "final test hit_rate" in result.stdout
  assert "accuracy" not in result.stdout
  config = workload_config(workdir, "processes", 2)
  check_run(config, workdir)
  with open(workdir / "config.json") as f:
    assert json.load(f)["task"] == TASK
  assert_nothing_left(workdir)



def language_model_config(tmp_path, backend):
  """The built-in task `next_token` on the built-in dataset and model, shrunk (tests/small_language_model.py): one worker, two windows of λ = 2 steps of 4 windows of 128 bytes.

  Skips the test where the corpus cannot be had (`shakespeare_data_dir`).
  """
  return TrainConfig(
      task="next_token", model="tests.small_language_model:transformer",
      dataset="tests.small_language_model:load",
      data_dir=shakespeare_data_dir(tmp_path / "corpus"), dataset_size=8,
      num_workers=1, communication_window=2, batch_size=4, epochs=2.0,
      eval_every_seconds=0.0, checkpoints=False,
      workdir=str(tmp_path / "run"), backend=backend)


def check_language_model_run(summary, workdir):
  """The task's metrics in every row and the summary, each against its hand formula."""
  assert summary["completed"] and summary["task"] == "next_token"
  assert summary["num_commits"] == summary["expected_commits"] == 2
  assert summary["metrics"] == {"accuracy": "max", "bits_per_byte": "min"}
  assert summary["efficiency_metric"] == "bits_per_byte"
  commits = metrics_rows(workdir, ("commit",))
  final, = metrics_rows(workdir, ("eval",))[-1:]
  assert len(commits) == 2 and final["final"]
  for row in commits + [final]:
    # Bits per byte: the loss (nats per byte) in bits.
    assert row["bits_per_byte"] == pytest.approx(row["loss"] / math.log(2),
                                                 rel=1e-5)
    assert 0.0 <= row["accuracy"] <= 1.0
  for row in commits:  # The window's mean over its λ local steps.
    assert len(row["step_bits_per_byte"]) == 2
    assert row["bits_per_byte"] == pytest.approx(
        np.mean(row["step_bits_per_byte"]), rel=1e-5)
  for name in ("loss", "accuracy", "bits_per_byte"):
    assert summary[f"final_test_{name}"] == final[name]
  # A few steps from initialization: about the uniform byte model's 8 bits.
  assert 7.0 < final["bits_per_byte"] < 9.0


def test_the_language_model_on_processes_with_int8_commits(tmp_path):
  # Its commits through a codec too: int8 in blocks of 1,024 values, each
  # block's float32 scale beside it; the pulls stay float32 (the worker
  # pulls to start and after each commit).
  config = language_model_config(tmp_path, "processes")
  config.commit_compression = "int8"
  summary = train(config)
  check_language_model_run(summary, tmp_path / "run")
  p = np.load(tmp_path / "run" / "center.npy").size
  commits = sum(summary["worker_commits"])
  assert summary["bytes_committed"] == commits * (p + 4 * math.ceil(p / 1024))
  assert summary["bytes_pulled"] == (commits + 1) * 4 * p
  assert_nothing_left(tmp_path / "run")


def test_simulated(tmp_path):
  config = workload_config(tmp_path / "run", "simulated", 2,
                           metric_writers="jsonl,tensorboard")
  summary = train(config)
  assert summary["num_commits"] == summary["expected_commits"] == 2 * WINDOWS
  rows = check_run(config, tmp_path / "run")
  # Round robin: after the first round every commit is 1 stale.
  assert [row["staleness"] for row in rows[2:]] == [1] * (len(rows) - 2)
  # TensorBoard has the task's metrics as it has the rows.
  assert_events_match_metrics(tmp_path / "run", metrics=("hit_rate", "mae"))


def test_threads(tmp_path):
  # The real worker, server and evaluator loops, as threads.
  config = workload_config(tmp_path / "run", "processes", 2,
                           options=ProcessesOptions(cache_dir="")).validate()
  book = RunBook(config, None, "inprocess")
  run = InProcessBackend(config, book)
  try:
    run.prepare()
    run.run()
    center = run.final_center()
    book.save_center(center)
    book.write_summary(interrupted=False)
  finally:
    run.shutdown()
    book.close()
  check_run(config, tmp_path / "run")
