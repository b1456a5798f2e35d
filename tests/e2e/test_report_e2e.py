"""The end-to-end half of tests/unit/test_report.py: real processes, subprocesses or whole runs."""

import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from experiments import rundirs
from experiments.report import archive
from experiments.report import claims
from experiments.report import design
from experiments.report import runner
from experiments.report import sections
from experiments.report import thesis

from tests.helpers import REPO

from test_report import run_report, section


@pytest.fixture(scope="module")
def study(tmp_path_factory):
  """The quick preset run in this process: every section's runs."""
  root = tmp_path_factory.mktemp("report")
  study_dir, output_dir = str(root / "study"), str(root / "results")
  p = design.preset("quick")
  books = runner.Study(study_dir)
  books.data["preset"] = "quick"
  books.save()
  failures = runner.run_all(p, books, show_progress=False, log=lambda _: None)
  assert not failures
  path = sections.write(sections.Context.build(
      p, books, output_dir, ("thesis", 5.0)))
  with open(path) as f:
    text = f.read()
  return study_dir, output_dir, text


def ablation_text(variant):
  from experiments.report.sections import ablation
  return ablation.ORDER_TEXT[variant]


def summary(study_dir, section_name, name):
  with open(os.path.join(study_dir, section_name, name, "summary.json")) as f:
    return json.load(f)


def test_report_opens_with_a_verdict_for_every_claim(study):
  _, _, text = study
  part = section(text, "The paper's claims")
  rows = [line for line in part.splitlines()
          if line.startswith("| ") and not line.startswith("| claim")]
  assert len(rows) == 10
  for row in rows:
    verdict = row.split(" | ")[3]
    # A verdict may say more after its word ("not reproduced under any
    # setting run", "inconclusive (…)"), as the report's own count reads it.
    assert any(verdict == v or verdict.startswith(v + " ")
               for v in (claims.REPRODUCED, claims.NOT_REPRODUCED,
                         claims.INCONCLUSIVE)), row
  for key, _ in claims.RULES:
    assert f"- **{key}**:" in part
  assert "says nothing about the paper" in text


def test_claims_carry_the_runs_numbers(study):
  study_dir, _, text = study
  part = section(text, "The paper's claims")
  agn = summary(study_dir, "grid", "agn-n2-l2-s0")["final_test_accuracy"]
  expected = ("reproduced" if abs(agn - thesis.HEADLINE.agn_test_accuracy)
              <= 0.005 else "not reproduced")
  assert (f"| AGN test accuracy at n = 2, λ = 2 | 98.18 % | "
          f"{100 * agn:.2f} % | {expected} | acc |") in part


def test_grid_rows_come_from_the_runs(study):
  study_dir, _, text = study
  part = section(text, "The grid")
  for n, l in ((2, 2), (2, 4), (4, 4)):
    agn = summary(study_dir, "grid", f"agn-n{n}-l{l}-s0")
    aeasgd = summary(study_dir, "grid", f"aeasgd-n{n}-l{l}-s0")
    row = re.search(rf"^\| {n} \| {l} \| (\d+) \| [^|]+ \| [^|]+ \| (\S+) \| "
                    rf"[^|]+ \| [^|]+ \| (\S+) \|", part, re.M)
    assert row, (n, l)
    # Windows per worker: commits / n.
    assert int(row.group(1)) == agn["num_commits"] // n
    assert float(row.group(2)) == pytest.approx(
        100 * agn["final_test_accuracy"], abs=0.006)
    assert float(row.group(3)) == pytest.approx(
        100 * aeasgd["final_test_accuracy"], abs=0.006)


