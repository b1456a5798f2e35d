"""Resuming a run from its checkpoint: the checks of the saved metadata against the new config.

`validate_for_resume` reads only JSON, before anything starts;
`check_resumable` checks the restored arrays too. Reading and writing the
checkpoints themselves is `agn_jax.checkpoint.store`.
"""

import json
import math
import os
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

from agn_jax import config as config_lib
from agn_jax.checkpoint.store import TRAFFIC, Checkpoint, _first_line
from agn_jax.errors import CheckpointError, resume_error


# The config fields a resumed run must share with the checkpoint (marked
# `resume_fixed`): they fix the parameter layout (model, hidden_sizes,
# dataset), how the run began (initializer), the server state (strategy,
# server_optimizer), the workers' (worker_optimizer: Keras' and optax's Adam
# keep arrays of the same shapes; lr_schedule, warmup_steps, decay_steps,
# final_lr_fraction: the local step each worker's optimizer state counts
# reads the same rate only under the same schedule), and what each worker's
# saved progress means (dataset, dataset_size, seed, num_workers,
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
  traffic = meta.get("traffic")
  if traffic is not None and (
      not isinstance(traffic, dict) or
      not all(isinstance(traffic.get(key), list) and len(traffic[key]) == n
              and all(_is_int(b) and b >= 0 for b in traffic[key])
              for key in TRAFFIC)):
    raise CheckpointError(
        f"{where}: traffic={_short(traffic)} is not "
        + " and ".join(TRAFFIC) + f" of {n} integers >= 0 each")
  wall = meta.get("wall_seconds")
  if wall is not None and not (_is_number(wall) and wall >= 0):
    raise CheckpointError(f"{where}: wall_seconds={wall!r} is not a number "
                          ">= 0")
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


def check_same_run(saved: Dict[str, Any], config: Dict[str, Any],
                   whose: str = "the checkpoint") -> None:
  """Raises CheckpointError unless the saved settings (`whose`) and `config` agree on `RESUME_MUST_MATCH`.

  Example:
    >>> from agn_jax.config import TrainConfig
    >>> check_same_run(TrainConfig().to_dict(), TrainConfig().to_dict())
    >>> check_same_run(TrainConfig(seed=1).to_dict(), TrainConfig().to_dict(),
    ...                "config.json")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    agn_jax.errors.CheckpointError: config.json is of a different run (seed=1; this run has seed=0); ...
  """
  # A setting newer than the checkpoint had its default then.
  saved = {k: saved.get(k, config_lib.setting_field(k).default)
           for k in RESUME_MUST_MATCH}
  # A key `config` lacks is not compared (`check_saved_run`'s early check).
  differ = [k for k in RESUME_MUST_MATCH
            if k in config and saved.get(k) != config.get(k)]
  if differ:
    was = ", ".join(f"{k}={saved.get(k)!r}" for k in differ)
    now = ", ".join(f"{k}={config.get(k)!r}" for k in differ)
    raise CheckpointError(
        f"{whose} is of a different run ({was}; this run has {now}); "
        f"these must match to resume: {', '.join(RESUME_MUST_MATCH)}")


def _check_fits(saved: Dict[str, Any], config: Dict[str, Any],
                progress: Sequence[int], num_examples: Optional[int],
                where: str) -> None:
  """The checkpoint's run and this one agree where they must; its progress fits this run."""
  check_same_run(saved, config)
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


def _read_meta(directory: str, step: int) -> Dict[str, Any]:
  """Checkpoint `step`'s metadata, JSON only; CheckpointError if it cannot be read."""
  where = f"checkpoint {step} in {directory}"
  step_dir = os.path.join(directory, str(step))
  if not os.path.isdir(os.path.join(step_dir, "state")):
    raise CheckpointError(f"{where} is incomplete: no state")
  path = os.path.join(step_dir, "meta", "metadata")
  try:
    with open(path, "rb") as f:
      return json.loads(f.read().decode("utf-8"))
  except (OSError, ValueError) as e:
    raise CheckpointError(f"{where} is corrupt: cannot read its metadata "
                          f"({_first_line(e, 120)})") from None


def newest_readable(directory: str) -> Tuple[int, Dict[str, Any]]:
  """`(step, metadata)` of the newest checkpoint on disk whose metadata reads, as `restore` falls back.

  Raises:
    CheckpointError: there is none, or none reads (naming the newest).
  """
  steps = sorted((int(n) for n in os.listdir(directory) if n.isdigit()),
                 reverse=True)
  if not steps:
    raise CheckpointError(f"no complete checkpoint in {directory}")
  for step in steps:  # A link is refused, not passed over.
    for parent, dirs, files in os.walk(os.path.join(directory, str(step))):
      for entry in dirs + files:
        if os.path.islink(os.path.join(parent, entry)):
          raise CheckpointError(f"checkpoint {step} in {directory}: "
                                f"{os.path.join(parent, entry)} is a symlink")
  first = None
  for step in steps:
    try:
      return step, _read_meta(directory, step)
    except CheckpointError as e:
      first = first or e
  raise first


def check_saved_run(workdir: str, config: Dict[str, Any]) -> None:
  """Checks the newest checkpoint's run against `config`, from JSON alone, before anything `config` names is imported.

  A resume's config comes from the workdir's config.json, which may name
  plug-ins (`package.module:function`); a run imports them when its config
  is validated. This check comes first, so a mismatch is reported before
  any module it names (say one planted in the workdir) is imported:
  `validate_meta` of the checkpoint and the settings that must match
  (`RESUME_MUST_MATCH`). Does nothing where there is no checkpoint (the
  launcher decides what to do then).

  Args:
    workdir: the run's directory.
    config: the resumed run's `TrainConfig.to_dict()` (not validated yet).

  Raises:
    CheckpointError: "cannot resume from WORKDIR: ...", one line.
  """
  directory = os.path.join(workdir, "checkpoints")
  if not os.path.isdir(directory) or os.path.islink(directory) or not any(
      name.isdigit() for name in os.listdir(directory)):
    return
  try:
    step, meta = newest_readable(directory)
    where = f"checkpoint {step} in {directory}"
    validate_meta(meta, step, where=where)
    # A setting left unset (None) takes its strategy's default when the
    # config is validated, which comes after this check: the launcher's
    # `validate_for_resume` compares it then.
    config = {k: v for k, v in config.items() if v is not None}
    _check_fits(meta["config"], config, meta["worker_commits"], None, where)
  except CheckpointError as e:
    raise resume_error(workdir, str(e)) from None


def validate_for_resume(workdir: str, config: Dict[str, Any],
                        num_examples: int, layout=None) -> None:
  """Checks, before anything is written, that `workdir` can be resumed by `config`.

  Reads only JSON (no orbax, no JAX), so the launcher can call it before it
  writes a file or starts a process. It validates the metadata of the
  newest checkpoint whose metadata reads (`newest_readable`: as `restore`,
  it passes over a damaged newer one) (`validate_meta`: types, ranges, commit accounting, each worker's
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
  step, meta = newest_readable(directory)
  where = f"checkpoint {step} in {directory}"
  validate_meta(meta, step, where=where, num_examples=num_examples,
                metrics_size=_metrics_size(workdir))
  _check_fits(meta["config"], config, meta["worker_commits"], num_examples,
              where)
  if layout is not None and _shapes(meta["layout"]) != _shapes(layout):
    num_params = sum(int(np.prod(s, dtype=np.int64)) for s, _ in layout)
    raise CheckpointError(
        f"{where} holds a different model ({_check_layout(meta['layout'], where)}"
        f" parameters; this run's model has {num_params})")
