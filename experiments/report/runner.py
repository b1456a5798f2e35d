"""Runs a preset's runs in this process, resuming where a study stopped.

Every run trains through `experiments.train.train_and_report` into
`<study_dir>/<section>/<name>`, exactly as `python -m experiments.train` with
the run's flags would (`RunSpec.argv`). A completed run is kept; a run with a
checkpoint resumes from it; a run that failed before its first checkpoint
starts again. A run that is not the cell's (`identity.mismatch`: copied in
from another cell, or trained there by hand with other flags) is moved
aside, as a failed one is, and the cell's own run trains; one that a live
process holds is left alone and the cell fails, naming both. Once a run completes its checkpoints are deleted: only
resuming needs them, and a simulated checkpoint holds all n workers' states.

The study's books, `<study_dir>/study.json`, hold the preset, the command and
the compute ledger: seconds, samples, machine and device of every run, summed
over the sittings that ran it. With an archive (`experiments.report.archive`),
each run is archived as it completes and the books are kept there too.
"""

import contextlib
import json
import os
import platform
import resource
import shutil
import signal
import sys
import threading
import time
from typing import Callable, Dict, List, Optional, Sequence

from agn_jax.errors import WorkdirBusy, WorkdirError
from agn_jax.runtime import events
from experiments import flags as flags_lib
from experiments import rundirs
from experiments.report import archive
from experiments.report import design
from experiments.report import identity

STUDY_FILE = archive.BOOKS


class Study:
  """The study directory's books: its preset, command and compute ledger.

  Attributes:
    dir: the study directory.
    archive_dir: where completed runs and the books are archived, or None.
  """

  def __init__(self, study_dir: str, archive_dir: Optional[str] = None):
    self.dir = study_dir
    self.archive_dir = archive_dir
    self.path = os.path.join(study_dir, STUDY_FILE)
    self.data = {"preset": None, "command": None, "ledger": {}}
    if os.path.isfile(self.path):
      try:
        with open(self.path) as f:
          data = json.load(f)
        if not isinstance(data, dict) or not isinstance(
            data.get("ledger", {}), dict):
          raise ValueError("not a study's books")
      except (OSError, ValueError) as e:
        raise flags_lib.UsageError(
            f"{self.path}: not readable ({' '.join(str(e).split())})") from None
      self.data.update(data)

  @property
  def preset(self) -> Optional[str]:
    return self.data.get("preset")

  @property
  def ledger(self) -> Dict[str, dict]:
    return self.data["ledger"]

  def record(self, run: design.RunSpec, seconds: float, samples: float,
             where: Dict[str, str], cpu_seconds: float = 0.0) -> None:
    """Adds a sitting's wall and CPU seconds to the run's entry of the ledger."""
    entry = self.ledger.setdefault(f"{run.section}/{run.name}", {
        "seconds": 0.0, "samples": samples, "sittings": 0})
    entry["seconds"] += seconds
    entry["cpu_seconds"] = entry.get("cpu_seconds", 0.0) + cpu_seconds
    entry["cpu_sittings"] = cpu_sittings(entry) + 1
    entry["sittings"] += 1
    entry.update(where)
    self.save()

  def save(self) -> None:
    """Writes the books into the study directory, and into the archive if any."""
    text = events.strict_json(self.data, indent=2) + "\n"
    for directory in filter(None, (self.dir, self.archive_dir)):
      os.makedirs(directory, exist_ok=True)
      rundirs.write_report(os.path.join(directory, STUDY_FILE), text)


def where() -> Dict[str, str]:
  """This machine and JAX's default device, for the ledger."""
  import jax  # pylint: disable=g-import-not-at-top
  from agn_jax.runtime.backends import calibration  # pylint: disable=g-import-not-at-top
  cpu = calibration.cpu_name() or platform.machine()
  device = jax.devices()[0]
  return {"machine": f"{os.cpu_count()} × {cpu}",
          "device": f"{device.platform}: {device.device_kind}"}


def cpu_sittings(entry: Dict[str, object]) -> int:
  """How many of a ledger entry's sittings its `cpu_seconds` counts."""
  if "cpu_sittings" in entry:
    return int(entry["cpu_sittings"])
  return int(entry.get("sittings", 0)) if "cpu_seconds" in entry else 0


def cpu_seconds() -> float:
  """CPU time (user + system) of this process and its finished children.

  Wall time grows when something else shares the machine; CPU time mostly
  does not, so the ledger keeps both.
  """
  own = resource.getrusage(resource.RUSAGE_SELF)
  children = resource.getrusage(resource.RUSAGE_CHILDREN)
  return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def seconds_per_sample(study: Study, section: Optional[str] = None,
                       exclude: Sequence[str] = ()) -> Optional[float]:
  """This study's measured rate over its completed runs (of `section` only, if given; none of `exclude`), or None."""
  entries = [e for k, e in study.ledger.items() if e.get("completed") and
             (section is None or k.split("/", 1)[0] == section) and
             k.split("/", 1)[0] not in exclude]
  samples = sum(e["samples"] for e in entries)
  return sum(e["seconds"] for e in entries) / samples if samples else None


def _config(run: design.RunSpec, path: str, resume: bool):
  from agn_jax import build  # pylint: disable=g-import-not-at-top
  values = design._parsed(run.argv())  # pylint: disable=protected-access
  config = flags_lib.config_from_flags(values, workdir=path, resume=resume)
  return build.check_strategy_settings(config)


