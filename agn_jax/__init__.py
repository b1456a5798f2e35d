"""agn-jax: asynchronous data-parallel training with Accumulated Gradient Normalization."""

from agn_jax.config import TrainConfig
from agn_jax.kernel import WindowResult, window_kernel
from agn_jax.strategies import Strategy, available as available_strategies, get_strategy
from agn_jax.transform import AGNState, agn, commit_delta, reanchor

__version__ = "0.1.0"


def __getattr__(name):
  # The runtime pulls in multiprocess and shared memory; load it on first use.
  if name == "train":
    from agn_jax.runtime import train
    return train
  raise AttributeError(f"module 'agn_jax' has no attribute {name!r}")


__all__ = [
    "AGNState", "Strategy", "TrainConfig", "WindowResult", "agn",
    "available_strategies", "commit_delta", "get_strategy", "reanchor",
    "train", "window_kernel",
]
