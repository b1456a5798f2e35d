"""Server checkpoints on real files: round trip, missing, corrupt, and a crash mid-save."""

import hashlib
import json
import os
import shutil

import numpy as np
import pytest

from agn_jax import checkpoint
from agn_jax.errors import CheckpointError
from tests.helpers import damage_checkpoint, snapshot


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
  checksums = restored.meta.pop("checksums")
  assert restored.meta == {"num_commits": 9, "config": {"strategy": "agn"}}
  assert checkpoint.latest_step(str(tmp_path)) == 9
  # The SHA-256 of each array's dtype, shape and bytes, as hashlib has it.
  sha = lambda head, a: hashlib.sha256(head + a.tobytes()).hexdigest()
  assert checksums == {"center": sha(b"<f4(6,)", center + 1),
                       "server": [sha(b"<i4()", np.asarray(leaves[0])),
                                  sha(b"<f4(2, 3)", leaves[1])]}
  assert restored.verified and not restored.damaged


def _two_checkpoints(directory):
  """Steps 3 and 5 of random (incompressible) centers: a flipped bit stays a flipped value."""
  rng = np.random.default_rng(0)
  ckpt = checkpoint.Checkpointer(directory)
  centers = {}
  for step in (3, 5):
    centers[step] = rng.standard_normal(50_000).astype(np.float32)
    ckpt.save(step, centers[step], [np.int32(step)], {"num_commits": step})
  ckpt.close()
  return centers


def test_a_flipped_bit_in_the_array_data_falls_back_to_the_checkpoint_before(
    tmp_path):
  directory = str(tmp_path / "checkpoints")
  centers = _two_checkpoints(directory)
  damage_checkpoint(os.path.join(directory, "5"))
  restored = checkpoint.restore(directory)
  assert restored.step == 3 and restored.verified
  np.testing.assert_array_equal(restored.center, centers[3])
  [line] = restored.damaged
  assert line.startswith(f"checkpoint 5 in {directory} is damaged")
  assert "SHA-256 mismatch" in line
  [note] = restored.notes()
  assert note.endswith("resuming from checkpoint 3, the newest intact one")
  # The run goes on from 3: the damaged one steps aside, kept for a look.
  checkpoint.set_aside_damaged(directory, restored)
  assert sorted(os.listdir(directory)) == ["3", "5.damaged"]
  assert checkpoint.restore(directory).damaged == ()


def test_no_intact_checkpoint_is_one_line_naming_the_newest(tmp_path):
  directory = str(tmp_path / "checkpoints")
  _two_checkpoints(directory)
  damage_checkpoint(os.path.join(directory, "5"))
  damage_checkpoint(os.path.join(directory, "3"))
  before = snapshot(directory)
  with pytest.raises(CheckpointError) as e:
    checkpoint.restore(directory)
  message = str(e.value)
  assert message.startswith(f"checkpoint 5 in {directory} is damaged")
  assert message.endswith("the 1 older one is damaged too")
  assert "\n" not in message
  assert snapshot(directory) == before


def test_a_checkpoint_without_checksums_is_restored_unverified(tmp_path):
  # As one written before checkpoints recorded checksums.
  directory = str(tmp_path / "checkpoints")
  centers = _two_checkpoints(directory)
  shutil.rmtree(os.path.join(directory, "3"))
  meta_path = os.path.join(directory, "5", "meta", "metadata")
  with open(meta_path) as f:
    meta = json.load(f)
  del meta["checksums"]
  with open(meta_path, "w") as f:
    json.dump(meta, f)
  restored = checkpoint.restore(directory)
  np.testing.assert_array_equal(restored.center, centers[5])
  assert not restored.verified
  assert restored.notes() == ["checkpoint 5 records no checksums (written by "
                              "an older version): its arrays are used "
                              "unverified"]


def test_missing_and_empty(tmp_path):
  with pytest.raises(CheckpointError, match="no checkpoint directory"):
    checkpoint.restore(str(tmp_path / "nope"))
  with pytest.raises(CheckpointError, match="no complete checkpoint"):
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
  with pytest.raises(CheckpointError, match="corrupt") as e:
    checkpoint.restore(str(tmp_path))
  assert "\n" not in str(e.value)


