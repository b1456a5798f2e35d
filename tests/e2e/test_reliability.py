"""Reliability end to end: real processes, real signals (os.kill), real checkpoints.

A worker killed with SIGKILL or dying of an exception is restarted and the
run still applies exactly the commits the workers made; past the restart
budget the run fails cleanly; checkpoints are written periodically and at
the end; Ctrl-C ends the CLI within 10 s with a final checkpoint, and
--resume continues that run; a bad --resume is one line and touches nothing.
"""

import dataclasses
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from agn_jax import TrainConfig, checkpoint, data
from agn_jax.errors import CheckpointError
from agn_jax.runtime import Fault, Faults, RunError, train
from helpers import (assert_nothing_left, assert_one_line_error,
                     damage_checkpoint, metrics_rows, run_cli, snapshot,
                     train_here, tiny_config, train_in_process,
                     train_with_two_failures)


REPO = pathlib.Path(__file__).resolve().parents[2]


def _config(tmp_path, **overrides):
  return tiny_config(tmp_path, **dict(
      dict(num_workers=2, communication_window=10, hidden_sizes=(32,),
           batch_size=32, epochs=40.0, learning_rate=3e-3,
           checkpoint_every_seconds=0.3), **overrides))


@pytest.fixture(scope="module")
def killed_run(tmp_path_factory):
  """Worker 0 raises at window 5; worker 1 is SIGKILLed after 30 commits."""
  tmp_path = tmp_path_factory.mktemp("killed")
  summary, killed = train_with_two_failures(
      train, _config(tmp_path, max_worker_restarts=2))
  return summary, tmp_path / "run", killed


def test_dead_workers_are_restarted_and_the_run_completes(killed_run):
  summary, workdir, killed = killed_run
  assert killed
  assert summary["worker_restarts"] == 2
  restarts = [e for e in metrics_rows(workdir) if e["event"] == "worker_restart"]
  assert sorted(e["worker"] for e in restarts) == [0, 1]
  causes = {e["worker"]: e["cause"] for e in restarts}
  assert causes[0].startswith("failed: RuntimeError: injected fault")
  assert causes[1] == "killed by signal 9"
  pids = json.loads((workdir / "pids.json").read_text())
  assert killed[0] in pids["restarted_workers"]
  assert killed[0] not in pids["workers"]
  assert summary["final_test_accuracy"] >= 0.9


def test_commits_applied_equal_commits_made(killed_run):
  summary, workdir, _ = killed_run
  applied, rejected = summary["num_commits"], summary["rejected_commits"]
  assert rejected == 0
  assert applied + rejected == summary["commits_acknowledged"]
  assert applied + rejected == sum(summary["worker_commits"])
  commits = [e for e in metrics_rows(workdir) if e["event"] == "commit"]
  assert [c["clock"] for c in commits] == list(range(1, applied + 1))
  # Each restarted worker went on with the rest of its share, not all of it.
  assert summary["worker_commits"][0] == summary["worker_commits"][1]
  assert applied == summary["num_workers"] * summary["worker_commits"][0]


def test_checkpoints_periodically_and_at_the_end(killed_run):
  summary, workdir, _ = killed_run
  saved = [e for e in metrics_rows(workdir) if e["event"] == "checkpoint"]
  assert [e["final"] for e in saved][-1] is True
  assert len(saved) >= 2 and not saved[0]["final"]
  assert saved[-1]["clock"] == summary["num_commits"]
  ckpt = checkpoint.restore(str(workdir / "checkpoints"))
  assert ckpt.step == summary["num_commits"]
  assert ckpt.meta["worker_commits"] == summary["worker_commits"]
  assert ckpt.meta["config"]["hidden_sizes"] == [32]
  np.testing.assert_array_equal(
      ckpt.center, np.load(workdir / "center.npy", allow_pickle=False))
  assert np.isfinite(ckpt.center).all()


def test_killed_run_leaves_nothing_behind(killed_run):
  assert_nothing_left(killed_run[1])


