"""The end-to-end half of tests/unit/test_compare.py: real processes, subprocesses or whole runs."""

import json
import os
import subprocess
import sys

import pytest

from agn_jax import metrics
from experiments import compare
from test_compare import ROOT, config, ramp, write_run


def run_compare(*args, cwd=ROOT):
  return subprocess.run([sys.executable, "-m", "experiments.compare", *args],
                        cwd=cwd, capture_output=True, text=True, timeout=60)


def test_cli_prints_every_pair_and_draws_the_plot(tmp_path):
  a = write_run(tmp_path / "a", eval_curve=ramp(10, 0.1),
                commit_curve=ramp(10, 0.05), config=config())
  b = write_run(tmp_path / "b", eval_curve=[(t, 0.8) for t in range(9)],
                commit_curve=[(t, 0.4) for t in range(9)], config=config())
  output = tmp_path / "plots" / "cmp.png"
  result = run_compare(a, b, a, f"--output={output}")
  assert result.returncode == 0, result.stderr
  # After the time base and the per-run block: a header, then the pairs
  # (a, b), (a, a), (b, a) with E test in the next-to-last column; E(a, a) is
  # exactly 1. Old-format runs have one time base, counted from launch.
  blocks = result.stdout.split("\n\n")
  assert blocks[0].startswith("time base: wall"), result.stdout
  # Each run's convergence, then the rule.
  run_lines = blocks[1].splitlines()
  assert [line.split()[-1] for line in run_lines[1:4]] == ["converged"] * 3
  assert run_lines[4] == f"convergence: {metrics.CONVERGENCE_RULE}"
  # Which training curve E train is, then E for every pair. These rows have
  # no step accuracies: the thesis' E train is n/a.
  assert blocks[2].startswith("E train (thesis): every local step's "
                              "training accuracy"), blocks[2]
  pair_lines = blocks[2].splitlines()[2:]
  assert [line.split()[-2] for line in pair_lines] == [
      "0.5000", "1.0000", "2.0000"]
  assert {line.split()[-1] for line in pair_lines} == {"n/a"}
  assert output.stat().st_size > 0
  numbers = json.loads((tmp_path / "plots" / "cmp.json").read_text())
  assert numbers["time_base"] == "wall"
  assert [r["time_base"] for r in numbers["runs"]] == ["wall"] * 3
  assert [p["test"] for p in numbers["pairs"]] == pytest.approx([0.5, 1, 2])
  assert numbers["efficiency_curve"] == "thesis"
  assert numbers["efficiency_window"] == 5.0
  assert [r["convergence"] for r in numbers["runs"]] == ["converged"] * 3


@pytest.mark.parametrize("case", ["missing", "not_a_run", "empty"])
def test_bad_run_dirs_are_refused_with_the_reason(tmp_path, case):
  # What the CLI prints after "compare: error:" (a case of each kind runs
  # the program below).
  if case == "missing":
    path, reason = str(tmp_path / "nope"), "no such run directory"
  elif case == "not_a_run":
    os.makedirs(tmp_path / "plain")
    path = str(tmp_path / "plain")
    reason = r"not a run directory \(no metrics.jsonl\)"
  else:
    path = write_run(tmp_path / "empty")
    reason = "holds no commit or eval events"
  with pytest.raises(compare.RunDirError, match=reason):
    compare.read_run(path)


@pytest.mark.parametrize("case", ["missing", "one"])
def test_cli_bad_run_dirs_are_one_line_errors(tmp_path, case):
  good = write_run(tmp_path / "good", eval_curve=[(0, 0.1), (1, 0.2)])
  args = [good, str(tmp_path / "nope")] if case == "missing" else [good]
  result = run_compare(*args)
  assert result.returncode != 0
  assert "Traceback" not in result.stderr
  assert len(result.stderr.strip().splitlines()) == 1, result.stderr
  assert result.stderr.startswith("compare: error:")


