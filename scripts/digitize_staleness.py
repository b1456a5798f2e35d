"""Digitizes the thesis' per-worker staleness plots into experiments/results/thesis_worker_staleness.json.

The plots are the thesis repository's (github.com/JoeriHermans/master-thesis,
thesis/resources/images/plots/adag_agn_mnist/epoch_40/15/000000001/staleness/
worker_K.png: n = 20, λ = 15, 62 commits a worker). Fetch the repository and
write each plot out, then:

    git --git-dir=REPO.git show HEAD:.../staleness/worker_15.png > w15.png
    python scripts/digitize_staleness.py 15=w15.png 14=w14.png ...

How a plot is read: the line is the pixels of matplotlib's default blue
(#1f77b4, each channel within 45); the axes are calibrated on the grid
lines (x: commits 10 and 60 at pixel columns 99 and 373, 5.48 px a commit;
y: τ = 20 and 80 at rows 196 and 66, 2.175 px a unit of τ; the frame spans
commits 1 to 62 and τ 0 to 100). Each pixel column's mean blue row is the
line's height there; the 62 vertices are the least-squares fit of a
polyline to those heights, and a vertex that is a peak or a trough takes
the far end of its column's blue span (less half the line's width), which
a steep segment would otherwise blur. Precision: about ±1 τ on flat
stretches, ±3 τ at steep peaks; a peak above the frame (worker 15's first
commit) reads as about 100, its true value unknown.
"""

import json
import sys

import numpy as np

COMMITS = 62


def digitize(path: str, commits: int = COMMITS) -> np.ndarray:
  """The plot's staleness at each of its `commits` commits."""
  import matplotlib.image  # pylint: disable=g-import-not-at-top
  rgb = (matplotlib.image.imread(path)[..., :3] * 255).astype(int)
  blue = ((abs(rgb[..., 0] - 31) < 45) & (abs(rgb[..., 1] - 119) < 45) &
          (abs(rgb[..., 2] - 180) < 45))
  blue[:46, 280:] = False  # The legend's sample line.
  blue[:, :50] = False
  blue[:, 384:] = False
  x_of = lambda col: 10 + (col - 99) / 5.48
  tau_of = lambda row: 20 + (196 - row) / 2.175
  rows, heights = [], []
  for col in range(50, 384):
    ys = np.nonzero(blue[:, col])[0]
    x = x_of(col)
    if not len(ys) or not 1 <= x <= commits:
      continue
    i = int(np.floor(x))
    w = np.zeros(commits)
    w[i - 1] += 1 - (x - i)
    if i < commits:
      w[i] += x - i
    rows.append(w)
    heights.append(tau_of(ys.mean()))
  v = np.linalg.lstsq(np.array(rows), np.array(heights), rcond=None)[0]
  for i in range(commits):
    col = int(round(99 + (i + 1 - 10) * 5.48))
    ys = np.nonzero(blue[:, col])[0] if 50 <= col < 384 else []
    if len(ys) < 4:
      continue  # Flat there: the polyline fit is exact.
    before = v[i - 1] if i > 0 else None
    after = v[i + 1] if i + 1 < commits else None
    neighbours = [u for u in (before, after) if u is not None]
    if all(v[i] > u for u in neighbours):
      v[i] = tau_of(ys.min() + 0.75)
    elif all(v[i] < u for u in neighbours):
      v[i] = tau_of(ys.max() - 0.75)
  return np.clip(np.round(v), 0, None).astype(int)


def main():
  workers = {}
  for arg in sys.argv[1:]:
    worker, path = arg.split("=", 1)
    workers[worker] = [int(t) for t in digitize(path)]
  print(json.dumps(workers))


if __name__ == "__main__":
  main()
