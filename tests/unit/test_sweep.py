"""Tests for experiments.sweep: which runs count, per-strategy flagfiles, the report, failed cells."""

import json
import os

from absl import flags
import pytest

from experiments import flags as flags_lib
from experiments import rundirs
from experiments import sweep


def write_run(directory, accuracy, seconds=10.0, summary=None):
  """A completed run whose test and training accuracy are constant."""
  os.makedirs(directory)
  with open(os.path.join(directory, "metrics.jsonl"), "w") as f:
    for t in range(int(seconds) + 1):
      f.write(json.dumps({"event": "commit", "time": t, "worker": 0,
                          "clock": t, "staleness": 1, "loss": 1.0,
                          "accuracy": accuracy, "window_start": t - 1,
                          "window_end": t, "step_accuracy": [accuracy] * 2,
                          "expected_commits": int(seconds) + 1}) + "\n")
      f.write(json.dumps({"event": "eval", "time": t, "clock": t,
                          "loss": 1.0, "accuracy": accuracy}) + "\n")
  if summary is None:
    summary = {"final_test_accuracy": accuracy, "wall_seconds": seconds,
               "completed": True}
  with open(os.path.join(directory, "summary.json"), "w") as f:
    json.dump(summary, f)


def test_report_tables_and_fraction(tmp_path):
  # agn beats aeasgd at λ = 10 (0.9 vs 0.6) and loses at λ = 20 (0.3 vs 0.6);
  # the (n = 4, λ = 20) aeasgd run failed.
  for n in (2, 4):
    for l, agn in ((10, 0.9), (20, 0.3)):
      write_run(sweep.run_dir(tmp_path, "agn", n, l), agn)
      if (n, l) != (4, 20):
        write_run(sweep.run_dir(tmp_path, "aeasgd", n, l), 0.6)
  text = sweep.report(str(tmp_path), ["agn", "aeasgd"], [2, 4], [10, 20],
                      failed={("aeasgd", 4, 20): "worker 1 failed"})
  assert "| 2 | 10 | 0.9000 | 10.0 | 0.6000 | 10.0 | 1.5000 | 1.5000 |" in text
  assert "| 2 | 20 | 0.3000 | 10.0 | 0.6000 | 10.0 | 0.5000 | 0.5000 |" in text
  assert "| 4 | 20 | 0.3000 | 10.0 | failed | – | – | – |" in text
  assert "| 2 | 1.500 | 0.500 |" in text  # The paper's n × λ table.
  assert "| aeasgd | 2/3 (0.67) | 2/3 (0.67) |" in text
  assert "worker 1 failed" in text
  assert "Time base of E: " in text
  # E train is the thesis' unless asked otherwise, and says so; with these
  # constant accuracies both curves give the same E.
  assert "*train* (`--efficiency_curve=thesis`): every local step's" in text
  commits = sweep.report(str(tmp_path), ["agn", "aeasgd"], [2, 4], [10, 20],
                         curve="commits")
  assert "*train* (`--efficiency_curve=commits`): each commit's" in commits
  assert "| 2 | 10 | 0.9000 | 10.0 | 0.6000 | 10.0 | 1.5000 | 1.5000 |" in (
      commits)
  # Each run's convergence, by the rule it states: 0.9 and 0.6 held from the
  # start converge, 0.3 (30 points above chance) is inconclusive.
  assert "Rule: diverged: non-finite, or the center's test accuracy" in text
  assert "| 2 | 10 | converged | converged |" in text
  assert "| 4 | 20 | inconclusive | – |" in text


def test_an_interrupted_run_does_not_count(tmp_path):
  # 641 of 2,696 commits, interrupted: no E may come from it.
  write_run(sweep.run_dir(tmp_path, "agn", 2, 10), 0.9)
  write_run(sweep.run_dir(tmp_path, "aeasgd", 2, 10), 0.6,
            summary={"final_test_accuracy": 0.6, "wall_seconds": 10.0,
                     "interrupted": True, "num_commits": 641,
                     "completed": False})
  text = sweep.report(str(tmp_path), ["agn", "aeasgd"], [2], [10])
  assert "| 2 | 10 | 0.9000 | 10.0 | – | – | – | – |" in text


def summary_of(directory, **fields):
  base = {"interrupted": False, "num_commits": 11, "rejected_commits": 0,
          "worker_commits": [6, 5]}
  base.update(fields)
  for key in [k for k, v in base.items() if v == "absent"]:
    del base[key]
  with open(os.path.join(directory, "summary.json"), "w") as f:
    json.dump(base, f)


