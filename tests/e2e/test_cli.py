"""End-to-end tests of `python -m experiments.train` and its flag checking."""

import json
import os
import signal
import struct
import subprocess
import sys
import time

from absl import flags
import numpy as np
import pytest

from agn_jax import instruments
from agn_jax.config import TrainConfig
from experiments import compare
from experiments import flags as flags_lib
from helpers import (REPO, assert_nothing_left, assert_one_line_error, run_cli,
                     snapshot, train_here)


ROOT = str(REPO)
# Small enough to finish in seconds on 2 cores, big enough to learn something.
TINY = ("--num_workers=2", "--communication_window=4", "--epochs=20",
        "--hidden_sizes=32", "--eval_every_seconds=0.5")


train = run_cli


def test_config_from_flags_fills_every_field():
  flag_values = flags.FlagValues()
  flags_lib.define_train_flags(flag_values)
  flag_values(["train", "--strategy=aeasgd", "--hidden_sizes=8,4",
               "--worker_optimizer=sgd", "--rho=2.5", "--platform=cpu",
               "--max_seconds=30", "--workdir=/tmp/x"])
  config = flags_lib.config_from_flags(flag_values)
  assert config == TrainConfig(strategy="aeasgd", hidden_sizes=(8, 4),
                               worker_optimizer="sgd", rho=2.5,
                               platform="cpu", max_seconds=30.0,
                               workdir="/tmp/x")
  # Strategy settings not given stay None: the strategy's paper default.
  assert config.learning_rate is None and config.normalization is None
  # Every config field has its flag, with the config's default.
  flag_values = flags.FlagValues()
  flags_lib.define_train_flags(flag_values)
  flag_values(["train"])
  config = flags_lib.config_from_flags(flag_values)
  defaults = TrainConfig().to_dict()
  for name, value in config.to_dict().items():
    assert name in flag_values, name
    if name != "workdir":
      assert value == defaults[name], name
  assert config.workdir.startswith(os.path.join("runs", "agn-n4-l10-"))


def test_train_end_to_end(tmp_path, monkeypatch, capsys):
  workdir = tmp_path / "run"
  result = train(*TINY, f"--workdir={workdir}")
  assert result.returncode == 0, result.stderr[-3000:]
  for name in ("metrics.jsonl", "summary.json", "config.json", "curves.png",
               "staleness.png"):
    assert (workdir / name).is_file(), name
  config = json.loads((workdir / "config.json").read_text())
  assert config["num_workers"] == 2
  assert config["communication_window"] == 4
  assert list(config["hidden_sizes"]) == [32]
  assert set(TrainConfig().to_dict()) <= set(config)
  events = [json.loads(line)
            for line in (workdir / "metrics.jsonl").read_text().splitlines()]
  commits = [e for e in events if e["event"] == "commit"]
  evals = [e for e in events if e["event"] == "eval"]
  assert commits and evals
  assert {e["worker"] for e in commits} == {0, 1}
  # Without --diagnostics the server measures nothing: no instrument in
  # any row, no implicit momentum in the summary.
  assert not any(set(instruments.SCALARS) & set(e) for e in commits)
  summary = json.loads((workdir / "summary.json").read_text())
  assert "implicit_momentum" not in summary and summary["completed"]
  table = result.stdout
  for field in ("final test accuracy", "final test loss", "wall time (s)",
                "commits", "mean staleness", "samples/s"):
    assert field in table, table
  accuracy = float(table.split("final test accuracy")[1].split()[0])
  assert accuracy > 0.5

  # Every commit row carries each of its λ = 4 steps' training accuracy
  # (multiples of 1/128 at batch 128) and its window's bounds; the thesis'
  # E of the run against itself is exactly 1 (on a window that fits this
  # sub-second run: with the 5-s default its curve is one point).
  for e in commits:
    assert len(e["step_accuracy"]) == 4, e
    assert all(128 * a == int(128 * a) for a in e["step_accuracy"]), e
    assert np.mean(e["step_accuracy"]) == pytest.approx(e["accuracy"])
    assert 0 <= e["window_start"] < e["window_end"] <= e["time"], e
  # experiments.compare's table, in this process (its program is tested in
  # tests/e2e/test_compare_e2e.py).
  runs = [compare.read_run(str(workdir))] * 2
  table = compare.comparison_table(runs, 0.2, report=compare.comparison(
      runs, 0.2, "auto", "thesis", "auto"))
  assert "\nE train (thesis): every local step's" in table
  pair = table.split("E train\n")[1].splitlines()[0].split()
  assert pair[-2:] == ["1.0000", "1.0000"], table

  # The same workdir again, without --resume: refused, nothing touched
  # (through the program's own checks, in this process: the subprocess
  # cases of test_bad_flags_are_one_line_errors run the same exit).
  before = snapshot(workdir)
  result = train_here(monkeypatch, capsys, *TINY, f"--workdir={workdir}")
  line = assert_one_line_error(result)
  assert "--resume" in line and result.returncode == 2
  assert snapshot(workdir) == before


