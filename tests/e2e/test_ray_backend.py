"""The ray backend end to end, on a real local Ray instance: real actors, real signals.

Ctrl-C ends a CLI run (n = 2) with its own Ray instance, leaving nothing
running; --resume continues it on Ray to 0.90 on digits while one worker
actor raises and another's process is SIGKILLed, both restarted; commits
applied equal commits acknowledged; the built-in language-model task's
metrics reach the books; a SIGKILLed driver, its worker actors training a
workload named by import paths, leaves no process of its instance; a bad
--ray_address is one line. The transport conformance suite
(tests/unit/test_transport_conformance.py) runs on the Ray transport.

One Ray instance serves every in-process run and test of the module
(`train()` keeps a connection it finds): the Ray tests of the suite live in
this one file so that, with pytest-xdist handing out whole files, they share
it (an instance takes seconds of CPU to start). The CLI runs whose own
instance is what they test start and stop their own.
"""

import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest
import ray

from agn_jax import placement
from agn_jax import TrainConfig, checkpoint, data
from agn_jax.config import RayOptions
from agn_jax.errors import RunError
from agn_jax.runtime import train
from agn_jax.runtime.backends.ray import check_address
from agn_jax.runtime.events import WorkerDone
from agn_jax.wire import CommitMeta
from agn_jax.runtime.transports.ray import RayTransport
from helpers import assert_one_line_error, metrics_rows, run_cli
from helpers import train_with_two_failures
# The transport conformance suite, run here on the Ray transport (`kit`).
# pylint: disable-next=wildcard-import,unused-wildcard-import
from test_transport_conformance import *
from test_workloads import (DATASET, EXAMPLES, LR, MODEL, TASK, WINDOW,
                            WINDOWS, check_run, workload_config)
from test_workloads_e2e import check_language_model_run, language_model_config


REPO = pathlib.Path(__file__).resolve().parents[2]
RAY_DAEMONS = ("raylet", "gcs_server")


def _ray_daemons(root: psutil.Process):
  daemons = []
  for p in root.children(recursive=True):
    try:
      if any(d in " ".join(p.cmdline()) for d in RAY_DAEMONS):
        daemons.append(p)
    except psutil.Error:  # Gone, or a zombie not yet reaped.
      pass
  return daemons


def _wait_gone(pids, seconds=10.0):
  """The pids still alive (zombies count as gone) after waiting up to `seconds`."""
  deadline = time.monotonic() + seconds
  while True:
    alive = []
    for pid in pids:
      try:
        if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
          alive.append(pid)
      except psutil.NoSuchProcess:
        pass
    if not alive or time.monotonic() > deadline:
      return alive
    time.sleep(0.1)


def _actor_pids(workdir):
  pids = json.loads((pathlib.Path(workdir) / "pids.json").read_text())
  return [pids["server"], pids["evaluator"], *pids["workers"],
          *pids["restarted_workers"]]


@pytest.fixture(scope="module")
def ray_instance():
  """A local Ray instance for the module's in-process runs; stopped, and checked gone, at the end."""
  shm_before = set(os.listdir("/dev/shm"))
  old_term = signal.getsignal(signal.SIGTERM)
  ray.init(num_cpus=len(placement.available_cores()), include_dashboard=False,
           log_to_driver=False, configure_logging=False)
  signal.signal(signal.SIGTERM, old_term)  # Ray's own would exit pytest.
  try:
    yield ray.get_runtime_context().gcs_address
  finally:
    ray.shutdown()
  assert not _wait_gone([p.pid for p in _ray_daemons(psutil.Process())])
  # Ray's object store maps unlinked files; our runs create no segment.
  new = {n for n in set(os.listdir("/dev/shm")) - shm_before
         if not n.startswith(("agn_", "sem.mp-"))}  # Other suites' runs.
  assert not new, new


@pytest.fixture(params=["ray"])
def kit(request):
  """The Ray transport's kit for the conformance suite, on the module's instance."""
  yield from make_kit(request)