def test_completed_reads_the_summary(tmp_path):
  run = tmp_path / "run"
  write_run(run, 0.9)  # 11 commit events, each says expected_commits = 11.
  assert rundirs.completed(str(run))
  summary_of(run, completed=False)
  assert not rundirs.completed(str(run))
  # Older summaries without "completed": the books must balance.
  summary_of(run)
  assert rundirs.completed(str(run))
  summary_of(run, num_commits=9, rejected_commits=2)
  assert rundirs.completed(str(run))
  for bad in (dict(interrupted=True), dict(interrupted="absent"),
              dict(worker_commits=[6, None]), dict(num_commits=10),
              dict(worker_commits=[3, 2], num_commits=5),
              dict(num_commits=True), dict(rejected_commits=-1)):
    summary_of(run, **bad)
    assert not rundirs.completed(str(run)), bad
  (run / "summary.json").write_text("{not json")
  assert not rundirs.completed(str(run))
  os.unlink(run / "summary.json")
  assert not rundirs.completed(str(run))
  # A summary planted as a symlink is not read.
  elsewhere = tmp_path / "elsewhere.json"
  elsewhere.write_text(json.dumps({"completed": True}))
  os.symlink(elsewhere, run / "summary.json")
  assert not rundirs.completed(str(run))


def test_cell_action(tmp_path):
  assert rundirs.cell_action(str(tmp_path / "missing")) == "fresh"
  empty = tmp_path / "empty"
  empty.mkdir()
  (empty / ".lock").write_text("")  # Left by a killed run: still empty.
  assert rundirs.cell_action(str(empty)) == "fresh"
  done = tmp_path / "done"
  write_run(done, 0.9)
  assert rundirs.cell_action(str(done)) == "keep"
  interrupted = tmp_path / "interrupted"
  write_run(interrupted, 0.9, summary={"interrupted": True,
                                       "completed": False})
  (interrupted / "checkpoints" / "641").mkdir(parents=True)
  assert rundirs.cell_action(str(interrupted)) == "resume"
  crashed = tmp_path / "crashed"
  crashed.mkdir()
  (crashed / "config.json").write_text("{}")
  (crashed / "metrics.jsonl").write_text("")
  (crashed / "checkpoints").mkdir()
  assert rundirs.cell_action(str(crashed)) == "restart"
  assert rundirs.move_aside(str(crashed)) == f"{crashed}.failed-1"
  assert not crashed.exists()
  assert (tmp_path / "crashed.failed-1" / "config.json").exists()


def sweep_flags(tmp_path, argv_tail):
  flag_values = flags.FlagValues()
  sweep.define_flags(flag_values)
  argv = ["sweep"] + argv_tail
  flag_values(argv)
  return flag_values, argv


def test_the_command_line_applies_to_every_run(tmp_path):
  shared = tmp_path / "agn.flags"
  shared.write_text("--dataset=digits\n--epochs=40\n--batch_size=16\n"
                    "--worker_optimizer=adam\n--learning_rate=0.001\n")
  own = tmp_path / "aeasgd.flags"
  own.write_text("--strategy=aeasgd\n--num_workers=40\n--dataset=digits\n"
                 "--epochs=40\n--worker_optimizer=sgd\n--learning_rate=0.01"
                 "\n--rho=5\n")
  fv, argv = sweep_flags(tmp_path, [
      f"--flagfile={shared}", "--strategies=agn,aeasgd",
      f"--strategy_flagfile=aeasgd={own}"])
  typed = flags_lib.typed_flags(argv, fv)
  assert typed == {"strategies", "strategy_flagfile"}
  per = sweep.strategy_overrides(fv.strategy_flagfile, sweep.shared_fields(fv))
  assert per == {"aeasgd": {"worker_optimizer": "sgd", "learning_rate": 0.01,
                            "rho": 5.0}}
  agn = sweep.run_config(fv, typed, per, "agn", 2, 10, "w", False)
  aeasgd = sweep.run_config(fv, typed, per, "aeasgd", 2, 10, "w", False)
  assert (agn.worker_optimizer, agn.learning_rate) == ("adam", 0.001)
  assert (aeasgd.worker_optimizer, aeasgd.learning_rate) == ("sgd", 0.01)
  assert aeasgd.num_workers == 2 and aeasgd.epochs == agn.epochs == 40
  # Typed on the command line: every run, over the strategy flagfile.
  fv, argv = sweep_flags(tmp_path, [
      f"--flagfile={shared}", "--strategies=agn,aeasgd",
      f"--strategy_flagfile=aeasgd={own}", "--learning_rate=0.05"])
  typed = flags_lib.typed_flags(argv, fv)
  per = sweep.strategy_overrides(fv.strategy_flagfile, sweep.shared_fields(fv))
  for s in ("agn", "aeasgd"):
    assert sweep.run_config(fv, typed, per, s, 2, 10, "w",
                            False).learning_rate == 0.05
  # --epochs=100 typed, the strategy flagfile says 40: an error naming it.
  fv, argv = sweep_flags(tmp_path, [
      f"--flagfile={shared}", "--strategies=agn,aeasgd",
      f"--strategy_flagfile=aeasgd={own}", "--epochs=100"])
  with pytest.raises(flags_lib.UsageError,
                     match=r"sets epochs=40.0; every run of the sweep has "
                     r"epochs=100.0; a strategy flagfile may set only"):
    sweep.strategy_overrides(fv.strategy_flagfile, sweep.shared_fields(fv))


