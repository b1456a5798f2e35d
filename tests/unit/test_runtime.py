"""End-to-end tests of the runtime: real server, worker and evaluator processes over shared memory."""

import json

import jax
import numpy as np
import pytest

from agn_jax import build, checkpoint, data
from agn_jax.config import ProcessesOptions
from agn_jax.runtime import train
from helpers import tiny_config, train_in_process


def _config(tmp_path, **overrides):
  return tiny_config(tmp_path, **dict(
      dict(num_workers=4, communication_window=10, hidden_sizes=(64,),
           batch_size=32, epochs=30.0, learning_rate=3e-3), **overrides))


def test_the_real_loops_on_threads_apply_every_commit(tmp_path):
  """The server, 2 workers and the evaluator as threads under the real supervisor: no process, seconds."""
  lam, batch, windows = 5, 32, 6
  ds = data.load("digits", seed=0)
  epochs = (windows * lam * batch * 2 + 1) / len(ds.x_train)
  config = _config(tmp_path, num_workers=2, communication_window=lam,
                   hidden_sizes=(16,), epochs=epochs,
                   options=ProcessesOptions(cache_dir="")).resolved()
  summary, center, run = train_in_process(config)
  assert not [t for t in run.threads.values() if t.is_alive()]
  assert summary["num_commits"] == summary["expected_commits"] == 2 * windows
  assert summary["worker_commits"] == [windows, windows]
  assert summary["rejected_commits"] == 0 and summary["completed"]
  commits = [json.loads(l) for l in (tmp_path / "run" / "metrics.jsonl")
             .read_text().splitlines() if '"commit"' in l]
  assert [c["clock"] for c in commits] == list(range(1, 2 * windows + 1))
  model, _ = build.build_model(config, ds.num_classes, ds.input_shape)
  initial = np.concatenate([np.ravel(l) for l in jax.tree.leaves(
      build.initial_center(config, model, ds.x_train.shape[1]))])
  assert np.abs(center - initial).max() > 1e-3  # The center moved.
  # The final checkpoint (asked for through the supervisor) holds it.
  saved = checkpoint.restore(str(tmp_path / "run" / "checkpoints"))
  assert saved.step == 2 * windows
  np.testing.assert_array_equal(saved.center, center)


def test_bad_config_fails_before_any_process_starts(tmp_path):
  with pytest.raises(ValueError, match="less than one communication window"):
    train(_config(tmp_path, epochs=0.01))
  assert not (tmp_path / "run" / "pids.json").exists()