@pytest.fixture(scope="module")
def killed_run(ray_instance, interrupted, tmp_path_factory):
  """The interrupted run resumed on the module's instance to 25 epochs (112 commits in all), with two failures.

  The worker with the most of its share still to go raises two windows after
  its last checkpointed commit; the next one's actor process is SIGKILLed
  five commits after the checkpoint, with windows of its share still to go
  (the interrupted run made about 20 commits; on a loaded machine one worker
  may have made most of them, and finished its share).
  Digits needs the 25 epochs: with these failures, runs from scratch at
  n = 3 reached 0.89 to 0.91 in 20 epochs and 0.85 to 0.87 in 15 (0.92 to
  0.93 in 25; this resumed run at n = 2, 0.92); the restarts, not the
  epochs, take most of its time, and two workers start one actor fewer
  than three.

  Returns:
    (summary, workdir, pids SIGKILLed, (the worker that raised, the one
    SIGKILLed), the checkpoint it resumed from).
  """
  workdir = tmp_path_factory.mktemp("killed") / "run"
  shutil.copytree(interrupted[0], workdir)
  (workdir / "pids.json").unlink()  # The interrupted run's, all gone.
  ckpt = checkpoint.restore(str(workdir / "checkpoints"))
  saved = json.loads((workdir / "config.json").read_text())
  config = TrainConfig.from_dict(dict(
      saved, resume=True, epochs=25.0, max_worker_restarts=2,
      checkpoint_every_seconds=0.3, ray_address=ray_instance,
      workdir=str(workdir)))
  done = ckpt.meta["worker_commits"]
  raises, killed = sorted(range(len(done)), key=lambda w: done[w])[:2]
  summary, pids = train_with_two_failures(
      train, config, window=done[raises] + 2, clock=ckpt.step + 5,
      raises=raises, killed=killed)
  return summary, workdir, pids, (raises, killed), ckpt


def test_digits_reaches_090_with_failed_worker_actors_restarted(killed_run):
  summary, workdir, killed, (raises, sigkilled), _ = killed_run
  assert summary["backend"] == "ray"
  assert summary["completed"] is True
  assert summary["final_test_accuracy"] >= 0.90
  assert killed
  assert summary["worker_restarts"] == 2
  restarts = [e for e in metrics_rows(workdir) if e["event"] == "worker_restart"]
  causes = {e["worker"]: e["cause"] for e in restarts}
  assert sorted(causes) == sorted([raises, sigkilled])
  assert causes[raises].startswith("failed: RuntimeError: injected fault"), (
      causes)
  assert causes[sigkilled] == "actor died: killed by signal 9", causes
  pids = json.loads((workdir / "pids.json").read_text())
  assert len(pids["restarted_workers"]) == 2
  assert killed[0] in pids["restarted_workers"]
  assert killed[0] not in pids["workers"]


def test_commits_applied_equal_commits_acknowledged(killed_run):
  summary, workdir, _, _, _ = killed_run
  applied, rejected = summary["num_commits"], summary["rejected_commits"]
  assert applied + rejected == summary["commits_acknowledged"]
  assert applied + rejected == sum(summary["worker_commits"])
  assert applied + rejected == summary["expected_commits"]
  commits = [e for e in metrics_rows(workdir) if e["event"] == "commit"]
  assert [e["clock"] for e in commits] == list(range(1, applied + 1))
  # Each commit's λ = 10 step accuracies came along through the hub.
  for e in commits:
    assert len(e["step_accuracy"]) == 10, e
    assert np.mean(e["step_accuracy"]) == pytest.approx(e["accuracy"])
    assert e["window_start"] < e["window_end"] <= e["time"], e
  ckpt = checkpoint.restore(str(workdir / "checkpoints"))
  assert ckpt.step == applied


def test_a_run_leaves_no_actor_running(killed_run):
  _, workdir, _, _, _ = killed_run
  assert not _wait_gone(_actor_pids(workdir))


def test_the_language_model_task_on_ray(ray_instance, tmp_path):
  # The built-in task's metrics through the actors to the books, as on the
  # processes (tests/e2e/test_workloads_e2e.py); each actor loads the corpus.
  del ray_instance
  summary = train(language_model_config(tmp_path, "ray"))
  assert summary["backend"] == "ray"
  check_language_model_run(summary, tmp_path / "run")
  assert not _wait_gone(_actor_pids(tmp_path / "run"))


