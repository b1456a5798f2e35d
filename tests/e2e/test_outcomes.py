"""End-to-end outcomes through real processes: recovery from rejected commits, honest failure,
time bases, resuming a finished run, and the strategies other than AGN."""


import json
import os
import shutil
import signal

import numpy as np
import pytest

from agn_jax.runtime import Fault, Faults, NothingToDo, RunError, train
from agn_jax.config import ProcessesOptions
from helpers import assert_nothing_left, metrics_rows, snapshot, tiny_config
from helpers import train_in_process



def _config(tmp_path, **overrides):
  return tiny_config(tmp_path, **dict(
      dict(num_workers=2, communication_window=5, hidden_sizes=(32,),
           batch_size=16, epochs=4.0, checkpoint_every_seconds=0.0),
      **overrides))


_NAN = Faults(fault=Fault("nan", worker=1, window=2))


@pytest.fixture(scope="module")
def recovered_run(tmp_path_factory):
  """AGN on processes (n = 2, 4 epochs), worker 1 non-finite before its window 2: its summary and workdir.

  Read by the recovery and time-base tests, copied and resumed by the resume
  test: one run of processes for the three.
  """
  tmp_path = tmp_path_factory.mktemp("recovered")
  summary = train(_config(tmp_path, strategy="agn"), faults=_NAN)
  return summary, tmp_path / "run"


@pytest.mark.parametrize("strategy", ["agn", "aeasgd"])
def test_a_worker_recovers_after_a_non_finite_window(request, tmp_path,
                                                     strategy):
  # Worker 1's parameters turn non-finite before its window 2, as after a
  # non-finite gradient: its Adam moments (agn) or its never-reset elastic
  # parameters (aeasgd) would make every later commit non-finite too, unless
  # the worker starts afresh from the center. The guard is the worker
  # loop's, whatever holds it: AGN's run is real processes, AEASGD's the same
  # loops as threads (a second run of processes would only start them again).
  if strategy == "agn":
    summary, workdir = request.getfixturevalue("recovered_run")
    center = np.load(workdir / "center.npy", allow_pickle=False)
  else:
    summary, center, _ = train_in_process(_config(
        tmp_path, strategy=strategy,
        options=ProcessesOptions(cache_dir="")).resolved(), _NAN)
    workdir = tmp_path / "run"
  windows = summary["expected_commits"] // 2
  assert windows >= 5
  assert summary["rejected_commits"] == 1
  assert summary["rejected_commits_per_worker"] == [0, 1]
  assert summary["worker_commits"] == [windows, windows]
  assert summary["num_commits"] == 2 * windows - 1
  assert summary["commits_acknowledged"] == sum(summary["worker_commits"])
  assert summary["completed"] is True and summary["outcome"] == "completed"
  assert np.isfinite(summary["final_test_loss"])
  assert np.isfinite(center).all()
  rows = metrics_rows(workdir)
  rejected = [r for r in rows if r["event"] == "rejected"]
  assert [r["worker"] for r in rejected] == [1]
  later = [r for r in rows[rows.index(rejected[0]):]
           if r["event"] == "commit" and r["worker"] == 1]
  assert len(later) == windows - 3  # Windows 3.. of worker 1, all applied.
  if strategy == "agn":
    assert_nothing_left(workdir)


def _summary(tmp_path):
  return json.loads((tmp_path / "run" / "summary.json").read_text())


def test_a_diverging_run_fails_with_one_line_naming_the_worker(tmp_path):
  # One worker: its processes start sooner, and it diverges as two would.
  with pytest.raises(RunError) as error:
    train(_config(tmp_path, num_workers=1, learning_rate=1e30, epochs=8.0))
  message = str(error.value)
  assert "\n" not in message
  assert message.startswith("worker ")
  assert "3 commits in a row were non-finite" in message
  summary = _summary(tmp_path)
  assert (summary["outcome"], summary["failure"]) == ("failed", message)
  assert summary["completed"] is False
  # The counts so far: every commit was rejected, none applied.
  assert summary["num_commits"] == 0 and summary["rejected_commits"] >= 3
  assert_nothing_left(tmp_path / "run")


