"""What every child process (server, worker, evaluator) shares: start-up, JAX set-up, failure reports.

Nothing here imports JAX at module level: a child applies its placement first.
"""

import os
import signal
import traceback
from typing import NamedTuple, Optional, Sequence, Tuple

from agn_jax.errors import Diverged
from agn_jax.runtime import channels
from agn_jax.runtime import placement as placement_lib
from agn_jax.runtime.transport import Transport

DEFAULT_CACHE_DIR = os.path.join("~", ".cache", "agn_jax", "jax_cache")


class RunContext(NamedTuple):
  """Everything a part needs, handed over once when it starts (a `Process` argument, say).

  Attributes:
    config: `TrainConfig.to_dict()` (every part rebuilds the same pieces).
    data: the run's data.
    transport: the center and the commits.
    events: the part's channel to the launcher (with processes, the server
      and the evaluator share a queue; each worker gets its own
      `EventPipe`).
    switches: the run's `channels.SWITCH_NAMES`.
    layout: the parameters' shapes and dtypes (`FlatLayout.metadata()`).
    num_classes: of the dataset.
    input_shape: of one example.
    cache_dir: JAX's persistent compilation cache, shared by all processes.
    parent_pid: the launcher; a child whose parent is gone exits. None
      where the backend ties its parts' lives to the launcher itself (Ray
      ends a driver's actors with it).
  """
  config: dict
  data: channels.DataSource
  transport: Transport
  events: channels.Events
  switches: channels.Switches
  layout: Sequence
  num_classes: int
  input_shape: Tuple[int, ...]
  cache_dir: Optional[str]
  parent_pid: Optional[int]


class EventPipe(channels.Events):
  """A worker's own channel to the launcher: the writing end of a pipe.

  One writer per pipe, and no lock: a worker killed mid-message cannot block
  anyone else, unlike a `multiprocessing.Queue` shared by all workers.
  """

  def __init__(self, connection):
    self._connection = connection

  def put(self, event) -> None:
    self._connection.send(event)


class QueueEvents(channels.Events):
  """The server's and the evaluator's channel to the launcher: a `multiprocess.Queue`.

  Its feeder thread takes what is put, so the server never waits for the
  launcher to read.
  """

  def __init__(self, queue):
    self.queue = queue

  def put(self, event) -> None:
    self.queue.put(event)


class PipeReplies(channels.Replies):
  """The launcher's answers to the server: the reading end of a pipe."""

  def __init__(self, connection):
    self._connection = connection

  def poll(self, timeout):
    return self._connection.poll(timeout)

  def recv(self):
    return self._connection.recv()


def enter(placement: placement_lib.Placement) -> None:
  """Applies a placement at the very top of a child, before JAX is imported.

  The launcher already spawned the child with this environment; setting it
  again keeps a child correct however it was started.
  """
  try:
    # The launcher coordinates Ctrl-C; a child must not die of it on its own.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
  except ValueError:  # Not the main thread: the process handles its own.
    pass
  os.environ.update(placement.env)
  if placement.cpu_affinity and hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, placement.cpu_affinity)
  if placement.nice:
    os.nice(placement.nice)


def configure_jax(cache_dir: Optional[str]):
  """Imports JAX with the persistent compilation cache on; returns the module.

  With the cache every process after the first loads the compiled window
  kernel from disk instead of compiling it again.
  """
  import jax
  if cache_dir:
    jax.config.update("jax_compilation_cache_dir",
                      os.path.expanduser(cache_dir))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
  return jax


def parent_alive(ctx: RunContext) -> bool:
  """False once the launcher is gone (re-parented), so no child is orphaned."""
  return ctx.parent_pid is None or os.getppid() == ctx.parent_pid


def report_failure(ctx: RunContext, role: str, error: BaseException) -> None:
  """Sends a failure to the launcher: one line plus the traceback."""
  from agn_jax.runtime import events
  line = f"{type(error).__name__}: {error}".splitlines()[0] if str(
      error) else type(error).__name__
  try:
    ctx.events.put(events.Failed(role, line, traceback.format_exc(),
                                 fatal=isinstance(error, Diverged)))
  except Exception:  # The launcher may be gone already.
    pass


def build_parts(ctx: RunContext):
  """`(config, strategy, model, loss_fn, layout)`, checked against the launcher's layout."""
  from agn_jax import build
  from agn_jax.config import TrainConfig
  config = TrainConfig.from_dict(ctx.config)
  strategy = build.build_strategy(config)
  model, loss_fn = build.build_model(config, ctx.num_classes, ctx.input_shape)
  layout = param_layout(model, config, ctx.input_shape)
  layout.check(ctx.layout)
  return config, strategy, model, loss_fn, layout


def param_layout(model, config, input_shape):
  """The `FlatLayout` of the model's parameters, without computing them."""
  import math
  import jax
  from agn_jax import flat, models
  input_dim = math.prod(input_shape)
  shapes = jax.eval_shape(
      lambda: models.init_params(model, jax.random.PRNGKey(config.seed),
                                 input_dim))
  return flat.FlatLayout.from_tree(shapes)


class Fault(NamedTuple):
  """A test hook: make a real worker fail at a given window.

  Read from `AGN_JAX_FAULT="kind:worker=W:window=K[:incarnations=I]"`, kind
  one of `raise` (raise an exception), `exit` (die without a word, as a
  crash would) or `nan` (turn the worker's parameters non-finite before
  that window's steps, as a non-finite gradient would). Window K counts
  over the worker's whole share; the fault strikes in the first I
  incarnations of the worker (default 1: a restarted worker runs clean).
  """
  kind: str
  worker: int
  window: int
  incarnations: int = 1


def parse_fault(spec: Optional[str]) -> Optional[Fault]:
  """Parses `AGN_JAX_FAULT`; None when unset.

  Example:
    >>> parse_fault("raise:worker=1:window=3")
    Fault(kind='raise', worker=1, window=3, incarnations=1)
  """
  if not spec:
    return None
  kind, *fields = spec.split(":")
  values = dict(f.split("=", 1) for f in fields)
  if (kind not in ("raise", "exit", "nan") or
      not {"worker", "window"} <= set(values) <=
      {"worker", "window", "incarnations"}):
    raise ValueError(f"AGN_JAX_FAULT must look like 'raise|exit|nan:worker=W"
                     f":window=K[:incarnations=I]', got {spec!r}")
  return Fault(kind, int(values["worker"]), int(values["window"]),
               int(values.get("incarnations", 1)))


class Slowdown(NamedTuple):
  """A test hook: make a real worker slower, as a slower machine would be.

  Read from `AGN_JAX_SLOW="worker=W:seconds=S"`: worker W sleeps S seconds
  per local step of each window, inside the window's measured time (what
  Dynamic Local Updates plan the next window from).
  """
  worker: int
  seconds: float


def parse_slowdown(spec: Optional[str]) -> Optional[Slowdown]:
  """Parses `AGN_JAX_SLOW`; None when unset.

  Example:
    >>> parse_slowdown("worker=1:seconds=0.01")
    Slowdown(worker=1, seconds=0.01)
  """
  if not spec:
    return None
  try:
    values = dict(f.split("=", 1) for f in spec.split(":"))
    if set(values) != {"worker", "seconds"}:
      raise ValueError(spec)
    return Slowdown(int(values["worker"]), float(values["seconds"]))
  except ValueError:
    raise ValueError(f"AGN_JAX_SLOW must look like 'worker=W:seconds=S', got "
                     f"{spec!r}") from None
