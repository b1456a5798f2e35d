"""Tests for experiments.sweep: the report and per-strategy flagfiles."""

import json
import os

import pytest

from experiments import flags as flags_lib
from experiments import sweep


def write_run(directory, accuracy, seconds=10.0):
  """A finished run whose test and training accuracy are constant."""
  os.makedirs(directory)
  with open(os.path.join(directory, "metrics.jsonl"), "w") as f:
    for t in range(int(seconds) + 1):
      f.write(json.dumps({"event": "commit", "time": t, "worker": 0,
                          "clock": t, "staleness": 1, "loss": 1.0,
                          "accuracy": accuracy}) + "\n")
      f.write(json.dumps({"event": "eval", "time": t, "clock": t,
                          "loss": 1.0, "accuracy": accuracy}) + "\n")
  with open(os.path.join(directory, "summary.json"), "w") as f:
    json.dump({"final_test_accuracy": accuracy, "wall_seconds": seconds}, f)


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


def test_strategy_flagfile_overrides_only_what_it_sets(tmp_path):
  path = tmp_path / "aeasgd.flags"
  path.write_text("--strategy=aeasgd\n--num_workers=40\n--learning_rate=0.01"
                  "\n--worker_optimizer=sgd\n--hidden_sizes=8\n")
  overrides = sweep.strategy_overrides([f"aeasgd={path}"])
  assert overrides == {"aeasgd": {"learning_rate": 0.01,
                                  "worker_optimizer": "sgd",
                                  "hidden_sizes": (8,)}}
  path.write_text("--no_such_flag=1\n")
  with pytest.raises(flags_lib.UsageError, match="no_such_flag"):
    sweep.strategy_overrides([f"aeasgd={path}"])
