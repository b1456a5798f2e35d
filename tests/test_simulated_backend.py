"""The simulated backend end to end: train() and the CLI with --backend=simulated, through the shared books."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from agn_jax import TrainConfig
from agn_jax.runtime import train
from helpers import REPO, assert_one_line_error, metrics_rows, run_cli

# Fields that follow the wall clock; everything else must repeat exactly.
WALL_FIELDS = ("time", "wall_time", "seconds")


def _config(tmp_path, name="run", **overrides):
  values = dict(strategy="agn", num_workers=4, communication_window=5,
                dataset="digits", hidden_sizes=(64,), batch_size=16,
                epochs=6.0, learning_rate=3e-3, eval_every_rounds=3, checkpoint_every_seconds=0.0,
                backend="simulated", workdir=str(tmp_path / name))
  values.update(overrides)
  return TrainConfig(**values)


def _without_wall(rows):
  return [{k: v for k, v in r.items() if k not in WALL_FIELDS} for r in rows]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
  tmp_path = tmp_path_factory.mktemp("sim")
  summary = train(_config(tmp_path))
  return summary, tmp_path / "run"


def test_learns_and_writes_the_processes_outputs(reference):
  summary, workdir = reference
  assert summary["backend"] == "simulated"
  assert summary["completed"] is True
  assert summary["final_test_accuracy"] >= 0.85
  assert summary["num_commits"] == summary["expected_commits"]
  assert summary["worker_commits"] == [summary["expected_commits"] // 4] * 4
  for name in ("config.json", "metrics.jsonl", "summary.json", "center.npy"):
    assert (workdir / name).is_file(), name
  assert list((workdir / "checkpoints").iterdir())
  assert summary["simulation"]["commit_order"] == "round_robin"
  assert summary["simulation"]["workers_per_call"] >= 1


def test_round_robin_staleness_is_n_minus_one_after_the_first_round(reference):
  _, workdir = reference
  commits = metrics_rows(workdir, {"commit"})
  assert [c["staleness"] for c in commits[:4]] == [0, 1, 2, 3]
  assert {c["staleness"] for c in commits[4:]} == {3}
  assert [c["clock"] for c in commits] == list(range(1, len(commits) + 1))
  # Simulated time: the j-th commit at λ (j + 1) / n.
  assert [c["sim_time"] for c in commits] == pytest.approx(
      [5 * (j + 1) / 4 for j in range(len(commits))])


def test_evaluations_every_k_rounds_and_at_the_end(reference):
  summary, workdir = reference
  evals = metrics_rows(workdir, {"eval"})
  assert evals[0]["clock"] == 0 and evals[0]["sim_time"] == 0
  assert [e["clock"] for e in evals[1:-1]] == list(
      range(12, summary["num_commits"] + 1, 12))
  assert evals[-1]["final"] is True
  assert evals[-1]["accuracy"] == summary["final_test_accuracy"]


def test_same_flags_and_seed_give_the_same_metrics(tmp_path, reference):
  _, workdir = reference
  train(_config(tmp_path, name="again"))
  assert _without_wall(metrics_rows(workdir)) == _without_wall(
      metrics_rows(tmp_path / "again"))
  np.testing.assert_array_equal(np.load(workdir / "center.npy"),
                                np.load(tmp_path / "again" / "center.npy"))


def test_resumed_run_continues_exactly(tmp_path, reference):
  # Half the share, then --resume with the whole share: the same run as one
  # that went through in one go (the samplers skip what was done).
  _, workdir = reference
  train(_config(tmp_path, name="halves", epochs=3.0))
  assert json.loads((tmp_path / "halves" / "summary.json").read_text())[
      "completed"]
  summary = train(_config(tmp_path, name="halves", epochs=6.0, resume=True))
  assert summary["resumed_from_commit"] > 0
  np.testing.assert_array_equal(np.load(workdir / "center.npy"),
                                np.load(tmp_path / "halves" / "center.npy"))
  # The same commits; only the share each session planned for differs.
  first_half = [dict(r, expected_commits=None) for r in _without_wall(
      metrics_rows(tmp_path / "halves", {"commit"}))]
  assert first_half == [dict(r, expected_commits=None) for r in
                        _without_wall(metrics_rows(workdir, {"commit"}))]


def test_one_worker_agrees_with_the_processes_backend(tmp_path):
  # Both are optax.lookahead with one worker: the same math on two backends.
  centers = {}
  for backend in ("simulated", "processes"):
    train(_config(tmp_path, name=backend, backend=backend, num_workers=1,
                  epochs=1.0, eval_every_seconds=0.0))
    centers[backend] = np.load(tmp_path / backend / "center.npy")
  np.testing.assert_allclose(centers["simulated"], centers["processes"],
                             rtol=1e-4, atol=1e-5)


def test_speeds_order_through_the_cli(tmp_path):
  result = run_cli("--backend=simulated", "--num_workers=2",
                   "--commit_order=speeds", "--worker_speeds=2,1",
                   "--epochs=4", "--hidden_sizes=16", "--communication_window=5",
                   f"--workdir={tmp_path / 'speeds'}", timeout=300)
  assert result.returncode == 0, result.stderr
  commits = metrics_rows(tmp_path / "speeds", {"commit"})
  fast = [c for c in commits if c["worker"] == 0]
  slow = [c for c in commits if c["worker"] == 1]
  # Worker k's i-th commit is at i λ / s_k: until the fast one is done, the
  # slow one has made half as many commits.
  assert len(fast) == len(slow) >= 4
  assert [c["sim_time"] for c in fast] == [5 * i / 2 for i in
                                           range(1, len(fast) + 1)]
  early = [c["worker"] for c in commits
           if c["sim_time"] <= fast[-1]["sim_time"]]
  assert early.count(1) == len(fast) // 2
  assert (tmp_path / "speeds" / "curves.png").is_file()


def test_bad_worker_speeds_is_one_line(tmp_path):
  result = run_cli("--backend=simulated", "--num_workers=3",
                   "--commit_order=speeds", "--worker_speeds=1,2",
                   f"--workdir={tmp_path / 'bad'}")
  line = assert_one_line_error(result)
  assert "--worker_speeds has 2 values for 3 workers" in line


def test_ctrl_c_checkpoints_between_rounds_and_resume_finishes(tmp_path):
  workdir = tmp_path / "interrupted"
  args = [sys.executable, "-m", "experiments.train", "--backend=simulated",
          "--num_workers=4", "--communication_window=5", "--hidden_sizes=32",
          "--batch_size=16", "--epochs=100", "--eval_every_rounds=0",
          f"--workdir={workdir}"]
  process = subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
  metrics = workdir / "metrics.jsonl"
  deadline = time.monotonic() + 120
  while time.monotonic() < deadline and not (
      metrics.exists() and len(metrics_rows(workdir, {"commit"})) >= 20):
    time.sleep(0.2)
  process.send_signal(signal.SIGINT)
  _, stderr = process.communicate(timeout=120)
  assert process.returncode == 130, stderr
  summary = json.loads((workdir / "summary.json").read_text())
  assert summary["interrupted"] is True and summary["completed"] is False
  commits = metrics_rows(workdir, {"commit"})
  assert 20 <= len(commits) < summary["expected_commits"]
  assert summary["last_checkpoint"] == commits[-1]["clock"]

  result = run_cli("--resume", f"--workdir={workdir}", "--epochs=100",
                   timeout=600)
  assert result.returncode == 0, result.stderr
  summary = json.loads((workdir / "summary.json").read_text())
  assert summary["completed"] is True
  commits = metrics_rows(workdir, {"commit"})
  assert [c["clock"] for c in commits] == list(
      range(1, summary["expected_commits"] + 1))
  assert not os.path.exists(workdir / ".lock")
