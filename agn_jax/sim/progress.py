"""The simulation's progress on the host: its counters and the windows that await their commits, and their checkpoint form.

Example:
  >>> p = Progress.start(2)
  >>> p.pending[1] = Pending(0.5, {"accuracy": 0.75},
  ...                        {"accuracy": (0.5, 1.0)}, round=0, local_updates=2)
  >>> Progress.from_meta(p.to_meta(), communication_window=2) == p
  True
"""

import dataclasses
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import numpy as np

from agn_jax import wire
from agn_jax.errors import check_rejected_in_a_row
from agn_jax.sim.schedule import Handled


class Pending(NamedTuple):
  """A window that ran and awaits its commit: what its `schedule.Handled` will say.

  Attributes:
    loss: the window's mean training loss.
    metrics: its means of the task's metrics, `{name: value}`.
    step_metrics: each local step's value of the step metric (the task's
      efficiency metric), `{name: values}`; empty if the loss has none.
    round: the round the window ran in.
    local_updates: its local steps.
  """
  loss: float
  metrics: Dict[str, float]
  step_metrics: Dict[str, Tuple[float, ...]]
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

  def windows_ran(self, due: np.ndarray, lengths: np.ndarray, out) -> None:
    """The `due` workers' windows ran this round (`out`: its `engine.RoundRecords`); they await their commits."""
    for k in np.flatnonzero(due):
      self.pending[k] = Pending(
          loss=float(out.loss[k]),
          metrics={name: float(v[k]) for name, v in out.metrics.items()},
          step_metrics={name: tuple(v[k][:lengths[k]].tolist())
                        for name, v in out.step_metrics.items()},
          round=self.round, local_updates=int(lengths[k]))
      self.windows_run[k] += 1

  def commits_handled(self, plan, out, measuring=None) -> List[Handled]:
    """The round's commits (`plan`, as the server handled them in `out`), which end it.

    Args:
      plan: the round's `schedule.ScheduledCommit`s.
      out: the round's `engine.RoundRecords`, as numpy arrays.
      measuring: the run's `measuring.Measuring`, or None.

    Returns:
      A `Handled` per commit, in order.

    Raises:
      Diverged: a worker's commits were rejected too many times in a row.
    """
    clock, staleness, rejected = out.clock, out.staleness, out.rejected
    records = []
    for i, c in enumerate(plan):
      k = c.worker
      ran = self.pending[k]
      self.pending[k] = None
      measured = None
      if measuring is not None and not rejected[i]:
        measured = measuring.of_commit(out.instruments, i, int(clock[i]))
      applied = 0 if rejected[i] else 1
      pulled = (int(clock[i]) - applied - int(staleness[i])
                if out.pulled_clock is None else int(out.pulled_clock[i]))
      meta = wire.CommitMeta(
          worker=k, clock=pulled,
          loss=ran.loss, metrics=ran.metrics, time=float(c.window_end),
          window_start=float(c.window_start),
          step_metrics=ran.step_metrics, local_updates=ran.local_updates)
      records.append(Handled(
          meta, clock=int(clock[i]), staleness=int(staleness[i]),
          rejected=bool(rejected[i]), simulated_time=float(c.applied),
          round=self.round, window=self.windows_done[k],
          window_round=ran.round, instruments=measured))
      self.windows_done[k] += 1
      self.rejected += int(rejected[i])
      self.rejected_in_a_row[k] = (self.rejected_in_a_row[k] + 1
                                   if rejected[i] else 0)
    self.round += 1
    self.num_commits += len(plan)
    self.simulated_time = max(self.simulated_time, records[-1].simulated_time)
    for k, in_a_row in enumerate(self.rejected_in_a_row):
      check_rejected_in_a_row(in_a_row, worker=k, records=records)
    return records

  def to_meta(self) -> Dict[str, Any]:
    """The JSON-able form a checkpoint's metadata holds (`pending` as `[loss, metrics, step metrics, round, local steps]` lists)."""
    meta = dataclasses.asdict(self)
    meta["rejected_commits"] = meta.pop("rejected")
    meta["pending"] = [None if p is None else [
        p.loss, dict(p.metrics),
        {name: list(v) for name, v in p.step_metrics.items()}, p.round,
        p.local_updates] for p in self.pending]
    return meta

  @classmethod
  def from_meta(cls, meta: Dict[str, Any],
                communication_window: int) -> "Progress":
    """`to_meta` undone.

    A pending window of an older checkpoint without its local steps had λ;
    one written before tasks had names holds classification's accuracy and
    step accuracies as a number and a list.
    """

    def number(value) -> float:
      return float("nan") if value is None else float(value)

    def pending(p) -> Pending:
      metrics, steps = p[1], p[2]
      if not isinstance(metrics, dict):  # Before tasks: the accuracy.
        metrics = {} if metrics is None else {"accuracy": metrics}
        steps = {"accuracy": steps} if steps else {}
      return Pending(
          number(p[0]), {k: number(v) for k, v in metrics.items()},
          {k: tuple(number(a) for a in v) for k, v in steps.items()},
          int(p[3]), int(p[4]) if len(p) > 4 else communication_window)

    return cls(
        round=int(meta["round"]), num_commits=int(meta["num_commits"]),
        rejected=int(meta["rejected_commits"]),
        simulated_time=float(meta["simulated_time"]),
        windows_done=[int(w) for w in meta["windows_done"]],
        windows_run=[int(w) for w in meta["windows_run"]],
        pending=[None if p is None else pending(p)
                 for p in meta["pending"]],
        rejected_in_a_row=[int(w) for w in meta["rejected_in_a_row"]])
