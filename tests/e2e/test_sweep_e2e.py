"""The end-to-end half of tests/unit/test_sweep.py: real processes, subprocesses or whole runs."""

import os
import subprocess
import sys

from tests.helpers import REPO


def run_sweep(*args, timeout=300):
  return subprocess.run([sys.executable, "-m", "experiments.sweep", *args],
                        cwd=REPO, capture_output=True, text=True,
                        timeout=timeout)


def test_cli_strategy_flagfile_cannot_change_the_budget(tmp_path):
  # --epochs typed on the command line, and the aeasgd flagfile says 40.
  result = run_sweep(
      "--flagfile=experiments/configs/paper_mnist_agn.flags", "--epochs=100",
      "--strategies=agn,aeasgd",
      "--strategy_flagfile=aeasgd=experiments/configs/paper_mnist_aeasgd.flags",
      f"--sweep_dir={tmp_path / 'sweep'}")
  assert result.returncode == 2
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
  assert "epochs=40.0" in lines[0] and "epochs=100.0" in lines[0]
  assert not (tmp_path / "sweep").exists()


def test_cli_failed_cells_are_reported_and_the_sweep_goes_on(tmp_path):
  # More workers than examples fails each cell before it starts; the sweep
  # reports both, then exits 1 naming them. --resume tries them again.
  sweep_dir = tmp_path / "sweep"
  for extra in ((), ("--resume",)):
    result = run_sweep("--num_workers=5000,6000", "--epochs=1",
                       f"--sweep_dir={sweep_dir}", *extra)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("sweep: error: 2 of 2 runs failed")
    assert "agn n=5000 λ=10" in last and "agn n=6000 λ=10" in last
    text = (sweep_dir / "sweep.md").read_text()
    assert "| 5000 | 10 | failed | – |" in text
    assert "| 6000 | 10 | failed | – |" in text
    assert "cannot be sharded over 5000 workers" in text
  assert sorted(os.listdir(sweep_dir)) == ["sweep.md"]
