"""Replays the reliability attacks against the real CLI and prints one PASS/FAIL line each.

Attacks 1-10: two runs on one workdir, resumes, failures, bad input,
symlinks. Attacks 11-15: the Ray backend's end with its driver and its
start-up interrupted, a full disk, flagfile cycles, and the outcome every
ended run records in summary.json. Attacks 16-18 (round four) live in
attacks_flags.py (bad flag values, --help, configs), attacks_data.py (data
files, studies, compare) and attacks_runtime.py (completion, traces, leaks);
attacks 19 (round five) in attacks_resume.py (damaged checkpoints, resumes
that must go on, plug-ins imported only after the checkpoint's check),
attacks 20 in attacks_plugins.py (a user's dataset, task and model that break
their contract), attacks 21 in attacks_readers.py (a cell's own run, a run's
files that agree, the report's commands, import paths in sweeps), attacks 22
in attacks_fit.py (scripts/fit_cluster.py's command line);
attacklib.py holds the helpers they share.

Every attack runs `python -m experiments.train | compare | sweep` as a user
would, in a temporary directory, on small runs (digits, 2 workers, 2 epochs).
A run that hangs is killed (its whole process group) after a deadline and
counts as a failure. Ends with one JSON line: the results, the counts and the
machine. Exit status 1 if any attack failed.

  python scripts/attacks.py [--only 1a,7c] [--keep]

Not part of the test suite: it takes a few minutes of real training.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Callable, Dict, List, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# pylint: disable=g-import-not-at-top,wildcard-import,unused-wildcard-import
from attacklib import *
from attacks_data import DataAttacks
from attacks_fit import FitAttacks
from attacks_flags import FlagAttacks
from attacks_plugins import PluginAttacks
from attacks_readers import ReaderAttacks
from attacks_resume import ResumeAttacks
from attacks_runtime import RuntimeAttacks
# pylint: enable=g-import-not-at-top,wildcard-import,unused-wildcard-import


class Attacks(FlagAttacks, DataAttacks, RuntimeAttacks, ResumeAttacks,
              PluginAttacks, ReaderAttacks, FitAttacks):
  """The attacks, each a method that raises `Failed` or returns a note."""

  def __init__(self, root: str):
    self.root = root
    self.workdirs: List[str] = []
    self._base: Optional[str] = None

  def path(self, name: str) -> str:
    return os.path.join(self.root, name)

  def base(self) -> str:
    """A finished run, trained once; attacks work on copies of it."""
    if self._base is None:
      workdir = self.path("base")
      result = cli("train", *SMALL, "--seed=0", f"--workdir={workdir}")
      expect_success(result, "the base run")
      self.workdirs.append(workdir)
      self._base = workdir
    return self._base

  def copy(self, name: str) -> str:
    target = self.path(name)
    shutil.copytree(self.base(), target, symlinks=True)
    self.workdirs.append(target)
    return target

  # 1. Two runs on one workdir.

  def attack_1a(self):
    """two runs with the default workdir started together get different workdirs"""
    cwd = self.path("defaults")
    os.makedirs(cwd)
    procs = [start("train", *SMALL, f"--seed={s}", cwd=cwd) for s in (1, 2)]
    results = [finish(p) for p in procs]
    for r in results:
      expect_success(r, "a default-workdir run")
    dirs = [results_dir(r) for r in results]
    self.workdirs += [os.path.join(cwd, d) for d in dirs if d]
    if None in dirs or dirs[0] == dirs[1]:
      raise Failed(f"both report {dirs[0]}")
    for d, seed in zip(dirs, (1, 2)):
      if read_json(os.path.join(cwd, d, "config.json")).get("seed") != seed:
        raise Failed(f"{d}/config.json is not the seed-{seed} run's")
    return f"{dirs[0]} / {dirs[1]}"

  def attack_1b(self):
    """two runs on one explicit --workdir: one runs, the other names it in one line"""
    workdir = self.path("shared")
    procs = [start("train", *SMALL, f"--seed={s}", f"--workdir={workdir}")
             for s in (1, 2)]
    results = [finish(p) for p in procs]
    self.workdirs.append(workdir)
    ok = [i for i, r in enumerate(results) if r.rc == 0]
    if len(ok) != 1:
      raise Failed(f"{len(ok)} of 2 runs exited 0")
    winner, loser = ok[0], 1 - ok[0]
    line = expect_one_line_error(results[loser], "train")
    if f"pid {procs[winner].pid}" not in line:
      raise Failed(f"the error does not name pid {procs[winner].pid}: {line}")
    if read_json(os.path.join(workdir, "config.json")).get("seed") != winner + 1:
      raise Failed("config.json is not the winner's")
    return line

  # 2. Two concurrent --resume.

  def attack_2(self):
    """two --resume at once: one continues, the other names it; metrics.jsonl stays whole"""
    workdir = self.copy("resume2")
    procs = [start("train", "--resume", f"--workdir={workdir}", "--epochs=4")
             for _ in range(2)]
    results = [finish(p) for p in procs]
    ok = [i for i, r in enumerate(results) if r.rc == 0]
    if len(ok) != 1:
      raise Failed(f"{len(ok)} of 2 resumes exited 0")
    expect_one_line_error(results[1 - ok[0]], "train")
    clocks = []
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
      for line in f:
        event = json.loads(line)
        if event.get("event") == "commit":
          clocks.append(event["clock"])
    if clocks != list(range(1, len(clocks) + 1)):
      raise Failed(f"commit clocks not 1..{len(clocks)} in order "
                   "(duplicates or gaps)")
    return f"{len(clocks)} commits, clocks in order"

  # 3. and 4. sweep --resume.

  def attack_3(self):
    """sweep --resume resumes an interrupted run instead of keeping it"""
    from experiments import rundirs  # pylint: disable=g-import-not-at-top
    sweep_dir = self.path("sweep3")
    args = ["--num_workers=2", "--epochs=300", "--dataset=digits",
            "--eval_every_seconds=1", "--checkpoint_every_seconds=1",
            f"--sweep_dir={sweep_dir}"]
    proc = start("sweep", *args)
    cell = os.path.join(sweep_dir, "agn-n2-l10")
    self.workdirs.append(cell)
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline and proc.poll() is None:
      if glob.glob(os.path.join(cell, "checkpoints", "[0-9]*")):
        break
      time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    first = finish(proc)
    summary = read_json(os.path.join(cell, "summary.json"))
    if first.rc == 0 or not summary.get("interrupted"):
      raise Failed("the run could not be interrupted in time (finished); "
                   "rerun the attack")
    result = cli("sweep", *args, "--resume")
    expect_success(result, "sweep --resume")
    if not rundirs.completed(cell):
      raise Failed("kept the interrupted run: its summary is incomplete "
                   f"({read_json(os.path.join(cell, 'summary.json')).get('num_commits')} commits)")
    return (f"interrupted at {summary.get('num_commits')} commits, resumed to "
            f"{read_json(os.path.join(cell, 'summary.json')).get('num_commits')}")

  def attack_4(self):
    """sweep --resume gets past a cell that failed without a checkpoint, and past a failing cell"""
    from experiments import rundirs  # pylint: disable=g-import-not-at-top
    sweep_dir = self.path("sweep4")
    crashed = os.path.join(sweep_dir, "agn-n2-l10")
    os.makedirs(crashed)
    with open(os.path.join(crashed, "config.json"), "w") as f:
      json.dump({"strategy": "agn"}, f)
    with open(os.path.join(crashed, "metrics.jsonl"), "w") as f:
      f.write(json.dumps({"event": "worker_ready", "time": 1.0,
                          "worker": 0}) + "\n")
    with open(os.path.join(sweep_dir, "sweep.md"), "w") as f:
      f.write("# Sweep\n")
    result = cli("sweep", "--num_workers=2,5000", "--epochs=2",
                 "--dataset=digits", f"--sweep_dir={sweep_dir}", "--resume")
    self.workdirs.append(crashed)
    line = expect_one_line_error(result, "sweep")
    if "n=5000" not in line or "n=2 " in line:
      raise Failed(f"the error names the wrong cells: {line}")
    if not rundirs.completed(crashed):
      raise Failed("the crashed cell was not rerun to completion")
    return line

  # 5. Every commit rejected.

  def attack_5(self):
    """a run whose every commit is rejected (--learning_rate=1e30) ends nonzero in one line"""
    workdir = self.path("rejected")
    result = cli("train", *SMALL, "--learning_rate=1e30",
                 f"--workdir={workdir}")
    self.workdirs.append(workdir)
    line = expect_one_line_error(result, "train")
    summary_path = os.path.join(workdir, "summary.json")
    if os.path.exists(summary_path):
      text = open(summary_path).read()
      if "NaN" in text:
        raise Failed("summary.json holds NaN")
    return line

  def attack_5b(self):
    """--rho=inf and --learning_rate=inf end nonzero in one line"""
    for flag in ("--rho=inf", "--learning_rate=inf"):
      workdir = self.path("inf" + flag.split("=")[0].strip("-"))
      result = cli("train", *SMALL, "--strategy=aeasgd", flag,
                   f"--workdir={workdir}")
      self.workdirs.append(workdir)
      expect_one_line_error(result, "train")
    return "both refused"

  # 6. --resume of a finished run.

  def attack_6(self):
    """--resume of a finished run changes no file"""
    workdir = self.copy("finished6")
    before = snapshot(workdir)
    result = cli("train", "--resume", f"--workdir={workdir}")
    if result.rc is None:
      raise Failed("hung")
    if "Traceback" in result.stderr:
      raise Failed("traceback")
    expect_unchanged(before, workdir)
    return f"exit {result.rc}: {(lines_of(result.stderr) or [''])[-1][:100]}"

  # 7. Tracebacks.

  def attack_7a(self):
    """--workdir under a regular file: one line"""
    regular = self.path("regular_file")
    with open(regular, "w") as f:
      f.write("x")
    return expect_one_line_error(
        cli("train", *SMALL, f"--workdir={regular}/run"), "train")

  def attack_7b(self):
    """--workdir under /proc: one line"""
    return expect_one_line_error(
        cli("train", *SMALL, "--workdir=/proc/agn_attack/run"), "train")

  def attack_7c(self):
    """compare on a metrics.jsonl with a non-numeric field: one line"""
    a, b = self.copy("compare_a"), self.copy("compare_b")
    path = os.path.join(b, "metrics.jsonl")
    with open(path) as f:
      lines = f.readlines()
    for i, line in enumerate(lines[:-1]):
      event = json.loads(line)
      if event.get("event") == "commit":
        event["accuracy"] = "high"
        lines[i] = json.dumps(event) + "\n"
        break
    with open(path, "w") as f:
      f.writelines(lines)
    return expect_one_line_error(cli("compare", a, b), "compare")

  def attack_7d(self):
    """--resume with every checkpoint truncated: one line, no file changed"""
    workdir = self.copy("truncated")
    # Every checkpoint: with an intact older one, the resume falls back to it
    # and says so (attacks 19c-d).
    for step in glob.glob(os.path.join(workdir, "checkpoints", "[0-9]*")):
      for parent, _, names in os.walk(os.path.join(step, "state")):
        for name in names:
          path = os.path.join(parent, name)
          os.truncate(path, os.path.getsize(path) // 2)
    before = snapshot(workdir)
    line = expect_one_line_error(
        cli("train", "--resume", f"--workdir={workdir}", "--epochs=4"),
        "train")
    expect_unchanged(before, workdir)
    return line

  # 8. Tampered checkpoints.

  def attack_8a(self):
    """a checkpoint with a negative metrics_offset: refused in one line, nothing written"""
    workdir = self.copy("offset")
    tamper(workdir, metrics_offset=-5)
    before = snapshot(workdir)
    line = expect_one_line_error(
        cli("train", "--resume", f"--workdir={workdir}", "--epochs=4"),
        "train")
    expect_unchanged(before, workdir)
    return line

  def attack_8b(self):
    """a checkpoint with worker_commits of 10^9: refused in one line, no hang"""
    workdir = self.copy("progress")
    tamper(workdir, worker_commits=[10**9, 10**9])
    before = snapshot(workdir)
    line = expect_one_line_error(
        cli("train", "--resume", f"--workdir={workdir}", "--epochs=4",
            deadline=60.0), "train")
    expect_unchanged(before, workdir)
    return line

  # 9. Messages that name nothing.

  def attack_9a(self):
    """--epochs=inf: one line naming --epochs"""
    line = expect_one_line_error(
        cli("train", "--dataset=digits", "--epochs=inf",
            f"--workdir={self.path('inf_epochs')}"), "train")
    if "epochs" not in line:
      raise Failed(line)
    return line

  def _mnist_dir(self, name, images: bytes) -> str:
    import struct  # pylint: disable=g-import-not-at-top
    data_dir = self.path(name)
    os.makedirs(data_dir)
    labels = struct.pack(">BBBBI", 0, 0, 8, 1, 2) + bytes(2)
    test_images = struct.pack(">BBBB3I", 0, 0, 8, 3, 2, 28, 28) + bytes(1568)
    for stem, payload in (("train-images-idx3-ubyte", images),
                          ("train-labels-idx1-ubyte", labels),
                          ("t10k-images-idx3-ubyte", test_images),
                          ("t10k-labels-idx1-ubyte", labels)):
      with open(os.path.join(data_dir, stem), "wb") as f:
        f.write(payload)
    return os.path.join(data_dir, "train-images-idx3-ubyte")

  def attack_9b(self):
    """an empty IDX file: one line naming its path"""
    path = self._mnist_dir("mnist_empty", b"")
    line = expect_one_line_error(
        cli("train", "--dataset=mnist", f"--data_dir={os.path.dirname(path)}",
            "--num_workers=2", f"--workdir={self.path('mnist_empty_run')}"),
        "train")
    if path not in line:
      raise Failed(f"does not name {path}: {line}")
    return line

  def attack_9c(self):
    """IDX dims (2^31, 2^16, 2^16): one line with the path, declared and actual size"""
    import struct  # pylint: disable=g-import-not-at-top
    path = self._mnist_dir(
        "mnist_huge", struct.pack(">BBBB3I", 0, 0, 8, 3, 2**31, 2**16, 2**16)
        + bytes(100))
    line = expect_one_line_error(
        cli("train", "--dataset=mnist", f"--data_dir={os.path.dirname(path)}",
            "--num_workers=2", f"--workdir={self.path('mnist_huge_run')}"),
        "train")
    if path not in line or "9223372036854775908" in line or str(2**63) not in line:
      raise Failed(line)
    return line

  # 10. Symlinks in a workdir.

  def attack_10a(self):
    """a metrics.jsonl symlink: the resume refuses it, the target is untouched"""
    workdir = self.copy("link_metrics")
    outside = self.path("outside_metrics.jsonl")
    shutil.move(os.path.join(workdir, "metrics.jsonl"), outside)
    os.symlink(outside, os.path.join(workdir, "metrics.jsonl"))
    before = snapshot(os.path.dirname(outside))
    line = expect_one_line_error(
        cli("train", "--resume", f"--workdir={workdir}", "--epochs=4"),
        "train")
    expect_unchanged(before, os.path.dirname(outside), "the link's target")
    return line

  def attack_10b(self):
    """a checkpoints symlink: the resume refuses it, the target is untouched"""
    workdir = self.copy("link_checkpoints")
    outside = self.path("outside_checkpoints")
    shutil.move(os.path.join(workdir, "checkpoints"), outside)
    os.symlink(outside, os.path.join(workdir, "checkpoints"))
    before = snapshot(outside)
    line = expect_one_line_error(
        cli("train", "--resume", f"--workdir={workdir}", "--epochs=4"),
        "train")
    expect_unchanged(before, outside, "the link's target")
    return line

  # 11. The Ray backend ends with its driver.

  def attack_11(self):
    """a SIGKILLed Ray driver leaves no process of its Ray session after 10 s"""
    workdir = self.path("ray_killed")
    proc = start("train", *RAY, "--epochs=3000", f"--workdir={workdir}")
    wait_until(proc, lambda: len(commits(workdir)) >= 20 and os.path.exists(
        os.path.join(workdir, "pids.json")))
    session = read_json(os.path.join(workdir, "pids.json"))["ray_session_dir"]
    below = tree(proc.pid)
    if not session or not session_processes(session):
      raise Failed(f"no process names its session directory {session}")
    proc.kill()  # The driver alone, as kill -9 $! does.
    proc.communicate()
    left = alive(below + session_processes(session), 10.0)
    if left:
      kill_pids(below)
      raise Failed(f"alive 10 s after: {', '.join(left[:6])}")
    return f"{len(below)} processes gone, session {os.path.basename(session)}"

  # 12. Ctrl-C / SIGTERM during a Ray run's start-up.

  def _interrupt_ray_start(self, name, signum, when):
    workdir = self.path(name)
    proc = start("train", *RAY, "--epochs=3000", f"--workdir={workdir}")
    if isinstance(when, float):
      time.sleep(when)
    else:
      wait_until(proc, lambda: when(workdir, proc))
    if proc.poll() is not None:
      raise Failed(f"ended before the signal (exit {proc.returncode})")
    below = tree(proc.pid)
    proc.send_signal(signum)
    result = finish(proc, 60.0)
    want = 128 + signum
    if result.rc != want:
      raise Failed(f"exit {result.rc}, not {want}: {lines_of(result.stderr)[-2:]}")
    if "Traceback" in result.stderr or "Segmentation" in result.stderr:
      raise Failed(f"crash: {lines_of(result.stderr)[-1]}")
    line = lines_of(result.stderr)[-1]
    what = "interrupted" if signum == signal.SIGINT else "terminated (SIGTERM)"
    if os.path.exists(os.path.join(workdir, "summary.json")):
      expect_outcome(workdir, "interrupted")
      if line != f"train: error: {what}; partial results in {workdir}":
        raise Failed(f"untrue line: {line}")
    elif line != (f"train: error: {what} before the run started; nothing was "
                  "written") or os.path.exists(workdir):
      raise Failed(f"untrue line or leftover workdir: {line}")
    left = alive(below, 10.0)
    if left:
      kill_pids(below)
      raise Failed(f"alive 10 s after: {', '.join(left[:6])}")
    clocks = commits(workdir)
    return f"{line[len('train: error: '):][:40]} ({len(clocks)} commits)"

  def attack_12(self):
    """Ctrl-C and SIGTERM at 8 moments of a Ray run's start-up, 0.5 s to the first commit: 130/143, a true line, nothing left"""
    def keeper_up(workdir, proc):
      del workdir
      return any("ray_head.py" in " ".join(cmdline(p)) for p in tree(proc.pid))

    def first_commit(workdir, proc):
      del proc
      return bool(commits(workdir))

    moments = [(0.5, signal.SIGINT), (2.0, signal.SIGTERM),
               (4.0, signal.SIGINT), (6.0, signal.SIGTERM),
               (8.0, signal.SIGINT), (10.0, signal.SIGTERM),
               (keeper_up, signal.SIGINT), (first_commit, signal.SIGTERM)]
    notes = []
    for i, (when, signum) in enumerate(moments):
      label = f"{when:g} s" if isinstance(when, float) else (
          "head starting" if when is keeper_up else "first commit")
      try:
        notes.append(f"{label}: " + self._interrupt_ray_start(
            f"ray_start_{i}", signum, when))
      except Failed as e:
        raise Failed(f"{label} {signal.Signals(signum).name}: {e}") from None
    return "; ".join(notes)

  # 13. A full disk.

  def attack_13(self):
    """a full disk (a small tmpfs): one line naming the file and the errno; resumed elsewhere, every commit once"""
    disk = self.path("disk")
    os.makedirs(disk)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs",
                              disk], capture_output=True, text=True)
    if mounted.returncode:
      raise Failed(f"cannot mount a tmpfs (root only): {mounted.stderr.strip()}")
    try:
      with open(os.path.join(disk, "filler"), "wb") as f:
        f.write(b"\0" * (4 * 2**20 - 160 * 2**10))
      workdir = os.path.join(disk, "run")
      result = cli("train", *SMALL[:-1], "--epochs=400", "--noplots",
                   "--hidden_sizes=32", "--checkpoint_every_seconds=0.2",
                   f"--workdir={workdir}")
      if result.rc != 1 or "Traceback" in result.stderr:
        raise Failed(f"exit {result.rc}: {lines_of(result.stderr)[-2:]}")
      line = lines_of(result.stderr)[-1]
      if ("cannot write" not in line or f"{workdir}/" not in line or
          "[Errno 28]" not in line or
          sum("error" in l.lower() for l in lines_of(result.stderr)) != 1):
        raise Failed(f"not one line naming the file and errno: {line}")
      said = ("summary.json" if os.path.exists(os.path.join(
          workdir, "summary.json")) else "error.log" if os.path.exists(
              os.path.join(workdir, "error.log")) else "nothing (disk full)")
      elsewhere = self.path("disk_resumed")
      shutil.copytree(workdir, elsewhere)
    finally:
      subprocess.run(["umount", "-l", disk], check=False)
    self.workdirs.append(elsewhere)
    # Just past what the checkpoint holds: 20 more windows per worker.
    from agn_jax import data  # pylint: disable=g-import-not-at-top
    config = read_json(os.path.join(elsewhere, "config.json"))
    windows = max(read_json(meta_path(elsewhere))["worker_commits"]) + 20
    epochs = (windows * config["communication_window"] * config["batch_size"]
              * config["num_workers"] / len(data.load("digits").x_train))
    result = cli("train", "--resume", f"--workdir={elsewhere}",
                 f"--epochs={epochs + 1e-6}", "--noplots")
    expect_success(result, "the resume elsewhere")
    summary = expect_outcome(elsewhere, "completed")
    clocks = commits(elsewhere)
    if clocks != list(range(1, summary["num_commits"] + 1)):
      raise Failed("commit clocks not 1..n once each after the resume")
    return f"{line[len('train: error: '):]}; run's end in {said}"

  # 14. Flagfile cycles.

  def attack_14(self):
    """a flagfile that includes itself, and two that include each other: one line, exit 2, in train, compare, sweep, report"""
    one = self.path("self.flags")
    with open(one, "w") as f:
      f.write(f"--epochs=2\n--flagfile={one}\n")
    a, b = self.path("a.flags"), self.path("b.flags")
    with open(a, "w") as f:
      f.write(f"--flagfile={b}\n")
    with open(b, "w") as f:
      f.write(f"--epochs=2\n--flagfile={a}\n")
    lines = []
    for program in ("train", "compare", "sweep", "report"):
      for flagfile in (one, a):
        result = cli(program, f"--flagfile={flagfile}", deadline=60.0)
        line = expect_one_line_error(result, program)
        if result.rc != 2 or "--flagfile" not in line or "itself" not in line:
          raise Failed(f"{program}: exit {result.rc}: {line}")
        lines.append(line)
    return lines[-1]

  # 15. Every ended run says how it ended.

  def _kill_server_once_running(self, workdir, *args):
    """Starts a run, SIGKILLs its server after 10 commits; returns (process, its process tree then)."""
    proc = start("train", *args, f"--workdir={workdir}")
    self.workdirs.append(workdir)
    wait_until(proc, lambda: len(commits(workdir)) >= 10 and os.path.exists(
        os.path.join(workdir, "pids.json")))
    below = tree(proc.pid)
    os.kill(read_json(os.path.join(workdir, "pids.json"))["server"],
            signal.SIGKILL)
    return proc, below

  def attack_15a(self):
    """a SIGKILLed server: one line; summary.json says failed, why, and the counts so far"""
    workdir = self.path("server_killed")
    proc, _ = self._kill_server_once_running(workdir, *SMALL, "--epochs=300")
    line = expect_one_line_error(finish(proc), "train")
    if "server killed by signal 9" not in line:
      raise Failed(line)
    summary = expect_outcome(workdir, "failed", "server killed by signal 9")
    if summary["num_commits"] != len(commits(workdir)):
      raise Failed("summary.json's commits differ from metrics.jsonl's")
    return f"{line}; {summary['num_commits']} commits"

  def attack_15b(self):
    """a diverged worker: summary.json says failed and why"""
    workdir = self.path("diverged")
    line = expect_one_line_error(cli("train", *SMALL, "--learning_rate=1e30",
                                     f"--workdir={workdir}"), "train")
    self.workdirs.append(workdir)
    summary = expect_outcome(workdir, "failed", "non-finite")
    return f"{summary['failure']}; {summary['rejected_commits']} rejected"

  def attack_15c(self):
    """a run that never began training (its worker fails at once): summary.json says failed, 0 commits"""
    workdir = self.path("never_began")
    result = train_with_fault(self.root, 'Fault("raise", worker=0, window=0)',
                              *SMALL[:1], "--num_workers=1",
                              "--max_worker_restarts=0",
                              f"--workdir={workdir}")
    self.workdirs.append(workdir)
    line = expect_one_line_error(result, "train")
    summary = expect_outcome(workdir, "failed", "injected fault")
    if summary["num_commits"] != 0:
      raise Failed(f"{summary['num_commits']} commits")
    return line

  def attack_15d(self):
    """sweep --resume and compare read the outcome from summary.json"""
    from experiments import rundirs  # pylint: disable=g-import-not-at-top
    cell = self.copy("outcome_interrupted")
    path = os.path.join(cell, "summary.json")
    summary = read_json(path)
    summary["outcome"] = "interrupted"  # Its other fields say completed.
    with open(path, "w") as f:
      json.dump(summary, f)
    if rundirs.completed(cell) or rundirs.cell_action(cell) != "resume":
      raise Failed("sweep takes an interrupted run for a completed one")
    result = cli("compare", self.base(), cell,
                 f"--output={self.path('outcome.png')}")
    expect_success(result, "compare")
    warning = [l for l in lines_of(result.stdout) if "interrupted" in l]
    if not warning:
      raise Failed("compare does not say the run was interrupted")
    return warning[0][:120]

  def attack_15e(self):
    """a SIGKILL during a checkpoint save: the save's leftover directory is gone after --resume"""
    workdir = self.path("killed_in_save")
    self.workdirs.append(workdir)
    steps = os.path.join(workdir, "checkpoints")
    leftover = []
    for _ in range(20):  # Until the kill lands inside a save.
      shutil.rmtree(workdir, ignore_errors=True)
      proc = start("train", *SMALL[:-1], "--hidden_sizes=1000,1000",
                   "--epochs=300", "--checkpoint_every_seconds=0.01",
                   f"--workdir={workdir}")
      wait_until(proc, lambda: os.path.isdir(steps) and any(
          n.isdigit() for n in os.listdir(steps)) and os.path.exists(
              os.path.join(workdir, "pids.json")))
      server = read_json(os.path.join(workdir, "pids.json"))["server"]
      end = time.monotonic() + 20
      while not leftover and time.monotonic() < end and proc.poll() is None:
        leftover = [n for n in os.listdir(steps) if "orbax-checkpoint-tmp" in n]
      os.kill(server, signal.SIGKILL)  # The saving process, mid-save.
      finish(proc)  # The run ends (a failure) and cleans up after itself.
      leftover = [n for n in os.listdir(steps) if "orbax-checkpoint-tmp" in n]
      if leftover and any(n.isdigit() for n in os.listdir(steps)):
        break
    else:
      raise Failed("no kill landed inside a save in 20 tries")
    result = cli("train", "--resume", f"--workdir={workdir}", "--epochs=301",
                 "--max_seconds=3", "--noplots")
    left = [n for n in os.listdir(steps) if "orbax-checkpoint-tmp" in n]
    if left:
      raise Failed(f"still there after --resume (exit {result.rc}): {left}")
    return f"{leftover[0]} removed; resume exit {result.rc}"

  def attack_15f(self):
    """a SIGKILLed Ray server actor: 'server actor died: killed by signal 9'; summary.json says failed"""
    workdir = self.path("ray_server_killed")
    proc, below = self._kill_server_once_running(workdir, *RAY,
                                                 "--epochs=3000")
    result = finish(proc)
    if result.rc != 1 or "Traceback" in result.stderr:
      raise Failed(f"exit {result.rc}: {lines_of(result.stderr)[-2:]}")
    line = lines_of(result.stderr)[-1]
    if line != "train: error: server actor died: killed by signal 9":
      raise Failed(line)
    expect_outcome(workdir, "failed", "server actor died: killed by signal 9")
    left = alive(below, 10.0)
    if left:
      kill_pids(below)
      raise Failed(f"alive 10 s after: {', '.join(left[:6])}")
    return line


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--only", default="",
                      help="comma-separated attack ids, e.g. 1a,7c")
  parser.add_argument("--keep", action="store_true",
                      help="keep the temporary directory")
  args = parser.parse_args()
  root = tempfile.mkdtemp(prefix="agn_attacks_")
  attacks = Attacks(root)
  names = sorted((n[len("attack_"):] for n in dir(attacks)
                  if n.startswith("attack_")),
                 key=lambda n: (int("".join(c for c in n if c.isdigit())), n))
  if args.only:
    wanted = set(args.only.split(","))
    names = [n for n in names if n in wanted]
  t0 = time.monotonic()
  results: Dict[str, dict] = {}
  for name in names:
    method: Callable[[], Optional[str]] = getattr(attacks, f"attack_{name}")
    what = method.__doc__.strip()
    started = time.monotonic()
    try:
      note = method()
      ok = True
    except Failed as e:
      ok, note = False, str(e)
    except Exception as e:  # pylint: disable=broad-except
      ok = False
      note = f"the attack itself broke: {type(e).__name__}: {e}"
      traceback.print_exc()
    results[name] = {"pass": ok, "what": what, "note": " ".join(
        str(note or "").split())[:300],
                     "seconds": round(time.monotonic() - started, 1)}
    print(f"{'PASS' if ok else 'FAIL'} {name:>3}  {what}"
          f"{'' if ok else '  -- ' + results[name]['note']}", flush=True)
  left = leftovers(attacks.workdirs)
  if not args.keep:
    shutil.rmtree(root, ignore_errors=True)
  passed = sum(r["pass"] for r in results.values())
  print(json.dumps({
      "passed": passed, "failed": len(results) - passed,
      "failed_ids": [n for n, r in results.items() if not r["pass"]],
      "leftovers": left, "seconds": round(time.monotonic() - t0, 1),
      "root": root if args.keep else None, "machine": machine(),
      "results": results}))
  sys.exit(0 if passed == len(results) and not left else 1)


if __name__ == "__main__":
  main()
