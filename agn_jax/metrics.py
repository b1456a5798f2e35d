"""Temporal efficiency, windowed training curves, a run's convergence and staleness statistics."""

import math
from typing import Dict, Optional, Sequence, Tuple

import numpy as np


def _curve(times, values, name: str,
           nonnegative: bool = True) -> Tuple[np.ndarray, np.ndarray]:
  times = np.asarray(times, np.float64)
  values = np.asarray(values, np.float64)
  if times.ndim != 1 or values.ndim != 1 or len(times) != len(values):
    raise ValueError(f"{name}: times and values must be 1-D and of equal "
                     f"length, got shapes {times.shape} and {values.shape}")
  if not len(times):
    raise ValueError(f"{name}: the curve is empty")
  if not (np.all(np.isfinite(times)) and np.all(np.isfinite(values))):
    raise ValueError(f"{name}: times and values must be finite")
  if nonnegative and times[0] < 0:
    raise ValueError(f"{name}: times must be non-negative")
  if np.any(np.diff(times) < 0):
    raise ValueError(f"{name}: times must be non-decreasing")
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
    higher_is_better: bool = True,
) -> float:
  """E(a, b) = ∫₀^m f_a dt / ∫₀^m f_b dt, m the shorter training time.

  Each curve is the linear interpolation of its samples; its training time is
  its last time. `E > 1` means run `a` reached good values sooner and held
  them (Hermans et al. 2017). For a metric lower-is-better (a loss, an
  error) E is `∫₀^m f_b dt / ∫₀^m f_a dt`, so that `E > 1` still means run
  `a` did better; such a curve is best given `initial_value=None` (a 0 in
  front would be its best value).

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
    higher_is_better: the metric's direction (`agn_jax.tasks.Metric`).

  Returns:
    The ratio of the integrals as a float.

  Raises:
    ValueError: for empty or malformed curves, m = 0, or a denominator of 0
      (∫f_b, or ∫f_a when lower is better).

  Example:
    >>> temporal_efficiency([0, 2], [0.5, 0.5], [0, 2, 4], [1.0, 1.0, 1.0])
    0.5
    >>> temporal_efficiency([0, 2], [0.5, 0.5], [0, 2, 4], [1.0, 1.0, 1.0],
    ...                     higher_is_better=False)  # Errors: a's is half.
    2.0
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
  if not higher_is_better:
    integral_a, integral_b = integral_b, integral_a
  if integral_b == 0:
    raise ValueError(f"curve {'b' if higher_is_better else 'a'} integrates "
                     f"to 0 over [0, {end}]; the ratio is undefined")
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


def sliding_mean(
    times: Sequence[float],
    values: Sequence[float],
    window: float = 5.0,
    stride: Optional[float] = None,
) -> Tuple[np.ndarray, np.ndarray]:
  """The thesis' smoothing: means over windows of `window` moved by `stride`.

  With `t₀` the first sample's time, window k covers `[t₀ + k·stride, t₀ +
  k·stride + window)` for k = 0, 1, …, ⌊(t_last − t₀) / stride⌋: the windows
  start at the first sample and the last one is the last that starts at or
  before the last sample (the last few are cut short by the end of the run).
  Each mean is stamped with its window's start, so the curve begins at `t₀`
  with no point before it. A window holding no sample (a gap of at least
  `window` between two samples) is skipped.

  This is `compute_plot_metrics` of the thesis' analysis notebook
  (`experiments/agn-aeasgd-experiments.ipynb` in the repository
  JoeriHermans/master-thesis: `window` 5 s, `stride` 1 s, `t₀` the run's
  first mini-batch), with the stride as a parameter.

  Args:
    times: non-decreasing sample times; samples of several workers merged
      with a stable sort.
    values: the samples (e.g. each local step's training accuracy).
    window: the window's length, > 0.
    stride: how far each window starts after the previous one, in (0,
      window]; default `window / 5` (the thesis' 1 s for 5 s).

  Returns:
    `(starts, means)`, one entry per non-empty window.

  Example:
    >>> t, m = sliding_mean([2, 3, 4, 9], [0.0, 1.0, 2.0, 4.0], window=2.0,
    ...                     stride=1.0)
    >>> t.tolist(), m.tolist()  # [5, 7), [6, 8) and [7, 9) are empty.
    ([2.0, 3.0, 4.0, 8.0, 9.0], [0.5, 1.5, 2.0, 4.0, 4.0])
  """
  if not (window > 0 and math.isfinite(window)):
    raise ValueError(f"window must be a finite number > 0, got {window}")
  stride = window / 5 if stride is None else stride
  if not 0 < stride <= window:
    raise ValueError(f"stride must be in (0, window = {window}], got {stride}")
  times, values = _curve(times, values, "sliding_mean", nonnegative=False)
  offsets = times - times[0]
  starts = np.arange(int(math.floor(offsets[-1] / stride)) + 1) * stride
  first = np.searchsorted(offsets, starts, side="left")
  stop = np.searchsorted(offsets, starts + window, side="left")
  keep = stop > first
  sums = np.concatenate([[0.0], np.cumsum(values)])
  means = (sums[stop] - sums[first])[keep] / (stop - first)[keep]
  return times[0] + starts[keep], means


def thesis_efficiency(
    times_a: Sequence[float],
    values_a: Sequence[float],
    times_b: Sequence[float],
    values_b: Sequence[float],
    window: float = 5.0,
    stride: Optional[float] = None,
    higher_is_better: bool = True,
) -> float:
  """E(a, b) as the thesis computed it, from each run's per-step samples.

  Each run's samples become `sliding_mean(window, stride)`, timed from its
  own first sample, so both curves start at t = 0 with a measured point and
  nothing is invented in front of them; E is the ratio of their integrals
  over [0, m] with linear interpolation, m the shorter curve's last window
  start (`temporal_efficiency` of the two curves). That is the thesis'
  notebook (see `sliding_mean`): `InterpolatedUnivariateSpline(x, y,
  k=1).integral(0, m)` of each curve, m the smaller of their last `x`.
  (`temporal_efficiency` alone cannot leave the front of a curve that starts
  after 0 empty: it puts a point at 0, `initial_value` or, with None, the
  first value held back. Timing each curve from its own start is what makes
  that front empty, as in the thesis.)

  Args:
    times_a: times of run `a`'s samples (every worker's local steps).
    values_a: the samples (mini-batch training accuracies).
    times_b: times of run `b`'s samples.
    values_b: run `b`'s samples.
    window: the sliding window's length.
    stride: its step (default `window / 5`).
    higher_is_better: the metric's direction (`temporal_efficiency`).

  Returns:
    E(a, b) as a float.

  Raises:
    ValueError: for malformed samples, a run whose curve is one window long
      (m = 0), or ∫f_b = 0.

  Example:
    >>> t = [0, 1, 2, 3, 4]
    >>> thesis_efficiency(t, [0.5] * 5, t, [1.0] * 5, window=2.0, stride=1.0)
    0.5
  """
  curves = []
  for times, values in ((times_a, values_a), (times_b, values_b)):
    starts, means = sliding_mean(times, values, window, stride)
    curves += [starts - starts[0], means]
  return temporal_efficiency(*curves, initial_value=None,
                             higher_is_better=higher_is_better)


def non_finite_final(summary: Dict[str, object]) -> Optional[str]:
  """Why a run's final evaluation is no result (one line), or None: its test loss and every task metric are finite.

  A non-finite final test loss means the center diverged. A metric that is
  not finite while the loss is (`final_test_<name>` of a task's metric,
  beside a finite `final_test_loss`) means the task's metric failed on a
  sound center (a division by zero, say): the line names the metric and
  the task and does not call it divergence. Either way the run is no
  result (its outcome is failed; its files are kept): E and the report read
  the metrics, and a NaN would make every comparison with the run NaN.

  Args:
    summary: the run's summary: `final_test_loss`, `final_test_<name>`,
      `metrics` (`{name: goal}`; classification's `accuracy` where absent)
      and `task`.

  Example:
    >>> non_finite_final(dict(final_test_loss=0.5, final_test_accuracy=0.9))
    >>> non_finite_final(dict(final_test_loss=float("nan")))
    "the final center's test loss is nan: the center diverged (lower --learning_rate or --server_learning_rate?)"
    >>> non_finite_final(dict(final_test_loss=0.5, task="t",
    ...                       metrics={"mae": "min"}, final_test_mae=float("nan")))
    "the final center's test mae is nan while its test loss is 0.5: the metric 'mae' of --task=t is not finite on a center whose loss is (the metric's computation, not the training, failed)"
  """
  named = summary.get("metrics")
  named = list(named) if isinstance(named, dict) else ["accuracy"]
  loss = summary.get("final_test_loss")
  if loss is not None and not is_finite_number(loss):
    return (f"the final center's test loss is {loss}: the center diverged "
            "(lower --learning_rate or --server_learning_rate?)")
  for name in named:
    value = summary.get(f"final_test_{name}")
    if value is not None and not is_finite_number(value):
      if loss is None:
        return (f"the final center's test {name} is {value}: the center "
                "diverged (lower --learning_rate or --server_learning_rate?)")
      return (f"the final center's test {name} is {value} while its test "
              f"loss is {loss:.6g}: the metric {name!r} of "
              f"--task={summary.get('task', 'classification')} is not finite "
              "on a center whose loss is (the metric's computation, not the "
              "training, failed)")
  return None


def is_finite_number(value) -> bool:
  """Whether `value` (read from a summary) is a finite int or float."""
  return isinstance(value, (int, float)) and math.isfinite(value)


CONVERGENCE_RULE = (
    "diverged: non-finite, or the center's test accuracy fell from its peak "
    "to chance + 5 points or below and stayed there to the end; converged: "
    "it ends within 2 points of its peak and at least 50 points above "
    "chance; else inconclusive (chance = 1 / classes)")


def convergence(accuracies: Sequence[float], num_classes: int,
                non_finite: bool = False) -> str:
  """Whether a run "converged", "diverged" or is "inconclusive" (`CONVERGENCE_RULE`).

  With chance = 1 / `num_classes`, and the center's test accuracy in time
  order:
  * diverged: `non_finite` or a non-finite accuracy, or the peak is above
    chance + 0.05 and the last value at or below it (the accuracy fell from
    its peak to chance level and stayed there to the end);
  * converged: the last value is within 0.02 of the peak and at least
    chance + 0.50;
  * inconclusive: everything else, an empty curve included.
  Bounds are inclusive (to 1e-9, so decimal edges such as 0.88 against a
  0.90 peak count as written).

  Args:
    accuracies: the center's test accuracies, in time order.
    num_classes: classes of the dataset (>= 2).
    non_finite: whether anything of the run was non-finite (e.g. its test
      loss).

  Returns:
    "converged", "diverged" or "inconclusive".

  Example:
    >>> convergence([0.1, 0.6, 0.95, 0.94], 10)
    'converged'
    >>> convergence([0.1, 0.6, 0.12, 0.1], 10)
    'diverged'
    >>> convergence([0.1, 0.3, 0.4], 10)
    'inconclusive'
  """
  if num_classes < 2:
    raise ValueError(f"num_classes must be >= 2, got {num_classes}")
  accuracies = np.asarray(accuracies, np.float64).reshape(-1)
  if non_finite or not np.all(np.isfinite(accuracies)):
    return "diverged"
  if not len(accuracies):
    return "inconclusive"
  chance, eps = 1.0 / num_classes, 1e-9
  peak, last = float(np.max(accuracies)), float(accuracies[-1])
  floor = chance + 0.05
  if peak > floor + eps and last <= floor + eps:
    return "diverged"
  if last >= peak - 0.02 - eps and last >= chance + 0.50 - eps:
    return "converged"
  return "inconclusive"


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
