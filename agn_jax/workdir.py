"""One run per workdir: an exclusive lock, atomic creation, collision-free default names, no symlinks.

Pure Python (no JAX), so the launcher can take the lock before it loads
anything. The lock is `fcntl.flock` on `<workdir>/.lock`: the kernel drops it
when its holder exits, however it exits (SIGKILL included), so a stale lock
file never blocks a later run.
"""

import errno
import fcntl
import json
import os
import secrets
import socket
import stat
import time
from typing import Dict, Iterable, Optional

from agn_jax.errors import WorkdirBusy, WorkdirError

LOCK_NAME = ".lock"

# The entries a run reads or writes in its workdir. A symlink among them could
# make a resume truncate or overwrite a file outside the workdir.
RUN_ENTRIES = ("metrics.jsonl", "checkpoints", "summary.json", "config.json",
               "center.npy", "pids.json", "error.log", "curves.png",
               "staleness.png")


def _reason(error: OSError) -> str:
  return error.strerror or type(error).__name__


def _one_line(text: str) -> str:
  return " ".join(str(text).split())


def _open_dir(path: str) -> int:
  """A descriptor of the directory `path` itself, never of a symlink's target."""
  try:
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW |
                   os.O_CLOEXEC)
  except OSError as e:
    if os.path.islink(path):
      raise WorkdirError(f"workdir {path} is a symlink; give the directory "
                         "it points to instead") from None
    if e.errno == errno.ENOTDIR:
      what = "a file" if os.path.lexists(path) else "under a file"
      raise WorkdirError(f"workdir {path} is {what}, not a directory") from None
    if e.errno == errno.ENOENT:
      raise WorkdirError(f"workdir {path}: no such directory") from None
    raise WorkdirError(f"workdir {path}: cannot open ({_reason(e)})") from None


def _create(path: str) -> None:
  parent = os.path.dirname(os.path.abspath(path))
  try:
    if not os.path.isdir(parent):
      os.makedirs(parent)  # Fails (not a directory) under a regular file.
    os.mkdir(path)
  except FileExistsError:
    if not os.path.lexists(path):  # A parent is a file.
      raise WorkdirError(f"cannot create workdir {path}: a parent is a "
                         "file") from None
    # Else it exists: _open_dir decides whether it is a usable directory.
  except OSError as e:
    raise WorkdirError(f"cannot create workdir {path}: {_reason(e)}") from None


def _read_holder(dir_fd: int, wait: float = 2.0) -> Dict[str, object]:
  """What the lock's holder wrote in it; {} if nothing readable within `wait` seconds.

  A holder locks the file first and writes its record next: a run refused
  in between waits for the record rather than say "pid unknown".
  """
  deadline = time.monotonic() + wait
  while True:
    try:
      fd = os.open(LOCK_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC,
                   dir_fd=dir_fd)
      with os.fdopen(fd, "rb") as f:
        holder = json.loads(f.read(65536).decode("utf-8", "replace"))
      if isinstance(holder, dict) and holder:
        return holder
    except (OSError, ValueError):
      pass  # Not written yet (the holder has only just locked it).
    if time.monotonic() >= deadline:
      return {}
    time.sleep(0.01)


def describe(holder: Dict[str, object]) -> str:
  """`pid 123 on host (command)`: the run a lock file names."""
  pid = holder.get("pid", "unknown")
  host = holder.get("host")
  command = holder.get("command")
  text = f"pid {pid}" + (f" on {host}" if host else "")
  if command:
    text += f" ({_one_line(command)})"
  return text


class WorkdirLock:
  """The exclusive lock on one workdir, held until `release()` or process exit.

  Attributes:
    path: the workdir.
    holder: what this lock wrote into `<workdir>/.lock` (pid, host, command).
  """

  def __init__(self, path: str, dir_fd: int, fd: int,
               holder: Dict[str, object]):
    self.path = path
    self.holder = holder
    self._dir_fd = dir_fd
    self._fd = fd

  @property
  def held(self) -> bool:
    return self._fd is not None

  def release(self) -> None:
    """Removes the lock file, then unlocks; safe to call twice."""
    if self._fd is None:
      return
    try:
      # Unlinked while still locked: a waiter that opened this file finds,
      # once it gets the lock, that it is no longer the workdir's lock file
      # and tries again (see lock_workdir).
      os.unlink(LOCK_NAME, dir_fd=self._dir_fd)
    except OSError:
      pass  # The workdir was removed meanwhile; the lock goes anyway.
    os.close(self._fd)
    os.close(self._dir_fd)
    self._fd = self._dir_fd = None

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.release()

  def __repr__(self):
    return f"WorkdirLock({self.path!r}, held={self.held})"


