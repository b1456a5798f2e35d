r"""Trains one model with asynchronous data-parallel workers.

  python -m experiments.train --flagfile=experiments/configs/quickstart.flags
  python -m experiments.train --strategy=aeasgd --num_workers=8 \
      --communication_window=20 --workdir=runs/aeasgd-8

Writes metrics.jsonl, summary.json, config.json, curves.png and staleness.png
into --workdir. Exit status: 0 done, 1 data or run failure, 2 bad command
line, 130 interrupted (Ctrl-C), 143 terminated (SIGTERM).
"""

import contextlib
import os
import shutil
import signal
import sys
from typing import Callable, Dict, Optional, Sequence

from experiments import startup

if __name__ == "__main__":
  # Before the imports below, and JAX (seconds, loaded by `main` once the
  # flags are checked), and the threads they start.
  startup.hold_while_loading()

# pylint: disable=g-import-not-at-top,wrong-import-position
from absl import app
from absl import flags
from absl import logging
import numpy as np
import tqdm

from agn_jax import checkpoint
from agn_jax import config as config_lib
from agn_jax import runtime
from agn_jax import tasks
from agn_jax.config import TrainConfig
from agn_jax.errors import CheckpointError
from experiments import compare
from experiments import curves
from experiments import flags as flags_lib
# pylint: enable=g-import-not-at-top,wrong-import-position

FLAGS = flags.FLAGS
EXIT_INTERRUPTED = startup.EXIT_INTERRUPTED
EXIT_TERMINATED = startup.EXIT_TERMINATED


def was_terminated(interrupt: KeyboardInterrupt) -> bool:
  """Whether an interrupt came from SIGTERM rather than Ctrl-C."""
  return isinstance(interrupt, runtime.Terminated)


@contextlib.contextmanager
def sigterm_as_interrupt():
  """Turns SIGTERM into `Terminated` (a KeyboardInterrupt) in this block."""

  def handler(signum, frame):
    del signum, frame
    raise runtime.Terminated()

  try:
    previous = signal.signal(signal.SIGTERM, handler)
  except ValueError:  # Not the main thread: leave signals alone.
    yield
    return
  try:
    yield
  finally:
    signal.signal(signal.SIGTERM, previous)


class ProgressBar:
  """A tqdm bar fed by the runtime's progress callback.

  Shows commits, commits/s, the latest test value of the task's efficiency
  metric (classification's accuracy: "test acc") and the mean staleness.
  """

  def __init__(self, config: TrainConfig, enabled: bool = True):
    self._config = config
    self._enabled = enabled
    self._bar = None
    self._staleness_sum = 0.0
    self._commits = 0
    self._metric = tasks.get_task(config.task).efficiency_metric
    self._value = None

  def _start(self):
    # Created at the first event, so a run that fails while loading data
    # leaves its one-line error alone on the terminal.
    config = self._config
    logging.info("training in %s: %s", os.path.abspath(config.workdir),
                 config.resolved().to_dict())
    self._bar = tqdm.tqdm(total=None, unit="commit", dynamic_ncols=True,
                          mininterval=0.5, file=sys.stderr, leave=True,
                          disable=not self._enabled,
                          desc=(f"{config.strategy} n={config.num_workers} "
                                f"λ={config.communication_window}"))

  def __call__(self, event: Dict[str, object]) -> None:
    if self._bar is None:
      self._start()
    kind = event.get("event")
    total = event.get("total_commits", event.get("expected_commits"))
    if isinstance(total, int) and total > 0 and self._bar.total != total:
      self._bar.total = total
      self._bar.refresh()
    if kind == "commit":
      clock = event.get("clock")
      if (not self._commits and isinstance(clock, int) and
          not isinstance(clock, bool) and clock > 1):
        # A resumed run: count on from the commits its checkpoint holds,
        # without a burst in the rate.
        self._bar.n = self._bar.last_print_n = self._bar.initial = clock - 1
      self._commits += 1
      staleness = event.get("staleness")
      if isinstance(staleness, (int, float)):
        self._staleness_sum += staleness
      self._bar.update(1)
      if self._commits % 16 == 0:
        self._postfix()
    elif kind == "eval":
      value = event.get(self._metric)
      if isinstance(value, (int, float)):
        self._value = float(value)
      self._postfix()

  def _postfix(self):
    parts = []
    if self._value is not None:
      said = "acc" if self._metric == "accuracy" else self._metric
      parts.append(f"test {said} {self._value:.4f}")
    if self._commits:
      parts.append(f"staleness {self._staleness_sum / self._commits:.2f}")
    self._bar.set_postfix_str(", ".join(parts), refresh=False)

  def close(self):
    if self._bar is not None:
      self._postfix()
      self._bar.close()


