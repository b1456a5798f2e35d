"""A user's dataset, task and model that break their contract end the run in one line naming them, before it trains.

The plug-ins are tests/unsound_plugins.py (and, for a module that exits at
import, one written here). The dataset is checked once, where every loader's
result passes (`agn_jax.data.check_dataset`): numbers, finite, lengths,
and class labels in range for a task that reads classes; the task's loss
once on shapes (`agn_jax.build.check_fit`); the task's own evaluation and
the final metrics where they run; on Ray, each part's data against the
driver's. Expected counts and positions come from the fixture's own
construction, not from the code under test.
"""

import numpy as np
import pytest

from agn_jax import build, data, metrics, names, tasks
from agn_jax.config import TrainConfig
from agn_jax.errors import DataMismatch
from agn_jax.runtime.transports.ray import DatasetByName
from helpers import REPO, assert_one_line_error, run_cli
import unsound_plugins as plugins

PLUGINS = "tests.unsound_plugins"
CLASSIFICATION = "classification"


def _check(loader, classes_for=CLASSIFICATION):
  return data.check_dataset(loader(), f"{PLUGINS}:{loader.__name__}",
                            classes_for)


# --- The dataset ------------------------------------------------------------------


def test_a_sound_dataset_passes_unchanged():
  ds = _check(plugins.sound)
  assert ds.x_train.shape == (plugins.EXAMPLES, plugins.WIDTH)
  np.testing.assert_array_equal(ds.y_test, plugins.sound().y_test)


def test_labels_outside_the_classes_are_named_with_split_value_and_count():
  name = f"{PLUGINS}:out_of_range_labels"
  # Every 7th of the 600: examples 0, 7, ..., 595.
  count = len(range(0, plugins.EXAMPLES, 7))
  with pytest.raises(data.DataError) as e:
    _check(plugins.out_of_range_labels)
  assert str(e.value) == (
      f"dataset {name!r}: {count} of the 600 train labels lie outside "
      "[0, 3) (its num_classes), e.g. 9 (example 0); "
      "--task=classification reads each as one of the model's 3 outputs")
  # A negative one in the test split, its position named.
  ds = plugins.sound()
  y = ds.y_test.copy()
  y[[5, 6]] = -1
  with pytest.raises(data.DataError, match=r"2 of the 100 test labels lie "
                     r"outside \[0, 3\) .*e.g. -1 \(example 5\)"):
    data.check_dataset(ds._replace(y_test=y), "d", CLASSIFICATION)
  # A task that reads no classes (a regression's targets) takes any value.
  assert _check(plugins.out_of_range_labels, None).y_train[0] == 9
  # Which tasks read classes: the built-ins do; a task says so as a bool.
  assert tasks.get_task("classification").class_targets
  assert tasks.get_task("next_token").class_targets
  assert not tasks.get_task(
      "tests.regression_workload:regression").class_targets
  with pytest.raises(ValueError, match="class_targets must be True or False"):
    tasks.Task("t", lambda f: None, class_targets="yes").check()


def test_float_labels_are_refused_for_a_task_of_classes_only():
  with pytest.raises(data.DataError, match=r"dataset '.*:float_labels': the "
                     r"train labels are float32, --task=classification needs "
                     r"integer class labels in \[0, 3\)"):
    _check(plugins.float_labels)
  assert _check(plugins.float_labels, None).y_train.dtype == np.float32


def test_object_arrays_are_one_line_not_a_traceback_from_jax():
  with pytest.raises(data.DataError) as e:
    _check(plugins.object_inputs)
  assert str(e.value) == (
      f"dataset '{PLUGINS}:object_inputs': x_train has dtype object; a run "
      "needs arrays of numbers (bool, integer or float)")
  with pytest.raises(data.DataError, match="y_test has dtype <U1"):
    data.check_dataset(plugins.sound()._replace(
        y_test=np.array(["a"] * 100)), "d")


