"""The end-to-end half of tests/unit/test_runtime.py: real processes, subprocesses or whole runs."""

import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import jax
import numpy as np
import optax
import pytest

from agn_jax import build, checkpoint, data, instruments
from agn_jax.config import ProcessesOptions
from agn_jax.runtime import Fault, Faults, RunError, train
from agn_jax.shares import BatchSampler
from helpers import assert_nothing_left, metrics_rows, train_in_process
from test_runtime import _config


# Every test here starts real processes, but the last: the same loops as threads.


REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def agn_run(tmp_path_factory):
  """AGN on four worker processes to 30 epochs, the server's instruments on.

  `--diagnostics` (every commit; the probe gradient every 5th) so that one
  run of processes shows the instruments written as well: the server
  measures them, and nothing the other tests read depends on it.
  """
  tmp_path = tmp_path_factory.mktemp("agn4")
  events = []
  summary = train(_config(tmp_path, diagnostics=True, diagnostics_every=5),
                  progress=events.append)
  return summary, pathlib.Path(tmp_path / "run"), events


def test_agn_four_workers_learns_digits(agn_run):
  summary, _, _ = agn_run
  assert summary["final_test_accuracy"] >= 0.90


def test_server_applied_every_commit_the_workers_made(agn_run):
  summary, _, _ = agn_run
  assert summary["rejected_commits"] == 0
  assert summary["num_commits"] == sum(summary["worker_commits"])
  assert summary["final_clock"] == summary["num_commits"]


def test_the_server_writes_the_instruments_of_every_commit(agn_run):
  summary, workdir, _ = agn_run
  rows = metrics_rows(workdir, ("commit",))
  assert all(set(instruments.SCALARS) <= set(r) for r in rows)
  with_gradient = [r["clock"] for r in rows if "gradient_cosine" in r]
  assert with_gradient == [c for c in range(1, len(rows) + 1)
                           if (c - 1) % 5 == 0]
  assert np.isfinite(summary["implicit_momentum"])
  assert summary["instrumented_commits"] == len(rows)


def test_staleness_of_homogeneous_workers_is_about_n_minus_one(agn_run):
  summary, _, _ = agn_run
  n = summary["num_workers"]
  assert (n - 1) / 2 <= summary["mean_staleness"] <= 2 * (n - 1)


def test_workdir_files_and_progress_events(agn_run):
  summary, workdir, events = agn_run
  lines = [json.loads(l) for l in (workdir / "metrics.jsonl").read_text()
           .splitlines()]
  commits = [e for e in lines if e["event"] == "commit"]
  evals = [e for e in lines if e["event"] == "eval"]
  assert len(commits) == summary["num_commits"]
  for key in ("time", "worker", "clock", "staleness", "loss", "accuracy"):
    assert key in commits[0]
  # Each of the λ = 10 steps' accuracy (multiples of 1/32 at batch 32), and
  # the window's bounds: a worker's windows follow one another, each done
  # before the server applied its commit.
  for worker in range(4):
    mine = [c for c in commits if c["worker"] == worker]
    for c in mine:
      assert len(c["step_accuracy"]) == 10
      assert all(32 * a == int(32 * a) for a in c["step_accuracy"]), c
      assert np.mean(c["step_accuracy"]) == pytest.approx(c["accuracy"])
      assert c["window_start"] < c["window_end"] <= c["time"], c
    for before, after in zip(mine, mine[1:]):
      assert before["window_end"] <= after["window_start"]
  assert [c["clock"] for c in commits] == list(range(1, len(commits) + 1))
  assert evals and evals[-1]["final"]
  assert evals[-1]["accuracy"] == summary["final_test_accuracy"]
  assert [e["event"] for e in events] == [
      e["event"] for e in lines if e["event"] in ("commit", "eval")]
  on_disk = json.loads((workdir / "summary.json").read_text())
  for key in ("strategy", "num_workers", "communication_window",
              "final_test_accuracy", "final_test_loss", "wall_seconds",
              "num_commits", "mean_staleness", "samples_per_second",
              "rejected_commits"):
    assert on_disk[key] == summary[key], key
  assert on_disk["worker_restarts"] == 0
  assert on_disk["interrupted"] is False
  assert on_disk["resumed_from_commit"] is None
  config = json.loads((workdir / "config.json").read_text())
  assert config["num_workers"] == 4
  pids = json.loads((workdir / "pids.json").read_text())
  assert len(pids["workers"]) == 4 and pids["server"] not in pids["workers"]


