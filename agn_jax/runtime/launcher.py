"""`train()`: one run, on the backend its config names, with the books every backend shares.

The backend (`backend.BACKENDS`: processes, simulated, ray) supervises the
run's parts; `bookkeeping.RunBook` writes metrics.jsonl and summary.json;
this module takes the workdir, wires the two together and sees the run
through to its end however it ends.
"""

import dataclasses
import logging
import os
import pathlib
import signal
import sys
import threading
import time
from typing import Callable, Dict, Optional

from agn_jax import workdir as workdir_lib
from agn_jax.config import TrainConfig
from agn_jax.errors import NothingToDo, RunError, Terminated, WorkdirError
from agn_jax.runtime import backend as backend_lib
from agn_jax.runtime.bookkeeping import (RunBook, completed_summary,
                                         read_json, resume_error)
from agn_jax.runtime.context import Faults

Progress = Callable[[Dict[str, object]], None]

# After Ctrl-C / SIGTERM: time for the workers' last windows, the final
# checkpoint and evaluation, so that the whole run ends within 10 s.
_WIND_DOWN_SECONDS = 5.0
# After a failure, how long the books take in the events already on their
# way (a worker counts its own rejected commits and can fail on the third
# before the server's events about them are in).
_SETTLE_SECONDS = 0.5


def _raise_interrupt(signum, frame):
  del frame
  raise Terminated(f"received signal {signum}")


def _check_resume(config: TrainConfig) -> TrainConfig:
  """Before anything starts or is written: is there a run to resume, and anything left to do?

  The server reads and checks the checkpoint itself. A run stopped before
  its first checkpoint (Ctrl-C while it started) has none: it starts afresh
  in its workdir, at commit 0, when its config.json is this run's.

  Returns:
    The config to run: `config`, or without a checkpoint, the same with
    `resume=False`.
  """
  workdir = pathlib.Path(config.workdir)
  directory = workdir / "checkpoints"
  steps = [p for p in directory.iterdir() if p.name.isdigit()
          ] if directory.is_dir() else []
  done = completed_summary(workdir)
  if not steps:
    saved = read_json(workdir / "config.json")
    if done is not None or saved is None:
      raise resume_error(workdir, f"no checkpoint in {directory}" + (
          "; the run completed without one" if done is not None else
          " and no config.json to start the run afresh from"))
    from agn_jax import checkpoint  # pylint: disable=g-import-not-at-top
    checkpoint.check_same_run(saved, config.to_dict(),
                              f"{workdir / 'config.json'}")
    logging.getLogger("agn_jax.runtime").warning(
        "no checkpoint in %s: the run stopped before its first one; starting "
        "it afresh at commit 0", directory)
    return dataclasses.replace(config, resume=False)
  if done is not None and not config.epochs > done.get("epochs", 0):
    raise NothingToDo(
        f"the run in {workdir} completed already ({done.get('num_commits')} "
        f"commits, {done.get('epochs')} epochs); nothing to do (a larger "
        f"--epochs continues it)")
  return config


