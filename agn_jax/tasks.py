"""Tasks by name: what a model is trained for, and how it is measured.

A run's workload has three named parts, each a built-in or a function
written outside this package (`agn_jax.names`):

* the data, `--dataset` (`agn_jax.data.load`): a loader returning a
  `Dataset`;
* the model, `--model` (`agn_jax.models.create_model`): a flax module
  factory;
* the task, `--task` (here): the loss the workers minimize and the named
  metrics it reports beside it, how a whole split is evaluated, and which
  metric temporal efficiency E reads by default.

The built-in tasks are `classification` (softmax cross-entropy, accuracy),
what every run trained for before tasks had names, and `next_token`
(a language model's next-token cross-entropy; accuracy and bits per byte,
E's). A task written elsewhere
is a function of no arguments returning a `Task`, named
`package.module:function`.

Module level imports no JAX: the launcher checks a config's names before
placement.

Example:
  >>> task = get_task("classification")
  >>> task.metric_names(), task.efficiency_metric
  (('accuracy',), 'accuracy')
"""

import functools
import re
from typing import Any, Callable, Dict, NamedTuple, Optional, Tuple

import numpy as np

from agn_jax import names

Params = Any
ApplyFn = Callable[..., Any]
# `loss_fn(params, (x, y)) -> (loss, {metric: value})`, what the kernel takes.
LossFn = Callable[[Params, Any], Tuple[Any, Dict[str, Any]]]
# `evaluate(apply_fn, params, x, y) -> (loss, {metric: value})` over a split.
Evaluate = Callable[..., Tuple[float, Dict[str, float]]]

LOSS = "loss"
# A metric's name is a field of metrics.jsonl's commit and eval rows (and
# `final_test_<name>` of summary.json): none of the fields rows have already
# (tests/unit/test_workloads.py checks this set against the rows').
RESERVED = frozenset((
    "event", "time", "wall_time", "sim_time", "worker", "clock", "staleness",
    "final", "window_start", "window_end", "sim_window_start",
    "sim_window_end", "local_updates", "expected_commits", "commit_norm",
    "distance_staleness", "cosine_previous_commit", "cosine_center_movement",
    "center_step_norm", "implicit_momentum", "gradient_cosine"))
_NAME = re.compile(r"[a-z][a-z0-9_]*\Z")


class Metric(NamedTuple):
  """One named metric a task's loss and evaluation report beside the loss.

  Attributes:
    name: its name: a lowercase identifier; the field of metrics.jsonl's
      rows that holds it, as `accuracy` does.
    higher_is_better: its direction (accuracy: True; an error: False).
      Temporal efficiency on it keeps `E > 1` meaning "run a did better":
      on a metric lower-is-better it is `∫f_b / ∫f_a`
      (`agn_jax.metrics.temporal_efficiency`).
  """
  name: str
  higher_is_better: bool = True