BAD_FLAGS = {
    "bad enum": (["--strategy=sgd"], "--strategy"),
    "bad dataset": (["--dataset=cifar"], "--dataset"),
    "zero workers": (["--num_workers=0"], "--num_workers"),
    "not an int": (["--batch_size=3.5"], "--batch_size"),
    "zero window": (["--communication_window=0"], "--communication_window"),
    "negative float": (["--learning_rate=-0.1"], "--learning_rate"),
    "zero epochs": (["--epochs=0"], "--epochs"),
    "momentum": (["--momentum=1.5"], "--momentum"),
    "infinite epochs": (["--epochs=inf"], "--epochs"),
    "nan epochs": (["--epochs=nan"], "--epochs"),
    "infinite learning rate": (["--learning_rate=inf"], "--learning_rate"),
    "nan momentum": (["--momentum=nan"], "--momentum"),
    "infinite rho": (["--rho=inf"], "--rho"),
    "zero elastic lr": (["--elastic_learning_rate=0"],
                        "--elastic_learning_rate"),
    "infinite server lr": (["--server_learning_rate=inf"],
                           "--server_learning_rate"),
    "zero server_every": (["--server_every=0"], "--server_every"),
    "zero topk": (["--commit_compression=topk:0"], "--commit_compression"),
    "int4 compression": (["--commit_compression=int4"],
                         "--commit_compression"),
    "infinite max_seconds": (["--max_seconds=inf"], "--max_seconds"),
    "nan eval period": (["--eval_every_seconds=nan"], "--eval_every_seconds"),
    "infinite checkpoint period": (["--checkpoint_every_seconds=inf"],
                                   "--checkpoint_every_seconds"),
    "bad normalization": (["--normalization=max"], "--normalization"),
    "final fraction": (["--final_lr_fraction=1.5"], "--final_lr_fraction"),
    "hidden sizes": (["--hidden_sizes=64,,x"], "--hidden_sizes"),
    "unknown flag": (["--num_worker=4"], "num_worker"),
    "positional": (["extra"], "extra"),
    "missing flagfile": (["--flagfile=/nonexistent/x.flags"], "flagfile"),
}
# One case of each kind runs the program as a subprocess: a value outside
# an enum, an integer that is not one, a non-finite float, an unknown flag,
# a positional argument, a flagfile that cannot be opened. The others take
# the same path (`parse_flags_or_exit`, then `main`) in this process.
BAD_FLAGS_AS_SUBPROCESS = ("bad enum", "not an int", "nan epochs",
                           "unknown flag", "positional", "missing flagfile")


def test_aeasgd_trains_with_its_paper_defaults(tmp_path):
  # No optimizer flags: AEASGD as the thesis ran it (PAPER.md): Adam 1e-3
  # locally, ρ = 5, elastic η = 0.01, so α = 0.05; config.json,
  # summary.json and the printed summary say so.
  # One worker, no plots and the simulator, the cheapest run: what is
  # recorded does not depend on them.
  workdir = tmp_path / "run"
  result = train("--strategy=aeasgd", "--num_workers=1", "--backend=simulated",
                 "--communication_window=4", "--epochs=2",
                 "--hidden_sizes=16", "--eval_every_seconds=0", "--noplots",
                 f"--workdir={workdir}")
  assert result.returncode == 0, result.stderr[-3000:]
  config = json.loads((workdir / "config.json").read_text())
  summary = json.loads((workdir / "summary.json").read_text())
  for recorded in (config, summary["config"]):
    assert (recorded["strategy"], recorded["worker_optimizer"],
            recorded["learning_rate"], recorded["rho"],
            recorded["elastic_learning_rate"]) == ("aeasgd", "adam", 1e-3,
                                                   5.0, 0.01)
    assert recorded["elastic_alpha"] == pytest.approx(0.05, rel=1e-12)
  assert ("aeasgd: worker_optimizer=adam learning_rate=0.001 momentum=0.9 "
          "rho=5 elastic_learning_rate=0.01 normalization=none "
          "server_optimizer=none elastic_alpha=0.05") in result.stdout


