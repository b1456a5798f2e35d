"""Checkpoints of the parameter server: center, server state and run metadata (orbax).

Orbax writes each checkpoint into a temporary directory and renames it only
once complete, so a crash during a save leaves the previous checkpoint usable.
Nothing is ever loaded with pickle: arrays are stored by orbax, metadata as JSON.
"""

import contextlib
import json
import logging
import math
import os
import sys
import time
import traceback
from typing import (Any, Callable, Dict, List, NamedTuple, Optional, Sequence,
                    Tuple)

import numpy as np

from agn_jax import config as config_lib
from agn_jax import errors
from agn_jax.errors import CheckpointError


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

  def to_json(self) -> Dict[str, Any]:
    """The JSON object a checkpoint stores: every field that is set."""
    return {k: v for k, v in self._asdict().items()
            if v is not None or k == "metrics_offset"}


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
    state = {
        "center": np.asarray(center),
        "server": {f"{i:04d}": np.asarray(x) for i, x in enumerate(server_leaves)}
    }
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
  """Reads the newest complete checkpoint in `directory`.

  Whatever orbax, tensorstore or asyncio raise on a truncated or damaged
  checkpoint (including an intermittent `RuntimeError: Event loop is
  closed`) becomes one `CheckpointError` line naming the directory.

  Raises:
    CheckpointError: when there is none, or it cannot be read.
  """
  if not os.path.isdir(directory):
    raise CheckpointError(f"no checkpoint directory at {directory}")
  # Before orbax runs: its echoes of a failure can come from another thread
  # before the failure itself reaches us.
  _silence_orphaned_errors()
  step = None
  try:
    with _quiet_orbax():
      ocp, manager = _manager(directory, create=False)
      try:
        step = manager.latest_step()
        if step is None:
          raise CheckpointError(f"no complete checkpoint in {directory}")
        restored = manager.restore(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardRestore(), meta=ocp.args.JsonRestore()))
      finally:
        manager.close()
      state, meta = restored.state, restored.meta
      if (not isinstance(meta, dict) or not isinstance(state, dict) or
          "center" not in state):
        raise CheckpointError(f"checkpoint {step} in {directory} is "
                              "incomplete")
      server = state.get("server") or {}
      leaves = [np.asarray(server[k]) for k in sorted(server)]
      center = np.asarray(state["center"], np.float32)
  except CheckpointError:
    raise
  except Exception as e:  # pylint: disable=broad-except
    # Orbax raises many types for damaged files.
    which = f"checkpoint {step}" if step is not None else "the checkpoint"
    raise CheckpointError(f"{which} in {directory} is corrupt: "
                          f"{_first_line(e)}") from None
  return Checkpoint(int(step), center, leaves, meta)


# The config fields a resumed run must share with the checkpoint (marked
# `resume_fixed`): they fix the parameter layout (model, hidden_sizes,
# dataset), the server state (strategy, server_optimizer), and what each
# worker's saved progress means (dataset, dataset_size, seed, num_workers,
# communication_window, batch_size). Everything else (epochs, learning
# rates, timers, restarts, platform, data_dir) may change between sessions,
# e.g. to train longer.
RESUME_MUST_MATCH = config_lib.fields_where("resume_fixed")


def _shapes(pairs):
  return [[[int(d) for d in shape], str(np.dtype(dtype).str)]
          for shape, dtype in pairs]


def _is_int(value) -> bool:
  return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
  return (isinstance(value, (int, float)) and not isinstance(value, bool) and
          math.isfinite(value))


def _over_share(progress: Sequence[int], num_examples: int,
                config: Dict[str, Any]
               ) -> Optional[Tuple[Optional[int], int, int]]:
  """`(worker, windows done, share)` where progress exceeds its share, else None.

  With `data_assignment=stream` no worker has a share of its own: the
  workers' windows together must fit all their shares (worker None).
  """
  share = _windows(num_examples, config)
  if config.get("data_assignment") == "stream":
    total = share * config["num_workers"]
    return (None, sum(progress), total) if sum(progress) > total else None
  for w, count in enumerate(progress):
    if count > share:
      return w, count, share
  return None