class Task(NamedTuple):
  """What a model is trained for: its loss, named metrics and evaluation.

  Attributes:
    name: what rows and summaries call it (the registered name, or the
      function's).
    loss: `loss(apply_fn) -> loss_fn`, with `loss_fn(params, (x, y)) ->
      (loss, {metric: value})` a scalar loss to minimize and a dict of
      scalars with exactly the names of `metrics`, means over the batch
      (`agn_jax.models.classification_loss` is classification's). The
      workers' kernel differentiates it; each window's rows carry the
      means of the loss and of every metric over its local steps.
    metrics: the `Metric`s beside the loss, in the order summaries list
      them; rows carry them by name.
    efficiency_metric: what temporal efficiency E and the progress bar read
      by default: `"loss"` or one of `metrics`' names. Its value at every
      local step is kept in each commit's row (`step_<name>`, the thesis'
      E train curve).
    evaluate: `evaluate(apply_fn, params, x, y) -> (loss, {metric: value})`
      over a whole split, as floats; None: `mean_over_batches` of
      `loss(apply_fn)`, which is exact for metrics that are means over
      examples.
    class_targets: whether the loss reads the targets as class indices
      (classification's labels, next_token's tokens): every split's are
      then checked at load to be integers in `[0, num_classes)`
      (`agn_jax.data.check_dataset`). False: targets of any value.

  Example:
    >>> import jax.numpy as jnp
    >>> def squared(apply_fn):
    ...   def loss_fn(params, batch):
    ...     error = apply_fn(params, batch[0]) - batch[1]
    ...     return jnp.mean(error ** 2), {"mae": jnp.mean(jnp.abs(error))}
    ...   return loss_fn
    >>> task = Task("squared", squared, (Metric("mae", False),), "mae").check()
    >>> task.higher_is_better("mae"), task.higher_is_better("loss")
    (False, False)
  """
  name: str
  loss: Callable[[ApplyFn], LossFn]
  metrics: Tuple[Metric, ...] = ()
  efficiency_metric: str = LOSS
  evaluate: Optional[Evaluate] = None
  class_targets: bool = False

  def metric_names(self) -> Tuple[str, ...]:
    """The names of `metrics`, sorted: the order rows and transports carry them in (a jitted dict's)."""
    return tuple(sorted(m.name for m in self.metrics))

  def higher_is_better(self, name: str) -> bool:
    """The direction of metric `name` (the loss: lower is better)."""
    for m in self.metrics:
      if m.name == name:
        return bool(m.higher_is_better)
    if name == LOSS:
      return False
    raise ValueError(f"task {self.name!r} has no metric {name!r}; it has "
                     f"{', '.join((LOSS,) + self.metric_names())}")

  def goals(self) -> Dict[str, str]:
    """`{name: "max" or "min"}` of every metric, as summary.json records them."""
    return {m.name: "max" if m.higher_is_better else "min"
            for m in self.metrics}

  def check(self) -> "Task":
    """Returns the task if its fields fit together; raises `ValueError` (one line) otherwise."""
    if not isinstance(self.name, str) or not self.name:
      raise ValueError(f"a task's name must be a non-empty string, got "
                       f"{self.name!r}")
    if not callable(self.loss):
      raise ValueError(f"task {self.name!r}: loss must be a function of the "
                       f"model's apply_fn, got {self.loss!r}")
    if self.evaluate is not None and not callable(self.evaluate):
      raise ValueError(f"task {self.name!r}: evaluate must be a function or "
                       f"None, got {self.evaluate!r}")
    if not isinstance(self.class_targets, bool):
      raise ValueError(f"task {self.name!r}: class_targets must be True or "
                       f"False, got {self.class_targets!r}")
    seen = set()
    for m in self.metrics:
      if not isinstance(m, Metric):
        raise ValueError(f"task {self.name!r}: each metric must be a Metric, "
                         f"got {m!r}")
      if (not isinstance(m.name, str) or not _NAME.match(m.name) or
          m.name == LOSS or m.name.startswith("step_") or
          m.name in RESERVED):
        raise ValueError(
            f"task {self.name!r}: metric name {m.name!r} cannot be a field "
            "of metrics.jsonl's rows: use a lowercase identifier other than "
            f"loss, step_*, {', '.join(sorted(RESERVED))}")
      if m.name in seen:
        raise ValueError(f"task {self.name!r} names metric {m.name!r} twice")
      seen.add(m.name)
    if self.efficiency_metric != LOSS and self.efficiency_metric not in seen:
      raise ValueError(
          f"task {self.name!r}: efficiency_metric {self.efficiency_metric!r} "
          f"is none of its metrics ({', '.join((LOSS,) + self.metric_names())})")
    return self

  def check_reported(self, reported, where: str) -> None:
    """Raises `ValueError` (one line) unless `reported` names exactly this task's metrics.

    Args:
      reported: the metric names a loss or an evaluation returned.
      where: what returned them, for the message.
    """
    got = tuple(sorted(reported))
    if got != self.metric_names():
      raise ValueError(
          f"task {self.name!r}: its {where} reports the metrics "
          f"{list(got)}, the task declares {list(self.metric_names())}")

  def evaluation(self, apply_fn: ApplyFn, params, x, y,
                 batch_size: int = 1000) -> Tuple[float, Dict[str, float]]:
    """`(loss, {metric: value})` of `params` over a whole split (`evaluate`, or `mean_over_batches`).

    Raises:
      ValueError: one line: the evaluation reports other metrics than the
        task declares, or a task's own `evaluate` raised or returned
        values that are not scalars (naming the task and the function).
    """
    if self.evaluate is None:
      loss, values = mean_over_batches(loss_of(self.loss, apply_fn), params,
                                       x, y, batch_size)
    else:
      loss, values = self._own_evaluation(apply_fn, params, x, y)
    self.check_reported(values, "evaluation")
    return float(loss), {k: float(v) for k, v in values.items()}

  def _own_evaluation(self, apply_fn: ApplyFn, params, x, y):
    """`evaluate`'s `(loss, {metric: value})`; `ValueError` naming the task and the function if it raises or returns no scalars."""
    said = f"task {self.name!r}: its evaluate {names.where(self.evaluate)}"
    try:
      loss, values = self.evaluate(apply_fn, params, x, y)
    except Exception as e:  # pylint: disable=broad-except
      raise ValueError(f"{said} {names.what_raised(e)}") from e
    if not isinstance(values, dict):
      raise ValueError(f"{said} returned {type(values).__name__} metrics, "
                       "not a dict {name: value}")
    for key, value in {LOSS: loss, **values}.items():
      if np.ndim(value):
        raise ValueError(f"{said} returned {key} of shape "
                         f"{np.shape(value)}, not a scalar")
    return loss, values


