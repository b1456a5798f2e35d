"""Checkpoints on disk: center, server state and run metadata, written and read with orbax.

Orbax writes each checkpoint into a temporary directory and renames it only
once complete, so a crash during a save leaves the previous checkpoint usable.
Nothing is ever loaded with pickle: arrays are stored by orbax, metadata as JSON.

Every checkpoint records the SHA-256 of each array it holds (`Meta.checksums`,
written by `Checkpointer.save`); `restore` verifies them before it returns
anything, and falls back to the previous checkpoint when the newest is
damaged (a flipped bit anywhere in its array data, a file orbax cannot
read), naming the damaged one.
"""

import contextlib
import hashlib
import logging
import os
import sys
import time
import traceback
from typing import (Any, Callable, Dict, List, NamedTuple, Optional,
                    Sequence, Tuple)

import numpy as np

from agn_jax import errors
from agn_jax.errors import CheckpointError


class Checkpoint(NamedTuple):
  """What a checkpoint holds.

  Attributes:
    step: the commit count at which it was written.
    center: the flat float32 center.
    server_leaves: the leaves of the server state (`jax.tree.leaves`), numpy.
    meta: JSON metadata (config, commit count, metrics position, ...).
    verified: whether its arrays matched the checksums they were saved with
      (False: a checkpoint written before checksums were recorded).
    damaged: newer checkpoints `restore` passed over, one line each saying
      why; empty when the newest was read.
  """

  step: int
  center: np.ndarray
  server_leaves: List[np.ndarray]
  meta: Dict[str, Any]
  verified: bool = True
  damaged: Tuple[str, ...] = ()

  def notes(self) -> List[str]:
    """What a resume from it should tell the user, one line each: damaged checkpoints passed over, an unverified one used.

    Example:
      >>> Checkpoint(8, None, [], {}, damaged=("checkpoint 16 in d is "
      ...            "damaged: x",)).notes()
      ['checkpoint 16 in d is damaged: x; resuming from checkpoint 8, the newest intact one']
      >>> Checkpoint(8, None, [], {}, verified=False).notes()
      ['checkpoint 8 records no checksums (written by an older version): its arrays are used unverified']
    """
    notes = [f"{line}; resuming from checkpoint {self.step}, the newest "
             "intact one" for line in self.damaged]
    if not self.verified:
      notes.append(f"checkpoint {self.step} records no checksums (written by "
                   "an older version): its arrays are used unverified")
    return notes


# A checkpoint's traffic (`Meta.traffic`), per worker: the names
# `summary.json` sums them under.
TRAFFIC = ("bytes_committed", "bytes_pulled")


