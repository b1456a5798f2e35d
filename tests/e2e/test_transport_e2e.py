"""The end-to-end half of tests/unit/test_transport.py: the shared-memory transport between real processes."""

import numpy as np

from test_transport import _committer, _publisher, _steps
from test_transport import ctx, make_transport  # pylint: disable=unused-import

NUM_PARAMS = 200_000  # Big enough that a copy takes a while.


def test_pull_is_a_consistent_snapshot_under_concurrent_publishes(
    ctx, make_transport):
  transport = make_transport(num_params=NUM_PARAMS, payload_size=1,
                             num_slots=1)
  transport.publish(np.zeros(NUM_PARAMS, np.float32), 0)
  writer = ctx.Process(target=_publisher, args=(transport, 3000))
  writer.start()
  out = np.empty(NUM_PARAMS, np.float32)
  clocks = []
  while writer.is_alive() or not clocks:
    clock = transport.pull(out)
    # A torn copy would mix two commits' values.
    assert out[0] == out[-1] == out.min() == out.max() == clock
    clocks.append(clock)
  writer.join()
  assert writer.exitcode == 0
  assert clocks == sorted(clocks)  # The clock never goes back.
  assert len(set(clocks)) > 1  # The reader really raced the writer.
  assert transport.pull(out) == 3000


def test_commits_arrive_fifo_and_slots_are_reused(ctx, make_transport):
  transport = make_transport(num_params=1000, payload_size=2, num_slots=2,
                             step_capacity=3, metrics=("mae", "accuracy"),
                             step_metric="accuracy")
  values = [float(v) for v in range(1, 11)]
  child = ctx.Process(target=_committer, args=(transport, 7, values))
  child.start()
  seen, slots = [], set()
  for _ in values:
    commit = transport.next_commit(timeout=30)
    assert commit is not None and commit.meta.worker == 7
    header, payload = commit.meta, commit.payload
    assert payload.shape == (2, 1000)
    assert np.all(payload == payload[0, 0])
    value = float(payload[0, 0])
    seen.append(value)
    # The metadata of this very commit came along, step values exact.
    assert header[1:5] == (int(value), 1 / value,
                           {"accuracy": value / 16, "mae": value / 32},
                           value + 0.5)
    assert header.window_start == (None if value == 3 else value - 0.25)
    steps = header.step_metrics["accuracy"]
    assert steps.dtype == np.float32
    np.testing.assert_array_equal(steps, _steps(value))
    slots.add(commit.handle)
    transport.free_slot(commit.handle)
  child.join()
  assert child.exitcode == 0
  assert seen == values  # FIFO, and a 2-slot ring carried 10 commits.
  assert slots <= {0, 1}
