"""Tests of the shared-memory transport: backpressure, slot ownership, segments.

Between real processes (snapshots, FIFO slot reuse):
tests/e2e/test_transport_e2e.py, whose processes run the targets defined
here.
"""

import os
import re
import stat

import multiprocess
import numpy as np
import pytest

from agn_jax.runtime.transports import shm
from agn_jax.wire import CommitMeta
from agn_jax.runtime.transports.shared_memory import SharedMemoryTransport


def _publisher(transport, count):
  center = np.empty(transport.num_params, np.float32)
  for clock in range(1, count + 1):
    center.fill(clock)  # Every element says which commit it belongs to.
    transport.publish(center, clock)


def _steps(value):
  """Commit `value`'s step values: 0 to 3 of them, so lengths vary."""
  return np.arange(int(value) % 4, dtype=np.float32) / 8 + value


def _committer(transport, worker, values):
  for value in values:
    payload = np.full((2, transport.num_params), value, np.float32)
    meta = CommitMeta(worker, int(value), 1 / value,
                      {"accuracy": value / 16, "mae": value / 32},
                      value + 0.5, None if value == 3 else value - 0.25,
                      {"accuracy": _steps(value)})
    assert transport.commit(payload, meta, timeout=10)


@pytest.fixture
def ctx():
  return multiprocess.get_context("spawn")


@pytest.fixture
def make_transport(ctx):
  made = []

  def make(**kwargs):
    t = SharedMemoryTransport.create(ctx, **kwargs)
    made.append(t)
    return t

  yield make
  for t in made:
    t.close()
    t.unlink()


def test_full_ring_blocks_until_a_slot_is_freed(make_transport):
  transport = make_transport(num_params=4, payload_size=2, num_slots=2)
  a = transport.acquire_slot(worker=0, timeout=1)
  b = transport.acquire_slot(worker=1, timeout=1)
  assert {a, b} == {0, 1}
  assert transport.acquire_slot(worker=2, timeout=0.2) is None  # Backpressure.
  # slot_owners()[slot] is the worker holding the slot.
  owners = list(transport.slot_owners())
  assert owners[a] == 0 and owners[b] == 1, (a, b, owners)
  transport.free_slot(b)
  assert list(transport.slot_owners())[b] == -1  # Free.
  assert transport.acquire_slot(worker=2, timeout=1) == b  # Reused.
  owners = list(transport.slot_owners())
  assert owners[a] == 0 and owners[b] == 2, (a, b, owners)


def test_pull_waits_for_the_first_publish(make_transport):
  transport = make_transport(num_params=3, payload_size=1, num_slots=1)
  with pytest.raises(TimeoutError):
    transport.pull(np.empty(3, np.float32), timeout=0.05)


def test_segments_are_private_unguessable_and_unlinked(ctx):
  transport = SharedMemoryTransport.create(ctx, num_params=10, payload_size=1,
                                           num_slots=1)
  names = transport.names
  for name in names:
    assert re.fullmatch(r"agn_[0-9a-f]{16}", name)
    mode = stat.S_IMODE(os.stat(f"/dev/shm/{name}").st_mode)
    assert mode == 0o600
  transport.close()
  transport.unlink()
  for name in names:
    assert not os.path.exists(f"/dev/shm/{name}")


def test_shared_arrays_are_read_only_views():
  shared = shm.SharedArrays.create({"x": np.arange(6, dtype=np.float32)})
  try:
    view = shared.arrays()["x"]
    np.testing.assert_array_equal(view, np.arange(6))
    with pytest.raises(ValueError):
      view[0] = 1.0
  finally:
    shared.close()
    shared.unlink()
  assert not os.path.exists(f"/dev/shm/{shared.name}")


def test_create_refuses_an_existing_name():
  seg = shm.Segment.create(16, track=False)
  try:
    with pytest.raises(FileExistsError):
      shm.Segment.create(16, name=seg.name, track=False)
  finally:
    seg.close()
    seg.unlink()


def test_a_worker_can_wait_until_its_commits_are_handled(make_transport):
  transport = make_transport(num_params=4, payload_size=1, num_slots=1,
                             num_workers=2)
  assert transport.wait_acknowledged(1, 0, timeout=0)
  assert not transport.wait_acknowledged(1, 1, timeout=0.05)
  transport.acknowledge(0)  # Another worker's commit does not count.
  assert not transport.wait_acknowledged(1, 1, timeout=0.05)
  transport.acknowledge(1)
  assert transport.wait_acknowledged(1, 1, timeout=1)


def test_a_commit_with_more_step_values_than_the_ring_holds_is_refused(
    make_transport):
  transport = make_transport(num_params=4, payload_size=1, num_slots=1,
                             step_capacity=2, metrics=("accuracy",),
                             step_metric="accuracy")
  meta = CommitMeta(0, 0, 0.0, {"accuracy": 0.0}, 0.0, 0.0,
                    {"accuracy": np.zeros(3, np.float32)})
  with pytest.raises(ValueError, match="3 step values; the ring holds 2"):
    transport.commit((np.zeros(4, np.float32),), meta, timeout=1)
  # Nor are metrics or step values the ring was not made for.
  with pytest.raises(ValueError, match=r"metrics \['mae'\]; the ring holds "
                     r"\['accuracy'\]"):
    transport.commit((np.zeros(4, np.float32),),
                     meta._replace(metrics={"mae": 0.0}), timeout=1)
  with pytest.raises(ValueError, match="step values of \\['mae'\\]"):
    transport.commit((np.zeros(4, np.float32),),
                     meta._replace(step_metrics={"mae": ()}), timeout=1)
  assert list(transport.slot_owners()) == [-1]  # No slot left half-filled.
