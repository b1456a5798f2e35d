"""The runtime: `train(config)` on a backend (processes, simulated, ray), with shared books.

The shared loops and books sit at the top: `server`, `worker`, `evaluator`
(the parts), `context.RunContext` (what each part is handed), `backend`
(the `Backend` seam and `ServerBackend`, the one supervisor), `events` and
`bookkeeping.RunBook` (one record of a run for every backend), `launcher`
(`train`). `transports/` holds what the parts talk through (the
`Transport` interface and its channels; shared memory, Ray, threads);
`backends/` what differs between the backends (processes, ray, simulated,
and the threads backend for tests).
"""

from agn_jax.errors import (NothingToDo, RunError, Terminated, WorkdirBusy,
                            WorkdirError)
from agn_jax.placement import Placement, host_placement, worker_placement
from agn_jax.runtime.context import Fault, Faults, Slowdown
from agn_jax.runtime.events import WorkerDone
from agn_jax.runtime.transports.base import Commit, Transport
from agn_jax.runtime.transports.shared_memory import SharedMemoryTransport
from agn_jax.wire import CommitMeta



def __getattr__(name):
  # The launcher imports JAX (seconds); load it on first use.
  if name == "train":
    from agn_jax.runtime.launcher import train  # pylint: disable=g-import-not-at-top
    globals()["train"] = train
    return train
  raise AttributeError(
      f"module 'agn_jax.runtime' has no attribute {name!r}")


__all__ = [
    "Commit", "CommitMeta", "Fault", "Faults", "NothingToDo",
    "Placement", "RunError", "SharedMemoryTransport", "Slowdown", "Terminated", "Transport",
    "WorkdirBusy", "WorkdirError", "WorkerDone", "host_placement", "train",
    "worker_placement",
]
