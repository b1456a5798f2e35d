"""The end-to-end half of tests/unit/test_config.py: real processes, subprocesses or whole runs."""

import json
import subprocess
import sys

from agn_jax.config import SimulatedOptions, TrainConfig
from experiments import flags as flags_lib
from helpers import REPO
from test_config import _flags


# Two real runs (seconds of compiling): `-m "not slow"` leaves it out.
def test_a_simulated_run_resumes_from_its_record(tmp_path):
  # The whole path of `--resume`: config.json (flat, with the options) ->
  # the config -> the checkpoint's check -> the run goes on.
  from agn_jax.runtime import train  # pylint: disable=g-import-not-at-top
  workdir = tmp_path / "run"
  options = SimulatedOptions(cluster="paper", speed_model="speeds:1,2",
                             eval_every_rounds=0)
  first = train(TrainConfig(
      num_workers=2, communication_window=2, dataset="synthetic",
      dataset_size=200, hidden_sizes=(8,), batch_size=4, epochs=0.2,
      eval_every_seconds=0.0, checkpoint_every_seconds=0.0,
      backend="simulated", options=options, workdir=str(workdir)))
  assert first["completed"] is True
  args = ["--resume", f"--workdir={workdir}", "--epochs=0.4"]
  values = _flags(*args)
  config = flags_lib.resumed_config(
      values, str(workdir), flags_lib.typed_flags(["train", *args], values))
  assert config.options == options
  summary = train(config)
  assert summary["resumed_from_commit"] == first["num_commits"]
  assert summary["completed"] is True
  assert summary["num_commits"] == summary["expected_commits"] > (
      first["num_commits"])
  assert summary["simulation"]["time_model"]["speed_model"] == "speeds:1,2"
  assert json.loads((workdir / "config.json").read_text())["cluster"] == (
      "paper")


def test_choices_do_not_depend_on_what_was_imported():
  # A fresh interpreter that imports only the config: the runtime's
  # platforms, backends and metric writers are still what it accepts.
  code = ("import sys\n"
          "from agn_jax.config import TrainConfig\n"
          "for bad in (dict(platform='tpux'), dict(backend='spark'),\n"
          "            dict(metric_writers='jsonl,wandb')):\n"
          "  try:\n"
          "    TrainConfig(**bad).validate()\n"
          "  except ValueError as e:\n"
          "    print(e)\n")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                       text=True, timeout=60,
                       cwd=str(REPO))
  lines = out.stdout.splitlines()
  assert lines == [
      "platform must be one of cpu, gpu, tpu, got 'tpux'",
      "backend must be one of processes, simulated, ray, got 'spark'",
      "metric_writers: unknown writer 'wandb'; the writers are jsonl, "
      "tensorboard"], out.stderr[-2000:]


def test_a_bad_platform_is_refused_without_the_runtime_imported():
  # The command, in a fresh interpreter: the runtime (which owns the
  # platforms) is not imported when validate() starts, and the error names
  # every platform in one line.
  from agn_jax import placement  # pylint: disable=g-import-not-at-top
  code = ("import sys\n"
          "from agn_jax.config import TrainConfig\n"
          "assert not any(m.startswith(('agn_jax.runtime', 'agn_jax.placement'))"
          " for m in sys.modules), sorted(sys.modules)\n"
          "TrainConfig(platform='tpux').validate()\n")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                       text=True, timeout=60,
                       cwd=str(REPO))
  assert out.returncode == 1
  last = out.stderr.strip().splitlines()[-1]
  assert last == ("ValueError: platform must be one of "
                  f"{', '.join(placement.PLATFORMS)}, got 'tpux'"), out.stderr
