"""One exchange, two paths: `strategies.exchange` on one host against the real worker and server loops, to the last bit.

The simulator's round sequences each commit with `strategies.exchange`; the
processes and Ray backends split the same half-steps between a worker's
process and the server's. Here the real loops run as threads
(`InProcessBackend`) with `context.Turns` forcing one schedule: 3 workers, 4
commits each, interleaved, each worker pulled and received before the next
commit. A replay calls `exchange` once per commit of that schedule, with the
workers' windows run by the same window kernel on the same samples. Every
registered strategy, and two written outside the package: one whose commit
reads the center it pulled, one that pulls before its commit and averages
with the center it receives.
"""

import dataclasses

import numpy as np
import pytest

from agn_jax import build, strategies
import exchange_replay as schedule
from fifth_strategy import AVERAGING_NAME, NAME


class _ReceivesAfterApply(strategies.Strategy):
  """The contract broken: the worker receives the center after the apply, even when it pulled before its commit."""

  def received_center(self, accepted, center, used):
    del accepted, used
    return center


def _bits(vector):
  return np.asarray(vector, np.float32).view(np.uint32)


# A synchronous strategy has no asynchronous exchange, and no real loops: its
# round is tests/unit/test_synchronous.py's.
@pytest.mark.parametrize("name", tuple(
    s for s in strategies.available() if not strategies.is_synchronous(s)) +
                         (NAME, AVERAGING_NAME))
def test_the_exchange_and_the_real_loops_agree_to_the_last_bit(tmp_path,
                                                               name):
  config = schedule.config(tmp_path, name)
  threads, rows, _ = schedule.threads(config)
  steps = schedule.replay(config)
  replayed = steps[-1].after
  replayed_staleness = [step.staleness for step in steps]
  assert [row["staleness"] for row in rows] == replayed_staleness
  # The schedule interleaves: a worker that pulled before its window
  # commits against a center that moved since (one that pulls before its
  # commit sees none land in between, on either path).
  pulls_first = build.build_strategy(config).pull_before_commit
  assert (max(replayed_staleness) > 0) != pulls_first
  np.testing.assert_array_equal(_bits(threads), _bits(replayed))
  assert np.all(np.isfinite(replayed))


def test_the_comparison_sees_a_broken_contract(tmp_path):
  # The averaging strategy pulls before its commit: a replay that hands it
  # the center after the apply trains differently, so the comparison above
  # can fail.
  config = schedule.config(tmp_path, AVERAGING_NAME)
  right = schedule.replay(config)[-1].after
  s = build.build_strategy(config)
  broken = _ReceivesAfterApply(**{f.name: getattr(s, f.name)
                                  for f in dataclasses.fields(s)})
  wrong = schedule.replay(config, broken)[-1].after
  assert np.abs(wrong - right).max() > 1e-6
