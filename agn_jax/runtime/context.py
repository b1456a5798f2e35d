"""What every part (server, worker, evaluator) is handed and shares, whatever the backend.

`RunContext` is the contract between a backend and the loops: the config,
the data, the transport, the channels and the faults a test injects. The
helpers are each part's start-up, JAX set-up and failure report. Nothing
here imports JAX at module level: a child applies its placement first.
"""

import os
import signal
import threading
import traceback
from typing import Any, NamedTuple, Optional, Sequence, Tuple

from agn_jax import placement as placement_lib
from agn_jax.errors import DataMismatch, Diverged
from agn_jax.runtime.transports import channels
from agn_jax.runtime.transports.base import Transport

DEFAULT_CACHE_DIR = os.path.join("~", ".cache", "agn_jax", "jax_cache")


class Fault(NamedTuple):
  """A test hook: make a real worker fail at a given window.

  `kind` is `raise` (raise an exception), `exit` (die without a word, as a
  crash would) or `nan` (turn the worker's parameters non-finite before
  that window's steps, as a non-finite gradient would). Window `window`
  counts over the worker's whole share; the fault strikes in the first
  `incarnations` incarnations of the worker (default 1: a restarted worker
  runs clean).
  """
  kind: str
  worker: int
  window: int
  incarnations: int = 1


class Slowdown(NamedTuple):
  """A test hook: make a real worker slower, as a slower machine would be.

  Worker `worker` sleeps `seconds` per local step of each window, inside
  the window's measured time (what Dynamic Local Updates plan the next
  window from).
  """
  worker: int
  seconds: float


class Turns:
  """A test hook: the workers commit in a given order, one at a time (threads backend only).

  The commits of a run on threads come in whatever order the threads
  reach the server. With `Turns` they come in `order` (a worker index per
  commit), and each commit is applied, and its worker has pulled and
  received, before the next one is made, so the run is one exact schedule that another path
  (`agn_jax.strategies.exchange`) can replay. The first commit waits until
  every worker pulled the initial center. It holds a lock, so it reaches
  threads only, not a spawned process.

  Example:
    >>> turns = Turns([1, 0])
    >>> for worker in (0, 1):
    ...   turns.arrive()
    >>> turns.wait(1, 0, timeout=1.0), turns.wait(0, 0, timeout=0.01)
    (True, False)
    >>> turns.done(); turns.wait(0, 0, timeout=1.0)
    True
  """

  def __init__(self, order: Sequence[int]):
    self.order = tuple(int(w) for w in order)
    self.workers = len(set(self.order))
    self._turn = 0
    self._arrived = 0
    self._changed = threading.Condition()

  def arrive(self) -> None:
    """A worker pulled the initial center."""
    with self._changed:
      self._arrived += 1
      self._changed.notify_all()

  def position(self, worker: int, commit: int) -> int:
    """Where `worker`'s `commit`-th commit (from 0) stands in `order`."""
    return [i for i, w in enumerate(self.order) if w == worker][commit]

  def wait(self, worker: int, commit: int, timeout: float) -> bool:
    """Waits until `worker`'s `commit`-th commit may go; False after `timeout` seconds."""
    position = self.position(worker, commit)
    with self._changed:
      return self._changed.wait_for(
          lambda: self._arrived >= self.workers and self._turn == position,
          timeout)

  def done(self) -> None:
    """The worker whose turn it was has committed, pulled and received."""
    with self._changed:
      self._turn += 1
      self._changed.notify_all()


class Faults(NamedTuple):
  """The faults a test injects into a run's workers: data, so it reaches a spawned process or an actor.

  A test passes it to `agn_jax.runtime.train(..., faults=...)` (or to a
  backend); it travels in the `RunContext`, and each worker asks it for its
  own. A production run has none.

  Attributes:
    fault: a `Fault`, or None.
    slowdown: a `Slowdown`, or None.
    turns: a `Turns` (threads only), or None.

  Example:
    >>> faults = Faults(fault=Fault("raise", worker=1, window=3))
    >>> faults.fault_for(worker=1, incarnation=0)
    Fault(kind='raise', worker=1, window=3, incarnations=1)
    >>> faults.fault_for(worker=1, incarnation=1), faults.slowdown_for(1)
    (None, 0.0)
  """
  fault: Optional[Fault] = None
  slowdown: Optional[Slowdown] = None
  turns: Optional[Turns] = None

  def fault_for(self, worker: int, incarnation: int) -> Optional[Fault]:
    """The `Fault` that strikes this incarnation of `worker`, or None."""
    fault = self.fault
    if (fault is None or fault.worker != worker or
        incarnation >= fault.incarnations):
      return None
    return fault

  def slowdown_for(self, worker: int) -> float:
    """Seconds `worker` sleeps per local step (0: none)."""
    slow = self.slowdown
    return slow.seconds if slow is not None and slow.worker == worker else 0.0


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
    num_classes: of the dataset (the model's output width).
    input_shape: of one example, as the model reads it.
    example: the training inputs' `agn_jax.data.Example` (one row's shape
      and dtype): what the model is initialized on.
    cache_dir: JAX's persistent compilation cache, shared by all processes.
    parent_pid: the launcher; a child whose parent is gone exits. None
      where the backend ties its parts' lives to the launcher itself (Ray
      ends a driver's actors with it).
    faults: what a test injects into the workers (`Faults`); none in a
      production run.
  """
  config: dict
  data: channels.DataSource
  transport: Transport
  events: channels.Events
  switches: channels.Switches
  layout: Sequence
  num_classes: int
  input_shape: Tuple[int, ...]
  example: Any
  cache_dir: Optional[str]
  parent_pid: Optional[int]
  faults: Faults = Faults()


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
                                 fatal=isinstance(error,
                                                  (Diverged, DataMismatch))))
  except Exception:  # The launcher may be gone already.
    pass


def build_parts(ctx: RunContext):
  """`(config, strategy, model, loss_fn, layout)`, checked against the launcher's layout."""
  from agn_jax import build
  from agn_jax.config import TrainConfig
  config = TrainConfig.from_dict(ctx.config)
  strategy = build.build_strategy(config)
  model, loss_fn = build.build_model(config, ctx.num_classes, ctx.input_shape)
  layout = param_layout(model, config, ctx.example)
  layout.check(ctx.layout)
  return config, strategy, model, loss_fn, layout


def param_shapes(model, config, example):
  """The model's parameters as `jax.ShapeDtypeStruct`s, without computing them.

  `example` is the inputs' `agn_jax.data.Example` (`build.init_params`).
  """
  import jax
  from agn_jax import build
  return jax.eval_shape(lambda: build.init_params(config, model, example))


def param_layout(model, config, example, shapes=None):
  """The `FlatLayout` of the model's parameters, without computing them.

  `example` is the inputs' `agn_jax.data.Example` (`build.init_params`);
  `shapes`, the parameters' shapes where the caller has them already
  (`param_shapes`).
  """
  from agn_jax import wire
  if shapes is None:
    shapes = param_shapes(model, config, example)
  return wire.FlatLayout.from_tree(shapes)
