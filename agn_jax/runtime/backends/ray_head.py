"""A private local Ray instance that ends when the process that started it ends, however that ends.

`LocalRay.start()` runs this file as a program of its own, the keeper: a
fresh interpreter (nothing is forked from a driver that imported JAX), in a
session of its own (a Ctrl-C in the terminal reaches only the driver, which
coordinates the end). The keeper

* makes itself the subreaper of everything started below it
  (`PR_SET_CHILD_SUBREAPER`), so every process of the instance stays its
  descendant even when its parent (the raylet) dies first;
* starts the head node in a child, as `ray.init()` would (Ray's `Node`,
  whose daemons die with that child), and passes its address on;
* reads its stdin, a pipe whose only writer is the driver: end of file means
  the driver has ended, normally, by an exception or by SIGKILL. It then
  stops the head (Ray's own graceful stop, a few seconds at most) and
  SIGKILLs whatever still runs below it until nothing does.

Only the standard library is imported here, so the keeper starts in
milliseconds; the head child imports Ray.

Example:
  >>> ray_instance = LocalRay.start(num_cpus=2)  # doctest: +SKIP
  >>> ray.init(address=ray_instance.address)  # doctest: +SKIP
  >>> ray_instance.stop()  # doctest: +SKIP
"""

import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import time
from typing import Dict, List, Optional

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
# Ray's settings for an instance whose every actor has a `runtime_env`:
# no idle worker started ahead of need (see `_head`).
_NO_PRESTART = {"enable_worker_prestart": False,
               "prestart_worker_first_driver": False}
_HEAD_GRACE_SECONDS = 4.0  # Ray's graceful stop of its daemons and workers.
_KILL_SECONDS = 4.0  # SIGKILLing stragglers (and what they start meanwhile).
_START_SECONDS = 180.0  # A head that has not started by then never will.


def _prctl(option: int, value: int) -> None:
  libc = ctypes.CDLL(None, use_errno=True)
  if libc.prctl(option, value, 0, 0, 0) != 0:
    raise OSError(ctypes.get_errno(), f"prctl({option}) failed")


def _children() -> Dict[int, List[int]]:
  """pid -> its children's pids, read from /proc."""
  tree: Dict[int, List[int]] = {}
  for name in os.listdir("/proc"):
    if not name.isdigit():
      continue
    try:
      with open(f"/proc/{name}/stat", "rb") as f:
        stat = f.read()
    except OSError:
      continue  # Gone meanwhile.
    # The command name may hold spaces and parentheses: fields after its
    # last ')' are "state ppid ...".
    fields = stat[stat.rfind(b")") + 2:].split()
    if fields[0] != b"Z":  # A zombie is gone; only its reaping is left.
      tree.setdefault(int(fields[1]), []).append(int(name))
  return tree


def descendants(pid: int) -> List[int]:
  """Every live process below `pid` (zombies excluded)."""
  tree, found, todo = _children(), [], [pid]
  while todo:
    for child in tree.get(todo.pop(), []):
      found.append(child)
      todo.append(child)
  return found


def _reap() -> None:
  """Collects the exit status of every ended child (orphans become ours)."""
  while True:
    try:
      pid, _ = os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
      return
    if pid == 0:
      return


def _kill_all_below(deadline: float) -> List[int]:
  """SIGKILLs every descendant until none is left (or `deadline`); returns the survivors."""
  me = os.getpid()
  while True:
    _reap()
    left = descendants(me)
    if not left or time.monotonic() > deadline:
      return left
    for pid in left:
      try:
        os.kill(pid, signal.SIGKILL)
      except ProcessLookupError:
        pass
    time.sleep(0.02)
    _reap()


def _send(message: dict) -> None:
  try:
    os.write(1, (json.dumps(message) + "\n").encode())
  except OSError:
    pass  # The driver is gone: nobody to tell.


