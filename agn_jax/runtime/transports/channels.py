"""What a part of a run (the server, a worker, the evaluator) uses besides the `Transport`: switches, events, replies and data.

Each backend implements them for its parts: shared memory, pipes and a
queue for processes (`shm`, `agn_jax.runtime.backends.processes`), the hub
and mailbox actors for Ray (`ray`), plain Python objects for threads
(`inprocess`). The parts' loops (`server.serve`, `worker.run_worker`,
`evaluator.run_evaluator`) see only these classes and `base.Transport`.

Example:
  >>> from agn_jax.runtime.transports.inprocess import InProcessSwitches
  >>> switches = InProcessSwitches()
  >>> switches.set("go")
  >>> switches.is_set("go"), switches.wait("stop", timeout=0.01)
  (True, False)
"""

import abc
from typing import Dict

import numpy as np

# stop: workers finish their window and report done; abort: every part
# leaves now; go: every worker is ready, training begins; compiled: worker 0
# filled the compilation cache; final: evaluate the final center and exit.
SWITCH_NAMES = ("stop", "abort", "go", "compiled", "final")


class Switches(abc.ABC):
  """The run's one-way switches (`SWITCH_NAMES`): once set, by the supervisor or a part, set for every part."""

  @abc.abstractmethod
  def set(self, name: str) -> None:
    """Sets `name` for every part."""

  @abc.abstractmethod
  def is_set(self, name: str) -> bool:
    """Whether `name` is set; may lag a set by a few milliseconds."""

  @abc.abstractmethod
  def wait(self, name: str, timeout: float) -> bool:
    """Whether `name` got set within `timeout` seconds."""


class Events(abc.ABC):
  """A part's channel to its supervisor: `events` records, taken in the order they were put."""

  @abc.abstractmethod
  def put(self, event) -> None:
    """Sends `event` to the supervisor."""

  def flush(self) -> None:
    """Returns once the supervisor can take every event put so far; a part calls it before it returns."""


class Replies(abc.ABC):
  """The supervisor's answers to the server's `events.CheckpointRequest`s, in order."""

  @abc.abstractmethod
  def poll(self, timeout: float) -> bool:
    """Whether an answer is there, waiting up to `timeout` seconds."""

  @abc.abstractmethod
  def recv(self):
    """The next answer, `(clock, metrics position, wall seconds)`; waits for it."""


class DataSource(abc.ABC):
  """The run's data, as every part reads it."""

  @abc.abstractmethod
  def arrays(self) -> Dict[str, np.ndarray]:
    """`x_train`, `y_train`, `x_test` and `y_test`; the parts only read them."""
