"""A workload written only in tests/regression_workload.py trains by its import paths, and its task's named metrics reach rows, summary, TensorBoard and E, all checked against numpy.

The workload (bag-of-tokens regression, a squared-error loss, the metrics
`mae` and `hit_rate`) is no part of agn_jax: each run names its task, model
and dataset by where they live, and every process of the run imports them
from there. A run's final center is checked against a numpy replay of the
run's own commit order (worker, and the clock of the center it started
from, from metrics.jsonl), and so is every commit row's loss and metrics
(each the mean over the window's local steps) and the final evaluation.
The model is linear regression on the tokens' counts, differentiated by
hand here; each local step takes the worker's whole shard, so a step does
not depend on the order its examples were drawn in. The runs themselves are
tests/e2e/test_workloads_e2e.py (the simulator, the loops as threads, real
processes) and tests/e2e/test_ray_backend.py (Ray); `check_run` here is what
each is held to.
"""

import dataclasses
import json
import os
import re

from absl import flags
import jax.numpy as jnp
import numpy as np
import pytest

from agn_jax import build, data, metrics, models, tasks
from agn_jax.config import SimulatedOptions, TrainConfig
from agn_jax.runtime import train
from agn_jax.shares import shard_bounds
from agn_jax.sim.progress import Progress
from experiments import compare
from experiments import flags as flags_lib
from helpers import REPO, assert_one_line_error, metrics_rows, train_here

TASK = "tests.regression_workload:regression"
MODEL = "tests.regression_workload:bag_of_tokens"
DATASET = "tests.regression_workload:load"
VOCAB, LENGTH = 12, 5  # tests/regression_workload.py's.
EXAMPLES, WINDOW, WINDOWS, LR = 24, 3, 4, 0.05
NAMED = {"mae": "min", "hit_rate": "max"}


def workload_config(workdir, backend, num_workers, **settings):
  """The workload's run: downpour with plain SGD workers, each step a worker's whole shard."""
  options = (SimulatedOptions(eval_every_rounds=0) if backend == "simulated"
             else None)
  return TrainConfig(**dict(dict(
      task=TASK, model=MODEL, dataset=DATASET, dataset_size=EXAMPLES,
      strategy="downpour", worker_optimizer="sgd", learning_rate=LR,
      num_workers=num_workers, communication_window=WINDOW,
      batch_size=EXAMPLES // num_workers, epochs=float(WINDOW * WINDOWS),
      eval_every_seconds=0.0, checkpoints=False, workdir=str(workdir),
      backend=backend, options=options), **settings))


def _counts(tokens):
  """`[N, VOCAB]`: how often each token occurs in each sequence."""
  out = np.zeros((len(tokens), VOCAB))
  np.add.at(out, (np.repeat(np.arange(len(tokens)), LENGTH),
                  np.asarray(tokens).reshape(-1)), 1.0)
  return out


def _values(theta, counts, y):
  """`(loss, mae, hit_rate)` of the flat parameters `theta` (the embedding, then the bias)."""
  error = counts @ theta[:VOCAB] + theta[VOCAB] - y
  return (np.mean(error ** 2), np.mean(np.abs(error)),
          np.mean(np.abs(error) <= 0.5))


def _grad(theta, counts, y):
  """The gradient of the mean squared error, by hand."""
  g = 2.0 * (counts @ theta[:VOCAB] + theta[VOCAB] - y) / len(y)
  return np.append(counts.T @ g, g.sum())


