"""The seam between a run and the machinery that runs it.

A `Backend` supervises the run's parts (start, watch, restart, stop) and
hands every event to the shared books (`bookkeeping.RunBook`); `train()`
picks one by name from `BACKENDS`. What every backend computes the same way
(the data, the shares, the parameter layout) is `plan()`.
"""

import abc
import importlib
import time
from typing import Any, NamedTuple, Optional

import numpy as np

from agn_jax.config import TrainConfig
from agn_jax.runtime import events as ev
from agn_jax.runtime.bookkeeping import RunError

# name -> "module:Class", imported on first use (Ray is an optional install).
BACKENDS = {
    "processes": "agn_jax.runtime.processes:ProcessesBackend",
    "simulated": "agn_jax.runtime.simulated:SimulatedBackend",
    "ray": "agn_jax.runtime.ray_backend:RayBackend",
}


def available() -> tuple:
  """The backend names `train()` and `--backend` accept."""
  return tuple(BACKENDS)


def backend_class(name: str):
  """The class registered under `name`."""
  if name not in BACKENDS:
    raise ValueError(f"backend must be one of {available()}, got {name!r}")
  module, cls = BACKENDS[name].split(":")
  return getattr(importlib.import_module(module), cls)


class Plan(NamedTuple):
  """What a run trains on and how the work is shared, the same for every backend.

  Attributes:
    dataset: the `agn_jax.data.Dataset`.
    windows: whole communication windows in each worker's share.
    expected_commits: `num_workers × windows`.
    layout: the parameters' `FlatLayout`.
    payload_size: flat vectors per commit.
  """
  dataset: Any
  windows: int
  expected_commits: int
  layout: Any
  payload_size: int


def plan(config: TrainConfig, dataset=None) -> Plan:
  """Loads the data and checks that every worker has at least one window.

  Raises:
    ValueError: too few examples for the workers, or a share shorter than a
      window.
  """
  from agn_jax import build, data
  from agn_jax.runtime import _child
  from agn_jax.runtime.worker import windows_per_worker
  if dataset is None:
    dataset = data.load(config.dataset, config.data_dir,
                        size=config.dataset_size, seed=config.seed)
  n = config.num_workers
  if len(dataset.x_train) < n:
    raise ValueError(f"{len(dataset.x_train)} training examples cannot be "
                     f"sharded over {n} workers")
  windows = windows_per_worker(len(dataset.x_train), n, config.epochs,
                               config.communication_window, config.batch_size)
  if windows < 1:
    raise ValueError(
        f"each worker's share ({config.epochs:g} epochs × "
        f"{len(dataset.x_train)} / {n} samples) is less than one "
        f"communication window (λ × batch = "
        f"{config.communication_window * config.batch_size})")
  model, _ = build.build_model(config, dataset.num_classes,
                               dataset.input_shape)
  layout = _child.param_layout(model, config, dataset.input_shape)
  strategy = build.build_strategy(config)
  if config.resume:
    # Before anything is written: the checkpoint's metadata, its run and its
    # fit to this config (the arrays are checked when they are restored).
    from agn_jax import checkpoint
    checkpoint.validate_for_resume(config.workdir, config.to_dict(),
                                   len(dataset.x_train), layout.metadata())
  return Plan(dataset, windows, n * windows, layout, len(strategy.payload))


class Backend(abc.ABC):
  """Supervision of one run: what differs between processes, a simulator and a cluster.

  Args:
    config: the resolved config.
    book: the run's books; every event goes to `book.handle`.
    options: backend-specific keyword arguments of `train()`.
  """

  name: str = ""

  def __init__(self, config: TrainConfig, book, **options):
    self.config = config
    self.book = book
    self.options = options

  @abc.abstractmethod
  def prepare(self, dataset=None) -> None:
    """Loads the data and sets up resources; nothing runs yet.

    Opens the books (`book.open`) unless the run resumes, when that waits
    for the checkpoint to be restored.

    Raises:
      ValueError: the config does not fit the data.
    """

  @abc.abstractmethod
  def run(self) -> None:
    """Starts every part and supervises until the final evaluation.

    Raises:
      RunError: a part failed beyond what the restart budget allows.
    """

  @abc.abstractmethod
  def wind_down(self, seconds: float) -> None:
    """After an interrupt: workers finish their window, the server its final checkpoint."""

  @abc.abstractmethod
  def final_center(self) -> Optional[np.ndarray]:
    """The center at the end, flat float32."""

  @abc.abstractmethod
  def shutdown(self) -> None:
    """Ends every part and frees every resource; safe to call twice."""