# Bounded: an evaluator asks for the same few again and again (one model's
# apply, one task's loss), so each evaluation reuses one compiled program.
@functools.lru_cache(maxsize=32)
def loss_of(make_loss: Callable[[ApplyFn], LossFn],
            apply_fn: ApplyFn) -> LossFn:
  """`make_loss(apply_fn)`, one function per pair: what `mean_over_batches` compiles once."""
  return make_loss(apply_fn)


@functools.lru_cache(maxsize=32)
def _jitted_sums(loss_fn):
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top

  @jax.jit
  def sums(params, xs, ys):
    """Sums over `[num_batches, batch, ...]` of each batch's loss and metrics times its size."""

    def one_batch(carry, batch):
      loss, values = loss_fn(params, batch)
      size = jnp.float32(batch[0].shape[0])
      out = dict(values, **{LOSS: loss})
      return jax.tree.map(lambda c, v: c + size * v.astype(jnp.float32),
                          carry, out), None

    shapes = jax.eval_shape(lambda b: loss_fn(params, b),
                            (xs[0], ys[0]))
    zero = jax.tree.map(lambda _: jnp.zeros([], jnp.float32),
                        dict(shapes[1], **{LOSS: shapes[0]}))
    return jax.lax.scan(one_batch, zero, (xs, ys))[0]

  return sums


def check_split(x, y, batch_size: int, who: str) -> Tuple[int, int]:
  """`(examples, batch size)` of a split evaluated in batches: the batch size at most the split's.

  Args:
    x: the split's inputs.
    y: its targets.
    batch_size: the examples per batch asked for.
    who: what evaluates, for the message (`"evaluate"`).

  Raises:
    ValueError: one line: an empty split, x and y of different lengths, or
      a batch size below one.
  """
  n = len(x)
  if n == 0 or len(y) != n:
    raise ValueError(f"{who} needs matching non-empty x and y, got {len(x)} "
                     f"and {len(y)} examples")
  if batch_size < 1:
    raise ValueError(f"batch_size must be positive, got {batch_size}")
  return n, min(int(batch_size), n)


