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


@pytest.mark.parametrize("assignment", shares.ASSIGNMENTS)
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
  for assignment in shares.ASSIGNMENTS:
    for k in range(WORKERS):
      taken = shares.sampler(assignment, N, WORKERS, k, SEED).take(share)
      assert len(taken) == share and taken.min() >= 0 and taken.max() < N


def test_an_unknown_assignment_is_refused():
  with pytest.raises(ValueError, match="data_assignment must be one of "
                     "shards, epoch_slices, got 'stream'"):
    TrainConfig(data_assignment="stream").validate()
