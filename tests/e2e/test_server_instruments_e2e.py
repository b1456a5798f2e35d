"""`--diagnostics` on the server of the processes and Ray backends: each commit's instruments against numpy.

The real worker and server loops run a forced schedule as threads
(`exchange_replay`); its replay gives every commit's delta and the centers
around it, from which numpy computes each instrument in float64. A run on
real processes writing them, rows and summary, is
tests/e2e/test_runtime_e2e.py's (its four-worker run has them on).
"""

import jax
import numpy as np
import pytest

from agn_jax import build, instruments
from agn_jax.runtime import backend as backend_lib
from agn_jax.runtime import train
import exchange_replay as schedule
from helpers import metrics_rows, tiny_config

EVERY = 3


def _cos(a, b):
  na, nb = np.linalg.norm(a), np.linalg.norm(b)
  return None if na == 0 or nb == 0 else float(a @ b / (na * nb))


def _close(got, want, what):
  if want is None:
    assert got is None, what
  else:
    assert got == pytest.approx(want, rel=2e-4, abs=1e-6), what


@pytest.mark.parametrize("strategy", ["agn", "aeasgd"])
def test_each_commits_instruments_match_numpy(tmp_path, strategy):
  config = schedule.config(tmp_path, strategy, diagnostics=True,
                           diagnostics_every=EVERY)
  _, rows, summary = schedule.threads(config)
  steps = schedule.replay(config)
  assert [r["staleness"] for r in rows] == [s.staleness for s in steps]
  # The probe set's gradient, by jax.grad of the run's own loss.
  plan = backend_lib.plan(config)
  model, loss_fn = build.build_model(config, plan.dataset.num_classes,
                                     plan.dataset.input_shape)
  probe = (plan.dataset.x_train[:instruments.PROBE_EXAMPLES],
           plan.dataset.y_train[:instruments.PROBE_EXAMPLES])
  del model
  previous, cross, square, last_step = None, 0.0, 0.0, None
  for t, (row, step) in enumerate(zip(rows, steps)):
    delta = step.delta.astype(np.float64)
    before = step.before.astype(np.float64)
    after = step.after.astype(np.float64)
    moved = before - step.pulled.astype(np.float64)
    center_step = after - before
    _close(row["commit_norm"], np.linalg.norm(delta), f"norm {t}")
    _close(row["distance_staleness"], np.linalg.norm(moved), f"dist {t}")
    _close(row["cosine_previous_commit"],
           None if previous is None else _cos(delta, previous), f"prev {t}")
    _close(row["cosine_center_movement"], _cos(delta, moved), f"move {t}")
    _close(row["center_step_norm"], np.linalg.norm(center_step), f"step {t}")
    if last_step is not None:
      cross += center_step @ last_step
      square += last_step @ last_step
    _close(row["implicit_momentum"], cross / square if square else None,
           f"mu {t}")
    if t % EVERY == 0:  # Taken where the clock before the apply is k·EVERY.
      grad, _ = jax.grad(loss_fn, has_aux=True)(
          plan.layout.unravel(step.before), probe)
      g = -plan.layout.ravel_numpy(grad).astype(np.float64)
      _close(row["gradient_cosine"], _cos(delta, g), f"grad {t}")
    else:
      assert "gradient_cosine" not in row
    previous, last_step = delta, center_step
  assert summary["implicit_momentum"] == pytest.approx(rows[-1][
      "implicit_momentum"])
  assert summary["theory_momentum"] == pytest.approx(1 - 1 / 3)
  assert summary["instrumented_commits"] == len(rows)
  # Commit-then-pull workers commit against a center that moved since;
  # one that pulls just before its commit, against the one it got.
  distances = [r["distance_staleness"] for r in rows]
  assert (max(distances) > 0) == (strategy == "agn")


# soak: tests/e2e/test_cli.py's test_train_end_to_end covers a processes run
# without --diagnostics writing no instrument and no implicit momentum, in
# the suite.
@pytest.mark.soak
def test_without_diagnostics_a_processes_run_writes_none(tmp_path):
  config = tiny_config(tmp_path, num_workers=2, communication_window=4,
                       hidden_sizes=(16,), batch_size=16,
                       epochs=0.3).resolved()
  summary = train(config)
  rows = metrics_rows(config.workdir, ("commit",))
  assert rows and not any(set(instruments.SCALARS) & set(r) for r in rows)
  assert "implicit_momentum" not in summary
