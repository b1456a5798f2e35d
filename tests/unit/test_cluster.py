"""The simulator's clock, speed models and schedule (agn_jax.sim), pure numpy: no JAX, no numerics.

The paper preset against the thesis' published run times; schedules worked
out by hand (a FIFO server, round robin, pull-before-commit workers,
stragglers); the speed models' draws, their parsing and replaying a trace;
determinism and restoring a schedule.
"""

import json
import math

import numpy as np
import pytest

from agn_jax.sim import clock
from agn_jax.sim import schedule
from agn_jax.sim import speeds

PAPER_MLP = clock.Workload(num_params=4_798_010, flops_per_step=3.4837e9,
                             optimizer_floats=4.0)  # AGN with Adam.
SAMPLES = 2_400_000  # The thesis' 40 epochs of 60,000 examples.


def _model(n, lam=2, speed_model="constant", step=1.0, commit=0.0, pull=0.0,
           apply=0.0, seed=0, pull_before_commit=False):
  return clock.TimeModel(step, commit, pull, apply, num_workers=n,
                           communication_window=lam, speed_model=speed_model,
                           seed=seed, pull_before_commit=pull_before_commit,
                           unit="seconds")


def _paper(n, lam, **overrides):
  """`--cluster=paper` (the first fit, to four times), whose numbers these tests work by hand."""
  return clock.time_model(clock.PAPER, PAPER_MLP, num_workers=n,
                            communication_window=lam, **overrides)