def _windows(num_examples: int, config: Dict[str, Any]) -> int:
  # The workers' own count of their share, so the two never disagree. With
  # Dynamic Local Updates a window may be one step: as many as the share's
  # local steps.
  from agn_jax.shares import windows_per_worker  # pylint: disable=g-import-not-at-top
  windows = windows_per_worker(num_examples, config["num_workers"],
                               config["epochs"],
                               config["communication_window"],
                               config["batch_size"])
  if config.get("dynamic_local_updates"):
    return windows * config["communication_window"]
  return windows


def _check_layout(layout, where: str) -> int:
  """The number of parameters a saved layout describes; raises if malformed."""
  bad = CheckpointError(f"{where}: layout is not a list of [shape, dtype]")
  if not isinstance(layout, list) or not layout:
    raise bad
  total = 0
  for entry in layout:
    if (not isinstance(entry, (list, tuple)) or len(entry) != 2 or
        not isinstance(entry[0], (list, tuple)) or
        not all(_is_int(d) and d >= 0 for d in entry[0])):
      raise bad
    try:
      np.dtype(entry[1])
    except TypeError:
      raise bad from None
    total += math.prod(entry[0])
  return total


def validate_meta(meta: Any, step: int, *, where: str,
                  num_examples: Optional[int] = None,
                  metrics_size: Optional[int] = None,
                  center_size: Optional[int] = None) -> None:
  """Raises CheckpointError (one line) unless a checkpoint's metadata is whole and consistent.

  Checks types, ranges and the invariants the server keeps: every commit a
  worker made was applied or rejected, so `sum(worker_commits) ==
  num_commits + rejected_commits`, and the checkpoint's step is its
  `num_commits`.

  Args:
    meta: the checkpoint's JSON metadata.
    step: the checkpoint's step (its directory's name).
    where: how messages name the checkpoint, e.g. "checkpoint 12 in DIR".
    num_examples: the training examples; when given, each worker's
      progress must fit its share of the checkpoint's own config.
    metrics_size: bytes in metrics.jsonl now; when given, `metrics_offset`
      must not point past it.
    center_size: the stored center's length; when given, it must match the
      layout.
  """
  if not isinstance(meta, dict):
    raise CheckpointError(f"{where}: metadata is not a JSON object")
  config = meta.get("config")
  if not isinstance(config, dict):
    raise CheckpointError(f"{where}: records no config")
  for key in ("num_workers", "communication_window", "batch_size"):
    if not _is_int(config.get(key)) or config[key] < 1:
      raise CheckpointError(f"{where}: config {key}={config.get(key)!r} is "
                            "not an integer >= 1")
  if not _is_number(config.get("epochs")) or not config["epochs"] > 0:
    raise CheckpointError(f"{where}: config epochs={config.get('epochs')!r} "
                          "is not a number > 0")
  commits = meta.get("num_commits")
  if not _is_int(commits) or commits < 0:
    raise CheckpointError(f"{where}: num_commits={commits!r} is not an "
                          "integer >= 0")
  if commits != step:
    raise CheckpointError(f"{where}: num_commits={commits} differs from the "
                          f"checkpoint's step {step}")
  rejected = meta.get("rejected_commits")
  if not _is_int(rejected) or rejected < 0:
    raise CheckpointError(f"{where}: rejected_commits={rejected!r} is not an "
                          "integer >= 0")
  n = config["num_workers"]
  progress = meta.get("worker_commits")
  if (not isinstance(progress, list) or len(progress) != n or
      not all(_is_int(c) and c >= 0 for c in progress)):
    raise CheckpointError(f"{where}: worker_commits={_short(progress)} is not "
                          f"a list of {n} integers >= 0")
  if sum(progress) != commits + rejected:
    raise CheckpointError(
        f"{where}: worker_commits sum to {sum(progress)} but num_commits + "
        f"rejected_commits = {commits + rejected}")
  if config.get("dynamic_local_updates"):
    steps = meta.get("worker_steps")
    if (not isinstance(steps, list) or len(steps) != n or
        not all(_is_int(s) and s >= c for s, c in zip(steps, progress))):
      raise CheckpointError(
          f"{where}: worker_steps={_short(steps)} is not a list of {n} "
          "integers, each at least its worker's commits (a run with "
          "dynamic_local_updates saves each worker's local steps)")
  if num_examples is not None:
    over = _over_share(progress, num_examples, config)
    if over:
      w, count, share = over
      raise CheckpointError(
          f"{where}: " + (f"worker_commits[{w}]={count} exceeds worker {w}'s"
                          if w is not None else
                          f"sum(worker_commits)={count} exceeds the stream's")
          + f" share of {share} windows under the checkpoint's own config")
  offset = meta.get("metrics_offset")
  if offset is not None:
    if not _is_int(offset) or offset < 0:
      raise CheckpointError(f"{where}: metrics_offset={offset!r} is not an "
                            "integer >= 0")
    if metrics_size is not None and offset > metrics_size:
      raise CheckpointError(
          f"{where}: metrics_offset={offset} points past the end of "
          f"metrics.jsonl ({metrics_size} bytes)")
  num_params = _check_layout(meta.get("layout"), where)
  if center_size is not None and center_size != num_params:
    raise CheckpointError(f"{where}: the center holds {center_size} values, "
                          f"its layout {num_params}")


