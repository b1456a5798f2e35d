"""What the parts of a run tell each other: one typed record per kind, defined once.

The server, the workers, the evaluator and every backend's supervisor send
these; the run's bookkeeping (`bookkeeping.RunBook`) turns the ones that
belong in `metrics.jsonl` into rows (`row()`), and `experiments.compare`
reads the rows back with `ROWS`. Times inside events are `time.time()`
stamps; the bookkeeping turns them into the run's time bases.

Example:
  >>> from agn_jax.wire import CommitMeta
  >>> e = Committed(time=0.0, meta=CommitMeta(worker=1, clock=4, loss=0.5,
  ...               metrics={"accuracy": 0.9}, time=0.0), clock=8, staleness=3)
  >>> e.kind, row(e, lambda t: t)["staleness"], row(e, lambda t: t)["accuracy"]
  ('commit', 3, 0.9)
"""

import json
import math
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence

import numpy as np

from agn_jax.wire import CommitMeta


def finite_or_none(obj: Any) -> Any:
  """`obj` with every non-finite float (NaN, ±inf) replaced by None, recursively."""
  if isinstance(obj, (float, np.floating)):
    return float(obj) if math.isfinite(obj) else None
  if isinstance(obj, dict):
    return {k: finite_or_none(v) for k, v in obj.items()}
  if isinstance(obj, (list, tuple)):
    return [finite_or_none(v) for v in obj]
  return obj


def strict_json(obj: Any, **kwargs) -> str:
  """`json.dumps` of `obj` as strict JSON: a non-finite number is written null.

  Python's `json` writes NaN and Infinity, which strict parsers (JavaScript,
  jq, Go, serde) refuse; every file of a run and a report is written
  through this.

  Example:
    >>> strict_json({"loss": float("nan"), "time": [1.5, float("inf")]})
    '{"loss": null, "time": [1.5, null]}'
  """
  return json.dumps(finite_or_none(obj), allow_nan=False, **kwargs)


class WorkerReady(NamedTuple):
  """A worker compiled its kernels and waits at the start barrier."""
  time: float
  worker: int
  incarnation: int = 0
  timeline: Optional[Dict[str, float]] = None
  kind = "worker_ready"


class ServerReady(NamedTuple):
  """The server published the initial center and compiled its rule."""
  time: float
  kind = "server_ready"


class Restored(NamedTuple):
  """The server restored a checkpoint (`--resume`).

  `traffic` is the checkpoint's per-worker bytes
  (`agn_jax.checkpoint.Meta.traffic`) and `wall_seconds` the run's wall
  seconds up to it; None where it records none. `notes` are what the user
  is told of it (`agn_jax.checkpoint.Checkpoint.notes`: a damaged newer
  checkpoint passed over, an unverified one used), one line each.
  """
  clock: int
  metrics_offset: Optional[int]
  rejected_commits: int
  worker_commits: Sequence[int]
  traffic: Optional[Dict[str, Sequence[int]]] = None
  wall_seconds: Optional[float] = None
  notes: Sequence[str] = ()
  kind = "restored"


class ResumeFailed(NamedTuple):
  """The server could not restore the checkpoint; `message` says why."""
  message: str
  kind = "resume_failed"


class CheckpointRequest(NamedTuple):
  """The server asks how far metrics.jsonl goes once it holds every event up to `clock`."""
  clock: int
  kind = "checkpoint_request"


