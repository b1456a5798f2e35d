"""The simulated backend end to end: train() and the CLI with --backend=simulated, through the shared books."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from agn_jax import TrainConfig, checkpoint, data
from agn_jax.runtime import train
from agn_jax.errors import CheckpointError
from helpers import (REPO, assert_one_line_error, damage_checkpoint,
                     metrics_rows, run_cli, snapshot, train_here)


# Fields that follow the wall clock; everything else must repeat exactly.
WALL_FIELDS = ("time", "wall_time", "seconds", "window_start", "window_end")


def _config(tmp_path, name="run", **overrides):
  # Settings by name, as config.json has them: the simulator's own
  # (`eval_every_rounds`, the clock's) are ignored on another backend.
  values = dict(strategy="agn", num_workers=4, communication_window=5,
                dataset="digits", hidden_sizes=(64,), batch_size=16,
                epochs=6.0, learning_rate=3e-3, eval_every_rounds=3,
                checkpoint_every_seconds=0.0, backend="simulated",
                workdir=str(tmp_path / name))
  values.update(overrides)
  return TrainConfig.from_dict(values)


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
  clock = summary["simulation"]["time_model"]
  assert (clock["cluster"], clock["unit"], clock["speed_model"]) == (
      "none", "steps", "constant")
  assert summary["simulation"]["workers_per_call"] >= 1


def test_round_robin_staleness_is_n_minus_one_after_the_first_round(reference):
  _, workdir = reference
  commits = metrics_rows(workdir, {"commit"})
  assert [c["staleness"] for c in commits[:4]] == [0, 1, 2, 3]
  assert {c["staleness"] for c in commits[4:]} == {3}
  assert [c["clock"] for c in commits] == list(range(1, len(commits) + 1))
  # The step counter: every worker's i-th window (from 1) ends at 5 i and
  # is committed then (messages and the server are free); each of its 5
  # steps' accuracy is a multiple of 1/16 at batch 16, averaging to the
  # window's.
  ends = [5 * (j // 4 + 1) for j in range(len(commits))]
  assert [c["sim_time"] for c in commits] == pytest.approx(ends)
  assert [c["sim_window_end"] for c in commits] == pytest.approx(ends)
  assert [c["sim_window_start"] for c in commits] == pytest.approx(
      [t - 5 for t in ends])
  for c in commits:
    assert len(c["step_accuracy"]) == 5
    assert all(16 * a == int(16 * a) for a in c["step_accuracy"]), c
    assert np.mean(c["step_accuracy"]) == pytest.approx(c["accuracy"])
    assert c["window_start"] <= c["window_end"] <= c["time"]


def test_evaluations_every_k_rounds_and_at_the_end(reference):
  summary, workdir = reference
  evals = metrics_rows(workdir, {"eval"})
  assert evals[0]["clock"] == 0 and evals[0]["sim_time"] == 0
  assert [e["clock"] for e in evals[1:-1]] == list(
      range(12, summary["num_commits"] + 1, 12))
  assert evals[-1]["final"] is True
  assert evals[-1]["accuracy"] == summary["final_test_accuracy"]


def test_evaluations_after_every_kth_commit_change_nothing_else(tmp_path):
  # Heterogeneous speeds, so rounds are uneven; --eval_every_commits cuts
  # them at every 5th commit, and the run's numbers stay as they were.
  speeds = dict(speed_model="lognormal:0.5", eval_every_rounds=0, epochs=3.0)
  plain = train(_config(tmp_path, name="rounds", **speeds))
  cut = train(_config(tmp_path, name="commits", eval_every_commits=5,
                      **speeds))
  assert plain["completed"] and cut["completed"]
  evals = metrics_rows(tmp_path / "commits", {"eval"})
  assert [e["clock"] for e in evals[:-1]] == list(
      range(0, cut["num_commits"] + 1, 5))
  assert len(metrics_rows(tmp_path / "rounds", {"eval"})) == 2
  assert _without_wall(metrics_rows(tmp_path / "commits", {"commit"})) == (
      _without_wall(metrics_rows(tmp_path / "rounds", {"commit"})))
  np.testing.assert_array_equal(np.load(tmp_path / "rounds" / "center.npy"),
                                np.load(tmp_path / "commits" / "center.npy"))


def test_same_flags_and_seed_give_the_same_metrics(tmp_path, reference):
  _, workdir = reference
  train(_config(tmp_path, name="again"))
  assert _without_wall(metrics_rows(workdir)) == _without_wall(
      metrics_rows(tmp_path / "again"))
  np.testing.assert_array_equal(np.load(workdir / "center.npy"),
                                np.load(tmp_path / "again" / "center.npy"))


@pytest.fixture(scope="module")
def every_round(tmp_path_factory):
  """A run that checkpoints after every round (orbax keeps the last two)."""
  tmp_path = tmp_path_factory.mktemp("every_round")
  summary = train(_config(tmp_path, epochs=1.0, eval_every_rounds=0,
                          checkpoint_every_seconds=1e-6))
  return summary, tmp_path


def test_a_checkpoint_after_every_round_ends_in_one_final_checkpoint(
    every_round):
  # Each round's wall time exceeds the period: a periodic checkpoint is due
  # after the last round too, at the step the final one saves.
  summary, tmp_path = every_round
  assert summary["completed"] is True, summary.get("failure")
  saved = metrics_rows(tmp_path / "run", {"checkpoint"})
  steps = [r["clock"] for r in saved]
  assert len(steps) == len(set(steps)) > 1  # Each step saved once.
  assert saved[-1]["final"] and saved[-1]["clock"] == summary["num_commits"]
  assert not any(r["final"] for r in saved[:-1])


def test_a_damaged_final_checkpoint_falls_back_to_the_one_before(
    every_round, tmp_path, caplog):
  summary, source = every_round
  workdir = tmp_path / "run"
  shutil.copytree(source / "run", workdir)
  older, newest = sorted(int(p.name) for p in (workdir / "checkpoints").iterdir())
  assert newest == summary["num_commits"]
  damage_checkpoint(workdir / "checkpoints" / str(newest))
  # As a SIGKILL after the final checkpoint leaves it: no summary.json.
  (workdir / "summary.json").unlink()
  resumed = train(_config(tmp_path, epochs=1.0, eval_every_rounds=0,
                          checkpoint_every_seconds=1e-6, resume=True))
  # From the checkpoint before, saying so; the simulator repeats the rounds
  # after it exactly.
  assert resumed["resumed_from_commit"] == older
  [line] = [r.getMessage() for r in caplog.records if "damaged" in r.getMessage()]
  assert line.startswith(f"checkpoint {newest} in ") and line.endswith(
      f"resuming from checkpoint {older}, the newest intact one")
  assert resumed["num_commits"] == summary["num_commits"]
  np.testing.assert_array_equal(np.load(workdir / "center.npy"),
                                np.load(source / "run" / "center.npy"))
  # The damaged one was set aside and a sound one saved in its place.
  assert (workdir / "checkpoints" / f"{newest}.damaged").is_dir()
  assert checkpoint.restore(str(workdir / "checkpoints")).step == newest


def test_resumed_run_continues_exactly(tmp_path, reference):
  # Half the share, then --resume with the whole share: the same run as one
  # that went through in one go (the samplers skip what was done).
  _, workdir = reference
  train(_config(tmp_path, name="halves", epochs=3.0))
  assert json.loads((tmp_path / "halves" / "summary.json").read_text())[
      "completed"]
  # As a SIGKILL after the final checkpoint leaves it: no summary.json.
  (tmp_path / "halves" / "summary.json").unlink()
  summary = train(_config(tmp_path, name="halves", epochs=6.0, resume=True))
  assert summary["resumed_from_commit"] > 0
  # Both sittings' bytes, from the checkpoint: each commit a float32 delta
  # and a float32 center (the simulator charges one per commit).
  p = 64 * 64 + 64 + 64 * 10 + 10
  assert summary["num_commits"] == reference[0]["num_commits"]
  assert summary["bytes_committed"] == summary["num_commits"] * 4 * p
  assert summary["bytes_pulled"] == summary["num_commits"] * 4 * p
  # The clock goes on from the rows the resume kept.
  assert summary["simulated_seconds"] == reference[0]["simulated_seconds"]
  np.testing.assert_array_equal(np.load(workdir / "center.npy"),
                                np.load(tmp_path / "halves" / "center.npy"))
  # The same commits; only the share each session planned for differs.
  first_half = [dict(r, expected_commits=None) for r in _without_wall(
      metrics_rows(tmp_path / "halves", {"commit"}))]
  assert first_half == [dict(r, expected_commits=None) for r in
                        _without_wall(metrics_rows(workdir, {"commit"}))]


def test_a_resumed_run_goes_on_along_its_learning_rate_schedule(tmp_path):
  # Each worker's schedule counts in its optimizer's state, which the
  # checkpoint holds: interrupted at half its 30 local steps (past the
  # warm-up, inside the cosine) and resumed, the run is the one that went
  # through in one go. A resume under another schedule is refused.
  # Resolved, as the CLI's are: the checkpoint keeps the optimizer it ran.
  schedule = dict(num_workers=2, epochs=2.0, eval_every_rounds=0,
                  lr_schedule="cosine", warmup_steps=5, decay_steps=30,
                  final_lr_fraction=0.1, dataset_size=480)
  config = lambda name, **changes: _config(
      tmp_path, name=name, **dict(schedule, **changes)).resolved()
  whole = train(config("whole"))
  train(config("halves", epochs=1.0))
  (tmp_path / "halves" / "summary.json").unlink()
  before = snapshot(tmp_path / "halves")
  with pytest.raises(CheckpointError, match="decay_steps=30.*decay_steps=40"):
    train(config("halves", resume=True, decay_steps=40))
  assert snapshot(tmp_path / "halves") == before
  resumed = train(config("halves", resume=True))
  assert resumed["resumed_from_commit"] == whole["num_commits"] // 2
  np.testing.assert_array_equal(np.load(tmp_path / "whole" / "center.npy"),
                                np.load(tmp_path / "halves" / "center.npy"))


# soak: tests/e2e/test_simulator_e2e.py's OneWorkerTest.test_equals_lookahead
# (the simulator) and tests/e2e/test_runtime_e2e.py's
# test_one_worker_agn_equals_lookahead (real processes) each check one worker
# against optax.lookahead, so the two backends agree through it, and
# tests/e2e/test_cli.py's test_train_end_to_end checks the processes' rows'
# step accuracies, in the suite.
@pytest.mark.soak
def test_one_worker_agrees_with_the_processes_backend(tmp_path):
  # Both are optax.lookahead with one worker: the same math on two backends.
  centers, steps = {}, {}
  for backend in ("simulated", "processes"):
    # No periodic checkpoint and none at the end: the run leaves none.
    train(_config(tmp_path, name=backend, backend=backend, num_workers=1,
                  epochs=1.0, eval_every_seconds=0.0,
                  checkpoint_at_end=False))
    assert not metrics_rows(tmp_path / backend, {"checkpoint"}), backend
    assert not list((tmp_path / backend / "checkpoints").iterdir()), backend
    centers[backend] = np.load(tmp_path / backend / "center.npy")
    steps[backend] = [c["step_accuracy"] for c in
                      metrics_rows(tmp_path / backend, {"commit"})]
  np.testing.assert_allclose(centers["simulated"], centers["processes"],
                             rtol=1e-4, atol=1e-5)
  # Each local step's accuracy reaches the rows the same way on both: the
  # processes' through shared memory and the server, the simulator's from
  # its round.
  assert len(steps["processes"]) >= 10
  assert steps["simulated"] == steps["processes"]


# soak: tests/e2e/test_simulator_e2e.py's CommitOrderTest.test_speeds covers the
# commit order of per-worker speeds, test_bad_worker_speeds_is_one_line the
# --speed_model=speeds: flag reaching the config's checks, and
# test_ctrl_c_checkpoints_between_rounds_and_resume_finishes a simulated run
# through the CLI to its end, curves.png included, in the suite.
@pytest.mark.soak
def test_speeds_order_through_the_cli(tmp_path):
  result = run_cli("--backend=simulated", "--num_workers=2",
                   "--speed_model=speeds:2,1",
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


def test_bad_worker_speeds_is_one_line(tmp_path, monkeypatch, capsys):
  # In this process, through the program's own checks (`train_here`);
  # test_bad_clock_flags_are_one_line's first case runs the program.
  result = train_here(monkeypatch, capsys, "--backend=simulated",
                      "--num_workers=3", "--speed_model=speeds:1,2",
                      f"--workdir={tmp_path / 'bad'}")
  line = assert_one_line_error(result)
  assert ("--speed_model=speeds:1,2 gives 2 speeds, one for each worker of "
          "--num_workers=3") in line
  assert not (tmp_path / "bad").exists()


# The first as a subprocess; the others through the same parse and checks
# in this process (`train_here`).
@pytest.mark.parametrize("args,message", [
    (["--speed_model=lognormal"], "lognormal needs a σ, as lognormal:SIGMA"),
    (["--speed_model=straggler:2:3"], "P must be a number in [0, 1]"),
    (["--speed_model=fast"], "not one of constant, lognormal:SIGMA"),
    (["--bandwidth_gbps=1"], "--bandwidth_gbps needs --cluster=this_host or "
     "paper"),
    (["--cluster=paper", "--latency_ms=-1"], "--latency_ms accepts a finite "
     "number >= 0"),
    (["--speed_model=trace:/nonexistent"], "holds no metrics.jsonl"),
])
def test_bad_clock_flags_are_one_line(tmp_path, args, message, monkeypatch,
                                      capsys):
  argv = ["--backend=simulated", *args, f"--workdir={tmp_path / 'bad'}"]
  if args == ["--speed_model=lognormal"]:
    result = run_cli(*argv)
  else:
    result = train_here(monkeypatch, capsys, *argv)
  assert message in assert_one_line_error(result)
  assert not (tmp_path / "bad").exists()


def test_paper_cluster_counts_modeled_seconds(tmp_path):
  # The paper cluster with its message and server costs given: n = 2
  # workers of the MLP 64-32-10 (2,410 parameters, 9,640 bytes a message).
  # Both first windows end together; the commits arrive 1 ms + 9,640 B at
  # 0.01 Gb/s = 8.712 ms later, and the FIFO server takes 50 ms for each,
  # so worker 1's waits for worker 0's.
  summary = train(_config(tmp_path, name="paper", num_workers=2,
                          hidden_sizes=(32,), epochs=1.0, cluster="paper",
                          bandwidth_gbps=0.01, latency_ms=1.0,
                          server_apply_ms=50.0, eval_every_rounds=0))
  clock = summary["simulation"]["time_model"]
  assert (clock["cluster"], clock["unit"]) == ("paper", "seconds")
  message = 1e-3 + 9640 * 8 / 0.01e9
  assert clock["commit_seconds"] == pytest.approx(message)
  assert clock["server_apply_seconds"] == pytest.approx(0.05)
  commits = metrics_rows(tmp_path / "paper", {"commit"})
  window = commits[0]["sim_window_end"] - commits[0]["sim_window_start"]
  assert window == pytest.approx(5 * clock["step_seconds"])
  assert commits[0]["sim_window_start"] == 0
  assert [c["sim_time"] for c in commits[:2]] == pytest.approx(
      [window + message + 0.05, window + message + 0.1])
  # Worker 0's next window starts once the center (a pull of 9,640 B) is
  # back: 0.05 s after its commit's apply plus one message.
  assert commits[2]["worker"] == 0
  assert commits[2]["sim_window_start"] == pytest.approx(
      commits[0]["sim_time"] + message)
  assert summary["simulated_seconds"] == commits[-1]["sim_time"]


def test_this_host_reads_its_cached_measurement(tmp_path, monkeypatch):
  # A measurement of this machine (`agn_jax.runtime.backends.calibration`, run by
  # scripts/calibrate_simulator.py) is cached by the run's shapes; here the
  # cache holds explicit numbers, so nothing is measured: a step of 2 ms, a
  # commit of 3 ms and a pull of 4 ms whose bytes take 1 ms each at the
  # measured copy rate (so a message is 2.5 ms of latency and 1 ms of
  # bytes: 3.5 ms, the same 7 ms for both), an apply of 5 ms.
  from agn_jax.data import load_digits
  from agn_jax.runtime.backends import calibration
  monkeypatch.setenv("HOME", str(tmp_path))
  config = _config(tmp_path, num_workers=2, hidden_sizes=(16,), epochs=0.5,
                   cluster="this_host")
  ds = load_digits()
  spec = calibration.spec(config, ds.input_shape, ds.num_classes)
  center_bytes = 4 * (64 * 16 + 16 + 16 * 10 + 10)
  numbers = {"step_seconds": 0.002, "commit_seconds": 0.003,
             "pull_seconds": 0.004, "apply_seconds": 0.005,
             "copy_gbps": 8 * center_bytes / 0.001 / 1e9,
             "payload_bytes": center_bytes, "center_bytes": center_bytes}
  cache = tmp_path / ".cache" / "agn_jax" / "this_host"
  cache.mkdir(parents=True)
  (cache / f"{calibration._key(spec)}.json").write_text(json.dumps(numbers))
  summary = train(config)
  model = summary["simulation"]["time_model"]
  assert (model["cluster"], model["unit"]) == ("this_host", "seconds")
  assert model["measured"]["cache"].startswith(str(cache))
  # Two workers on this machine's cores: each its own core (or sharing).
  share = max(1.0, 2 / spec["machine"]["cores"])
  assert model["step_seconds"] == pytest.approx(0.002 * share)
  assert model["latency_ms"] == pytest.approx(2.5)
  assert model["commit_seconds"] == pytest.approx(0.0035 * share)
  assert model["server_apply_seconds"] == pytest.approx(0.005)
  first, second = metrics_rows(tmp_path / "run", {"commit"})[:2]
  assert first["sim_window_end"] == pytest.approx(5 * 0.002 * share)
  assert first["sim_time"] == pytest.approx(
      first["sim_window_end"] + 0.0035 * share + 0.005)
  # Both arrive together; the second waits for the first's apply.
  assert second["sim_time"] == pytest.approx(first["sim_time"] + 0.005)


def test_ctrl_c_checkpoints_between_rounds_and_resume_finishes(tmp_path):
  workdir = tmp_path / "interrupted"
  args = [sys.executable, "-m", "experiments.train", "--backend=simulated",
          "--num_workers=4", "--communication_window=5", "--hidden_sizes=32",
          "--batch_size=16", "--epochs=100", "--eval_every_rounds=0",
          # Ctrl-C checkpoints even where the end of a run would not.
          "--nocheckpoint_at_end", f"--workdir={workdir}"]
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

  # On for about 40 more commits (not the 100 epochs' 1,800): from the
  # checkpoint, with only the budget changed.
  num_train = len(data.load("digits", seed=0).x_train)
  epochs = (len(commits) + 40) * 5 * 16 / num_train + 1e-6
  result = run_cli("--resume", f"--workdir={workdir}", f"--epochs={epochs}",
                   timeout=600)
  assert result.returncode == 0, result.stderr
  summary = json.loads((workdir / "summary.json").read_text())
  assert summary["completed"] is True
  commits = metrics_rows(workdir, {"commit"})
  assert [c["clock"] for c in commits] == list(
      range(1, summary["expected_commits"] + 1))
  assert not os.path.exists(workdir / ".lock")
  assert (workdir / "curves.png").is_file()
