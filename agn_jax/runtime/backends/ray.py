"""The ray backend: the server, the workers and the evaluator as Ray actors, on one machine or a cluster.

Each part is one actor (`_Host`) that runs the processes backend's own
loop (`backend.run_part`); the center, the commits, the switches, the
events and the replies travel through Ray (`ray_transport`: the object
store, the hub and mailbox actors). The supervision is
`backend.ServerBackend`'s; this module connects to Ray, places and starts
the actors, reads how they ended and stops them. Ray is an optional install
(`pip install -r requirements-ray.txt`); this module imports it on first use.

Example:
  >>> from agn_jax.config import RayOptions, TrainConfig
  >>> from agn_jax.runtime import train
  >>> summary = train(TrainConfig(
  ...     backend="ray", num_workers=2, epochs=5.0, workdir="/tmp/agn_ray_doc",
  ...     options=RayOptions(ray_address="local")))  # doctest: +SKIP
"""

import contextlib
import os
import signal
import socket
import threading
import time
from typing import Dict, List, Optional

from agn_jax import placement as placement_lib
from agn_jax.data import fingerprint
from agn_jax.errors import RayStartError, RunError
from agn_jax.runtime import backend as backend_lib
from agn_jax.runtime import context
from agn_jax.runtime.backends import ray_head
from agn_jax.runtime.transports import ray as ray_transport

_CONNECT_SECONDS = 5.0  # To reach a cluster address before Ray's own (long) retries.


def _ray():
  try:
    import ray  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise RunError("the ray backend needs Ray: pip install -r "
                   "requirements-ray.txt") from e
  return ray


# The parts' actor. A plain class here; `ray.remote(_Host)` makes actors of it.


class _Host:
  """One Ray actor process that runs one part of the run: the server, a worker or the evaluator.

  Args:
    placement: what the part applies before JAX is imported
      (`context.enter`); Ray already started the process with its
      environment (`runtime_env`). Linux applies its affinity and niceness
      to this thread; JAX's threads, started from it later, inherit them
      (Ray's own threads keep theirs).
    platform: the part's platform; a TPU worker learns only here which chip
      Ray assigned it.
  """

  def __init__(self, placement, platform):
    self.entered = time.time()
    if platform == "tpu":
      placement = placement._replace(env=dict(
          placement.env, **_tpu_env(self._accelerator_ids("TPU"))))
    context.enter(placement)

  @staticmethod
  def _accelerator_ids(kind):
    import ray  # pylint: disable=g-import-not-at-top
    return tuple(ray.get_runtime_context().get_accelerator_ids().get(kind, ()))

  def where(self):
    import ray  # pylint: disable=g-import-not-at-top
    return {"pid": os.getpid(), "node": ray.util.get_node_ip_address()}

  def run(self, ctx, role, replies, resume, incarnation):
    return backend_lib.run_part(ctx, role, replies, resume, incarnation,
                                self.entered)


def _tpu_env(chips) -> Dict[str, str]:
  """A one-chip TPU process on the chip Ray assigned, with a port of its own on the host."""
  if len(chips) != 1:
    raise RuntimeError(f"a tpu worker needs exactly one chip, Ray assigned "
                       f"{list(chips)}")
  chip = str(chips[0])
  env = dict(placement_lib.worker_placement("tpu", 0, 1, devices=(chip,)).env)
  port = str(placement_lib.TPU_BASE_PORT + int(chip))
  env.update(TPU_PROCESS_PORT=port, TPU_PROCESS_ADDRESSES=f"localhost:{port}")
  return env


# The address.


def check_address(address: str) -> None:
  """Raises `ValueError` (one line) unless `address` is local, auto or a reachable host:port.

  Ray itself retries an unreachable address for minutes; this answers in
  seconds.

  Example:
    >>> check_address("local")
    >>> check_address("nowhere")
    Traceback (most recent call last):
    ...
    ValueError: ray_address must be local, auto or host:port, got 'nowhere'
  """
  if address in ("local", "auto"):
    return
  host, sep, port = address.rpartition(":")
  if address.startswith("ray://"):
    raise ValueError(f"ray_address {address!r}: Ray Client (ray://) is not "
                     f"supported; run on a node of the cluster with auto or "
                     f"the head's host:port")
  if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
    raise ValueError(f"ray_address must be local, auto or host:port, got "
                     f"{address!r}")
  try:
    socket.create_connection((host.strip("[]"), int(port)),
                             timeout=_CONNECT_SECONDS).close()
  except OSError as e:
    raise ValueError(f"ray_address {address}: no Ray cluster reachable there "
                     f"({e.strerror or e})") from None


