"""agn-jax: asynchronous data-parallel training with Accumulated Gradient Normalization."""

import importlib

from agn_jax.config import TrainConfig

__version__ = "0.1.0"

# Loaded on first use: they import JAX (seconds), and what reads only the
# settings (a command line's flags, a bad value's one-line error) needs none
# of it.
_LAZY = {
    "AGNState": ("agn_jax.transform", "AGNState"),
    "Strategy": ("agn_jax.strategies", "Strategy"),
    "WindowResult": ("agn_jax.kernel", "WindowResult"),
    "agn": ("agn_jax.transform", "agn"),
    "available_strategies": ("agn_jax.strategies", "available"),
    "commit_delta": ("agn_jax.transform", "commit_delta"),
    "get_strategy": ("agn_jax.strategies", "get_strategy"),
    "reanchor": ("agn_jax.transform", "reanchor"),
    "train": ("agn_jax.runtime", "train"),
    "window_kernel": ("agn_jax.kernel", "window_kernel"),
}


def __getattr__(name):
  if name in _LAZY:
    module, attribute = _LAZY[name]
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value
  # A submodule, as `agn_jax.kernel` was before the names above were lazy.
  try:
    return importlib.import_module(f"{__name__}.{name}")
  except ModuleNotFoundError as e:
    if e.name != f"{__name__}.{name}":
      raise
  raise AttributeError(f"module 'agn_jax' has no attribute {name!r}")


__all__ = [
    "AGNState", "Strategy", "TrainConfig", "WindowResult", "agn",
    "available_strategies", "commit_delta", "get_strategy", "reanchor",
    "train", "window_kernel",
]