class Meta(NamedTuple):
  """What a run records beside a checkpoint's arrays, built in one place for every backend.

  Written as JSON (`to_json`: the fields that are set); read back as a
  plain dict (`Checkpoint.meta`), which `validate_meta` checks before
  anything trusts it.

  Attributes:
    num_commits: commits applied to the center (the checkpoint's step).
    rejected_commits: commits the server rejected.
    worker_commits: each worker's handled commits (applied or rejected):
      its progress, in windows.
    config: the run's `TrainConfig.to_dict()`.
    layout: the parameters' shapes and dtypes (`FlatLayout.metadata()`).
    metrics_offset: bytes of metrics.jsonl that this checkpoint's state has
      seen (a resume truncates the file there).
    time: when it was written (`time.time()`).
    worker_steps: each worker's local steps, where windows differ in
      length (Dynamic Local Updates) or come from a stream.
    stream: with `data_assignment=stream` on real workers, the steps handed
      out (`taken`) and each worker's next ticket (`tickets`).
    simulation: the simulator's own state (`Simulation.state()["meta"]`).
    traffic: each worker's payload bytes as sent in the commits this
      checkpoint holds, `{"bytes_committed": [...], "bytes_pulled": [...]}`
      (`TRAFFIC`; pulls counted up to each worker's last commit in it), the
      run's earlier sittings included: what a resume books before its own.
    wall_seconds: the run's wall seconds when it was written, its earlier
      sittings included (`summary.json`'s `wall_seconds` so far).
    checksums: the SHA-256 of each array the checkpoint holds
      (`checksums_of`: `{"center": hex, "server": [hex, ...]}`), added by
      `Checkpointer.save` to whatever metadata it is given; `restore`
      verifies them.

  Example:
    >>> Meta(3, 0, [2, 1], {}, [], time=1.0).to_json()["worker_commits"]
    [2, 1]
    >>> "stream" in Meta(3, 0, [2, 1], {}, []).to_json()
    False
  """
  num_commits: int
  rejected_commits: int
  worker_commits: List[int]
  config: Dict[str, Any]
  layout: List[Any]
  metrics_offset: Optional[int] = None
  time: Optional[float] = None
  worker_steps: Optional[List[int]] = None
  stream: Optional[Dict[str, Any]] = None
  simulation: Optional[Dict[str, Any]] = None
  traffic: Optional[Dict[str, List[int]]] = None
  wall_seconds: Optional[float] = None
  checksums: Optional[Dict[str, Any]] = None

  @classmethod
  def now(cls, *, layout, **fields) -> "Meta":
    """The record of a checkpoint written now: the one place a `Meta` is built.

    Args:
      layout: the run's `FlatLayout` (its `metadata()` is recorded).
      **fields: the other fields, by name.

    Example:
      >>> from agn_jax.wire import FlatLayout
      >>> layout = FlatLayout.from_tree({"w": np.zeros((2, 3), np.float32)})
      >>> meta = Meta.now(layout=layout, num_commits=3, rejected_commits=0,
      ...                 worker_commits=[2, 1], config={})
      >>> meta.layout, meta.time > 0
      ([[[2, 3], '<f4']], True)
    """
    return cls(layout=[[list(s), d] for s, d in layout.metadata()],
               time=time.time(), **fields)

  def to_json(self) -> Dict[str, Any]:
    """The JSON object a checkpoint stores: every field that is set."""
    return {k: v for k, v in self._asdict().items()
            if v is not None or k == "metrics_offset"}


def array_checksum(array) -> str:
  """The SHA-256 of an array's dtype, shape and bytes, in hex.

  Example:
    >>> a = np.arange(3, dtype=np.float32)
    >>> array_checksum(a) == array_checksum(a.copy())
    True
    >>> array_checksum(a) == array_checksum(a.astype(np.int32))
    False
  """
  array = np.asarray(array)
  digest = hashlib.sha256(f"{array.dtype.str}{array.shape}".encode())
  digest.update(np.ascontiguousarray(array).reshape(-1).view(np.uint8))
  return digest.hexdigest()


def checksums_of(center, server_leaves: Sequence[Any]) -> Dict[str, Any]:
  """`Meta.checksums` of a checkpoint's arrays: `{"center": hex, "server": [hex, ...]}`."""
  return {"center": array_checksum(center),
          "server": [array_checksum(x) for x in server_leaves]}


def _verify(center, server_leaves, meta, where: str) -> bool:
  """Whether the arrays carry checksums and match them (False: none recorded).

  Raises:
    CheckpointError: "`where` is damaged: ..." naming the first array that
      differs from what was saved.
  """
  saved = meta.get("checksums")
  if saved is None:
    return False
  if (not isinstance(saved, dict) or not isinstance(saved.get("server"), list)
      or len(saved["server"]) != len(server_leaves)):
    raise CheckpointError(f"{where} is damaged: its checksums do not "
                          f"describe its {1 + len(server_leaves)} arrays")
  arrays = [("its center", center, saved.get("center"))] + [
      (f"its server state's array {i}", x, saved["server"][i])
      for i, x in enumerate(server_leaves)]
  for name, array, expected in arrays:
    if array_checksum(array) != expected:
      raise CheckpointError(f"{where} is damaged: {name} differs from what "
                            "was saved (SHA-256 mismatch)")
  return True


def _manager(directory: str, create: bool):
  # Imported lazily: orbax is heavy and only the server and tools need it.
  try:
    import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    # Ctrl-C while tensorstore's extension initializes comes out as an
    # ImportError: it is the interrupt.
    interrupt = errors.interrupt_behind(e)
    if interrupt is not None:
      raise interrupt from None
    raise
  options = ocp.CheckpointManagerOptions(
      max_to_keep=2, create=create, enable_async_checkpointing=False)
  return ocp, ocp.CheckpointManager(os.path.abspath(directory), options=options)