def _keeper(params: str) -> None:
  """The keeper's life: start the head, pass its address on, end it all at the driver's end."""
  # Its own end (SIGTERM) ends the instance too; the terminal's Ctrl-C is
  # the driver's to handle.
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  ending = []
  signal.signal(signal.SIGTERM, lambda signum, frame: ending.append(signum))
  _prctl(_PR_SET_CHILD_SUBREAPER, 1)
  head = subprocess.Popen(
      [sys.executable, "-P", os.path.abspath(__file__), "head", params],
      stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
      stderr=subprocess.DEVNULL)
  line = b""
  reported = False
  started = time.monotonic()
  while not ending:
    watched = [0] + ([head.stdout] if not reported else [])
    try:
      ready, _, _ = select.select(watched, [], [], 0.5)
    except InterruptedError:
      continue
    if 0 in ready and not os.read(0, 4096):
      break  # The driver has ended.
    if head.stdout in ready:
      chunk = os.read(head.stdout.fileno(), 65536)
      line += chunk
      if b"\n" in line or not chunk:
        message = line.split(b"\n")[0].decode(errors="replace")
        if not message:
          code = head.wait()
          message = json.dumps({"error": f"the Ray head exited with code "
                                         f"{code} before it started"})
        _send(json.loads(message))
        reported = True
    if not reported and time.monotonic() - started > _START_SECONDS:
      _send({"error": f"the Ray head did not start within "
                      f"{_START_SECONDS:g} s"})
      reported = True
    _reap()
  # The end: Ray's graceful stop first, then nothing survives.
  if head.poll() is None:
    head.send_signal(signal.SIGTERM)
    try:
      head.wait(_HEAD_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
      pass
  _kill_all_below(time.monotonic() + _KILL_SECONDS)
  try:
    head.wait(1.0)
  except subprocess.TimeoutExpired:
    pass


def _head(params: str) -> None:
  """The head child: starts Ray's head node, says where it is, stops it at SIGTERM."""
  # It dies with the keeper, even if the keeper is SIGKILLed; Ray's daemons
  # die with it (Ray binds them to the process that starts them).
  keeper = os.getppid()
  _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
  if os.getppid() != keeper:
    return
  stop = []
  signal.signal(signal.SIGTERM, lambda signum, frame: stop.append(signum))
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  options = json.loads(params)
  try:
    from ray._private import node as node_lib  # pylint: disable=g-import-not-at-top
    from ray._private import parameter  # pylint: disable=g-import-not-at-top
    from ray._private.authentication import authentication_token_setup as auth  # pylint: disable=g-import-not-at-top
    from ray._common.usage import usage_lib  # pylint: disable=g-import-not-at-top
    # As ray.init() does for the instance it starts, less two daemons a
    # private instance has no use for (3 s of CPU at each start): the
    # autoscaler's monitor (its size is fixed) and the log monitor (the
    # runs connect with log_to_driver=False; actors' logs stay in the
    # session directory). Nor does it prestart an idle worker for every
    # CPU: each part's actor has an environment of its own (`runtime_env`),
    # which no prestarted worker has, so only the transport's two actors
    # could use one; on a 16-core host the other 14 (measured here: 0.6 s
    # of CPU to start and 80 MB resident each) would only idle.
    usage_lib.set_usage_stats_enabled_via_env_var(False)
    auth.ensure_token_if_auth_enabled({}, create_token_if_missing=True)
    node = node_lib.Node(
        parameter.RayParams(num_cpus=options.get("num_cpus"),
                            include_dashboard=False, no_monitor=True,
                            include_log_monitor=False,
                            temp_dir=options.get("temp_dir"),
                            _system_config=_NO_PRESTART),
        head=True, shutdown_at_exit=False, spawn_reaper=True,
        ray_init_cluster=True)
  except Exception as e:  # pylint: disable=broad-except
    _send({"error": " ".join(f"{type(e).__name__}: {e}".split())[:500]})
    return
  _send({"address": node.address, "session_dir": node.get_session_dir_path(),
         "pid": os.getpid()})
  while not stop:
    time.sleep(0.2)
  node.kill_all_processes(check_alive=False, allow_graceful=True, wait=True)


class LocalRay:
  """A running private Ray instance and its keeper.

  Attributes:
    address: the head's GCS address, for `ray.init(address=...)`.
    session_dir: Ray's session directory of the instance.
    keeper: the keeper's `subprocess.Popen`.
  """

  def __init__(self, keeper: subprocess.Popen):
    self.keeper = keeper
    self.address: Optional[str] = None
    self.session_dir: Optional[str] = None

  @classmethod
  def start(cls, num_cpus: Optional[int] = None,
            temp_dir: Optional[str] = None) -> "LocalRay":
    """`launch`, then `wait_ready`: returns once the head is up."""
    instance = cls.launch(num_cpus, temp_dir)
    instance.wait_ready()
    return instance

  @classmethod
  def launch(cls, num_cpus: Optional[int] = None,
             temp_dir: Optional[str] = None) -> "LocalRay":
    """Starts the keeper, which starts the head; returns at once.

    Token authentication is on (as for `ray.init()`'s own instance) unless
    `RAY_AUTH_MODE` says otherwise; this process's environment says so too,
    so its `ray.init` connects with the token.
    """
    if "RAY_AUTH_MODE" not in os.environ:
      os.environ["RAY_AUTH_MODE"] = "token"
      if "ray._raylet" in sys.modules:  # Ray read its config at import.
        from ray._raylet import Config  # pylint: disable=g-import-not-at-top
        Config.initialize("")
    params = json.dumps({"num_cpus": num_cpus, "temp_dir": temp_dir})
    return cls(subprocess.Popen(
        [sys.executable, "-P", os.path.abspath(__file__), "keeper", params],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, start_new_session=True))

  def wait_ready(self) -> None:
    """Waits until the head is up (`address` and `session_dir` set).

    Raises:
      RayStartError: the head could not start; the keeper has ended.
      KeyboardInterrupt: meanwhile; the keeper has ended what it started.
    """
    if self.address is not None:
      return
    try:
      message = self._read_message()
    except BaseException:
      self.stop()
      raise
    if "error" in message:
      self.stop()
      # Here, in the driver: the keeper imports only the standard library.
      from agn_jax.errors import RayStartError  # pylint: disable=g-import-not-at-top
      raise RayStartError(f"cannot start a local Ray instance: "
                          f"{message['error']}")
    self.address = message["address"]
    self.session_dir = message["session_dir"]

  def _read_message(self) -> dict:
    line = self.keeper.stdout.readline()
    if not line:
      code = self.keeper.wait()
      return {"error": f"its keeper exited with code {code}"}
    try:
      return json.loads(line)
    except ValueError:
      return {"error": f"its keeper said {line[:200]!r}"}

  def pids(self) -> List[int]:
    """The keeper and every process of the instance."""
    return [self.keeper.pid, *descendants(self.keeper.pid)]

  def stop(self, timeout: float = _HEAD_GRACE_SECONDS + _KILL_SECONDS + 2.0
          ) -> None:
    """Ends the instance and its keeper; waits for them. Safe to call twice."""
    keeper = self.keeper
    if keeper.stdin is not None and not keeper.stdin.closed:
      try:
        keeper.stdin.close()  # End of file: the keeper ends the instance.
      except OSError:
        pass
    try:
      keeper.wait(timeout)
    except subprocess.TimeoutExpired:
      keeper.kill()  # Its head child and the daemons die with it.
      keeper.wait()
    if keeper.stdout is not None:
      keeper.stdout.close()


if __name__ == "__main__":
  {"keeper": _keeper, "head": _head}[sys.argv[1]](sys.argv[2])