def test_non_finite_inputs_are_counted_and_the_first_named():
  with pytest.raises(data.DataError) as e:
    _check(plugins.non_finite_inputs, None)
  assert str(e.value) == (
      f"dataset '{PLUGINS}:non_finite_inputs': x_test holds 3 non-finite "
      "values (NaN or infinity), the first in example 4")


def test_inputs_and_targets_of_different_lengths_are_refused():
  ds = plugins.sound()
  with pytest.raises(data.DataError, match="the train split has 600 inputs "
                     "and 599 targets"):
    data.check_dataset(ds._replace(y_train=ds.y_train[1:]), "d")


def test_every_loader_passes_the_check_a_built_in_too(monkeypatch):
  # A plug-in's result, through `load`.
  with pytest.raises(data.DataError, match="86 of the 600 train labels"):
    data.load(f"{PLUGINS}:out_of_range_labels", classes_for=CLASSIFICATION)
  # A built-in loader that went wrong is held to the same check.
  monkeypatch.setitem(data._LOADERS, "digits",  # pylint: disable=protected-access
                      lambda data_dir, size, seed: plugins.object_inputs())
  with pytest.raises(data.DataError, match="dataset 'digits': x_train has "
                     "dtype object"):
    data.load("digits")


# --- Plug-in modules and functions that exit or raise ---------------------------


def test_a_module_that_exits_at_import_is_named(tmp_path, monkeypatch):
  (tmp_path / "exits_at_import.py").write_text(
      "import sys\nsys.exit(3)\n\ndef load():\n  pass\n")
  monkeypatch.syspath_prepend(str(tmp_path))
  with pytest.raises(ValueError) as e:
    names.lookup("dataset", "exits_at_import:load", {})
  assert str(e.value) == ("dataset 'exits_at_import:load' cannot be imported: "
                          "module 'exits_at_import' called sys.exit(3)")
  # A loader that exits when called.
  (tmp_path / "exits_when_called.py").write_text(
      "import sys\n\ndef load():\n  sys.exit('no data')\n")
  with pytest.raises(data.DataError, match=r"^dataset 'exits_when_called:"
                     r"load': its function called sys.exit\('no data'\)$"):
    data.load("exits_when_called:load")


def test_a_task_whose_evaluate_raises_is_named_with_the_function():
  task = tasks.get_task(f"{PLUGINS}:raising_evaluate")
  x, y = np.zeros((2, 3), np.float32), np.zeros(2, np.int32)
  with pytest.raises(ValueError) as e:
    task.evaluation(None, None, x, y)
  assert str(e.value) == (
      "task 'raising_evaluate': its evaluate "
      f"{PLUGINS}:_raising_evaluate raised RuntimeError: the evaluation broke")
  vector = task._replace(evaluate=lambda *a: (np.zeros(()),
                                              {"accuracy": np.ones(2)}))
  with pytest.raises(ValueError, match=r"returned accuracy of shape \(2,\), "
                     "not a scalar"):
    vector.evaluation(None, None, x, y)


# --- The task's loss and the model, on shapes ------------------------------------


def _fit(**names_):
  config = TrainConfig(**dict(dict(dataset=f"{PLUGINS}:sound",
                                   hidden_sizes=(4,)), **names_))
  ds = data.load(config.dataset)
  model, loss_fn = build.build_model(config, ds.num_classes, ds.input_shape)
  build.check_fit(config, model, loss_fn, ds)


@pytest.mark.parametrize("task, message", [
    ("vector_metric", "its loss function tests.unsound_plugins:"
     "_vector_metric_loss returns accuracy of shape (1,) on a batch of one "
     "example, not a scalar"),
    ("vector_loss", "its loss function tests.unsound_plugins:_vector_loss "
     "returns loss of shape (2,) on a batch of one example, not a scalar"),
])
def test_a_loss_or_metric_that_is_no_scalar_is_named_with_its_shape(task,
                                                                    message):
  with pytest.raises(ValueError) as e:
    _fit(task=f"{PLUGINS}:{task}")
  assert str(e.value).startswith(f"--task={PLUGINS}:{task}: {message}")
  _fit()  # The built-in task on the same data fits.


