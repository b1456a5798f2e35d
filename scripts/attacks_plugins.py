"""Attacks 20. Round five: a user's dataset, task and model that break their contract.

Mixed into `attacks.Attacks`; each `attack_*` method raises `Failed` or
returns a note. See attacks.py for how they run. The plug-ins are
tests/unsound_plugins.py's, named by import path as a user names theirs
(the repository is on every command's PYTHONPATH); the module that exits
at import is written here.
"""

# pylint: disable=wildcard-import,unused-wildcard-import
from attacklib import *

PLUGINS = "tests.unsound_plugins"
SIMULATED = ["--backend=simulated", "--num_workers=2",
             "--communication_window=5", "--epochs=1", "--noplots"]
PROCESSES = ["--backend=processes", "--num_workers=2",
             "--communication_window=5", "--epochs=1", "--noplots",
             "--eval_every_seconds=0"]


class PluginAttacks:
  """Plug-ins that break their contract: one line naming them."""

  def _ends_in_one_line(self, name, part, *naming, backend=SIMULATED) -> str:
    """The train CLI with the plug-in `part` ends in one line naming each of `naming`, exit 1, leaving no workdir.

    `part` is a flag naming a plug-in; the data is the fixture's sound set
    unless `part` names other (the last of a flag's values wins).
    """
    workdir = self.path(name)
    result = cli("train", *backend, f"--dataset={PLUGINS}:sound", part,
                 f"--workdir={workdir}")
    line = expect_one_line_error(result, "train")
    if result.rc != 1:
      raise Failed(f"exit {result.rc}, not 1: {line}")
    missing = [n for n in naming if n not in line]
    if missing:
      raise Failed(f"does not name {', '.join(missing)}: {line}")
    if os.path.lexists(workdir):
      raise Failed(f"left {workdir} behind: {os.listdir(workdir)[:4]}")
    return line[:200]

  # 20a-c. The dataset is checked against its task once, at load.

  def attack_20a(self):
    """labels outside num_classes (every 7th is 9 of 3 classes): refused at load, naming dataset, split, value, count"""
    return self._ends_in_one_line(
        "labels_9_of_3", f"--dataset={PLUGINS}:out_of_range_labels",
        f"{PLUGINS}:out_of_range_labels", "86 of the 600", "train labels",
        "e.g. 9", "[0, 3)")

  def attack_20b(self):
    """float labels under --task=classification: refused, not truncated"""
    return self._ends_in_one_line(
        "float_labels", f"--dataset={PLUGINS}:float_labels",
        f"{PLUGINS}:float_labels", "float32", "integer class labels")

  def attack_20c(self):
    """a dataset of dtype=object: one line, not a traceback from JAX"""
    return self._ends_in_one_line(
        "object_inputs", f"--dataset={PLUGINS}:object_inputs",
        f"{PLUGINS}:object_inputs", "x_train", "dtype object")

  # 20d-e. The task's loss on shapes, before training, on every backend.

  def attack_20d(self):
    """a task whose metric is a vector, simulated: one line naming the function and the shape"""
    return self._ends_in_one_line(
        "vector_metric_sim", f"--task={PLUGINS}:vector_metric",
        f"{PLUGINS}:_vector_metric_loss", "accuracy of shape (1,)")

  def attack_20e(self):
    """a task whose loss is a vector, processes: one whole line before any worker starts"""
    return self._ends_in_one_line(
        "vector_loss_processes", f"--task={PLUGINS}:vector_loss",
        f"{PLUGINS}:_vector_loss", "loss of shape (2,)", "not a scalar",
        backend=PROCESSES)

  # 20f-g. A module that exits at import; a model with nothing to train.

  def attack_20f(self):
    """a plug-in module that calls sys.exit(3) at import: exit 2 naming the module"""
    directory = self.path("exiting_plugin")
    os.makedirs(directory)
    with open(os.path.join(directory, "exits_at_import.py"), "w") as f:
      f.write("import sys\nsys.exit(3)\n")
    workdir = self.path("exits_run")
    result = cli("train", "--dataset=exits_at_import:load", *SIMULATED,
                 f"--workdir={workdir}", env={"PYTHONPATH": directory})
    line = expect_exit_2_naming(result, "train", "--dataset",
                                "module 'exits_at_import' called sys.exit(3)")
    if os.path.lexists(workdir):
      raise Failed(f"left {workdir} behind")
    return line

  def attack_20g(self):
    """a model with no parameters: named, saying it has none"""
    return self._ends_in_one_line(
        "no_parameters", f"--model={PLUGINS}:no_parameters",
        f"--model={PLUGINS}:no_parameters", "has no parameters")

  # 20h-j. Failures once the run has started: the run's own, summary.json says so.

  def _run_fails(self, name, part, *naming, backend=SIMULATED) -> str:
    """The train CLI with the plug-in `part` fails in one line naming each of `naming`; summary.json says failed, naming the first."""
    workdir = self.path(name)
    self.workdirs.append(workdir)
    result = cli("train", *backend, f"--dataset={PLUGINS}:sound", part,
                 f"--workdir={workdir}")
    line = expect_one_line_error(result, "train")
    missing = [n for n in naming if n not in line]
    if missing:
      raise Failed(f"does not name {', '.join(missing)}: {line}")
    expect_outcome(workdir, "failed", naming[0])
    return line[:200]

  def attack_20h(self):
    """a NaN metric beside a finite loss: the metric named, not called divergence"""
    line = self._run_fails("nan_metric", f"--task={PLUGINS}:nan_metric",
                           "metric 'accuracy'", f"--task={PLUGINS}:nan_metric")
    if "diverged" in line:
      raise Failed(line)
    return line

  def attack_20i(self):
    """a task whose evaluate raises, processes: one line naming the task and its function"""
    return self._run_fails(
        "raising_evaluate", f"--task={PLUGINS}:raising_evaluate",
        f"{PLUGINS}:_raising_evaluate", "task 'raising_evaluate'",
        "RuntimeError: the evaluation broke", backend=PROCESSES)

  def attack_20j(self):
    """a loader that returns other data on each call, on Ray: one line naming it"""
    return self._run_fails(
        "ray_non_deterministic", f"--dataset={PLUGINS}:non_deterministic",
        "other data here than on the driver",
        f"dataset '{PLUGINS}:non_deterministic'", backend=RAY + ["--epochs=1"])

  # 20k. Inputs that are not finite.

  def attack_20k(self):
    """NaN and infinite inputs: refused at load, counted, the first named"""
    return self._ends_in_one_line(
        "non_finite_inputs", f"--dataset={PLUGINS}:non_finite_inputs",
        f"{PLUGINS}:non_finite_inputs", "x_test", "3 non-finite", "example 4")
