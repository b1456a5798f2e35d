"""The end-to-end half of tests/unit/test_workdir.py: real processes, subprocesses or whole runs."""

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from agn_jax import workdir as workdir_lib
from agn_jax.errors import WorkdirBusy, WorkdirError
from helpers import REPO


ROOT = str(REPO)


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