@pytest.mark.parametrize("case", sorted(BAD_FLAGS))
def test_bad_flags_are_one_line_errors(tmp_path, case, monkeypatch, capsys):
  args, named = BAD_FLAGS[case]
  workdir = tmp_path / "run"
  workdir.mkdir()
  (workdir / "summary.json").write_text('{"keep": true}')
  if case in BAD_FLAGS_AS_SUBPROCESS:
    result = train(*args, f"--workdir={workdir}", "--resume")
  else:
    result = train_here(monkeypatch, capsys, *args, f"--workdir={workdir}",
                        "--resume")
  line = assert_one_line_error(result)
  assert named in line
  assert result.returncode == 2
  assert {name: content for name, (content, _) in snapshot(workdir).items()
         } == {"summary.json": b'{"keep": true}'}


# The first as a subprocess, the others through the same checks of `main`
# in this process (`train_here`).
@pytest.mark.parametrize("args, named, subprocess_", [
    (["--strategy=eamsgd", "--worker_optimizer=adam"], "momentum", True),
    (["--strategy=downpour", "--normalization=l2"], "normalization", False),
    (["--strategy=aeasgd", "--normalization=window"], "normalization", False),
    (["--dynamic_local_updates", "--communication_window=1"],
     "communication_window > 1", False),
    (["--lr_schedule=cosine", "--warmup_steps=10", "--decay_steps=5"],
     "warmup_steps=10 must be less than decay_steps=5", False),
    (["--lr_schedule=cosine"], "lr_schedule=cosine needs decay_steps", False),
])
def test_settings_the_strategy_cannot_honour_are_one_line_errors(
    tmp_path, args, named, subprocess_, monkeypatch, capsys):
  workdir = tmp_path / "run"
  if subprocess_:
    result = train(*args, f"--workdir={workdir}")
  else:
    result = train_here(monkeypatch, capsys, *args, f"--workdir={workdir}")
  line = assert_one_line_error(result)
  assert named in line
  assert result.returncode == 2
  assert not workdir.exists()


def test_a_typed_flag_of_another_backend_is_one_line(tmp_path, monkeypatch,
                                                    capsys):
  # Through `main`'s checks in this process (`train_here`), as typed.
  workdir = tmp_path / "run"
  result = train_here(monkeypatch, capsys, "--num_slots=2",
                      "--backend=simulated", f"--workdir={workdir}")
  assert assert_one_line_error(result) == (
      "train: error: --num_slots is a setting of the processes and ray "
      "backends; --backend=simulated does not use it")
  assert result.returncode == 2
  assert not workdir.exists()


def test_write_config_records_the_resolved_settings(tmp_path):
  # As the runtime may leave it: the settings still None (paper default).
  config = TrainConfig(strategy="aeasgd", rho=2.0, workdir=str(tmp_path))
  (tmp_path / "config.json").write_text(json.dumps(config.to_dict()))
  path = flags_lib.write_config(config, str(tmp_path), ["train", "--rho=2"])
  written = json.loads(open(path).read())
  # PAPER.md's AEASGD: Adam 1e-3, elastic η = 0.01; the ρ given is kept,
  # and α = 2 · 0.01 recorded.
  assert (written["worker_optimizer"], written["learning_rate"],
          written["rho"], written["elastic_learning_rate"],
          written["normalization"]) == ("adam", 1e-3, 2.0, 0.01, "none")
  assert written["elastic_alpha"] == pytest.approx(0.02, rel=1e-12)
  assert written["max_seconds"] is None  # Generic Nones stay None.
  assert written["command"] == "train --rho=2"


def test_bad_flag_inside_flagfile(tmp_path, monkeypatch, capsys):
  flagfile = tmp_path / "bad.flags"
  flagfile.write_text("# a comment\n--num_workers=2\n--no_such_flag=1\n")
  line = assert_one_line_error(train(f"--flagfile={flagfile}"))
  assert "no_such_flag" in line and str(flagfile) in line
  # A bad value there: the same parse, in this process.
  flagfile.write_text("--num_workers=-3\n")
  result = train_here(monkeypatch, capsys, f"--flagfile={flagfile}")
  line = assert_one_line_error(result)
  assert "--num_workers" in line and "[1, 2147483647]" in line
  assert result.returncode == 2


