"""Wires a `TrainConfig` into the pure parts: strategy, model, loss, initial center.

Both the runtime's processes and the single-process path call these, so every
process builds exactly the same thing from the same config.
"""

import jax
import numpy as np

from agn_jax import models, strategies
from agn_jax.config import TrainConfig


def build_strategy(config: TrainConfig) -> strategies.Strategy:
  """The strategy, worker optimizer and server optimizer a config names."""
  if config.strategy == "eamsgd":
    # EAMSGD is defined by its momentum workers.
    inner = strategies.make_worker_optimizer("momentum", config.learning_rate,
                                             config.momentum)
  else:
    inner = strategies.make_worker_optimizer(config.worker_optimizer,
                                             config.learning_rate,
                                             config.momentum)
  outer = strategies.make_server_optimizer(config.server_optimizer,
                                           config.server_learning_rate,
                                           config.server_momentum)
  return strategies.get_strategy(
      config.strategy,
      communication_window=config.communication_window,
      inner=inner,
      learning_rate=config.learning_rate,
      rho=config.rho,
      momentum=config.momentum,
      server_optimizer=outer)


def build_model(config: TrainConfig, num_classes: int, input_shape):
  """`(model, loss_fn)` for a dataset with `num_classes` and `input_shape`."""
  model = models.create_model(config.model, num_classes, tuple(input_shape),
                              tuple(config.hidden_sizes))
  return model, models.classification_loss(model.apply)


def initial_center(config: TrainConfig, model, input_dim: int):
  """The initial center (parameters) as a pytree of numpy arrays."""
  params = models.init_params(model, jax.random.PRNGKey(config.seed),
                              input_dim)
  return jax.tree.map(np.asarray, params)