def train(config: TrainConfig,
          progress: Optional[Progress] = None,
          *,
          dataset=None,
          faults: Optional[Faults] = None) -> Dict[str, object]:
  """Trains `config.num_workers` asynchronous workers around a center on `config.backend`.

  Writes `config.json`, `metrics.jsonl`, `summary.json`, `center.npy` and
  `checkpoints/` to `config.workdir` (and `pids.json` for processes). The
  run holds an exclusive lock on its workdir for its whole life. Every part
  ends and every resource (process, shared-memory segment, actor) is freed
  however the run ends: normally, by a failure (raised here as `RunError`),
  or by Ctrl-C / SIGTERM (re-raised as `KeyboardInterrupt` after a final
  checkpoint). Once the run owns its workdir (config.json and metrics.jsonl
  written), summary.json says how it ended: `outcome` completed,
  interrupted or failed (with `failure`, the one-line reason, and the
  counts so far); if even that cannot be written, error.log says so if it
  can. A write that fails (a full disk) fails the run in one line naming the
  file and the errno.

  Reliability:
    * A worker that dies (killed, out of memory, an exception) is restarted
      with a fresh pull and the rest of its data share; at most
      `config.max_worker_restarts` restarts in total per run (over all
      workers, counted anew by each `--resume` session). One more death ends
      the run with `RunError`. A commit the dead worker had not finished is
      dropped; one it had queued is complete and applied, so commits applied
      + rejected == commits the workers made, exactly.
    * A worker whose commit was rejected (non-finite) starts afresh from the
      center with a new optimizer state; 3 rejections in a row fail the run.
      A run whose commits were mostly rejected, or that applied none, ends
      with `RunError` (its summary.json says why).
    * The server checkpoints the center, its state, the commit count, each
      worker's progress and the position in metrics.jsonl every
      `config.checkpoint_every_seconds` and at the end.
    * `config.resume` continues the run in `config.workdir` from its newest
      checkpoint: the clock continues, metrics.jsonl is cut back to the
      checkpoint and appended to, each worker continues its share. Each
      checkpoint's arrays are verified against the SHA-256 it recorded: a
      damaged newest one is passed over for the one before (a warning names
      it; it is kept as `checkpoints/STEP.damaged`). A run stopped before
      its first checkpoint starts afresh at commit 0 in its workdir (a
      warning says so) when its config.json is this config's run. No intact
      checkpoint, or an incompatible one (see
      `agn_jax.checkpoint.RESUME_MUST_MATCH`, checked before any plug-in the
      config names is imported), raises `CheckpointError` before any file
      is written; a run that completed raises `NothingToDo` unless
      `config.epochs` grew.

  Args:
    config: the run; settings left None take the strategy's paper defaults.
    progress: called in this process with every commit and evaluation row
      (the dicts written to metrics.jsonl), e.g. to drive a progress bar.
    dataset: an `agn_jax.data.Dataset` to train on instead of loading
      `config.dataset` (e.g. synthetic data of another dimension).
    faults: for tests, the faults to inject into the workers
      (`agn_jax.runtime.context.Faults`: a worker that raises, dies or
      turns non-finite at a given window, or one that is slower); it
      travels to them in the `RunContext`. None: none.

  Returns:
    The summary (also written to summary.json).

  Raises:
    ValueError: a bad config (before anything starts).
    CheckpointError: (a ValueError) `config.resume` cannot resume.
    WorkdirBusy: another run holds the workdir.
    NothingToDo: `config.resume` of a completed run.
    RunError: a part failed, or the outcome is no result.

  Example:
    >>> from agn_jax import TrainConfig
    >>> from agn_jax.runtime import train
    >>> summary = train(TrainConfig(num_workers=2, epochs=1.0,
    ...                             workdir="/tmp/agn_doc"))  # doctest: +SKIP
    >>> summary["num_commits"] == sum(summary["worker_commits"])  # doctest: +SKIP
    True
  """
  if config.resume and isinstance(config.workdir, str):
    # Before the config is validated: that imports the plug-ins it names.
    from agn_jax import checkpoint  # pylint: disable=g-import-not-at-top
    checkpoint.check_saved_run(config.workdir, config.to_dict())
  config = config.validate()
  if config.resume and not os.path.isdir(config.workdir):
    raise resume_error(config.workdir, "no such directory")
  lock = workdir_lib.lock_workdir(config.workdir, create=not config.resume,
                                  owner=" ".join(sys.argv) or "train()")
  try:
    # A run killed with its resource tracker (kill -9 of its process group)
    # left its segments and semaphores behind; the lock says it is gone.
    backend_lib.unlink_dead_run_leftovers(config.workdir)
    if config.resume:
      config = _check_resume(config)
    elif set(workdir_lib.entries(config.workdir)) & set(workdir_lib.RUN_ENTRIES):
      raise WorkdirError(
          f"workdir {config.workdir} holds another run's results; resume it "
          f"(--resume) or choose another workdir")
    book = RunBook(config, progress, config.backend)
    run = backend_lib.backend_class(config.backend)(
        config, book, faults=faults or Faults())
    in_main_thread = threading.current_thread() is threading.main_thread()
    old_term = (signal.signal(signal.SIGTERM, _raise_interrupt)
                if in_main_thread else None)
    try:
      return _execute(run, book, dataset)
    finally:
      if in_main_thread:
        signal.signal(signal.SIGTERM, old_term)
  finally:
    lock.release()


def _execute(run: backend_lib.Backend, book: RunBook, dataset):
  try:
    run.prepare(dataset)
    book.timeline["prepared"] = time.time()
    run.run()
    book.save_center(run.final_center())
    return book.write_summary(interrupted=False)
  except KeyboardInterrupt:
    # Let the workers commit their last window and the server write its
    # final checkpoint; a second interrupt (or the deadline) cuts it short.
    try:
      run.wind_down(_WIND_DOWN_SECONDS)
    except (KeyboardInterrupt, RunError):
      pass
    run.shutdown()
    if book.owns_files:  # Only once this run owns the files.
      book.write_summary(interrupted=True)
    raise
  except Exception as e:
    # Whatever ended it, summary.json says so with the counts so far,
    # the events already on their way included.
    run.settle(_SETTLE_SECONDS)
    book.write_failure(" ".join(str(e).split()) or type(e).__name__)
    raise
  finally:
    run.shutdown()
    book.close()