def test_sections_use_the_runs_they_name(study):
  study_dir, output_dir, text = study
  processes = summary(study_dir, "ablation", "agn-n2-l2-s0-processes")
  assert processes["backend"] == "processes"
  assert summary(study_dir, "ablation", "agn-n2-l2-s0-random")[
      "config"]["speed_model"] == design.RANDOM_SPEEDS
  # The quick study varies AEASGD's α only at the gap cell (as `cpu`), and
  # runs only AGN as real processes: the processes row has no AEASGD.
  assert not os.path.exists(os.path.join(
      study_dir, "ablation", "aeasgd-n2-l2-s0-alpha0.5"))
  row = next(line for line in section(text, "The ablation").splitlines()
             if line.startswith("| " + ablation_text("processes") + " |"))
  assert row.startswith(f"| {ablation_text('processes')} | "
                        f"{100 * processes['final_test_accuracy']:.2f} % | – |")
  for variant, alpha in (("alpha0.05", 0.05), ("alpha0.5", 0.5)):
    gap = summary(study_dir, "ablation", f"aeasgd-n4-l4-s0-{variant}")
    assert gap["config"]["elastic_learning_rate"] * gap["config"][
        "rho"] == pytest.approx(alpha)
    row = next(line for line in section(text, "The ablation").splitlines()
               if line.startswith(f"| {alpha:g} ") or
               line.startswith(f"| {alpha:g} ("))
    assert f"{100 * gap['final_test_accuracy']:.2f} %" in row
  # AGN's commit order at the gap cell.
  for variant, speeds in (("round_robin", "constant"),
                          ("random", design.RANDOM_SPEEDS),
                          ("lognormal", "lognormal:0.5")):
    agn = summary(study_dir, "ablation", f"agn-n4-l4-s0-{variant}")
    assert agn["config"]["speed_model"] == speeds
    row = next(line for line in section(text, "The ablation").splitlines()
               if line.startswith("| " + ablation_text(variant) + " |")
               and line.count("|") == 3)
    assert f"{100 * agn['final_test_accuracy']:.2f} %" in row
  # The claims' summary names the order that moved AGN most there.
  acc = {v: summary(study_dir, "ablation", f"agn-n4-l4-s0-{v}")[
      "final_test_accuracy"] for v in ("round_robin", "random", "lognormal")}
  moved = {v: acc[v] - acc["round_robin"] for v in ("random", "lognormal")}
  most = max(moved, key=lambda v: abs(moved[v]))
  assert (f"AGN's test accuracy moves most with {ablation_text(most)}, by "
          f"{100 * moved[most]:+.2f} points from the round robin") in section(
              text, "The paper's claims")
  nesterov = summary(study_dir, "diloco", "agn-n2-l2-s0-nesterov")
  assert nesterov["config"]["server_optimizer"] == "nesterov"
  assert nesterov["config"]["server_learning_rate"] == pytest.approx(0.35)
  downpour = summary(study_dir, "downpour", "downpour-n4-l1-s0-adam0.001")
  assert downpour["config"]["communication_window"] == 1
  assert f"{100 * downpour['final_test_accuracy']:.2f} %" in section(
      text, "DOWNPOUR")
  stale = section(text, "Staleness")
  assert (f"| ablation n=2 λ=2, processes | {processes['num_commits']} |"
          in stale)
  for name in ("grid-curves.png", "ablation.png", "staleness.png",
               "downpour.png"):
    assert os.path.getsize(os.path.join(output_dir, name)) > 1000, name
    assert f"]({name})" in text
  assert "## Compute ledger" in text


def test_the_verdicts_issue_sections_come_from_their_runs(study):
  study_dir, output_dir, text = study
  acc = lambda section_name, name: summary(study_dir, section_name, name)[
      "final_test_accuracy"]
  # The grid ran in the thesis' setting, the sensitivity runs in the old one.
  new, old = (summary(study_dir, "grid", "agn-n2-l2-s0"),
              summary(study_dir, "sensitivity", "agn-n2-l2-s0"))
  assert (new["config"]["data_assignment"], new["config"]["speed_model"]) == (
      "epoch_slices", "thesis")
  assert (old["config"]["data_assignment"], old["config"]["speed_model"]) == (
      "shards", "constant")
  assert "`--data_assignment=epoch_slices`" in section(text, "The grid")
  part = section(text, "Sensitivity")
  row = next(line for line in part.splitlines() if line.startswith("| 2 | 2 |"))
  cells = [c.strip() for c in row.strip("|").split("|")]
  a_new, a_old = acc("grid", "agn-n2-l2-s0"), acc("sensitivity", "agn-n2-l2-s0")
  b_new, b_old = (acc("grid", "aeasgd-n2-l2-s0"),
                  acc("sensitivity", "aeasgd-n2-l2-s0"))
  assert cells[2:8] == [f"{100 * a_new:.2f} %", f"{100 * a_old:.2f} %",
                        f"{100 * (a_new - a_old):+.2f}",
                        f"{100 * b_new:.2f} %", f"{100 * b_old:.2f} %",
                        f"{100 * (b_new - b_old):+.2f}"]
  assert "verdicts that rest on the grid" in part
  # DOWNPOUR (the quick study sweeps Adam alone): one row per setting and n,
  # each its own optimizer.
  part = section(text, "DOWNPOUR at n = 10")
  for variant, optimizer, lr, label in (("adam0.001", "adam", 1e-3, "Adam"),):
    for n in (2, 4):
      s = summary(study_dir, "downpour", f"downpour-n{n}-l1-s0-{variant}")
      assert (s["config"]["worker_optimizer"], s["config"]["learning_rate"],
              s["config"]["communication_window"]) == (optimizer, lr, 1)
      row = next(line for line in part.splitlines()
                 if line.startswith(f"| {label} {lr:g} | {n} |"))
      assert f"{100 * s['final_test_accuracy']:.2f} %" in row
  # RQ1: the normalized and unnormalized runs, and the effect by the rule:
  # more than half a point apart, or one diverged.
  part = section(text, "RQ1")
  norm = summary(study_dir, "normalization", "agn-n2-l2-s0-normalized")
  raw = summary(study_dir, "normalization", "agn-n2-l2-s0-unnormalized")
  assert (norm["config"]["normalization"], raw["config"]["normalization"]) == (
      "window", "none")
  row = next(line for line in part.splitlines() if line.startswith("| 2 |"))
  cells = [c.strip() for c in row.strip("|").split("|")]
  gap = norm["final_test_accuracy"] - raw["final_test_accuracy"]
  bad = [c in ("diverged", "failed") for c in (cells[1], cells[4])]
  expected = ("hurts" if bad[0] and not bad[1] else
              "helps" if bad[1] and not bad[0] else
              "no difference" if abs(gap) <= 0.005 else
              "helps" if gap > 0 else "hurts")
  assert cells[-1] == expected, row
  for s in (norm, raw):
    assert f"{100 * s['final_test_accuracy']:.2f} %" in row
  assert os.path.getsize(os.path.join(output_dir, "normalization.png")) > 1000
  # RQ3: DynSGD beside the grid's AGN and AEASGD of its cell.
  part = section(text, "RQ3")
  d = summary(study_dir, "dynsgd", "dynsgd-n2-l2-s0")
  assert d["config"]["strategy"] == "dynsgd"
  row = next(line for line in part.splitlines() if line.startswith("| 2 | 2 |"))
  cells = [c.strip() for c in row.strip("|").split("|")]
  assert cells[2:5] == [f"{100 * a_new:.2f} %", f"{100 * b_new:.2f} %",
                        f"{100 * d['final_test_accuracy']:.2f} %"]