def test_strategy_flagfile_errors(tmp_path):
  path = tmp_path / "aeasgd.flags"
  path.write_text("--strategy=aeasgd\n--num_workers=40\n--learning_rate=0.01"
                  "\n--worker_optimizer=sgd\n")
  assert sweep.strategy_overrides([f"aeasgd={path}"]) == {
      "aeasgd": {"learning_rate": 0.01, "worker_optimizer": "sgd"}}
  for line, name in (("--hidden_sizes=8", "hidden_sizes"),
                     ("--batch_size=7", "batch_size"),
                     ("--dataset=mnist", "dataset")):
    path.write_text(f"--learning_rate=0.01\n{line}\n")
    with pytest.raises(flags_lib.UsageError, match=f"sets {name}="):
      sweep.strategy_overrides([f"aeasgd={path}"], {})
  path.write_text("--strategy=agn\n")
  with pytest.raises(flags_lib.UsageError, match="not aeasgd"):
    sweep.strategy_overrides([f"aeasgd={path}"])
  path.write_text("--no_such_flag=1\n")
  with pytest.raises(flags_lib.UsageError, match="no_such_flag"):
    sweep.strategy_overrides([f"aeasgd={path}"])


def test_report_lists_differing_settings_and_warns_on_budget(tmp_path):
  write_run(sweep.run_dir(tmp_path, "agn", 2, 10), 0.9)
  write_run(sweep.run_dir(tmp_path, "aeasgd", 2, 10), 0.6)
  from agn_jax.config import TrainConfig
  agn = sweep._used(TrainConfig(strategy="agn", epochs=100.0))
  aeasgd = sweep._used(TrainConfig(strategy="aeasgd", epochs=40.0))
  text = sweep.report(str(tmp_path), ["agn", "aeasgd"], [2], [10],
                      configs={"agn": agn, "aeasgd": aeasgd})
  first = text.split("## Runs")[0]
  assert "Warning: the strategies do not train on the same data budget" in first
  assert "(epochs differ" in first
  assert "| epochs | 100 | 40 |" in text
  # The paper defaults each strategy runs with are listed too: both train
  # with Adam 1e-3; only AGN divides by the window.
  assert "| normalization | window | none |" in text
  assert "| worker_optimizer |" not in text
  assert "| seed |" not in text  # The same for both.
  same = dict(aeasgd, epochs=100.0)
  text = sweep.report(str(tmp_path), ["agn", "aeasgd"], [2], [10],
                      configs={"agn": agn, "aeasgd": same})
  assert "Warning" not in text


def test_strategies_take_import_paths_as_train_does(tmp_path):
  # tests/fifth_strategy.py is a strategy written outside agn_jax: train
  # takes it by its import path, and so does the sweep, for its runs and its
  # strategy flagfiles alike.
  own = tmp_path / "half.flags"
  own.write_text("--learning_rate=0.05\n")
  fv, argv = sweep_flags(tmp_path, [
      "--strategies=tests.fifth_strategy:half_delta,agn",
      f"--strategy_flagfile=tests.fifth_strategy:half_delta={own}"])
  assert fv.strategies == ["tests.fifth_strategy:half_delta", "agn"]
  per = sweep.strategy_overrides(fv.strategy_flagfile, sweep.shared_fields(fv))
  config = sweep.run_config(fv, flags_lib.typed_flags(argv, fv), per,
                            "tests.fifth_strategy:half_delta", 2, 5, "w",
                            False)
  assert config.strategy == "tests.fifth_strategy:half_delta"
  assert config.learning_rate == 0.05
  config.validate()
  # What train refuses, the sweep refuses, in train's words.
  for bad, said in (("tests.fifth_strategy:nothing", "cannot be imported"),
                    ("no_such_module:f", "cannot be imported"),
                    ("sgdx", "unknown strategy 'sgdx'")):
    with pytest.raises(flags.IllegalFlagValueError, match=said):
      sweep_flags(tmp_path, [f"--strategies=agn,{bad}"])
    with pytest.raises(flags.IllegalFlagValueError, match=said):
      sweep_flags(tmp_path, [f"--strategy_flagfile={bad}={own}"])