class RayBackend(backend_lib.ServerBackend):
  """Ray actors on one machine or a cluster: the hub, the server, n workers and the evaluator.

  Each worker's resources come from the platform (`config.platform`, or
  what the cluster has: TPU, then GPU, then CPU): one CPU (a fraction when
  the cluster has fewer CPUs than workers), a GPU or a fraction of one, or
  one TPU chip. The hub, the server and the evaluator run on the driver's
  node and reserve nothing; the server writes checkpoints to
  `config.workdir` there (on a cluster, the driver's node's disk).

  Its settings (`agn_jax.config.RayOptions`):
    ray_address: "local" (start a private Ray instance with one CPU per core
      of this machine, stopped at the end and with this process however it
      ends, SIGKILL included: `ray_head.LocalRay`), "auto" (the cluster this
      machine belongs to), or the head's "host:port". A process that
      already called `ray.init()`
      keeps its connection, and the run never stops it.
    num_slots, cache_dir: as `backend.ServerBackend` has them (the cache
      on each node).

  A `dataset=` object given to `train()` is put into the object store once
  (each node then reads it zero-copy); otherwise every part loads the data
  itself by name.
  """

  name = "ray"
  poll_seconds = 0.05  # Nothing Ray does wakes the driver: it looks this often.

  def __init__(self, config, book, faults=context.Faults()):
    super().__init__(config, book, faults)
    self.address = config.options.ray_address
    self.ray = None
    # The private instance that "local" started, with its keeper.
    self.local: Optional[ray_head.LocalRay] = None
    self.connected = False  # This run called ray.init (and shuts it down).
    self.hub = self.mailbox = self.replies = None
    self.taken = 0  # Events taken from the mailbox so far.
    self.actors: Dict[str, object] = {}  # role -> its latest actor
    self.calls: Dict[str, object] = {}  # role -> ObjectRef of its loop, until read
    self.where: Dict[str, dict] = {}  # role -> {"pid", "node"}
    self.pending_where: Dict[object, tuple] = {}  # ObjectRef -> (role, actor)
    self.retired: List[object] = []  # Dead workers' actors, killed at the end.

  # Set-up.

  def prepare(self, dataset=None):
    with self._interrupts_deferred():
      check_address(self.address)
      # Before the data and the model: their threads (XLA's) would not have
      # Ctrl-C and SIGTERM blocked while Ray starts its core (`_connect`).
      self._connect()
      self._interrupt_point()
      super().prepare(dataset)

  def _set_up(self, plan, slots, dataset):
    ray, n = self.ray, self.config.num_workers
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # pylint: disable=g-import-not-at-top
    here = NodeAffinitySchedulingStrategy(
        ray.get_runtime_context().get_node_id(), soft=False)
    self.on_driver_node = dict(scheduling_strategy=here, num_cpus=0,
                               max_restarts=0)
    self.single_node = sum(node["Alive"] for node in ray.nodes()) == 1
    self.platform, self.worker_options = self._worker_resources(n)
    self.book.extra_summary["platform"] = self.platform
    self.book.extra_summary["ray_address"] = self.address
    rt = ray_transport
    self.transport = rt.RayTransport.create(plan.layout.num_params,
                                            plan.payload_size, n, slots,
                                            wire=plan.wire,
                                            **self.on_driver_node)
    self.hub = self.transport.hub
    self.mailbox = rt.start_mailbox(**self.on_driver_node)
    self.switches = rt.RaySwitches(self.hub)
    self.events = rt.RayEvents(self.mailbox)
    self.replies = rt.RayReplies(self.mailbox)
    self.data = (rt.DatasetByName(self.config, fingerprint(plan.dataset))
                 if dataset is None else
                 rt.StoredDataset(ray.put(backend_lib.dataset_arrays(dataset))))

  def _connect(self):
    """Connects to Ray: a private instance started here for "local" (`ray_head`), else the cluster at the address."""
    ray = self.ray = _ray()
    if ray.is_initialized():
      return
    address = self.address
    if address == "local":
      self.local = ray_head.LocalRay.launch(
          num_cpus=len(placement_lib.available_cores()))
      try:
        self.local.wait_ready()
      except RayStartError as e:
        raise RunError(str(e)) from None
      address = self.local.address
    error = []

    def connect():
      try:
        ray.init(address=address, log_to_driver=False,
                 configure_logging=False)
      except BaseException as e:  # pylint: disable=broad-except
        error.append(e)

    # In a thread of its own: in the main thread ray.init installs a SIGTERM
    # handler that exits at once, and an exception raised by a signal
    # handler must not cut Ray's start of its core in half. Ctrl-C and
    # SIGTERM are blocked meanwhile (Ray's core installs a handler of its own
    # that prints a stack trace) and take effect once it is done
    # (`prepare`'s next interrupt point).
    thread = threading.Thread(target=connect, name="ray.init", daemon=True)
    with backend_lib.interrupts_held(self.interrupts, block=True), \
        _quiet_ray_init():
      thread.start()
      thread.join()
      self.connected = not error
    if error and isinstance(error[0], ConnectionError):
      raise ValueError(f"ray_address {self.address}: {error[0]}") from None
    if error:
      raise error[0]

  def _worker_resources(self, n):
    """(platform, the worker actors' resource options), checked against the cluster."""
    total = self.ray.cluster_resources()
    platform = self.config.platform or (
        "tpu" if total.get("TPU") else "gpu" if total.get("GPU") else "cpu")

    def share(kind):
      # Ray takes fractions of a resource to four decimal places.
      have = total.get(kind, 0)
      return min(1.0, int(have / n * 10**4) / 10**4)

    xla_flags = os.environ.get("XLA_FLAGS", "")
    if platform == "cpu":
      cpus = share("CPU")
      if cpus <= 0:
        raise ValueError(f"the Ray cluster has too few CPUs for {n} workers")
      # Threads and allocator settings as for n processes on these cores.
      cores = range(max(1, int(total.get("CPU", 1))))
      env = placement_lib.worker_placement(
          "cpu", 0, n, cores=cores, base_xla_flags=xla_flags).env
      options = dict(num_cpus=cpus)
    elif platform == "gpu":
      if not total.get("GPU"):
        raise ValueError("platform gpu but the Ray cluster has no GPU")
      env = dict(placement_lib.worker_placement(
          "gpu", 0, 1, devices=("0",), base_xla_flags=xla_flags).env)
      del env["CUDA_VISIBLE_DEVICES"]  # Ray sets it to the GPU it assigns.
      options = dict(num_cpus=0, num_gpus=share("GPU"))
    else:
      chips = int(total.get("TPU", 0))
      if n > chips:
        raise ValueError(f"tpu runs one worker per chip: {n} workers but the "
                         f"Ray cluster has {chips} TPU chips")
      env = {"JAX_PLATFORMS": "tpu", "ALLOW_MULTIPLE_LIBTPU_LOAD": "1"}
      if xla_flags:
        env["XLA_FLAGS"] = xla_flags
      options = dict(num_cpus=0, resources={"TPU": 1})
    return platform, dict(options, env=env, scheduling_strategy="SPREAD",
                          max_restarts=0)

  # The parts.

  def _launch(self, role):
    w = backend_lib.worker_of(role)
    if w is None:
      placement = placement_lib.host_placement(os.environ.get("XLA_FLAGS", ""))
      platform, options = "cpu", self.on_driver_node
    else:
      options = dict(self.worker_options)
      affinity = None
      if self.single_node and self.platform == "cpu":
        # One machine, as with processes: each worker its own core(s).
        affinity = placement_lib.worker_placement(
            "cpu", w, self.config.num_workers,
            cores=placement_lib.available_cores()).cpu_affinity
      placement = placement_lib.Placement(options.pop("env"), affinity,
                                          placement_lib.WORKER_NICE)
      platform = self.platform
    host = self.ray.remote(_Host).options(
        runtime_env={"env_vars": dict(placement.env)}, **options).remote(
            placement, platform)
    self.actors[role] = host
    self.pending_where[host.where.remote()] = (role, host)
    self.calls[role] = host.run.remote(self.ctx, role, self.replies,
                                       self.config.resume,
                                       self.incarnations.get(w, 0))

  def _wait(self, timeout):
    refs = list(self.calls.values())
    done = []
    if refs:
      self.ray.wait(refs, num_returns=1, timeout=timeout)
      done, _ = self.ray.wait(refs, num_returns=len(refs), timeout=0)
    else:
      time.sleep(timeout)
    self._note_where()
    done = set(done)
    return [role for role, ref in self.calls.items() if ref in done]

  def _exit_cause(self, role):
    ref = self.calls.pop(role)
    try:
      ok = bool(self.ray.get(ref))
      return ok, "exited early" if ok else "exited after a failure"
    except self.ray.exceptions.RayActorError as e:
      logs = (os.path.join(self.local.session_dir, "logs")
              if self.local is not None and self.local.session_dir else None)
      return False, _death(e, self._pid(role), logs)

  def _take_events(self):
    for event in self.ray.get(self.mailbox.take.remote(self.taken)):
      self.taken += 1  # Before handling, as a queue's `get` would.
      yield event

  def _reply(self, answer):
    self.mailbox.reply.remote(answer)

  def _retire(self, role):
    self.retired.append(self.actors.pop(role))
    self.where.pop(role, None)
    self.ray.kill(self.retired[-1], no_restart=True)

  def _note_where(self):
    """Records where each actor runs as soon as it has started (pids.json)."""
    if not self.pending_where:
      return
    ready, _ = self.ray.wait(list(self.pending_where),
                             num_returns=len(self.pending_where), timeout=0)
    for ref in ready:
      role, host = self.pending_where.pop(ref)
      try:
        place = self.ray.get(ref)
      except self.ray.exceptions.RayActorError:
        continue
      if self.actors.get(role) is host:  # Not a retired one's answer.
        self.where[role] = place
    if ready:
      self._write_pids()

  def _pid(self, role):
    return self.where.get(role, {}).get("pid")

  def _pids_extra(self):
    return {
        "nodes": {role: p["node"] for role, p in self.where.items()},
        "ray_address": self.address,
        # The private instance "local" started: its keeper, and the session
        # directory by which its processes are known.
        "ray_keeper": self.local.keeper.pid if self.local else None,
        "ray_session_dir": self.local.session_dir if self.local else None,
    }

  # The end.

  def shutdown(self):
    # Ray's stop, like its start, must not be cut in half; an interrupt
    # meanwhile only asks for what is happening already.
    with backend_lib.interrupts_held([]):
      super().shutdown()

  def _end_parts(self):
    if self.ray is not None:
      self._stop_actors()
    if self.local is not None:
      self.local.stop()  # The instance and every process in it.

  def _stop_actors(self):
    ray = self.ray
    try:
      if self.calls:  # They were told to leave.
        ray.wait(list(self.calls.values()), num_returns=len(self.calls),
                 timeout=backend_lib.GRACE_SECONDS)
    except ray.exceptions.RayError:
      pass
    actors = [a for a in [*self.actors.values(), *self.retired, self.hub,
                          self.mailbox] if a is not None]
    for actor in actors:
      try:
        ray.kill(actor, no_restart=True)
      except Exception:  # pylint: disable=broad-except
        pass  # Gone already.
    self.calls.clear()
    if self.connected:
      ray.shutdown()  # Disconnects; `local.stop()` ends the instance.
    else:
      # A kill only starts the end; a call to a dead actor fails at once.
      try:
        if actors:
          ray.wait([a.__ray_ready__.remote() for a in actors],
                   num_returns=len(actors), timeout=backend_lib.GRACE_SECONDS)
      except ray.exceptions.RayError:
        pass