def check_run(config, workdir):
  """The run in `workdir` against the numpy replay of its commits: center, commit rows, final evaluation, summary.

  Returns:
    The commit rows, in the server's order.
  """
  ds = data.load(DATASET, size=EXAMPLES, seed=config.seed)
  model = models.create_model(MODEL, ds.num_classes, ds.input_shape)
  initial = build.initial_center(config, model, data.example_of(ds.x_train))
  # The flat layout: the embedding's [VOCAB, 1] leaf, then the bias.
  assert sorted(initial["params"]) == ["Embed_0", "bias"]
  theta = np.append(initial["params"]["Embed_0"]["embedding"][:, 0],
                    initial["params"]["bias"]).astype(np.float64)
  rows = sorted(metrics_rows(workdir, ("commit",)),
                key=lambda row: row["clock"])
  n = config.num_workers
  assert [row["clock"] for row in rows] == list(range(1, n * WINDOWS + 1))
  centers = [theta]
  # A hit is |error| <= 0.5: float32 may flip an example at the edge.
  hit = 1.0 / (EXAMPLES // n) + 1e-6
  for row in rows:
    start = centers[row["clock"] - 1 - row["staleness"]]
    lo, hi = shard_bounds(EXAMPLES, n, row["worker"])
    counts, y = _counts(ds.x_train[lo:hi]), ds.y_train[lo:hi].astype(
        np.float64)
    params, steps = start, []
    for _ in range(WINDOW):
      steps.append(_values(params, counts, y))
      params = params - LR * _grad(params, counts, y)
    centers.append(centers[-1] + (params - start))  # DOWNPOUR adds it.
    loss, mae, hit_rate = np.mean(steps, axis=0)
    # The task's metrics by name, no accuracy; E's every step.
    assert "accuracy" not in row and "step_accuracy" not in row
    assert row["loss"] == pytest.approx(loss, rel=1e-4)
    assert row["mae"] == pytest.approx(mae, rel=1e-4)
    assert abs(row["hit_rate"] - hit_rate) <= hit
    np.testing.assert_allclose(row["step_mae"], [s[1] for s in steps],
                               rtol=1e-4)
  center = np.load(os.path.join(workdir, "center.npy"))
  np.testing.assert_allclose(center, centers[-1], rtol=2e-4, atol=2e-5)
  # The replay can fail: training moved the center well away from the start.
  assert np.abs(centers[-1] - theta).max() > 100 * 2e-4
  # The final evaluation, of the center the run ended with, on the test set.
  loss, mae, hit_rate = _values(center.astype(np.float64),
                                _counts(ds.x_test), ds.y_test)
  (final,) = [r for r in metrics_rows(workdir, ("eval",)) if r["final"]]
  assert "accuracy" not in final
  with open(os.path.join(workdir, "summary.json")) as f:
    summary = json.load(f)
  assert (summary["task"], summary["metrics"], summary["efficiency_metric"]
          ) == (TASK, NAMED, "mae")
  assert "final_test_accuracy" not in summary
  for key, value in (("loss", loss), ("mae", mae)):
    assert final[key] == summary[f"final_test_{key}"] == pytest.approx(
        value, rel=1e-5)
  assert abs(summary["final_test_hit_rate"] - hit_rate) <= 1 / len(
      ds.y_test) + 1e-6
  assert summary["final_test_mae"] < _values(theta, _counts(ds.x_test),
                                             ds.y_test)[1]  # It learned.
  return rows


# --- The names ------------------------------------------------------------------


def test_the_workload_is_named_by_import_paths_not_registered():
  assert TASK not in tasks.TASKS and MODEL not in models.MODELS
  assert DATASET not in data.DATASETS
  task = tasks.get_task(TASK)
  assert (task.name, task.metric_names(), task.efficiency_metric) == (
      "regression", ("hit_rate", "mae"), "mae")
  assert task.goals() == NAMED and not task.higher_is_better("mae")
  ds = data.load(DATASET, "/nowhere", size=EXAMPLES, seed=3)
  assert (ds.x_train.shape, ds.x_train.dtype, ds.y_train.dtype) == (
      (EXAMPLES, LENGTH), np.int32, np.float32)
  assert data.example_of(ds.x_train) == data.Example((LENGTH,), "<i4")
  model = models.create_model(MODEL, ds.num_classes, ds.input_shape)
  assert type(model).__name__ == "BagOfTokens"
  config = TrainConfig(task=TASK, model=MODEL, dataset=DATASET).validate()
  assert (config.task, config.model, config.dataset) == (TASK, MODEL, DATASET)
  # The command line takes them by the same names.
  values = flags.FlagValues()
  flags_lib.define_train_flags(values)
  values(["train", f"--task={TASK}", f"--model={MODEL}",
          f"--dataset={DATASET}"])
  assert (values.task, values.model, values.dataset) == (TASK, MODEL, DATASET)
  for flag in ("task", "model", "dataset"):
    with pytest.raises(flags.IllegalFlagValueError,
                       match=f"unknown {flag} 'nope'.*package.module"):
      values(["train", f"--{flag}=nope"])


@pytest.mark.parametrize("settings, message", [
    (dict(task="tests.no_such_module:regression"),
     "task 'tests.no_such_module:regression' cannot be imported: No module "
     "named 'tests.no_such_module'"),
    (dict(task="tests.regression_workload:no_such_function"),
     "task 'tests.regression_workload:no_such_function' cannot be imported: "
     "module 'tests.regression_workload' has no attribute"),
    (dict(task=MODEL), f"task '{MODEL}': its factory returned a BagOfTokens, "
     "not a Task"),
    (dict(task="json:loads"), "task 'json:loads': its function raised "
     "TypeError: loads() missing 1 required positional argument"),
    (dict(dataset="cifar"), "unknown dataset 'cifar'; available: digits, "
     "mnist, mnist1d, mnist5k, shakespeare, synthetic, or "
     "package.module:function"),
    (dict(model="tests.regression_workload:VOCAB"),
     "unknown model 'tests.regression_workload:VOCAB'"),
    (dict(task=TASK, model=MODEL, dataset=DATASET, backend="simulated",
          options=SimulatedOptions(cluster="this_host")),
     "--cluster=this_host measures this package's classifiers, not "
     f"--task={TASK}, --model={MODEL}, --dataset={DATASET}"),
    (dict(task="next_token", model="transformer", dataset="shakespeare",
          backend="simulated", options=SimulatedOptions(cluster="this_host")),
     "--cluster=this_host measures this package's classifiers, not "
     "--task=next_token, --model=transformer: "),
])
def test_a_bad_name_is_one_line_before_anything_starts(settings, message):
  with pytest.raises(ValueError) as e:
    TrainConfig(**settings).validate()
  assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_the_command_line_refuses_a_bad_name_in_one_line(monkeypatch, capsys):
  line = assert_one_line_error(train_here(monkeypatch, capsys,
                                          f"--task={MODEL}"))
  assert f"its factory returned a BagOfTokens, not a Task" in line


def test_parts_that_are_not_what_they_are_named_for_are_refused(tmp_path):
  # A loader that returns no Dataset, a factory that returns no module.
  with pytest.raises(data.DataError, match="its loader returned a Task, not "
                     "an agn_jax.data.Dataset"):
    data.load(TASK)
  with pytest.raises(ValueError, match="its factory returned a Dataset, not a "
                     "flax Module"):
    models.create_model(DATASET, 1, (LENGTH,))
  # Nor a function that is no loader, nor factory: what it raised, one line.
  with pytest.raises(data.DataError, match=r"dataset 'json:loads': its "
                     r"function raised TypeError: loads\(\) missing"):
    data.load("json:loads")
  with pytest.raises(ValueError, match=r"model 'json:loads': its function "
                     r"raised TypeError"):
    models.create_model("json:loads", 1, (LENGTH,))
  config = dataclasses.replace(workload_config(tmp_path / "run", "simulated",
                                               2), task=MISLABELLED)
  # Whichever reports first, its evaluation or its loss.
  with pytest.raises(ValueError, match=r"task 'mislabelled': its "
                     r"(evaluation|loss) reports the metrics \['hit_rate', "
                     r"'mae'\], the task declares \['mae'\]"):
    train(config)


@pytest.mark.parametrize("metric, message", [
    (tasks.Metric("loss"), "metric name 'loss' cannot be a field"),
    (tasks.Metric("clock"), "metric name 'clock' cannot be a field"),
    (tasks.Metric("step_mae"), "metric name 'step_mae' cannot be a field"),
    (tasks.Metric("Mae"), "metric name 'Mae' cannot be a field"),
])
def test_a_task_whose_metrics_cannot_be_row_fields_is_refused(metric,
                                                                message):
  with pytest.raises(ValueError, match=message):
    tasks.Task("t", lambda apply_fn: None, (metric,), "loss").check()


def test_a_task_checks_its_efficiency_metric_and_names_once():
  mae = tasks.Metric("mae", higher_is_better=False)
  with pytest.raises(ValueError, match="efficiency_metric 'accuracy' is none "
                     "of its metrics"):
    tasks.Task("t", lambda f: None, (mae,), "accuracy").check()
  with pytest.raises(ValueError, match="names metric 'mae' twice"):
    tasks.Task("t", lambda f: None, (mae, mae), "mae").check()
  assert tasks.Task("t", lambda f: None).check().metric_names() == ()


def test_the_row_fields_a_metric_cannot_take_are_every_row_field():
  from agn_jax.runtime import events as ev  # pylint: disable=g-import-not-at-top
  rows = set(ev.COMMIT_ROW) | set(ev.EVAL_ROW) | {"event", "wall_time",
                                                    "expected_commits"}
  assert rows - {"loss"} <= tasks.RESERVED


def mislabelled():
  """The workload's task declaring one metric fewer than its loss reports (a task factory for the test above)."""
  return tasks.Task("mislabelled", tasks.get_task(TASK).loss,
                    (tasks.Metric("mae", higher_is_better=False),), "mae")


MISLABELLED = "test_workloads:mislabelled"


# --- The evaluation and E ---------------------------------------------------------


def test_an_evaluation_without_its_own_is_the_mean_over_examples():
  # Batches of 3 over 7 examples: two whole ones and a rest of 1.
  x = np.arange(7.0)
  y = np.array([0.0, 1.0, 1.0, 5.0, 2.0, 9.0, 4.0])

  def loss_fn(w, batch):
    error = batch[0] * w - batch[1]
    return jnp.mean(error ** 2), {"mae": jnp.mean(jnp.abs(error))}

  loss, values = tasks.mean_over_batches(loss_fn, 2.0, x, y, batch_size=3)
  error = 2.0 * x - y  # [0, 1, 3, 1, 6, 1, 8]
  assert loss == pytest.approx(np.mean(error ** 2))  # 112 / 7 = 16
  assert values == {"mae": pytest.approx(20 / 7)}
  task = tasks.Task("t", lambda f: loss_fn, (tasks.Metric("mae", False),),
                    "mae")
  assert task.evaluation(None, 2.0, x, y, batch_size=3) == (
      pytest.approx(16.0), {"mae": pytest.approx(20 / 7)})


def test_e_on_a_metric_lower_is_better_favours_the_lower_curve(tmp_path):
  def run(name, maes):
    directory = tmp_path / name
    directory.mkdir()
    lines = [{"event": "eval", "time": t, "wall_time": t + 1.0, "clock": i,
              "loss": 2 * m, "mae": m, "hit_rate": 0.5, "final": False}
             for i, (t, m) in enumerate(maes)]
    (directory / "metrics.jsonl").write_text(
        "".join(json.dumps(line) + "\n" for line in lines))
    (directory / "summary.json").write_text(json.dumps(
        {"metrics": NAMED, "efficiency_metric": "mae",
         "final_test_mae": maes[-1][1]}))
    return compare.read_run(str(directory))

  a = run("a", [(0.0, 2.0), (2.0, 1.0)])  # ∫ = 3 over [0, 2].
  b = run("b", [(0.0, 2.0), (2.0, 2.0)])  # ∫ = 4.
  e = compare.efficiency(a, b)
  assert (e["metric"], e["test"]) == ("mae", pytest.approx(4 / 3))
  assert compare.efficiency(b, a)["test"] == pytest.approx(3 / 4)
  assert metrics.temporal_efficiency(
      [0, 2], [2, 1], [0, 2], [2, 2], higher_is_better=False) == 4 / 3
  # On the loss (also lower-is-better) the same; no accuracy to read.
  assert compare.efficiency(a, b, metric="loss")["test"] == pytest.approx(
      4 / 3)
  assert compare.efficiency(a, b, metric="accuracy")["test"] is None
  assert compare.final_metric(a) == 1.0
  assert "test mae" in compare.comparison_table([a, b])


# --- Runs -------------------------------------------------------------------------


def test_a_checkpoint_written_before_tasks_had_names_restores_its_windows():
  old = {"round": 3, "num_commits": 5, "rejected_commits": 0,
         "simulated_time": 6.0, "windows_done": [2, 3], "windows_run": [3, 3],
         "pending": [[0.5, 0.75, [0.5, 1.0], 2, 2], None],
         "rejected_in_a_row": [0, 0]}
  progress = Progress.from_meta(old, communication_window=2)
  assert progress.pending[0].metrics == {"accuracy": 0.75}
  assert progress.pending[0].step_metrics == {"accuracy": (0.5, 1.0)}
  # The form written now reads back as it was.
  assert Progress.from_meta(progress.to_meta(), 2) == progress


def test_the_docs_example_is_this_workload():
  with open(REPO / "docs" / "workloads.md", encoding="utf-8") as f:
    blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
  source = (REPO / "tests" / "regression_workload.py").read_text()
  assert source.split('"""\n\n', 1)[1] == blocks[0]
