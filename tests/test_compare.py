"""Tests for experiments.compare: temporal efficiency of runs read from disk."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from experiments import compare

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write_run(directory, eval_curve=(), commit_curve=(), summary=None,
              extra_lines=()):
  """A run directory whose metrics.jsonl holds the given (time, accuracy)s."""
  os.makedirs(directory, exist_ok=True)
  with open(os.path.join(directory, "metrics.jsonl"), "w") as f:
    for i, (t, acc) in enumerate(commit_curve):
      f.write(json.dumps({"event": "commit", "time": t, "worker": i % 2,
                          "clock": i, "staleness": i % 3, "loss": 1 - acc,
                          "accuracy": acc}) + "\n")
    for i, (t, acc) in enumerate(eval_curve):
      f.write(json.dumps({"event": "eval", "time": t, "clock": i,
                          "loss": 1 - acc, "accuracy": acc}) + "\n")
    for line in extra_lines:
      f.write(line + "\n")
  if summary is not None:
    with open(os.path.join(directory, "summary.json"), "w") as f:
      json.dump(summary, f)
  return str(directory)


def ramp(end, slope, step=0.5):
  """Samples of f(t) = slope * t on [0, end]."""
  return [(t, slope * t) for t in np.arange(0, end + step / 2, step)]


def test_efficiency_of_test_accuracy_matches_known_integrals(tmp_path):
  # a: f = 0.1 t on [0, 10] -> ∫₀^8 = 3.2; b: f = 0.8 constant on [0, 8]
  # -> ∫₀^8 = 6.4; m = 8 (b is shorter), so E(a, b) = 0.5 and E(b, a) = 2.
  a = compare.read_run(write_run(tmp_path / "a", eval_curve=ramp(10, 0.1)))
  b = compare.read_run(
      write_run(tmp_path / "b", eval_curve=[(t, 0.8) for t in range(9)]))
  assert compare.efficiency(a, b)["test"] == pytest.approx(0.5)
  assert compare.efficiency(b, a)["test"] == pytest.approx(2.0)


def test_efficiency_of_windowed_training_accuracy(tmp_path):
  # Samples every second; each 5 s window [5k, 5k+5) averages to its constant
  # and is stamped at its last sample 5k+4. a: 0.3 then 0.9, b: 0.6 throughout,
  # both ending at t = 19 (four windows, stamps 4, 9, 14, 19).
  # Curves get (0, 0) in front.
  times = range(20)
  a_values = [0.3 if t < 10 else 0.9 for t in times]
  a = compare.read_run(write_run(tmp_path / "a",
                                 commit_curve=list(zip(times, a_values))))
  b = compare.read_run(write_run(tmp_path / "b",
                                 commit_curve=[(t, 0.6) for t in times]))
  t, means = compare.train_curve(a)
  np.testing.assert_allclose(t, [4, 9, 14, 19])
  np.testing.assert_allclose(means, [0.3, 0.3, 0.9, 0.9])
  # ∫a = 4*0.3/2 + 5*0.3 + 5*(0.3+0.9)/2 + 5*0.9 = 0.6+1.5+3+4.5 = 9.6
  # ∫b = 4*0.6/2 + 15*0.6 = 1.2 + 9 = 10.2
  e = compare.efficiency(a, b)
  assert e["train"] == pytest.approx(9.6 / 10.2)
  assert e["test"] is None  # No eval events.


def test_efficiency_of_a_run_with_itself_is_exactly_one(tmp_path):
  rng = np.random.default_rng(0)
  times = np.sort(rng.uniform(0, 30, 200))
  path = write_run(tmp_path / "a",
                   eval_curve=list(zip(times[::10], rng.uniform(0, 1, 20))),
                   commit_curve=list(zip(times, rng.uniform(0, 1, 200))))
  a, again = compare.read_run(path), compare.read_run(path)
  assert compare.efficiency(a, a) == {"test": 1.0, "train": 1.0}
  assert compare.efficiency(a, again) == {"test": 1.0, "train": 1.0}


def test_truncated_last_line_is_ignored_but_corrupt_middle_line_is_not(
    tmp_path):
  path = write_run(tmp_path / "a", eval_curve=[(0, 0.1), (1, 0.2)],
                   extra_lines=['{"event": "eval", "ti'])
  assert len(compare.read_run(path).evals["time"]) == 2
  with open(os.path.join(path, "metrics.jsonl"), "a") as f:
    f.write(json.dumps({"event": "eval", "time": 3, "accuracy": 0.3}) + "\n")
  with pytest.raises(compare.RunDirError, match="metrics.jsonl:3"):
    compare.read_run(path)


def test_final_accuracy_prefers_the_summary(tmp_path):
  path = write_run(tmp_path / "a", eval_curve=[(0, 0.1), (1, 0.2)])
  assert compare.final_accuracy(compare.read_run(path)) == pytest.approx(0.2)
  path = write_run(tmp_path / "b", eval_curve=[(0, 0.1), (1, 0.2)],
                   summary={"final_test_accuracy": 0.25})
  assert compare.final_accuracy(compare.read_run(path)) == 0.25


def run_compare(*args, cwd=ROOT):
  return subprocess.run([sys.executable, "-m", "experiments.compare", *args],
                        cwd=cwd, capture_output=True, text=True, timeout=60)


def test_cli_prints_every_pair_and_draws_the_plot(tmp_path):
  a = write_run(tmp_path / "a", eval_curve=ramp(10, 0.1),
                commit_curve=ramp(10, 0.05))
  b = write_run(tmp_path / "b", eval_curve=[(t, 0.8) for t in range(9)],
                commit_curve=[(t, 0.4) for t in range(9)])
  output = tmp_path / "plots" / "cmp.png"
  result = run_compare(a, b, a, f"--output={output}")
  assert result.returncode == 0, result.stderr
  # After the per-run block: a header, then the pairs (a, b), (a, a), (b, a)
  # with E test in the next-to-last column; E(a, a) is exactly 1.
  pair_lines = result.stdout.split("\n\n")[1].splitlines()[1:]
  assert [line.split()[-2] for line in pair_lines] == [
      "0.5000", "1.0000", "2.0000"]
  assert output.stat().st_size > 0


@pytest.mark.parametrize("case", ["missing", "not_a_run", "empty", "one"])
def test_cli_bad_run_dirs_are_one_line_errors(tmp_path, case):
  good = write_run(tmp_path / "good", eval_curve=[(0, 0.1), (1, 0.2)])
  if case == "missing":
    args = [good, str(tmp_path / "nope")]
  elif case == "not_a_run":
    os.makedirs(tmp_path / "plain")
    args = [good, str(tmp_path / "plain")]
  elif case == "empty":
    args = [good, write_run(tmp_path / "empty")]
  else:
    args = [good]
  result = run_compare(*args)
  assert result.returncode != 0
  assert "Traceback" not in result.stderr
  assert len(result.stderr.strip().splitlines()) == 1, result.stderr
  assert result.stderr.startswith("compare: error:")
