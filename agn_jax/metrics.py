"""Temporal efficiency, windowed training curves and staleness statistics."""

from typing import Dict, Optional, Sequence, Tuple

import numpy as np


def _curve(times, values, name: str) -> Tuple[np.ndarray, np.ndarray]:
  times = np.asarray(times, np.float64)
  values = np.asarray(values, np.float64)
  if times.ndim != 1 or values.ndim != 1 or len(times) != len(values):
    raise ValueError(f"{name}: times and values must be 1-D and of equal "
                     f"length, got shapes {times.shape} and {values.shape}")
  if not len(times):
    raise ValueError(f"{name}: the curve is empty")
  if not (np.all(np.isfinite(times)) and np.all(np.isfinite(values))):
    raise ValueError(f"{name}: times and values must be finite")
  if times[0] < 0 or np.any(np.diff(times) < 0):
    raise ValueError(f"{name}: times must be non-negative and non-decreasing")
  return times, values


def _integral(times: np.ndarray, values: np.ndarray, end: float) -> float:
  """∫₀^end of the piecewise-linear curve through (times, values)."""
  inside = times < end
  t = np.append(times[inside], end)
  v = np.append(values[inside], np.interp(end, times, values))
  return float(np.sum(np.diff(t) * (v[1:] + v[:-1]) / 2))


def temporal_efficiency(
    times_a: Sequence[float],
    values_a: Sequence[float],
    times_b: Sequence[float],
    values_b: Sequence[float],
    *,
    initial_value: Optional[float] = 0.0,
) -> float:
  """E(a, b) = ∫₀^m f_a dt / ∫₀^m f_b dt, m the shorter training time.

  Each curve is the linear interpolation of its samples; its training time is
  its last time. `E > 1` means run `a` reached good values sooner and held
  them (Hermans et al. 2017).

  A curve whose first sample comes after t = 0 gets a point
  `(0, initial_value)` in front: by default 0, i.e. a run earns nothing before
  its first measurement and its start-up time counts against it; pass
  `initial_value=None` to hold the first value back to t = 0 instead.

  Args:
    times_a: wall-clock times of run `a` (seconds from its start).
    values_a: metric of run `a` (e.g. accuracy) at those times.
    times_b: times of run `b`.
    values_b: metric of run `b`.
    initial_value: value assumed at t = 0 for a curve starting later, or None
      to extend its first value.

  Returns:
    The ratio of the integrals as a float.

  Raises:
    ValueError: for empty or malformed curves, m = 0, or ∫f_b = 0.

  Example:
    >>> temporal_efficiency([0, 2], [0.5, 0.5], [0, 2, 4], [1.0, 1.0, 1.0])
    0.5
  """
  curves = []
  for name, times, values in (("curve a", times_a, values_a),
                              ("curve b", times_b, values_b)):
    times, values = _curve(times, values, name)
    if times[0] > 0:
      start = values[0] if initial_value is None else float(initial_value)
      times, values = np.append(0.0, times), np.append(start, values)
    curves.append((times, values))
  end = min(curves[0][0][-1], curves[1][0][-1])
  if end <= 0:
    raise ValueError("temporal efficiency needs curves that last beyond t = 0")
  integral_a = _integral(*curves[0], end)
  integral_b = _integral(*curves[1], end)
  if integral_b == 0:
    raise ValueError(f"curve b integrates to 0 over [0, {end}]; the ratio is "
                     "undefined")
  return integral_a / integral_b


def windowed_mean(
    times: Sequence[float],
    values: Sequence[float],
    window: float = 5.0,
) -> Tuple[np.ndarray, np.ndarray]:
  """Averages a noisy curve over consecutive windows `[k w, (k+1) w)`.

  This is how the thesis smooths the workers' mini-batch accuracies before
  taking temporal efficiency. Each mean is stamped with the time of the last
  sample in its window, the moment it was known, so the smoothed curve never
  outlasts the run. Empty windows are skipped.

  Args:
    times: non-negative, non-decreasing sample times (seconds); samples from
      several workers may be merged first with a stable sort.
    values: the samples.
    window: window length in seconds.

  Returns:
    `(times, means)`, one entry per non-empty window.

  Example:
    >>> t, m = windowed_mean([0, 1, 6, 7], [0.0, 1.0, 2.0, 4.0], window=5.0)
    >>> t.tolist(), m.tolist()
    ([1.0, 7.0], [0.5, 3.0])
  """
  if not window > 0:
    raise ValueError(f"window must be positive, got {window}")
  times, values = _curve(times, values, "windowed_mean")
  index = np.floor(times / window).astype(np.int64)
  starts = np.flatnonzero(np.diff(index, prepend=-1))
  counts = np.diff(np.append(starts, len(times)))
  means = np.add.reduceat(values, starts) / counts
  return times[starts + counts - 1], means


def staleness_stats(staleness: Sequence[int]) -> Dict[str, object]:
  """Summarizes the staleness of commits (center updates since the pull).

  Args:
    staleness: non-negative integer staleness of each commit.

  Returns:
    `{"count", "mean", "median", "max", "histogram"}` as plain Python values;
    `histogram[s]` is the number of commits with staleness `s`.

  Example:
    >>> staleness_stats([0, 1, 1, 3])  # doctest: +NORMALIZE_WHITESPACE
    {'count': 4, 'mean': 1.25, 'median': 1.0, 'max': 3,
     'histogram': [1, 2, 0, 1]}
  """
  staleness = np.asarray(staleness)
  if staleness.ndim != 1 or not len(staleness):
    raise ValueError("staleness must be a non-empty 1-D sequence")
  if not np.issubdtype(staleness.dtype, np.integer):
    if not np.all(np.isfinite(staleness)) or np.any(
        staleness != np.round(staleness)):
      raise ValueError("staleness values must be integers")
    staleness = staleness.astype(np.int64)
  if staleness.min() < 0:
    raise ValueError(f"staleness must be non-negative, got {staleness.min()}")
  return {
      "count": int(len(staleness)),
      "mean": float(np.mean(staleness)),
      "median": float(np.median(staleness)),
      "max": int(np.max(staleness)),
      "histogram": np.bincount(staleness).astype(int).tolist(),
  }
