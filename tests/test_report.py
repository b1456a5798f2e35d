"""End to end: `python -m experiments.report --quick` runs real sweeps and writes REPORT.md from them."""

import json
import os
import re
import subprocess
import sys

import pytest

from experiments import report
from experiments import sweep
from tests.helpers import REPO

# Real processes, Ray or CLI subprocesses: `-m "not slow"` leaves them out.
pytestmark = pytest.mark.slow


def run_report(*args, timeout=600):
  return subprocess.run([sys.executable, "-m", "experiments.report", *args],
                        cwd=REPO, capture_output=True, text=True,
                        timeout=timeout)


@pytest.fixture(scope="module")
def study(tmp_path_factory):
  """One quick study: 2×2 grid, one real-process cell, every item."""
  root = tmp_path_factory.mktemp("report")
  study_dir, output_dir = str(root / "study"), str(root / "results")
  result = run_report("--quick", f"--study_dir={study_dir}",
                      f"--output_dir={output_dir}")
  assert result.returncode == 0, result.stdout + result.stderr
  with open(os.path.join(output_dir, "REPORT.md")) as f:
    text = f.read()
  return study_dir, output_dir, text, result.stdout


def summary(study_dir, sweep_name, strategy, n, l):
  path = sweep.run_dir(os.path.join(study_dir, sweep_name), strategy, n, l)
  with open(os.path.join(path, "summary.json")) as f:
    return json.load(f)


def section(text, item):
  start = text.index(f"## {item}. ")
  end = text.find("\n## ", start + 1)
  return text[start:] if end < 0 else text[start:end]


def test_report_starts_with_the_headline_table(study):
  study_dir, _, text, _ = study
  head = text[:text.index("## ")]
  assert "| mean final test accuracy, AGN |" in head
  assert "69.73 %" in head and "98.18 %" in head and "97.45 %" in head
  # The quick grid's corner is its headline cell; its numbers are the runs'.
  agn = summary(study_dir, "grid-mnist5k", "agn", 4, 4)
  aeasgd = summary(study_dir, "grid-mnist5k", "aeasgd", 4, 4)
  assert (f"| n = 4, λ = 4: AGN | {100 * agn['final_test_accuracy']:.2f} %"
          in head)
  assert (f"| n = 4, λ = 4: AEASGD | "
          f"{100 * aeasgd['final_test_accuracy']:.2f} %" in head)
  assert "--quick" in head  # A quick study says it is one.


def test_every_item_has_its_section_command_backend_and_time(study):
  _, _, text, _ = study
  for item in report.ITEMS:
    part = section(text, item)
    assert "**Command:** `python -m experiments.report" in part
    assert f"--items={item}" in part
    assert "**Backend:**" in part and "**Time here:**" in part
  assert "## Where we differ from the paper, and why" in text


def test_grid_section_holds_the_runs_numbers(study):
  study_dir, _, text, _ = study
  part = section(text, 1)
  for n in (2, 4):
    for l in (2, 4):
      agn = summary(study_dir, "grid-mnist5k", "agn", n, l)
      aeasgd = summary(study_dir, "grid-mnist5k", "aeasgd", n, l)
      row = re.search(rf"^\| {n} \| {l} \| \d+ \| (\S+) \| (\S+) \| (\S+) \| "
                      rf"(\S+) \|$", part, re.M)
      assert row, (n, l)
      assert float(row.group(1)) == pytest.approx(
          agn["final_test_accuracy"], abs=5e-5)
      assert float(row.group(2)) == pytest.approx(
          aeasgd["final_test_accuracy"], abs=5e-5)
      assert float(row.group(3)) > 0 and float(row.group(4)) > 0  # E's.
  assert "### MNIST-1D" in part
  assert summary(study_dir, "grid-mnist1d", "agn", 2, 4)["dataset"] == \
      "mnist1d"