# A resumable run on disk: 2 workers, λ = 2, batch 4, 1 epoch of 64 examples,
# so each worker's share is 64 / 2 / (2 × 4) = 4 windows.
NUM_EXAMPLES = 64
LAYOUT = [[[3, 2], "float32"], [[2], "float32"]]


def run_config(workdir, **changes):
  from agn_jax.config import TrainConfig
  config = TrainConfig(num_workers=2, communication_window=2, batch_size=4,
                       epochs=1.0, workdir=str(workdir)).to_dict()
  config.update(changes)
  return config


def write_resumable(workdir, **meta_changes):
  """A real checkpoint (orbax) at step 4 and a metrics.jsonl of 100 bytes."""
  os.makedirs(workdir, exist_ok=True)
  with open(os.path.join(workdir, "metrics.jsonl"), "w") as f:
    f.write("x" * 99 + "\n")
  meta = {"num_commits": 4, "rejected_commits": 1, "worker_commits": [3, 2],
          "metrics_offset": 80, "config": run_config(workdir),
          "layout": LAYOUT, "time": 1.0,
          "traffic": {"bytes_committed": [96, 64], "bytes_pulled": [96, 64]},
          "wall_seconds": 12.5}
  meta.update(meta_changes)
  ckpt = checkpoint.Checkpointer(os.path.join(workdir, "checkpoints"))
  ckpt.save(4, np.zeros(8, np.float32), [np.int32(4)], meta)
  ckpt.close()
  return os.path.join(workdir, "checkpoints", "4", "meta", "metadata")


def tamper(meta_path, **changes):
  """Edits a saved checkpoint's metadata file in place, as an attacker would."""
  with open(meta_path) as f:
    meta = json.load(f)
  meta.update(changes)
  with open(meta_path, "w") as f:
    json.dump(meta, f)


def test_validate_for_resume_accepts_a_whole_checkpoint(tmp_path):
  write_resumable(tmp_path)
  checkpoint.validate_for_resume(str(tmp_path), run_config(tmp_path),
                                 NUM_EXAMPLES, layout=LAYOUT)
  # More epochs (a longer run) is fine; no layout given is fine.
  checkpoint.validate_for_resume(str(tmp_path),
                                 run_config(tmp_path, epochs=3.0),
                                 NUM_EXAMPLES)


TAMPERED = [
    (dict(metrics_offset=-5), "metrics_offset=-5 is not an integer >= 0"),
    (dict(metrics_offset=101), "metrics_offset=101 points past the end of "
     r"metrics.jsonl \(100 bytes\)"),
    (dict(metrics_offset="80"), "metrics_offset='80'"),
    (dict(worker_commits=[10**9, 2], rejected_commits=10**9 - 2),
     r"worker_commits\[0\]=1000000000 exceeds worker 0's share of 4 windows"),
    (dict(worker_commits=[10**9, 2]), "worker_commits sum to 1000000002 but "
     "num_commits \\+ rejected_commits = 5"),
    (dict(worker_commits=[3]), "is not a list of 2 integers"),
    (dict(worker_commits=[3, -1], rejected_commits=-2), "rejected_commits=-2"),
    (dict(worker_commits=[True, 2]), "is not a list of 2 integers"),
    (dict(worker_commits=None), "worker_commits=None"),
    (dict(num_commits=-1), "num_commits=-1 is not an integer >= 0"),
    (dict(num_commits=5, rejected_commits=0), "num_commits=5 differs from "
     "the checkpoint's step 4"),
    (dict(num_commits=4.0), "num_commits=4.0"),
    (dict(config=[1, 2]), "records no config"),
    (dict(traffic={"bytes_committed": [96, -1], "bytes_pulled": [96, 64]}),
     "traffic=.* is not bytes_committed and bytes_pulled of 2 integers >= 0"),
    (dict(wall_seconds="12"), "wall_seconds='12' is not a number >= 0"),
    (dict(layout="nope"), "layout is not a list"),
    (dict(layout=[[[3, -2], "float32"]]), "layout is not a list"),
]


@pytest.mark.parametrize("changes, message", TAMPERED,
                         ids=[m[:30] for _, m in TAMPERED])
def test_tampered_metadata_is_refused_before_anything_is_written(
    tmp_path, changes, message):
  meta_path = write_resumable(tmp_path)
  tamper(meta_path, **changes)
  before = snapshot(tmp_path)
  with pytest.raises(CheckpointError, match=message) as e:
    checkpoint.validate_for_resume(str(tmp_path), run_config(tmp_path),
                                   NUM_EXAMPLES)
  assert "\n" not in str(e.value)
  assert snapshot(tmp_path) == before


