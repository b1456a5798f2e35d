"""Shared helpers of the attack replays (scripts/attacks.py and its rounds).

Each helper runs the real CLI as a user would (`python -m experiments.X`) in a
session of its own, and checks what the contract promises: one error line, no
traceback, an unchanged workdir, no process or segment left behind.
"""

import glob
import json
import os
import signal
import subprocess
import sys
import time
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


def child_env(extra: Optional[Dict[str, str]] = None):
  env = dict(os.environ, **(extra or {}))
  env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
  env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  return env


def start(module: str, *args: str, cwd: str = REPO,
          env: Optional[Dict[str, str]] = None) -> subprocess.Popen:
  # A session of its own, so a hang is killed with all its children.
  return subprocess.Popen([sys.executable, "-m", f"experiments.{module}",
                           *args], cwd=cwd, env=child_env(env), text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          start_new_session=True)


def finish(proc: subprocess.Popen, deadline: float = DEADLINE) -> Result:
  try:
    out, err = proc.communicate(timeout=deadline)
    return Result(proc.returncode, out, err)
  except subprocess.TimeoutExpired:
    kill_group(proc)
    out, err = proc.communicate()
    return Result(None, out, err)


def kill_group(proc):
  try:
    os.killpg(proc.pid, signal.SIGKILL)
  except ProcessLookupError:
    pass


def cli(module: str, *args: str, cwd: str = REPO,
        deadline: float = DEADLINE,
        env: Optional[Dict[str, str]] = None) -> Result:
  return finish(start(module, *args, cwd=cwd, env=env), deadline)


def expect_exit_2_naming(result: Result, program: str, *names: str) -> str:
  """A bad command line: exit 2, one error line that names each of `names`."""
  line = expect_one_line_error(result, program)
  if result.rc != 2:
    raise Failed(f"exit {result.rc}, not 2: {line}")
  missing = [n for n in names if n not in line]
  if missing:
    raise Failed(f"does not name {', '.join(missing)}: {line}")
  return line


_WITH_FAULT = '''"""`python -m experiments.train` with a fault injected into its workers."""
if __name__ == "__main__":
  import functools
  from absl import app
  from agn_jax import runtime
  from agn_jax.runtime.context import Fault, Faults
  from experiments import flags as flags_lib
  from experiments import train
  runtime.train = functools.partial(runtime.train,
                                    faults=Faults(fault={fault}))
  flags_lib.define_train_flags()
  app.run(train.main, flags_parser=flags_lib.parse_flags_or_exit)
'''


def train_with_fault(root: str, fault: str, *args: str,
                     deadline: float = DEADLINE) -> Result:
  """Runs the train CLI with `fault` (a `Fault(...)` expression) injected into its workers.

  The fault is a test's hook (`agn_jax.runtime.context.Faults`, passed to
  `train()`): no environment variable reaches the production workers, so
  a small program named train.py wraps the CLI and passes it.
  """
  directory = os.path.join(root, "with_fault")
  os.makedirs(directory, exist_ok=True)
  program = os.path.join(directory, "train.py")
  with open(program, "w") as f:
    f.write(_WITH_FAULT.format(fault=fault))
  return finish(subprocess.Popen(
      [sys.executable, program, *args], cwd=REPO, env=child_env(),
      text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
      start_new_session=True), deadline)


def without_module(root: str, module: str) -> Dict[str, str]:
  """An environment in which `module` cannot be imported, as when it is not installed.

  A sitecustomize.py on PYTHONPATH sets `sys.modules[module] = None`, which
  is what Python itself does for a module known to be absent: `import`
  raises ImportError and `importlib.util.find_spec` finds nothing.
  """
  directory = os.path.join(root, f"without_{module}")
  os.makedirs(directory, exist_ok=True)
  with open(os.path.join(directory, "sitecustomize.py"), "w") as f:
    f.write(f"import sys\nsys.modules[{module!r}] = None\n")
  return {"PYTHONPATH": directory + os.pathsep + REPO}


def lines_of(text: str) -> List[str]:
  return [l for l in text.replace("\r", "\n").splitlines() if l.strip()]


def expect_one_line_error(result: Result, program: str) -> str:
  """Nonzero, no traceback or warning, and the last stderr line is `program: error: ...`."""
  if result.rc is None:
    raise Failed(f"hung (killed after {DEADLINE:g} s)")
  if result.rc == 0:
    raise Failed(f"exit 0; stdout ends {lines_of(result.stdout)[-1:]}")
  if "Traceback" in result.stderr:
    raise Failed(f"traceback: {lines_of(result.stderr)[-1]}")
  if "Warning" in result.stderr:
    raise Failed("a warning: " + next(l for l in lines_of(result.stderr)
                                      if "Warning" in l))
  lines = lines_of(result.stderr)
  errors = [l for l in lines if f"{program}: error:" in l]
  if len(errors) != 1 or not lines[-1].startswith(f"{program}: error:"):
    raise Failed(f"not one error line: {lines[-3:]}")
  return lines[-1]


