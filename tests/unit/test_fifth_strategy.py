"""A fifth strategy, written only in tests/fifth_strategy.py, runs on every backend and gives numpy's center.

The strategy (λ SGD steps, commit half the delta, the server adds it) is no
part of agn_jax: each run names it by its import path, and every process of
the run imports it from there. Each backend's final center is checked
against a numpy replay of the run's own commit order (worker, and the clock
of the center it started from, from metrics.jsonl): exact up to float32
rounding, whatever order an asynchronous backend chose. The model is a
one-hidden-layer ReLU MLP, differentiated by hand here; each local step
takes the worker's whole shard, so a step's gradient does not depend on the
order the examples were drawn in. The runs are
tests/e2e/test_fifth_strategy_e2e.py; here, the strategy and the replay.
"""

import numpy as np
import pytest

from agn_jax import TrainConfig, get_strategy, models, strategies, wire
from agn_jax.config import SimulatedOptions
from agn_jax.data.dataset import make_dataset
from agn_jax.shares import shard_bounds
from fifth_strategy import NAME
from helpers import metrics_rows

EXAMPLES, FEATURES, HIDDEN, CLASSES = 24, 6, 4, 3
WINDOW, WINDOWS, LR = 3, 4, 0.5


def _dataset():
  rng = np.random.default_rng(7)
  return make_dataset(
      "fifth", rng.normal(size=(EXAMPLES, FEATURES)),
      rng.integers(0, CLASSES, EXAMPLES), rng.normal(size=(8, FEATURES)),
      rng.integers(0, CLASSES, 8), CLASSES, (FEATURES,))


def _config(workdir, backend, num_workers):
  # A batch is a worker's whole shard: WINDOWS windows of WINDOW steps each.
  return TrainConfig(
      strategy=NAME, backend=backend, num_workers=num_workers,
      communication_window=WINDOW, hidden_sizes=(HIDDEN,),
      batch_size=EXAMPLES // num_workers, epochs=float(WINDOW * WINDOWS),
      learning_rate=LR, eval_every_seconds=0.0, checkpoints=False,
      workdir=str(workdir), options=(SimulatedOptions(eval_every_rounds=0)
                                     if backend == "simulated" else None))


def _grad(p, x, y):
  """The gradient of the mean softmax cross-entropy of `relu(x W0 + b0) W1 + b1`, by hand."""
  (b0, w0), (b1, w1) = p
  pre = x @ w0 + b0
  hidden = np.maximum(pre, 0.0)
  logits = hidden @ w1 + b1
  prob = np.exp(logits - logits.max(1, keepdims=True))
  prob /= prob.sum(1, keepdims=True)
  dlogits = (prob - np.eye(CLASSES)[y]) / len(x)
  dpre = (dlogits @ w1.T) * (pre > 0)
  return ((dpre.sum(0), x.T @ dpre), (dlogits.sum(0), hidden.T @ dlogits))


def _replay(config, dataset, commits, share=0.5):
  """The center after `commits` (in the server's order), in float64: `share` of each window's delta added."""
  model = models.create_model("mlp", CLASSES, (FEATURES,), (HIDDEN,))
  import jax  # pylint: disable=g-import-not-at-top
  initial = models.init_params(model, jax.random.PRNGKey(config.seed),
                               FEATURES)
  layout = wire.FlatLayout.from_tree(initial)
  p = initial["params"]
  centers = [tuple((np.float64(p[k]["bias"]), np.float64(p[k]["kernel"]))
                   for k in ("Dense_0", "Dense_1"))]
  for row in commits:
    # The clock of the center the window started from.
    start = centers[row["clock"] - 1 - row["staleness"]]
    lo, hi = shard_bounds(EXAMPLES, config.num_workers, row["worker"])
    x, y = dataset.x_train[lo:hi].astype(np.float64), dataset.y_train[lo:hi]
    params = start
    for _ in range(WINDOW):
      params = tuple(tuple(v - LR * g for v, g in zip(layer, grads))
                     for layer, grads in zip(params, _grad(params, x, y)))
    centers.append(tuple(
        tuple(c + share * (v - s) for c, v, s in zip(*layers))
        for layers in zip(centers[-1], params, start)))
  (b0, w0), (b1, w1) = centers[-1]
  tree = {"params": {"Dense_0": {"bias": b0, "kernel": w0},
                     "Dense_1": {"bias": b1, "kernel": w1}}}
  return layout.ravel_numpy(tree).astype(np.float64), layout.ravel_numpy(
      initial)


def _check(config, dataset, center, workdir):
  commits = sorted(metrics_rows(workdir, ("commit",)),
                   key=lambda row: row["clock"])
  n = config.num_workers
  assert [row["clock"] for row in commits] == list(range(1, n * WINDOWS + 1))
  assert sorted(row["worker"] for row in commits) == sorted(
      list(range(n)) * WINDOWS)
  expected, initial = _replay(config, dataset, commits)
  np.testing.assert_allclose(center, expected, rtol=2e-4, atol=2e-5)
  # The test can fail: the whole delta, or no training, is far from it.
  whole, _ = _replay(config, dataset, commits, share=1.0)
  assert np.abs(whole - expected).max() > 100 * 2e-4
  assert np.abs(initial - expected).max() > 100 * 2e-4
  return commits


def test_the_strategy_is_named_by_its_import_path_not_registered():
  assert NAME not in strategies.available()
  strategies.check_name(NAME)
  assert strategies.paper_defaults(NAME) == {}
  assert strategies.parameters(NAME) == ("communication_window",
                                         "learning_rate")
  s = get_strategy(NAME, communication_window=WINDOW, learning_rate=LR)
  center = np.array([1.0, -2.0], np.float32)
  state = s.init_worker(center)
  payload, state = s.worker_commit(state._replace(params=center + 4.0),
                                   center)
  np.testing.assert_allclose(payload["delta"], [2.0, 2.0])
  moved, _, accepted = s.server_apply(center, s.rule.init(center), payload, 0)
  np.testing.assert_allclose(moved, [3.0, 0.0])
  assert bool(accepted)
  with pytest.raises(ValueError, match="cannot be imported"):
    strategies.check_name("tests.no_such_module:half_delta")
  with pytest.raises(ValueError, match="unknown strategy"):
    strategies.check_name("half_delta")
  # The command line takes it by the same name.
  from absl import flags  # pylint: disable=g-import-not-at-top
  from experiments import flags as flags_lib  # pylint: disable=g-import-not-at-top
  flag_values = flags.FlagValues()
  flags_lib.define_train_flags(flag_values)
  flag_values(["train", f"--strategy={NAME}"])
  assert flag_values.strategy == NAME
  with pytest.raises(flags.IllegalFlagValueError, match="package.module"):
    flag_values(["train", "--strategy=half_delta"])