def test_the_server_side_check_validates_the_metadata_too(tmp_path):
  # What the server runs after restoring the arrays: the same checks.
  meta_path = write_resumable(tmp_path)
  layout = [([3, 2], np.float32), ([2], np.float32)]
  leaves = [np.int32(0)]
  ckpt = checkpoint.restore(str(tmp_path / "checkpoints"))
  checkpoint.check_resumable(ckpt, run_config(tmp_path), layout, leaves,
                             num_examples=NUM_EXAMPLES)
  tamper(meta_path, metrics_offset=-5)
  ckpt = checkpoint.restore(str(tmp_path / "checkpoints"))
  with pytest.raises(CheckpointError, match="metrics_offset=-5"):
    checkpoint.check_resumable(ckpt, run_config(tmp_path), layout, leaves)
  tamper(meta_path, metrics_offset=80, worker_commits=[10**9, 2])
  ckpt = checkpoint.restore(str(tmp_path / "checkpoints"))
  with pytest.raises(CheckpointError, match="sum to 1000000002"):
    checkpoint.check_resumable(ckpt, run_config(tmp_path), layout, leaves)


def test_resume_must_fit_this_run(tmp_path):
  write_resumable(tmp_path)
  with pytest.raises(CheckpointError, match="different run.*seed"):
    checkpoint.validate_for_resume(str(tmp_path),
                                   run_config(tmp_path, seed=7), NUM_EXAMPLES)
  # Half the epochs: worker 0 has done 3 windows, its share is now 2.
  with pytest.raises(CheckpointError,
                     match="worker 0 has done 3 windows, more than its share "
                     r"in this run \(2 windows with epochs=0.5\)"):
    checkpoint.validate_for_resume(str(tmp_path),
                                   run_config(tmp_path, epochs=0.5),
                                   NUM_EXAMPLES)
  with pytest.raises(CheckpointError, match="different model"):
    checkpoint.validate_for_resume(str(tmp_path), run_config(tmp_path),
                                   NUM_EXAMPLES,
                                   layout=[[[4, 2], "float32"]])


def test_validate_for_resume_refuses_symlinks_and_missing_parts(tmp_path):
  run = tmp_path / "run"
  meta_path = write_resumable(run)
  outside = tmp_path / "outside.jsonl"
  outside.write_text("precious\n")
  os.replace(run / "metrics.jsonl", tmp_path / "moved.jsonl")
  (run / "metrics.jsonl").symlink_to(outside)
  with pytest.raises(CheckpointError, match="metrics.jsonl is a symlink"):
    checkpoint.validate_for_resume(str(run), run_config(run), NUM_EXAMPLES)
  os.unlink(run / "metrics.jsonl")
  os.replace(tmp_path / "moved.jsonl", run / "metrics.jsonl")
  with open(meta_path, "w") as f:
    f.write('{"num_commits": 4,')
  with pytest.raises(CheckpointError,
                     match="checkpoint 4 in .* is corrupt: cannot read its metadata"):
    checkpoint.validate_for_resume(str(run), run_config(run), NUM_EXAMPLES)
  import shutil
  shutil.rmtree(run / "checkpoints" / "4")
  with pytest.raises(CheckpointError, match="no complete checkpoint"):
    checkpoint.validate_for_resume(str(run), run_config(run), NUM_EXAMPLES)
  assert outside.read_text() == "precious\n"


def test_truncated_files_in_process(tmp_path):
  write_resumable(tmp_path)
  for dirpath, _, files in os.walk(tmp_path / "checkpoints" / "4"):
    for name in files:
      path = os.path.join(dirpath, name)
      os.truncate(path, os.path.getsize(path) // 2)
  with pytest.raises(CheckpointError) as e:
    checkpoint.restore(str(tmp_path / "checkpoints"))
  assert str(tmp_path / "checkpoints") in str(e.value)
  assert "\n" not in str(e.value) and len(str(e.value)) < 400
  with pytest.raises(CheckpointError, match="corrupt"):
    checkpoint.validate_for_resume(str(tmp_path), run_config(tmp_path),
                                   NUM_EXAMPLES)
