"""Wires a `TrainConfig` into the pure parts: strategy, task, model, loss, initial center.

Both the runtime's processes and the single-process path call these, so every
process builds exactly the same thing from the same config.
"""

import jax
import numpy as np

from agn_jax import compression, models, names, strategies, tasks
from agn_jax.config import TrainConfig
from agn_jax.data.dataset import Example, example_of
from agn_jax.kept import kept


def check_strategy_settings(config: TrainConfig) -> TrainConfig:
  """The config's one validation (`TrainConfig.validate`); builds nothing.

  Starts no JAX backend, so the launcher and the CLI can call it up front.

  Returns:
    `config.resolved()`.

  Raises:
    ValueError: one line, for an unknown strategy or optimizer name, or a
      setting the strategy cannot honour (see `TrainConfig.validate`).
  """
  return config.validate()


def build_strategy(config: TrainConfig) -> strategies.Strategy:
  """The strategy, worker optimizer, server optimizer and commit compression a config names.

  Works on the resolved config (`config.resolved()`, taken here if `config`
  still has fields left at None), and passes the strategy's factory exactly
  the arguments it takes (`strategies.parameters`).

  Raises:
    ValueError: for anything `check_strategy_settings` rejects, a bad
      value (e.g. a learning rate <= 0), or compression for a strategy that
      commits no delta.
  """
  config = check_strategy_settings(config)
  schedule = (config.lr_schedule, config.warmup_steps, config.decay_steps,
              config.final_lr_fraction)
  return _strategy(config.strategy, config.communication_window,
                   config.worker_optimizer, config.learning_rate, schedule,
                   config.momentum, config.rho, config.elastic_learning_rate,
                   config.normalization, config.server_optimizer,
                   config.server_learning_rate, config.server_momentum,
                   config.server_every, config.commit_compression)


# Built once per process for the same settings: a strategy is pure, and the
# same object lets the simulator reuse the programs it traced on it for the
# next run (`agn_jax.sim.engine`).
@kept
def _strategy(name, communication_window, worker_optimizer, learning_rate,
              schedule, momentum, rho, elastic_learning_rate, normalization,
              server_optimizer, server_learning_rate, server_momentum,
              server_every, commit_compression) -> strategies.Strategy:
  accepted = strategies.parameters(name)
  # The schedule reaches the strategy inside `inner`; `learning_rate` stays
  # the peak rate for what a factory reads besides (adag's increment).
  inner = strategies.make_worker_optimizer(
      worker_optimizer,
      strategies.learning_rate_schedule(learning_rate, *schedule), momentum)
  outer = strategies.make_server_optimizer(server_optimizer,
                                           server_learning_rate,
                                           server_momentum, server_every)
  settings = dict(communication_window=communication_window,
                  inner=inner, learning_rate=learning_rate, rho=rho,
                  elastic_learning_rate=elastic_learning_rate,
                  momentum=momentum, normalization=normalization,
                  server_optimizer=outer)
  strategy = strategies.get_strategy(
      name, **{k: v for k, v in settings.items() if k in accepted})
  return strategies.with_compression(strategy,
                                     compression.parse(commit_compression))


def build_task(config: TrainConfig) -> tasks.Task:
  """The task the config names (`agn_jax.tasks.get_task`): its loss, named metrics and evaluation."""
  return tasks.get_task(config.task)


def build_model(config: TrainConfig, num_classes: int, input_shape):
  """`(model, loss_fn)` for a dataset with `num_classes` and `input_shape`.

  The model is the one `config.model` names (`agn_jax.models.create_model`),
  started as `config.initializer` says, the loss its task's (`config.task`),
  built on `model.apply`.
  """
  return _model(config.model, int(num_classes),
                tuple(int(d) for d in input_shape),
                tuple(config.hidden_sizes), config.task, config.initializer)


# Once per process for the same settings, as `_strategy`: the same loss
# function lets the simulator and the evaluations reuse their programs.
@kept
def _model(name, num_classes, input_shape, hidden_sizes, task, initializer):
  model = models.create_model(name, num_classes, input_shape, hidden_sizes,
                              initializer)
  return model, tasks.get_task(task).loss(model.apply)


def check_fit(config: TrainConfig, model, loss_fn, dataset,
              params=None) -> None:
  """Raises `ValueError` (one line) unless the task's loss reads the model's outputs on the dataset's examples, and gives what the workers need.

  Shapes only (`jax.eval_shape`), nothing is computed: a model whose
  outputs the loss cannot take with the dataset's targets (a classifier's
  logits against a language model's `[N, T]` targets), a model with no
  parameters, or a loss that returns no scalar loss or no scalar metric
  per name the task declares, ends the run before it starts, the same on
  every backend, not inside a worker.

  Args:
    config: the run's config (names the parts for the message).
    model: the flax module (`build_model`).
    loss_fn: its task's loss (`build_model`).
    dataset: the run's `Dataset`.
    params: the parameters' shapes (`jax.ShapeDtypeStruct`s), where the
      caller has traced them already; None: traced here (`init_params`).
  """
  if params is None:
    params = jax.eval_shape(
        lambda: init_params(config, model, example_of(dataset.x_train)))
  if not jax.tree.leaves(params):
    raise ValueError(f"--model={config.model} has no parameters: "
                     f"{type(model).__name__} declares none, so there is "
                     "nothing to train")
  x, y = dataset.x_train[:1], dataset.y_train[:1]
  try:
    out = jax.eval_shape(loss_fn, params, (x, y))
  except Exception as e:  # pylint: disable=broad-except
    said = str(e).splitlines()[0] if str(e) else ""
    outputs = jax.tree.map(lambda a: a.shape, jax.eval_shape(model.apply,
                                                             params, x))
    raise ValueError(
        f"--model={config.model} does not fit --dataset={config.dataset} "
        f"under --task={config.task}: on one training example the model "
        f"gives outputs of shape {outputs} and the targets have shape "
        f"{y.shape}; the loss raised {type(e).__name__}"
        + (f": {said}" if said else "")) from None
  _check_loss_values(config, out)


def _check_loss_values(config: TrainConfig, out) -> None:
  """Raises `ValueError` (one line) unless `out`, the loss's result's shapes, is `(scalar loss, {metric: scalar})` with the task's metric names."""
  task = build_task(config)
  said = f"--task={config.task}: its loss function {names.where(task.loss)}"
  if not (isinstance(out, tuple) and len(out) == 2 and
          isinstance(out[1], dict)):
    raise ValueError(f"{said} returns {type(out).__name__}, not (loss, "
                     "{metric: value})")
  task.check_reported(out[1], "loss")
  for key, value in {tasks.LOSS: out[0], **out[1]}.items():
    shape = getattr(value, "shape", None)
    if shape != ():
      raise ValueError(
          f"{said} returns {key} of shape {shape} on a batch of one example, "
          "not a scalar (a mean over the batch)")


def init_params(config: TrainConfig, model, example):
  """The model's parameters at the config's seed, as JAX arrays (traceable: `jax.eval_shape` takes it).

  Args:
    config: the run's config (its seed).
    model: the flax module.
    example: what one input looks like, an `agn_jax.data.Example`
      (`agn_jax.data.example_of(x_train)`), or the width of a flat float32
      input.
  """
  rng = jax.random.PRNGKey(config.seed)
  if isinstance(example, Example):
    return models.init_params(model, rng, example.shape,
                              np.dtype(example.dtype))
  return models.init_params(model, rng, example)


def initial_center(config: TrainConfig, model, example):
  """The initial center (`init_params`) as a pytree of numpy arrays."""
  return jax.tree.map(np.asarray, init_params(config, model, example))
