"""POSIX shared-memory segments with owner-only permissions and explicit ownership.

Python's `SharedMemory` (3.11) registers every *attach* with a resource tracker
that may unlink a segment when an attaching child exits; here only the creating
process (the launcher) registers and unlinks, children merely map.
"""

import contextlib
import fcntl
import mmap
import os
import secrets
import time
from typing import Dict, List, Mapping, NamedTuple, Sequence, Tuple

import _posixshmem
import numpy as np

from agn_jax.runtime.transports import channels

_PREFIX = "agn_"
ALIGN = 64  # A cache line: slots and buffers never share one.


def new_name() -> str:
  """A unique, unguessable segment name, e.g. `agn_3f9c0a1b2c3d4e5f`."""
  return _PREFIX + secrets.token_hex(8)


def aligned(nbytes: int) -> int:
  return -(-int(nbytes) // ALIGN) * ALIGN


class Segment:
  """One shared-memory segment mapped into this process.

  Create it once in the owner (`Segment.create`), pass `name` to other
  processes, which `Segment.attach` it; the owner calls `unlink` at the end.
  The segment is created with mode 0o600 (owner-only) and `O_EXCL`, so a name
  collision or a pre-planted segment fails loudly instead of being shared.
  """

  def __init__(self, name: str, size: int, mapping: mmap.mmap, owner: bool):
    self.name = name
    self.size = size
    self._mmap = mapping
    self.owner = owner

  @classmethod
  def create(cls, size: int, name: str = None, track: bool = True) -> "Segment":
    """Creates a new segment of `size` bytes (zero-filled)."""
    name = name or new_name()
    size = max(int(size), 1)
    fd = _posixshmem.shm_open("/" + name,
                              os.O_CREAT | os.O_EXCL | os.O_RDWR,
                              mode=0o600)
    try:
      os.fchmod(fd, 0o600)  # Independent of the umask.
      os.ftruncate(fd, size)
      mapping = mmap.mmap(fd, size)
    except BaseException:
      os.close(fd)
      _posixshmem.shm_unlink("/" + name)
      raise
    os.close(fd)
    if track:
      # If the owner is killed (SIGKILL) the tracker process still unlinks.
      from multiprocess import resource_tracker
      resource_tracker.register("/" + name, "shared_memory")
    seg = cls(name, size, mapping, owner=True)
    seg._tracked = track
    return seg

  @classmethod
  def attach(cls, name: str) -> "Segment":
    fd = _posixshmem.shm_open("/" + name, os.O_RDWR, mode=0o600)
    try:
      size = os.fstat(fd).st_size
      mapping = mmap.mmap(fd, size)
    finally:
      os.close(fd)
    return cls(name, size, mapping, owner=False)

  def lock_fd(self) -> int:
    """A descriptor of this segment private to this process, for `flock`.

    `flock` locks belong to an open file description and the kernel drops
    them when the holder dies, so unlike a `multiprocessing.Lock` a worker
    killed inside a critical section never blocks the others.
    """
    return _posixshmem.shm_open("/" + self.name, os.O_RDWR, mode=0o600)

  def array(self, dtype, shape, offset: int = 0) -> np.ndarray:
    """A numpy view of `shape` `dtype` elements at byte `offset`."""
    return np.ndarray(shape, dtype=dtype, buffer=self._mmap, offset=offset)

  def close(self):
    """Unmaps the segment (a no-op while numpy views of it are alive)."""
    if self._mmap is not None:
      try:
        self._mmap.close()
        self._mmap = None
      except BufferError:
        pass  # Views still alive; the mapping goes when they do.

  def unlink(self):
    """Removes the name; the memory goes once every process has unmapped it."""
    try:
      _posixshmem.shm_unlink("/" + self.name)
    except FileNotFoundError:
      pass
    if getattr(self, "_tracked", False):
      from multiprocess import resource_tracker
      resource_tracker.unregister("/" + self.name, "shared_memory")
      self._tracked = False


def semaphore_names(*objects) -> List[str]:
  """The names of the named semaphores that `objects` hold (locks, queues, semaphores of `multiprocess`).

  A spawn-context semaphore lives in /dev/shm (`sem.mp-...`) until its
  resource tracker unlinks it; a run killed with its tracker leaves it
  there, so pids.json records the names (`unlink_leftovers`).
  """
  names = []
  for obj in objects:
    for part in [obj, *vars(obj).values()]:
      name = getattr(getattr(part, "_semlock", None), "name", None)
      if isinstance(name, str) and name not in names:
        names.append(name)
  return names


def unlink_leftovers(segments: Sequence[str] = (),
                     semaphores: Sequence[str] = ()) -> List[str]:
  """Unlinks the segments and semaphores a dead run left in /dev/shm; returns those that were there.

  Only names a run recorded as its own (pids.json) and never one of this
  package's prefix that another live run might hold: the caller checks that
  every process of that run is gone first.
  """
  import _multiprocess  # pylint: disable=g-import-not-at-top
  removed = []
  for name in segments:
    if isinstance(name, str) and name.startswith(_PREFIX):
      try:
        _posixshmem.shm_unlink("/" + name)
        removed.append(name)
      except OSError:
        pass
  for name in semaphores:
    if isinstance(name, str) and name.startswith("/mp-"):
      try:
        _multiprocess.sem_unlink(name)
        removed.append(name)
      except OSError:
        pass
  return removed


class ArraySpec(NamedTuple):
  offset: int
  shape: Tuple[int, ...]
  dtype: str


class SharedArrays(channels.DataSource):
  """Read-only numpy arrays placed once in one segment and shared by all processes.

  The launcher creates it from a dict of arrays; pickling it (to a spawned
  child) carries only the name and the layout, and the child's `arrays()` are
  views onto the same physical pages: `n` workers hold one copy of the data.

  Example:
    >>> shared = SharedArrays.create({"x": np.ones((2, 3), np.float32)})
    >>> float(shared.arrays()["x"].sum())
    6.0
    >>> shared.close(); shared.unlink()
  """

  def __init__(self, name: str, specs: Mapping[str, ArraySpec]):
    self.name = name
    self.specs = dict(specs)
    self._segment = None

  @classmethod
  def create(cls, arrays: Mapping[str, np.ndarray]) -> "SharedArrays":
    specs, offset = {}, 0
    for key, value in arrays.items():
      value = np.ascontiguousarray(value)
      specs[key] = ArraySpec(offset, tuple(value.shape), value.dtype.str)
      offset += aligned(value.nbytes)
    segment = Segment.create(offset)
    shared = cls(segment.name, specs)
    shared._segment = segment
    for key, value in arrays.items():
      spec = specs[key]
      shared._view(key, spec)[...] = value
    return shared

  def _view(self, key, spec):
    return self._segment.array(np.dtype(spec.dtype), spec.shape, spec.offset)

  def arrays(self) -> Dict[str, np.ndarray]:
    """Read-only views of every array (attaches on first use)."""
    if self._segment is None:
      self._segment = Segment.attach(self.name)
    out = {}
    for key, spec in self.specs.items():
      view = self._view(key, spec)
      view.flags.writeable = False
      out[key] = view
    return out

  def __getstate__(self):
    return {"name": self.name, "specs": self.specs}

  def __setstate__(self, state):
    self.__init__(state["name"], state["specs"])

  def close(self):
    if self._segment is not None:
      self._segment.close()

  def unlink(self):
    if self._segment is not None and self._segment.owner:
      self._segment.unlink()


@contextlib.contextmanager
def flocked(fd: int):
  """Holds an exclusive `flock` on `fd` (released by the kernel if we die)."""
  fcntl.flock(fd, fcntl.LOCK_EX)
  try:
    yield
  finally:
    fcntl.flock(fd, fcntl.LOCK_UN)


class Switches(channels.Switches):
  """Named one-way switches (0 → 1) in shared memory, for the launcher and its children.

  Used instead of `multiprocessing.Event`, whose condition variable counts
  its sleepers: a sleeper killed with SIGKILL makes every later `set()` wait
  forever. A switch here is one int64 word, set by a single store and polled.

  Example:
    >>> switches = Switches.create(["stop", "go"])
    >>> switches.set("go"); switches.is_set("go"), switches.is_set("stop")
    (True, False)
    >>> switches.close(); switches.unlink()
  """

  _POLL_SECONDS = 0.005

  def __init__(self, name: str, names: Sequence[str]):
    self.name = name
    self.names = tuple(names)
    self._segment = None
    self._words = None

  @classmethod
  def create(cls, names: Sequence[str]) -> "Switches":
    segment = Segment.create(aligned(8 * len(names)))
    switches = cls(segment.name, names)
    switches._segment = segment
    switches._words = segment.array(np.int64, (len(names),))
    return switches

  def _index(self, key: str) -> int:
    if self._words is None:
      self._segment = Segment.attach(self.name)
      self._words = self._segment.array(np.int64, (len(self.names),))
    return self.names.index(key)

  def set(self, key: str) -> None:
    i = self._index(key)
    self._words[i] = 1

  def is_set(self, key: str) -> bool:
    i = self._index(key)
    return bool(self._words[i])

  def wait(self, key: str, timeout: float) -> bool:
    """Whether `key` got set within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not self.is_set(key):
      left = deadline - time.monotonic()
      if left <= 0:
        return False
      time.sleep(min(self._POLL_SECONDS, left))
    return True

  def __getstate__(self):
    return {"name": self.name, "names": self.names}

  def __setstate__(self, state):
    self.__init__(state["name"], state["names"])

  def close(self):
    self._words = None
    if self._segment is not None:
      self._segment.close()

  def unlink(self):
    if self._segment is not None and self._segment.owner:
      self._segment.unlink()
