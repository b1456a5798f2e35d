"""The end-to-end half of tests/unit/test_config.py: real processes, subprocesses or whole runs."""

import json

from agn_jax.config import SimulatedOptions, TrainConfig
from experiments import flags as flags_lib
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
