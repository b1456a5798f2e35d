"""A run's files checked against each other, for the one reader of runs (`experiments.curves.read_run`).

summary.json's fields must have the types the runtime writes them with, and
metrics.jsonl must hold what the summary says the run did: as many commit
rows as `num_commits`, the last of them at that clock (and at the summary's
`training_seconds`, for a run that never resumed), and the final evaluation (`final_clock`,
`final_test_loss`, `final_test_<metric>`). A file cut short, or one copied
from another run, disagrees; `agn-compare`, `agn-sweep` and the report then
refuse the run, naming what disagrees. The checks only read what they are
given: each returns the problem in words, or nothing.
"""

import math
from typing import Dict, List, Optional, Sequence

# The summary.json fields the readers use, by what each must be when present
# (null stands for "not measured" in every one of them).
COUNT, NUMBER, FLAG, TEXT, OBJECT, COUNTS = (
    "a whole number >= 0", "a number", "true or false", "a string",
    "an object", "a list of whole numbers >= 0")
SUMMARY_FIELDS = {
    **dict.fromkeys(
        ("num_commits", "rejected_commits", "final_clock", "expected_commits",
         "commits_acknowledged", "num_workers", "num_classes",
         "bytes_committed", "bytes_pulled", "worker_restarts",
         "last_checkpoint", "resumed_from_commit", "max_staleness",
         "instrumented_commits"), COUNT),
    **dict.fromkeys(
        ("final_test_loss", "training_seconds", "wall_seconds",
         "simulated_seconds", "startup_seconds", "mean_staleness",
         "samples_per_second", "implicit_momentum", "theory_momentum"),
        NUMBER),
    **dict.fromkeys(("completed", "interrupted"), FLAG),
    **dict.fromkeys(("outcome", "failure", "strategy", "backend", "dataset",
                     "task", "efficiency_metric", "data_assignment"), TEXT),
    **dict.fromkeys(("metrics", "config"), OBJECT),
    **dict.fromkeys(("worker_commits", "samples_per_worker"), COUNTS),
}
# A final evaluation's metrics (`final_test_<name>`) are numbers too.
FINAL_PREFIX = "final_test_"
# How far the last commit row's time may be from `training_seconds`: the
# rows keep times to the microsecond.
SECONDS_TOLERANCE = 0.01


def _is_count(value) -> bool:
  return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_number(value) -> bool:
  return isinstance(value, (int, float)) and not isinstance(value, bool)


_TESTS = {
    COUNT: _is_count,
    NUMBER: _is_number,
    FLAG: lambda v: isinstance(v, bool),
    TEXT: lambda v: isinstance(v, str),
    OBJECT: lambda v: isinstance(v, dict),
    COUNTS: lambda v: isinstance(v, list) and all(
        x is None or _is_count(x) for x in v),
}


def summary_type_error(summary: Dict[str, object]) -> Optional[str]:
  """The first field of `summary` whose value has the wrong type, in words, or None.

  Example:
    >>> summary_type_error({"num_commits": "16"})
    "field 'num_commits' is '16', not a whole number >= 0"
    >>> summary_type_error({"num_commits": 16, "final_test_accuracy": None})
  """
  for name, value in summary.items():
    what = SUMMARY_FIELDS.get(name) or (
        NUMBER if name.startswith(FINAL_PREFIX) else None)
    if what is not None and value is not None and not _TESTS[what](value):
      return f"field {name!r} is {value!r}, not {what}"
  return None


def _same(a, b) -> bool:
  """Two numbers as written by one run: equal, or both non-finite alike."""
  if not (_is_number(a) and _is_number(b)):
    return True  # Null is "not measured": nothing to compare.
  if math.isnan(a) or math.isnan(b):
    return math.isnan(a) and math.isnan(b)
  return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def _final_evaluation(summary: Dict[str, object],
                      evals: Sequence[dict]) -> Optional[str]:
  """Whether an eval row holds the summary's final evaluation, in words if none does."""
  clock = summary.get("final_clock")
  if not _is_count(clock):
    return None
  at_clock = [e for e in evals if e.get("clock") == clock]
  clocks = [e["clock"] for e in evals if _is_number(e.get("clock"))]
  if not at_clock:
    last = f"the last is at clock {max(clocks)}" if clocks else "there are none"
    return (f"summary.json's final evaluation (final_clock {clock}) has no "
            f"eval row ({last})")
  fields = [f for f in summary if f.startswith(FINAL_PREFIX)]
  if any(all(_same(summary[f], e.get(f[len(FINAL_PREFIX):])) for f in fields)
         for e in at_clock):
    return None
  row = at_clock[-1]
  differs = next(f for f in fields
                 if not _same(summary[f], row.get(f[len(FINAL_PREFIX):])))
  return (f"summary.json's {differs} is {summary[differs]!r}, its eval row at "
          f"clock {clock} says {row.get(differs[len(FINAL_PREFIX):])!r}")


def disagreements(summary: Dict[str, object], commits: Sequence[dict],
                  evals: Sequence[dict]) -> List[str]:
  """Where metrics.jsonl's rows and summary.json disagree, one phrase each.

  Args:
    summary: summary.json ({} when the run has none: nothing to check).
    commits: the commit rows of metrics.jsonl.
    evals: its eval rows.

  Returns:
    The disagreements: the number of commit rows against `num_commits`,
    the last commit row's clock against it, that row's time against
    `training_seconds` (a run that never resumed: a resumed one's counts
    its last sitting alone), and the eval row of `final_clock` against the
    summary's final test values. A field the summary does not hold (null,
    or a run written before it) is not checked.

  Example:
    >>> rows = [{"clock": c, "time": float(c)} for c in (1, 2)]
    >>> disagreements({"num_commits": 2, "training_seconds": 2.0}, rows, [])
    []
    >>> disagreements({"num_commits": 6}, rows, [])
    ['2 commit rows, summary.json: num_commits 6', \
'the last commit row is at clock 2, summary.json: num_commits 6']
  """
  found = []
  applied = summary.get("num_commits")
  if _is_count(applied) and len(commits) != applied:
    found.append(f"{len(commits)} commit rows, summary.json: num_commits "
                 f"{applied}")
  clocked = [c for c in commits if _is_number(c.get("clock"))]
  last = max(clocked, key=lambda c: c["clock"]) if clocked else None
  if _is_count(applied) and applied and (last is None or
                                         last["clock"] != applied):
    where = f"at clock {last['clock']:g}" if last else "missing"
    found.append(f"the last commit row is {where}, summary.json: num_commits "
                 f"{applied}")
  seconds = summary.get("training_seconds")
  # A resumed run's rows go on from its earlier sittings' time, while
  # `training_seconds` counts its last sitting alone.
  resumed = summary.get("resumed_from_commit") is not None
  if (_is_number(seconds) and not resumed and last is not None and
      _is_number(last.get("time")) and
      abs(last["time"] - seconds) > SECONDS_TOLERANCE + 1e-6 * seconds):
    found.append(f"the last commit row is at {last['time']:g} s, summary.json:"
                 f" training_seconds {seconds:g}")
  final = _final_evaluation(summary, evals)
  if final:
    found.append(final)
  return found
