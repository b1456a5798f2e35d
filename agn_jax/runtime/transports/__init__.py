"""What the parts of a run talk through: the `Transport` and its channels, and their implementations.

  base.py            the backend-neutral interface: `Transport`, `CommitMeta`,
                     `WindowPlan`, wire specs
  channels.py        what a part uses besides it: switches, events, replies, data
  board.py           `CommitBoard`: the state a transport keeps somewhere
  shm.py             shared-memory segments, switches and arrays
  shared_memory.py   `SharedMemoryTransport` (the processes backend's)
  ray.py             Ray's transport and channels: hub and mailbox actors
  inprocess.py       a transport and channels between threads
"""
