"""The workload of tests/regression_workload.py on real processes (the command line), run against numpy's replay.

The simulated and threads runs, the names, the evaluation and E are
tests/unit/test_workloads.py. On Ray, tests/e2e/test_ray_backend.py's
SIGKILLed driver's workers train it, and its run against the replay there
is soak.
"""

import json

from helpers import assert_nothing_left, run_cli
from test_workloads import (DATASET, EXAMPLES, LR, MODEL, TASK, WINDOW,
                            WINDOWS, check_run, workload_config)


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

