"""Server checkpoints on real files: round trip, missing, corrupt, and a crash mid-save."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from agn_jax import checkpoint

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_round_trip(tmp_path):
  ckpt = checkpoint.Checkpointer(str(tmp_path))
  center = np.arange(6, dtype=np.float32)
  leaves = [np.int32(7), np.ones((2, 3), np.float32)]
  ckpt.save(7, center, leaves, {"num_commits": 7, "config": {"strategy": "agn"}})
  ckpt.save(9, center + 1, leaves, {"num_commits": 9, "config": {"strategy": "agn"}})
  ckpt.close()
  restored = checkpoint.restore(str(tmp_path))
  assert restored.step == 9
  np.testing.assert_array_equal(restored.center, center + 1)
  assert len(restored.server_leaves) == 2
  np.testing.assert_array_equal(restored.server_leaves[1], leaves[1])
  assert int(restored.server_leaves[0]) == 7
  assert restored.meta == {"num_commits": 9, "config": {"strategy": "agn"}}
  assert checkpoint.latest_step(str(tmp_path)) == 9


def test_missing_and_empty(tmp_path):
  with pytest.raises(checkpoint.CheckpointError, match="no checkpoint directory"):
    checkpoint.restore(str(tmp_path / "nope"))
  with pytest.raises(checkpoint.CheckpointError, match="no complete checkpoint"):
    checkpoint.restore(str(tmp_path))
  assert checkpoint.latest_step(str(tmp_path / "nope")) is None


def test_corrupt_files(tmp_path):
  ckpt = checkpoint.Checkpointer(str(tmp_path))
  ckpt.save(1, np.arange(1000, dtype=np.float32), [np.int32(1)], {"a": 1})
  ckpt.close()
  # Overwrite every stored file with garbage.
  for dirpath, _, files in os.walk(tmp_path / "1" / "state"):
    for name in files:
      with open(os.path.join(dirpath, name), "wb") as f:
        f.write(b"\x00garbage")
  with pytest.raises(checkpoint.CheckpointError, match="corrupt") as e:
    checkpoint.restore(str(tmp_path))
  assert "\n" not in str(e.value)


def test_crash_during_save_keeps_previous(tmp_path):
  # A real process saves large checkpoints in a loop; SIGKILL it mid-write.
  script = textwrap.dedent(f"""
      import sys, numpy as np
      sys.path.insert(0, {ROOT!r})
      from agn_jax import checkpoint
      ckpt = checkpoint.Checkpointer({str(tmp_path)!r})
      step = 0
      while True:
        step += 1
        ckpt.save(step, np.full(4_000_000, step, np.float32), [np.int32(step)],
                  {{"num_commits": step}})
        print(step, flush=True)
  """)
  proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                          text=True)
  try:
    for _ in range(3):  # Wait until a few saves are complete.
      assert proc.stdout.readline().strip()
    time.sleep(0.05)
  finally:
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
  restored = checkpoint.restore(str(tmp_path))
  assert restored.step >= 3
  # The restored checkpoint is whole: every value belongs to its step.
  np.testing.assert_array_equal(restored.center,
                                np.full(4_000_000, restored.step, np.float32))
  assert restored.meta["num_commits"] == restored.step
