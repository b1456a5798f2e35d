"""Attacks 21. Round five: the readers of runs trust nothing they read.

A study's cell holds its own run or none (copied runs, runs trained there by
hand); a run's files agree with each other (metrics.jsonl cut short, a
summary.json field of the wrong type); the report's commands run as printed;
the sweep takes strategies as train does.

Mixed into `attacks.Attacks`; each `attack_*` method raises `Failed` or
returns a note. See attacks.py for how they run.
"""

import shlex
import shutil

# pylint: disable=wildcard-import,unused-wildcard-import
from attacklib import *

# The quick study's cells these attacks use: a grid cell's two strategies,
# and DynSGD's one run (the cheapest section to run whole).
AGN_CELL = os.path.join("grid", "agn-n2-l2-s0")
AEASGD_CELL = os.path.join("grid", "aeasgd-n2-l2-s0")
DYNSGD_CELL = os.path.join("dynsgd", "dynsgd-n2-l2-s0")


def _new_study(path: str) -> str:
  """An empty --preset=quick study in `path` (its books, no runs)."""
  os.makedirs(path)
  with open(os.path.join(path, "study.json"), "w") as f:
    json.dump({"preset": "quick", "command": None, "ledger": {}}, f)
  return path


def _report(study: str, *args: str, deadline: float = DEADLINE) -> Result:
  return cli("report", "--preset=quick", f"--study_dir={study}",
             f"--output_dir={os.path.join(study, 'results')}", *args,
             deadline=deadline)


def _by_hand(report_md: str, cell: str) -> List[str]:
  """The argv of the report's "One by hand" command that trains `cell`."""
  with open(report_md) as f:
    text = f.read()
  for line in text.splitlines():
    if "One by hand: `" in line:
      argv = shlex.split(line[line.index("`") + 1:line.rindex("`")])
      if argv[-1].endswith(cell):
        return argv
  raise Failed(f"REPORT.md has no command for {cell}")


def _cut(path: str, keep: float = 1 / 3) -> None:
  with open(path) as f:
    lines = f.readlines()
  with open(path, "w") as f:
    f.writelines(lines[:int(len(lines) * keep)])


def _run_argv(argv: List[str], deadline: float = DEADLINE) -> Result:
  """A printed `python -m ...` command, run as a shell would run it."""
  if argv[:2] != ["python", "-m"]:
    raise Failed(f"not a python -m command: {argv[:3]}")
  return finish(subprocess.Popen(
      [sys.executable, *argv[1:]], cwd=REPO, env=child_env(), text=True,
      stdout=subprocess.PIPE, stderr=subprocess.PIPE,
      start_new_session=True), deadline)


