"""How the training set reaches the workers (`--data_assignment`): each mode's index sequence against numpy."""

import numpy as np
import pytest

from agn_jax import shares
from agn_jax.config import TrainConfig


N, WORKERS, SEED = 103, 4, 7


def test_epoch_slices_match_a_numpy_reference_and_partition_every_epoch():
  epochs = 5
  streams = []
  for k in range(WORKERS):
    start, stop = shares.shard_bounds(N, WORKERS, k)
    # The reference: epoch e's permutation of all N (seeded by seed and e
    # alone), worker k's slice of it, one epoch after the other.
    reference = np.concatenate([
        np.random.default_rng([SEED, 1 << 20, e]).permutation(N)[start:stop]
        for e in range(epochs)])
    sampler = shares.sampler("epoch_slices", N, WORKERS, k, SEED)
    got = np.concatenate([sampler.take(7) for _ in range(
        -(-len(reference) // 7))])[:len(reference)]
    np.testing.assert_array_equal(got, reference)
    streams.append((got, stop - start))
  for e in range(epochs):  # Every epoch, the slices partition the set.
    epoch = np.concatenate([g[e * size:(e + 1) * size] for g, size in streams])
    assert sorted(epoch.tolist()) == list(range(N))
  # A worker sees most of the set over the run, not one 1/n again and again.
  assert len(set(streams[0][0].tolist())) > 2 * N // WORKERS


def test_shards_match_a_numpy_reference():
  for k in range(WORKERS):
    start, stop = N * k // WORKERS, N * (k + 1) // WORKERS
    rng = np.random.default_rng([SEED, k])  # Reshuffled every pass.
    reference = np.concatenate([start + rng.permutation(stop - start)
                                for _ in range(3)])
    sampler = shares.sampler("shards", N, WORKERS, k, SEED)
    np.testing.assert_array_equal(sampler.take(len(reference)), reference)


@pytest.mark.parametrize("assignment", shares.PER_WORKER)
def test_deterministic_under_a_seed_and_skip_resumes_exactly(assignment):
  def stream(seed, skip=0, take=200):
    sampler = shares.sampler(assignment, N, WORKERS, 1, seed)
    sampler.skip(skip)
    return sampler.take(take)
  np.testing.assert_array_equal(stream(SEED), stream(SEED))
  assert not np.array_equal(stream(SEED), stream(SEED + 1))
  # Where a restarted worker or a restored simulation resumes.
  np.testing.assert_array_equal(stream(SEED, skip=61, take=139),
                                stream(SEED)[61:])


def test_the_sample_budget_is_the_same_in_every_mode():
  # The share is whole windows of λ, whatever the mode: epochs × N / n
  # samples a worker, rounded down to windows.
  share = shares.windows_per_worker(N, WORKERS, 3.0, 5, 4) * 5 * 4
  assert share == (3 * N // WORKERS) // 20 * 20
  for assignment in shares.PER_WORKER:
    for k in range(WORKERS):
      taken = shares.sampler(assignment, N, WORKERS, k, SEED).take(share)
      assert len(taken) == share and taken.min() >= 0 and taken.max() < N


def test_an_unknown_assignment_is_refused():
  with pytest.raises(ValueError, match="data_assignment must be one of "
                     "shards, epoch_slices, stream, got 'round_robin'"):
    TrainConfig(data_assignment="round_robin").validate()


# The stream: one shared sequence of mini-batches, handed out by ticket.


def test_stream_steps_match_a_numpy_reference():
  batch, epochs = 5, 4
  # The reference: every epoch's permutation of all N (seeded by the seed
  # and the epoch), one after the other, cut into mini-batches.
  order = np.concatenate([
      np.random.default_rng([SEED, 1 << 21, e]).permutation(N)
      for e in range(epochs)])
  stream = shares.Stream(N, batch, SEED)
  for start, steps in ((0, 1), (3, 4), (19, 3), (40, 20)):
    np.testing.assert_array_equal(
        stream.indices(start, steps),
        order[start * batch:(start + steps) * batch])
  # Deterministic under the seed, different under another.
  np.testing.assert_array_equal(shares.Stream(N, batch, SEED).indices(7, 9),
                                order[35:80])
  assert not np.array_equal(shares.Stream(N, batch, SEED + 1).indices(0, 9),
                            order[:45])


def test_tickets_hand_out_the_whole_budget_once():
  budget = WORKERS * 23
  tickets = shares.Tickets(budget)
  got, asks = [], [5, 3, 5, 4] * 10
  for ask in asks:
    t = tickets.take(ask)
    if t is not None:
      got.append(t)
  # Contiguous from 0, each step once, the budget exactly; the last short.
  assert got[0][0] == 0
  assert all(a[0] + a[1] == b[0] for a, b in zip(got, got[1:]))
  assert sum(steps for _, steps in got) == budget
  assert [steps for _, steps in got] == asks[:len(got) - 1] + [
      budget - sum(asks[:len(got) - 1])]
  assert tickets.take(1) is None


def test_a_spent_stream_resumed_with_a_larger_budget_hands_out_the_rest():
  # pylint: disable=g-import-not-at-top
  from agn_jax.sim.clock import TimeModel
  from agn_jax.sim.schedule import EventSchedule
  lam, n = 2, 3
  model = TimeModel(1.0, 0.0, 0.0, 0.0, num_workers=n,
                    communication_window=lam)

  def schedule(windows):  # `windows` of λ steps per worker: n × windows × λ.
    return EventSchedule(model, shares.Windows.fixed(windows, lam, n),
                         shares.Tickets(n * windows * lam))

  finished = schedule(2)
  assert len(list(finished.drain())) == n * 2
  saved = finished.state()
  # The same run with twice the epochs goes on where the first one ended.
  resumed = schedule(4)
  resumed.restore(saved)
  more = list(resumed.drain())
  assert len(more) == n * 2
  # Each step of the larger stream handed out once, in order from 0.
  tickets = sorted(t for mine in resumed.state()["tickets"] for t in mine)
  assert [start for start, _ in tickets] == list(range(0, n * 4 * lam, lam))
  assert all(steps == lam for _, steps in tickets)
