"""Where a run's rows go besides metrics.jsonl: the writers `--metric_writers` names.

metrics.jsonl is the run's record and is always written: `RunBook` owns it,
because a resume cuts it back to its checkpoint and a checkpoint stores its
position. Every row the books write there is also handed to each
`MetricWriter` of the run, as it is written, for tools that watch a run
while it trains: TensorBoard (`TensorBoardWriter`, through tensorboardX).

A writer's library is optional; asking for a writer whose library is
missing is one line naming the extra to install, before anything starts.

Example:
  >>> parse("tensorboard")
  ('jsonl', 'tensorboard')
  >>> parse("jsonl,csv")
  Traceback (most recent call last):
  ...
  ValueError: metric_writers: unknown writer 'csv'; the writers are jsonl, tensorboard
"""

import glob
import json
import os
import secrets
import time
from typing import Dict, List, Optional, Protocol, Sequence, Tuple

import numpy as np

from agn_jax import config as config_lib
from agn_jax.runtime import events

# The writers, in the order they are named; jsonl is always on.
WRITERS = ("jsonl", "tensorboard")
# What a writer needs beyond the core: (module, the extra that installs it).
_LIBRARIES = {"tensorboard": ("tensorboardX", "agn-jax[tensorboard]")}
# How often at most an event file is flushed (each flush is an fsync): a run
# shows up in TensorBoard this late at most.
FLUSH_SECONDS = 5.0


class MetricWriter(Protocol):
  """What the books hand a run's rows to, besides metrics.jsonl.

  Each method may raise `OSError`; the books turn it into the run's one-line
  failure naming `path`, as for their own files.
  """

  path: str

  def write(self, row: Dict[str, object]) -> None:
    """One row of metrics.jsonl (`agn_jax.runtime.events.row`), as it is written."""

  def finish(self, staleness: Sequence[int]) -> None:
    """The run is ending with this summary: `staleness` of every commit of the whole run."""

  def close(self) -> None:
    """Releases the writer; never raises."""


def missing_library(name: str) -> Optional[str]:
  """Why writer `name` cannot write here (one line naming the extra), or None."""
  if name not in _LIBRARIES:
    return None
  module, extra = _LIBRARIES[name]
  return config_lib.missing_extra(f"metric_writers: {name}", module, extra)


def parse(text: str) -> Tuple[str, ...]:
  """The writers a comma-separated `--metric_writers` names, jsonl first, each once.

  Raises:
    ValueError: one line, for an unknown name or a writer whose library is
      missing (naming the extra that installs it).
  """
  names = [n.strip() for n in str(text).split(",") if n.strip()]
  for name in names:
    if name not in WRITERS:
      raise ValueError(f"metric_writers: unknown writer {name!r}; the "
                       f"writers are {', '.join(WRITERS)}")
    error = missing_library(name)
    if error:
      raise ValueError(error)
  return tuple(n for n in WRITERS if n == "jsonl" or n in names)




def open_writers(text: str, workdir: str, config: Dict[str, object],
                 purge_step: Optional[int] = None,
                 pending_staleness: Sequence[int] = (),
                 metrics: Sequence[str] = ("accuracy",)) -> List[MetricWriter]:
  """The writers besides jsonl that `text` names, opened in `workdir`.

  Args:
    text: the run's `metric_writers`.
    workdir: the run's directory; TensorBoard's event files go into it, so
      `tensorboard --logdir` of a sweep shows one run per subdirectory.
    config: the run's resolved config (`TrainConfig.to_record()`).
    purge_step: on resume, the first step the new session writes: what an
      earlier session wrote from this step on is superseded.
    pending_staleness: on resume, the staleness of the kept commits after
      the last kept evaluation (the next histogram's).
    metrics: the names of the task's metrics the rows carry
      (`agn_jax.tasks.Task.metric_names`).

  Raises:
    OSError: a writer cannot create its file.
  """
  writers: List[MetricWriter] = []
  if "tensorboard" in parse(text):
    writers.append(TensorBoardWriter(workdir, config, purge_step,
                                     pending_staleness, metrics))
  return writers