def _short(value) -> str:
  text = repr(value)
  return text if len(text) <= 60 else text[:57] + "..."


def _metrics_size(workdir: Optional[str]) -> Optional[int]:
  """Bytes in `<workdir>/metrics.jsonl` (0 if missing); None without a workdir."""
  if not workdir:
    return None
  try:
    return os.lstat(os.path.join(workdir, "metrics.jsonl")).st_size
  except FileNotFoundError:
    return 0


def _check_fits(saved: Dict[str, Any], config: Dict[str, Any],
                progress: Sequence[int], num_examples: Optional[int],
                where: str) -> None:
  """The checkpoint's run and this one agree where they must; its progress fits this run."""
  # A setting newer than the checkpoint had its default then.
  saved = {k: saved.get(k, config_lib.setting_field(k).default)
           for k in RESUME_MUST_MATCH}
  differ = [k for k in RESUME_MUST_MATCH if saved.get(k) != config.get(k)]
  if differ:
    was = ", ".join(f"{k}={saved.get(k)!r}" for k in differ)
    now = ", ".join(f"{k}={config.get(k)!r}" for k in differ)
    raise CheckpointError(
        f"the checkpoint is of a different run ({was}; this run has {now}); "
        f"these must match to resume: {', '.join(RESUME_MUST_MATCH)}")
  if num_examples is not None:
    over = _over_share(progress, num_examples, config)
    if over:
      w, count, share = over
      raise CheckpointError(
          f"{where}: " + (f"worker {w}" if w is not None else "the workers")
          + f" ha{'s' if w is not None else 've'} done {count} windows, more "
          f"than {'its' if w is not None else 'their'} share in this run "
          f"({share} windows with epochs={config['epochs']:g}); resume with "
          "at least the epochs it had")


