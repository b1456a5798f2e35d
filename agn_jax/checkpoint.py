"""Checkpoints of the parameter server: center, server state and run metadata (orbax).

Orbax writes each checkpoint into a temporary directory and renames it only
once complete, so a crash during a save leaves the previous checkpoint usable.
Nothing is ever loaded with pickle: arrays are stored by orbax, metadata as JSON.
"""

import os
from typing import Any, Dict, List, NamedTuple, Optional

import numpy as np


class CheckpointError(ValueError):
  """A checkpoint is missing, corrupt or does not fit the run; one-line message."""


class Checkpoint(NamedTuple):
  """What a checkpoint holds.

  Attributes:
    step: the commit count at which it was written.
    center: the flat float32 center.
    server_leaves: the leaves of the server state (`jax.tree.leaves`), numpy.
    meta: JSON metadata (config, commit count, metrics position, ...).
  """

  step: int
  center: np.ndarray
  server_leaves: List[np.ndarray]
  meta: Dict[str, Any]


def _manager(directory: str, create: bool):
  # Imported lazily: orbax is heavy and only the server and tools need it.
  import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  options = ocp.CheckpointManagerOptions(
      max_to_keep=2, create=create, enable_async_checkpointing=False)
  return ocp, ocp.CheckpointManager(os.path.abspath(directory), options=options)


class Checkpointer:
  """Saves server checkpoints into `directory`, keeping the last two.

  Example:
    >>> import tempfile, numpy as np
    >>> from agn_jax import checkpoint
    >>> d = tempfile.mkdtemp()
    >>> ckpt = checkpoint.Checkpointer(d)
    >>> ckpt.save(3, np.zeros(4, np.float32), [np.int32(3)], {"num_commits": 3})
    >>> checkpoint.restore(d).meta["num_commits"]
    3
    >>> ckpt.close()
  """

  def __init__(self, directory: str):
    self._ocp, self._manager = _manager(directory, create=True)

  def save(self, step: int, center: np.ndarray, server_leaves, meta: Dict[str,
                                                                          Any]):
    """Writes a checkpoint atomically; blocks until it is on disk."""
    ocp = self._ocp
    state = {
        "center": np.asarray(center),
        "server": {f"{i:04d}": np.asarray(x) for i, x in enumerate(server_leaves)}
    }
    self._manager.save(
        int(step),
        args=ocp.args.Composite(
            state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)),
        force=True)
    self._manager.wait_until_finished()

  def close(self):
    self._manager.close()


def latest_step(directory: str) -> Optional[int]:
  """The newest complete checkpoint's step in `directory`, or None."""
  if not os.path.isdir(directory):
    return None
  _, manager = _manager(directory, create=False)
  try:
    return manager.latest_step()
  finally:
    manager.close()


def restore(directory: str) -> Checkpoint:
  """Reads the newest complete checkpoint in `directory`.

  Raises:
    CheckpointError: when there is none, or it cannot be read.
  """
  if not os.path.isdir(directory):
    raise CheckpointError(f"no checkpoint directory at {directory}")
  ocp, manager = _manager(directory, create=False)
  try:
    step = manager.latest_step()
    if step is None:
      raise CheckpointError(f"no complete checkpoint in {directory}")
    try:
      restored = manager.restore(
          step,
          args=ocp.args.Composite(
              state=ocp.args.StandardRestore(), meta=ocp.args.JsonRestore()))
    except Exception as e:  # orbax raises many types for damaged files.
      first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
      raise CheckpointError(
          f"checkpoint {step} in {directory} is corrupt: {first}") from None
  finally:
    manager.close()
  state, meta = restored.state, restored.meta
  if not isinstance(meta, dict) or "center" not in state:
    raise CheckpointError(f"checkpoint {step} in {directory} is incomplete")
  server = state.get("server") or {}
  leaves = [np.asarray(server[k]) for k in sorted(server)]
  return Checkpoint(int(step), np.asarray(state["center"], np.float32), leaves,
                    meta)


# The config fields a resumed run must share with the checkpoint: they fix
# the parameter layout (model, hidden_sizes, dataset), the server state
# (strategy, server_optimizer), and what each worker's saved progress means
# (dataset, dataset_size, seed, num_workers, communication_window,
# batch_size). Everything else (epochs, learning rates, timers, restarts,
# platform, data_dir) may change between sessions, e.g. to train longer.
RESUME_MUST_MATCH = ("strategy", "model", "hidden_sizes", "dataset",
                     "dataset_size", "seed", "num_workers",
                     "communication_window", "batch_size", "server_optimizer")


def _shapes(pairs):
  return [[[int(d) for d in shape], str(np.dtype(dtype).str)]
          for shape, dtype in pairs]


def check_resumable(ckpt: Checkpoint, config: Dict[str, Any], layout,
                    server_leaves) -> None:
  """Raises CheckpointError (one line) unless `ckpt` can continue the run `config` describes.

  Args:
    ckpt: the restored checkpoint.
    config: the new run's `TrainConfig.to_dict()`.
    layout: the new run's parameter layout (`FlatLayout.metadata()`).
    server_leaves: the new run's server-state leaves (or their shapes).
  """
  saved = ckpt.meta.get("config")
  if not isinstance(saved, dict):
    raise CheckpointError(f"checkpoint {ckpt.step} records no config")
  differ = [k for k in RESUME_MUST_MATCH if saved.get(k) != config.get(k)]
  if differ:
    was = ", ".join(f"{k}={saved.get(k)!r}" for k in differ)
    now = ", ".join(f"{k}={config.get(k)!r}" for k in differ)
    raise CheckpointError(
        f"the checkpoint is of a different run ({was}; this run has {now}); "
        f"these must match to resume: {', '.join(RESUME_MUST_MATCH)}")
  num_params = sum(int(np.prod(s, dtype=np.int64)) for s, _ in layout)
  if (ckpt.center.shape != (num_params,) or
      _shapes(ckpt.meta.get("layout", [])) != _shapes(layout)):
    raise CheckpointError(
        f"the checkpoint holds a different model ({ckpt.center.size} "
        f"parameters; this run's model has {num_params})")
  expected = _shapes((np.shape(x), x.dtype) for x in server_leaves)
  if _shapes((x.shape, x.dtype) for x in ckpt.server_leaves) != expected:
    raise CheckpointError(
        f"the checkpoint's server state ({len(ckpt.server_leaves)} arrays) "
        f"does not fit this run's ({len(expected)} arrays)")
  progress = ckpt.meta.get("worker_commits")
  if (not isinstance(progress, list) or len(progress) != config["num_workers"]
      or not all(isinstance(c, int) and c >= 0 for c in progress)):
    raise CheckpointError(f"checkpoint {ckpt.step} records no valid "
                          "per-worker progress")