def test_normal_run_leaves_nothing_behind(agn_run):
  assert_nothing_left(agn_run[1])


def test_one_worker_agn_equals_lookahead(tmp_path):
  """1 worker, commit-then-pull, add rule: lookahead(adam, λ, 1/λ), exactly."""
  lam, batch, windows = 5, 32, 4
  ds = data.load("digits", seed=0)
  epochs = (windows * lam * batch + 1) / len(ds.x_train)
  config = _config(tmp_path, num_workers=1, communication_window=lam,
                   hidden_sizes=(16,), epochs=epochs, learning_rate=1e-2)
  summary = train(config)
  assert summary["num_commits"] == windows
  center = np.load(tmp_path / "run" / "center.npy", allow_pickle=False)

  model, loss_fn = build.build_model(config, ds.num_classes, ds.input_shape)
  params = build.initial_center(config, model, ds.x_train.shape[1])
  tx = optax.lookahead(optax.adam(config.learning_rate), sync_period=lam,
                       slow_step_size=1 / lam)
  lookahead = optax.LookaheadParams.init_synced(params)
  state = tx.init(lookahead)
  grad_fn = jax.jit(jax.grad(lambda p, b: loss_fn(p, b)[0]))
  sampler = BatchSampler(len(ds.x_train), np.random.default_rng([0, 0]))
  for _ in range(windows):
    idx = sampler.take(lam * batch).reshape(lam, batch)
    for step in idx:
      grads = grad_fn(lookahead.fast, (ds.x_train[step], ds.y_train[step]))
      updates, state = tx.update(grads, state, lookahead)
      lookahead = optax.apply_updates(lookahead, updates)
  expected = np.concatenate(
      [np.ravel(l) for l in jax.tree.leaves(lookahead.slow)])
  np.testing.assert_allclose(center, expected, rtol=1e-5, atol=1e-6)
  assert np.abs(center - np.concatenate(
      [np.ravel(l) for l in jax.tree.leaves(params)])).max() > 1e-3