def check_resumable(ckpt: Checkpoint, config: Dict[str, Any], layout,
                    server_leaves, *, num_examples: Optional[int] = None
                   ) -> None:
  """Raises CheckpointError (one line) unless `ckpt` can continue the run `config` describes.

  Runs `validate_meta` first (with the size of `<workdir>/metrics.jsonl`
  taken from `config["workdir"]`).

  Args:
    ckpt: the restored checkpoint.
    config: the new run's `TrainConfig.to_dict()`.
    layout: the new run's parameter layout (`FlatLayout.metadata()`).
    server_leaves: the new run's server-state leaves (or their shapes).
    num_examples: the training examples; when given, every worker's progress
      must fit its share of data (under the saved and the new config).
  """
  where = f"checkpoint {ckpt.step}"
  validate_meta(ckpt.meta, ckpt.step, where=where, num_examples=num_examples,
                metrics_size=_metrics_size(config.get("workdir")),
                center_size=int(ckpt.center.size))
  _check_fits(ckpt.meta["config"], config, ckpt.meta["worker_commits"],
              num_examples, where)
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


def newest_step_on_disk(directory: str) -> Optional[int]:
  """The newest finalized step directory (orbax renames a step into place when it is complete)."""
  try:
    names = os.listdir(directory)
  except OSError:
    return None
  steps = [int(name) for name in names if name.isdigit()]
  return max(steps) if steps else None


def validate_for_resume(workdir: str, config: Dict[str, Any],
                        num_examples: int, layout=None) -> None:
  """Checks, before anything is written, that `workdir` can be resumed by `config`.

  Reads only JSON (no orbax, no JAX), so the launcher can call it before it
  writes a file or starts a process. It validates the newest checkpoint's
  metadata (`validate_meta`: types, ranges, commit accounting, each worker's
  progress against its share, `metrics_offset` against the size of
  metrics.jsonl now), that the checkpoint's run matches `config`
  (`RESUME_MUST_MATCH`) and fits it (each worker's progress within its share
  under `config`'s epochs), and, given `layout`, the parameter layout. The
  arrays themselves are read and checked later by the server
  (`restore` + `check_resumable`), which must find the same step.

  Args:
    workdir: the run's directory.
    config: the resumed run's `TrainConfig.to_dict()`.
    num_examples: training examples of its dataset.
    layout: optionally the run's parameter layout (`FlatLayout.metadata()`).

  Raises:
    CheckpointError: one line naming what is wrong.
  """
  directory = os.path.join(workdir, "checkpoints")
  for name in ("checkpoints", "metrics.jsonl"):
    if os.path.islink(os.path.join(workdir, name)):
      raise CheckpointError(f"{os.path.join(workdir, name)} is a symlink; a "
                            "run never follows links out of its workdir")
  if not os.path.isdir(directory):
    raise CheckpointError(f"no checkpoint directory at {directory}")
  step = newest_step_on_disk(directory)
  if step is None:
    raise CheckpointError(f"no complete checkpoint in {directory}")
  where = f"checkpoint {step} in {directory}"
  step_dir = os.path.join(directory, str(step))
  for parent, dirs, files in os.walk(step_dir):
    for entry in dirs + files:
      if os.path.islink(os.path.join(parent, entry)):
        raise CheckpointError(f"{where}: {os.path.join(parent, entry)} is a "
                              "symlink")
  if not os.path.isdir(os.path.join(step_dir, "state")):
    raise CheckpointError(f"{where} is incomplete: no state")
  path = os.path.join(step_dir, "meta", "metadata")
  try:
    with open(path, "rb") as f:
      meta = json.loads(f.read().decode("utf-8"))
  except (OSError, ValueError) as e:
    raise CheckpointError(f"{where} is corrupt: cannot read its metadata "
                          f"({_first_line(e, 120)})") from None
  validate_meta(meta, step, where=where, num_examples=num_examples,
                metrics_size=_metrics_size(workdir))
  _check_fits(meta["config"], config, meta["worker_commits"], num_examples,
              where)
  if layout is not None and _shapes(meta["layout"]) != _shapes(layout):
    num_params = sum(int(np.prod(s, dtype=np.int64)) for s, _ in layout)
    raise CheckpointError(
        f"{where} holds a different model ({_check_layout(meta['layout'], where)}"
        f" parameters; this run's model has {num_params})")
