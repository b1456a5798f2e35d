"""One suite, three transports: shared memory (processes), Ray (a real local Ray instance) and threads (`inprocess`).

Each test runs against each backend's `Transport` and its switches, events,
replies and data (`channels`). A part that must run elsewhere runs where
that backend puts it: a spawned process, a Ray task, a thread. The Ray kit
asks for the `ray_instance` fixture of the module that runs it
(tests/e2e/test_ray_backend.py's).
"""

import queue
import sys
import threading
import time
from typing import Callable, NamedTuple

import multiprocess
import numpy as np
import pytest

from agn_jax.runtime import events as ev
from agn_jax.runtime.backends import processes
from agn_jax.runtime.transports import channels
from agn_jax.runtime.transports import inprocess
from agn_jax.runtime.transports import shm
from agn_jax.runtime.transports.base import WindowPlan
from agn_jax.wire import CommitMeta
from agn_jax.runtime.transports.shared_memory import SharedMemoryTransport


P = 30_000  # 120 kB: Ray moves such arrays through its object store.


class Kit(NamedTuple):
  """What a backend gives its parts, made fresh for each test.

  Attributes:
    transport: `(num_params, payload_size, num_workers, capacity)` -> a
      `Transport`.
    switches: `()` -> `channels.Switches`.
    events: `()` -> `(channels.Events, take)`, `take()` the supervisor's
      next event.
    replies: `()` -> `(channels.Replies, send)`, `send(answer)` the
      supervisor's.
    data: `(arrays)` -> `channels.DataSource`.
    elsewhere: `(fn, *args)` -> `join`; runs `fn(*args)` in another part,
      `join()` is whether it returned True.
  """
  transport: Callable
  switches: Callable
  events: Callable
  replies: Callable
  data: Callable
  elsewhere: Callable


def _until(get, seconds=10.0):
  deadline = time.monotonic() + seconds
  while True:
    value = get()
    if value is not None or time.monotonic() > deadline:
      return value
    time.sleep(0.01)


def _shm_kit(cleanup):
  ctx = multiprocess.get_context("spawn")

  def owned(resource):
    cleanup.append(lambda: (resource.close(), resource.unlink()))
    return resource

  def transport(num_params, payload_size, num_workers, capacity):
    return owned(SharedMemoryTransport.create(
        ctx, num_params, payload_size, capacity, num_workers, step_capacity=4,
        metrics=("mae", "accuracy"), step_metric="accuracy"))

  def events():
    channel = ctx.Queue()
    cleanup.append(lambda: (channel.cancel_join_thread(), channel.close()))
    return processes.QueueEvents(channel), lambda: channel.get(timeout=10)

  def replies():
    reader, writer = ctx.Pipe(duplex=False)
    cleanup.append(lambda: (reader.close(), writer.close()))
    return processes.PipeReplies(reader), writer.send

  def elsewhere(fn, *args):
    process = ctx.Process(target=_exit_with, args=(fn, *args), daemon=True)
    process.start()
    cleanup.append(lambda: process.kill() if process.is_alive() else None)
    return lambda: (process.join(60), process.exitcode == 0)[1]

  return Kit(transport,
             lambda: owned(shm.Switches.create(channels.SWITCH_NAMES)),
             events, replies, lambda arrays: owned(
                 shm.SharedArrays.create(arrays)), elsewhere)


def _exit_with(fn, *args):
  sys.exit(0 if fn(*args) else 1)


def _inprocess_kit(cleanup):
  def events():
    inbox = queue.Queue()
    return inprocess.InProcessEvents(inbox), lambda: inbox.get(timeout=10)

  def replies():
    replies = inprocess.InProcessReplies()
    return replies, replies.answers.put

  def elsewhere(fn, *args):
    result = []
    thread = threading.Thread(target=lambda: result.append(fn(*args)),
                              daemon=True)
    thread.start()
    return lambda: (thread.join(60), result == [True])[1]

  del cleanup
  return Kit(inprocess.InProcessTransport, inprocess.InProcessSwitches,
             events, replies, inprocess.InMemoryData, elsewhere)


def _ray_kit(cleanup):
  import ray  # pylint: disable=g-import-not-at-top
  from agn_jax.runtime.transports import ray as ray_transport  # pylint: disable=g-import-not-at-top
  # tests/ is no package: Ray ships this module's functions by value.
  ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

  def actor(cls):
    handle = ray.remote(cls).options(num_cpus=0, max_concurrency=1).remote()
    cleanup.append(lambda: ray.kill(handle))
    return handle

  def transport(num_params, payload_size, num_workers, capacity):
    t = ray_transport.RayTransport.create(num_params, payload_size, num_workers,
                                        capacity, num_cpus=0)
    cleanup.append(t.close)
    return t

  def switches():
    return ray_transport.RaySwitches(transport(1, 1, 1, 1).hub)

  def events():
    mailbox, taken = actor(ray_transport.Mailbox), []

    def take():
      got = _until(lambda: ray.get(mailbox.take.remote(len(taken))) or None)
      taken.append(got[0])
      return got[0]

    return ray_transport.RayEvents(mailbox), take

  def replies():
    mailbox = actor(ray_transport.Mailbox)
    return ray_transport.RayReplies(mailbox), mailbox.reply.remote

  def elsewhere(fn, *args):
    ref = ray.remote(fn).options(num_cpus=0).remote(*args)
    return lambda: ray.get(ref, timeout=60)

  return Kit(transport, switches, events, replies,
             lambda arrays: ray_transport.StoredDataset(ray.put(arrays)),
             elsewhere)