def test_the_beyond_section_rows_come_from_its_runs(study):
  study_dir, output_dir, text = study
  part = section(text, "Beyond the paper")
  plain = summary(study_dir, "beyond", "agn-n4-l4-s0-plain")
  dn = summary(study_dir, "beyond", "agn-n4-l4-s0-dn")
  dylu = summary(study_dir, "beyond", "agn-n4-l4-s0-dylu")
  aeasgd = summary(study_dir, "beyond", "aeasgd-n4-l4-s0-plain")
  int8 = summary(study_dir, "beyond", "agn-n4-l4-s0-int8")
  for s in (plain, dn, dylu, aeasgd, int8):
    assert s["config"]["speed_model"] == design.HETEROGENEOUS_SPEEDS
  assert dn["config"]["server_optimizer"] == "delayed_nesterov"
  assert dn["config"]["server_every"] == 4
  assert dylu["config"]["dynamic_local_updates"] is True
  assert int8["config"]["commit_compression"] == "int8"
  rows = part.splitlines()
  for label, s in (("| AGN |", plain), ("| AGN + Delayed Nesterov |", dn),
                   ("| AGN + Dynamic Local Updates", dylu),
                   ("| AEASGD |", aeasgd)):
    row = next(line for line in rows if line.startswith(label))
    assert f"{100 * s['final_test_accuracy']:.2f} %" in row, label
  # The codec's bytes against uncompressed AGN's, and its verdict, by hand.
  row = next(line for line in rows if line.startswith("| int8 |"))
  ratio = int8["bytes_committed"] / plain["bytes_committed"]
  assert ratio < 0.3
  assert f"| {ratio:.3f} |" in row
  close = abs(int8["final_test_accuracy"] -
              plain["final_test_accuracy"]) <= 0.01
  assert row.endswith("| supported |" if close else "| not supported |")
  for name in ("beyond-methods.png", "beyond-codecs.png"):
    assert os.path.getsize(os.path.join(output_dir, name)) > 1000, name
    assert f"]({name})" in part


