"""The closed forms the report sets beside its runs: the thesis' rule of thumb for λ and round robin's mean staleness.

Pure arithmetic, no runs: `sections/heuristic.py` and `sections/staleness.py`
put each next to what the study measured.
"""


def heuristic_window(n: int, layers: int) -> float:
  """λ ≈ (n + layers) / 2, the thesis' rule of thumb.

  >>> heuristic_window(40, 4)
  22.0
  """
  return (n + layers) / 2


def mean_staleness_formula(n: int, windows: int) -> float:
  """Mean staleness of commit-then-pull round robin: (n − 1)(1 − 1/(2W)).

  Every worker's first commit sees k earlier commits of the first round
  (k = 0 … n − 1, mean (n − 1)/2), every later one exactly n − 1; over W
  commits per worker the mean is (n − 1)(1 − 1/(2W)).

  >>> mean_staleness_formula(10, 5)
  8.1
  """
  return (n - 1) * (1 - 1 / (2 * windows))
