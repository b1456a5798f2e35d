"""The runtime: `train(config)` on a backend (processes, simulated, ray), with shared books.

`backend.Backend` is the seam a backend implements (supervision; the
processes and Ray backends share `backend.ServerBackend`);
`transport.Transport` and `channels` are what the server, the workers and
the evaluator need from it; `bookkeeping.RunBook` writes the run's files the
same way for every backend.
"""

from agn_jax.errors import (NothingToDo, RunError, Terminated, WorkdirBusy,
                            WorkdirError)
from agn_jax.runtime.events import WorkerDone
from agn_jax.runtime.launcher import train
from agn_jax.runtime.placement import Placement, host_placement, worker_placement
from agn_jax.runtime.transport import (Commit, CommitHeader, CommitMeta,
                                       SharedMemoryTransport, Transport)

__all__ = [
    "Commit", "CommitHeader", "CommitMeta", "NothingToDo", "Placement",
    "RunError", "SharedMemoryTransport", "Terminated", "Transport",
    "WorkdirBusy", "WorkdirError", "WorkerDone", "host_placement", "train",
    "worker_placement",
]
