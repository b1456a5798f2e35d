"""A run directory's state, as the sweep and the report's study read it.

Whether a run completed (by its summary.json), what a resumed sweep or study
does with its directory next (keep, start fresh, resume, restart), moving a
failed one aside, and writing a report file so that no reader sees half of
it. Nothing here trains or imports JAX.
"""

import json
import os
from typing import Optional

from agn_jax import workdir as workdir_lib


def read_summary(workdir: str) -> Optional[dict]:
  """The run's summary.json as a dict, or None (missing, unreadable, not an object)."""
  try:
    with workdir_lib.safe_open(workdir, "summary.json") as f:
      summary = json.load(f)
  except (OSError, ValueError):
    return None
  return summary if isinstance(summary, dict) else None


def _expected_commits(workdir: str) -> Optional[int]:
  """The run's commit budget as its commit events record it (the last one's)."""
  try:
    with workdir_lib.safe_open(workdir, "metrics.jsonl", "rb") as f:
      f.seek(0, os.SEEK_END)
      f.seek(max(0, f.tell() - 65536))
      lines = f.read().decode("utf-8", "replace").splitlines()
  except (OSError, ValueError):
    return None
  for line in reversed(lines):
    try:
      event = json.loads(line)
    except ValueError:
      continue
    if isinstance(event, dict) and event.get("event") == "commit":
      expected = event.get("expected_commits")
      return expected if isinstance(expected, int) else None
  return None


def _is_count(value) -> bool:
  return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def completed(workdir: str) -> bool:
  """Whether the run in `workdir` trained its whole budget, by its summary.json.

  The runtime's `"outcome"` field decides (completed, interrupted or
  failed), else its `"completed"` field. Summaries without either (older
  runs) count as completed only when not interrupted, every worker reported
  its share done, and the commits made (applied + rejected) equal the budget
  the run's commit events record.

  Example:
    >>> import json, os, tempfile
    >>> d = tempfile.mkdtemp()
    >>> with open(os.path.join(d, "summary.json"), "w") as f:
    ...   json.dump({"completed": False, "interrupted": True}, f)
    >>> completed(d)
    False
  """
  summary = read_summary(workdir)
  if summary is None:
    return False
  if summary.get("outcome") is not None:
    return summary["outcome"] == "completed"
  if isinstance(summary.get("completed"), bool):
    return summary["completed"]
  if summary.get("interrupted") is not False:
    return False
  shares = summary.get("worker_commits")
  if not isinstance(shares, list) or not shares or not all(
      _is_count(c) for c in shares):
    return False  # A worker never reported its share done.
  applied = summary.get("num_commits")
  rejected = summary.get("rejected_commits", 0)
  if not _is_count(applied) or not _is_count(rejected):
    return False
  expected = _expected_commits(workdir)
  return expected is not None and applied + rejected == sum(shares) == expected


def _has_checkpoint(workdir: str) -> bool:
  directory = os.path.join(workdir, "checkpoints")
  return (os.path.isdir(directory) and not os.path.islink(directory) and any(
      name.isdigit() for name in os.listdir(directory)))


def cell_action(workdir: str) -> str:
  """What `--resume` does with a cell's workdir.

  Returns:
    "keep" (it completed), "fresh" (nothing there yet), "resume" (it has a
    checkpoint) or "restart" (it failed before its first checkpoint: run it
    again from scratch).
  """
  if not os.path.isdir(workdir) or not workdir_lib.entries(workdir):
    return "fresh"
  if completed(workdir):
    return "keep"
  if _has_checkpoint(workdir):
    return "resume"
  return "restart"


def move_aside(workdir: str) -> str:
  """Renames a failed run's workdir to `<workdir>.failed-<k>`; returns the new name.

  Only while holding the run's own lock: a workdir a live run holds is
  never moved.

  Raises:
    WorkdirBusy: a live run holds `workdir`.
  """
  with workdir_lib.lock_workdir(workdir, create=False, owner="move aside"):
    k = 1
    while True:
      target = f"{workdir}.failed-{k}"
      if not os.path.lexists(target):
        os.rename(workdir, target)
        return target
      k += 1


def write_report(path: str, text: str) -> None:
  """Writes `text` to `path` whole: through a temporary file, then renamed over it."""
  tmp = path + ".tmp"
  if os.path.islink(tmp):
    os.unlink(tmp)
  with open(tmp, "w") as f:
    f.write(text)
  os.replace(tmp, path)  # A reader never sees half a table.
