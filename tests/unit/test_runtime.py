"""End-to-end tests of the runtime: real server, worker and evaluator processes over shared memory."""

import pytest

from agn_jax.runtime import train
from helpers import tiny_config


def _config(tmp_path, **overrides):
  return tiny_config(tmp_path, **dict(
      dict(num_workers=4, communication_window=10, hidden_sizes=(64,),
           batch_size=32, epochs=30.0, learning_rate=3e-3), **overrides))


def test_bad_config_fails_before_any_process_starts(tmp_path):
  with pytest.raises(ValueError, match="less than one communication window"):
    train(_config(tmp_path, epochs=0.01))
  assert not (tmp_path / "run" / "pids.json").exists()
