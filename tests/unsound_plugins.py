"""Plug-ins that break their contract, as a user's might: the fixture of tests/unit/test_plugin_checks.py and tests/e2e/test_ray_backend.py.

Each is named by its import path (`--dataset=tests.unsound_plugins:
out_of_range_labels`, ...) and each must end a run before it trains, or at
its first evaluation, in one line naming it (docs/workloads.md, "What a run
checks"). The data is `EXAMPLES` training and 100 test examples of `WIDTH`
float32 features in `CLASSES` classes, a classification set the built-in
`mlp` and `classification` task take.
"""

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from agn_jax import data, models, tasks

EXAMPLES, WIDTH, CLASSES = 600, 8, 3


def sound(seed=0) -> data.Dataset:
  """The data every loader below spoils one way: a sound classification set."""
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(EXAMPLES + 100, WIDTH)).astype(np.float32)
  y = rng.integers(0, CLASSES, EXAMPLES + 100).astype(np.int32)
  return data.Dataset(x[:EXAMPLES], y[:EXAMPLES], x[EXAMPLES:], y[EXAMPLES:],
                      CLASSES, (WIDTH,), "sound")


def out_of_range_labels(seed=0) -> data.Dataset:
  """Every 7th training label is 9, outside the 3 classes (the model's outputs)."""
  ds = sound(seed)
  y = ds.y_train.copy()
  y[::7] = 9
  return ds._replace(y_train=y)


def float_labels(seed=0) -> data.Dataset:
  """Labels as floats, 0.5 above the classes: truncated to the class below if trained on."""
  ds = sound(seed)
  return ds._replace(y_train=ds.y_train.astype(np.float32) + 0.5)


def object_inputs(seed=0) -> data.Dataset:
  """Training inputs of `dtype=object`."""
  ds = sound(seed)
  return ds._replace(x_train=ds.x_train.astype(object))


def non_finite_inputs(seed=0) -> data.Dataset:
  """Two NaNs and an infinity among the test inputs, in examples 4 and 9."""
  ds = sound(seed)
  x = ds.x_test.copy()
  x[4, :2] = np.nan
  x[9, 3] = np.inf
  return ds._replace(x_test=x)


def non_deterministic(seed=0) -> data.Dataset:
  """Other data on every call: it ignores its seed."""
  del seed
  return sound(int(np.random.default_rng().integers(1 << 30)))


def _vector_metric_loss(apply_fn):
  classify = models.classification_loss(apply_fn)

  def loss_fn(params, batch):
    loss, _ = classify(params, batch)
    # Per example, not the batch's mean.
    hits = jnp.argmax(apply_fn(params, batch[0]), -1) == batch[1]
    return loss, {"accuracy": hits.astype(jnp.float32)}

  return loss_fn


def vector_metric() -> tasks.Task:
  """A task whose metric is a vector (one value per example)."""
  return tasks.Task("vector_metric", _vector_metric_loss,
                    (tasks.Metric("accuracy"),), "accuracy")


def _vector_loss(apply_fn):
  classify = models.classification_loss(apply_fn)

  def loss_fn(params, batch):
    loss, values = classify(params, batch)
    return jnp.stack([loss, 2 * loss]), values

  return loss_fn


def vector_loss() -> tasks.Task:
  """A task whose loss is a vector of two."""
  return tasks.Task("vector_loss", _vector_loss, (tasks.Metric("accuracy"),),
                    "accuracy")


def _raising_evaluate(apply_fn, params, x, y):
  raise RuntimeError("the evaluation broke")


def raising_evaluate() -> tasks.Task:
  """Classification with an `evaluate` of its own that raises."""
  return tasks.classification()._replace(name="raising_evaluate",
                                         evaluate=_raising_evaluate)


def _nan_metric_loss(apply_fn):
  classify = models.classification_loss(apply_fn)

  def loss_fn(params, batch):
    loss, values = classify(params, batch)
    return loss, {"accuracy": values["accuracy"] * jnp.nan}

  return loss_fn


def nan_metric() -> tasks.Task:
  """A finite loss beside a metric that is always NaN."""
  return tasks.Task("nan_metric", _nan_metric_loss, (tasks.Metric("accuracy"),),
                    "accuracy")


class NoParameters(nn.Module):
  """The first `num_classes` features as the logits: nothing to learn."""
  num_classes: int

  def __call__(self, x):
    return x[:, :self.num_classes]


def no_parameters(num_classes) -> nn.Module:
  """A model without parameters."""
  return NoParameters(num_classes)