def summarize(config: TrainConfig, summary: Dict[str, object],
              run: Optional[compare.Run]) -> Dict[str, Optional[float]]:
  """The end-of-run table: summary.json's numbers, else the metrics'.

  Its first rows are the final test value of each of the task's metrics
  (classification's "final test accuracy") and the final test loss.
  """

  def number(key):
    value = summary.get(key)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
      return float(value)
    return None

  named = tasks.get_task(config.task).metric_names()
  rows = {**{f"final test {name}": number(f"final_test_{name}")
             for name in named},
          "final test loss": number("final_test_loss"),
          "wall time (s)": number("wall_seconds"),
          "start-up (s)": number("startup_seconds"),
          "training time (s)": number("training_seconds"),
          "commits": number("num_commits"),
          "mean staleness": number("mean_staleness"),
          "samples/s": number("samples_per_second")}
  if run is not None:
    fallbacks = {
        **{f"final test {name}": (
            lambda name=name: compare.final_metric(run, name))
           for name in named},
        "final test loss": lambda: float(run.evals["loss"][-1]),
        "wall time (s)": lambda: compare.wall_time(run),
        "start-up (s)": lambda: curves.startup_seconds(run),
        "training time (s)": lambda: compare.training_seconds(run),
        "commits": lambda: float(len(run.commits["time"])),
        "mean staleness": lambda: float(np.mean(run.commits["staleness"])),
    }
    for key, fallback in fallbacks.items():
      if rows[key] is None:
        try:
          rows[key] = fallback()
        except (IndexError, ValueError):
          pass
  seconds = rows["training time (s)"] or rows["wall time (s)"]
  if rows["samples/s"] is None and rows["commits"] and seconds:
    rows["samples/s"] = (rows["commits"] * config.communication_window *
                         config.batch_size / seconds)
  return rows


_TABLE_FORMAT = {"commits": ".0f", "samples/s": ".0f", "wall time (s)": ".2f",
                 "start-up (s)": ".2f", "training time (s)": ".2f",
                 "mean staleness": ".2f"}


def format_table(rows: Dict[str, Optional[float]]) -> str:
  """Two aligned columns; missing values as n/a."""
  width = max(len(k) for k in rows)
  lines = []
  for key, value in rows.items():
    text = "n/a" if value is None else format(value,
                                              _TABLE_FORMAT.get(key, ".4f"))
    lines.append(f"{key:<{width}}  {text:>10}")
  return "\n".join(lines)


def format_settings(config: TrainConfig) -> str:
  """The strategy settings the run used (paper defaults filled in), one line.

  A server optimizer's settings are shown where the run's reads them
  (`strategies.SERVER_OPTIMIZER_SETTINGS`); an elastic strategy's `α = ρη`
  is shown next, then a learning-rate schedule other than a constant rate,
  and `commit_compression` last, where commits are compressed.

  Example:
    >>> format_settings(TrainConfig(strategy="aeasgd"))
    'aeasgd: worker_optimizer=adam learning_rate=0.001 momentum=0.9 rho=5 elastic_learning_rate=0.01 normalization=none server_optimizer=none elastic_alpha=0.05'
    >>> format_settings(TrainConfig(server_optimizer="sgd")).split()[-2:]
    ['server_optimizer=sgd', 'server_learning_rate=0.7']
  """
  # JAX loads with the strategies: not before a bad flag is reported.
  from agn_jax import strategies  # pylint: disable=g-import-not-at-top
  used = config.resolved()
  read = strategies.SERVER_OPTIMIZER_SETTINGS
  unread = {n for names in read.values() for n in names} - set(
      read[used.server_optimizer])
  parts = []
  for name in config_lib.STRATEGY_SETTINGS:
    if name in unread:
      continue
    value = getattr(used, name)
    parts.append(f"{name}={value:g}" if isinstance(value, float) else
                 f"{name}={value}")
  if used.elastic_alpha() is not None:
    parts.append(f"elastic_alpha={used.elastic_alpha():g}")
  if used.lr_schedule != "constant" or used.warmup_steps:
    parts.append(f"lr_schedule={used.lr_schedule} "
                 f"warmup_steps={used.warmup_steps}")
    if used.lr_schedule == "cosine":
      parts.append(f"decay_steps={used.decay_steps} "
                   f"final_lr_fraction={used.final_lr_fraction:g}")
  if used.commit_compression != "none":
    parts.append(f"commit_compression={used.commit_compression}")
  return f"{used.strategy}: " + " ".join(parts)


def _write_results(config: TrainConfig, command: Optional[Sequence[str]],
                   plots: bool = True) -> Optional[compare.Run]:
  """config.json, and curves.png and staleness.png with `plots`; the run as read back."""
  flags_lib.write_config(config, config.workdir, command)
  try:
    run = compare.read_run(config.workdir)
  except compare.RunDirError as e:
    if plots:
      logging.warning("no plots: %s", e)
    return None
  if plots:
    from experiments import plots as plots_lib  # pylint: disable=g-import-not-at-top
    for path in plots_lib.plot_run(run):
      logging.info("wrote %s", path)
  return run


