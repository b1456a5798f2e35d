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


def test_sliding_mean_and_thesis_efficiency_by_hand():
  # The thesis' smoothing: 5 s windows [t0 + k, t0 + k + 5) moved by 1 s
  # (window / 5), from each run's first sample t0, stamped at their start.
  # a: t0 = 3, offsets 0, 1, 3, 6, 7, 13 hold 0.2, 0.4, 0.6, 0.8, 1.0, 1.0.
  #   k=0 [0,5): .2 .4 .6 -> .4    k=1 [1,6): .4 .6 -> .5
  #   k=2 [2,7): .6 .8 -> .7       k=3 [3,8): .6 .8 1 -> .8
  #   k=4..6: .8 1 -> .9           k=7 [7,12): 1 -> 1
  #   k=8 [8,13): empty, skipped   k=9..13: the sample at 13 -> 1
  a = ([3, 4, 6, 9, 10, 16], [0.2, 0.4, 0.6, 0.8, 1.0, 1.0])
  t, m = metrics.sliding_mean(*a, window=5.0)
  np.testing.assert_array_equal(t, [3, 4, 5, 6, 7, 8, 9, 10, 12, 13, 14, 15,
                                    16])
  np.testing.assert_allclose(m, [0.4, 0.5, 0.7, 0.8, 0.9, 0.9, 0.9, 1.0, 1.0,
                                 1.0, 1.0, 1.0, 1.0], rtol=0, atol=1e-12)
  # b: t0 = 0, offsets 0, 2, 4, 8, 11 hold 0.4, 0.6, 0.8, 0.8, 0.6.
  #   k=0 [0,5): .4 .6 .8 -> .6    k=1,2: .6 .8 -> .7
  #   k=3 [3,8): .8 -> .8          k=4 [4,9): .8 .8 -> .8
  #   k=5,6: .8 -> .8              k=7,8: .8 .6 -> .7
  #   k=9..11: .6 -> .6
  b = ([0, 2, 4, 8, 11], [0.4, 0.6, 0.8, 0.8, 0.6])
  t, m = metrics.sliding_mean(*b, window=5.0, stride=1.0)
  np.testing.assert_array_equal(t, np.arange(12))
  np.testing.assert_allclose(m, [0.6, 0.7, 0.7, 0.8, 0.8, 0.8, 0.8, 0.7, 0.7,
                                 0.6, 0.6, 0.6], rtol=0, atol=1e-12)
  # Each curve from its own start: a on [0, 13], b on [0, 11]; m = 11.
  # ∫a = .45 + .6 + .75 + .85 + .9 + .9 + .95 + 2 (7 to 9) + 1 + 1 = 9.4
  # ∫b = .65 + .7 + .75 + .8 + .8 + .8 + .75 + .7 + .65 + .6 + .6 = 7.8
  assert abs(metrics.thesis_efficiency(*a, *b) - 9.4 / 7.8) < 1e-9
  assert abs(metrics.thesis_efficiency(*b, *a) - 7.8 / 9.4) < 1e-9
  # A stride of its own: windows [0,5), [2,7), ... of b; stamps 0..10.
  t, m = metrics.sliding_mean(*b, window=5.0, stride=2.0)
  np.testing.assert_array_equal(t, [0, 2, 4, 6, 8, 10])
  np.testing.assert_allclose(m, [0.6, 0.7, 0.8, 0.8, 0.7, 0.6], atol=1e-12)


@pytest.mark.parametrize(
    "kwargs, message",
    [({"window": 0.0}, "window"), ({"window": np.inf}, "window"),
     ({"stride": 0.0}, "stride"), ({"stride": 6.0}, "stride")])
def test_sliding_mean_rejects_bad_windows(kwargs, message):
  with pytest.raises(ValueError, match=message):
    metrics.sliding_mean([0, 1], [1, 1], **{"window": 5.0, **kwargs})


def test_thesis_efficiency_needs_curves_longer_than_one_stride():
  # Every sample within the first stride: one window, m = 0.
  with pytest.raises(ValueError, match="beyond t = 0"):
    metrics.thesis_efficiency([0, 0.5], [1, 1], [0, 9], [1, 1], window=5.0)


@pytest.mark.parametrize(
    "accuracies, num_classes, non_finite, expected",
    [
        # Diverged: non-finite, whatever the curve.
        ([0.1, 0.5, 0.95, 0.96], 10, True, "diverged"),
        ([0.1, 0.9, np.nan], 10, False, "diverged"),
        ([], 10, True, "diverged"),
        # Fell from its peak to chance (0.1) + 5 points or below, to the end.
        ([0.1, 0.9, 0.12, 0.11], 10, False, "diverged"),
        ([0.1, 0.9, 0.15], 10, False, "diverged"),  # Exactly at the bound.
        ([0.1, 0.9, 0.0], 10, False, "diverged"),  # Below chance.
        ([0.5, 0.8, 0.55], 2, False, "diverged"),
        # Fell back but recovered by the end: not diverged.
        ([0.1, 0.9, 0.1, 0.89], 10, False, "converged"),
        # Just above the bound, far below the peak.
        ([0.1, 0.9, 0.16], 10, False, "inconclusive"),
        # Never above chance + 5 points: it did not fall from anywhere.
        ([0.1, 0.1, 0.1], 10, False, "inconclusive"),
        ([0.1, 0.15, 0.1], 10, False, "inconclusive"),
        # Converged: within 2 points of the peak, 50 points above chance.
        ([0.1, 0.5, 0.9, 0.88], 10, False, "converged"),
        ([0.1, 0.5, 0.9, 0.879], 10, False, "inconclusive"),
        ([0.1, 0.6], 10, False, "converged"),  # Exactly 50 points up.
        ([0.1, 0.599], 10, False, "inconclusive"),
        ([0.5, 1.0], 2, False, "converged"),
        ([0.5, 0.99], 2, False, "inconclusive"),  # 49 points above chance.
        ([0.97], 10, False, "converged"),
        ([], 10, False, "inconclusive"),
    ])
def test_convergence_rule(accuracies, num_classes, non_finite, expected):
  assert metrics.convergence(accuracies, num_classes, non_finite) == expected


def test_convergence_needs_two_classes():
  with pytest.raises(ValueError, match="num_classes"):
    metrics.convergence([0.5], 1)