def test_failures_past_the_restart_budget_end_the_run(tmp_path):
  # The fault strikes again in the restarted part: 2 deaths, 1 restart. The
  # budget is the supervisor's, one for every backend: the parts run as
  # threads here (the killed run above restarts real processes).
  with pytest.raises(RunError) as e:
    train_in_process(
        _config(tmp_path, max_worker_restarts=1, epochs=200.0),
        Faults(fault=Fault("raise", worker=1, window=2, incarnations=2)))
  message = str(e.value)
  assert "\n" not in message
  assert message.startswith("worker 1 failed: RuntimeError: injected fault")
  assert message.endswith("no restarts left (--max_worker_restarts=1)")
  restarts = [e for e in metrics_rows(tmp_path / "run")
              if e["event"] == "worker_restart"]
  assert len(restarts) == 1
  # Every part's thread ended.
  assert not [t for t in threading.enumerate() if t.name.startswith("agn-")]


# The CLI: interrupt, resume, bad resumes.

TINY = ("--num_workers=2", "--communication_window=4", "--batch_size=32",
        "--hidden_sizes=32", "--learning_rate=3e-3", "--eval_every_seconds=0",
        "--checkpoint_every_seconds=0.5")


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
  """A CLI run interrupted with SIGINT once it has committed for a while."""
  workdir = tmp_path_factory.mktemp("interrupted") / "run"
  process = subprocess.Popen(
      [sys.executable, "-m", "experiments.train", *TINY, "--epochs=1000",
       f"--workdir={workdir}"],
      cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  try:
    deadline = time.monotonic() + 90
    metrics = workdir / "metrics.jsonl"
    while not (metrics.exists() and
               metrics.read_text().count('"commit"') >= 40 and
               '"checkpoint"' in metrics.read_text()):
      assert process.poll() is None, process.communicate()[1][-3000:]
      assert time.monotonic() < deadline
      time.sleep(0.05)
    sent = time.monotonic()
    os.kill(process.pid, signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    seconds = time.monotonic() - sent
  finally:
    if process.poll() is None:
      process.kill()
      process.wait()
  return workdir, process.returncode, stderr, seconds


def test_sigint_ends_the_cli_within_10_s_with_a_final_checkpoint(interrupted):
  workdir, code, stderr, seconds = interrupted
  assert code == 130, stderr[-3000:]
  # The interrupt, not the end of the data, stopped training: 1000 epochs
  # need more than 10 times the commits made (λ = 4, batch 32).
  total = 1000 * len(data.load("digits", seed=0).x_train) // (4 * 32)
  commits = sum(e["event"] == "commit" for e in metrics_rows(workdir))
  assert 40 <= commits < total / 10, (commits, total)
  assert "Traceback" not in stderr
  assert stderr.strip().splitlines()[-1].startswith("train: error: interrupted")
  summary = json.loads((workdir / "summary.json").read_text())
  assert summary["interrupted"] is True
  final = [e for e in metrics_rows(workdir) if e["event"] == "checkpoint"][-1]
  assert final["final"] is True
  ckpt = checkpoint.restore(str(workdir / "checkpoints"))
  assert ckpt.step == final["clock"] == summary["num_commits"]
  assert sum(ckpt.meta["worker_commits"]) == ckpt.step  # None rejected.
  assert_nothing_left(workdir)


# soak: test_a_resume_after_a_sigkill_counts_every_sitting_s_bytes covers a
# CLI resume from the last checkpoint (the clock and the books
# continuing, what the checkpoint kept of metrics.jsonl unchanged, every
# commit once), and tests/e2e/test_ray_backend.py's
# test_resume_continues_the_interrupted_run_on_ray a resumed run of an
# interrupted one reaching 0.90, in the suite.
@pytest.mark.soak
def test_resume_continues_the_interrupted_run(interrupted, tmp_path):
  source = interrupted[0]
  workdir = tmp_path / "run"
  shutil.copytree(source, workdir)
  ckpt = checkpoint.restore(str(workdir / "checkpoints"))
  offset = ckpt.meta["metrics_offset"]
  before = (workdir / "metrics.jsonl").read_bytes()
  # Train on for about 60 more windows per worker.
  lam, batch, n = 4, 32, 2
  num_train = len(data.load("digits", seed=0).x_train)
  windows = max(ckpt.meta["worker_commits"]) + 60
  epochs = windows * lam * batch * n / num_train + 1e-6
  # Only what changes: every other setting comes from the run's config.json.
  result = run_cli(f"--epochs={epochs}", f"--workdir={workdir}", "--resume")
  assert result.returncode == 0, result.stderr[-3000:]
  summary = json.loads((workdir / "summary.json").read_text())
  assert summary["resumed_from_commit"] == ckpt.step
  assert summary["interrupted"] is False
  assert summary["final_test_accuracy"] >= 0.8
  after = (workdir / "metrics.jsonl").read_bytes()
  assert after[:offset] == before[:offset]  # Appended after the checkpoint.
  events = [json.loads(line) for line in after[offset:].decode().splitlines()]
  commits = [e for e in events if e["event"] == "commit"]
  assert commits[0]["clock"] == ckpt.step + 1  # The clock continues.
  assert [c["clock"] for c in commits] == list(
      range(ckpt.step + 1, summary["num_commits"] + 1))
  assert summary["worker_commits"] == [windows, windows]
  assert summary["num_commits"] == n * windows
  assert_nothing_left(workdir)


@pytest.fixture(scope="module")
def sigkilled(tmp_path_factory):
  """A one-worker CLI run SIGKILLed after its first checkpoint.

  SIGKILL gives the driver no chance to clean up: its children notice they
  were re-parented and end, and the resource tracker unlinks.

  Returns:
    (workdir, the parts still alive and the segments left 15 s later).
  """
  import psutil  # pylint: disable=g-import-not-at-top
  workdir = tmp_path_factory.mktemp("sigkilled") / "run"
  # One worker: the server, the evaluator and a worker are re-parented as
  # with more (the last --num_workers wins).
  process = subprocess.Popen(
      [sys.executable, "-m", "experiments.train", *TINY, "--num_workers=1",
       "--epochs=1000", f"--workdir={workdir}"], cwd=REPO,
      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  try:
    deadline = time.monotonic() + 90
    metrics = workdir / "metrics.jsonl"
    while not (metrics.exists() and '"checkpoint"' in metrics.read_text()):
      assert process.poll() is None and time.monotonic() < deadline
      time.sleep(0.05)
    pids = json.loads((workdir / "pids.json").read_text())
    assert pids["shm_segments"]
    process.kill()
    process.wait()
    parts = [pids["server"], pids["evaluator"], *pids["workers"]]
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
      alive = [p for p in parts if psutil.pid_exists(p) and
               psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
      left = [n for n in pids["shm_segments"]
              if os.path.exists(f"/dev/shm/{n}")]
      if not alive and not left:
        break
      time.sleep(0.1)
    return workdir, alive, left
  finally:
    if process.poll() is None:
      process.kill()
      process.wait()


def test_a_sigkilled_driver_leaves_no_process_and_no_segment(sigkilled):
  _, alive, left = sigkilled
  assert not alive and not left, (alive, left)


def test_a_resume_after_a_sigkill_counts_every_sitting_s_bytes(sigkilled):
  # The killed sitting wrote no summary.json: its bytes and wall seconds come
  # from the checkpoint, which books those of the commits it holds.
  workdir, _, _ = sigkilled
  assert not (workdir / "summary.json").exists()
  ckpt = checkpoint.restore(str(workdir / "checkpoints"))
  offset = ckpt.meta["metrics_offset"]
  before = (workdir / "metrics.jsonl").read_bytes()
  lam, batch = 4, 32
  windows = ckpt.meta["worker_commits"][0] + 5
  epochs = windows * lam * batch / len(data.load("digits", seed=0).x_train)
  result = run_cli(f"--epochs={epochs + 1e-6}", f"--workdir={workdir}",
                   "--resume", "--noplots")
  assert result.returncode == 0, result.stderr[-3000:]
  summary = json.loads((workdir / "summary.json").read_text())
  assert summary["resumed_from_commit"] == ckpt.step > 0
  assert summary["num_commits"] == windows
  # The killed sitting's seconds up to its checkpoint, and all of this one's
  # (its rows' `wall_time` counts from this sitting's start).
  assert ckpt.meta["wall_seconds"] > 0
  assert summary["wall_seconds"] >= (ckpt.meta["wall_seconds"] +
                                     metrics_rows(workdir)[-1]["wall_time"])
  # Every commit once; what the checkpoint kept is unchanged.
  clocks = [r["clock"] for r in metrics_rows(workdir, ["commit"])]
  assert clocks == list(range(1, windows + 1))
  assert (workdir / "metrics.jsonl").read_bytes()[:offset] == before[:offset]
  # Each commit is a float32 delta. Each sitting's worker pulls the float32
  # center to start and after each commit: the killed sitting's c pulls up
  # to its last checkpointed commit, then windows - c + 1.
  p = 64 * 32 + 32 + 32 * 10 + 10
  assert summary["bytes_committed"] == windows * 4 * p
  assert summary["bytes_pulled"] == (windows + 1) * 4 * p


def test_resume_from_a_missing_workdir(tmp_path, monkeypatch, capsys):
  # The program's own check, in this process (`train_here`); the bad
  # resumes below run the program.
  workdir = tmp_path / "nope"
  result = train_here(monkeypatch, capsys, *TINY, f"--workdir={workdir}",
                      "--resume")
  line = assert_one_line_error(result)
  assert "no run to resume" in line and result.returncode == 2
  assert not workdir.exists()
  # The library says so too, before anything is written.
  with pytest.raises(CheckpointError, match="no such directory"):
    train(TrainConfig(workdir=str(workdir), resume=True))
  (workdir / "checkpoints").mkdir(parents=True)
  with pytest.raises(CheckpointError, match="no checkpoint in"):
    train(TrainConfig(workdir=str(workdir), resume=True))
  assert os.listdir(workdir) == ["checkpoints"]


def _interrupt_before_the_first_checkpoint(workdir):
  """SIGINT once the run owns `workdir` (metrics.jsonl); whether that was before any checkpoint."""
  process = subprocess.Popen(
      [sys.executable, "-m", "experiments.train", *TINY, "--epochs=0.5",
       "--noplots", "--checkpoint_every_seconds=3600", f"--workdir={workdir}"],
      cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  try:
    deadline = time.monotonic() + 90
    while not (workdir / "metrics.jsonl").exists():
      assert process.poll() is None, process.communicate()[1][-3000:]
      assert time.monotonic() < deadline
      time.sleep(0.005)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
  finally:
    if process.poll() is None:
      process.kill()
      process.wait()
  if process.returncode == 0:
    return False  # The run ended before the interrupt landed.
  assert process.returncode == 130, stderr[-3000:]
  if not (workdir / "summary.json").exists():
    # Landed before the run owned its workdir: nothing written, nothing left.
    assert not workdir.exists(), stderr[-3000:]
    return False
  assert json.loads((workdir / "summary.json").read_text())["interrupted"]
  return checkpoint.newest_step_on_disk(str(workdir / "checkpoints")) is None


# soak: test_resume_without_a_checkpoint_starts_afresh_in_the_same_run's
# workdir as this one leaves it, in the suite.
@pytest.mark.soak
def test_a_run_interrupted_before_its_first_checkpoint_resumes_afresh(
    tmp_path):
  # Once the server is up, an interrupt ends with a final checkpoint: the
  # signal must land before (summary.json, config.json, no checkpoint).
  for attempt in range(5):
    workdir = tmp_path / f"run{attempt}"
    if _interrupt_before_the_first_checkpoint(workdir):
      break
  else:
    pytest.fail("none of 5 interrupts landed between the workdir's first "
                "file and the server's start")
  # A fresh run there is refused (it holds a run); a resume starts it
  # afresh, saying so, and does the whole share.
  result = run_cli("--resume", "--noplots", f"--workdir={workdir}")
  assert result.returncode == 0, result.stderr[-3000:]
  [line] = [l for l in result.stderr.splitlines() if "no checkpoint" in l]
  assert line.endswith(f"no checkpoint in {workdir / 'checkpoints'}: the run "
                       "stopped before its first one; starting it afresh at "
                       "commit 0")
  summary = json.loads((workdir / "summary.json").read_text())
  assert summary["outcome"] == "completed"
  # 0.5 epochs of digits' training set, in windows of λ × batch per worker.
  share = len(data.load("digits", seed=0).x_train) // 2 // 2 // (4 * 32)
  assert summary["num_commits"] == 2 * share > 0
  clocks = [r["clock"] for r in metrics_rows(workdir, ["commit"])]
  assert clocks == list(range(1, 2 * share + 1))


def test_resume_without_a_checkpoint_starts_afresh_in_the_same_run(
    tmp_path, caplog):
  # What a run stopped before its first checkpoint leaves (the soak test
  # above, for real): its config, an interrupted summary, its first rows.
  workdir = tmp_path / "run"
  (workdir / "checkpoints").mkdir(parents=True)
  config = TrainConfig(dataset="digits", num_workers=2, communication_window=5,
                       hidden_sizes=(8,), batch_size=16, epochs=0.5,
                       backend="simulated", workdir=str(workdir)).validate()
  (workdir / "config.json").write_text(json.dumps(config.to_record()))
  (workdir / "summary.json").write_text(json.dumps(
      {"outcome": "interrupted", "num_commits": 0, "epochs": 0.5}))
  (workdir / "metrics.jsonl").write_text('{"event": "eval", "clock": 0}\n')
  before = snapshot(workdir)
  # Another run's settings: named, nothing touched.
  with pytest.raises(CheckpointError, match=(
      r"config.json is of a different run \(hidden_sizes=\[8\]; this run has "
      r"hidden_sizes=\[16\]\)")):
    train(dataclasses.replace(config, hidden_sizes=(16,), resume=True))
  assert snapshot(workdir) == before
  # The same run: from commit 0, saying so, its whole share.
  summary = train(dataclasses.replace(config, resume=True))
  [line] = [r.getMessage() for r in caplog.records
            if "no checkpoint" in r.getMessage()]
  assert line == (f"no checkpoint in {workdir / 'checkpoints'}: the run "
                  "stopped before its first one; starting it afresh at "
                  "commit 0")
  assert summary["outcome"] == "completed"
  # Half an epoch of digits' training set per worker's half, in windows of
  # λ × batch.
  share = len(data.load("digits", seed=0).x_train) // 2 // 2 // (5 * 16)
  assert summary["num_commits"] == 2 * share > 0
  assert [r["clock"] for r in metrics_rows(workdir, ["commit"])] == list(
      range(1, 2 * share + 1))
  # A run that completed without checkpoints is not trained again.
  shutil.rmtree(workdir / "checkpoints")
  before = snapshot(workdir)
  with pytest.raises(CheckpointError, match="the run completed without one"):
    train(dataclasses.replace(config, epochs=2.0, resume=True))
  assert snapshot(workdir) == before


def test_resume_from_a_corrupt_checkpoint(interrupted, tmp_path):
  workdir = tmp_path / "run"
  shutil.copytree(interrupted[0], workdir)
  # A flipped bit in the newest checkpoint's array data (verified against
  # its checksums), the one before unreadable (orbax's own error): no
  # intact one to fall back to.
  directory = workdir / "checkpoints"
  step = checkpoint.latest_step(str(directory))
  damage_checkpoint(directory / str(step))
  older = [p for p in directory.iterdir() if p.name != str(step)]
  assert older
  for parent, _, names in os.walk(older[0]):
    for name in names:
      if "state" in parent:
        with open(os.path.join(parent, name), "wb") as f:
          f.write(b"\x00garbage")
  before = snapshot(workdir)
  result = run_cli(*TINY, "--epochs=1000", "--max_seconds=5",
                   f"--workdir={workdir}", "--resume")
  line = assert_one_line_error(result)
  assert result.returncode == 1
  assert line.startswith(f"train: error: cannot resume from {workdir}: "
                         f"checkpoint {step} in {directory} is damaged: ")
  assert line.endswith("(SHA-256 mismatch); the 1 older one is damaged too")
  assert snapshot(workdir) == before


def test_resume_with_a_different_model(interrupted, tmp_path):
  workdir = tmp_path / "run"
  shutil.copytree(interrupted[0], workdir)
  before = snapshot(workdir)
  args = [a for a in TINY if not a.startswith("--hidden_sizes")]
  result = run_cli(*args, "--hidden_sizes=64", "--epochs=1000",
                f"--workdir={workdir}", "--resume")
  line = assert_one_line_error(result)
  assert result.returncode == 1
  assert "different run" in line and "hidden_sizes" in line
  assert snapshot(workdir) == before


def test_a_resume_checks_the_checkpoint_before_it_imports_a_plug_in(
    interrupted, tmp_path):
  # config.json names a model in a module planted in the workdir, the
  # current directory (first on sys.path): the checkpoint's run differs,
  # and that is said before the module can run.
  workdir = tmp_path / "run"
  shutil.copytree(interrupted[0], workdir)
  (workdir / "planted.py").write_text(
      "import pathlib\npathlib.Path('MARKER').write_text('imported')\n"
      "def model(**kwargs):\n  raise SystemExit(3)\n")
  config = json.loads((workdir / "config.json").read_text())
  (workdir / "config.json").write_text(json.dumps(dict(config,
                                                       model="planted:model")))
  before = snapshot(workdir)
  result = subprocess.run(
      [sys.executable, "-m", "experiments.train", "--resume", "--workdir=.",
       "--epochs=1000"], cwd=workdir, capture_output=True, text=True,
      timeout=120, env=dict(os.environ, PYTHONPATH=str(REPO)))
  line = assert_one_line_error(result)
  assert result.returncode == 1
  assert line.startswith("train: error: cannot resume from .: the checkpoint "
                         "is of a different run (model='mlp'; this run has "
                         "model='planted:model')")
  assert not (workdir / "MARKER").exists()
  assert snapshot(workdir) == before


def test_resume_on_the_simulated_backend_is_one_line(interrupted, tmp_path):
  # A processes checkpoint holds no worker state; the simulator needs all.
  workdir = tmp_path / "run"
  shutil.copytree(interrupted[0], workdir)
  before = snapshot(workdir)
  result = run_cli("--backend=simulated", "--epochs=1000",
                   f"--workdir={workdir}", "--resume")
  line = assert_one_line_error(result)
  assert result.returncode == 1
  assert "not a simulated run's" in line and "--backend" in line
  assert snapshot(workdir) == before


@pytest.fixture(scope="module")
def full_disk(tmp_path_factory):
  """A one-worker CLI run on a 4 MiB tmpfs of its own with about 192 kB free (root only), run until the disk is full.

  Returns:
    (the run's workdir, its `subprocess.run` result).
  """
  mount = tmp_path_factory.mktemp("disk")
  mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs",
                            str(mount)], capture_output=True)
  if mounted.returncode != 0:
    pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()!r}")
  try:
    with open(mount / "filler", "wb") as f:
      f.write(b"\0" * (4 * 2**20 - 192 * 2**10))
    # One worker: a second would fill the disk the same way, and start later.
    workdir = mount / "run"
    result = run_cli(*TINY, "--num_workers=1", "--epochs=400",
                     "--checkpoint_every_seconds=0.2", "--noplots",
                     f"--workdir={workdir}")
    yield workdir, result
  finally:
    subprocess.run(["umount", "-l", str(mount)], check=True)


def test_a_full_disk_ends_the_run_in_one_line(full_disk):
  workdir, result = full_disk
  assert result.returncode == 1, result.stderr[-3000:]
  assert "Traceback" not in result.stderr
  # After the progress bar, one line: the file it could not write, and why.
  lines = result.stderr.replace("\r", "\n").strip().splitlines()
  line = lines[-1]
  assert [l for l in lines if "error" in l.lower()] == [line], lines[-3:]
  assert "cannot write" in line and f"{workdir}/" in line, line
  assert "[Errno 28] No space left on device" in line, line
  # What could be written says how the run ended; else error.log, or the
  # disk had no room for either.
  summary_path = workdir / "summary.json"
  if summary_path.exists():
    summary = json.loads(summary_path.read_text())
    assert summary["outcome"] == "failed"
    assert summary["failure"] == line.split("train: error: ", 1)[1]
  # The last checkpoint is whole: its arrays read back, and a resume of the
  # run would take it.
  assert checkpoint.restore(str(workdir / "checkpoints")).step > 0
  checkpoint.validate_for_resume(
      str(workdir), json.loads((workdir / "config.json").read_text()),
      len(data.load("digits", seed=0).x_train))


# soak: test_a_resume_after_a_sigkill_counts_every_sitting_s_bytes covers a
# CLI resume of a run that ended abruptly after a checkpoint (every commit
# once, what the checkpoint kept of metrics.jsonl unchanged), in the suite.
@pytest.mark.soak
def test_a_resume_elsewhere_after_a_full_disk_finishes(full_disk, tmp_path):
  # The last checkpoint is usable, and a resume elsewhere finishes with
  # every commit once.
  elsewhere = tmp_path / "elsewhere"
  shutil.copytree(full_disk[0], elsewhere)
  ckpt = checkpoint.restore(str(elsewhere / "checkpoints"))
  offset = ckpt.meta["metrics_offset"]
  before = (elsewhere / "metrics.jsonl").read_bytes()
  lam, batch, n = 4, 32, 1
  num_train = len(data.load("digits", seed=0).x_train)
  windows = max(ckpt.meta["worker_commits"]) + 20
  epochs = windows * lam * batch * n / num_train + 1e-6
  result = run_cli(f"--epochs={epochs}", f"--workdir={elsewhere}", "--resume",
                   "--noplots")
  assert result.returncode == 0, result.stderr[-3000:]
  summary = json.loads((elsewhere / "summary.json").read_text())
  assert summary["outcome"] == "completed"
  assert summary["resumed_from_commit"] == ckpt.step
  clocks = [r["clock"] for r in metrics_rows(elsewhere, ["commit"])]
  assert clocks == list(range(1, summary["num_commits"] + 1))
  assert summary["num_commits"] == n * windows
  # What the checkpoint kept is unchanged; the rest was written anew.
  assert (elsewhere / "metrics.jsonl").read_bytes()[:offset] == before[:offset]


def test_nothing_is_ever_loaded_with_pickle():
  """Files are read as JSON, orbax arrays or .npy with allow_pickle=False."""
  offenders = []
  for root in ("agn_jax", "experiments", "scripts"):
    for path in (REPO / root).rglob("*.py"):
      text = path.read_text()
      for needle in ("pickle.load", "allow_pickle=True", "cloudpickle.load",
                     "dill.load", "PyTreeRestore"):
        if needle in text:
          offenders.append(f"{path.relative_to(REPO)}: {needle}")
      if "np.load(" in text and "allow_pickle=False" not in text:
        offenders.append(f"{path.relative_to(REPO)}: np.load without "
                         "allow_pickle=False")
  assert not offenders, offenders
