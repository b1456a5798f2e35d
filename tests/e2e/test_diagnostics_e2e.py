"""`--diagnostics` on the simulated backend: the instruments of every commit, measured in the round.

The end-to-end half of tests/unit/test_diagnostics.py: whole simulated runs.

The per-commit values are checked against numpy on the center's trajectory:
with one commit per round (a replayed order), the center after each round is
the center after each commit, so every center step, each worker's pulled
center (AGN pulls with its commit's reply) and, since AGN's rule adds the
commit as sent, each `Δ`, are known exactly.
"""

import json
import math
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agn_jax import TrainConfig, build, instruments
from agn_jax.wire import FlatLayout
from agn_jax.runtime import train
from agn_jax.sim.simulation import Simulation
from helpers import REPO, default_emitters_env, metrics_rows
from test_diagnostics import NAMES, digits  # pylint: disable=unused-import

WALL_FIELDS = ("time", "wall_time", "seconds", "window_start", "window_end")


def _config(tmp_path, name="run", **overrides):
  values = dict(strategy="agn", num_workers=3, communication_window=2,
                dataset="digits", hidden_sizes=(16,), batch_size=16,
                epochs=0.3, learning_rate=3e-3, eval_every_rounds=0,
                checkpoint_every_seconds=0.0, backend="simulated",
                workdir=str(tmp_path / name))
  values.update(overrides)
  return TrainConfig.from_dict(values)


def _without(rows, fields):
  return [{k: v for k, v in r.items() if k not in fields} for r in rows]


def _trajectory(digits, subsample=None, every=3, num_workers=3, commits=10):
  """The instruments' records and the centers before and after each commit."""
  config = TrainConfig(
      strategy="agn", num_workers=num_workers, communication_window=2,
      dataset="digits", hidden_sizes=(16,), batch_size=16, epochs=1.0,
      learning_rate=3e-2, seed=3, backend="simulated", diagnostics=True,
      diagnostics_subsample=subsample, diagnostics_every=every)
  order = [[k % num_workers] for k in range(commits)]
  sim = Simulation.from_config(config, digits, commit_order=order)
  centers, records = [sim.center()], []
  for _ in range(commits):
    (record,) = sim.run_round()
    records.append(record)
    centers.append(sim.center())
  return config, sim, np.asarray(centers, np.float64), records


@pytest.mark.parametrize("fraction", [None, 0.3])
def test_each_commit_against_numpy_on_the_center_trajectory(digits, fraction):
  num_workers, every = 3, 3
  config, sim, centers, records = _trajectory(digits, fraction, every,
                                              num_workers)
  num_params = centers.shape[1]
  if fraction is None:  # digits' MLP is small: every parameter, exactly.
    index, scale = np.arange(num_params), 1.0
    assert sim.diagnostics_info["subsample"] == 1.0
  else:
    sub = instruments.Subsample.from_seed(config.seed, num_params, fraction)
    index, scale = sub.indices, sub.scale
    assert sim.diagnostics_info["subsample_size"] == len(sub) < num_params
  path = centers[:, index]

  def cos(a, b):
    den = np.linalg.norm(a) * np.linalg.norm(b)
    return math.nan if den == 0 else float(a @ b / den)

  pulled = {k: path[0] for k in range(num_workers)}
  cross = square = 0.0
  previous_step = None
  for t, record in enumerate(records):
    got = record.instruments
    assert not record.rejected and record.clock == t + 1
    before, after = path[t], path[t + 1]
    step = after - before  # AGN adds the commit as sent: Δ = step.
    moved = before - pulled[record.meta.worker]
    if previous_step is not None:
      cross += step @ previous_step
      square += previous_step @ previous_step
    want = {
        "commit_norm": scale * np.linalg.norm(step),
        "distance_staleness": scale * np.linalg.norm(moved),
        "cosine_previous_commit": (math.nan if previous_step is None else
                                   cos(step, previous_step)),
        "cosine_center_movement": cos(step, moved),
        "center_step_norm": scale * np.linalg.norm(step),
        "implicit_momentum": cross / square if square else math.nan,
    }
    for name, value in want.items():
      np.testing.assert_allclose(got[name], value, rtol=2e-4, atol=1e-6,
                                 err_msg=f"commit {t}: {name}")
    # The first commits' workers held the initial center: no movement yet
    # for the first, then the earlier commits' steps.
    assert (got["distance_staleness"] > 0) == (t > 0)
    assert ("gradient_cosine" in got) == (t % every == 0)
    pulled[record.meta.worker] = after
    previous_step = step
  # μ̂ is a regression slope, not 0 or a cosine: a positive momentum here.
  assert 0 < records[-1].instruments["implicit_momentum"] < 1


def test_gradient_cosine_is_against_the_negative_gradient_at_the_center(
    digits):
  config, _, centers, records = _trajectory(digits, every=4)
  model, loss_fn = build.build_model(config, digits.num_classes,
                                     digits.input_shape)
  template = build.initial_center(config, model,
                                  int(np.prod(digits.input_shape)))
  layout = FlatLayout.from_tree(template)
  probe = (digits.x_train[:1000], digits.y_train[:1000])
  grad_fn = jax.grad(lambda p: loss_fn(p, probe)[0])
  measured = [t for t, r in enumerate(records)
              if "gradient_cosine" in r.instruments]
  assert measured == [0, 4, 8]
  for t in measured:
    before = layout.unravel(jnp.asarray(centers[t], jnp.float32))
    grad = layout.ravel_numpy(jax.tree.map(np.asarray, grad_fn(before)))
    step = centers[t + 1] - centers[t]
    want = -(step @ grad) / (np.linalg.norm(step) * np.linalg.norm(grad))
    np.testing.assert_allclose(records[t].instruments["gradient_cosine"],
                               want, rtol=1e-3, atol=1e-5)