def test_the_language_model_section_rows_come_from_its_runs(study, tmp_path):
  # The beyond preset's language-model design on the suite's shrink of the
  # task (tests/small_language_model.py, its bigram model: a transformer
  # would compile for 10 s a run), 2 seeds at n = 2, λ = 2, beside
  # the quick study's MNIST beyond runs, copied in: every figure of a row
  # from the runs' summaries, each verdict by its rule by hand.
  # pylint: disable=g-import-not-at-top
  import math
  import numpy as np
  from experiments import compare, curves
  from experiments.report import language_model
  from experiments.report.sections import beyond
  from experiments.report.sections import language_model as lm_section
  from helpers import shakespeare_data_dir
  # pylint: enable=g-import-not-at-top
  corpus = shakespeare_data_dir(tmp_path / "corpus")
  workload = ("--task=next_token",
              "--model=tests.small_language_model:bigram",
              "--dataset=tests.small_language_model:load",
              "--dataset_size=32", "--backend=simulated", "--cluster=none",
              "--speed_model=lognormal:0.5", "--data_assignment=stream",
              "--batch_size=4", "--eval_every_rounds=1", "--nocheckpoints",
              "--noplots") + ((f"--data_dir={corpus}",) if corpus else ())
  lm = language_model.runs(workload, (2, 2), 1.0, 2, examples=32)
  assert [r.name for r in lm[:4]] == [
      "agn-n2-l2-s0-plain", "aeasgd-n2-l2-s0-plain", "agn-n2-l2-s0-dn",
      "agn-n2-l2-s0-dylu"] and len(lm) == 8
  quick = design.preset("quick")
  p = design.preset("beyond")._replace(
      runs=lm + quick.section_runs(design.BEYOND))
  study_dir = tmp_path / "study"
  shutil.copytree(os.path.join(study[0], "beyond"), study_dir / "beyond")
  books = runner.Study(str(study_dir))
  assert not runner.run_all(p, books, show_progress=False, log=lambda _: None)
  # E train's window in the runs' modeled time (local steps): these runs
  # are a few steps long.
  window = 0.5
  ctx = sections.Context.build(p, books, str(tmp_path / "out"),
                               ("thesis", window))
  text = open(sections.write(ctx)).read()
  part = section(text, "Beyond the paper on a language model")
  assert "8 of 8 completed" in part

  def run(name):
    return curves.read_run(str(study_dir / design.BEYOND_LM / name))

  def bpb(name):
    s = summary(str(study_dir), design.BEYOND_LM, name)
    assert s["config"]["data_assignment"] == "stream"
    assert s["config"]["speed_model"] == design.HETEROGENEOUS_SPEEDS
    return s["final_test_bits_per_byte"]

  def e(a, b, key):
    return compare.efficiency(run(a), run(b), window, "simulated",
                              "thesis")[key]

  def mean(values):
    known = [v for v in values if v is not None]
    return float(np.mean(known)) if known else None

  plain = [bpb(f"agn-n2-l2-s{s}-plain") for s in (0, 1)]
  rows = part.splitlines()
  for label, strategy, variant in (
      ("| AGN + Delayed Nesterov |", "agn", "dn"),
      ("| AGN + Dynamic Local Updates", "agn", "dylu"),
      ("| AEASGD |", "aeasgd", "plain")):
    names = [f"{strategy}-n2-l2-s{s}-{variant}" for s in (0, 1)]
    values = [bpb(n) for n in names]
    row = next(line for line in rows if line.startswith(label))
    cells_ = [c.strip() for c in row.strip("|").split("|")]
    if variant == "dylu":  # The workers' windows of seed 0, as run.
      windows = summary(str(study_dir), design.BEYOND_LM,
                        names[0])["local_updates"]
      assert cells_[0] == (f"AGN + Dynamic Local Updates (λ_k "
                           f"{min(windows):g}–{max(windows):g}, seed 0)")
    assert cells_[2] == f"{values[0]:.3f} / {values[1]:.3f}", row
    assert cells_[3] == f"{np.mean(values):.3f}", row
    e_test = mean([e(n, f"agn-n2-l2-s{s}-plain", "test")
                   for s, n in enumerate(names)])
    e_train = mean([e(n, f"agn-n2-l2-s{s}-plain", "train")
                    for s, n in enumerate(names)])
    assert e_test is not None and e_train is not None
    assert cells_[6] == f"{e_train:.3f}" and cells_[7] == f"{e_test:.3f}"
    # The rules (lower bits per byte is better), by hand.
    worse = np.mean(values) > np.mean(plain) + 0.02
    if strategy == "aeasgd":
      want = "supported" if 1 / e_train > 1 else "not supported"
    elif variant == "dn":
      want = ("not supported" if worse else
              "supported" if e_test >= 1 else "inconclusive")
    else:
      want = ("not supported" if worse else "supported" if e_test > 1 else
              "not supported" if e_test < 1 else "inconclusive")
    assert cells_[9] == want, row
    # The MNIST verdict of the same claim at the quick study's cell (4, 4).
    claim = cells_[1]
    mnist = beyond.verdicts(ctx, (4, 4))[claim]
    assert cells_[10] == f"n = 4, λ = 4: {mnist}", row
    assert cells_[11] == lm_section.agreement(want, {(4, 4): mnist})
    if cells_[11].startswith("disagrees"):
      assert f"- **{claim}**: {want} on the language model" in part
  # Plain AGN trained: the center's bits per byte went down.
  for s in (0, 1):
    _, values = curves.eval_curve(run(f"agn-n2-l2-s{s}-plain"), "simulated")
    assert math.isfinite(plain[s]) and plain[s] < values[0]
  assert os.path.getsize(tmp_path / "out" / "beyond-language-model.png") > 1000


def test_completed_runs_keep_no_checkpoint_and_the_ledger_counts_them(study):
  study_dir, _, _ = study
  books = runner.Study(study_dir)
  p = design.preset("quick")
  assert set(books.ledger) == {f"{r.section}/{r.name}" for r in p.runs}
  for r in p.runs:
    assert not os.path.exists(os.path.join(r.path(study_dir), "checkpoints"))
    entry = books.ledger[f"{r.section}/{r.name}"]
    assert entry["completed"]
    # Training takes CPU time; a ledger that lost it would read 0 (a
    # quick run on a fast host takes less than 0.1 s of it).
    assert entry["cpu_seconds"] > 0, entry


