"""The simulation's progress on the host: its counters and the windows that await their commits, and their checkpoint form.

Example:
  >>> p = Progress.start(2)
  >>> p.pending[1] = Pending(0.5, 0.75, (0.5, 1.0), round=0, local_updates=2)
  >>> Progress.from_meta(p.to_meta(), communication_window=2) == p
  True
"""

import dataclasses
from typing import Any, Dict, List, NamedTuple, Optional, Tuple


class Pending(NamedTuple):
  """A window that ran and awaits its commit: what its `schedule.Handled` will say.

  Attributes:
    loss: the window's mean training loss.
    accuracy: its mean training accuracy (nan if the loss has none).
    step_accuracy: each local step's training accuracy.
    round: the round the window ran in.
    local_updates: its local steps.
  """
  loss: float
  accuracy: float
  step_accuracy: Tuple[float, ...]
  round: int
  local_updates: int


@dataclasses.dataclass
class Progress:
  """How far a simulation got, on the host.

  Attributes:
    round: rounds run.
    num_commits: commits handled (applied and rejected).
    rejected: commits rejected.
    simulated_time: when the last commit was applied, on the time model's
      clock.
    windows_done: each worker's committed windows.
    windows_run: each worker's computed windows (one more while a commit
      waits).
    pending: each worker's window that ran but is not committed yet, or
      None.
    rejected_in_a_row: each worker's commits rejected in a row so far.
  """
  round: int
  num_commits: int
  rejected: int
  simulated_time: float
  windows_done: List[int]
  windows_run: List[int]
  pending: List[Optional[Pending]]
  rejected_in_a_row: List[int]

  @classmethod
  def start(cls, num_workers: int) -> "Progress":
    """Nothing run yet."""
    n = num_workers
    return cls(0, 0, 0, 0.0, [0] * n, [0] * n, [None] * n, [0] * n)

  def to_meta(self) -> Dict[str, Any]:
    """The JSON-able form a checkpoint's metadata holds (`pending` as `[loss, accuracy, step accuracies, round, local steps]` lists)."""
    meta = dataclasses.asdict(self)
    meta["rejected_commits"] = meta.pop("rejected")
    meta["pending"] = [None if p is None else [
        p.loss, p.accuracy, list(p.step_accuracy), p.round, p.local_updates]
                       for p in self.pending]
    return meta

  @classmethod
  def from_meta(cls, meta: Dict[str, Any],
                communication_window: int) -> "Progress":
    """`to_meta` undone; a pending window of an older checkpoint without its local steps had λ."""
    return cls(
        round=int(meta["round"]), num_commits=int(meta["num_commits"]),
        rejected=int(meta["rejected_commits"]),
        simulated_time=float(meta["simulated_time"]),
        windows_done=[int(w) for w in meta["windows_done"]],
        windows_run=[int(w) for w in meta["windows_run"]],
        pending=[None if p is None else Pending(
            float(p[0]), float(p[1]), tuple(float(a) for a in p[2]),
            int(p[3]), int(p[4]) if len(p) > 4 else communication_window)
                 for p in meta["pending"]],
        rejected_in_a_row=[int(w) for w in meta["rejected_in_a_row"]])