class ServerBackend(Backend):
  """A backend of separate parts (a server, workers, an evaluator) that talk through a `Transport`.

  Subclasses set `transport` and `flags` (the run's stop/abort/go/compiled/
  final flags) in `prepare`, keep `incarnations` (worker -> restarts so far)
  and supervise in `_supervise`; what a part's exit means, winding down and
  reading the final center are then the same for all of them.
  """

  transport = None
  flags = None
  incarnations = None

  def _check_exit(self, role: str, ok: bool, cause: str) -> None:
    """The server or the evaluator left: fine once its work is done, else the run fails.

    Raises:
      RunError: `"{role} {cause}"`.
    """
    expected = ((role == "server" and self.book.server_done is not None) or
                (role == "evaluator" and self.book.final_eval is not None))
    if not (ok and expected):
      raise RunError(f"{role} {cause}")

  def _worker_exited(self, w: int, ok: bool, cause: str) -> bool:
    """What worker `w`'s exit means; True when the backend must start it again.

    Its share done, or all its commits in: nothing to redo. Winding down: no
    restart, and the server is told it is done. Otherwise the books count a
    restart (the run fails past its budget) with the error the worker
    reported, else `cause`.
    """
    book, transport = self.book, self.transport
    if ok and w in book.worker_done:
      return False  # Its share is done.
    error = book.take_worker_error(w)
    if error:
      cause = f"failed: {error}"
    if transport.is_done(w):
      return False  # It died after finishing its share: nothing to redo.
    transport.reclaim(w)  # A commit it was writing; a queued one stays.
    if self.flags.is_set("stop"):
      # Winding down: no restart; the server must not wait for this worker.
      acked = transport.acknowledged(w)
      samples = acked * self.config.communication_window * self.config.batch_size
      done = ev.WorkerDone(w, acked, samples, {})
      transport.finish(done)
      book.handle(done)
      return False
    book.worker_failed(w, cause, transport.acknowledged(w),
                       self.incarnations[w] + 1)
    self.incarnations[w] += 1
    return True

  @abc.abstractmethod
  def _supervise(self, deadline: Optional[float] = None) -> None:
    """Handles events and exits until the final evaluation, or `deadline` (monotonic)."""

  def _stop_after_max_seconds(self, timeout: float) -> float:
    """Sets `stop` once `max_seconds` have passed; returns how long to wait at most."""
    config = self.config
    if config.max_seconds and not self.flags.is_set("stop"):
      remaining = config.max_seconds - (time.time() - self.book.t0)
      if remaining <= 0:
        self.flags.set("stop")  # Workers finish their window and report done.
      timeout = max(0.0, min(timeout, remaining))
    return timeout

  def _advance(self) -> None:
    """The start barrier once every worker is ready; `final` once the server is done."""
    book = self.book
    if (not self.flags.is_set("go") and
        len(book.ready) == self.config.num_workers):
      book.start_training()
      self.flags.set("go")  # Every worker is compiled: training begins.
    if book.server_done is not None and not self.flags.is_set("final"):
      self.flags.set("final")  # The center is final: evaluate it once more.

  def wind_down(self, seconds):
    if self.flags is not None and self.book.owns_files:
      self.flags.set("stop")  # Workers finish their window and report done.
      self._supervise(deadline=time.monotonic() + seconds)

  def final_center(self):
    center = np.empty(self.transport.num_params, np.float32)
    self.transport.pull(center)
    return center