def test_the_archive_carries_the_study_to_a_fresh_clone(study, tmp_path):
  study_dir, output_dir, _ = study
  p = design.preset("quick")
  archive_dir = str(tmp_path / "archive")
  books = runner.Study(study_dir, archive_dir)
  assert archive.sync(p, books) == (0, len(p.runs))
  # Only what the report reads: no checkpoint, lock or TensorBoard file.
  for r in p.runs:
    assert sorted(os.listdir(r.path(archive_dir))) == [
        "config.json", "metrics.jsonl.gz", "summary.json"], r.name
    with gzip.open(os.path.join(r.path(archive_dir), "metrics.jsonl.gz")) as f:
      with open(os.path.join(r.path(study_dir), "metrics.jsonl"), "rb") as g:
        assert f.read() == g.read()
  with open(os.path.join(archive_dir, "study.json")) as f:
    assert json.load(f)["ledger"] == books.ledger
  # A fresh machine: no study directory, only the archive. The study's
  # command there restores every run, runs none and rewrites the report.
  fresh, out = str(tmp_path / "fresh"), str(tmp_path / "out")
  result = run_report("--preset=quick", f"--study_dir={fresh}",
                      f"--output_dir={out}", f"--archive_dir={archive_dir}",
                      "--noprogress")
  assert result.returncode == 0, result.stderr
  assert f"{len(p.runs)} completed runs restored" in result.stdout
  assert "[1/" not in result.stdout  # Every run completed earlier.
  assert "0 not started" in result.stdout
  assert runner.Study(fresh).ledger == books.ledger
  # The books keep the command that ran the study, and the report names it.
  command = (f"python -m experiments.report --preset=quick --study_dir="
             f"{fresh} --output_dir={out} --archive_dir={archive_dir}")
  assert runner.Study(fresh).data["command"] == command
  with open(os.path.join(out, "REPORT.md")) as f:
    there = f.read()
  assert f"Written by `{command}`" in there
  # The study's own report (the fixture's): the same, but for the study
  # directory it reads the runs from, and the line naming the command that
  # wrote it and its day (the books may have gained a command since).
  assert f"from the runs in `{fresh}`" in there

  def body(text):
    return [line.replace(fresh, "STUDY").replace(study_dir, "STUDY")
            for line in text.splitlines()
            if not line.startswith("Written by `")]
  assert body(there) == body(study[2])
  # A damaged archive ends in one line.
  first = os.path.join(p.runs[0].path(archive_dir), "metrics.jsonl.gz")
  with open(first, "r+b") as f:
    f.truncate(20)
  result = run_report("--preset=quick", f"--study_dir={tmp_path / 'again'}",
                      f"--archive_dir={archive_dir}", "--report_only")
  assert result.returncode != 0
  assert result.stderr.strip().count("\n") == 0, result.stderr
  assert "--archive_dir" in result.stderr and "Traceback" not in result.stderr


def test_a_cell_below_five_windows_is_not_shown(tmp_path):
  quick = design.preset("quick")
  runs = tuple(r._replace(epochs=0.5) for r in quick.runs
               if r.section == design.GRID and r.cell == (4, 4))
  p = quick._replace(runs=runs)
  books = runner.Study(str(tmp_path / "study"))
  assert not runner.run_all(p, books, show_progress=False, log=lambda _: None)
  ctx = sections.Context.build(p, books, str(tmp_path / "out"),
                               ("thesis", 5.0))
  assert ctx.results.pairs(design.GRID, (4, 4))  # It ran...
  assert sections.grid.shown_cells(ctx) == {}    # ...and is refused.
  text = open(sections.write(ctx)).read()
  assert "not shown: < 5 windows a worker" in text


def test_a_study_of_another_preset_is_refused(study):
  study_dir, output_dir, _ = study
  result = run_report("--preset=cpu", f"--study_dir={study_dir}",
                      f"--output_dir={output_dir}", "--archive_dir=",
                      timeout=60)
  assert result.returncode == 2
  assert "holds a --preset=quick study" in result.stderr
  assert result.stderr.strip().count("\n") == 0


def test_ctrl_c_keeps_the_report_and_the_same_command_resumes(tmp_path):
  study_dir = str(tmp_path / "study")
  argv = [sys.executable, "-m", "experiments.report", "--preset=quick",
          f"--study_dir={study_dir}", "--noprogress",
          "--sections=downpour"]
  process = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
  first = os.path.join(study_dir, "downpour", "downpour-n2-l1-s0-adam0.001",
                       "metrics.jsonl")
  deadline = time.monotonic() + 60
  while not os.path.exists(first) and time.monotonic() < deadline:
    time.sleep(0.05)
  process.send_signal(signal.SIGINT)
  _, err = process.communicate(timeout=60)
  assert process.returncode == 130, err
  assert err.strip().count("\n") == 0 and "run the same command" in err
  assert os.path.isfile(os.path.join(study_dir, "results", "REPORT.md"))
  result = subprocess.run(argv, cwd=REPO, capture_output=True, text=True,
                          timeout=120)
  assert result.returncode == 0, result.stderr
  books = runner.Study(study_dir)
  assert all(books.ledger[f"downpour/{r.name}"]["completed"]
             for r in design.preset("quick").section_runs(design.DOWNPOUR))