def test_a_model_without_parameters_is_named():
  with pytest.raises(ValueError) as e:
    _fit(model=f"{PLUGINS}:no_parameters")
  assert str(e.value) == (f"--model={PLUGINS}:no_parameters has no "
                          "parameters: NoParameters declares none, so there "
                          "is nothing to train")


# --- The final metrics -------------------------------------------------------------


def test_a_nan_metric_beside_a_finite_loss_is_named_not_called_divergence():
  summary = dict(final_test_loss=1.25, final_test_accuracy=float("nan"),
                 metrics={"accuracy": "max"}, task=f"{PLUGINS}:nan_metric")
  line = metrics.non_finite_final(summary)
  assert line.startswith("the final center's test accuracy is nan while its "
                         "test loss is 1.25: the metric 'accuracy' of "
                         f"--task={PLUGINS}:nan_metric is not finite")
  assert "diverged" not in line
  assert "diverged" in metrics.non_finite_final(
      dict(summary, final_test_loss=float("inf")))
  assert metrics.non_finite_final(dict(summary, final_test_accuracy=0.5)) is None


# --- Ray: every part's data is the driver's -------------------------------------


class _Config:
  dataset, data_dir, dataset_size, seed = (f"{PLUGINS}:sound", None, None, 0)


def test_a_part_that_loads_other_data_than_the_driver_ends_the_run():
  driver = data.fingerprint(data.load(_Config.dataset))
  assert set(DatasetByName(_Config, driver).arrays()) == {
      "x_train", "y_train", "x_test", "y_test"}
  # The fingerprint reads the first and last rows: a change there is seen.
  ds = plugins.sound()
  x = ds.x_test.copy()
  x[-1, 0] += 1.0
  assert data.fingerprint(ds._replace(x_test=x)) != driver
  config = _Config()
  config.dataset = f"{PLUGINS}:non_deterministic"
  with pytest.raises(DataMismatch, match=f"dataset '{PLUGINS}:"
                     "non_deterministic': its loader returned other data "
                     "here than on the driver"):
    DatasetByName(config, data.fingerprint(data.load(config.dataset))).arrays()


# --- The command line ------------------------------------------------------------


def test_the_command_line_ends_a_bad_dataset_in_one_line_leaving_no_workdir(
    tmp_path):
  workdir = tmp_path / "run"
  line = assert_one_line_error(run_cli(
      f"--dataset={PLUGINS}:out_of_range_labels", "--backend=simulated",
      "--num_workers=2", "--communication_window=5", "--epochs=1",
      "--noplots", f"--workdir={workdir}"))
  assert "86 of the 600 train labels lie outside [0, 3)" in line
  assert not workdir.exists()


def test_the_command_line_names_a_module_that_exits_at_import(tmp_path,
                                                              monkeypatch):
  (tmp_path / "exits_at_import.py").write_text("import sys\nsys.exit(3)\n")
  monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{REPO}")
  workdir = tmp_path / "run"
  result = run_cli("--dataset=exits_at_import:load", f"--workdir={workdir}")
  assert result.returncode == 2
  assert assert_one_line_error(result).endswith(
      "module 'exits_at_import' called sys.exit(3)")
  assert not workdir.exists()


def test_the_processes_backend_names_a_vector_metric_before_it_starts(
    tmp_path):
  workdir = tmp_path / "run"
  line = assert_one_line_error(run_cli(
      f"--task={PLUGINS}:vector_metric", f"--dataset={PLUGINS}:sound",
      "--backend=processes", "--num_workers=2", "--communication_window=5",
      "--epochs=1", "--noplots", f"--workdir={workdir}"))
  assert line.endswith("returns accuracy of shape (1,) on a batch of one "
                       "example, not a scalar (a mean over the batch)")
  assert not workdir.exists()