# What orbax names a save in progress; a save killed (SIGKILL) mid-way leaves
# it behind for good, and it is never a checkpoint.
_UNFINISHED = ".orbax-checkpoint-tmp"


def remove_unfinished_saves(directory: str) -> List[str]:
  """Removes what saves killed mid-way left in `directory` (`*.orbax-checkpoint-tmp*`); returns their names.

  Only while no save runs: the run's lock on its workdir makes its server
  the only writer.

  Example:
    >>> import os, tempfile
    >>> d = tempfile.mkdtemp()
    >>> os.makedirs(os.path.join(d, "12.orbax-checkpoint-tmp-1700000000"))
    >>> os.makedirs(os.path.join(d, "8"))
    >>> remove_unfinished_saves(d), sorted(os.listdir(d))
    (['12.orbax-checkpoint-tmp-1700000000'], ['8'])
  """
  import shutil  # pylint: disable=g-import-not-at-top
  try:
    names = sorted(n for n in os.listdir(directory) if _UNFINISHED in n)
  except OSError:
    return []
  for name in names:
    path = os.path.join(directory, name)
    if os.path.isdir(path) and not os.path.islink(path):
      shutil.rmtree(path, ignore_errors=True)
    else:
      try:
        os.unlink(path)
      except OSError:
        pass
  return names


class Checkpointer:
  """Saves server checkpoints into `directory`, keeping the last two.

  What a save killed mid-way left behind is removed when the next session
  opens the directory and before every save.

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

  def __init__(self, directory: str, saved_step: Optional[int] = None):
    self._directory = directory
    # The newest step on disk: a restored run's, then each save's.
    self.saved_step = saved_step
    remove_unfinished_saves(directory)
    # A save that fails (a full disk) leaves tensorstore writes that end
    # late, as a failed restore leaves reads.
    _silence_orphaned_errors()
    with _quiet_orbax():  # Orbax narrates every save at INFO; the books say enough.
      self._ocp, self._manager = _manager(directory, create=True)

  def save(self, step: int, center: np.ndarray, server_leaves, meta: Dict[str,
                                                                          Any]):
    """Writes a checkpoint atomically; blocks until it is on disk."""
    remove_unfinished_saves(self._directory)
    ocp = self._ocp
    center = np.asarray(center)
    leaves = [np.asarray(x) for x in server_leaves]
    state = {"center": center,
             "server": {f"{i:04d}": x for i, x in enumerate(leaves)}}
    # Of the very arrays written: `restore` refuses any that differ.
    meta = dict(meta, checksums=checksums_of(center, leaves))
    try:
      with _quiet_orbax():
        self._manager.save(
            int(step),
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(state),
                meta=ocp.args.JsonSave(meta)),
            force=True)
        self._manager.wait_until_finished()
    except Exception as e:  # pylint: disable=broad-except
      code = _os_error_code(e)
      if code is None:
        raise
      # A full disk, say: one line with the directory and the errno, not
      # tensorstore's paragraph.
      raise CheckpointError(
          f"cannot write checkpoint {step} in "
          f"{os.path.abspath(self._directory)}: [Errno {code}] "
          f"{os.strerror(code)}") from None

  def save_once(self, step: int, contents: Callable[[], tuple],
                final: bool) -> Optional[float]:
    """Saves `step` unless it is on disk already: the one rule of a run's checkpoints.

    A step is saved once. The final save of a run whose newest checkpoint
    holds that step already writes nothing: that checkpoint is the final
    one too, so the books still get a final row.

    Args:
      step: the commit count the checkpoint holds.
      contents: `() -> (center, server_leaves, meta)`, called only when the
        step is written (building the meta reads the books).
      final: whether this is the run's last save.

    Returns:
      The seconds the save took (0.0 for a final save of a step already on
      disk), or None when nothing is to be recorded (a periodic save of a
      step already on disk).

    Example:
      >>> import tempfile, numpy as np
      >>> from agn_jax import checkpoint
      >>> ckpt = checkpoint.Checkpointer(tempfile.mkdtemp())
      >>> parts = lambda: (np.zeros(2, np.float32), [], {"num_commits": 5})
      >>> ckpt.save_once(5, parts, final=False) >= 0, ckpt.saved_step
      (True, 5)
      >>> ckpt.save_once(5, parts, final=False) is None
      True
      >>> ckpt.save_once(5, parts, final=True)
      0.0
      >>> ckpt.close()
    """
    if step == self.saved_step:
      return 0.0 if final else None
    t0 = time.monotonic()
    self.save(step, *contents())
    self.saved_step = step
    return time.monotonic() - t0

  def close(self):
    with _quiet_orbax():
      self._manager.close()


def _os_error_code(error: BaseException) -> Optional[int]:
  """The errno behind a failed save: an OSError's, or the one tensorstore names (os_error_code='28')."""
  import re  # pylint: disable=g-import-not-at-top
  while error is not None:
    if isinstance(error, OSError) and error.errno:
      return error.errno
    match = re.search(r"os_error_code='?(\d+)", str(error))
    if match:
      return int(match.group(1))
    error = error.__cause__ or error.__context__
  return None


