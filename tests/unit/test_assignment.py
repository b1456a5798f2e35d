"""How the training set reaches the workers (`--data_assignment`): each mode's index sequence against numpy."""

import numpy as np
import pytest

from agn_jax import shares
from agn_jax.config import TrainConfig
from agn_jax.runtime.context import Faults, Slowdown


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


def _stream_simulation(speed_model, seed=0, epochs=2.0):
  # pylint: disable=g-import-not-at-top
  from agn_jax import data
  from agn_jax.config import SimulatedOptions
  from agn_jax.sim.simulation import Simulation
  config = TrainConfig(dataset="digits", num_workers=4, communication_window=4,
                       epochs=epochs, batch_size=16, hidden_sizes=(16,),
                       backend="simulated", data_assignment="stream",
                       seed=seed, options=SimulatedOptions(
                           cluster="none", speed_model=speed_model))
  return config, Simulation.from_config(config.validate(), data.load("digits"))


@pytest.mark.parametrize("speed_model,fastest_over_slowest", [
    ("constant", (1.0, 1.0)), ("speeds:4,1,1,1", (2.5, 6.0))])
def test_a_simulated_stream_gives_fast_workers_more_and_spends_the_budget(
    speed_model, fastest_over_slowest):
  config, sim = _stream_simulation(speed_model)
  records = [r for rnd in sim for r in rnd]
  n, batch = config.num_workers, config.batch_size
  # The budget: every worker's share of whole windows, as in the other modes.
  share = shares.windows_per_worker(1438, n, config.epochs, 4, batch) * 4
  steps = [sim.steps_done(k) for k in range(n)]
  assert sum(steps) == n * share
  assert len(records) == n * share // 4
  # Each step of the stream was trained on once: the windows' tickets tile
  # [0, n × share) (from the schedule's state, as a checkpoint stores it).
  tickets = sorted(tuple(t) for mine in sim.state()["meta"]["schedule"][
      "tickets"] for t in mine)
  assert tickets[0][0] == 0 and all(a[0] + a[1] == b[0]
                                    for a, b in zip(tickets, tickets[1:]))
  low, high = fastest_over_slowest
  assert low <= max(steps) / min(steps) <= high, steps
  if speed_model != "constant":
    assert steps[0] == max(steps)  # Worker 0 is four times as fast.


def test_a_simulated_stream_is_deterministic_and_resumes_exactly():
  _, a = _stream_simulation("lognormal:1.0", seed=3, epochs=1.0)
  first = [[(r.meta.worker, r.staleness) for r in rnd] for rnd in a]
  _, b = _stream_simulation("lognormal:1.0", seed=3, epochs=1.0)
  for _ in range(3):
    b.run_round()
  saved = b.state()
  _, c = _stream_simulation("lognormal:1.0", seed=3, epochs=1.0)
  c.restore(saved)
  rest = [[(r.meta.worker, r.staleness) for r in rnd] for rnd in c]
  assert first[3:] == rest
  np.testing.assert_array_equal(a.center(), c.center())


# The stream on real loops: the server hands out its steps.


def _stream_config(tmp_path, **changes):
  from agn_jax.config import ProcessesOptions  # pylint: disable=g-import-not-at-top
  from helpers import tiny_config  # pylint: disable=g-import-not-at-top
  settings = dict(num_workers=3, communication_window=4, hidden_sizes=(16,),
                  batch_size=8, epochs=1.0, data_assignment="stream",
                  options=ProcessesOptions(cache_dir=""))
  return tiny_config(tmp_path, **dict(settings, **changes)).resolved()


@pytest.mark.parametrize("strategy", ["agn", "aeasgd"])
def test_real_loops_hand_a_slowed_worker_fewer_of_the_streams_steps(
    tmp_path, strategy):
  from helpers import train_in_process  # pylint: disable=g-import-not-at-top
  # Worker 1 sleeps 30 ms a local step; the others train a step in well
  # under that, so they take most of the stream. (At 5 ms, thread
  # scheduling on a loaded 2-core machine once left worker 2 fewer steps.)
  config = _stream_config(tmp_path, strategy=strategy)
  summary, _, _ = train_in_process(
      config, Faults(slowdown=Slowdown(worker=1, seconds=0.03)))
  assert summary["completed"], summary.get("outcome")
  samples = summary["samples_per_worker"]
  # The budget: three shares of whole windows, as with shards.
  share = shares.windows_per_worker(1438, 3, 1.0, 4, 8) * 4 * 8
  assert sum(samples) == 3 * share
  assert samples[1] < min(samples[0], samples[2]), samples
  # Every commit's window was a whole λ (the budget divides into them).
  assert sum(summary["worker_commits"]) == 3 * share // 32
