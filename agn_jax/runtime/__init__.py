"""The multi-process runtime: a parameter-server process and worker processes over shared memory.

`train(config)` is the entry point; `Transport` is the seam where another
backend (a deterministic simulator, multi-host) plugs in.
"""

from agn_jax.runtime.launcher import RunError, Terminated, train
from agn_jax.runtime.placement import Placement, host_placement, worker_placement
from agn_jax.runtime.transport import (CommitHeader, SharedMemoryTransport,
                                       Transport, WorkerDone)

__all__ = [
    "CommitHeader", "Placement", "RunError", "SharedMemoryTransport",
    "Terminated", "Transport", "WorkerDone", "host_placement", "train",
    "worker_placement",
]
