"""The one reader of a study's runs: each run's figures, by `RunSpec`.

A run counts once it has completed (`experiments.rundirs.completed`); one below
`budget.MIN_WINDOWS` windows per worker is never shown. A completed run is
refused, left out and named (`Results.refused`) when it is not its cell's
(`identity.mismatch`: its config.json differs from the design) or its files
disagree (`experiments.curves.read_run`). Every figure the report prints
comes from `Figures`, so the sections agree on what "training accuracy" or
"time" means.
"""

import os
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from agn_jax import metrics
from experiments import compare
from experiments import curves
from experiments import rundirs
from experiments.report import design
from experiments.report import identity


class Figures(NamedTuple):
  """What the report shows of one completed run.

  Attributes:
    run: the run as `experiments.curves` reads it.
    test_accuracy: the center's final test accuracy.
    train_accuracy: the workers' training accuracy at the end, as the
      thesis' "Acc." (the last entry of dist-keras' worker history): the
      mean over workers of each one's last mini-batch accuracy.
    seconds: the run's time on its own clock: modeled seconds of the
      simulator's cluster, or seconds since the start barrier for real
      processes.
    time_base: "simulated" or "training".
    staleness: every commit's staleness.
    windows: commits per worker (the mean).
    convergence: `metrics.convergence` of the center.
  """
  run: curves.Run
  test_accuracy: Optional[float]
  train_accuracy: Optional[float]
  seconds: Optional[float]
  time_base: str
  staleness: np.ndarray
  windows: float
  convergence: str


def time_base(run: curves.Run) -> str:
  return "simulated" if "simulated" in curves.time_bases(run) else "training"


def final_train_accuracy(run: curves.Run) -> Optional[float]:
  """Mean over workers of their last mini-batch's accuracy."""
  return final_train_metric(run, "accuracy")


def final_train_metric(run: curves.Run, metric: str) -> Optional[float]:
  """Mean over workers of `metric` on their last mini-batch (`step_<metric>` of their last commits)."""
  commits = run.commits
  steps_of = commits.get(f"step_{metric}")
  if not len(commits["worker"]) or steps_of is None:
    return None
  last = {}
  for worker, clock, steps in zip(commits["worker"], commits["clock"],
                                  steps_of):
    if len(steps) and (worker not in last or clock > last[worker][0]):
      last[worker] = (clock, float(steps[-1]))
  return float(np.mean([a for _, a in last.values()])) if last else None


def figures(run: curves.Run) -> Figures:
  base = time_base(run)
  seconds = run.summary.get(
      "simulated_seconds" if base == "simulated" else "training_seconds")
  if seconds is None and base == "simulated" and len(run.commits["sim_time"]):
    # A run resumed after its last commit has no sim time of its own sitting.
    seconds = float(np.nanmax(run.commits["sim_time"]))
  st = run.commits["staleness"]
  st = st[np.isfinite(st)].astype(np.int64)
  workers = max(int(run.summary.get("num_workers") or 1), 1)
  # The paper's figures are classification's: its metric is the accuracy.
  return Figures(run, compare.final_metric(run, "accuracy"),
                 final_train_accuracy(run),
                 float(seconds) if isinstance(seconds, (int, float)) else None,
                 base, st, len(run.commits["worker"]) / workers,
                 curves.convergence(run))


