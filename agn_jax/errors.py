"""The errors a run ends in, below every layer that raises or reports them.

Each message is one line: the command line prints it as the run's only
error line. No JAX here: a worker process imports this before it applies
its placement.
"""

from typing import Sequence


class RunError(RuntimeError):
  """A part of the run failed, or its outcome is no result."""


class NothingToDo(Exception):
  """`--resume` of a run that already completed its share: no file was touched."""


class Terminated(KeyboardInterrupt):
  """SIGTERM, raised like Ctrl-C so that a run shuts down the same way."""


def interrupt_behind(error: BaseException):
  """The Ctrl-C (or SIGTERM) an error stands for, if it came from one; else None.

  An interrupt that lands while an extension module initializes comes out
  of the import as `ImportError: initialization failed`, caused by the
  KeyboardInterrupt. Re-raising what this returns ends the run as the
  signal asked, not as a crash.

  Example:
    >>> try:
    ...   try:
    ...     raise KeyboardInterrupt()
    ...   except KeyboardInterrupt as e:
    ...     raise ImportError("initialization failed") from e
    ... except ImportError as e:
    ...   type(interrupt_behind(e)).__name__
    'KeyboardInterrupt'
    >>> interrupt_behind(ImportError("no module named x")) is None
    True
  """
  seen = set()
  while error is not None and id(error) not in seen:
    if isinstance(error, KeyboardInterrupt):
      return error
    seen.add(id(error))
    error = error.__cause__ or error.__context__
  return None


class WorkdirError(ValueError):
  """A workdir that cannot be used (impossible path, symlink)."""


class WorkdirBusy(RuntimeError):
  """Another live run holds the workdir's lock; the message names it."""


class CheckpointError(ValueError):
  """A checkpoint is missing, corrupt or does not fit the run."""


def resume_error(workdir, message) -> CheckpointError:
  """Why the run in `workdir` cannot be resumed, in the one form every resume check reports."""
  return CheckpointError(f"cannot resume from {workdir}: {message}")


class RayStartError(RuntimeError):
  """The local Ray instance could not start."""


class DataMismatch(RuntimeError):
  """A part of the run loaded other data than the driver (a loader that is not deterministic).

  Fatal, as `Diverged`: a restarted part would load other data again.
  """

# A worker whose commits the server rejects (a non-finite number) this many
# times in a row, each time from a fresh start at the center, fails the run:
# restarting it again would not help.
MAX_REJECTED_IN_A_ROW = 3


class Diverged(RuntimeError):
  """A worker's commits were rejected `MAX_REJECTED_IN_A_ROW` times in a row.

  Fatal on every backend: the run fails rather than restart the worker.

  Attributes:
    records: the simulator's `sim.schedule.Handled` commits of the round that ended in the
      failure (so its books can still count them); empty elsewhere.

  Example:
    >>> from agn_jax.errors import Diverged
    >>> error = Diverged("worker 1: 3 commits in a row were non-finite")
    >>> str(error), error.records
    ('worker 1: 3 commits in a row were non-finite', [])
  """

  def __init__(self, message: str, records: Sequence = ()):
    super().__init__(message)
    self.records = list(records)


def check_rejected_in_a_row(rejected_in_a_row: int, worker=None,
                            records: Sequence = ()) -> None:
  """The one divergence guard of every backend's workers.

  Args:
    rejected_in_a_row: the worker's commits rejected in a row so far.
    worker: its index, named in the message (None where the caller's role
      names it already).
    records: as `Diverged.records`.

  Raises:
    Diverged: `rejected_in_a_row` reached `MAX_REJECTED_IN_A_ROW`.

  Example:
    >>> check_rejected_in_a_row(2, worker=1)
    >>> check_rejected_in_a_row(3, worker=1)
    Traceback (most recent call last):
    ...
    agn_jax.errors.Diverged: worker 1: 3 commits in a row were non-finite and rejected, each from a fresh start at the center (diverged; lower --learning_rate?)
  """
  if rejected_in_a_row >= MAX_REJECTED_IN_A_ROW:
    raise Diverged(
        ("" if worker is None else f"worker {worker}: ") +
        f"{rejected_in_a_row} commits in a row were non-finite and "
        f"rejected, each from a fresh start at the center (diverged; lower "
        f"--learning_rate?)", records)