def _thesis_seconds(n, lam, **overrides):
  """A run on the paper cluster as this package runs it: whole windows only.

  The last commit's apply, computed here from the schedule: each worker
  runs `(SAMPLES / (128 n)) // λ` windows of λ steps (440 of its 468.75
  steps at n = λ = 40), the steps the simulator runs.
  """
  model = _paper(n, lam, **overrides)
  windows = int(SAMPLES / (128 * n) // lam)
  return max(c.applied for c in schedule.EventSchedule(model, windows).drain())


@pytest.mark.parametrize("n,lam,published", [
    (10, 10, 1066.08), (10, 40, 845.0), (20, 20, 432.93), (40, 40, 257.62)])
def test_paper_preset_reproduces_the_thesis_times(n, lam, published):
  # The preset was fitted to these four times on the steps actually run
  # (see clock.PAPER): each within the report's ±10 %.
  assert _thesis_seconds(n, lam) == pytest.approx(published, rel=0.10)


def test_paper_at_1_gbps_a_window_of_10_is_slower_than_40():
  # The same data (1,840 local steps per worker) at n = 10: four times the
  # commits at λ = 10 cost more than the window saves, as the thesis
  # measured (1,066 s against 845 s).
  def seconds(lam):
    model = _paper(10, lam, bandwidth_gbps=1.0)
    return max(c.applied for c in schedule.EventSchedule(
        model, 1840 // lam).drain())

  assert seconds(10) > 1.05 * seconds(40)
  # Free messages and server: the same data takes the same time.
  free = dict(bandwidth_gbps=1e9, latency_ms=0.0, server_apply_ms=0.0)
  assert max(c.applied for c in schedule.EventSchedule(
      _paper(10, 10, **free), 184).drain()) == pytest.approx(max(
          c.applied for c in schedule.EventSchedule(
              _paper(10, 40, **free), 46).drain()))


def test_paper_costs_follow_the_workload():
  model = _paper(40, 40)
  center = 4 * 4_798_010
  assert model.commit_seconds == pytest.approx(1e-3 + center * 8 / 0.305e9)
  assert model.pull_seconds == model.commit_seconds
  assert model.server_apply_seconds == pytest.approx(center / 38.8e6)
  # 3.4837 GFLOP at 9.25 GFLOP/s, 44 bytes a parameter at 5 GB/s.
  assert model.step_seconds == pytest.approx(
      3.4837e9 / 9.25e9 + 44 * 4_798_010 / 5e9)
  # A second payload vector (adag) doubles the commit's bytes and apply.
  adag = clock.time_model(clock.PAPER, PAPER_MLP._replace(
      payload_vectors=2), num_workers=40, communication_window=40)
  assert adag.server_apply_seconds == pytest.approx(
      2 * model.server_apply_seconds)
  assert adag.commit_seconds == pytest.approx(1e-3 + 2 * center * 8 / 0.305e9)
  # SGD's update touches less memory than Adam's.
  sgd = clock.time_model(clock.PAPER, PAPER_MLP._replace(
      optimizer_floats=2.0), num_workers=40, communication_window=40)
  assert sgd.step_seconds < model.step_seconds
  assert _paper(4, 4, server_apply_ms=7.0).server_apply_seconds == 0.007


def test_overrides_need_a_clock_of_seconds():
  with pytest.raises(ValueError, match=r"--latency_ms needs "
                     r"--cluster=this_host or paper \(--cluster=none counts "
                     "local steps"):
    clock.time_model(clock.NONE, PAPER_MLP, num_workers=2,
                       communication_window=2, latency_ms=1.0)
  with pytest.raises(ValueError, match="this_host is measured"):
    clock.preset("this_host")
  with pytest.raises(ValueError, match="cluster must be one of"):
    clock.preset("tpu_pod")


def test_round_robin_with_messages_and_a_busy_server():
  # Constant speeds: the first round's commits queue at the server, and the
  # same order repeats: staleness 0, 1, .., n − 1, then n − 1 for ever, even
  # when the server is the bottleneck (n applies outlast a window).
  for apply in (0.01, 0.5):
    n = 5
    commits = list(schedule.EventSchedule(
        _model(n, step=0.1, commit=0.02, pull=0.03, apply=apply), 6).drain())
    assert [c.worker for c in commits] == list(range(n)) * 6
    staleness = schedule.staleness_of(commits, n)
    assert staleness == list(range(n)) + [n - 1] * 5 * n
    # Everyone's first window ends at 0.2 and arrives at 0.22.
    assert [c.applied for c in commits[:n]] == pytest.approx(
        [0.22 + apply * (k + 1) for k in range(n)])
    # FIFO: no apply starts before the previous one ended.
    applied = [c.applied for c in commits]
    starts = [max(c.arrival, prev) for c, prev in
              zip(commits, [0.0] + applied[:-1])]
    assert np.allclose(np.array(applied) - starts, apply)


def test_a_pull_before_commit_worker_does_not_wait_for_the_server():
  # One worker, an apply of 10 s: it sends its commit (a pull of 0.5 s and
  # a commit of 0.25 s after its window of 2 s) and goes on at once.
  model = _model(1, step=1.0, commit=0.25, pull=0.5, apply=10.0,
                 pull_before_commit=True)
  first, second = schedule.EventSchedule(model, 2).drain()
  assert (first.window_end, first.arrival, first.applied) == (2.0, 2.75, 12.75)
  assert second.window_start == 2.75
  assert (second.arrival, second.applied) == (5.5, 22.75)
  # On a server that answers pulls itself, it waits for its turn there:
  # its second window starts at the first apply's end, 12.75 s, and
  # arrives 2 + 0.75 s later.
  waits = clock.TimeModel(1.0, 0.25, 0.5, 10.0, num_workers=1,
                          communication_window=2, pull_before_commit=True,
                          pull_waits_for_server=True)
  first, second = schedule.EventSchedule(waits, 2).drain()
  assert (first.applied, second.window_start, second.arrival,
          second.applied) == (12.75, 12.75, 15.5, 25.5)
  assert waits.describe()["pull_waits_for_server"] is True
  assert "pull_waits_for_server" not in model.describe()
  # A commit-then-pull worker waits for the apply and its center.
  first, second = schedule.EventSchedule(_model(
      1, step=1.0, commit=0.25, pull=0.5, apply=10.0), 2).drain()
  assert (first.arrival, first.applied, second.window_start) == (
      2.25, 12.25, 12.75)


def test_lognormal_speeds_lap_and_are_seeded():
  n = 4
  model = _model(n, speed_model="lognormal:1.0", seed=3)
  worker_speeds = model.worker_speeds()
  z = np.random.default_rng([3, clock._SALT, 2**31]).standard_normal(n)
  np.testing.assert_allclose(worker_speeds, np.exp(z))
  commits = list(schedule.EventSchedule(model, 20).drain())
  assert max(schedule.staleness_of(commits, n)) > 2 * n - 2
  for k in range(n):
    ends = [c.window_end for c in commits if c.worker == k]
    np.testing.assert_allclose(np.diff(ends), 2 / worker_speeds[k])
  again = list(schedule.EventSchedule(
      _model(n, speed_model="lognormal:1.0", seed=3), 20).drain())
  assert again == commits
  other = list(schedule.EventSchedule(
      _model(n, speed_model="lognormal:1.0", seed=4), 20).drain())
  assert [c.worker for c in other] != [c.worker for c in commits]


def test_random_windows_are_drawn_per_window():
  model = _model(2, lam=3, speed_model="random:0.5", step=2.0, seed=7)
  for k in range(2):
    z = np.random.default_rng([7, clock._SALT, k, 0]).standard_normal(5)
    np.testing.assert_allclose([model.window_seconds(k, i) for i in range(5)],
                               6.0 * np.exp(0.5 * z))
  # The draws do not depend on how many windows a share holds.
  assert model.window_seconds(1, 1500) == _model(
      2, lam=3, speed_model="random:0.5", step=2.0,
      seed=7).window_seconds(1, 1500)


def test_exponential_windows_are_drawn_per_window():
  # Mitliagkas et al.'s model: each window lasts its speed-1 duration (λ
  # steps of 2 s) times an Exp(1) draw, seeded as random's.
  model = _model(3, lam=3, speed_model="exponential", step=2.0, seed=7)
  for k in range(3):
    e = np.random.default_rng([7, clock._SALT, k, 0]).standard_exponential(5)
    np.testing.assert_allclose([model.window_seconds(k, i) for i in range(5)],
                               6.0 * e)
  assert model.mean_speeds() == [1.0, 1.0, 1.0]
  # Memoryless: the mean is the speed-1 window's and the spread equals it.
  many = [model.window_seconds(0, i) for i in range(20000)]
  assert abs(np.mean(many) / 6.0 - 1) < 0.03
  assert abs(np.std(many) / 6.0 - 1) < 0.05


def test_stragglers():
  always = _model(2, speed_model="straggler:1:3")
  never = _model(2, speed_model="straggler:0:3")
  assert {always.window_seconds(k, i) for k in (0, 1) for i in range(50)} == {
      6.0}
  assert {never.window_seconds(k, i) for k in (0, 1) for i in range(50)} == {
      2.0}
  some = _model(2, speed_model="straggler:0.25:4")
  slow = [some.window_seconds(0, i) == 8.0 for i in range(4000)]
  assert 0.2 < np.mean(slow) < 0.3


@pytest.mark.parametrize("text,message", [
    ("fast", "not one of constant, lognormal:SIGMA"),
    ("constant:1", "constant takes no value"),
    ("lognormal", "lognormal needs a σ, as lognormal:SIGMA"),
    ("lognormal:-1", "σ must be a number in [0, 5]"),
    ("random:nan", "σ must be a number in [0, 5]"),
    ("random:1000", "σ must be a number in [0, 5]"),  # exp(1000 z) overflows.
    ("straggler:0.5", "straggler needs P and SLOWDOWN"),
    ("straggler:1.5:2", "P must be a number in [0, 1]"),
    ("straggler:0.5:0.5", "SLOWDOWN must be a number in [1, 1e+06]"),
    ("straggler:0.5:1e7", "SLOWDOWN must be a number in [1, 1e+06]"),
    ("speeds:1,0", "a speed must be a finite number > 0"),
    ("speeds:1e308,1e-308,1,1", "the fastest speed is inf times the slowest"),
    ("speeds:2e6,1", "the fastest speed is 2e+06 times the slowest"),
    ("trace:/nonexistent", "holds no metrics.jsonl"),
    ("mixed:0.3", "mixed needs two σ, then optionally P and SLOWDOWN"),
    ("mixed:0.3:0.1:0.5", "mixed needs two σ, then optionally P and "
     "SLOWDOWN, then Q and SPEEDUP, as "
     "mixed:SIGMA_WORKER:SIGMA_WINDOW[:P:SLOWDOWN[:Q:SPEEDUP]]"),
    ("mixed", "mixed needs its values, as mixed:SIGMA_WORKER:SIGMA_WINDOW"),
    ("mixed:0.3:0.1:0:1:1.5:2", "Q must be a number in [0, 1]"),
    ("mixed:0.3:0.1:0:1:0.1:0.9", "SPEEDUP must be a number in [1, 1e+06]"),
    ("mixed:0.3:0.1:2:2", "P must be a number in [0, 1]"),
    ("mixed:0.3:0.1:0.1:0.5", "SLOWDOWN must be a number in [1, 1e+06]"),
    ("mixed:0.3:-1", "SIGMA_WINDOW must be a number in [0, 5]"),
    ("mixed:9:0.1", "SIGMA_WORKER must be a number in [0, 5]"),
    ("thesis:1", "thesis takes no value"),
    ("exponential:1", "exponential takes no value"),
])
def test_bad_speed_models(text, message):
  with pytest.raises(ValueError, match=f"--speed_model={text}: ") as caught:
    speeds.parse_speed_model(text)
  assert message in str(caught.value)
  assert "\n" not in str(caught.value)


def test_speed_models_round_trip():
  for text in ("constant", "exponential", "lognormal:0.5", "random:1", "straggler:0.1:4",
               "speeds:1,2.5", "mixed:0.3:0.1", "mixed:0.3:0.1:0.05:2",
               "mixed:0.3:0.1:0:1:0.1:1.5"):
    assert speeds.parse_speed_model(text).text() == text
  with pytest.raises(ValueError, match="has 2 speeds for 3 workers"):
    _model(3, speed_model="speeds:1,2")


def _write_trace(directory, lam, windows):
  """A processes run's files: config.json and one commit row per window."""
  directory.mkdir()
  (directory / "config.json").write_text(json.dumps(
      {"communication_window": lam}))
  rows = [{"event": "eval", "time": 0.0, "clock": 0, "loss": 1.0,
           "accuracy": 0.1}]
  for i, (worker, start, end) in enumerate(windows):
    rows.append({"event": "commit", "time": end + 0.01, "worker": worker,
                 "clock": i + 1, "staleness": 0, "loss": 0.5,
                 "accuracy": 0.5, "window_start": start, "window_end": end,
                 "step_accuracy": [0.5] * lam})
  (directory / "metrics.jsonl").write_text(
      "".join(json.dumps(r) + "\n" for r in rows) + '{"event": "comm')
  return str(directory)


def test_trace_replays_a_runs_step_times(tmp_path):
  # Worker 0's windows of 4 steps took 0.4 s and 0.8 s, worker 1's 1.2 s.
  run = _write_trace(tmp_path / "run", 4, [(0, 0.0, 0.4), (1, 0.0, 1.2),
                                           (0, 0.5, 1.3)])
  steps = speeds.read_trace(run)
  np.testing.assert_allclose(steps[0], [0.1, 0.2])
  np.testing.assert_allclose(steps[1], [0.3])
  # λ = 2 here: 2 steps at the trace's step times; worker k replays trace
  # worker k mod 2, its windows cycled.
  model = _model(3, lam=2, speed_model=f"trace:{run}")
  assert [model.window_seconds(0, i) for i in range(3)] == pytest.approx(
      [0.2, 0.4, 0.2])
  assert model.window_seconds(1, 5) == pytest.approx(0.6)
  assert model.window_seconds(2, 1) == pytest.approx(0.4)
  with pytest.raises(ValueError, match="counts local steps"):
    clock.TimeModel(1.0, 0.0, 0.0, 0.0, num_workers=2,
                      communication_window=2, speed_model=f"trace:{run}",
                      unit="steps")
  empty = _write_trace(tmp_path / "empty", 4, [])
  with pytest.raises(ValueError, match="no commit rows with window times"):
    speeds.read_trace(empty)


def test_trace_replays_when_each_worker_began(tmp_path):
  # After the start barrier worker 0 began computing at 0.02 s, worker 1
  # only at 0.3 s; windows of 4 steps of 0.1 s.
  run = _write_trace(tmp_path / "run", 4, [(0, 0.02, 0.42), (1, 0.3, 0.7),
                                           (0, 0.5, 0.9)])
  assert speeds.read_trace_starts(run) == [0.02, 0.3]
  model = _model(3, lam=4, speed_model=f"trace:{run}", commit=0.01)
  assert model.describe()["worker_starts"] == [0.02, 0.3, 0.02]
  first = list(schedule.EventSchedule(model, 1).drain())
  # Worker 2 replays worker 0: both arrive at 0.43 (the tie goes by index).
  assert [c.worker for c in first] == [0, 2, 1]
  np.testing.assert_allclose(
      [(c.window_start, c.window_end, c.applied) for c in first],
      [(0.02, 0.42, 0.43), (0.02, 0.42, 0.43), (0.3, 0.7, 0.71)])
  # Arrays given without their starts: every worker starts at 0.
  given = clock.TimeModel(1.0, 0.0, 0.0, 0.0, num_workers=2,
                            communication_window=4,
                            speed_model=f"trace:{run}",
                            trace=speeds.read_trace(run))
  assert [given.start_seconds(k) for k in range(2)] == [0.0, 0.0]


def test_trace_slows_a_workers_messages_as_its_windows(tmp_path):
  # Past their first windows (a kernel's first call: left out), worker 0's
  # steps took 0.1 s and worker 1's 0.3 s: half and 1.5 times their mean.
  run = _write_trace(tmp_path / "run", 4, [
      (0, 0.0, 4.0), (1, 0.0, 0.4), (0, 4.1, 4.5), (1, 0.5, 1.7),
      (0, 4.6, 5.0), (1, 1.8, 3.0)])
  model = _model(3, lam=4, speed_model=f"trace:{run}", commit=0.02,
                 pull=0.04)
  assert model.describe()["worker_message_scales"] == pytest.approx(
      [0.5, 1.5, 0.5])
  assert [model.commit_seconds_of(k) for k in range(3)] == pytest.approx(
      [0.01, 0.03, 0.01])
  assert model.pull_seconds_of(1) == pytest.approx(0.06)
  # Worker 1's first window (4 steps of 0.1 s) ends at 0.4; its commit
  # arrives 0.03 s later, its next window starts 0.06 s after the apply.
  commits = list(schedule.EventSchedule(model, 2).drain())
  first = [c for c in commits if c.worker == 1]
  assert first[0].applied == pytest.approx(0.43)
  assert first[1].window_start == pytest.approx(0.49)
  # Other speed models leave every worker's messages alike.
  plain = _model(2, speed_model="lognormal:1.0", commit=0.02)
  assert [plain.commit_seconds_of(k) for k in range(2)] == [0.02, 0.02]


def test_this_host_counts_only_windows_while_every_worker_runs():
  from agn_jax.runtime.backends import calibration  # pylint: disable=g-import-not-at-top
  def row(worker, start, end, applied):
    return {"event": "commit", "worker": worker, "time": applied,
            "window_start": start, "window_end": end}
  # Worker 1's first window (its first call) ends at 1.0: until then worker
  # 0 runs alone, with 0.4 s from a window's end to its next one; both
  # run from 1.0 to 2.6 (gaps of 0.1 and 0.2); worker 1 then ends alone.
  rows = [row(0, 0.0, 0.1, 0.15), row(0, 0.5, 0.6, 0.65),
          row(0, 1.0, 1.1, 1.15), row(0, 1.2, 1.3, 1.35),
          row(0, 1.5, 1.6, 1.65), row(0, 1.7, 1.8, 1.85),
          row(0, 2.0, 2.1, 2.6),
          row(1, 0.0, 1.0, 1.05), row(1, 1.1, 1.2, 1.25),
          row(1, 1.3, 1.4, 1.45), row(1, 1.5, 1.6, 1.65),
          row(1, 1.7, 1.8, 1.85), row(1, 1.9, 2.0, 2.05),
          row(1, 2.8, 2.9, 2.95), row(1, 3.4, 3.5, 3.55)]
  steady = calibration.steady_state(rows, warm_up=1)
  # Counted: worker 0's windows from 1.0 to 1.7 (gaps 0.1, 0.2, 0.1, 0.2)
  # and worker 1's from 1.1 to 1.7 (0.1 each); not worker 1's from 1.9 (its
  # next window starts after worker 0's last commit) nor worker 0's last.
  assert steady["windows"] == 8
  assert steady["gap_seconds"] == pytest.approx((0.6 + 4 * 0.1) / 8)
  assert steady["end_to_applied_seconds"] == pytest.approx(0.05)
  assert steady["stagger_seconds"] == pytest.approx(1.0)


def test_restored_schedule_continues_exactly():
  model = _model(3, speed_model="random:0.7", step=0.1, commit=0.01,
                 pull=0.01, apply=0.02)
  whole = list(schedule.EventSchedule(model, 10).drain())
  first = schedule.EventSchedule(model, 10)
  head = [first.pop() for _ in range(13)]
  saved = json.loads(json.dumps(first.state()))
  second = schedule.EventSchedule(model, 10)
  second.restore(saved)
  assert head + list(second.drain()) == whole
  # A longer share continues where the shorter one ended.
  short = schedule.EventSchedule(model, 4)
  list(short.drain())
  longer = schedule.EventSchedule(model, 10)
  longer.restore(short.state())
  rest = list(longer.drain())
  assert len(rest) == 3 * 6 and rest[0].window == 4
  with pytest.raises(ValueError, match="of 3 workers, this one has 2"):
    schedule.EventSchedule(_model(2), 4).restore(saved)


def test_replay_schedule():
  flat = schedule.ReplaySchedule([0, 1, 0], num_workers=2, num_windows=2)
  assert [(c.worker, c.window, c.window_start, c.applied, c.barrier)
          for c in flat.drain()] == [(0, 0, 0.0, 1.0, False),
                                     (1, 0, 0.0, 2.0, False),
                                     (0, 1, 1.0, 3.0, False)]
  rounds = schedule.ReplaySchedule([[1, 0], [0]], num_workers=2, num_windows=2)
  rounds.pop()
  state = rounds.state()
  again = schedule.ReplaySchedule([[1, 0], [0]], num_workers=2, num_windows=2)
  again.restore(state)
  assert [c.worker for c in again.drain()] == [0, 0]
  with pytest.raises(ValueError, match="distinct"):
    schedule.ReplaySchedule([[0, 0]], 2, 2)
  with pytest.raises(ValueError, match="worker 2 is not in"):
    schedule.ReplaySchedule([2], 2, 2)
  with pytest.raises(ValueError, match="commits 3 times"):
    schedule.ReplaySchedule([0, 0, 0], 2, 2)


def test_message_seconds():
  assert clock.message_seconds(1e6, math.inf, 0.5) == 0.0005
  assert clock.message_seconds(1.25e8, 10.0, 0.0) == pytest.approx(0.1)


def _trace_dir(tmp_path, rows, num_workers=2):
  run = tmp_path / "trace"
  run.mkdir()
  (run / "config.json").write_text(json.dumps(
      {"communication_window": 2, "num_workers": num_workers}))
  (run / "metrics.jsonl").write_text(
      "".join(json.dumps(r) + "\n" for r in rows))
  return run


def _commit(worker=0, time=1.0, start=0.0, end=0.5):
  return {"event": "commit", "worker": worker, "time": time,
          "window_start": start, "window_end": end}


@pytest.mark.parametrize("bad,named", [
    (dict(worker=None), "line 2: worker is null"),
    (dict(worker=-5), "line 2: worker is -5"),
    (dict(worker=1000000000), "line 2: worker is 1000000000"),
    (dict(worker=True), "line 2: worker is true"),
    (dict(time="abc"), 'line 2: time is "abc"'),
    (dict(end=float("inf")), "line 2: Infinity is not a finite number"),
    (dict(start=float("nan")), "line 2: NaN is not a finite number"),
])
def test_a_bad_trace_row_names_its_file_line_and_field(tmp_path, bad, named):
  run = _trace_dir(tmp_path, [_commit(), _commit(**bad)])
  with pytest.raises(ValueError) as caught:
    speeds.parse_speed_model(f"trace:{run}")
  message = str(caught.value)
  assert message.startswith(f"--speed_model=trace:{run}: "
                            f"{run / 'metrics.jsonl'}, {named}"), message
  assert "\n" not in message


def test_a_trace_row_cut_short_at_the_end_is_skipped_elsewhere_refused(
    tmp_path):
  run = _trace_dir(tmp_path, [_commit(0, 1.0, 0.0, 0.5),
                              _commit(1, 2.0, 0.5, 1.5)])
  with open(run / "metrics.jsonl", "a") as f:
    f.write('{"event": "commit", "wor')  # A kill mid-row.
  # Steps of 0.25 s and 0.5 s (λ = 2), read as written.
  assert [t.tolist() for t in speeds.read_trace(str(run))] == [[0.25], [0.5]]
  text = (run / "metrics.jsonl").read_text()
  (run / "metrics.jsonl").write_text('{"cut\n' + text)
  with pytest.raises(ValueError, match="line 1: not a JSON object"):
    speeds.parse_speed_model(f"trace:{run}")


def test_a_binary_trace_is_named(tmp_path):
  run = _trace_dir(tmp_path, [_commit()])
  (run / "metrics.jsonl").write_bytes(b'{"event": "x"}\n\xb1\xff\n')
  with pytest.raises(ValueError, match=r"metrics.jsonl, line 2: not UTF-8"):
    speeds.parse_speed_model(f"trace:{run}")


# --- Per-worker speeds and the refit cluster ---------------------------------


def test_mixed_is_each_workers_speed_times_each_windows_draw():
  # Hand-worked from the two draws: worker k's speed exp(σ_w z_k), z_k
  # drawn once as lognormal's; its window i lasts λ · step / speed ·
  # exp(σ_j z_ki), z_ki drawn as random's.
  n, lam, step, seed = 3, 4, 0.5, 5
  model = _model(n, lam, "mixed:0.4:0.2", step=step, seed=seed)
  z = np.random.default_rng([seed, clock._SALT, 2**31]).standard_normal(n)
  np.testing.assert_allclose(model.worker_speeds(), np.exp(0.4 * z))
  assert model.mean_speeds() == model.worker_speeds()
  for k in range(n):
    zk = np.random.default_rng([seed, clock._SALT, k, 0]).standard_normal(6)
    np.testing.assert_allclose(
        [model.window_seconds(k, i) for i in range(6)],
        lam * step * np.exp(-0.4 * z[k] + 0.2 * zk))
  # Either σ at 0 is the other model exactly.
  for text, same in (("mixed:0.4:0", "lognormal:0.4"),
                     ("mixed:0:0.2", "random:0.2")):
    a, b = (_model(n, lam, m, step=step, seed=seed) for m in (text, same))
    assert ([a.window_seconds(k, i) for k in range(n) for i in range(6)] ==
            [b.window_seconds(k, i) for k in range(n) for i in range(6)])
  assert "worker_speeds" in model.describe()
  # Persistent stragglers: the ⌈P n⌉ lowest draws, SLOWDOWN times slower
  # still. Here ⌈0.3 · 3⌉ = 1: the worker of the lowest z, at a third.
  slowed = _model(n, lam, "mixed:0.4:0.2:0.3:3", step=step, seed=seed)
  expected = np.exp(0.4 * z)
  expected[np.argmin(z)] /= 3
  np.testing.assert_allclose(slowed.worker_speeds(), expected)
  # And the ⌈Q n⌉ highest draws SPEEDUP times faster: here ⌈0.5 · 3⌉ = 2,
  # at 1.5 times.
  both = _model(n, lam, "mixed:0.4:0.2:0.3:3:0.5:1.5", step=step, seed=seed)
  expected[np.argsort(z)[1:]] *= 1.5
  np.testing.assert_allclose(both.worker_speeds(), expected)
  assert [clock.stragglers(np.zeros(n), p).tolist()
          for p in (0.0, 0.01, 0.34, 0.67, 1.0)] == [[], [0], [0, 1],
                                                    [0, 1, 2], [0, 1, 2]]


def test_a_persistent_slow_worker_finishes_last_alone():
  # Worked by hand: 4 workers, windows of 2 steps of 1 s, worker 3 at half
  # speed (4 s a window), free messages, 0.01 s applies. The fast workers
  # finish their 10 windows by 20.12 s; worker 3 has 5 windows left then
  # and runs them alone: its last commit at 10 × (4 + 0.01) = 40.1 s, its
  # last 4 commits at staleness 0 (nobody else commits in between).
  model = _model(4, 2, "speeds:1,1,1,0.5", step=1.0, apply=0.01)
  commits = list(schedule.EventSchedule(model, 10).drain())
  staleness = schedule.staleness_of(commits, 4)
  fast_end = max(c.applied for c in commits if c.worker != 3)
  assert fast_end == pytest.approx(20.12)
  assert commits[-1].applied == pytest.approx(40.1)
  assert [c.worker for c in commits[-5:]] == [3] * 5
  assert staleness[-5:] == [3, 0, 0, 0, 0]
  # The thesis' cluster draws such a worker: in a short run of its n = 20,
  # λ = 15 workers, the slowest worker (its persistent speed) commits last,
  # its last commits alone at staleness 0. Per-window draws alone
  # (thesis) end every worker together.
  for seed in range(3):
    model = clock.time_model(clock.PAPER_REFIT, PAPER_MLP, num_workers=20,
                             communication_window=15,
                             speed_model="thesis_refit",
                             seed=seed)
    commits = list(schedule.EventSchedule(model, 20).drain())
    slowest = int(np.argmin(model.worker_speeds()))
    others_end = max(c.applied for c in commits if c.worker != slowest)
    alone = [c for c in commits if c.applied > others_end]
    assert len(alone) >= 2 and {c.worker for c in alone} == {slowest}
    assert schedule.staleness_of(commits, 20)[-len(alone) + 1:] == [0] * (
        len(alone) - 1)
  v1 = clock.time_model(clock.PAPER, PAPER_MLP, num_workers=20,
                        communication_window=15, speed_model="thesis")
  commits = list(schedule.EventSchedule(v1, 20).drain())
  assert len({c.worker for c in commits[-5:]}) > 1


def test_server_bound_share_by_hand():
  # 3 workers, windows of 1 s, free messages. Applies of 0.1 s: 1.1, 1.2,
  # 1.3, then 2.2, 2.3, 2.4: 4 of the 5 gaps are one apply. Applies of
  # 0.5 s: 1.5, 2.0, ..., 4.0, all back to back.
  short = list(schedule.EventSchedule(_model(3, 1, apply=0.1), 2).drain())
  assert [c.applied for c in short] == pytest.approx(
      [1.1, 1.2, 1.3, 2.2, 2.3, 2.4])
  assert schedule.server_bound_share(short, 0.1) == pytest.approx(0.8)
  long = list(schedule.EventSchedule(_model(3, 1, apply=0.5), 2).drain())
  assert schedule.server_bound_share(long, 0.5) == 1.0
  assert schedule.server_bound_share(long[:1], 0.5) == 0.0


def test_paper_apply_is_one_the_thesis_times_allow():
  # One FIFO server applies a run's commits one after another, so none of
  # the thesis' 98 times may be shorter than its commits times the apply
  # (the first fit's 0.495 s broke 20 of the 49 AGN times).
  from experiments.report import thesis  # pylint: disable=g-import-not-at-top
  apply = _paper(1, 1).server_apply_seconds
  new = clock.time_model(clock.PAPER_REFIT, PAPER_MLP, num_workers=1,
                         communication_window=1).server_apply_seconds
  def broken(apply_seconds):
    return sum(seconds < n * int(SAMPLES / (128 * n) // lam) * apply_seconds
               for (n, lam), cell in thesis.GRID.items()
               for seconds in (cell.agn_seconds, cell.aeasgd_seconds))
  assert broken(apply) >= 20
  assert broken(new) == 0
  # The first fit keeps its names: the runs committed on it recorded them.
  assert clock.preset("paper") == clock.PAPER
  assert speeds.parse_speed_model("thesis") == speeds.parse_speed_model(
      "random:0.26")
  assert clock.preset("paper_refit") == clock.PAPER_REFIT