@contextlib.contextmanager
def _quiet_ray_init():
  """Drops Ray's warning that ray.init outside the main thread sets no SIGTERM handler (on purpose)."""
  import logging  # pylint: disable=g-import-not-at-top

  class _Drop(logging.Filter):

    def filter(self, record):
      return "SIGTERM handler is not set" not in record.getMessage()

  logger = logging.getLogger("ray._private.worker")
  quiet = _Drop()
  logger.addFilter(quiet)
  try:
    yield
  finally:
    logger.removeFilter(quiet)


def _death(error, pid: Optional[int] = None,
           logs_dir: Optional[str] = None) -> str:
  """One line on how an actor's process ended, e.g. "actor died: killed by signal 9".

  Ray reports a process that vanished without a word as "connection error
  code 2 ... End of file": its SIGTERM handler reports SIGTERM, and a
  crash (SIGSEGV, SIGABRT, ...) leaves "Fatal Python error" in the
  process's log (Ray's workers run faulthandler), so what is left is SIGKILL
  (kill -9, the kernel's OOM killer). The log is read where this process can
  see it (`logs_dir`, an instance on this machine).

  Example:
    >>> _death(RuntimeError("Worker exit type: SYSTEM_ERROR Worker exit "
    ...                     "detail: Worker unexpectedly exits with a "
    ...                     "connection error code 2. End of file. Some..."))
    'actor died: killed by signal 9'
  """
  detail = None
  for line in str(error).splitlines():
    if "Worker exit detail:" in line:
      detail = line.split("Worker exit detail:", 1)[1].strip()
      break
  if detail is None:
    return "actor died (no detail)"
  if "receives a SIGTERM" in detail:
    return f"actor died: {backend_lib.exit_cause(-signal.SIGTERM)}"
  if "connection error code 2" in detail or "End of file" in detail:
    crash = _fatal_error(pid, logs_dir)
    if crash:
      return f"actor died: crashed ({crash})"
    return f"actor died: {backend_lib.exit_cause(-signal.SIGKILL)}"
  return f"actor died ({detail.split('.')[0].strip()})"


def _fatal_error(pid: Optional[int], logs_dir: Optional[str]) -> Optional[str]:
  """The "Fatal Python error: ..." that Ray's worker `pid` logged before it died, if any."""
  if not pid or not logs_dir:
    return None
  import glob  # pylint: disable=g-import-not-at-top
  pattern = os.path.join(glob.escape(logs_dir), f"worker-*-{pid}.err")
  for path in glob.glob(pattern):
    try:
      with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        f.seek(max(0, f.tell() - 65536))
        text = f.read().decode("utf-8", "replace")
    except OSError:
      continue
    for line in text.splitlines():
      if line.startswith("Fatal Python error:"):
        return line.split(":", 1)[1].strip()
  return None