@pytest.mark.parametrize("args, message", [
    (["--preset=nope"], "--preset"),
    (["--sections=grid,bogus"], "--sections accepts"),
    (["--report_only"], "holds no study"),
])
def test_bad_flags_are_one_line(tmp_path, args, message):
  # No archive: the committed one would otherwise be restored.
  result = run_report(f"--study_dir={tmp_path}", "--archive_dir=", *args,
                      timeout=60)
  assert result.returncode == 2
  assert "Traceback" not in result.stderr
  assert result.stderr.strip().count("\n") == 0, result.stderr
  assert message in result.stderr


# The research questions: each section's figures from its runs' own records.


def commit_rows(study_dir, section_name, name):
  """The commit rows of a run's metrics.jsonl, in the order written."""
  with open(os.path.join(study_dir, section_name, name, "metrics.jsonl")) as f:
    rows = [json.loads(line) for line in f if line.strip()]
  return [r for r in rows if r.get("event") == "commit"]


def mean_of(rows, key):
  values = [r[key] for r in rows if r.get(key) is not None]
  return sum(values) / len(values)


def answer_of(part):
  return re.search(r"^\*\*Answer: ([^.]+)\.\*\*", part, re.M).group(1)


# The quick preset's mechanism runs, by hand: (commit order, n, method).
QUICK_SWEEP = {
    ("fitted cluster", 2, "AGN"): "agn-n2-l2-s0-normalized",
    ("fitted cluster", 2, "unnormalized accumulation"):
        "agn-n2-l2-s0-unnormalized",
    ("fitted cluster", 2, "DOWNPOUR (λ = 1)"): "downpour-n2-l1-s0",
    ("fitted cluster", 4, "AGN"): "agn-n4-l2-s0-normalized",
    ("fitted cluster", 4, "unnormalized accumulation"):
        "agn-n4-l2-s0-unnormalized",
    ("fitted cluster", 4, "DOWNPOUR (λ = 1)"): "downpour-n4-l1-s0",
    ("round robin", 4, "AGN"): "agn-n4-l2-s0-normalized-round_robin",
}


def test_rq2_rows_and_answer_come_from_the_runs(study):
  study_dir, output_dir, text = study
  part = section(text, "RQ2:")
  staleness, momentum = {}, {}
  for (setting, n, method), name in QUICK_SWEEP.items():
    s = summary(study_dir, "mechanism", name)
    assert s["config"]["diagnostics"] is True
    assert s["config"]["speed_model"] == (
        "thesis" if setting == "fitted cluster" else "constant")
    assert s["config"]["data_assignment"] == "epoch_slices"
    rows = commit_rows(study_dir, "mechanism", name)
    measured = [r for r in rows if r.get("commit_norm") is not None]
    ds = mean_of(rows, "distance_staleness")
    # The run's summary agrees with its own rows.
    assert s["mean_distance_staleness"] == pytest.approx(ds, rel=1e-9)
    mu = rows[-1]["implicit_momentum"]
    assert s["implicit_momentum"] == pytest.approx(mu, rel=1e-9)
    staleness[(setting, n, method)], momentum[(setting, n, method)] = ds, mu
    row = (f"| {setting} | {n} | {method} | {len(measured)} | {ds:.4g} | "
           f"{mean_of(rows, 'commit_norm'):.4g} | {mu:.3f} | "
           f"{1 - 1 / n:.3f} | {100 * s['final_test_accuracy']:.2f} % |")
    assert row in part, row
  # Part (a): AGN below unnormalized at each (order, n) with both runs.
  below = [staleness[(o, n, "AGN")] <
           staleness[(o, n, "unnormalized accumulation")]
           for o, n in (("fitted cluster", 2), ("fitted cluster", 4))]
  a = ("holds" if all(below) else "fails" if below.count(False) > 1 else
       "cannot be told from these runs")
  # Part (b): AGN's μ̂ below unnormalized accumulation's at each n.
  lower = [momentum[("fitted cluster", n, "AGN")] <
           momentum[("fitted cluster", n, "unnormalized accumulation")]
           for n in (2, 4)]
  b = ("holds" if all(lower) else "fails" if lower.count(False) > 1 else
       "cannot be told from these runs")
  for o, n in (("fitted cluster", 2), ("fitted cluster", 4)):
    agn, raw = (commit_rows(study_dir, "mechanism", QUICK_SWEEP[(o, n, m)])
                for m in ("AGN", "unnormalized accumulation"))
    per_norm = (f"per unit of commit norm "
                f"{mean_of(agn, 'distance_staleness') / mean_of(agn, 'commit_norm'):.3g}"
                f" against "
                f"{mean_of(raw, 'distance_staleness') / mean_of(raw, 'commit_norm'):.3g}")
    assert per_norm in part, per_norm
  expected = ("fails" if "fails" in (a, b) else
              "holds" if a == b == "holds" else
              "cannot be told from these runs")
  assert answer_of(part) == expected, part
  assert f"(a) {a}:" in part and f"(b) {b}:" in part
  for name in ("rq2-staleness-momentum.png", "rq2-unstable.png",
               "rq2-instruments.png"):
    assert os.path.getsize(os.path.join(output_dir, name)) > 1000, name
    assert f"]({name})" in part