def _first_line(error: BaseException, limit: int = 240) -> str:
  text = " ".join(str(error).split()) or type(error).__name__
  return text if len(text) <= limit else text[:limit] + " ..."


class _DropOrbaxLogs(logging.Filter):
  """Orbax logs its own errors (and tracebacks) before raising; we report one line."""

  def filter(self, record):
    return "orbax" not in record.pathname


@contextlib.contextmanager
def _quiet_orbax():
  absl_logger = logging.getLogger("absl")
  quiet = _DropOrbaxLogs()
  absl_logger.addFilter(quiet)
  try:
    yield
  finally:
    absl_logger.removeFilter(quiet)


def _from_orbax(error: Optional[BaseException]) -> bool:
  if error is None:
    return False
  frames = traceback.extract_tb(error.__traceback__)
  return any("orbax" in f.filename or "tensorstore" in f.filename
             for f in frames) or "tensorstore" in str(error)


class _DropOrphanedTaskErrors(logging.Filter):
  """asyncio's 'Task exception was never retrieved' for orbax's abandoned reads and writes."""

  def filter(self, record):
    error = record.exc_info[1] if record.exc_info else None
    if error is None and record.args and isinstance(record.args, dict):
      context = record.args.get("exception")
      error = context if isinstance(context, BaseException) else None
    return not ("never retrieved" in str(record.msg) and
                (_from_orbax(error) or error is None))


_SILENCED = []


def _is_closed_loop_echo(error: Optional[BaseException]) -> bool:
  return isinstance(error, RuntimeError) and "Event loop is closed" in str(error)


def _silence_orphaned_errors():
  """After a failed save or restore, orbax's abandoned tensorstore operations finish late.

  They then report to a closed event loop (`RuntimeError: Event loop is
  closed`, through sys.unraisablehook, or sys.excepthook when tensorstore
  prints it from its own thread), as never-retrieved task errors (the
  asyncio logger) or in orbax's own thread's log, from another thread and possibly before or after the
  failing call has returned. The failure itself is reported as one
  CheckpointError line, so these echoes are dropped, for the rest of the
  process.
  """
  if _SILENCED:
    return
  previous_unraisable, previous_except = sys.unraisablehook, sys.excepthook

  def unraisable_hook(unraisable):
    if not _is_closed_loop_echo(unraisable.exc_value):
      previous_unraisable(unraisable)

  def except_hook(kind, error, tb):
    if not _is_closed_loop_echo(error):
      previous_except(kind, error, tb)

  sys.unraisablehook = unraisable_hook
  sys.excepthook = except_hook
  logging.getLogger("asyncio").addFilter(_DropOrphanedTaskErrors())
  # Orbax's own background threads log the same failure with its traceback.
  logging.getLogger("absl").addFilter(_DropOrbaxLogs())
  _SILENCED.append(True)


def latest_step(directory: str) -> Optional[int]:
  """The newest complete checkpoint's step in `directory`, or None.

  Raises:
    CheckpointError: `directory` cannot be read as a checkpoint directory.
  """
  if not os.path.isdir(directory):
    return None
  try:
    with _quiet_orbax():
      _, manager = _manager(directory, create=False)
      try:
        return manager.latest_step()
      finally:
        manager.close()
  except Exception as e:  # pylint: disable=broad-except
    raise CheckpointError(f"cannot read the checkpoints in {directory}: "
                          f"{_first_line(e)}") from None