class TensorBoardWriter:
  """TensorBoard event files in the run's directory, through tensorboardX.

  Step is the commit count (the server clock after a commit; an evaluation
  is at the clock of the center it tested). What it writes:
    * per commit: `commit/loss` and `commit/<metric>` for each of the
      task's named metrics (the worker's window means; classification's
      `commit/accuracy`), `commit/staleness`, and its time, `commit/time`
      (seconds since the start barrier) and `commit/sim_time` (simulated
      backend);
    * per evaluation of the center on the test set: `eval/loss`,
      `eval/<metric>` of each metric, `eval/time` and `eval/sim_time`;
    * `staleness`: a histogram of the commits since the previous one, at
      every evaluation; `staleness/run`: one of every commit of the run, at
      its end (one bucket per staleness value);
    * `config`: the resolved config, as JSON text.
  The events carry the wall-clock time they were written.

  It writes synchronously, in the books' own thread, through tensorboardX's
  `EventsWriter` (tensorboardX's encoding, no thread and no queue of its
  own), so a failure to write reaches the books like one of their own
  files'. It adds about 30 µs to a commit's row (15 µs for metrics.jsonl's;
  measured on 2 CPU cores), mostly tensorboardX's CRC; the file is flushed
  every `FLUSH_SECONDS` and at the end.

  Args:
    logdir: where the event file goes (the run's workdir).
    config: the resolved config, written as text.
    purge_step: on resume, the first step of this session. TensorBoard drops
      what earlier event files hold from this step on (they ran past the
      checkpoint this session resumed from).
    pending_staleness: on resume, the staleness of the kept commits after
      the last kept evaluation: the next histogram counts them too.
    metrics: the names of the task's metrics (`open_writers`).
  """

  def __init__(self, logdir: str, config: Dict[str, object],
               purge_step: Optional[int] = None,
               pending_staleness: Sequence[int] = (),
               metrics: Sequence[str] = ("accuracy",)):
    self._fields = ("loss", *metrics, "staleness", "time", "sim_time")
    # pylint: disable=g-import-not-at-top
    from tensorboardX import summary as summary_lib
    from tensorboardX.event_file_writer import EventsWriter
    from tensorboardX.proto import event_pb2
    from tensorboardX.proto import summary_pb2
    # pylint: enable=g-import-not-at-top
    self._summary_lib = summary_lib
    self._event_pb2 = event_pb2
    self._summary_pb2 = summary_pb2
    # TensorBoard reads a directory's event files in the order of their
    # names, whose own time has whole seconds: the nanoseconds keep a resumed
    # session's file after the one it supersedes. The random part makes the
    # name one no one can guess beforehand, so a symlink planted in the
    # workdir is never written through (the books' own files refuse them).
    suffix = f".{time.time_ns()}.{secrets.token_hex(4)}"
    self._writer = EventsWriter(os.path.join(logdir, "events"),
                                filename_suffix=suffix)
    self.path = glob.glob(os.path.join(glob.escape(logdir),
                                       "events.out.tfevents.*" + suffix))[0]
    self._step = 0
    self._since_histogram: List[int] = list(pending_staleness)
    self._flushed = time.monotonic()
    self._finished = False
    if purge_step is not None:
      self._step = purge_step
      self._event(step=purge_step, session_log=event_pb2.SessionLog(
          status=event_pb2.SessionLog.START))
    text = "```json\n" + json.dumps(config, indent=2, sort_keys=True) + "\n```"
    self._event(step=self._step,
                summary=summary_lib.text("config", text))

  def _event(self, **fields) -> None:
    self._writer.write_event(
        self._event_pb2.Event(wall_time=time.time(), **fields))

  def _scalars(self, step: int, values: Dict[str, object]) -> None:
    """One event with every value of a row that is a number."""
    value = self._summary_pb2.Summary.Value
    numbers = [value(tag=tag, simple_value=float(v))
               for tag, v in values.items()
               if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if numbers:
      self._event(step=step, summary=self._summary_pb2.Summary(value=numbers))

  def _flush(self) -> None:
    self._writer.flush()
    self._flushed = time.monotonic()

  def _histogram(self, tag: str, staleness: Sequence[int]) -> None:
    if not len(staleness):  # pylint: disable=g-explicit-length-test
      return
    values = np.asarray(staleness, np.float64)
    # One bucket per staleness value: edges halfway between integers.
    edges = np.arange(-0.5, values.max() + 1.0)
    self._event(step=self._step, summary=self._summary_lib.histogram(
        tag, values, bins=edges))

  def write(self, row: Dict[str, object]) -> None:
    kind = row.get("event")
    if kind not in ("commit", "eval") or not isinstance(row.get("clock"), int):
      return
    step = row["clock"]
    self._step = max(self._step, step)
    self._scalars(step, {f"{kind}/{key}": row.get(key)
                         for key in self._fields})
    if kind == "commit":  # `--diagnostics`' instruments, where a row has them.
      self._scalars(step, {f"instruments/{key}": row[key]
                           for key in events.INSTRUMENTS if key in row})
    if kind == "commit" and isinstance(row.get("staleness"), int):
      self._since_histogram.append(row["staleness"])
    elif kind == "eval":
      self._histogram("staleness", self._since_histogram)
      self._since_histogram = []
    if time.monotonic() - self._flushed > FLUSH_SECONDS:
      self._flush()

  def finish(self, staleness: Sequence[int]) -> None:
    if self._finished:
      return
    self._finished = True
    self._histogram("staleness", self._since_histogram)
    self._since_histogram = []
    self._histogram("staleness/run", staleness)
    self._flush()

  def close(self) -> None:
    try:
      self._writer.close()
    except OSError:
      pass  # A failed flush was reported by `finish` or a row before.
