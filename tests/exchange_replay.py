"""A forced schedule of commits, run two ways: through `strategies.exchange` on one host, and through the real worker and server loops as threads.

The fixture of tests/e2e/test_exchange_e2e.py and test_server_instruments_e2e.py.
`context.Turns` makes the threads commit in `ORDER`, each commit applied and
its worker pulled and received before the next; `replay` calls `exchange`
once per commit of the same order, the windows run by the same window kernel
on the same samples, and returns what each commit did.
"""

import functools
from typing import List, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from agn_jax import build, shares, strategies
from agn_jax.config import ProcessesOptions
from agn_jax.runtime import backend as backend_lib
from agn_jax.runtime.context import Faults, Turns
from agn_jax.runtime.worker import worker_functions
from helpers import metrics_rows, tiny_config, train_in_process

# Worker 0 commits first, third and seventh...; each worker 4 times.
ORDER = (0, 1, 0, 2, 1, 2, 0, 1, 2, 2, 0, 1)
WORKERS, WINDOW, BATCH, EPOCHS = 3, 2, 16, 0.3


def config(tmp_path, strategy, **settings):
  """The schedule's run: 3 workers of 4 windows of λ = 2 on the digits."""
  return tiny_config(
      tmp_path, strategy=strategy, num_workers=WORKERS,
      communication_window=WINDOW, batch_size=BATCH, hidden_sizes=(16,),
      epochs=EPOCHS, options=ProcessesOptions(cache_dir=""),
      **settings).resolved()


class Step(NamedTuple):
  """One commit of the replay (flat float32 vectors)."""
  worker: int
  staleness: int
  delta: np.ndarray  # The commit as sent, decoded.
  pulled: np.ndarray  # The center the commit used.
  before: np.ndarray  # The center just before the apply.
  after: np.ndarray  # And just after it.


def replay(run_config, strategy=None) -> List[Step]:
  """The schedule through `exchange`: each commit's `Step`."""
  plan = backend_lib.plan(run_config)
  dataset, layout = plan.dataset, plan.layout
  assert plan.windows == len(ORDER) // WORKERS  # 4 windows each.
  strategy = strategy or build.build_strategy(run_config)
  model, loss_fn = build.build_model(run_config, dataset.num_classes,
                                     dataset.input_shape)
  initial = layout.ravel_numpy(build.initial_center(
      run_config, model, int(np.prod(dataset.input_shape))))
  fns = worker_functions(strategy, loss_fn, layout)
  exchange = jax.jit(functools.partial(strategies.exchange, strategy))
  x, y = dataset.x_train, dataset.y_train
  samplers = [shares.sampler(run_config.data_assignment, len(x), WORKERS, k,
                             run_config.seed) for k in range(WORKERS)]
  center = layout.unravel(jnp.asarray(initial))
  server = strategy.rule.init(center)
  states = [fns.init(jnp.asarray(initial)) for _ in range(WORKERS)]
  pulled, clocks = [center] * WORKERS, [0] * WORKERS
  steps = []
  for k in ORDER:
    idx = samplers[k].take(WINDOW * BATCH)
    result = fns.kernel(states[k].params, states[k].opt_state,
                        (x[idx].reshape(WINDOW, BATCH, -1),
                         y[idx].reshape(WINDOW, BATCH)))
    state = states[k]._replace(params=result.params,
                               opt_state=result.opt_state)
    before = center
    ex = exchange(state, center, server, pulled[k], np.int32(clocks[k]))
    center, server, states[k] = ex.center, ex.server_state, ex.state
    delta = strategy.decompress(ex.payload, before)["delta"]
    steps.append(Step(k, int(ex.staleness), layout.ravel_numpy(delta),
                      layout.ravel_numpy(ex.used), layout.ravel_numpy(before),
                      layout.ravel_numpy(center)))
    if strategy.pulls_after_commit(bool(ex.accepted)):
      pulled[k], clocks[k] = center, int(server.clock)
  return steps


def threads(run_config):
  """The schedule through the real loops as threads: `(final center, commit rows in order, summary)`."""
  summary, center, _ = train_in_process(run_config,
                                        Faults(turns=Turns(ORDER)))
  assert summary["num_commits"] == len(ORDER)
  rows = sorted(metrics_rows(run_config.workdir, ("commit",)),
                key=lambda row: row["clock"])
  assert [row["worker"] for row in rows] == list(ORDER)
  return np.asarray(center), rows, summary