class ReaderAttacks:
  """a cell's own run, files that agree, commands that run, import paths in sweeps."""

  def _hand_cell(self) -> str:
    """The quick study's AGN grid cell, trained by the report's own "one by hand" command in a study directory whose name has a space."""
    if getattr(self, "_readers_failed", None):
      raise Failed(self._readers_failed)
    if getattr(self, "_readers_cell", None) is None:
      try:
        self._readers_cell = self._train_hand_cell()  # pylint: disable=attribute-defined-outside-init
      except Failed as e:
        self._readers_failed = f"the hand-trained cell: {e}"  # pylint: disable=attribute-defined-outside-init
        raise
    return self._readers_cell

  def _train_hand_cell(self) -> str:
    study = _new_study(self.path("study with space"))
    expect_success(_report(study, "--report_only"), "the empty report")
    argv = _by_hand(os.path.join(study, "results", "REPORT.md"), AGN_CELL)
    expect_success(_run_argv(argv), "the command as printed")
    cell = os.path.join(study, AGN_CELL)
    self.workdirs.append(cell)
    expect_outcome(cell, "completed")
    return cell

  def _study_with(self, name: str, **cells: str) -> str:
    """A new quick study holding a copy of the hand-trained cell at each of `cells`' paths."""
    study = _new_study(self.path(name))
    for relative in cells.values():
      shutil.copytree(self._hand_cell(), os.path.join(study, relative))
    return study

  # 21a-b. A cell holds its own run: its config.json against the design.

  def attack_21a(self):
    """AGN's run copied into AEASGD's cell: the report leaves it out, naming the cell and the field"""
    study = self._study_with("study_copied", agn=AGN_CELL, aeasgd=AEASGD_CELL)
    result = _report(study, "--report_only")
    expect_success(result, "the report")
    said = [l for l in lines_of(result.stdout) if l.startswith("left out:")]
    if len(said) != 1 or "grid/aeasgd-n2-l2-s0" not in said[0] or (
        "strategy: expected 'aeasgd', found 'agn'" not in said[0]):
      raise Failed(f"not named: {said or lines_of(result.stdout)[-2:]}")
    with open(os.path.join(study, "results", "REPORT.md")) as f:
      report = f.read()
    if "**Left out:** grid/aeasgd-n2-l2-s0" not in report or (
        "**Runs:** 1 of 6 completed" not in report):
      raise Failed("REPORT.md counts it or does not say so")
    return said[0][:160]

  def attack_21b(self):
    """a train started by hand in a cell: named while it runs, moved aside and rerun once it has completed"""
    study = _new_study(self.path("study_hand"))
    expect_success(_report(study, "--report_only"), "the empty report")
    argv = _by_hand(os.path.join(study, "results", "REPORT.md"), DYNSGD_CELL)
    cell = os.path.join(study, DYNSGD_CELL)
    self.workdirs.append(cell)
    # While it trains (a long budget), the report names it and its pid.
    hand = subprocess.Popen(
        [sys.executable, *argv[1:], "--seed=5", "--epochs=500"], cwd=REPO,
        env=child_env(), text=True, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, start_new_session=True)
    try:
      wait_until(hand, lambda: os.path.isfile(os.path.join(cell,
                                                           "config.json")))
      line = expect_one_line_error(
          _report(study, "--sections=dynsgd"), "report")
    finally:
      hand.send_signal(signal.SIGINT)
      finish(hand, 60)
    for part in ("dynsgd/dynsgd-n2-l2-s0", "seed: expected 0, found 5",
                 f"pid {hand.pid}"):
      if part not in line:
        raise Failed(f"does not name {part}: {line}")
    # Completed by hand with another seed: moved aside, the cell's own runs.
    shutil.rmtree(cell)
    expect_success(_run_argv(argv + ["--seed=5"]), "the hand run")
    result = _report(study, "--sections=dynsgd")
    expect_success(result, "the report")
    if read_json(os.path.join(cell, "config.json")).get("seed") != 0:
      raise Failed("the cell holds the hand run")
    if read_json(os.path.join(cell + ".failed-1", "config.json")).get(
        "seed") != 5:
      raise Failed("the hand run was not kept aside")
    moved = [l for l in lines_of(result.stdout) if "not the cell's run" in l]
    if not moved:
      raise Failed(f"not said: {lines_of(result.stdout)[-3:]}")
    return f"{line[:100]} / {moved[0].strip()[:80]}"

  # 21c-e. A run's files agree: metrics.jsonl against summary.json.

  def attack_21c(self):
    """agn-compare on a run whose metrics.jsonl is cut to its first third: one line naming the run and what disagrees"""
    cut = self.copy("cut_metrics")
    _cut(os.path.join(cut, "metrics.jsonl"))
    line = expect_one_line_error(
        cli("compare", self.base(), cut, f"--output={self.path('cut.png')}"),
        "compare")
    commits = read_json(os.path.join(cut, "summary.json"))["num_commits"]
    for part in (cut, "disagree", f"num_commits {commits}"):
      if part not in line:
        raise Failed(f"does not name {part}: {line}")
    return line[:160]

  def attack_21d(self):
    """the report on a cell whose metrics.jsonl is cut to its first third: left out, named"""
    study = self._study_with("study_cut", agn=AGN_CELL)
    _cut(os.path.join(study, AGN_CELL, "metrics.jsonl"))
    result = _report(study, "--report_only")
    expect_success(result, "the report")
    said = [l for l in lines_of(result.stdout) if l.startswith("left out:")]
    if len(said) != 1 or os.path.join(study, AGN_CELL) not in said[0] or (
        "disagree" not in said[0]):
      raise Failed(f"not named: {said or lines_of(result.stdout)[-2:]}")
    with open(os.path.join(study, "results", "REPORT.md")) as f:
      if "**Runs:** 0 of 6 completed" not in f.read():
        raise Failed("REPORT.md counts it")
    return said[0][:160]

  def attack_21e(self):
    """agn-compare on a run whose summary.json has "num_commits": "16": one line naming the file and field"""
    run = self.copy("string_commits")
    path = os.path.join(run, "summary.json")
    summary = read_json(path)
    summary["num_commits"] = str(summary["num_commits"])
    with open(path, "w") as f:
      json.dump(summary, f)
    line = expect_one_line_error(
        cli("compare", self.base(), run, f"--output={self.path('s.png')}"),
        "compare")
    if path not in line or "'num_commits'" not in line:
      raise Failed(f"does not name the file and field: {line}")
    return line[:160]

  # 21f. The report's commands run as printed.

  def attack_21f(self):
    """the report's "one by hand" command in a study directory with a space runs as printed"""
    return self._hand_cell()

  # 21g. The sweep takes strategies as train does.

  def attack_21g(self):
    """agn-sweep --strategies=package.module:function (tests/fifth_strategy.py) runs it"""
    sweep_dir = self.path("sweep_import")
    result = cli("sweep", "--strategies=tests.fifth_strategy:half_delta,agn",
                 "--dataset=digits", "--backend=simulated", "--num_workers=2",
                 "--communication_windows=5", "--epochs=1", "--noplots",
                 f"--sweep_dir={sweep_dir}")
    expect_success(result, "the sweep")
    for strategy in ("tests.fifth_strategy:half_delta", "agn"):
      run = os.path.join(sweep_dir, f"{strategy}-n2-l5")
      self.workdirs.append(run)
      if read_json(os.path.join(run, "config.json")).get(
          "strategy") != strategy:
        raise Failed(f"{run} is not a {strategy} run")
      expect_outcome(run, "completed")
    return "both cells completed"
