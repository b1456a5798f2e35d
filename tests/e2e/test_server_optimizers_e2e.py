"""The end-to-end half of tests/unit/test_server_optimizers.py: real processes, subprocesses or whole runs."""

import json

import pytest

from helpers import run_cli


# soak: tests/e2e/test_report_e2e.py's
# test_the_beyond_section_rows_come_from_its_runs covers a simulated run with
# --server_optimizer=delayed_nesterov --server_every=4 parsed by the train
# flags, run to completion and its config recorded, and
# tests/e2e/test_cli.py's test_aeasgd_trains_with_its_paper_defaults the
# settings line the CLI prints, in the suite.
@pytest.mark.soak
def test_trains_on_the_simulator_through_the_cli(tmp_path):
  workdir = tmp_path / "run"
  result = run_cli("--backend=simulated", "--num_workers=4",
                   "--communication_window=5", "--hidden_sizes=32",
                   "--epochs=4", "--learning_rate=3e-3",
                   "--eval_every_rounds=0", "--checkpoints=false",
                   "--noplots", "--server_optimizer=delayed_nesterov",
                   "--server_every=4", f"--workdir={workdir}")
  assert result.returncode == 0, result.stderr[-3000:]
  summary = json.loads((workdir / "summary.json").read_text())
  assert summary["final_test_accuracy"] > 0.5  # Chance: 0.1.
  assert (summary["config"]["server_optimizer"],
          summary["config"]["server_every"]) == ("delayed_nesterov", 4)
  assert "server_optimizer=delayed_nesterov" in result.stdout
  assert "server_every=4" in result.stdout