def lock_workdir(path: str, create: bool, *, owner: str,
                 flag: str = "--workdir") -> WorkdirLock:
  """Takes the exclusive lock of the workdir `path` for this process.

  Args:
    path: the workdir; for a fresh run (`create`) it is created if missing
      (parents as needed, the last component with one `os.mkdir`), for
      `--resume` it must exist.
    create: whether to create `path`.
    owner: the command line of this run, recorded in the lock file so a
      second run can say who holds the workdir.
    flag: the flag that names `path`, for the busy message (a sweep's
      `--sweep_dir`, a study's `--study_dir`).

  Returns:
    The held lock (a context manager).

  Raises:
    WorkdirBusy: another live process holds the lock; names its pid, host
      and command.
    WorkdirError: `path` is impossible (under a regular file or /proc,
      permission denied, a symlink, a file) or missing without `create`.

  Example:
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "run")
    >>> with lock_workdir(path, create=True, owner="doctest") as lock:
    ...   try:
    ...     lock_workdir(path, create=False, owner="second")
    ...   except WorkdirBusy as e:
    ...     print("busy")
    busy
    >>> os.listdir(path)  # The lock file goes with the lock.
    []
  """
  path = os.fspath(path)
  if create:
    _create(path)
  dir_fd = _open_dir(path)
  try:
    while True:
      try:
        fd = os.open(LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW |
                     os.O_CLOEXEC, 0o644, dir_fd=dir_fd)
      except OSError as e:
        if e.errno == errno.ELOOP:
          raise WorkdirError(f"{os.path.join(path, LOCK_NAME)} is a symlink; "
                             "remove it") from None
        raise WorkdirError(f"cannot create the lock file in workdir {path}: "
                           f"{_reason(e)}") from None
      try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
      except OSError as e:
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
          raise WorkdirBusy(
              f"workdir {path} is in use by another run: "
              f"{describe(_read_holder(dir_fd))}; wait for it to end or "
              f"choose another {flag}") from None
        raise WorkdirError(f"cannot lock workdir {path}: {_reason(e)}") from None
      # The holder we waited on may have unlinked this file on release:
      # only the file the name points to now is the lock.
      try:
        current = os.stat(LOCK_NAME, dir_fd=dir_fd, follow_symlinks=False)
      except FileNotFoundError:
        current = None
      if current is not None and current.st_ino == os.fstat(fd).st_ino:
        break
      os.close(fd)
    holder = {"pid": os.getpid(), "host": socket.gethostname(),
              "command": _one_line(owner), "time": time.time()}
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(holder) + "\n").encode(), 0)
  except BaseException:
    os.close(dir_fd)
    raise
  return WorkdirLock(path, dir_fd, fd, holder)


def entries(path: str) -> list:
  """The workdir's entries other than the lock file (what "empty" means)."""
  return sorted(name for name in os.listdir(path) if name != LOCK_NAME)


def check_no_symlinks(workdir: str,
                      names: Iterable[str] = RUN_ENTRIES) -> None:
  """Refuses a workdir whose run entries (or anything under them) are symlinks.

  Missing entries are fine. Directories among `names` (checkpoints/) are
  walked without following links.

  Raises:
    WorkdirError: naming the first symlink found.
  """
  for name in names:
    path = os.path.join(workdir, name)
    try:
      mode = os.lstat(path).st_mode
    except FileNotFoundError:
      continue
    except OSError as e:
      raise WorkdirError(f"{path}: cannot inspect ({_reason(e)})") from None
    if stat.S_ISLNK(mode):
      raise WorkdirError(f"{path} is a symlink; a run never follows links "
                         "out of its workdir")
    if stat.S_ISDIR(mode):
      for parent, dirs, files in os.walk(path, followlinks=False):
        for entry in dirs + files:
          inner = os.path.join(parent, entry)
          if os.path.islink(inner):
            raise WorkdirError(f"{inner} is a symlink; a run never follows "
                               "links out of its workdir")