def test_a_loader_that_returns_other_data_on_each_call_ends_the_run(
    ray_instance, tmp_path):
  # Every actor loads the data by name: each checks what it loaded against
  # the driver's fingerprint, and the first that differs ends the run.
  del ray_instance
  config = TrainConfig(dataset="tests.unsound_plugins:non_deterministic",
                       hidden_sizes=(4,), num_workers=2,
                       communication_window=5, epochs=1.0, backend="ray",
                       eval_every_seconds=0.0, checkpoints=False,
                       workdir=str(tmp_path / "run"))
  with pytest.raises(RunError, match="failed: DataMismatch: dataset "
                     "'tests.unsound_plugins:non_deterministic': its loader "
                     "returned other data here than on the driver"):
    train(config)
  summary = json.loads((tmp_path / "run" / "summary.json").read_text())
  assert summary["outcome"] == "failed" and summary["num_commits"] == 0
  assert not _wait_gone(_actor_pids(tmp_path / "run"))


def _interrupt(workdir, signum, address=None):
  """Runs the CLI on its own local Ray instance (or on the cluster at `address`); sends `signum` once it committed.

  Returns:
    (exit code, stderr, pids of every process it had started).
  """
  process = subprocess.Popen(
      [sys.executable, "-m", "experiments.train", "--backend=ray",
       "--num_workers=2", "--communication_window=10", "--dataset=digits",
       "--hidden_sizes=32", "--batch_size=32", "--epochs=2000",
       "--learning_rate=3e-3", "--eval_every_seconds=0", "--noplots",
       "--checkpoint_every_seconds=0.5", f"--workdir={workdir}"] +
      ([f"--ray_address={address}"] if address else []),
      cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  try:
    deadline = time.monotonic() + 120
    metrics = workdir / "metrics.jsonl"
    while not (metrics.exists() and metrics.read_text().count('"commit"') >= 20
               and (workdir / "pids.json").exists()):
      assert process.poll() is None, process.communicate()[1][-3000:]
      assert time.monotonic() < deadline
      time.sleep(0.05)
    started = psutil.Process(process.pid).children(recursive=True)
    # Its own instance, or none when it joined a running cluster.
    assert bool(_ray_daemons(psutil.Process(process.pid))) == (not address)
    os.kill(process.pid, signum)
    _, stderr = process.communicate(timeout=60)
  finally:
    if process.poll() is None:
      process.kill()
      process.wait()
  return process.returncode, stderr, [p.pid for p in started]


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
  """A CLI run (n = 2) on its own local Ray instance, interrupted with SIGINT once it committed."""
  workdir = tmp_path_factory.mktemp("interrupted") / "run"
  return (workdir, *_interrupt(workdir, signal.SIGINT))


def test_sigint_ends_the_run_and_its_ray_instance(interrupted):
  workdir, code, stderr, started = interrupted
  assert code == 130, stderr[stderr.find("Traceback"):][-8000:]
  # No event was lost to the interrupt.
  commits = [e["clock"] for e in metrics_rows(workdir) if e["event"] == "commit"]
  assert commits == list(range(1, len(commits) + 1))
  assert "Traceback" not in stderr
  assert stderr.strip().splitlines()[-1].startswith("train: error: interrupted")
  summary = json.loads((workdir / "summary.json").read_text())
  assert summary["interrupted"] is True and summary["backend"] == "ray"
  final = [e for e in metrics_rows(workdir) if e["event"] == "checkpoint"][-1]
  assert final["final"] is True and final["clock"] == summary["num_commits"]
  # Every process it started, Ray's daemons and actors included, is gone.
  assert not _wait_gone(started + _actor_pids(workdir))


def test_resume_continues_the_interrupted_run_on_ray(interrupted, killed_run):
  summary, workdir, _, _, ckpt = killed_run
  # From the final checkpoint the interrupt wrote.
  interrupted_summary = json.loads(
      (interrupted[0] / "summary.json").read_text())
  assert ckpt.step == interrupted_summary["num_commits"] > 0
  assert summary["resumed_from_commit"] == ckpt.step
  assert summary["completed"] is True
  assert summary["num_commits"] + summary["rejected_commits"] == summary[
      "expected_commits"]
  commits = [e for e in metrics_rows(workdir) if e["event"] == "commit"]
  assert [e["clock"] for e in commits] == list(
      range(1, summary["num_commits"] + 1))
  # The interrupted run's commits come first, as it wrote them.
  before = [e for e in metrics_rows(interrupted[0]) if e["event"] == "commit"]
  assert commits[:ckpt.step] == before[:ckpt.step]


# soak: test_resume_continues_the_interrupted_run_on_ray covers a run
# resumed on Ray from its checkpoint, clock and books continuing, in the
# suite (the checkpoint format is one for every backend).
@pytest.mark.soak
def test_a_processes_run_continues_on_ray(ray_instance, tmp_path):
  # The same checkpoint format: a run begun on one host's processes goes on
  # as Ray actors (e.g. on a cluster), its clock and books continuing.
  workdir = tmp_path / "run"
  num_train = len(data.load("digits", seed=0).x_train)
  epochs = lambda windows: windows * 10 * 32 * 2 / num_train + 1e-3
  first = train(TrainConfig(
      num_workers=2, communication_window=10, dataset="digits",
      hidden_sizes=(32,), batch_size=32, learning_rate=3e-3,
      epochs=epochs(20), eval_every_seconds=0, workdir=str(workdir)))
  assert first["backend"] == "processes" and first["num_commits"] == 40
  saved = json.loads((workdir / "config.json").read_text())
  summary = train(TrainConfig.from_dict(dict(
      saved, resume=True, epochs=epochs(50), backend="ray",
      ray_address=ray_instance, workdir=str(workdir))))
  assert summary["backend"] == "ray" and summary["completed"] is True
  assert summary["resumed_from_commit"] == 40
  assert summary["num_commits"] == summary["expected_commits"] == 100
  commits = [e["clock"] for e in metrics_rows(workdir) if e["event"] == "commit"]
  assert commits == list(range(1, 101))
  assert summary["final_test_accuracy"] >= 0.8
  assert not _wait_gone(_actor_pids(workdir))


# soak: test_sigint_ends_the_run_and_its_ray_instance covers a signal ending
# a CLI run on Ray, summary written and every process of the run gone, and
# tests/e2e/test_cli.py's test_sigterm_exits_143 SIGTERM's one line and status,
# in the suite.
@pytest.mark.soak
def test_sigterm_on_a_running_cluster_ends_the_run_and_leaves_the_cluster(
    ray_instance, tmp_path):
  workdir = tmp_path / "run"
  daemons = _ray_daemons(psutil.Process())
  code, stderr, started = _interrupt(workdir, signal.SIGTERM, ray_instance)
  assert code == 143, stderr[stderr.find("Traceback"):][-8000:]
  assert stderr.strip().splitlines()[-1].startswith("train: error: terminated")
  assert json.loads((workdir / "summary.json").read_text())["interrupted"]
  # The run's own actors are gone; the cluster it joined is not.
  assert not _wait_gone(started + _actor_pids(workdir))
  assert daemons and all(p.is_running() for p in daemons)
  assert ray.cluster_resources().get("CPU", 0) >= 1


# soak: test_a_sigkilled_driver_leaves_no_process_of_its_ray_instance covers
# Ray worker actors loading a workload's task, model and dataset by their
# import paths and committing, and tests/e2e/test_workloads_e2e.py's
# test_processes_from_the_command_line the numpy replay of this workload's
# run through the worker and server loops Ray's actors run too, in the
# suite; the conformance suite's [ray] cases cover the Ray transport carrying
# commits whole and in order.
@pytest.mark.soak
def test_a_workload_named_by_import_paths_runs_as_numpy_replays_it(
    ray_instance, tmp_path):
  # tests/regression_workload.py's task, model and dataset: each actor loads
  # the dataset itself, by its import path. The processes run of the same
  # workload, and the names, are tests/e2e/test_workloads_e2e.py's.
  config = workload_config(tmp_path / "run", "ray", 2,
                           options=RayOptions(ray_address=ray_instance))
  summary = train(config)
  assert summary["num_commits"] == summary["expected_commits"] == 2 * WINDOWS
  check_run(config, tmp_path / "run")


def _start_cli(workdir, *extra):
  return subprocess.Popen(
      [sys.executable, "-m", "experiments.train", "--backend=ray",
       "--num_workers=2", "--communication_window=10", "--dataset=digits",
       "--hidden_sizes=32", "--batch_size=32", "--epochs=2000",
       "--eval_every_seconds=0", "--noplots", f"--workdir={workdir}", *extra],
      cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(process, ready, seconds=120.0):
  deadline = time.monotonic() + seconds
  while not ready():
    assert process.poll() is None, process.communicate()[1][-3000:]
    assert time.monotonic() < deadline
    time.sleep(0.05)


def _session_processes(session_dir):
  """Live processes whose command line names the Ray session directory (its daemons)."""
  found = []
  for p in psutil.process_iter(["cmdline", "status"]):
    if (p.info["status"] != psutil.STATUS_ZOMBIE and session_dir and
        session_dir in " ".join(p.info["cmdline"] or ())):
      found.append(p.pid)
  return found


def _committed_from_each_worker(workdir, num_workers):
  metrics = workdir / "metrics.jsonl"
  if not (metrics.exists() and (workdir / "pids.json").exists()):
    return False
  rows = [json.loads(line) for line in metrics.read_text().splitlines()
          if line.endswith("}")]  # A last line half written is not read.
  return {r["worker"] for r in rows if r["event"] == "commit"} == set(
      range(num_workers))


def test_a_sigkilled_driver_leaves_no_process_of_its_ray_instance(tmp_path):
  workdir = tmp_path / "run"
  # tests/regression_workload.py's task, model and dataset, named by import
  # path: each worker actor loads them itself, and has once it committed.
  process = subprocess.Popen(
      [sys.executable, "-m", "experiments.train", "--backend=ray",
       f"--task={TASK}", f"--model={MODEL}", f"--dataset={DATASET}",
       f"--dataset_size={EXAMPLES}", "--strategy=downpour",
       "--worker_optimizer=sgd", f"--learning_rate={LR}", "--num_workers=1",
       f"--communication_window={WINDOW}", f"--batch_size={EXAMPLES // 2}",
       "--epochs=100000", "--eval_every_seconds=0", "--nocheckpoints",
       "--noplots", f"--workdir={workdir}"],
      cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  try:
    pids_json = workdir / "pids.json"
    # One worker: its actor, the server's and the evaluator's are the
    # instance's actors the keeper must end; a second adds nothing to that.
    _wait_for(process, lambda: _committed_from_each_worker(workdir, 1))
    session = json.loads(pids_json.read_text())["ray_session_dir"]
    assert session and _session_processes(session)
    tree = [p.pid for p in psutil.Process(process.pid).children(recursive=True)]
    assert len(_ray_daemons(psutil.Process(process.pid))) == 2
    process.kill()
    process.communicate()
    # Its keeper ends the instance: daemons, agents and actors, in 10 s.
    assert not _wait_gone(tree + _session_processes(session), 10.0)
    assert not _session_processes(session)
  finally:
    if process.poll() is None:
      process.kill()
      process.communicate()


def _keeper_started(process):
  return any("ray_head.py" in " ".join(p.cmdline())
             for p in psutil.Process(process.pid).children())


# soak: test_sigint_ends_the_run_and_its_ray_instance covers Ctrl-C on a CLI
# run with its own Ray instance, and tests/e2e/test_cli.py's
# test_an_interrupt_while_the_modules_load_is_one_line an interrupt before
# the run started, in the suite.
@pytest.mark.soak
def test_ctrl_c_while_the_ray_head_starts_is_one_true_line(tmp_path):
  # One moment of start-up; scripts/attacks.py sends SIGINT and SIGTERM at
  # many more, up to the first commit.
  workdir = tmp_path / "run"
  process = _start_cli(workdir)
  try:
    _wait_for(process, lambda: _keeper_started(process))
    time.sleep(1.0)
    tree = [p.pid for p in psutil.Process(process.pid).children(recursive=True)]
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
  finally:
    if process.poll() is None:
      process.kill()
      process.communicate()
  assert process.returncode == 130, stderr[-3000:]
  assert "Traceback" not in stderr
  line = stderr.strip().splitlines()[-1]
  if (workdir / "summary.json").exists():
    assert line == f"train: error: interrupted; partial results in {workdir}"
    assert json.loads((workdir / "summary.json").read_text())[
        "outcome"] == "interrupted"
  else:
    assert line == ("train: error: interrupted before the run started; "
                    "nothing was written")
    assert not workdir.exists()
  assert not _wait_gone(tree, 10.0)


def test_bad_ray_address_is_one_line(tmp_path):
  workdir = tmp_path / "run"
  result = run_cli("--backend=ray", "--ray_address=127.0.0.1:1",
                   "--epochs=1", f"--workdir={workdir}", timeout=60)
  line = assert_one_line_error(result)
  assert "ray_address 127.0.0.1:1: no Ray cluster reachable there" in line
  assert not workdir.exists()


@pytest.mark.parametrize("address", ["nowhere", "host:port", "ray://h:10001",
                                     ":6379", "h:70000"])
def test_malformed_addresses_are_refused(address):
  with pytest.raises(ValueError, match="ray_address"):
    check_address(address)


def test_a_queued_commit_of_a_dead_worker_is_applied_whole_or_dropped(
    ray_instance):
  del ray_instance

  class _Committer:  # Local: Ray ships it by value (tests/ is no package).
    """A worker stand-in: commits one payload, then waits to be killed."""

    def commit(self, transport, size):
      payload = (np.ones(size, np.float32),)
      return transport.commit(payload, CommitMeta(0, 0, 0.0, {}, 0.0), 10.0)

  size = 100_000  # 400 kB: through the object store, owned by the committer.
  transport = RayTransport.create(size, 1, num_workers=1, capacity=2)
  committer = ray.remote(_Committer).options(num_cpus=0).remote()
  try:
    assert ray.get(committer.commit.remote(transport, size))
    assert transport.in_flight(0)
    ray.kill(committer, no_restart=True)  # Its payload dies with it.
    while True:  # Until Ray knows the owner is dead (no payload comes back).
      try:
        ray.get(committer.__ray_ready__.remote())
      except ray.exceptions.RayActorError:
        break
    # Whether Ray still holds the payload depends on when it learns of the
    # death; either way the books agree with what the server did.
    commit = transport.next_commit(timeout=0.5)
    if commit is not None:
      np.testing.assert_array_equal(commit.payload[0], 1.0)
      transport.release(commit)
    assert not transport.in_flight(0)
    assert transport.acknowledged(0) == (commit is not None)
  finally:
    transport.close()


# soak: the conformance suite's [ray] cases above cover the Ray transport's
# whole center (test_a_pull_waits_for_the_first_publish_and_is_a_whole_center),
# its commits first in first out with their meta and step metrics
# (test_commits_come_out_first_in_first_out_with_their_meta), a full queue
# refusing a commit (test_a_full_queue_refuses_a_commit_until_one_is_handled),
# a worker's done after its commits
# (test_a_workers_done_comes_after_its_commits_and_once) and the books
# (test_the_supervisor_sees_what_is_in_flight_and_sets_progress), in the
# suite, with arrays through the object store.
@pytest.mark.soak
def test_commits_come_out_in_arrival_order_with_backpressure(ray_instance):
  del ray_instance
  size = 50_000  # 200 kB: through the object store.
  transport = RayTransport.create(size, 1, num_workers=2, capacity=2)

  def meta(worker, clock):
    return CommitMeta(worker, clock, 0.5, {"accuracy": 0.25}, 2.0, 1.0,
                      {"accuracy": np.array([0.125, 0.375], np.float32)})

  try:
    center = np.arange(size, dtype=np.float32)
    transport.publish(center, clock=7)
    out = np.empty(size, np.float32)
    assert transport.pull(out, timeout=10) == 7
    np.testing.assert_array_equal(out, center)
    assert transport.commit((np.full(size, 1.0, np.float32),), meta(1, 7), 10)
    assert transport.commit((np.full(size, 2.0, np.float32),), meta(0, 7), 10)
    # The queue is full: no room within the timeout.
    assert not transport.commit((np.full(size, 3.0, np.float32),), meta(1, 7),
                                0.05)
    transport.finish(WorkerDone(0, 1, 320, {}))
    taken = []
    for _ in range(2):
      commit = transport.next_commit(timeout=10)
      taken.append((commit.meta.worker, float(commit.payload[0][0])))
      assert commit.meta[2:6] == (0.5, {"accuracy": 0.25}, 2.0, 1.0)
      assert commit.meta.step_metrics["accuracy"].tolist() == [0.125, 0.375]
      transport.release(commit)
    assert taken == [(1, 1.0), (0, 2.0)]
    # Worker 0's done comes after its commit; worker 1 commits again.
    assert transport.next_commit(timeout=10) == WorkerDone(0, 1, 320, {})
    assert transport.commit((np.full(size, 3.0, np.float32),), meta(1, 8), 10)
    assert float(transport.next_commit(timeout=10).payload[0][0]) == 3.0
    assert transport.wait_acknowledged(0, 1, timeout=10)
    assert transport.acknowledged(1) == 1 and transport.in_flight(1)
    assert transport.is_done(0) and not transport.is_done(1)
  finally:
    transport.close()
