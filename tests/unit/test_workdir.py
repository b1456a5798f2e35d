"""The workdir lock with real processes, impossible paths, symlinks and default names."""

import json
import os
import subprocess
import sys

import pytest

from agn_jax import workdir as workdir_lib
from agn_jax.errors import WorkdirError


def test_impossible_paths_are_one_line_errors(tmp_path):
  regular = tmp_path / "file"
  regular.write_text("x")
  target = tmp_path / "target"
  target.mkdir()
  link = tmp_path / "link"
  link.symlink_to(target)
  cases = [
      (regular / "run", True, "cannot create workdir"),
      (regular, True, "is a file"),
      ("/proc/agn_jax_no_such/run", True, "cannot create workdir"),
      (tmp_path / "missing", False, "no such directory"),
      (link, True, "is a symlink"),
      (link, False, "is a symlink"),
  ]
  for path, create, reason in cases:
    with pytest.raises(WorkdirError) as e:
      workdir_lib.lock_workdir(str(path), create=create, owner="me")
    assert reason in str(e.value) and str(path) in str(e.value)
    assert "\n" not in str(e.value)
  assert os.listdir(target) == []  # Nothing was written through the link.


def test_a_symlinked_lock_file_is_refused(tmp_path):
  outside = tmp_path / "outside"
  outside.write_text("keep")
  run = tmp_path / "run"
  run.mkdir()
  (run / workdir_lib.LOCK_NAME).symlink_to(outside)
  with pytest.raises(WorkdirError, match="symlink"):
    workdir_lib.lock_workdir(str(run), create=False, owner="me")
  assert outside.read_text() == "keep"


def test_symlinked_run_entries_are_refused(tmp_path):
  outside = tmp_path / "outside"
  outside.mkdir()
  (outside / "metrics.jsonl").write_text("precious\n")
  run = tmp_path / "run"
  run.mkdir()
  (run / "summary.json").write_text("{}")
  workdir_lib.check_no_symlinks(str(run))  # Real files and missing ones: fine.
  (run / "metrics.jsonl").symlink_to(outside / "metrics.jsonl")
  with pytest.raises(WorkdirError, match="metrics.jsonl is a symlink"):
    workdir_lib.check_no_symlinks(str(run))
  for mode in ("r", "a", "w", "r+b"):
    with pytest.raises(WorkdirError, match="metrics.jsonl"):
      workdir_lib.safe_open(str(run), "metrics.jsonl", mode)
  assert (outside / "metrics.jsonl").read_text() == "precious\n"
  os.unlink(run / "metrics.jsonl")
  # A link inside checkpoints/ is found too, and opening through one is refused.
  (run / "checkpoints").mkdir()
  (run / "checkpoints" / "7").symlink_to(outside)
  with pytest.raises(WorkdirError, match="checkpoints/7 is a symlink"):
    workdir_lib.check_no_symlinks(str(run), ["checkpoints"])
  with pytest.raises(WorkdirError, match="symlink"):
    workdir_lib.safe_open(str(run), "checkpoints/7/metrics.jsonl", "w")
  with pytest.raises(WorkdirError, match="inside the workdir"):
    workdir_lib.safe_open(str(run), "../outside/metrics.jsonl", "w")
  assert (outside / "metrics.jsonl").read_text() == "precious\n"


def test_write_atomic_replaces_a_planted_link_not_its_target(tmp_path):
  outside = tmp_path / "outside.json"
  outside.write_text("keep")
  run = tmp_path / "run"
  run.mkdir()
  (run / "summary.json.tmp").symlink_to(outside)
  workdir_lib.write_atomic(str(run), "summary.json", '{"ok": 1}\n')
  assert json.loads((run / "summary.json").read_text()) == {"ok": 1}
  assert outside.read_text() == "keep"
  assert sorted(os.listdir(run)) == ["summary.json"]


def test_entries_ignore_the_lock_file(tmp_path):
  with workdir_lib.lock_workdir(str(tmp_path / "run"), create=True,
                                owner="me"):
    assert workdir_lib.entries(str(tmp_path / "run")) == []
    (tmp_path / "run" / "config.json").write_text("{}")
    assert workdir_lib.entries(str(tmp_path / "run")) == ["config.json"]


def test_a_dead_runs_segments_and_semaphores_are_unlinked_a_live_ones_not(
    tmp_path):
  import multiprocess  # pylint: disable=g-import-not-at-top
  from agn_jax.runtime import backend  # pylint: disable=g-import-not-at-top
  from agn_jax.runtime.transports import shm  # pylint: disable=g-import-not-at-top
  segment = shm.Segment.create(64, track=False)
  semaphore = multiprocess.get_context("spawn").Semaphore(0)
  (sem_name,) = shm.semaphore_names(semaphore)
  files = [f"/dev/shm/{segment.name}", f"/dev/shm/sem.{sem_name[1:]}"]
  dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                        capture_output=True, text=True, check=True)
  record = {"server": int(dead.stdout), "evaluator": None, "workers": [],
            "restarted_workers": [], "shm_segments": [segment.name],
            "semaphores": [sem_name]}
  try:
    # One live process among the run's: nothing is touched.
    (tmp_path / "pids.json").write_text(json.dumps(
        dict(record, workers=[os.getpid()])))
    assert backend.unlink_dead_run_leftovers(tmp_path) == []
    assert all(os.path.exists(f) for f in files)
    # Every process gone: both names are unlinked, and only they.
    (tmp_path / "pids.json").write_text(json.dumps(record))
    assert backend.unlink_dead_run_leftovers(tmp_path) == [segment.name,
                                                           sem_name]
    assert not any(os.path.exists(f) for f in files)
    assert backend.unlink_dead_run_leftovers(tmp_path) == []
    # The semaphore's own clean-up would now find its name gone.
    for finalizer in list(multiprocess.util._finalizer_registry.values()):  # pylint: disable=protected-access
      if getattr(finalizer, "_args", None) == (sem_name,):
        finalizer.cancel()
    multiprocess.resource_tracker.unregister(sem_name, "semaphore")
  finally:
    segment.close()
    segment.unlink()


def test_a_run_refused_before_the_holder_wrote_its_record_waits_for_it(
    tmp_path):
  # The holder has locked the file but not yet written its pid (a real
  # holder does that next): the refusal names the pid once written.
  import fcntl
  import threading
  path = tmp_path / "run"
  path.mkdir()
  fd = os.open(path / workdir_lib.LOCK_NAME, os.O_RDWR | os.O_CREAT)
  try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    writer = threading.Timer(0.3, lambda: os.pwrite(
        fd, b'{"pid": 4242, "host": "h", "command": "c"}\n', 0))
    writer.start()
    with pytest.raises(workdir_lib.WorkdirBusy, match="pid 4242 on h"):
      workdir_lib.lock_workdir(str(path), create=False, owner="me")
    writer.join()
  finally:
    os.close(fd)
