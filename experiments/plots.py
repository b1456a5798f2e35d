"""The figures a run leaves in its workdir, and the comparison of several runs.

Everything draws with matplotlib's Agg backend, so it works without a display.
"""

import functools
import os
from typing import Optional, Sequence

import numpy as np

from agn_jax import metrics
from experiments import curves


@functools.cache
def pyplot():
  """`matplotlib.pyplot` on the Agg backend, imported (and the backend set) on first use.

  Importing it costs a quarter of a second, which every command line that
  only fails on a bad flag, and every test that runs one, would pay.
  """
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")  # Before pyplot: no display needed.
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  return plt


def time_label(time_base: str) -> str:
  """The x-axis label of a time base."""
  return {"training": "time since the start barrier (s)",
          "wall": "time since launch (s)",
          "simulated": "simulated time (s)"}[time_base]


def save(fig, path: str, dpi: int = 120) -> str:
  """Writes `fig` to `path` (creating its folder), closes it; returns `path`."""
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  fig.savefig(path, dpi=dpi)
  pyplot().close(fig)
  return path


def plot_window(run: curves.Run,
                longest: float = curves.TRAIN_WINDOW_SECONDS,
                time_base: str = "training") -> float:
  """A smoothing window that leaves ~20 points on the run's training span.

  The thesis' 5 s windows would leave one or two points on a 10 s run.
  """
  times = curves.commit_times(run, time_base)
  times = times[np.isfinite(times)]
  if len(times) < 2:
    return longest
  return float(np.clip((times[-1] - times[0]) / 20, 0.05, longest))


def plot_curves(run: curves.Run, path: str,
                window: Optional[float] = None,
                time_base: Optional[str] = None) -> str:
  """curves.png: the test efficiency metric (accuracy) and training loss over time, with commits.

  The metric is the run's task's efficiency metric
  (`curves.efficiency_metric`: classification's accuracy). The training
  metric and loss are the commits' mini-batch values (the loss
  also unsmoothed, faint) averaged over `window`-second windows (default
  `plot_window(run)`); the cumulative number of commits shares each panel on
  a second y axis. Times are on `time_base` (default: the run's best, see
  `curves.default_time_base`): on "training", t = 0 is the start barrier and
  earlier evaluations sit at negative times; the title says how long
  start-up took.
  """
  time_base = curves.effective_time_base(
      run, time_base or curves.default_time_base([run]))
  window = window or plot_window(run, time_base=time_base)
  metric = curves.efficiency_metric(run)
  fig, (ax_acc, ax_loss) = pyplot().subplots(1, 2, figsize=(11, 4))
  times, accuracies = curves.eval_curve(run, time_base)
  ax_acc.plot(times, accuracies, marker=".", color="C0", label="test (center)")
  times, accuracies = curves.train_curve(run, window, time_base)
  if len(times):
    ax_acc.plot(times, accuracies, color="C1", alpha=0.8, marker=".",
                markersize=3, label=f"train (workers, {window:.2g} s mean)")
  ax_acc.set_xlabel(time_label(time_base))
  ax_acc.set_ylabel(metric)
  ax_acc.set_title(metric)
  ax_acc.legend(loc="best")

  commit_times = curves.event_times(run, run.commits, time_base)
  losses = run.commits["loss"]
  keep = np.isfinite(losses) & np.isfinite(commit_times) & (commit_times >= 0)
  if np.any(keep):
    order = np.argsort(commit_times[keep], kind="stable")
    ax_loss.plot(commit_times[keep], losses[keep], ".",
                 color="C1", alpha=0.15, markersize=2, label="commit")
    t, loss = metrics.windowed_mean(commit_times[keep][order],
                                    losses[keep][order], window)
    ax_loss.plot(t, loss, color="C1", label=f"{window:.2g} s mean")
  eval_times = curves.event_times(run, run.evals, time_base)
  keep = np.isfinite(run.evals["loss"]) & np.isfinite(eval_times)
  if np.any(keep):
    ax_loss.plot(eval_times[keep], run.evals["loss"][keep], marker=".",
                 color="C0", label="test (center)")
  ax_loss.set_xlabel(time_label(time_base))
  ax_loss.set_ylabel("loss")
  ax_loss.set_title("loss")
  ax_loss.legend(loc="upper right")

  commit_times = np.sort(commit_times[np.isfinite(commit_times)])
  for ax in (ax_acc, ax_loss):
    twin = ax.twinx()
    twin.plot(commit_times, np.arange(1, len(commit_times) + 1),
              color="gray", linestyle="--", linewidth=1)
    twin.set_ylabel("commits", color="gray")
    twin.tick_params(axis="y", colors="gray")
  title = run.name
  startup = curves.startup_seconds(run)
  if startup is not None:
    title += f" (start-up {startup:.1f} s"
    if len(commit_times):
      title += f", first commit at {commit_times[0]:.1f} s"
    title += ")"
  elif len(commit_times):
    title += f" (first commit at {commit_times[0]:.1f} s)"
  fig.suptitle(title)
  fig.tight_layout()
  return save(fig, path)


