"""The figures a run leaves in its workdir, and the comparison of several runs.

Everything draws with matplotlib's Agg backend, so it works without a display.
"""

import os
from typing import Optional, Sequence

# pylint: disable=wrong-import-position
import matplotlib

matplotlib.use("Agg")  # Before pyplot: no display needed.
import matplotlib.pyplot as plt
import numpy as np

from agn_jax import metrics
from experiments import compare
# pylint: enable=wrong-import-position


def _save(fig, path: str) -> str:
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  fig.savefig(path, dpi=120)
  plt.close(fig)
  return path


def plot_window(run: compare.Run,
                longest: float = compare.TRAIN_WINDOW_SECONDS) -> float:
  """A smoothing window that leaves ~20 points on the run's training span.

  The thesis' 5 s windows would leave one or two points on a 10 s run.
  """
  times = run.commits["time"]
  if len(times) < 2:
    return longest
  return float(np.clip((times[-1] - times[0]) / 20, 0.05, longest))


def plot_curves(run: compare.Run, path: str,
                window: Optional[float] = None) -> str:
  """curves.png: test accuracy and training loss vs wall time, with commits.

  The training accuracy and loss are the commits' mini-batch values (the loss
  also unsmoothed, faint) averaged over `window`-second windows (default
  `plot_window(run)`); the cumulative number of commits shares each panel on
  a second y axis. Times count from the launch; the x axis starts near the
  first measurement, and the title says how long start-up took.
  """
  window = window or plot_window(run)
  fig, (ax_acc, ax_loss) = plt.subplots(1, 2, figsize=(11, 4))
  times, accuracies = compare.eval_curve(run)
  ax_acc.plot(times, accuracies, marker=".", color="C0", label="test (center)")
  times, accuracies = compare.train_curve(run, window)
  if len(times):
    ax_acc.plot(times, accuracies, color="C1", alpha=0.8, marker=".",
                markersize=3, label=f"train (workers, {window:.2g} s mean)")
  ax_acc.set_xlabel("wall time (s)")
  ax_acc.set_ylabel("accuracy")
  ax_acc.set_title("accuracy")
  ax_acc.legend(loc="lower right")

  commits = run.commits
  keep = np.isfinite(commits["loss"])
  if np.any(keep):
    ax_loss.plot(commits["time"][keep], commits["loss"][keep], ".",
                 color="C1", alpha=0.15, markersize=2, label="commit")
    t, loss = metrics.windowed_mean(commits["time"][keep],
                                    commits["loss"][keep], window)
    ax_loss.plot(t, loss, color="C1", label=f"{window:.2g} s mean")
  keep = np.isfinite(run.evals["loss"])
  if np.any(keep):
    ax_loss.plot(run.evals["time"][keep], run.evals["loss"][keep], marker=".",
                 color="C0", label="test (center)")
  ax_loss.set_xlabel("wall time (s)")
  ax_loss.set_ylabel("loss")
  ax_loss.set_title("loss")
  ax_loss.legend(loc="upper right")

  for ax in (ax_acc, ax_loss):
    twin = ax.twinx()
    twin.plot(commits["time"], np.arange(1, len(commits["time"]) + 1),
              color="gray", linestyle="--", linewidth=1)
    twin.set_ylabel("commits", color="gray")
    twin.tick_params(axis="y", colors="gray")
  title = run.name
  if len(commits["time"]):
    title += f" (first commit at {commits['time'][0]:.1f} s)"
  fig.suptitle(title)
  fig.tight_layout()
  return _save(fig, path)


def plot_staleness(run: compare.Run, path: str) -> Optional[str]:
  """staleness.png: histogram of the commits' staleness.

  Returns:
    The path, or None for a run without commits.
  """
  staleness = run.commits["staleness"]
  staleness = staleness[np.isfinite(staleness)]
  if not len(staleness):
    return None
  stats = metrics.staleness_stats(staleness.astype(np.int64))
  fig, ax = plt.subplots(figsize=(6, 4))
  ax.bar(np.arange(len(stats["histogram"])), stats["histogram"], width=0.9)
  ax.axvline(stats["mean"], color="C3", linestyle="--",
             label=f"mean {stats['mean']:.2f}")
  workers = run.config.get("num_workers")
  if isinstance(workers, int) and workers > 1:
    # n homogeneous workers give an expected staleness of n - 1 (PAPER.md).
    ax.axvline(workers - 1, color="gray", linestyle=":",
               label=f"n - 1 = {workers - 1}")
  ax.set_xlabel("staleness (center updates since the pull)")
  ax.set_ylabel("commits")
  ax.set_title(f"{run.name}: {stats['count']} commits")
  ax.legend()
  fig.tight_layout()
  return _save(fig, path)


def plot_run(run: compare.Run) -> Sequence[str]:
  """Writes curves.png and staleness.png into the run's workdir."""
  paths = [plot_curves(run, os.path.join(run.path, "curves.png"))]
  staleness = plot_staleness(run, os.path.join(run.path, "staleness.png"))
  if staleness:
    paths.append(staleness)
  return paths


def plot_comparison(runs: Sequence[compare.Run], path: str,
                    names: Optional[Sequence[str]] = None,
                    window: float = compare.TRAIN_WINDOW_SECONDS) -> str:
  """The test and windowed training accuracy of several runs, one plot each."""
  names = names or compare.labels(runs)
  fig, (ax_test, ax_train) = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
  for i, (name, run) in enumerate(zip(names, runs)):
    times, accuracies = compare.eval_curve(run)
    ax_test.plot(times, accuracies, color=f"C{i % 10}", marker=".",
                 label=name)
    times, accuracies = compare.train_curve(run, window)
    ax_train.plot(times, accuracies, color=f"C{i % 10}", marker=".",
                  label=name)
  ax_test.set_title("test accuracy (center)")
  ax_train.set_title(f"training accuracy (workers, {window:g} s mean)")
  for ax in (ax_test, ax_train):
    ax.set_xlabel("wall time (s)")
    ax.grid(alpha=0.3)
  ax_test.set_ylabel("accuracy")
  ax_test.legend(loc="lower right", fontsize="small")
  fig.tight_layout()
  return _save(fig, path)
