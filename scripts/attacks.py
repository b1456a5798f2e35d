"""Replays issue 11's attacks (items 1-10) against the real CLI and prints one PASS/FAIL line each.

Every attack runs `python -m experiments.train | compare | sweep` as a user
would, in a temporary directory, on small runs (digits, 2 workers, 2 epochs).
A run that hangs is killed (its whole process group) after a deadline and
counts as a failure. Ends with one JSON line: the results, the counts and the
machine. Exit status 1 if any attack failed.

  python scripts/attacks.py [--only 1a,7c] [--keep]

Not part of the test suite: it takes a few minutes of real training.
"""

import argparse
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Callable, Dict, List, NamedTuple, Optional

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "scripts"))
sys.path.insert(0, REPO)
from bench_transport import machine  # pylint: disable=g-import-not-at-top

SMALL = ["--dataset=digits", "--num_workers=2", "--epochs=2",
         "--eval_every_seconds=1", "--checkpoint_every_seconds=1"]
DEADLINE = 120.0  # Seconds any one command may take before it counts as a hang.


class Result(NamedTuple):
  rc: Optional[int]  # None: killed at the deadline (a hang).
  stdout: str
  stderr: str


class Failed(Exception):
  """An attack's check failed; the message says which."""


def _env():
  env = dict(os.environ)
  env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
  env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  return env


def start(module: str, *args: str, cwd: str = REPO) -> subprocess.Popen:
  # A session of its own, so a hang is killed with all its children.
  return subprocess.Popen([sys.executable, "-m", f"experiments.{module}",
                           *args], cwd=cwd, env=_env(), text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          start_new_session=True)


def finish(proc: subprocess.Popen, deadline: float = DEADLINE) -> Result:
  try:
    out, err = proc.communicate(timeout=deadline)
    return Result(proc.returncode, out, err)
  except subprocess.TimeoutExpired:
    _kill_group(proc)
    out, err = proc.communicate()
    return Result(None, out, err)


def _kill_group(proc):
  try:
    os.killpg(proc.pid, signal.SIGKILL)
  except ProcessLookupError:
    pass


def cli(module: str, *args: str, cwd: str = REPO,
        deadline: float = DEADLINE) -> Result:
  return finish(start(module, *args, cwd=cwd), deadline)


def _lines(text: str) -> List[str]:
  return [l for l in text.replace("\r", "\n").splitlines() if l.strip()]


def expect_one_line_error(result: Result, program: str) -> str:
  """Nonzero, no traceback or warning, and the last stderr line is `program: error: ...`."""
  if result.rc is None:
    raise Failed(f"hung (killed after {DEADLINE:g} s)")
  if result.rc == 0:
    raise Failed(f"exit 0; stdout ends {_lines(result.stdout)[-1:]}")
  if "Traceback" in result.stderr:
    raise Failed(f"traceback: {_lines(result.stderr)[-1]}")
  if "Warning" in result.stderr:
    raise Failed("a warning: " + next(l for l in _lines(result.stderr)
                                      if "Warning" in l))
  lines = _lines(result.stderr)
  errors = [l for l in lines if f"{program}: error:" in l]
  if len(errors) != 1 or not lines[-1].startswith(f"{program}: error:"):
    raise Failed(f"not one error line: {lines[-3:]}")
  return lines[-1]


def expect_success(result: Result, what: str) -> None:
  if result.rc != 0:
    tail = _lines(result.stderr)[-1:] or _lines(result.stdout)[-1:]
    raise Failed(f"{what}: exit {result.rc}: {tail}")


def snapshot(directory: str) -> Dict[str, tuple]:
  """{relative path: (bytes, mtime_ns)}, the lock file excepted."""
  files = {}
  for parent, _, names in os.walk(directory):
    for name in names:
      path = os.path.join(parent, name)
      if name == ".lock" or os.path.islink(path):
        continue
      with open(path, "rb") as f:
        files[os.path.relpath(path, directory)] = (f.read(),
                                                   os.stat(path).st_mtime_ns)
  return files


def expect_unchanged(before, directory, what="the workdir"):
  after = snapshot(directory)
  changed = sorted(k for k in set(before) | set(after)
                   if before.get(k) != after.get(k))
  if changed:
    raise Failed(f"{what} changed: {', '.join(changed[:4])}")


def read_json(path):
  with open(path) as f:
    return json.load(f)


def results_dir(result: Result) -> Optional[str]:
  for line in _lines(result.stdout):
    if line.startswith("results: "):
      return line[len("results: "):].strip()
  return None


def meta_path(workdir: str) -> str:
  steps = glob.glob(os.path.join(workdir, "checkpoints", "[0-9]*"))
  newest = max(steps, key=lambda p: int(os.path.basename(p)))
  return os.path.join(newest, "meta", "metadata")


def tamper(workdir: str, **changes):
  path = meta_path(workdir)
  meta = read_json(path)
  meta.update(changes)
  with open(path, "w") as f:
    json.dump(meta, f)


class Attacks:
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
    from experiments import sweep  # pylint: disable=g-import-not-at-top
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
    if not sweep.completed(cell):
      raise Failed("kept the interrupted run: its summary is incomplete "
                   f"({read_json(os.path.join(cell, 'summary.json')).get('num_commits')} commits)")
    return (f"interrupted at {summary.get('num_commits')} commits, resumed to "
            f"{read_json(os.path.join(cell, 'summary.json')).get('num_commits')}")

  def attack_4(self):
    """sweep --resume gets past a cell that failed without a checkpoint, and past a failing cell"""
    from experiments import sweep  # pylint: disable=g-import-not-at-top
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
    if not sweep.completed(crashed):
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
    return f"exit {result.rc}: {(_lines(result.stderr) or [''])[-1][:100]}"

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
    """--resume on a truncated checkpoint: one line, no file changed"""
    workdir = self.copy("truncated")
    step = os.path.dirname(os.path.dirname(meta_path(workdir)))
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


def leftovers(workdirs: List[str]) -> List[str]:
  """Processes and /dev/shm segments of the attacks' runs still there."""
  import psutil  # pylint: disable=g-import-not-at-top
  left = []
  for workdir in workdirs:
    path = os.path.join(workdir, "pids.json")
    if not os.path.isfile(path) or os.path.islink(path):
      continue
    try:
      pids = read_json(path)
    except ValueError:
      continue
    for pid in [pids.get("server"), pids.get("evaluator"),
                *pids.get("workers", []), *pids.get("restarted_workers", [])]:
      if pid and psutil.pid_exists(pid):
        try:
          if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
            left.append(f"pid {pid} of {workdir}")
        except psutil.NoSuchProcess:
          pass
    left += [f"/dev/shm/{n}" for n in pids.get("shm_segments", [])
             if os.path.exists(f"/dev/shm/{n}")]
  return left


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
