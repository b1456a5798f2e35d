"""One exchange, two paths: `strategies.exchange` on one host against the real worker and server loops, to the last bit.

The simulator's round sequences each commit with `strategies.exchange`; the
processes and Ray backends split the same half-steps between a worker's
process and the server's. Here the real loops run as threads
(`InProcessBackend`) with `context.Turns` forcing one schedule: 3 workers, 4
commits each, interleaved, each worker pulled and received before the next
commit. A replay calls `exchange` once per commit of that schedule, with the
workers' windows run by the same window kernel on the same samples. Every
registered strategy, and two written outside the package: one whose commit
reads the center it pulled, one that pulls before its commit and averages
with the center it receives.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agn_jax import build, shares, strategies
from agn_jax.config import ProcessesOptions
from agn_jax.runtime import backend as backend_lib
from agn_jax.runtime.context import Faults, Turns
from agn_jax.runtime.worker import worker_functions
from fifth_strategy import AVERAGING_NAME, NAME
from helpers import metrics_rows, tiny_config, train_in_process

# Worker 0 commits first, second and fifth...; each worker 4 times.
ORDER = (0, 1, 0, 2, 1, 2, 0, 1, 2, 2, 0, 1)
WORKERS, WINDOW, BATCH, EPOCHS = 3, 2, 16, 0.3


def _config(tmp_path, strategy):
  return tiny_config(
      tmp_path, strategy=strategy, num_workers=WORKERS,
      communication_window=WINDOW, batch_size=BATCH, hidden_sizes=(16,),
      epochs=EPOCHS, options=ProcessesOptions(cache_dir="")).resolved()


class _ReceivesAfterApply(strategies.Strategy):
  """The contract broken: the worker receives the center after the apply, even when it pulled before its commit."""

  def received_center(self, accepted, center, used):
    del accepted, used
    return center


def _replay(config, strategy=None):
  """The schedule through `exchange`: `(center, staleness of each commit)`."""
  plan = backend_lib.plan(config)
  dataset, layout = plan.dataset, plan.layout
  assert plan.windows == len(ORDER) // WORKERS  # 4 windows each.
  strategy = strategy or build.build_strategy(config)
  model, loss_fn = build.build_model(config, dataset.num_classes,
                                     dataset.input_shape)
  initial = layout.ravel_numpy(build.initial_center(
      config, model, int(np.prod(dataset.input_shape))))
  fns = worker_functions(strategy, loss_fn, layout)
  exchange = jax.jit(functools.partial(strategies.exchange, strategy))
  x, y = dataset.x_train, dataset.y_train
  samplers = [shares.sampler(config.data_assignment, len(x), WORKERS, k,
                             config.seed) for k in range(WORKERS)]
  center = layout.unravel(jnp.asarray(initial))
  server = strategy.rule.init(center)
  states = [fns.init(jnp.asarray(initial)) for _ in range(WORKERS)]
  pulled, clocks = [center] * WORKERS, [0] * WORKERS
  staleness = []
  for k in ORDER:
    idx = samplers[k].take(WINDOW * BATCH)
    result = fns.kernel(states[k].params, states[k].opt_state,
                        (x[idx].reshape(WINDOW, BATCH, -1),
                         y[idx].reshape(WINDOW, BATCH)))
    state = states[k]._replace(params=result.params,
                               opt_state=result.opt_state)
    ex = exchange(state, center, server, pulled[k], np.int32(clocks[k]))
    center, server, states[k] = ex.center, ex.server_state, ex.state
    staleness.append(int(ex.staleness))
    if strategy.pulls_after_commit(bool(ex.accepted)):
      pulled[k], clocks[k] = center, int(server.clock)
  return layout.ravel_numpy(center), staleness


def _threads(config):
  """The schedule through the real loops as threads: `(center, staleness of each commit in order)`."""
  summary, center, _ = train_in_process(config, Faults(turns=Turns(ORDER)))
  assert summary["num_commits"] == len(ORDER)
  commits = sorted(metrics_rows(config.workdir, ("commit",)),
                   key=lambda row: row["clock"])
  assert [row["worker"] for row in commits] == list(ORDER)
  return np.asarray(center), [row["staleness"] for row in commits]


def _bits(vector):
  return np.asarray(vector, np.float32).view(np.uint32)


@pytest.mark.parametrize("name", strategies.available() + (NAME,
                                                          AVERAGING_NAME))
def test_the_exchange_and_the_real_loops_agree_to_the_last_bit(tmp_path,
                                                               name):
  config = _config(tmp_path, name)
  threads, threads_staleness = _threads(config)
  replayed, replayed_staleness = _replay(config)
  assert threads_staleness == replayed_staleness
  # The schedule interleaves: a worker that pulled before its window
  # commits against a center that moved since (one that pulls before its
  # commit sees none land in between, on either path).
  pulls_first = build.build_strategy(config).pull_before_commit
  assert (max(replayed_staleness) > 0) != pulls_first
  np.testing.assert_array_equal(_bits(threads), _bits(replayed))
  assert np.all(np.isfinite(replayed))


def test_the_comparison_sees_a_broken_contract(tmp_path):
  # The averaging strategy pulls before its commit: a replay that hands it
  # the center after the apply trains differently, so the comparison above
  # can fail.
  config = _config(tmp_path, AVERAGING_NAME)
  right, _ = _replay(config)
  s = build.build_strategy(config)
  broken = _ReceivesAfterApply(**{f.name: getattr(s, f.name)
                                  for f in dataclasses.fields(s)})
  wrong, _ = _replay(config, broken)
  assert np.abs(wrong - right).max() > 1e-6
