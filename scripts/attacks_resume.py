"""Attacks 19. Round five: checkpoints verified at restore, runs that can always go on.

Mixed into `attacks.Attacks`; each `attack_*` method raises `Failed` or
returns a note. See attacks.py for how they run.
"""

# pylint: disable=wildcard-import,unused-wildcard-import
from attacklib import *
from tests.helpers import damage_checkpoint  # pylint: disable=g-bad-import-order

# The run: `T --dataset=digits S`, S on the simulated backend.
RUN = ["--noplots", "--dataset=digits", "--num_workers=2",
       "--communication_window=5"]
SIMULATED = RUN + ["--backend=simulated"]


class ResumeAttacks:
  """checkpoints verified at restore, runs that can always go on."""

  def _run(self, name, *args, epochs=1) -> str:
    """A finished run of `args` for `epochs` epochs in a workdir of its own."""
    workdir = self.path(name)
    self.workdirs.append(workdir)
    expect_success(cli("train", *args, f"--epochs={epochs}",
                       f"--workdir={workdir}"), f"the {epochs}-epoch run")
    return workdir

  def _resume(self, workdir, epochs) -> Result:
    return cli("train", "--noplots", f"--epochs={epochs}", "--resume",
               f"--workdir={workdir}")

  def _expect_commits(self, workdir, expected) -> dict:
    summary = expect_outcome(workdir, "completed")
    clocks = commits(workdir)
    if summary.get("num_commits") != expected or clocks != list(
        range(1, expected + 1)):
      raise Failed(f"{summary.get('num_commits')} commits (rows "
                   f"{clocks[:1]}..{clocks[-1:]}), not {expected}")
    return summary

  # 19a-b. A flipped bit in the only checkpoint's array data is refused.

  def _flipped_bit_refused(self, name, *args):
    workdir = self._run(name, *args)
    step_dir = os.path.join(workdir, "checkpoints", "16")
    damage_checkpoint(step_dir)
    before = snapshot(workdir)
    line = expect_one_line_error(self._resume(workdir, 2), "train")
    if "checkpoint 16 in" not in line or "damaged" not in line:
      raise Failed(f"does not name the damaged checkpoint 16: {line}")
    expect_unchanged(before, workdir)
    return line[:200]

  def attack_19a(self):
    """a flipped bit in the checkpoint's array data, simulated: one line naming it, nothing touched"""
    return self._flipped_bit_refused("flipped_simulated", *SIMULATED)

  def attack_19b(self):
    """the same on the processes backend"""
    return self._flipped_bit_refused("flipped_processes", *RUN)

  def attack_19k(self):
    """the same on the Ray backend (its server restores as the processes one)"""
    return self._flipped_bit_refused("flipped_ray", *RAY,
                                     "--communication_window=5")

  # 19c-d. The newest checkpoint damaged, the one before intact: fall back.

  def _falls_back(self, workdir, newest, older, epochs, commits):
    damage_checkpoint(os.path.join(workdir, "checkpoints", str(newest)))
    result = self._resume(workdir, epochs)
    expect_success(result, "the resume")
    said = [l for l in lines_of(result.stderr) if "damaged" in l]
    if len(said) != 1 or f"checkpoint {newest} in" not in said[0] or (
        f"resuming from checkpoint {older}" not in said[0]):
      raise Failed(f"the fallback is not one line naming {newest} and "
                   f"{older}: {said}")
    summary = self._expect_commits(workdir, commits)
    if summary.get("resumed_from_commit") != older:
      raise Failed(f"resumed from {summary.get('resumed_from_commit')}")
    if not os.path.isdir(os.path.join(workdir, "checkpoints",
                                      f"{newest}.damaged")):
      raise Failed(f"checkpoint {newest} was not set aside")
    return said[0].split("] ")[-1][:200]

  def attack_19c(self):
    """the newest checkpoint damaged, one before intact, simulated: resumes from it, saying so"""
    workdir = self._run("fallback_simulated", *SIMULATED)
    expect_success(self._resume(workdir, 2), "the 2-epoch resume")
    return self._falls_back(workdir, newest=34, older=16, epochs=3,
                            commits=52)

  def attack_19d(self):
    """the same on the processes backend, two checkpoints of one run"""
    workdir = self._run("fallback_processes", *RUN,
                        "--checkpoint_every_seconds=0.01")
    steps = sorted(int(n) for n in os.listdir(os.path.join(
        workdir, "checkpoints")) if n.isdigit())
    if len(steps) != 2 or steps[-1] != 16:
      raise Failed(f"checkpoints {steps}, not two ending at 16")
    return self._falls_back(workdir, newest=16, older=steps[0], epochs=2,
                            commits=34)

  # 19e-g. A finished run resumed with more epochs goes on, whatever its
  # data assignment.

  def _continues(self, name, *args):
    workdir = self._run(name, *args)
    expect_success(self._resume(workdir, 2), "the 2-epoch resume")
    summary = self._expect_commits(workdir, 34)
    return f"16 -> {summary['num_commits']} commits"

  def attack_19e(self):
    """a finished stream run, simulated, resumed with --epochs=2: 34 commits"""
    return self._continues("stream_simulated", *SIMULATED,
                           "--data_assignment=stream")

  def attack_19f(self):
    """the same on the processes backend"""
    return self._continues("stream_processes", *RUN,
                           "--data_assignment=stream")

  def attack_19g(self):
    """a finished epoch_slices run, simulated, resumed with --epochs=2: 34 commits"""
    return self._continues("slices_simulated", *SIMULATED,
                           "--data_assignment=epoch_slices")

  # 19h. Ctrl-C before the first checkpoint: the resume starts afresh.

  def _interrupt_before_first_checkpoint(self, workdir) -> bool:
    """SIGINT once the run owns `workdir` (metrics.jsonl); whether no checkpoint was written."""
    proc = start("train", *RUN, "--epochs=1",
                 "--checkpoint_every_seconds=3600", f"--workdir={workdir}")
    metrics = os.path.join(workdir, "metrics.jsonl")
    end = time.monotonic() + DEADLINE
    while not os.path.exists(metrics):
      if proc.poll() is not None or time.monotonic() > end:
        kill_group(proc)
        raise Failed(f"the run ended first (exit {proc.poll()})")
      time.sleep(0.005)
    proc.send_signal(signal.SIGINT)
    result = finish(proc)
    if result.rc != 130:
      raise Failed(f"the interrupt: exit {result.rc}")
    checkpoints = os.path.join(workdir, "checkpoints")
    return not (os.path.isdir(checkpoints) and any(
        n.isdigit() for n in os.listdir(checkpoints)))

  def attack_19h(self):
    """SIGINT before the first checkpoint, then --resume: afresh at commit 0, whole share"""
    # Once the server is up, an interrupt ends with a final checkpoint: the
    # signal must land before, so a few tries may be needed.
    for attempt in range(5):
      workdir = self.path(f"interrupted_early_{attempt}")
      self.workdirs.append(workdir)
      if self._interrupt_before_first_checkpoint(workdir):
        break
    else:
      raise Failed("5 interrupts all came after the server's start")
    again = cli("train", *RUN, "--epochs=1", f"--workdir={workdir}")
    if again.rc == 0:
      raise Failed("a fresh run over it was accepted")
    result = self._resume(workdir, 1)
    expect_success(result, "the resume")
    said = [l for l in lines_of(result.stderr) if "afresh" in l]
    if len(said) != 1:
      raise Failed(f"does not say it starts afresh: {said}")
    self._expect_commits(workdir, 16)
    return f"try {attempt + 1}: " + said[0].split("] ")[-1][:200]

  # 19i. A module planted in the workdir is not imported before the check.

  def attack_19i(self):
    """--resume in a workdir whose config.json names a planted module: the mismatch first, no import"""
    workdir = self._run("planted", *SIMULATED)
    with open(os.path.join(workdir, "planted.py"), "w") as f:
      f.write("import pathlib\npathlib.Path('MARKER').write_text('ran')\n"
              "def load(**kwargs):\n  raise SystemExit(3)\n")
    path = os.path.join(workdir, "config.json")
    config = read_json(path)
    config["dataset"] = "planted:load"
    with open(path, "w") as f:
      json.dump(config, f)
    before = snapshot(workdir)
    line = expect_one_line_error(
        cli("train", "--resume", "--workdir=.", "--epochs=2", cwd=workdir),
        "train")
    if "different run" not in line or "planted:load" not in line:
      raise Failed(f"not the mismatch: {line}")
    if os.path.exists(os.path.join(workdir, "MARKER")):
      raise Failed("the planted module ran")
    expect_unchanged(before, workdir)
    return line[:200]

  # 19j. A checkpoint of an older version (no checksums) still resumes.

  def attack_19j(self):
    """a checkpoint without checksums (an older version's): resumes, saying it is unverified"""
    workdir = self._run("older_version", *SIMULATED)
    path = meta_path(workdir)
    meta = read_json(path)
    del meta["checksums"]
    with open(path, "w") as f:
      json.dump(meta, f)
    result = self._resume(workdir, 2)
    expect_success(result, "the resume")
    said = [l for l in lines_of(result.stderr) if "no checksums" in l]
    if len(said) != 1 or "checkpoint 16 records no checksums" not in said[0]:
      raise Failed(f"does not say checkpoint 16 is unverified: {said}")
    self._expect_commits(workdir, 34)
    return said[0].split("] ")[-1][:200]
