"""Tests for agn_jax.metrics against integrals worked out by hand."""

import numpy as np
import pytest

from agn_jax import metrics


def test_efficiency_of_a_run_with_itself_is_exactly_one():
  rng = np.random.default_rng(0)
  times = np.cumsum(rng.uniform(0.1, 2.0, 50))
  values = rng.uniform(0.0, 1.0, 50)
  assert metrics.temporal_efficiency(times, values, times, values) == 1.0


@pytest.mark.parametrize(
    "a, b, expected",
    [
        # f_a = t on [0, 2] integrates to 2, f_b = 1 integrates to 2.
        (([0, 2], [0, 2]), ([0, 2], [1, 1]), 1.0),
        (([0, 2], [0.5, 0.5]), ([0, 2], [1, 1]), 0.5),
        # a lasts 2 s, b 10 s: cut at 2, where b's ramp t/10 integrates to 0.2.
        (([0, 1, 2], [1, 1, 1]), ([0, 10], [0, 1]), 2 / 0.2),
        # b is cut between its samples: ∫₀^1 of 4t = 2, ∫₀^1 of 1 = 1.
        (([0, 1], [1, 1]), ([0, 2], [0, 8]), 0.5),
        # Trapezoids: a = (0,0),(1,1),(3,1) → 0.5 + 2 = 2.5; b = 1 → 3.
        (([0, 1, 3], [0, 1, 1]), ([0, 3], [1, 1]), 2.5 / 3),
    ],
    ids=["ramp-vs-const", "half", "cut-at-a", "cut-inside-b", "trapezoid"])
def test_efficiency_against_hand_integrals(a, b, expected):
  assert metrics.temporal_efficiency(*a, *b) == pytest.approx(expected)


def test_curves_starting_late_ramp_up_from_initial_value():
  # a = 1 sampled from t=1; (0, 0) is prepended: 0.5 + 1 = 1.5 on [0, 2].
  a = ([1, 2], [1, 1])
  b = ([0, 2], [1, 1])
  assert metrics.temporal_efficiency(*a, *b) == pytest.approx(0.75)
  assert metrics.temporal_efficiency(
      *a, *b, initial_value=None) == pytest.approx(1.0)
  assert metrics.temporal_efficiency(
      *a, *b, initial_value=0.5) == pytest.approx(1.75 / 2)


@pytest.mark.parametrize(
    "a, b, message",
    [
        (([], []), ([0, 1], [1, 1]), "empty"),
        (([0, 1], [1]), ([0, 1], [1, 1]), "equal length"),
        (([0, 2, 1], [1, 1, 1]), ([0, 1], [1, 1]), "non-decreasing"),
        (([0, 1], [1, np.nan]), ([0, 1], [1, 1]), "finite"),
        (([0, 1], [1, 1]), ([0, 1], [0, 0]), "integrates to 0"),
        (([0], [1]), ([0, 1], [1, 1]), "beyond t = 0"),
    ])
def test_efficiency_rejects_bad_curves(a, b, message):
  with pytest.raises(ValueError, match=message):
    metrics.temporal_efficiency(*a, *b)


def test_windowed_mean():
  times = [0.0, 1.0, 4.9, 5.0, 7.0, 16.0, 19.0]
  values = [1.0, 2.0, 3.0, 10.0, 20.0, 5.0, 7.0]
  t, m = metrics.windowed_mean(times, values, window=5.0)
  np.testing.assert_allclose(t, [4.9, 7.0, 19.0])
  np.testing.assert_allclose(m, [2.0, 15.0, 6.0])
  t, m = metrics.windowed_mean([3.0], [0.25])
  assert t.tolist() == [3.0] and m.tolist() == [0.25]


def test_windowed_mean_rejects_bad_input():
  with pytest.raises(ValueError, match="window"):
    metrics.windowed_mean([0, 1], [1, 1], window=0)
  with pytest.raises(ValueError, match="empty"):
    metrics.windowed_mean([], [])


def test_staleness_stats():
  stats = metrics.staleness_stats([2, 0, 2, 5, 1])
  assert stats == {"count": 5, "mean": 2.0, "median": 2.0, "max": 5,
                   "histogram": [1, 1, 2, 0, 0, 1]}
  assert metrics.staleness_stats(np.array([3.0]))["histogram"] == [0, 0, 0, 1]


@pytest.mark.parametrize("bad, message", [([], "non-empty"),
                                          ([1, -1], "non-negative"),
                                          ([0.5], "integers")])
def test_staleness_stats_rejects_bad_input(bad, message):
  with pytest.raises(ValueError, match=message):
    metrics.staleness_stats(bad)