def train_and_report(config: TrainConfig,
                     train_fn: Optional[Callable[..., dict]] = None,
                     show_progress: bool = True,
                     command: Optional[Sequence[str]] = None,
                     plots: bool = True):
  """Runs `runtime.train` with a progress bar, then writes config and plots.

  Args:
    config: the run's config; its workdir must have passed `check_workdir`.
    train_fn: the trainer (default `agn_jax.runtime.train`).
    show_progress: whether to draw the progress bar.
    command: the command line, recorded in config.json when given.
    plots: whether to draw the run's curves.png and staleness.png.

  Returns:
    `(summary, rows)`: the runtime's summary dict and the end-of-run table.

  Raises:
    Whatever `train_fn` raises; KeyboardInterrupt (or `Terminated`) after the
    runtime has cleaned up.
  """
  if train_fn is None:
    train_fn = runtime.train
  bar = ProgressBar(config, enabled=show_progress)
  try:
    summary = train_fn(config, progress=bar)
  except KeyboardInterrupt:
    bar.close()
    if has_results(config.workdir):  # Partial results are results too.
      _write_results(config, command, plots)
    raise
  except BaseException:
    bar.close()
    raise
  bar.close()
  run = _write_results(config, command, plots)
  return summary, summarize(config, summary or {}, run)


def has_results(workdir: str) -> bool:
  """Whether the run got as far as owning `workdir`: it wrote summary.json, however it ended."""
  return os.path.isfile(os.path.join(workdir, "summary.json"))


def remove_if_unstarted(workdir: str) -> None:
  """Removes a workdir that holds only the config of a run that never began.

  So fixing the flag and running the same command again just works.
  """
  from agn_jax import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  try:
    if set(workdir_lib.entries(workdir)) <= {"config.json"}:
      shutil.rmtree(workdir)
  except OSError:
    pass


def main(argv):
  program = "train"
  del argv  # parse_flags_or_exit has rejected positional arguments.
  command = ["python", "-m", "experiments.train"] + sys.argv[1:]
  try:
    # Without --workdir, a fresh, uniquely named one is created here.
    existed = bool(FLAGS.workdir) and os.path.exists(FLAGS.workdir)
    typed = flags_lib.typed_flags(sys.argv, FLAGS)
    if FLAGS.resume:  # The run's backend is the saved one.
      if not FLAGS.workdir:
        raise flags_lib.UsageError("--resume needs --workdir, the run to "
                                   "continue")
      flags_lib.check_workdir(FLAGS.workdir, resume=True)
      config = flags_lib.resumed_config(FLAGS, FLAGS.workdir, typed)
      # Before `validate` imports the plug-ins config.json names.
      checkpoint.check_saved_run(config.workdir, config.to_dict())
    else:
      config = flags_lib.config_from_flags(FLAGS, typed)
      flags_lib.check_workdir(config.workdir, resume=False)
    config.validate()
  except CheckpointError as e:  # Not the command line: the workdir's files.
    flags_lib.exit_with_error(program, e)
  except (flags_lib.UsageError, ValueError) as e:
    flags_lib.exit_with_error(program, e, status=2)

  # The launcher loads JAX here, still under `startup.hold_while_loading`:
  # the threads it starts inherit the blocked signals, as the modules
  # imported at the top do.
  train_fn = runtime.train
  startup.take_over(program, cleanup=None if existed else
                    lambda: remove_if_unstarted(config.workdir))
  with sigterm_as_interrupt():
    try:
      _, rows = train_and_report(config, train_fn, command=command,
                                 plots=FLAGS.plots)
    except KeyboardInterrupt as e:
      what, status = (("terminated (SIGTERM)", EXIT_TERMINATED)
                      if was_terminated(e) else
                      ("interrupted", EXIT_INTERRUPTED))
      if has_results(config.workdir):
        flags_lib.exit_interrupted(
            program, f"{what}; partial results in {config.workdir}", status)
      if not existed:
        remove_if_unstarted(config.workdir)
      flags_lib.exit_interrupted(
          program, f"{what} before the run started; nothing was written",
          status)
    except runtime.NothingToDo as e:
      print(f"{program}: {e}")
      return
    except runtime.WorkdirBusy as e:
      flags_lib.exit_with_error(program, e)
    except (runtime.RunError, ValueError, OSError) as e:
      # ValueError: the runtime's checks of the config against the data
      # (e.g. too few examples for the workers) and DataError, its subclass;
      # OSError: the plots or config.json after the run (a full disk).
      logging.debug("run failed", exc_info=True)
      if not existed:
        remove_if_unstarted(config.workdir)
      flags_lib.exit_with_error(program, e)
  print(format_settings(config))
  print(format_table(rows))
  print(f"results: {config.workdir}")


if __name__ == "__main__":
  # Flags are defined only when run as a program, so the sweep can import
  # `train_and_report` and define the grid axes under the same names.
  flags_lib.define_train_flags()
  app.run(main, flags_parser=flags_lib.parse_flags_or_exit)