class Results:
  """The completed runs of a study, read once each."""

  def __init__(self, p: design.Preset, study_dir: str):
    self.preset = p
    self.dir = study_dir
    self._cache: Dict[str, Optional[Figures]] = {}
    # Completed runs left out, by path: why, in one line.
    self.refused: Dict[str, str] = {}

  def get(self, spec: design.RunSpec) -> Optional[Figures]:
    """The run's figures, or None if it has not completed or is refused (`refusal`)."""
    path = spec.path(self.dir)
    if path not in self._cache:
      found = None
      if rundirs.completed(path):
        why = identity.mismatch(spec, path)
        if why is None:
          try:
            found = figures(curves.read_run(path))
          except (curves.RunDirError, OSError, ValueError) as e:
            why = " ".join(str(e).split())
        if why is not None:
          self.refused[path] = why
      self._cache[path] = found
    return self._cache[path]

  def refusal(self, spec: design.RunSpec) -> Optional[str]:
    """Why the cell's completed run is left out (not the cell's, or its files disagree), or None."""
    self.get(spec)
    return self.refused.get(spec.path(self.dir))

  def status(self, spec: design.RunSpec) -> str:
    """"completed", "refused", "failed", "started" or "not run"."""
    path = spec.path(self.dir)
    if self.get(spec) is not None:
      return "completed"
    if path in self.refused:
      return "refused"
    if not os.path.isdir(path):
      return "not run"
    summary = rundirs.read_summary(path) or {}
    return "failed" if summary.get("outcome") == "failed" else "started"

  def find(self, section: str, strategy: str, cell: Tuple[int, int],
           variant: str = "") -> List[design.RunSpec]:
    """The preset's specs of a section, strategy, cell and variant, over seeds."""
    return [r for r in self.preset.runs
            if r.section == section and r.strategy == strategy and
            r.cell == cell and r.variant == variant]

  def seeds(self, section: str, strategy: str, cell: Tuple[int, int],
            variant: str = "") -> List[Figures]:
    """The completed runs of every seed, in seed order."""
    found = [self.get(s) for s in self.find(section, strategy, cell, variant)]
    return [f for f in found if f is not None]

  def pairs(self, section: str, cell: Tuple[int, int], variant: str = ""
            ) -> List[Tuple[Figures, Figures]]:
    """(AGN, AEASGD) of every seed where both completed."""
    a = {s.seed: self.get(s) for s in self.find(
        section, design.REFERENCE, cell, variant)}
    b = {s.seed: self.get(s) for s in self.find(
        section, design.BASELINE, cell, variant)}
    return [(a[k], b[k]) for k in sorted(a)
            if a[k] is not None and b.get(k) is not None]

  def ledger_seconds(self, ledger: Dict[str, dict], section: str) -> float:
    return float(sum(e.get("seconds", 0.0) for k, e in ledger.items()
                     if k.split("/", 1)[0] == section))


def efficiency(a: Figures, b: Figures, curve: str, window: float
               ) -> Dict[str, Optional[float]]:
  """E(a, b) on the workers' training accuracy (`curve`) and the center's test accuracy."""
  base = a.time_base if a.time_base == b.time_base else "training"
  try:
    e = compare.efficiency(a.run, b.run, window, base, curve)
  except ValueError:
    return {"train": None, "test": None}
  return {"train": e["train"], "test": e["test"]}


class Estimate(NamedTuple):
  """A mean over seeds with its 95 % confidence interval (None for one seed)."""
  mean: Optional[float]
  half_width: Optional[float]
  count: int


# Student's t, 0.975 quantile, for 1 … 9 degrees of freedom.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262)


def estimate(values: Sequence[Optional[float]]) -> Estimate:
  """Mean ± the t-interval's half width over the known values.

  >>> e = estimate([0.9, 1.0, 1.1])
  >>> round(e.mean, 3), round(e.half_width, 3), e.count
  (1.0, 0.248, 3)
  >>> estimate([0.5]).half_width is None
  True
  """
  known = np.asarray([v for v in values if v is not None], np.float64)
  if not len(known):
    return Estimate(None, None, 0)
  if len(known) == 1:
    return Estimate(float(known[0]), None, 1)
  t = _T975[min(len(known) - 2, len(_T975) - 1)] if len(known) <= 10 else 1.96
  return Estimate(float(known.mean()),
                  float(t * known.std(ddof=1) / np.sqrt(len(known))),
                  len(known))


def staleness_summary(st: np.ndarray) -> Dict[str, object]:
  return metrics.staleness_stats(st) if len(st) else {}