# soak: tests/e2e/test_outcomes.py's test_a_worker_recovers_after_a_non_finite_window
# covers a rejected non-finite commit, the books that count it and the
# worker that goes on committing, on the same processes, in the suite.
@pytest.mark.soak
def test_non_finite_commit_is_rejected_and_training_goes_on(tmp_path):
  summary = train(_config(tmp_path, num_workers=2, hidden_sizes=(16,),
                          epochs=3.0),
                  faults=Faults(fault=Fault("nan", worker=1, window=1)))
  assert summary["rejected_commits"] == 1
  assert summary["num_commits"] == sum(summary["worker_commits"]) - 1
  assert summary["commits_acknowledged"] == sum(summary["worker_commits"])
  assert np.isfinite(summary["final_test_loss"])
  center = np.load(tmp_path / "run" / "center.npy", allow_pickle=False)
  assert np.isfinite(center).all()
  # The worker pulled again and went on committing after the rejection.
  lines = [json.loads(l) for l in
           (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
  rejected = next(i for i, e in enumerate(lines) if e["event"] == "rejected")
  assert lines[rejected]["worker"] == 1
  assert any(e["event"] == "commit" and e["worker"] == 1
             for e in lines[rejected + 1:])
  assert_nothing_left(tmp_path / "run")


# soak: tests/e2e/test_reliability.py's test_failures_past_the_restart_budget_end_the_run
# covers a worker's exception ending the run in one RunError line with
# nothing left behind, and tests/e2e/test_outcomes.py's
# test_a_run_that_never_began_training_says_so its end with
# --max_worker_restarts=0, in the suite.
@pytest.mark.soak
def test_exception_in_a_worker_without_restarts_ends_the_run_cleanly(
    tmp_path):
  with pytest.raises(RunError, match=r"^worker 1 failed: RuntimeError: "
                     r"injected fault .*no restarts left "
                     r"\(--max_worker_restarts=0\)$"):
    train(_config(tmp_path, num_workers=2, hidden_sizes=(16,), epochs=50.0,
                  max_worker_restarts=0),
          faults=Faults(fault=Fault("raise", worker=1, window=3)))
  assert_nothing_left(tmp_path / "run")


_INTERRUPTIBLE = textwrap.dedent("""
    import sys
    from agn_jax import TrainConfig
    from agn_jax.runtime import train

    if __name__ == "__main__":
      try:
        train(TrainConfig(num_workers=2, epochs=10000.0, hidden_sizes=(16,),
                          eval_every_seconds=0.5, workdir=sys.argv[1]))
      except KeyboardInterrupt as e:
        print(f"interrupted by {type(e).__name__}", file=sys.stderr)
        sys.exit(1)
""")


# soak: tests/e2e/test_cli.py's test_sigterm_exits_143 covers SIGTERM to a
# launcher (the CLI, whose "terminated" line comes from the same Terminated)
# ending every process, and tests/e2e/test_reliability.py's
# test_sigint_ends_the_cli_within_10_s_with_a_final_checkpoint SIGINT
# during training, in the suite.
@pytest.mark.soak
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_to_the_launcher_ends_every_process(tmp_path, signum):
  script = tmp_path / "interruptible.py"
  script.write_text(_INTERRUPTIBLE)
  workdir = tmp_path / "run"
  env = dict(os.environ, PYTHONPATH=str(REPO))
  launcher = subprocess.Popen([sys.executable, str(script), str(workdir)],
                              env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
  metrics = workdir / "metrics.jsonl"
  deadline = time.monotonic() + 120
  while not (metrics.exists() and '"commit"' in metrics.read_text()):
    assert launcher.poll() is None, launcher.communicate()[1]
    assert time.monotonic() < deadline
    time.sleep(0.2)
  os.kill(launcher.pid, signum)
  _, stderr = launcher.communicate(timeout=60)
  assert launcher.returncode != 0
  # Both signals come out as a KeyboardInterrupt; SIGTERM as its subclass.
  expected = "Terminated" if signum == signal.SIGTERM else "KeyboardInterrupt"
  assert f"interrupted by {expected}" in stderr, stderr
  summary = json.loads((workdir / "summary.json").read_text())
  assert summary["interrupted"] is True
  assert_nothing_left(workdir)


def test_the_real_loops_on_threads_apply_every_commit(tmp_path):
  """The server, 2 workers and the evaluator as threads under the real supervisor: no process, seconds."""
  lam, batch, windows = 5, 32, 6
  ds = data.load("digits", seed=0)
  epochs = (windows * lam * batch * 2 + 1) / len(ds.x_train)
  config = _config(tmp_path, num_workers=2, communication_window=lam,
                   hidden_sizes=(16,), epochs=epochs,
                   options=ProcessesOptions(cache_dir="")).resolved()
  summary, center, run = train_in_process(config)
  assert not [t for t in run.threads.values() if t.is_alive()]
  assert summary["num_commits"] == summary["expected_commits"] == 2 * windows
  assert summary["worker_commits"] == [windows, windows]
  assert summary["rejected_commits"] == 0 and summary["completed"]
  commits = [json.loads(l) for l in (tmp_path / "run" / "metrics.jsonl")
             .read_text().splitlines() if '"commit"' in l]
  assert [c["clock"] for c in commits] == list(range(1, 2 * windows + 1))
  model, _ = build.build_model(config, ds.num_classes, ds.input_shape)
  initial = np.concatenate([np.ravel(l) for l in jax.tree.leaves(
      build.initial_center(config, model, ds.x_train.shape[1]))])
  assert np.abs(center - initial).max() > 1e-3  # The center moved.
  # The final checkpoint (asked for through the supervisor) holds it.
  saved = checkpoint.restore(str(tmp_path / "run" / "checkpoints"))
  assert saved.step == 2 * windows
  np.testing.assert_array_equal(saved.center, center)