def plot_staleness(run: curves.Run, path: str) -> Optional[str]:
  """staleness.png: histogram of the commits' staleness.

  Returns:
    The path, or None for a run without commits.
  """
  staleness = run.commits["staleness"]
  staleness = staleness[np.isfinite(staleness)]
  if not len(staleness):
    return None
  stats = metrics.staleness_stats(staleness.astype(np.int64))
  fig, ax = pyplot().subplots(figsize=(6, 4))
  ax.bar(np.arange(len(stats["histogram"])), stats["histogram"], width=0.9)
  ax.axvline(stats["mean"], color="C3", linestyle="--",
             label=f"mean {stats['mean']:.2f}")
  workers = run.config.get("num_workers")
  if isinstance(workers, int) and workers > 1:
    # n homogeneous workers give an expected staleness of n - 1 (docs/algorithms.md).
    ax.axvline(workers - 1, color="gray", linestyle=":",
               label=f"n - 1 = {workers - 1}")
  ax.set_xlabel("staleness (center updates since the pull)")
  ax.set_ylabel("commits")
  ax.set_title(f"{run.name}: {stats['count']} commits")
  ax.legend()
  fig.tight_layout()
  return save(fig, path)


def plot_run(run: curves.Run) -> Sequence[str]:
  """Writes curves.png and staleness.png into the run's workdir."""
  paths = [plot_curves(run, os.path.join(run.path, "curves.png"))]
  staleness = plot_staleness(run, os.path.join(run.path, "staleness.png"))
  if staleness:
    paths.append(staleness)
  return paths


def plot_comparison(runs: Sequence[curves.Run], path: str,
                    names: Optional[Sequence[str]] = None,
                    window: float = curves.TRAIN_WINDOW_SECONDS,
                    time_base: Optional[str] = None) -> str:
  """The test and windowed training efficiency metric (accuracy) of several runs, one plot each.

  The metric is the first run's efficiency metric
  (`curves.efficiency_metric`: classification's accuracy). Times are on
  `time_base` (default `curves.default_time_base(runs)`). When every run
  counted its bytes (`summary.json`'s `bytes_committed`), a third plot
  shows the test metric against the bytes moved
  (`curves.bytes_curve`), where compressed commits show what they save.
  """
  names = names or curves.labels(runs)
  time_base = time_base or curves.default_time_base(runs)
  metric = curves.efficiency_metric(runs[0])
  by_bytes = [curves.bytes_curve(run, metric) for run in runs]
  with_bytes = all(c is not None for c in by_bytes)
  fig, axes = pyplot().subplots(1, 3 if with_bytes else 2,
                                figsize=(16 if with_bytes else 11, 4),
                                sharey=True)
  ax_test, ax_train = axes[0], axes[1]
  if with_bytes:
    for i, (name, (moved, accuracies)) in enumerate(zip(names, by_bytes)):
      axes[2].plot(moved / 1e6, accuracies, color=f"C{i % 10}", marker=".",
                   label=name)
    axes[2].set_title(f"test {metric} (center) against bytes moved")
    axes[2].set_xlabel("MB committed and pulled (as sent)")
    axes[2].grid(alpha=0.3)
  for i, (name, run) in enumerate(zip(names, runs)):
    times, accuracies = curves.eval_curve(run, time_base, metric)
    ax_test.plot(times, accuracies, color=f"C{i % 10}", marker=".",
                 label=name)
    times, accuracies = curves.train_curve(run, window, time_base, metric)
    ax_train.plot(times, accuracies, color=f"C{i % 10}", marker=".",
                  label=name)
  ax_test.set_title(f"test {metric} (center)")
  ax_train.set_title(f"training {metric} (workers, {window:g} s mean)")
  for ax in (ax_test, ax_train):
    ax.set_xlabel(time_label(time_base))
    ax.grid(alpha=0.3)
  ax_test.set_ylabel(metric)
  ax_test.legend(loc="best", fontsize="small")
  fig.tight_layout()
  return save(fig, path)