_ON_AND_OFF = """
import json, sys
from agn_jax import TrainConfig
from agn_jax.runtime import train
on, off = (TrainConfig.from_dict(v) for v in json.loads(sys.argv[1]))
print(json.dumps([train(on), train(off)]))
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """The same run with and without the instruments, compiled as a user's run is (`default_emitters_env`)."""
  tmp_path = tmp_path_factory.mktemp("diagnostics")
  configs = [_config(tmp_path, "on", diagnostics=True, diagnostics_every=4),
             _config(tmp_path, "off")]
  result = subprocess.run(
      [sys.executable, "-c", _ON_AND_OFF,
       json.dumps([c.to_dict() for c in configs])],
      env=default_emitters_env(), capture_output=True, text=True,
      timeout=300, cwd=REPO)
  assert result.returncode == 0, result.stderr[-3000:]
  on, off = json.loads(result.stdout.strip().splitlines()[-1])
  return tmp_path, on, off


def test_every_quantity_reaches_the_rows_and_the_summary(runs):
  tmp_path, summary, _ = runs
  rows = metrics_rows(tmp_path / "on", {"commit"})
  assert len(rows) == summary["num_commits"] > 8
  for row in rows:
    for name in instruments.SCALARS:
      assert name in row, name
    assert ("gradient_cosine" in row) == ((row["clock"] - 1) % 4 == 0)
  # Round robin: each worker's first commit saw the earlier ones' steps,
  # every later one the n − 1 others'.
  assert rows[0]["distance_staleness"] == 0.0
  assert rows[0]["cosine_center_movement"] is None  # NaN, written null.
  assert rows[0]["cosine_previous_commit"] is None
  assert all(r["distance_staleness"] > 0 for r in rows[1:])
  # Staleness 1: the center moved by the one commit before, as AGN adds it.
  assert rows[1]["staleness"] == 1
  np.testing.assert_allclose(rows[1]["distance_staleness"],
                             rows[0]["center_step_norm"], rtol=1e-5)
  np.testing.assert_allclose(rows[1]["cosine_center_movement"],
                             rows[1]["cosine_previous_commit"], rtol=1e-4)
  assert summary["theory_momentum"] == pytest.approx(2 / 3)
  assert summary["implicit_momentum"] == rows[-1]["implicit_momentum"]
  assert summary["instrumented_commits"] == len(rows)
  for name in ("commit_norm", "distance_staleness", "cosine_previous_commit",
               "cosine_center_movement", "center_step_norm",
               "gradient_cosine"):
    values = np.array([r[name] for r in rows if r.get(name) is not None])
    assert summary[f"mean_{name}"] == pytest.approx(values.mean()), name
  assert summary["simulation"]["diagnostics"]["gradient_cosine_every"] == 4
  written = json.loads((tmp_path / "on" / "summary.json").read_text())
  assert written["implicit_momentum"] == summary["implicit_momentum"]


def test_off_writes_none_of_them_and_the_numbers_do_not_change(runs):
  tmp_path, on, off = runs
  rows_off = metrics_rows(tmp_path / "off")
  assert not [name for row in rows_off for name in NAMES if name in row]
  assert not {"implicit_momentum", "theory_momentum",
              "mean_distance_staleness"} & set(off)
  assert "diagnostics" not in off["simulation"]
  # Measuring changes nothing the run computes.
  assert _without(metrics_rows(tmp_path / "on"), WALL_FIELDS + NAMES) == (
      _without(rows_off, WALL_FIELDS))
  np.testing.assert_array_equal(np.load(tmp_path / "on" / "center.npy"),
                                np.load(tmp_path / "off" / "center.npy"))
  assert on["final_test_accuracy"] == off["final_test_accuracy"]


def test_one_worker_has_no_distance_staleness(tmp_path):
  train(_config(tmp_path, num_workers=1, epochs=0.1, diagnostics=True))
  rows = metrics_rows(tmp_path / "run", {"commit"})
  assert len(rows) > 3
  assert {r["distance_staleness"] for r in rows} == {0.0}
  assert {r["cosine_center_movement"] for r in rows} == {None}
  # One worker: each step follows its own previous one.
  assert all(r["cosine_previous_commit"] is not None for r in rows[1:])


def test_resume_with_diagnostics_restarts_the_estimate(tmp_path):
  first = train(_config(tmp_path, epochs=0.15, diagnostics=True))
  assert first["completed"]
  summary = train(_config(tmp_path, epochs=0.3, diagnostics=True,
                          resume=True))
  assert summary["completed"] and summary["resumed_from_commit"] > 0
  rows = metrics_rows(tmp_path / "run", {"commit"})
  assert summary["instrumented_commits"] == len(rows)
  resumed = [r for r in rows if r["clock"] == first["num_commits"] + 1]
  # μ̂ starts afresh: no previous step, no previous commit.
  assert resumed[0]["implicit_momentum"] is None
  assert resumed[0]["cosine_previous_commit"] is None