@pytest.mark.parametrize("program", ["train", "compare", "sweep", "report"])
def test_flagfile_cycles_are_one_line_errors_in_every_cli(tmp_path, program,
                                                          monkeypatch, capsys):
  # absl would skip the file met again with a warning, and the run would go
  # ahead without the flags meant for it.
  itself = tmp_path / "self.flags"
  itself.write_text(f"--epochs=3\n--flagfile={itself}\n")
  a, b = tmp_path / "a.flags", tmp_path / "b.flags"
  a.write_text(f"--num_workers=2\n--flagfile={b.name}\n")
  b.write_text("--epochs=3\n--flagfile=./a.flags\n")  # a, spelled anew.
  env = dict(os.environ, PYTHONPATH=ROOT)
  cases = [(a, "a.flags includes itself through b.flags")]
  if program == "train":
    cases.append((itself, "self.flags includes itself (self.flags -> "))
  for flagfile, said in cases:
    args = [f"--flagfile={flagfile.name}", "--workdir=run", "--sweep_dir=sweep"
            if program == "sweep" else "--output=x.png"
            if program == "compare" else "--workdir=run"]
    if flagfile == itself:  # The same parse in this process (`train_here`).
      monkeypatch.chdir(tmp_path)
      result = train_here(monkeypatch, capsys, *args)
    else:
      result = subprocess.run(
          [sys.executable, "-m", f"experiments.{program}", *args],
          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"{program}: error: --flagfile: "), lines[0]
    assert said in lines[0]
  assert sorted(os.listdir(tmp_path)) == ["a.flags", "b.flags", "self.flags"]


# What each CLI reports on a bad command line before it loads JAX (seconds):
# an unknown flag, a value its setting's check refuses. (Choices the
# strategies own, such as --worker_optimizer's, are read from them.)
_REFUSED_BEFORE_JAX = {
    "train": (["--bogus"], ["--num_workers=0"], ["--epochs=nan"],
              ["--data_assignment=x"]),
    "sweep": (["--bogus"], ["--sweep_dir=s", "--num_workers=0"]),
    "compare": (["--bogus"],),
    "report": (["--bogus"], ["--preset=nope"]),
}


@pytest.mark.parametrize("program", sorted(_REFUSED_BEFORE_JAX))
def test_a_bad_command_line_is_refused_before_jax_loads(program):
  # The program, run as `python -m` runs it, says at its exit whether JAX
  # was imported.
  probe = ("import atexit, runpy, sys; atexit.register(lambda: print("
           "'jax loaded:', 'jax' in sys.modules)); sys.argv[0] = "
           f"'{program}'; runpy.run_module('experiments.{program}', "
           "run_name='__main__', alter_sys=True)")
  for args in _REFUSED_BEFORE_JAX[program]:
    result = subprocess.run([sys.executable, "-c", probe, *args], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, (args, result.stderr[-3000:])
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{program}: error:"), (
        args, result.stderr[-3000:])
    assert result.stdout.strip().endswith("jax loaded: False"), (
        args, result.stdout)


