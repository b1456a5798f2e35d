"""A run's budget in windows, and the evaluations it gets from them.

The arithmetic the study's design and its sections share: how many whole
communication windows one worker's share of a run holds, which cells hold
enough to be shown, where AEASGD's α runs a second time, and how often a run
evaluates its center so that the E test has the evaluations its rule needs.
A run here is anything with a `RunSpec`'s fields (`design.RunSpec`).

Example:
  >>> from experiments.report.design import RunSpec
  >>> run = RunSpec("grid", "agn", 40, 40, 0, 40.0, ())
  >>> windows_per_worker(run, 60000, 128)
  11
  >>> with_evaluations(run, 60000, 128).flags
  ('--eval_every_rounds=1', '--eval_every_commits=17')
"""

from typing import Optional, Sequence, Tuple

from agn_jax import shares

# Each cell the report shows holds at least this many windows per worker
# (the paper's grid had at least 11).
MIN_WINDOWS = 5
# Every grid run evaluates its center at least this often (the E test rule
# needs 20), where its windows allow.
EVALUATIONS = 25


def windows_per_worker(run, train_examples: int, batch_size: int) -> int:
  """Whole windows in one worker's share of the run's data."""
  return shares.windows_per_worker(train_examples, run.num_workers,
                                   run.epochs, run.communication_window,
                                   batch_size)


def gap_cell(cells: Sequence[Tuple[int, int]], epochs: float,
             train_examples: int, batch_size: int) -> Optional[Tuple[int, int]]:
  """Where to vary AEASGD's α a second time, chosen before any run.

  The thesis' AEASGD and ours are expected to part most with many workers
  (the center moves by α of one worker's distance per commit, so it lags
  further behind n workers): of the preset's grid cells, the one with the
  most workers, then the longest window, whose share still holds
  `MIN_WINDOWS` windows a worker at `epochs`.

  >>> gap_cell([(40, 40), (10, 10), (40, 10)], 10.0, 60000, 128)
  (40, 10)
  """
  for n, l in sorted(cells, reverse=True):
    if shares.windows_per_worker(train_examples, n, epochs, l,
                                 batch_size) >= MIN_WINDOWS:
      return n, l
  return None


def evaluation_flags(run, train_examples: int,
                     batch_size: int) -> Tuple[str, ...]:
  """The evaluation cadence giving the run at least `EVALUATIONS` evaluations.

  A worker commits at most once a round, so a run has at least as many
  rounds as windows a worker: `--eval_every_rounds` where those are
  `EVALUATIONS` or more; else every round and after every
  (commits // `EVALUATIONS`)-th commit too (`--eval_every_commits`, where a
  round then ends).

  >>> from experiments.report.design import RunSpec
  >>> evaluation_flags(RunSpec("grid", "agn", 10, 10, 0, 40.0, ()),
  ...                  60000, 128)
  ('--eval_every_rounds=7',)
  >>> evaluation_flags(RunSpec("grid", "agn", 40, 40, 0, 40.0, ()),
  ...                  60000, 128)
  ('--eval_every_rounds=1', '--eval_every_commits=17')
  """
  windows = windows_per_worker(run, train_examples, batch_size)
  if windows >= EVALUATIONS:
    return (f"--eval_every_rounds={windows // EVALUATIONS}",)
  commits = windows * run.num_workers
  return ("--eval_every_rounds=1",
          f"--eval_every_commits={max(1, commits // EVALUATIONS)}")


def with_evaluations(run, train_examples: int, batch_size: int):
  """`run` with `evaluation_flags` added to its flags."""
  return run._replace(flags=run.flags + evaluation_flags(
      run, train_examples, batch_size))