# What each instrument's plot says on its axis (`agn_jax.instruments`).
INSTRUMENT_TITLES = {
    "commit_norm": "commit norm ‖Δ‖",
    "distance_staleness": "distance staleness ‖θ̃_before − θ̃_pulled‖",
    "cosine_previous_commit": "cos(Δ, previous commit)",
    "cosine_center_movement": "cos(Δ, θ̃_before − θ̃_pulled)",
    "center_step_norm": "center step ‖θ̃_after − θ̃_before‖",
    "implicit_momentum": "implicit momentum μ̂ (dashed: 1 − 1/n)",
    "gradient_cosine": "cos(Δ, −∇L(θ̃_before)) on the probe set",
}


def plot_instruments(runs: Sequence[curves.Run], path: str,
                     names: Optional[Sequence[str]] = None,
                     time_base: Optional[str] = None,
                     smooth: int = 25) -> Optional[str]:
  """The per-commit instruments of several runs over time, one plot per instrument; None if no run recorded any.

  Each run's values are faint dots, their running mean over `smooth`
  commits a line (`curves.instrument_trace`); μ̂'s plot marks each run's
  theory value `1 − 1/n` dashed. A run without `--diagnostics` is absent
  from the plots and named in the title.
  """
  names = names or curves.labels(runs)
  time_base = time_base or curves.default_time_base(runs)
  recorded = [curves.instrument_names(run) for run in runs]
  shown = [n for n in INSTRUMENT_TITLES if any(n in r for r in recorded)]
  if not shown:
    return None
  columns = min(3, len(shown))
  rows = -(-len(shown) // columns)
  fig, axes = pyplot().subplots(rows, columns, squeeze=False,
                                figsize=(5.5 * columns, 3.6 * rows))
  for ax, name in zip(axes.flat, shown):
    for i, (label, run, has) in enumerate(zip(names, runs, recorded)):
      if name not in has:
        continue
      color = f"C{i % 10}"
      times, values, mean = curves.instrument_trace(run, name, time_base,
                                                    smooth)
      ax.plot(times, values, ".", color=color, alpha=0.15, markersize=2)
      ax.plot(times, mean, color=color, label=label)
      n = run.config.get("num_workers")
      if name == "implicit_momentum" and isinstance(n, int) and n > 0:
        ax.axhline(1 - 1 / n, color=color, linestyle="--", linewidth=0.8)
    ax.set_title(INSTRUMENT_TITLES[name], fontsize="medium")
    ax.set_xlabel(time_label(time_base))
    ax.grid(alpha=0.3)
  for ax in list(axes.flat)[len(shown):]:
    ax.axis("off")
  axes.flat[0].legend(loc="best", fontsize="small")
  missing = [label for label, has in zip(names, recorded) if not has]
  if missing:
    fig.suptitle("without --diagnostics (not shown): " + ", ".join(missing),
                 fontsize="small")
  fig.tight_layout()
  return save(fig, path)

