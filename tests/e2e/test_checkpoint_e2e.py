"""The end-to-end half of tests/unit/test_checkpoint.py: real processes, subprocesses or whole runs."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np

from agn_jax import checkpoint
from test_checkpoint import LAYOUT, run_config, write_resumable
from helpers import REPO


ROOT = str(REPO)


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

  # A killed save's directory (as orbax names it) is never a checkpoint, and
  # the next session removes it, as every save does.
  def unfinished():
    return [n for n in os.listdir(tmp_path) if ".orbax-checkpoint-tmp" in n]

  (tmp_path / f"{restored.step + 1}.orbax-checkpoint-tmp-1700000000").mkdir()
  assert checkpoint.restore(str(tmp_path)).step == restored.step
  ckpt = checkpoint.Checkpointer(str(tmp_path))
  try:
    assert not unfinished()
    (tmp_path / f"{restored.step + 2}.orbax-checkpoint-tmp-1700000001").mkdir()
    ckpt.save(restored.step + 3, np.zeros(4, np.float32), [np.int32(0)],
              {"num_commits": restored.step + 3})
    assert not unfinished()
  finally:
    ckpt.close()
  assert checkpoint.restore(str(tmp_path)).step == restored.step + 3


def test_truncated_checkpoint_is_one_line_and_no_echo(tmp_path):
  # Emptied array files make tensorstore fail inside orbax's event loop;
  # its abandoned reads used to print "RuntimeError: Event loop is closed"
  # tracebacks, sometimes. Several restores in one real process, stderr clean.
  write_resumable(tmp_path)
  state = tmp_path / "checkpoints" / "4" / "state"
  emptied = 0
  for dirpath, _, files in os.walk(state):
    for name in files:
      if os.path.basename(dirpath) == "d":
        open(os.path.join(dirpath, name), "wb").close()
        emptied += 1
  assert emptied
  script = textwrap.dedent(f"""
      import gc, sys, time
      sys.path.insert(0, {ROOT!r})
      from agn_jax import checkpoint
      from agn_jax.errors import CheckpointError
      for _ in range(4):
        try:
          checkpoint.restore({str(tmp_path / "checkpoints")!r})
        except CheckpointError as e:
          print(e)
        gc.collect()
      time.sleep(0.5)  # Late echoes from tensorstore threads land here.
      gc.collect()
  """)
  result = subprocess.run([sys.executable, "-c", script], capture_output=True,
                          text=True, timeout=120)
  assert result.returncode == 0, result.stderr
  lines = result.stdout.strip().splitlines()
  assert len(lines) == 4
  for line in lines:
    assert line.startswith(f"checkpoint 4 in {tmp_path / 'checkpoints'} is corrupt")
  assert "Traceback" not in result.stderr, result.stderr
  assert "Event loop" not in result.stderr, result.stderr
  assert "never retrieved" not in result.stderr, result.stderr
