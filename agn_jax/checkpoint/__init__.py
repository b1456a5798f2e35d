"""Checkpoints of the parameter server: center, server state and run metadata.

Orbax writes each checkpoint into a temporary directory and renames it only
once complete, so a crash during a save leaves the previous checkpoint usable.
Nothing is ever loaded with pickle: arrays are stored by orbax, metadata as JSON.
Each checkpoint records the SHA-256 of every array it holds; a restore
verifies them and falls back to the previous checkpoint when the newest is
damaged.

`store` reads and writes them (orbax I/O, `Meta`, the one record of a run
beside the arrays); `resume` checks a checkpoint against the config of the
run that would continue it. Both are exported here.
"""

# pylint: disable=unused-import
from agn_jax.checkpoint.resume import (RESUME_MUST_MATCH, check_resumable,
                                       check_same_run, check_saved_run,
                                       validate_for_resume, validate_meta)
from agn_jax.checkpoint.store import (TRAFFIC, Checkpoint, Checkpointer,
                                      Meta, array_checksum, checksums_of,
                                      latest_step, newest_step_on_disk,
                                      remove_unfinished_saves, restore,
                                      set_aside_damaged, tell)
from agn_jax.errors import CheckpointError