def test_reality_staleness_downpour_lambda_diloco_come_from_runs(study):
  study_dir, _, text, _ = study
  processes = summary(study_dir, "reality-processes", "agn", 2, 4)
  assert processes["backend"] == "processes"
  part = section(text, 2)
  assert (f"| 2 | 4 | processes | {processes['final_test_accuracy']:.4f} |"
          in part)
  assert "| 2 | 4 | simulated random |" in part
  assert "| 2 | 4 | simulated round_robin |" in part
  staleness_rows = section(text, 3)
  assert f"| 2 | processes | {processes['num_commits']} |" in staleness_rows
  assert "| 2 | simulated round_robin |" in staleness_rows
  downpour = summary(study_dir, "downpour", "downpour", 2, 1)
  assert (f"| 2 | 1 | {downpour['final_test_accuracy']:.4f} |"
          in section(text, 4))
  assert "| 2 | 2 |" in section(text, 5)  # n = 2: best λ 2 or 4, heuristic 2.
  nesterov = summary(study_dir, "diloco-nesterov", "agn", 2, 2)
  assert nesterov["config"]["server_optimizer"] == "nesterov"
  assert f"| {nesterov['final_test_accuracy']:.4f} |" in section(text, 6)


def test_plots_exist_and_are_linked(study):
  _, output_dir, text, _ = study
  for name in ("grid-mnist5k.png", "grid-mnist1d.png", "reality.png",
               "staleness.png", "downpour.png", "lambda.png"):
    path = os.path.join(output_dir, name)
    assert os.path.getsize(path) > 1000, name
    assert f"]({name})" in text
  # report_quick.flags says --noplots: the runs draw none of their own.
  study_dir = study[0]
  run = sweep.run_dir(os.path.join(study_dir, "grid-mnist5k"), "agn", 2, 2)
  assert os.path.isfile(os.path.join(run, "metrics.jsonl"))
  assert not os.path.exists(os.path.join(run, "curves.png"))


def test_completed_runs_drop_their_checkpoints(study):
  study_dir, _, _, _ = study
  run = sweep.run_dir(os.path.join(study_dir, "grid-mnist5k"), "agn", 2, 2)
  assert sweep.completed(run)
  assert not os.path.exists(os.path.join(run, "checkpoints"))


def test_resume_runs_nothing_new_and_rewrites_the_report(study):
  study_dir, output_dir, text, _ = study
  os.remove(os.path.join(output_dir, "REPORT.md"))
  result = run_report(f"--study_dir={study_dir}", f"--output_dir={output_dir}",
                      "--resume", "--items=1")
  assert result.returncode == 0, result.stderr
  assert "[item" not in result.stdout  # Every cell completed earlier.
  with open(os.path.join(output_dir, "REPORT.md")) as f:
    again = f.read()
  assert section(again, 1).split("**Time here:**")[0] == \
      section(text, 1).split("**Time here:**")[0]


@pytest.mark.parametrize("args, message", [
    (["--items=7"], "--items accepts numbers from 1 to 6"),
    (["--epochs=0"], "--epochs accepts a finite number > 0"),
])
def test_bad_flags_are_one_line(tmp_path, args, message):
  result = run_report(f"--study_dir={tmp_path}", *args, timeout=60)
  assert result.returncode == 2
  assert result.stderr.strip().count("\n") == 0
  assert message in result.stderr


def test_an_existing_study_needs_resume_and_the_same_budget(study):
  study_dir, output_dir, _, _ = study
  result = run_report(f"--study_dir={study_dir}", f"--output_dir={output_dir}",
                      timeout=60)
  assert result.returncode == 2 and "--resume" in result.stderr
  result = run_report(f"--study_dir={study_dir}", f"--output_dir={output_dir}",
                      "--resume", "--epochs=7", timeout=60)
  assert result.returncode == 2 and "another --study_dir" in result.stderr
  assert result.stderr.strip().count("\n") == 0


def test_report_only_without_a_study_is_one_line(tmp_path):
  result = run_report(f"--study_dir={tmp_path}", "--report_only", timeout=60)
  assert result.returncode == 2
  assert result.stderr.strip().startswith("report: error:")
  assert "holds no study" in result.stderr
