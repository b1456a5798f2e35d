"""The fifth strategy (tests/fifth_strategy.py) run: simulated, on threads, real processes and Ray.

The rest of the suite, and the numpy replay every run is checked against,
is tests/unit/test_fifth_strategy.py.
"""

import dataclasses

import numpy as np
import pytest

from agn_jax import models, wire
from agn_jax.config import ProcessesOptions
from agn_jax.runtime import train
from agn_jax.runtime.backends.inprocess import InProcessBackend
from agn_jax.runtime.bookkeeping import RunBook
from agn_jax.shares import shard_bounds
from helpers import metrics_rows
from test_fifth_strategy import (CLASSES, EXAMPLES, FEATURES, HIDDEN, LR,
                                 WINDOW, WINDOWS, _check, _config, _dataset,
                                 _grad)


def check_simulated(tmp_path, num_workers):
  """A simulated run of `num_workers` against the reference, its staleness round robin's."""
  dataset = _dataset()
  config = _config(tmp_path / "run", "simulated", num_workers)
  summary = train(config, dataset=dataset)
  assert summary["num_commits"] == summary["expected_commits"]
  center = np.load(tmp_path / "run" / "center.npy")
  commits = _check(config, dataset, center, tmp_path / "run")
  # Round robin: after the first round every commit is n - 1 stale.
  assert [row["staleness"] for row in commits[num_workers:]] == [
      num_workers - 1] * (len(commits) - num_workers)


@pytest.mark.parametrize("num_workers", [1, 2])
def test_simulated(tmp_path, num_workers):
  check_simulated(tmp_path, num_workers)


# Real processes and a real local Ray.
@pytest.mark.parametrize("backend", [
    # soak: tests/e2e/test_workloads_e2e.py's
    # test_processes_from_the_command_line covers spawned parts building
    # what the config names by import path (its task, model and dataset,
    # through the lookup a strategy's name goes through too), and
    # test_threads above this strategy through the real worker and server
    # loops, in the suite.
    pytest.param("processes", marks=pytest.mark.soak),
    # soak: the same two tests cover it (Ray actors build the parts the
    # same way, from the same config), in the suite.
    pytest.param("ray", marks=pytest.mark.soak)])
def test_processes_and_ray(tmp_path, backend):
  if backend == "ray":
    pytest.importorskip("ray")
  dataset = _dataset()
  config = _config(tmp_path / "run", backend, 1)
  summary = train(config, dataset=dataset)
  assert summary["num_commits"] == summary["expected_commits"] == WINDOWS
  center = np.load(tmp_path / "run" / "center.npy")
  commits = _check(config, dataset, center, tmp_path / "run")
  assert [row["staleness"] for row in commits] == [0] * WINDOWS


def test_threads(tmp_path):
  dataset = _dataset()
  config = dataclasses.replace(_config(tmp_path / "run", "processes", 2),
                               options=ProcessesOptions(cache_dir="")
                               ).resolved()
  book = RunBook(config, None, "inprocess")
  run = InProcessBackend(config, book)
  try:
    run.prepare(dataset)
    run.run()
    center = run.final_center()
  finally:
    run.shutdown()
    book.close()
  _check(config, dataset, center, tmp_path / "run")


def test_a_pull_first_strategy_receives_the_center_its_commit_used(tmp_path):
  # `worker_receive` reads the center; the strategy pulls before its commit,
  # so by the contract it receives the center its commit used, not the one
  # after the server applied it (the simulator handed it that one before).
  from fifth_strategy import AVERAGING_NAME  # pylint: disable=g-import-not-at-top
  dataset = _dataset()
  config = dataclasses.replace(_config(tmp_path / "run", "simulated", 2),
                               strategy=AVERAGING_NAME)
  train(config, dataset=dataset)
  center = np.load(tmp_path / "run" / "center.npy")
  commits = sorted(metrics_rows(tmp_path / "run", ("commit",)),
                   key=lambda row: row["clock"])
  assert [row["worker"] for row in commits] == [0, 1] * WINDOWS

  def replay(received_after_apply):
    """Each worker keeps its own parameters, pulls c, commits ¼(θ − c) and averages θ with c."""
    model = models.create_model("mlp", CLASSES, (FEATURES,), (HIDDEN,))
    import jax  # pylint: disable=g-import-not-at-top
    initial = models.init_params(model, jax.random.PRNGKey(config.seed),
                                 FEATURES)
    layout = wire.FlatLayout.from_tree(initial)
    p = initial["params"]
    start = tuple((np.float64(p[k]["bias"]), np.float64(p[k]["kernel"]))
                  for k in ("Dense_0", "Dense_1"))
    c, theta = start, [start, start]
    for row in commits:
      w = row["worker"]
      lo, hi = shard_bounds(EXAMPLES, 2, w)
      x, y = dataset.x_train[lo:hi].astype(np.float64), dataset.y_train[lo:hi]
      for _ in range(WINDOW):
        theta[w] = tuple(tuple(v - LR * g for v, g in zip(layer, grads))
                         for layer, grads in zip(theta[w],
                                                 _grad(theta[w], x, y)))
      used = c
      c = tuple(tuple(cv + 0.25 * (tv - cv) for cv, tv in zip(cl, tl))
                for cl, tl in zip(used, theta[w]))
      given = c if received_after_apply else used
      theta[w] = tuple(tuple(0.5 * (tv + gv) for tv, gv in zip(tl, gl))
                       for tl, gl in zip(theta[w], given))
    (b0, w0), (b1, w1) = c
    return layout.ravel_numpy({"params": {
        "Dense_0": {"bias": b0, "kernel": w0},
        "Dense_1": {"bias": b1, "kernel": w1}}}).astype(np.float64)

  expected, wrong = replay(False), replay(True)
  np.testing.assert_allclose(center, expected, rtol=2e-4, atol=2e-5)
  assert np.abs(wrong - expected).max() > 20 * 2e-4  # The test can fail.
