"""The workdir lock with real processes, impossible paths, symlinks and default names."""

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from agn_jax import workdir as workdir_lib
from agn_jax.errors import WorkdirBusy, WorkdirError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Locks the workdir given as argv[1], says so, and holds it until stdin closes.
_HOLDER = textwrap.dedent(f"""
    import os, sys
    sys.path.insert(0, {ROOT!r})
    from agn_jax.errors import WorkdirBusy
    from agn_jax import workdir
    try:
      lock = workdir.lock_workdir(sys.argv[1], create=True,
                                  owner="holder " + sys.argv[2])
    except WorkdirBusy as e:
      print("busy", e, flush=True)
      sys.exit(3)
    print("locked", os.getpid(), flush=True)
    sys.stdin.read()
    lock.release()
    print("released", flush=True)
""")


def start_holder(path, tag="a"):
  return subprocess.Popen([sys.executable, "-c", _HOLDER, str(path), tag],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True)


def stop(proc):
  if proc.poll() is None:
    proc.kill()
  proc.wait()
  for stream in (proc.stdin, proc.stdout):
    if stream and not stream.closed:
      stream.close()


@pytest.mark.slow
def test_second_process_is_told_who_holds_the_workdir(tmp_path):
  path = tmp_path / "run"
  holder = start_holder(path)
  try:
    line = holder.stdout.readline().split()
    assert line == ["locked", str(holder.pid)]
    with pytest.raises(WorkdirBusy) as e:
      workdir_lib.lock_workdir(str(path), create=True, owner="me")
    message = str(e.value)
    assert "\n" not in message
    assert f"pid {holder.pid}" in message and "holder a" in message
    assert str(path) in message
    # --resume (no create) is refused the same way.
    with pytest.raises(WorkdirBusy, match=f"pid {holder.pid}"):
      workdir_lib.lock_workdir(str(path), create=False, owner="me")
    holder.stdin.close()
    assert holder.stdout.readline().strip() == "released"
    assert holder.wait() == 0
  finally:
    stop(holder)
  with workdir_lib.lock_workdir(str(path), create=False, owner="me") as lock:
    assert lock.held
    with open(path / workdir_lib.LOCK_NAME) as f:
      assert json.load(f)["pid"] == os.getpid()
  assert not lock.held
  assert os.listdir(path) == []


@pytest.mark.slow
def test_two_processes_contending_exactly_one_wins(tmp_path):
  path = tmp_path / "shared"
  procs = [start_holder(path, tag) for tag in ("a", "b")]
  try:
    lines = [p.stdout.readline().split() for p in procs]
    winners = [i for i, line in enumerate(lines) if line[0] == "locked"]
    assert len(winners) == 1, lines
    winner, loser = procs[winners[0]], procs[1 - winners[0]]
    assert loser.wait() == 3
    assert f"pid {winner.pid}" in " ".join(lines[1 - winners[0]])
  finally:
    for p in procs:
      stop(p)


@pytest.mark.slow
def test_lock_is_released_when_the_holder_is_killed(tmp_path):
  path = tmp_path / "run"
  holder = start_holder(path)
  try:
    assert holder.stdout.readline().split()[0] == "locked"
    with pytest.raises(WorkdirBusy):
      workdir_lib.lock_workdir(str(path), create=False, owner="me")
    holder.send_signal(signal.SIGKILL)
    assert holder.wait() == -signal.SIGKILL
  finally:
    stop(holder)
  # The stale lock file is still there, but nobody holds it.
  assert os.listdir(path) == [workdir_lib.LOCK_NAME]
  with workdir_lib.lock_workdir(str(path), create=False, owner="me") as lock:
    assert lock.holder["pid"] == os.getpid()


@pytest.mark.slow
def test_lock_is_not_inherited_by_a_spawned_child(tmp_path):
  # The runtime spawns its server and workers while the launcher holds the
  # lock; a child that outlives the launcher must not keep the workdir.
  path = tmp_path / "run"
  with workdir_lib.lock_workdir(str(path), create=True, owner="parent"):
    child = subprocess.run([sys.executable, "-c", _HOLDER, str(path), "c"],
                           input="", capture_output=True, text=True,
                           timeout=60)
    assert child.returncode == 3
    assert f"pid {os.getpid()}" in child.stdout


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


@pytest.mark.slow
def test_default_names_never_collide(tmp_path):
  # Many in one second from one process, and two processes at once.
  names = {workdir_lib.unique_default_workdir(str(tmp_path), "agn-n2-l10")
           for _ in range(50)}
  assert len(names) == 50
  script = (f"import sys; sys.path.insert(0, {ROOT!r}); "
            "from agn_jax import workdir; "
            f"print(workdir.unique_default_workdir({str(tmp_path)!r}, 's'))")
  procs = [subprocess.Popen([sys.executable, "-c", script],
                            stdout=subprocess.PIPE, text=True)
           for _ in range(2)]
  outputs = [p.communicate(timeout=60)[0].strip() for p in procs]
  assert all(p.returncode == 0 for p in procs)
  assert outputs[0] != outputs[1]
  assert all(os.path.isdir(o) and not os.listdir(o) for o in outputs)
  with pytest.raises(WorkdirError, match="cannot create"):
    (tmp_path / "file").write_text("x")
    workdir_lib.unique_default_workdir(str(tmp_path / "file"), "s")


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