def mean_over_batches(loss_fn: LossFn, params, x, y,
                      batch_size: int = 1000) -> Tuple[float, Dict[str, float]]:
  """The loss and metrics of `loss_fn` over a whole split: the size-weighted mean of its batches'.

  The split is cut into batches of `batch_size` (and one shorter batch
  for the rest), each batch's values weighted by its size: the exact mean
  over the split of a loss and metrics that are means over a batch's
  examples. Whole batches run in one jitted scan, the rest in a second
  call (two compilations per shape, cached for a stable `loss_fn`).

  Args:
    loss_fn: `loss_fn(params, (x, y)) -> (loss, {metric: value})`.
    params: the model's parameters.
    x: `[N, ...]` inputs.
    y: `[N, ...]` targets.
    batch_size: examples per batch (caps memory).

  Returns:
    `(loss, {metric: value})` as Python floats.

  Example:
    >>> import jax.numpy as jnp, numpy as np
    >>> loss_fn = lambda w, b: (jnp.mean((b[0] * w - b[1]) ** 2),
    ...                         {"mae": jnp.mean(jnp.abs(b[0] * w - b[1]))})
    >>> loss, metrics = mean_over_batches(loss_fn, 2.0, np.arange(5.0),
    ...                                   np.zeros(5), batch_size=2)
    >>> loss, metrics  # (0 + 4 + 16 + 36 + 64) / 5, (0 + 2 + 4 + 6 + 8) / 5
    (24.0, {'mae': 4.0})
  """
  n, batch_size = check_split(x, y, batch_size, "an evaluation")
  x, y = np.asarray(x), np.asarray(y)
  whole = n // batch_size
  sums = _jitted_sums(loss_fn)
  parts = [sums(params, x[:whole * batch_size].reshape(
      (whole, batch_size) + x.shape[1:]), y[:whole * batch_size].reshape(
          (whole, batch_size) + y.shape[1:]))]
  if whole * batch_size < n:
    rest = slice(whole * batch_size, n)
    parts.append(sums(params, x[rest][None], y[rest][None]))
  total = {k: sum(float(p[k]) for p in parts) / n for k in parts[0]}
  loss = total.pop(LOSS)
  return loss, total


def _classification_loss(apply_fn):
  from agn_jax import models  # pylint: disable=g-import-not-at-top
  return models.classification_loss(apply_fn)


def _classification_evaluate(apply_fn, params, x, y):
  from agn_jax import models  # pylint: disable=g-import-not-at-top
  loss, accuracy = models.evaluate(apply_fn, params, x, y)
  return loss, {"accuracy": accuracy}


def classification() -> Task:
  """Softmax cross-entropy on integer labels; accuracy, E's default metric.

  The loss is `agn_jax.models.classification_loss`, the evaluation
  `agn_jax.models.evaluate`: what every run trained for before tasks had
  names.
  """
  return Task("classification", _classification_loss,
              (Metric("accuracy", higher_is_better=True),), "accuracy",
              _classification_evaluate, class_targets=True)


def _next_token_loss(apply_fn):
  from agn_jax import transformer  # pylint: disable=g-import-not-at-top
  return transformer.next_token_loss(apply_fn)


def _next_token_evaluate(apply_fn, params, x, y):
  from agn_jax import transformer  # pylint: disable=g-import-not-at-top
  return transformer.evaluate(apply_fn, params, x, y)


def next_token() -> Task:
  """Next-token cross-entropy on token sequences; accuracy, and bits per byte for E.

  The loss is `agn_jax.transformer.next_token_loss` (targets `[N, T]`,
  the inputs shifted by one, as `--dataset=shakespeare` holds them), the
  evaluation `agn_jax.transformer.evaluate`. `bits_per_byte` is the loss
  in bits, per byte when a token is one byte.
  """
  return Task("next_token", _next_token_loss,
              (Metric("accuracy", higher_is_better=True),
               Metric("bits_per_byte", higher_is_better=False)),
              "bits_per_byte", _next_token_evaluate, class_targets=True)


# name -> factory of no arguments returning a `Task`; the task registry.
_REGISTRY: Dict[str, Callable[[], Task]] = {"classification": classification,
                                            "next_token": next_token}
TASKS = tuple(_REGISTRY)


def get_task(name: str) -> Task:
  """The task `name` names, checked (`Task.check`).

  Args:
    name: one of `TASKS`, or `"package.module:function"`: a function of no
      arguments returning a `Task`, imported from there in every process.

  Raises:
    ValueError: one line: an unknown name, a module that cannot be
      imported, or a factory that raises or returns no valid `Task`.

  Example:
    >>> get_task("regression")
    Traceback (most recent call last):
    ...
    ValueError: unknown task 'regression'; available: classification, next_token, or package.module:function
  """
  factory = names.lookup("task", name, _REGISTRY)
  try:
    task = factory()
  except (Exception, SystemExit) as e:  # pylint: disable=broad-except
    raise ValueError(names.raised("task", name, e)) from e
  if not isinstance(task, Task):
    raise ValueError(f"task {name!r}: its factory returned a "
                     f"{type(task).__name__}, not a Task")
  return task.check()


def check_name(name: str) -> None:
  """Raises `ValueError` (one line) unless `name` names a valid task (`get_task`)."""
  get_task(name)