def test_rq4_table_and_answer_come_from_the_runs(study):
  study_dir, output_dir, text = study
  part = section(text, "RQ4:")
  means = {}
  for method, name, every in (
      ("AGN", "agn-n2-l2-s0-normalized", 2),
      ("unnormalized accumulation", "agn-n2-l2-s0-unnormalized", 2),
      ("DOWNPOUR (λ = 1)", "downpour-n2-l1-s0", 4)):
    assert summary(study_dir, "mechanism", name)["config"][
        "diagnostics_every"] == every
    rows = commit_rows(study_dir, "mechanism", name)
    probed = [r for r in rows if r.get("gradient_cosine") is not None]
    # Probed at the 1st, (k+1)-th, ... applied commit: every 4 local steps.
    assert probed and all((r["clock"] - 1) % every == 0 for r in probed)
    means[method] = mean_of(rows, "gradient_cosine")
    # The quick study's one seed: the mean over seeds is that seed's.
    row = next(line for line in part.splitlines()
               if line.startswith(f"| {method} |"))
    assert row.startswith(f"| {method} | {means[method]:.4f} | "
                          f"{means[method]:.4f} |"), row
    if method != "AGN":
      assert f"| {means['AGN'] - means[method]:+.4f} |" in row, row
  # One seed gives no interval: the runs cannot tell.
  assert answer_of(part) == "cannot be told from these runs"
  assert os.path.getsize(os.path.join(output_dir,
                                      "rq4-gradient-cosine.png")) > 1000
  assert "](rq4-gradient-cosine.png)" in part


def test_rq1_rq3_and_rq5_answers_follow_their_rules(study):
  study_dir, output_dir, text = study
  acc = lambda section_name, name: summary(study_dir, section_name, name)[
      "final_test_accuracy"]
  # RQ1: one λ; its effect decides (helps: holds, hurts: fails).
  part = section(text, "RQ1:")
  effect = next(line for line in part.splitlines()
                if line.startswith("| 2 |")).strip("|").split("|")[-1].strip()
  assert answer_of(part) == {"helps": "holds", "hurts": "fails",
                             "no difference": "cannot be told from these runs"
                             }[effect]
  assert "](normalization.png)" in part
  # RQ3: AGN against DynSGD and AEASGD at (2, 2), half a point either way.
  part = section(text, "RQ3:")
  agn = acc("grid", "agn-n2-l2-s0")
  standings = ["ahead" if agn - o > 0.005 else
               "behind" if o - agn > 0.005 else "level"
               for o in (acc("dynsgd", "dynsgd-n2-l2-s0"),
                         acc("grid", "aeasgd-n2-l2-s0"))]
  expected = ("holds" if "ahead" in standings and "behind" not in standings
              else "fails" if standings.count("behind") >
              standings.count("ahead") else "cannot be told from these runs")
  assert answer_of(part) == expected
  assert os.path.getsize(os.path.join(output_dir, "rq3-dynsgd.png")) > 1000
  # RQ5: λ = 4 is the one λ run at two n (2 and 4).
  part = section(text, "RQ5:")
  fall = {s: acc("grid", f"{s}-n2-l4-s0") - acc("grid", f"{s}-n4-l4-s0")
          for s in ("agn", "aeasgd")}
  gap = fall["agn"] - fall["aeasgd"]
  expected = ("holds" if gap < -0.005 else "fails" if gap > 0.005 else
              "cannot be told from these runs")
  assert answer_of(part) == expected
  assert (f"from n = 2 to 4: AGN {-100 * fall['agn']:+.2f} points, "
          f"AEASGD {-100 * fall['aeasgd']:+.2f}") in part
  assert os.path.getsize(os.path.join(output_dir, "rq5-workers.png")) > 1000
  # The overview names every answer as its section does.
  overview = section(text, "Research questions")
  for k in range(1, 6):
    verdict = answer_of(section(text, f"RQ{k}:"))
    assert re.search(rf"^\| RQ{k} \| .* \| \*\*{verdict}\*\* \|$", overview,
                     re.M), (k, verdict)