def test_a_killed_server_fails_the_run_and_its_summary_says_so(tmp_path):
  killed = []

  def kill_server(row):
    if row["event"] == "commit" and row["clock"] >= 5 and not killed:
      pids = json.loads((tmp_path / "run" / "pids.json").read_text())
      os.kill(pids["server"], signal.SIGKILL)
      killed.append(row["clock"])

  # One worker: its processes start sooner; the server dies as with two.
  with pytest.raises(RunError, match="^server killed by signal 9$"):
    train(_config(tmp_path, num_workers=1, epochs=200.0),
          progress=kill_server)
  summary = _summary(tmp_path)
  assert summary["outcome"] == "failed"
  assert summary["failure"] == "server killed by signal 9"
  assert summary["num_commits"] >= killed[0]
  commits = metrics_rows(tmp_path / "run", ["commit"])
  assert summary["num_commits"] == len(commits)
  assert_nothing_left(tmp_path / "run")


def test_a_run_that_never_began_training_says_so(tmp_path):
  # Its only worker fails before its first commit, with no restart allowed.
  with pytest.raises(RunError, match="no restarts left") as error:
    train(_config(tmp_path, num_workers=1, max_worker_restarts=0),
          faults=Faults(fault=Fault("raise", worker=0, window=0)))
  summary = _summary(tmp_path)
  assert summary["outcome"] == "failed"
  assert summary["failure"] == str(error.value)
  assert summary["num_commits"] == 0 and summary["worker_commits"] == [None]
  assert "injected fault" in (tmp_path / "run" / "error.log").read_text()
  assert_nothing_left(tmp_path / "run")


def test_rows_are_timed_from_the_start_barrier(recovered_run):
  # A worker that starts afresh from the center is not ready again: one
  # start barrier, one time base.
  summary, workdir = recovered_run
  rows = metrics_rows(workdir)
  ready = [r for r in rows if r["event"] == "worker_ready"]
  commits = [r for r in rows if r["event"] == "commit"]
  assert len(ready) == 2 and all(r["time"] <= 0 for r in ready)
  assert all(r["time"] >= 0 for r in commits)
  # Start-up (spawn, data, compilation) is outside `time`, inside `wall_time`.
  assert summary["startup_seconds"] > 0
  for r in rows:
    assert r["wall_time"] == pytest.approx(
        r["time"] + summary["startup_seconds"], abs=0.01)
  assert summary["training_seconds"] == pytest.approx(commits[-1]["time"],
                                                      abs=0.01)


# soak: tests/unit/test_transport_conformance.py's
# test_commits_come_out_first_in_first_out_with_their_meta covers a
# two-vector payload through shared memory (and the other kits), and
# tests/e2e/test_exchange_e2e.py ADAG's commits through the real worker and
# server loops, bit for bit against the exchange, in the suite.
@pytest.mark.soak
def test_adag_two_vector_payload_through_processes(tmp_path):
  summary = train(_config(tmp_path, strategy="adag", epochs=6.0))
  assert summary["completed"] is True
  assert summary["num_commits"] == summary["expected_commits"]
  assert summary["rejected_commits"] == 0
  assert summary["final_test_accuracy"] > 0.5  # Chance is 0.1.


def test_resume_of_a_finished_run(recovered_run, tmp_path):
  first, finished = recovered_run
  workdir = tmp_path / "run"
  shutil.copytree(finished, workdir)  # The run itself stays as it ended.
  before = snapshot(workdir)
  with pytest.raises(NothingToDo, match="completed already"):
    train(_config(tmp_path, epochs=4.0, resume=True))
  assert snapshot(workdir) == before  # Not a byte, not an mtime changed.

  # A larger share continues the run and keeps whole-run statistics: its
  # rejected commit too.
  second = train(_config(tmp_path, epochs=8.0, resume=True))
  assert second["completed"] is True
  assert second["resumed_from_commit"] == first["num_commits"]
  assert second["rejected_commits"] == first["rejected_commits"] == 1
  assert second["rejected_commits_per_worker"] == [0, 1]
  assert (second["num_commits"] + second["rejected_commits"] ==
          second["expected_commits"])
  assert second["num_commits"] >= 2 * first["num_commits"]
  assert second["wall_seconds"] > first["wall_seconds"]
  rows = metrics_rows(workdir)
  commits = [r for r in rows if r["event"] == "commit"]
  assert [r["clock"] for r in commits] == list(
      range(1, second["num_commits"] + 1))
  assert second["mean_staleness"] == pytest.approx(
      np.mean([r["staleness"] for r in commits]))
  times = [r["time"] for r in commits]
  assert times == sorted(times)  # The time base continues across sessions.
  assert_nothing_left(workdir)