class Committed(NamedTuple):
  """The server applied a commit.

  Attributes:
    time: when it was applied.
    meta: the commit's `agn_jax.wire.CommitMeta` as its worker sent it: who
      committed, the window's mean loss and task metrics (accuracy), its
      local steps' values of the efficiency metric and, where known, when
      its first step began
      (`meta.window_start`) and its last was done (`meta.time`). The λ steps
      of a window run in one dispatch and have no times of their own;
      readers spread them evenly over that span, step i (from 0) ending at
      `window_start + (i + 1) (window_end − window_start) / λ`. On the
      simulated backend both are the round's, the steps ran in.
      `meta.local_updates` is the window's local steps with Dynamic Local
      Updates (the worker's λ_k; fewer in the last window of its share), 0
      otherwise (λ).
    clock: the server clock after applying it.
    staleness: server clock at apply − clock of the center the worker used.
    sim_time: simulated seconds (simulated backend only).
    sim_window_start: the window's start on the simulated clock, where
      each step's time is exact.
    sim_window_end: its end on the simulated clock; the commit's message
      and the server's queue come after it, so `sim_time` may be later.
    instruments: with `--diagnostics`, the commit's instruments
      `{name: value}` (`INSTRUMENTS`, `agn_jax.instruments.commit_instruments`;
      `gradient_cosine` every k-th commit only); None otherwise. A NaN (a
      cosine without a value) is written null.

  Its metrics.jsonl row (`row`) is flat: the fields of `COMMIT_ROW`, with
  the task's metrics (`meta.metrics`, by name) after `loss` and each step
  metric as `step_<name>` after `window_end` (classification's:
  `accuracy`, `step_accuracy`).
  """
  time: float
  meta: CommitMeta
  clock: int
  staleness: int
  sim_time: Optional[float] = None
  sim_window_start: Optional[float] = None
  sim_window_end: Optional[float] = None
  instruments: Optional[Dict[str, float]] = None
  kind = "commit"

  def row_fields(self) -> Dict[str, Any]:
    """The row's fields, in `COMMIT_ROW` order (None where it has none)."""
    meta = self.meta
    known = meta.window_start is not None
    fields = dict(
        time=self.time, worker=meta.worker, clock=self.clock,
        staleness=self.staleness, loss=meta.loss, **_named(meta.metrics),
        sim_time=self.sim_time, window_start=meta.window_start,
        window_end=meta.time if known else None,
        **{f"step_{name}": step_values(values)
           for name, values in sorted(meta.step_metrics.items())},
        sim_window_start=self.sim_window_start,
        sim_window_end=self.sim_window_end,
        local_updates=meta.local_updates or None)
    for name in INSTRUMENTS:
      fields[name] = (self.instruments or {}).get(name)
    return fields


class Rejected(NamedTuple):
  """The server refused a non-finite commit; the center is unchanged."""
  time: float
  worker: int
  clock: int
  sim_time: Optional[float] = None
  kind = "rejected"


class Evaluated(NamedTuple):
  """The test loss and the task's metrics of the center at `clock`; `final` once at the end.

  `metrics` is `{name: value}` of the task's named metrics
  (`agn_jax.tasks.Task.evaluation`; classification's: accuracy); its row
  carries them by name after `loss`.
  """
  time: float
  clock: int
  loss: float
  metrics: Dict[str, float]
  final: bool
  sim_time: Optional[float] = None
  kind = "eval"

  def row_fields(self) -> Dict[str, Any]:
    """The row's fields: the metrics flat, by name, after `loss`."""
    return dict(time=self.time, clock=self.clock, loss=self.loss,
                **_named(self.metrics), final=self.final,
                sim_time=self.sim_time)


class CheckpointSaved(NamedTuple):
  """A checkpoint of the center at `clock` is complete."""
  time: float
  clock: int
  final: bool
  seconds: float
  kind = "checkpoint"


class WorkerDone(NamedTuple):
  """A worker used its data share (or was stopped) and will commit no more.

  Attributes:
    worker: the worker's index.
    num_commits: commits it pushed over the whole run (rejected ones included).
    num_samples: training samples in those commits' windows.
    stats: anything else worth reporting (peak RSS, start-up time).
  """
  worker: int
  num_commits: int
  num_samples: int
  stats: Dict[str, Any]
  kind = "worker_done"


class ServerDone(NamedTuple):
  """Every worker is done and the final checkpoint is written."""
  time: float
  num_commits: int
  rejected_commits: int
  acknowledged: Sequence[int]
  kind = "server_done"