def make_kit(request):
  """Yields the kit `request.param` names, and cleans up after it."""
  cleanup = []
  if request.param == "ray":
    request.getfixturevalue("ray_instance")
  make = {"shared_memory": _shm_kit, "ray": _ray_kit,
          "threads": _inprocess_kit}[request.param]
  try:
    yield make(cleanup)
  finally:
    for step in reversed(cleanup):
      step()


# Shared memory and Ray start real processes: they run the same tests in
# tests/e2e/test_transport_conformance_e2e.py and
# tests/e2e/test_ray_backend.py.
@pytest.fixture(params=["threads"])
def kit(request):
  yield from make_kit(request)


def _meta(worker, clock, start=1.0, steps=(0.125, 0.375)):
  return CommitMeta(worker, clock, 0.5, {"accuracy": 0.25, "mae": 1.5}, 2.0,
                    start, {"accuracy": np.array(steps, np.float32)})


def _full(value, rows=1):
  return tuple(np.full(P, value + row, np.float32) for row in range(rows))


def test_a_pull_waits_for_the_first_publish_and_is_a_whole_center(kit):
  transport = kit.transport(P, 1, 1, 1)
  out = np.empty(P, np.float32)
  with pytest.raises(TimeoutError):
    transport.pull(out, timeout=0.05)
  for clock in (3, 4):
    transport.publish(np.full(P, clock / 2, np.float32), clock)
  clocks = []
  while not clocks or clocks[-1] != 4:
    clocks.append(transport.pull(out, timeout=10))
    assert out.min() == out.max() == clocks[-1] / 2  # Its own clock's.
    assert len(clocks) < 1000
  assert clocks == sorted(clocks)


def test_commits_come_out_first_in_first_out_with_their_meta(kit):
  transport = kit.transport(P, 2, 2, 4)
  metas = [_meta(1, 7), _meta(0, 7, start=None, steps=()), _meta(1, 8)]
  for i, meta in enumerate(metas):
    assert transport.commit(_full(10 * i, rows=2), meta, timeout=10)
  for i, meta in enumerate(metas):
    commit = transport.next_commit(timeout=10)
    assert commit.meta[:6] == meta[:6], (commit.meta, meta)
    assert list(commit.meta.step_metrics) == ["accuracy"]
    steps = np.asarray(commit.meta.step_metrics["accuracy"])
    assert steps.dtype == np.float32 and steps.tolist() == list(
        meta.step_metrics["accuracy"])
    np.testing.assert_array_equal(np.asarray(commit.payload),
                                  np.stack(_full(10 * i, rows=2)))
    transport.release(commit)
  assert transport.next_commit(timeout=0.05) is None
  assert transport.wait_acknowledged(1, 2, timeout=10)
  assert not transport.wait_acknowledged(0, 2, timeout=0.05)
  assert (transport.acknowledged(0), transport.acknowledged(1)) == (1, 2)


def test_a_full_queue_refuses_a_commit_until_one_is_handled(kit):
  transport = kit.transport(P, 1, 2, 2)
  assert transport.commit(_full(1), _meta(0, 0), timeout=10)
  assert transport.commit(_full(2), _meta(1, 0), timeout=10)
  started = time.monotonic()
  assert not transport.commit(_full(3), _meta(0, 0), timeout=0.2)
  assert time.monotonic() - started >= 0.15  # It waited for room.
  transport.release(transport.next_commit(timeout=10))
  assert transport.commit(_full(3), _meta(0, 0), timeout=10)


def test_a_workers_done_comes_after_its_commits_and_once(kit):
  transport = kit.transport(P, 1, 2, 2)
  assert transport.commit(_full(1), _meta(0, 0), timeout=10)
  done = ev.WorkerDone(0, 1, 320, {})
  transport.finish(done)
  assert transport.is_done(0) and not transport.is_done(1)
  commit = transport.next_commit(timeout=10)
  assert commit.meta.worker == 0
  transport.release(commit)
  assert transport.next_commit(timeout=10) == done
  assert transport.next_commit(timeout=0.05) is None