def expect_success(result: Result, what: str) -> None:
  if result.rc != 0:
    tail = lines_of(result.stderr)[-1:] or lines_of(result.stdout)[-1:]
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


def wait_until(proc: subprocess.Popen, ready: Callable[[], bool],
               deadline: float = DEADLINE) -> None:
  """Polls `ready` until true; Failed if the command ends or the deadline passes first."""
  end = time.monotonic() + deadline
  while not ready():
    if proc.poll() is not None:
      raise Failed(f"ended first (exit {proc.returncode}): "
                   f"{lines_of(proc.communicate()[1])[-1:]}")
    if time.monotonic() > end:
      kill_group(proc)
      raise Failed("hung")
    time.sleep(0.05)


def tree(pid: int) -> List[int]:
  """The pids below `pid`."""
  import psutil  # pylint: disable=g-import-not-at-top
  try:
    return [p.pid for p in psutil.Process(pid).children(recursive=True)]
  except psutil.Error:
    return []


def alive(pids: List[int], seconds: float = 10.0) -> List[str]:
  """Those of `pids` still running after up to `seconds` (zombies are gone), by name."""
  import psutil  # pylint: disable=g-import-not-at-top
  end = time.monotonic() + seconds
  while True:
    left = []
    for pid in pids:
      try:
        p = psutil.Process(pid)
        if p.status() != psutil.STATUS_ZOMBIE:
          left.append(f"{pid} {p.name()}")
      except psutil.Error:
        pass
    if not left or time.monotonic() > end:
      return left
    time.sleep(0.1)


def session_processes(session_dir: Optional[str]) -> List[int]:
  """Live processes whose command line names a Ray session directory."""
  import psutil  # pylint: disable=g-import-not-at-top
  found = []
  for p in psutil.process_iter(["cmdline", "status"]):
    if (session_dir and p.info["status"] != psutil.STATUS_ZOMBIE and
        session_dir in " ".join(p.info["cmdline"] or ())):
      found.append(p.pid)
  return found


def commits(workdir: str) -> List[int]:
  """The clocks of the commit rows in metrics.jsonl."""
  path = os.path.join(workdir, "metrics.jsonl")
  if not os.path.exists(path):
    return []
  clocks = []
  with open(path) as f:
    for line in f:
      try:
        event = json.loads(line)
      except ValueError:
        continue  # A row being written.
      if event.get("event") == "commit":
        clocks.append(event["clock"])
  return clocks


def expect_outcome(workdir: str, outcome: str, failure: str = "") -> dict:
  path = os.path.join(workdir, "summary.json")
  if not os.path.exists(path):
    raise Failed(f"no summary.json in {workdir}")
  summary = read_json(path)
  if summary.get("outcome") != outcome:
    raise Failed(f"outcome {summary.get('outcome')!r}, not {outcome!r}")
  if failure and failure not in str(summary.get("failure")):
    raise Failed(f"failure {summary.get('failure')!r} lacks {failure!r}")
  return summary


RAY = ["--backend=ray", "--dataset=digits", "--hidden_sizes=16",
       "--num_workers=2", "--eval_every_seconds=1", "--noplots"]


def results_dir(result: Result) -> Optional[str]:
  for line in lines_of(result.stdout):
    if line.startswith("results: "):
      return line[len("results: "):].strip()
  return None


def meta_path(workdir: str) -> str:
  steps = [p for p in glob.glob(os.path.join(workdir, "checkpoints", "[0-9]*"))
           if os.path.basename(p).isdigit()]  # Not a killed save's leftover.
  newest = max(steps, key=lambda p: int(os.path.basename(p)))
  return os.path.join(newest, "meta", "metadata")


def tamper(workdir: str, **changes):
  path = meta_path(workdir)
  meta = read_json(path)
  meta.update(changes)
  with open(path, "w") as f:
    json.dump(meta, f)


def kill_pids(pids: List[int]) -> None:
  for pid in pids:
    try:
      os.kill(pid, signal.SIGKILL)
    except OSError:
      pass


def cmdline(pid: int) -> List[str]:
  try:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
      return f.read().decode(errors="replace").split("\0")
  except OSError:
    return []


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