def test_a_study_from_before_the_mechanism_section_reports_it_not_run(
    study, tmp_path):
  # The quick study as the code before the mechanism section left it: the
  # same runs and books, without the mechanism's.
  study_dir, _, text = study
  old = str(tmp_path / "study")
  shutil.copytree(study_dir, old, ignore=shutil.ignore_patterns(
      "mechanism", "results"))
  books = runner.Study(old)
  for key in [k for k in books.ledger if k.startswith("mechanism/")]:
    del books.ledger[key]
  books.save()
  p = design.preset("quick")
  path = sections.write(sections.Context.build(
      p, runner.Study(old), str(tmp_path / "out"), ("thesis", 5.0)))
  with open(path) as f:
    partial = f.read()
  for title in ("RQ2:", "RQ4:"):
    part = section(partial, title)
    assert answer_of(part) == "not run yet"
    assert "**Runs:** 0 of" in part and "| not run |" in part
  for title in ("RQ1:", "RQ3:", "RQ5:"):
    assert answer_of(section(partial, title)) == answer_of(
        section(text, title))
  # What a resumed study would run: exactly the mechanism's runs.
  pending = [r for r in p.runs if not rundirs.completed(r.path(old))]
  assert pending == list(p.section_runs(design.MECHANISM))


def test_the_summary_and_the_98_row_count_the_same_cells(study):
  study_dir, _, text = study
  row = re.search(r"^\| AGN reaches about 98 % .*? \| (\d+) of (\d+) cells "
                  r"≥ 97\.5 %: (.*?); (\d+) below: (.*?) \(median",
                  section(text, "The paper's claims"), re.M)
  assert row
  passed, shown, failed = int(row.group(1)), int(row.group(2)), int(
      row.group(4))
  assert passed + failed == shown
  # Each listed cell's figure is its AGN run's (one seed), on its side of
  # 97.5 %.
  for group, above in ((3, True), (5, False)):
    for n, l, value in re.findall(r"\((\d+), (\d+)\) ([\d.]+) %",
                                  row.group(group)):
      agn = summary(study_dir, "grid", f"agn-n{n}-l{l}-s0")
      assert float(value) == pytest.approx(
          100 * agn["final_test_accuracy"], abs=0.006)
      assert (agn["final_test_accuracy"] >= 0.975) == above
  bullets = [l for l in section(text, "Summary").splitlines()
             if l.startswith("- ")]
  assert len(bullets) == 5
  assert f"Across the {shown} grid cells run, AGN reaches 97.5 % test " \
         f"accuracy in {passed} of them" in bullets[1]
  # The questions' answers, in order, as the overview table gives them.
  answers = re.findall(r"^\| (RQ\d) \| .* \| \*\*(.*)\*\* \|$",
                       section(text, "Research questions"), re.M)
  assert bullets[3] == "- Research questions: " + ", ".join(
      f"{rq} {a}" for rq, a in answers) + "."
  assert [rq for rq, _ in answers] == ["RQ1", "RQ2", "RQ3", "RQ4", "RQ5"]


def test_each_seed_of_a_seeded_cell_and_its_recovery_come_from_its_runs(
    study, tmp_path):
  # The quick study with a second seed at its first cell: the study resumes
  # and runs only that pair.
  study_dir, _, _ = study
  copy = str(tmp_path / "study")
  shutil.copytree(study_dir, copy)
  p = design.preset("quick")
  cell = p.grid_cells[0]
  extra = tuple(r._replace(seed=1) for r in p.section_runs(design.GRID)
                if r.cell == cell)
  p = p._replace(runs=p.runs + extra, headline_seeds=2)
  books = runner.Study(copy)
  assert not runner.run_all(p, books, show_progress=False,
                            log=lambda _: None)
  path = sections.write(sections.Context.build(
      p, books, str(tmp_path / "out"), ("thesis", 5.0)))
  with open(path) as f:
    part = section(f.read(), "The grid")
  assert "### Each seed" in part
  n, l = cell
  for strategy in ("agn", "aeasgd"):
    cells, recovered = [], 0
    for seed in (0, 1):
      name = f"{strategy}-n{n}-l{l}-s{seed}"
      with open(os.path.join(copy, "grid", name, "metrics.jsonl")) as f:
        evals = [json.loads(line) for line in f]
      evals = sorted((e for e in evals if e.get("event") == "eval"),
                     key=lambda e: e["sim_time"])
      last = sum(e["accuracy"] for e in evals[-5:]) / len(evals[-5:])
      recovered += last >= 0.90
      final = summary(copy, "grid", name)["final_test_accuracy"]
      cells.append(f"{100 * final:.2f} % ({100 * last:.2f} %)")
    assert (f"| {n} | {l} | {strategy.upper()} | {'; '.join(cells)} | "
            f"{recovered} of 2 |") in part
    assert f"{strategy.upper()} at n = {n}, λ = {l}: {recovered} of 2" in part