_MODES = {
    "r": os.O_RDONLY,
    "w": os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
    "a": os.O_WRONLY | os.O_CREAT | os.O_APPEND,
    "x": os.O_WRONLY | os.O_CREAT | os.O_EXCL,
}


def safe_open(workdir: str, name: str, mode: str = "r", **kwargs):
  """`open(os.path.join(workdir, name), mode)`, refusing symlinks on the way.

  The last component is opened with `O_NOFOLLOW`; the components of `name`
  before it must not be symlinks either.

  Args:
    workdir: the run's directory.
    name: a path relative to it, e.g. "metrics.jsonl".
    mode: as for `open` ("r", "w", "a", "x", with "b" or "+").
    **kwargs: passed to `os.fdopen` (encoding, ...).

  Raises:
    WorkdirError: naming the symlink.
    OSError: any other failure to open.

  Example:
    >>> import os, tempfile
    >>> d = tempfile.mkdtemp()
    >>> with safe_open(d, "metrics.jsonl", "w") as f:
    ...   _ = f.write("{}\\n")
    >>> os.symlink("/etc/passwd", os.path.join(d, "summary.json"))
    >>> safe_open(d, "summary.json", "w")
    Traceback (most recent call last):
    ...
    agn_jax.errors.WorkdirError: ... is a symlink; ...
  """
  parts = os.path.normpath(name).split(os.sep)
  if os.path.isabs(name) or ".." in parts:
    raise WorkdirError(f"{name}: not a path inside the workdir {workdir}")
  for i in range(1, len(parts)):
    check_no_symlinks(workdir, [os.path.join(*parts[:i])])
  flags = _MODES[mode.replace("b", "").replace("+", "")[:1]]
  if "+" in mode:
    flags = (flags & ~os.O_WRONLY) | os.O_RDWR
  path = os.path.join(workdir, name)
  try:
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
  except OSError as e:
    if e.errno == errno.ELOOP or os.path.islink(path):
      raise WorkdirError(f"{path} is a symlink; a run never follows links "
                         "out of its workdir") from None
    raise
  return os.fdopen(fd, mode, **kwargs)


def write_atomic(workdir: str, name: str, text: str) -> None:
  """Writes `<workdir>/<name>` through a temporary file and a rename, no symlink followed."""
  tmp = name + ".tmp"
  try:
    os.unlink(os.path.join(workdir, tmp))  # Removes a planted link itself.
  except FileNotFoundError:
    pass
  try:
    with safe_open(workdir, tmp, "x") as f:
      f.write(text)
  except OSError:
    try:  # A full disk: no half-written file stays behind.
      os.unlink(os.path.join(workdir, tmp))
    except OSError:
      pass
    raise
  os.replace(os.path.join(workdir, tmp), os.path.join(workdir, name))


def unique_default_workdir(base: str, stem: str) -> str:
  """Creates and returns `<base>/<stem>-<timestamp>-<pid>-<random>`.

  Two runs started in the same second get different names: the pid and a
  random suffix differ, and `os.mkdir` (which fails on an existing name)
  decides, so the name is this process's alone.

  Raises:
    WorkdirError: `base` cannot hold directories.

  Example:
    >>> import tempfile
    >>> base = tempfile.mkdtemp()
    >>> a = unique_default_workdir(base, "agn-n2-l10")
    >>> b = unique_default_workdir(base, "agn-n2-l10")
    >>> a != b
    True
  """
  try:
    os.makedirs(base, exist_ok=True)
  except OSError as e:
    raise WorkdirError(f"cannot create {base}: {_reason(e)}") from None
  stamp = time.strftime("%Y%m%d-%H%M%S")
  error: Optional[OSError] = None
  for _ in range(100):
    path = os.path.join(base,
                        f"{stem}-{stamp}-{os.getpid()}-{secrets.token_hex(3)}")
    try:
      os.mkdir(path)
      return path
    except FileExistsError as e:
      error = e
    except OSError as e:
      raise WorkdirError(f"cannot create a workdir in {base}: "
                         f"{_reason(e)}") from None
  raise WorkdirError(f"cannot create a fresh workdir in {base}: {error}")