def _drop_checkpoints(path: str) -> None:
  checkpoints = os.path.join(path, "checkpoints")
  if os.path.isdir(checkpoints) and not os.path.islink(checkpoints):
    shutil.rmtree(checkpoints, ignore_errors=True)


def _foreign(run: design.RunSpec, path: str,
             log: Callable[[str], None]) -> Optional[str]:
  """Moves a run that is not the cell's out of its way; why the cell cannot run, or None."""
  why = identity.mismatch(run, path)
  if why is None:
    return None
  try:
    moved = rundirs.move_aside(path)
  except (WorkdirBusy, WorkdirError) as e:  # A live run holds it.
    return f"not the cell's run ({why}), and {' '.join(str(e).split())}"
  log(f"  not the cell's run ({why}); moved to {moved}")
  return None


def pending(run: design.RunSpec, study_dir: str) -> bool:
  """Whether the cell still has to run: not completed, or what completed is not the cell's run."""
  path = run.path(study_dir)
  return (not rundirs.completed(path) or
          identity.mismatch(run, path) is not None)


def run_one(run: design.RunSpec, study: Study, p: design.Preset,
            show_progress: bool = True,
            log: Callable[[str], None] = print) -> Optional[str]:
  """Trains (or resumes) one run; returns why it failed, or None.

  Raises:
    KeyboardInterrupt: on Ctrl-C or SIGTERM, after the run has checkpointed.
  """
  from agn_jax import runtime  # pylint: disable=g-import-not-at-top
  from experiments import train as train_lib  # pylint: disable=g-import-not-at-top
  path = run.path(study.dir)
  foreign = _foreign(run, path, log)
  if foreign:
    return foreign
  action = rundirs.cell_action(path)
  if action == "keep":
    _drop_checkpoints(path)
    return None
  if action == "restart":
    try:
      rundirs.move_aside(path)
    except (WorkdirBusy, WorkdirError) as e:  # A run of its own holds it.
      return " ".join(str(e).split())
  start, cpu_start = time.monotonic(), cpu_seconds()
  failure = None
  command = ["python", "-m", "experiments.train", *run.argv(),
             f"--workdir={path}"]
  try:
    config = _config(run, path, resume=action == "resume")
    os.makedirs(path, exist_ok=True)
    train_lib.train_and_report(config, runtime.train, show_progress,
                               command=command, plots=False)
  except runtime.NothingToDo:
    pass
  except (runtime.RunError, ValueError, RuntimeError, OSError) as e:
    failure = " ".join(str(e).split()) or type(e).__name__
  finally:
    entry = dict(where())
    entry["completed"] = rundirs.completed(path)
    study.record(run, time.monotonic() - start, p.samples(run), entry,
                 cpu_seconds() - cpu_start)
  if rundirs.completed(path):
    _drop_checkpoints(path)
    if study.archive_dir:
      archive.save(path, run.path(study.archive_dir))
  elif failure is None:
    summary = rundirs.read_summary(path) or {}
    failure = (f"ended {summary.get('outcome') or 'without completing'}"
               + (f": {summary['failure']}" if summary.get("failure") else ""))
  return failure


def run_all(p: design.Preset, study: Study, sections: Optional[set] = None,
            log: Callable[[str], None] = print,
            show_progress: bool = True) -> List[str]:
  """Runs every pending run of `sections` (default: all); returns the failures.

  Raises:
    KeyboardInterrupt: on Ctrl-C or SIGTERM; completed runs stay completed
      and the interrupted one resumes from its checkpoint next time.
  """
  todo = [r for r in p.runs
          if (sections is None or r.section in sections) and
          pending(r, study.dir)]
  failures = []
  with _sticky_interrupts() as stop:
    for index, run in enumerate(todo, 1):
      stop()
      log(f"[{index}/{len(todo)}] {run.section}/{run.name}: "
          f"{run.epochs:g} epochs")
      why = run_one(run, study, p, show_progress, log)
      if why:
        failures.append(f"{run.section}/{run.name}: {why}")
        log(f"  failed: {why}")
    stop()
  return failures


@contextlib.contextmanager
def _sticky_interrupts():
  """Ctrl-C and SIGTERM act as before, and are also remembered: `stop()` raises one that came.

  A KeyboardInterrupt that Python raises inside a garbage-collection
  callback (JAX has one) is printed and dropped; the run then goes on, and
  without this the study would go on to its next run too. An error that
  follows an interrupt is that interrupt.
  """
  if threading.current_thread() is not threading.main_thread():
    yield lambda: None
    return
  received = []
  previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

  def act(signum):
    handler = previous[signum]
    if callable(handler):
      handler(signum, None)
    raise KeyboardInterrupt()

  def note(signum, frame):
    del frame
    received.append(signum)
    act(signum)

  def stop():
    if received:
      act(received[0])

  def unraisable(hook_args):
    # The dropped interrupt is remembered above; its traceback is noise.
    if not issubclass(hook_args.exc_type, KeyboardInterrupt):
      hook(hook_args)

  hook = sys.unraisablehook
  sys.unraisablehook = unraisable
  for signum in previous:
    signal.signal(signum, note)
  try:
    yield stop
  except Exception:  # pylint: disable=broad-except
    # An interrupt that landed in an import or an extension's C code can
    # come out as another error: the signal is what happened.
    stop()
    raise
  finally:
    sys.unraisablehook = hook
    for signum, handler in previous.items():
      signal.signal(signum, handler)
