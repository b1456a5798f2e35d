"""How the center and commits move between the parts: the backend-neutral interface.

The server and workers only talk to a `Transport`; shared memory
(`shared_memory.SharedMemoryTransport`), Ray's object store (`ray`) or
threads (`inprocess`) carry the bytes, without touching the strategies, the
server loop or the worker loop.
"""

import abc
from typing import Any, NamedTuple, Optional, Sequence, Union

import numpy as np

from agn_jax.runtime.events import WorkerDone
from agn_jax.wire import CommitMeta, Wire


class WindowPlan(NamedTuple):
  """What the server tells a worker of Dynamic Local Updates about its share, with each acknowledgement.

  Attributes:
    local_updates: local steps of the worker's next window (its λ_k, from
      the step times measured so far); 0: none planned yet, λ.
    steps_done: local steps of the worker's handled commits (applied or
      rejected) over the whole run: where a restarted worker resumes its
      share.
    ticket_start, ticket_steps: with `data_assignment=stream`, the steps of
      the stream its next window trains on (`agn_jax.shares.Tickets`),
      handed out with the acknowledgement of its last commit (its first
      before the initial center is published); `ticket_steps` 0: the
      stream is spent, the worker is done.
  """
  local_updates: int = 0
  steps_done: int = 0
  ticket_start: int = 0
  ticket_steps: int = 0


class Commit(NamedTuple):
  """A commit as the server takes it: its meta and its payload, one flat array per `Transport.wire` entry.

  `handle` is the backend's own reference (a ring slot, an object ref); the
  server passes the commit back to `Transport.release` once it is handled.
  """
  meta: CommitMeta
  payload: np.ndarray
  handle: Any = None


Message = Union[Commit, WorkerDone]


class Transport(abc.ABC):
  """What the server and the workers need from a backend, and nothing of how it moves bytes.

  One server publishes the center and takes commits in FIFO order; any
  number of workers pull the center and commit payloads. A backend's
  supervisor also uses the last group of methods after a worker died.

  Attributes:
    num_params: length of the flat float32 center.
    payload_size: flat arrays per commit (`len(wire)`).
    wire: each array's `(length, dtype)` (`agn_jax.wire.wire_spec`):
      float32 vectors of `num_params`, one per entry of `strategy.payload`,
      or a codec's arrays with `--commit_compression`.
  """

  num_params: int
  payload_size: int
  wire: Wire

  # Server side.
  @abc.abstractmethod
  def publish(self, center: np.ndarray, clock: int) -> None:
    """Makes `center` (after `clock` applied commits) what pulls return."""

  @abc.abstractmethod
  def next_commit(self, timeout: Optional[float]) -> Optional[Message]:
    """The oldest unhandled `Commit`, a `WorkerDone`, or None after `timeout` seconds."""

  @abc.abstractmethod
  def release(self, commit: Commit) -> None:
    """The server handled `commit` (applied or rejected): count it for its worker, free its storage."""

  @abc.abstractmethod
  def set_window_plan(self, worker: int, plan: WindowPlan) -> None:
    """Dynamic Local Updates: `worker`'s `WindowPlan`, set before its commit is released (so its acknowledgement carries it)."""

  # Worker side.
  @abc.abstractmethod
  def pull(self, out: np.ndarray, timeout: Optional[float] = None) -> int:
    """Copies a consistent snapshot of the center into `out`; returns its clock.

    Blocks until the server has published the initial center.

    Raises:
      TimeoutError: nothing was published within `timeout` seconds.
    """

  @abc.abstractmethod
  def commit(self, payload: Sequence[np.ndarray], meta: CommitMeta,
             timeout: Optional[float]) -> bool:
    """Queues a commit for the server; False if there was no room within `timeout` (backpressure)."""

  @abc.abstractmethod
  def wait_acknowledged(self, worker: int, count: int,
                        timeout: Optional[float]) -> bool:
    """Waits until the server handled `count` commits of `worker`; False on timeout.

    A worker pulls only after its own commits are in the center, as with the
    reference implementation's synchronous commit RPC: with one worker the
    run is then exactly Lookahead, and staleness counts other workers only.
    """

  @abc.abstractmethod
  def window_plan(self, worker: int) -> WindowPlan:
    """The `WindowPlan` the server set last for `worker` (`WindowPlan()` before any)."""

  @abc.abstractmethod
  def finish(self, done: WorkerDone) -> None:
    """Tells the server this worker will commit no more (after its commits)."""

  # Supervisor side.
  @abc.abstractmethod
  def reclaim(self, worker: int) -> int:
    """Drops what a dead `worker` started but never committed; returns how many.

    Call only once the worker has ended. A commit it queued is complete and
    is applied normally.
    """

  @abc.abstractmethod
  def in_flight(self, worker: int) -> bool:
    """Whether a commit of `worker` is queued or being applied."""

  @abc.abstractmethod
  def acknowledged(self, worker: int) -> int:
    """How many of `worker`'s commits the server has handled (applied or rejected)."""

  @abc.abstractmethod
  def set_acknowledged(self, worker: int, count: int) -> None:
    """Server side, on resume: `worker` starts with `count` handled commits."""

  def steps_done(self, worker: int, communication_window: int,
                 dynamic_local_updates: bool) -> int:
    """Local steps of `worker`'s handled commits over the run: where its share goes on.

    With Dynamic Local Updates its windows differ in length, so the server
    counts them (`WindowPlan.steps_done`); otherwise each is λ steps.
    """
    if dynamic_local_updates:
      return self.window_plan(worker).steps_done
    return self.acknowledged(worker) * communication_window

  @abc.abstractmethod
  def is_done(self, worker: int) -> bool:
    """Whether `worker` (or its supervisor on its behalf) called `finish`."""

  def close(self) -> None:
    """Releases this process' handles."""

  def unlink(self) -> None:
    """Destroys the shared state (owner only, after every process is gone)."""