def test_an_interrupt_while_the_modules_load_is_one_line(tmp_path):
  workdir = tmp_path / "run"
  process = subprocess.Popen(
      [sys.executable, "-m", "experiments.train", f"--workdir={workdir}"],
      cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  time.sleep(0.5)  # JAX alone takes longer to load.
  process.send_signal(signal.SIGINT)
  _, stderr = process.communicate(timeout=60)
  assert process.returncode == 130, stderr
  assert stderr.strip().splitlines() == [
      "train: error: interrupted before the run started; nothing was "
      "written"]
  assert not workdir.exists()


def test_shipped_flagfiles_parse():
  configs = os.path.join(ROOT, "experiments", "configs")
  names = sorted(os.listdir(configs))
  assert {"quickstart.flags", "paper_mnist_agn.flags",
          "paper_mnist_aeasgd.flags", "mnist1d.flags"} <= set(names)
  for name in names:
    flag_values = flags.FlagValues()
    flags_lib.define_train_flags(flag_values)
    flag_values(["train", f"--flagfile={os.path.join(configs, name)}"])
    with open(os.path.join(configs, name)) as f:
      header = f.read()
    assert f"--flagfile=experiments/configs/{name}" in header, name
  quickstart = flags.FlagValues()
  flags_lib.define_train_flags(quickstart)
  quickstart(["train",
              f"--flagfile={os.path.join(configs, 'quickstart.flags')}"])
  config = flags_lib.config_from_flags(quickstart, workdir="x")
  assert config == TrainConfig(workdir="x")


def idx_bytes(array, type_byte=0x08):
  header = struct.pack(">BBBB", 0, 0, type_byte, array.ndim)
  header += struct.pack(f">{array.ndim}I", *array.shape)
  return header + array.astype(">u1").tobytes()


def test_corrupt_mnist_is_a_one_line_error(tmp_path):
  data_dir = tmp_path / "mnist"
  data_dir.mkdir()
  images = np.zeros((6, 28, 28), np.uint8)
  labels = np.arange(6, dtype=np.uint8)
  (data_dir / "train-images-idx3-ubyte").write_bytes(idx_bytes(images)[:-50])
  (data_dir / "train-labels-idx1-ubyte").write_bytes(idx_bytes(labels))
  (data_dir / "t10k-images-idx3-ubyte").write_bytes(idx_bytes(images[:4]))
  (data_dir / "t10k-labels-idx1-ubyte").write_bytes(b"\x12\x34\x56\x78")
  workdir = tmp_path / "run"
  result = train("--dataset=mnist", f"--data_dir={data_dir}",
                 f"--workdir={workdir}", *TINY)
  line = assert_one_line_error(result)
  assert result.returncode == 1
  assert "idx" in line.lower()
  # The run never began: no workdir is left behind to block the next try.
  assert not workdir.exists()


def test_sigterm_exits_143(tmp_path):
  workdir = tmp_path / "run"
  process = subprocess.Popen(
      [sys.executable, "-m", "experiments.train", "--num_workers=1",
       "--epochs=1000", "--hidden_sizes=16", f"--workdir={workdir}"],
      cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  try:
    # Terminate once every process is spawned, before training starts: the
    # slowest phase to clean up, and the test stays short. One worker: a
    # second is one more child ended the same way.
    deadline = time.time() + 60
    while time.time() < deadline and process.poll() is None:
      if (workdir / "pids.json").is_file():
        break
      time.sleep(0.1)
    assert process.poll() is None, process.communicate()[1][-3000:]
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
  finally:
    if process.poll() is None:
      process.kill()
      process.wait()
  assert process.returncode == 143, stderr[-3000:]
  assert "Traceback" not in stderr
  assert stderr.strip().splitlines()[-1].startswith("train: error: terminated")
  summary = json.loads((workdir / "summary.json").read_text())
  assert summary["interrupted"] is True
  assert_nothing_left(workdir)  # Every process it spawned, and its segments.


@pytest.mark.parametrize("exception, code", [
    ("KeyboardInterrupt", -signal.SIGINT),  # Python's own handler: killed.
    ("__import__('agn_jax.errors').errors.Terminated", -signal.SIGTERM)])
def test_an_interrupt_python_dropped_is_sent_again(exception, code):
  # An exception raised in __del__ (as in a gc callback) cannot propagate:
  # Python prints and drops it. The CLI sends the signal again instead.
  script = (
      "import signal, sys, time\n"
      "from experiments import startup\n"
      "startup.hold_while_loading()\n"
      "startup.take_over('probe')\n"
      "signal.signal(signal.SIGINT, signal.SIG_DFL)\n"
      "class Dropped:\n"
      f"  def __del__(self): raise {exception}\n"
      "Dropped()\n"
      "time.sleep(20)\n"
      "print('went on')\n")
  result = subprocess.run([sys.executable, "-c", script], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
  assert "went on" not in result.stdout
  assert result.returncode == code, result.stderr


def test_progress_bar_of_a_resumed_run_counts_on_from_its_checkpoint():
  from experiments import train as train_lib  # pylint: disable=g-import-not-at-top
  bar = train_lib.ProgressBar(TrainConfig(num_workers=2), enabled=True)
  # The first commit of this sitting is the run's 201st: 200 were restored.
  bar({"event": "commit", "clock": 201, "staleness": 1,
       "expected_commits": 440})
  bar({"event": "commit", "clock": 202, "staleness": 1,
       "expected_commits": 440})
  assert (bar._bar.n, bar._bar.total) == (202, 440)
  fresh = train_lib.ProgressBar(TrainConfig(num_workers=2), enabled=True)
  for clock in (1, 2, 3):
    fresh({"event": "commit", "clock": clock, "staleness": 0})
  assert fresh._bar.n == 3
  bar.close()
  fresh.close()
