"""The runtime: `train(config)` on a backend (processes, simulated, ray), with shared books.

`backend.Backend` is the seam a backend implements (supervision);
`transport.Transport` is what the server and the workers need from it;
`bookkeeping.RunBook` writes the run's files the same way for every backend.
"""

from agn_jax.runtime.bookkeeping import NothingToDo, RunError
from agn_jax.runtime.events import WorkerDone
from agn_jax.runtime.launcher import Terminated, train
from agn_jax.runtime.placement import Placement, host_placement, worker_placement
from agn_jax.runtime.transport import (Commit, CommitHeader, CommitMeta,
                                       SharedMemoryTransport, Transport)
from agn_jax.runtime.workdir import WorkdirBusy, WorkdirError

__all__ = [
    "Commit", "CommitHeader", "CommitMeta", "NothingToDo", "Placement",
    "RunError", "SharedMemoryTransport", "Terminated", "Transport",
    "WorkdirBusy", "WorkdirError", "WorkerDone", "host_placement", "train",
    "worker_placement",
]