class WorkerRestarted(NamedTuple):
  """A supervisor restarted a dead worker with the rest of its share."""
  time: float
  worker: int
  cause: str
  incarnation: int
  commits_done: int
  kind = "worker_restart"


class Failed(NamedTuple):
  """A part of the run failed.

  Attributes:
    role: "server", "evaluator" or "worker K".
    message: one line.
    traceback: the whole story, for error.log.
    fatal: the run must end (a worker that diverged again and again would
      only fail the same way after a restart).
  """
  role: str
  message: str
  traceback: str = ""
  fatal: bool = False
  kind = "error"


Event = Any  # One of the records above.

# The kinds that become rows of metrics.jsonl, by their `event` field.
ROWS = {
    cls.kind: cls for cls in (WorkerReady, Committed, Rejected, Evaluated,
                              CheckpointSaved, WorkerDone, ServerDone,
                              WorkerRestarted)
}
# Fields a row leaves out (bulky or per-process).
_NOT_IN_ROWS = {"timeline", "stats", "acknowledged"}
# The per-commit instruments of `--diagnostics` (`Committed`), in row order.
INSTRUMENTS = ("commit_norm", "distance_staleness", "cosine_previous_commit",
               "cosine_center_movement", "center_step_norm",
               "implicit_momentum", "gradient_cosine")
# The fields of a commit's row (`Committed.row_fields`), in order, besides
# the task's metrics (after `loss`) and their step values (`step_<name>`,
# after `window_end`).
COMMIT_ROW = ("time", "worker", "clock", "staleness", "loss", "sim_time",
              "window_start", "window_end", "sim_window_start",
              "sim_window_end", "local_updates", *INSTRUMENTS)
# The fields of an eval row (`Evaluated.row_fields`) besides the metrics.
EVAL_ROW = ("time", "clock", "loss", "final", "sim_time")
# Fields a row leaves out when they are None (backend- or loss-specific).
_OPTIONAL = {"sim_time", "window_start", "window_end", "sim_window_start",
             "sim_window_end", "local_updates", *INSTRUMENTS}
# `time.time()` stamps, which a row gives as seconds on its `time` base.
_STAMPS = {"time", "window_start", "window_end"}


def _named(metrics) -> Dict[str, float]:
  """A task's metrics as row fields, by name in sorted order (NaN kept: written null)."""
  return {name: float(value) for name, value in sorted(metrics.items())}


def step_values(values) -> Optional[List[float]]:
  """A step metric's values (`step_<name>`) as a row carries them: each float32 as its shortest decimal.

  The kernel computes them in float32; their shortest decimals keep every
  bit and keep the rows short (a batch-128 accuracy has at most 9 digits).

  Example:
    >>> step_values(np.array([0.5, 1 / 3, 127 / 128], np.float32))
    [0.5, 0.33333334, 0.9921875]
    >>> step_values([]) is None
    True
  """
  values = np.asarray(values, np.float32).reshape(-1)
  if not values.size:
    return None
  return [float(np.format_float_positional(v, unique=True, trim="-"))
          for v in values]


def row(event: Event, relative: Callable[[float], Optional[float]],
        **extra) -> Dict[str, Any]:
  """The metrics.jsonl row of `event`: `{"event": kind, ...fields}`.

  Args:
    event: a record whose kind is in `ROWS`.
    relative: maps a `time.time()` stamp to the row's `time` (seconds since
      training began).
    **extra: more fields (e.g. `wall_time`, `expected_commits`).
  """
  out = {"event": event.kind}
  fields = (event.row_fields() if hasattr(event, "row_fields") else
            event._asdict())
  for key, value in fields.items():
    if key in _NOT_IN_ROWS or (value is None and (
        key in _OPTIONAL or key.startswith("step_"))):
      continue
    out[key] = relative(value) if key in _STAMPS else value
  out.update(extra)
  return out