def restore(directory: str) -> Checkpoint:
  """Reads the newest intact checkpoint in `directory`.

  Each checkpoint's arrays are verified against the checksums it recorded
  (`Meta.checksums`) before anything is returned. A damaged one (a
  mismatch, or files orbax cannot read) is passed over for the one before
  it, and `Checkpoint.damaged` says which and why; a checkpoint that
  records no checksums (written by an older version) is returned with
  `verified=False`. Whatever orbax, tensorstore or asyncio raise on a
  truncated or damaged checkpoint (including an intermittent
  `RuntimeError: Event loop is closed`) becomes one line naming it.

  Raises:
    CheckpointError: when there is none, or none is intact (naming the
      newest and why).
  """
  if not os.path.isdir(directory):
    raise CheckpointError(f"no checkpoint directory at {directory}")
  # Before orbax runs: its echoes of a failure can come from another thread
  # before the failure itself reaches us.
  _silence_orphaned_errors()
  try:
    with _quiet_orbax():
      _, manager = _manager(directory, create=False)
      try:
        steps = sorted(manager.all_steps(), reverse=True)
      finally:
        manager.close()
  except Exception as e:  # pylint: disable=broad-except
    raise CheckpointError(f"cannot read the checkpoints in {directory}: "
                          f"{_first_line(e)}") from None
  if not steps:
    raise CheckpointError(f"no complete checkpoint in {directory}")
  damaged = []
  for step in steps:
    try:
      return _read(directory, int(step))._replace(damaged=tuple(damaged))
    except CheckpointError as e:
      damaged.append(str(e))
  older = len(damaged) - 1
  raise CheckpointError(damaged[0] + (
      f"; the {older} older one{'s are' if older > 1 else ' is'} damaged too"
      if older else ""))


def _read(directory: str, step: int) -> Checkpoint:
  """Checkpoint `step` in `directory`, its arrays verified; CheckpointError if it is damaged."""
  where = f"checkpoint {step} in {directory}"
  try:
    with _quiet_orbax():
      # A manager of its own: a failed read leaves orbax's in an unknown state.
      ocp, manager = _manager(directory, create=False)
      try:
        restored = manager.restore(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardRestore(), meta=ocp.args.JsonRestore()))
      finally:
        manager.close()
      state, meta = restored.state, restored.meta
      if (not isinstance(meta, dict) or not isinstance(state, dict) or
          "center" not in state):
        raise CheckpointError(f"{where} is incomplete")
      server = state.get("server") or {}
      leaves = [np.asarray(server[k]) for k in sorted(server)]
      center = np.asarray(state["center"])
  except CheckpointError:
    raise
  except Exception as e:  # pylint: disable=broad-except
    # Orbax raises many types for damaged files.
    raise CheckpointError(f"{where} is corrupt: {_first_line(e)}") from None
  verified = _verify(center, leaves, meta, where)
  return Checkpoint(step, center.astype(np.float32, copy=False), leaves, meta,
                    verified)


def tell(notes: Sequence[str]) -> None:
  """Tells the user what a resume should know (`Checkpoint.notes`), one warning line each."""
  for note in notes:
    logging.getLogger("agn_jax.checkpoint").warning("%s", note)


def set_aside_damaged(directory: str, ckpt: Checkpoint) -> List[str]:
  """Renames the newer checkpoints `restore` passed over to `<step>.damaged`; returns the new paths.

  Called once a resume from `ckpt` is under way: the run's next saves may
  reach those steps again, and the damaged files stay for whoever wants
  to look at them (orbax and `newest_step_on_disk` ignore the name).
  """
  moved = []
  for step in (s for s in _steps_in(directory) if s > ckpt.step):
    source = os.path.join(directory, str(step))
    target = source + ".damaged"
    suffix = 1
    while os.path.lexists(target):
      suffix += 1
      target = f"{source}.damaged{suffix}"
    os.rename(source, target)
    moved.append(target)
  return moved


def _steps_in(directory: str) -> List[int]:
  try:
    names = os.listdir(directory)
  except OSError:
    return []
  return [int(name) for name in names if name.isdigit()]


def newest_step_on_disk(directory: str) -> Optional[int]:
  """The newest finalized step directory (orbax renames a step into place when it is complete)."""
  steps = _steps_in(directory)
  return max(steps) if steps else None