def test_the_supervisor_sees_what_is_in_flight_and_sets_progress(kit):
  transport = kit.transport(P, 1, 2, 2)
  transport.set_acknowledged(1, 5)  # As on resume.
  assert transport.acknowledged(1) == 5
  assert transport.wait_acknowledged(1, 5, timeout=0)
  assert not transport.in_flight(0)
  assert transport.commit(_full(1), _meta(0, 0), timeout=10)
  assert transport.in_flight(0) and not transport.in_flight(1)
  commit = transport.next_commit(timeout=10)
  assert transport.in_flight(0)  # Being applied.
  transport.release(commit)
  assert not transport.in_flight(0) and transport.acknowledged(0) == 1
  assert transport.reclaim(0) == 0  # Nothing half-written.


def test_switches_stay_set_once_set(kit):
  switches = kit.switches()
  assert not switches.is_set("go") and not switches.wait("go", 0.05)
  switches.set("go")
  assert switches.is_set("go") and switches.wait("go", 10)
  assert not switches.is_set("stop")


def test_events_arrive_in_order_and_replies_answer_in_order(kit):
  events, take = kit.events()
  sent = [ev.ServerReady(1.0), ev.CheckpointRequest(3),
          ev.WorkerDone(1, 4, 640, {"peak_rss_mb": 1.5})]
  for event in sent:
    events.put(event)
  events.flush()
  assert [take() for _ in sent] == sent
  replies, send = kit.replies()
  assert not replies.poll(0.05)
  send((3, 120))
  send((4, 240))
  assert replies.poll(10)
  assert (replies.recv(), replies.recv()) == ((3, 120), (4, 240))


def test_the_data_reads_back_whole(kit):
  arrays = {"x_train": np.arange(12, dtype=np.float32).reshape(3, 4),
            "y_train": np.array([2, 0, 1], np.int32),
            "x_test": np.ones((1, 4), np.float32),
            "y_test": np.zeros(1, np.int32)}
  read = kit.data(arrays).arrays()
  assert sorted(read) == sorted(arrays)
  for key, value in arrays.items():
    assert read[key].dtype == value.dtype, key
    np.testing.assert_array_equal(read[key], value)


def _worker(transport, switches, events, windows):
  """A worker stand-in elsewhere: at `go`, commits the pulled center + 1, each time after its last commit is in."""
  if not switches.wait("go", 30):
    return False
  center = np.empty(transport.num_params, np.float32)
  for window in range(windows):
    if not transport.wait_acknowledged(0, window, 30):
      return False
    clock = transport.pull(center, timeout=30)
    if not transport.commit((center + 1,), _meta(0, clock), timeout=30):
      return False
  done = ev.WorkerDone(0, windows, windows * 320, {})
  transport.finish(done)
  events.put(done)
  events.flush()
  return True


def test_a_worker_elsewhere_pulls_its_own_commits_back(kit):
  transport = kit.transport(P, 1, 1, 2)
  switches = kit.switches()
  events, take = kit.events()
  windows = 5
  join = kit.elsewhere(_worker, transport, switches, events, windows)
  transport.publish(np.zeros(P, np.float32), clock=0)
  switches.set("go")
  for clock in range(1, windows + 1):
    commit = transport.next_commit(timeout=30)
    assert commit is not None and commit.meta.clock == clock - 1
    # Pulled after its previous commit was in: the center it read is that.
    center = np.array(commit.payload[0])
    assert center.min() == center.max() == clock
    transport.publish(center, clock)
    transport.release(commit)
  done = ev.WorkerDone(0, windows, windows * 320, {})
  assert transport.next_commit(timeout=30) == done
  assert take() == done
  assert join()
  assert transport.acknowledged(0) == windows and transport.is_done(0)


def _planned_worker(transport, windows):
  """Worker 0 of Dynamic Local Updates: each window as long as its last acknowledgement's plan says."""
  center = np.empty(P, np.float32)
  for window in range(windows):
    if not transport.wait_acknowledged(0, window, 30):
      return False
    clock = transport.pull(center, timeout=30)
    steps = transport.window_plan(0).local_updates or 8  # None yet: λ.
    if not transport.commit((center,), _meta(0, clock)._replace(
        local_updates=steps), timeout=30):
      return False
  return True


def test_a_commit_carries_its_window_and_its_acknowledgement_the_next_plan(
    kit):
  transport = kit.transport(P, 1, 1, 2)
  assert transport.window_plan(0) == WindowPlan()
  join = kit.elsewhere(_planned_worker, transport, 4)
  transport.publish(np.zeros(P, np.float32), clock=0)
  seen = []
  for i in range(4):
    commit = transport.next_commit(timeout=30)
    seen.append(commit.meta.local_updates)
    # Planned before the release: the acknowledgement carries it.
    transport.set_window_plan(0, WindowPlan(3 - i, 10 * (i + 1)))
    transport.release(commit)
  assert join()
  assert seen == [8, 3, 2, 1]
  assert transport.window_plan(0) == WindowPlan(0, 40)


# What a file that runs the suite on another kit imports
# (`from test_transport_conformance import *`): the kit's maker and every
# test, which then run with that file's own `kit` fixture.
__all__ = ["make_kit"] + [name for name in list(globals())
                          if name.startswith("test_")]