def test_mixing_an_old_run_with_a_new_one_is_flagged(tmp_path):
  new = write_run(tmp_path / "new", startup=5.0, eval_curve=ramp(10, 0.1))
  old = write_run(tmp_path / "old", eval_curve=ramp(10, 0.1))
  e = compare.efficiency(compare.read_run(new), compare.read_run(old))
  assert e["time_bases"] == ("training", "wall")
  assert not e["same_time_base"]
  result = run_compare(new, old, f"--output={tmp_path / 'cmp.png'}")
  assert result.returncode == 0, result.stderr
  first = result.stdout.splitlines()[0]
  assert first.startswith("WARNING: the runs do not share a time base"), first
  assert "old: wall" in first and "new: training" in first


def test_cli_warns_at_the_top_when_the_budgets_differ(tmp_path):
  curve = [(0, 0.5), (4, 0.5)]
  a = write_run(tmp_path / "a", eval_curve=curve, startup=1.0,
                config=config(epochs=100))
  b = write_run(tmp_path / "b", eval_curve=curve, startup=1.0,
                config=config())
  result = run_compare(a, b, f"--output={tmp_path / 'cmp.png'}")
  assert result.returncode == 0, result.stderr
  first = result.stdout.splitlines()[0]
  assert first.startswith("WARNING: the runs do not share a data budget"), (
      result.stdout)
  assert "epochs differs (a: 100, b: 40)" in first
  numbers = json.loads((tmp_path / "cmp.json").read_text())
  assert numbers["same_budget"] is False
  assert numbers["differing_budget"] == ["epochs"]
  # The same budget: no warning at all.
  c = write_run(tmp_path / "c", eval_curve=curve, startup=1.0,
                config=config())
  result = run_compare(c, b, f"--output={tmp_path / 'cmp.png'}")
  assert result.returncode == 0, result.stderr
  assert "WARNING" not in result.stdout
  assert result.stdout.startswith("time base: training (seconds since the "
                                  "start barrier")


@pytest.mark.parametrize("bad", ['"abc"', "true", "[1]", '{"x": 1}'])
def test_non_numeric_field_names_file_and_line(tmp_path, bad):
  path = write_run(tmp_path / "a", eval_curve=[(0, 0.1), (1, 0.2)])
  metrics_path = os.path.join(path, "metrics.jsonl")
  with open(metrics_path, "a") as f:
    f.write('{"event": "eval", "time": 2, "accuracy": ' + bad + "}\n")
  with pytest.raises(compare.RunDirError,
                     match=f"metrics.jsonl:3: field 'accuracy' is not a "
                     "number"):
    compare.read_run(path)
  if bad != '"abc"':
    return  # The program's one line, for one of them.
  good = write_run(tmp_path / "good", eval_curve=[(0, 0.1), (1, 0.2)])
  result = run_compare(good, path)
  assert result.returncode != 0
  assert "Traceback" not in result.stderr
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1, result.stderr
  assert lines[0].startswith("compare: error:")
  assert f"{metrics_path}:3" in lines[0] and "accuracy" in lines[0]


@pytest.mark.parametrize("args", [["--time_base=simulated"],
                                  ["--time_base=cpu"],
                                  ["--efficiency_window=inf"],
                                  ["--efficiency_window=0"],
                                  ["--efficiency_curve=bins"]])
def test_cli_bad_time_base_or_window_is_one_line(tmp_path, args):
  a = write_run(tmp_path / "a", eval_curve=[(0, 0.1), (1, 0.2)], startup=1.0)
  b = write_run(tmp_path / "b", eval_curve=[(0, 0.1), (1, 0.2)], startup=1.0)
  result = run_compare(a, b, *args)
  assert result.returncode != 0
  assert "Traceback" not in result.stderr
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1, result.stderr
  assert lines[0].startswith("compare: error:")
  assert args[0].split("=")[0] in lines[0]
