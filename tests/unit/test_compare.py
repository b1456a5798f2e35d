"""Tests for experiments.compare: temporal efficiency of runs read from disk."""

import gzip
import json
import os
import re

import numpy as np
import pytest

from agn_jax import metrics
from agn_jax.runtime import events
from experiments import compare
from experiments import curves
from experiments import plots
from helpers import REPO

ROOT = str(REPO)


def write_run(directory, eval_curve=(), commit_curve=(), summary=None,
              extra_lines=(), startup=None, sim_scale=None, config=None,
              windows=()):
  """A run directory whose metrics.jsonl holds the given (time, accuracy)s.

  Without `startup` the rows are in the old format (`time` only, counted
  from launch). With it, `time` is on the training base and every row also
  has `wall_time = time + startup`; with `sim_scale`, `sim_time = time *
  sim_scale` too. `windows` are commits with step accuracies, `(worker,
  start, end, [accuracy of each step])`, committed at `end`.
  """
  os.makedirs(directory, exist_ok=True)

  def times(t):
    row = {"time": t}
    if startup is not None:
      row["wall_time"] = t + startup
    if sim_scale is not None:
      row["sim_time"] = t * sim_scale
    return row

  with open(os.path.join(directory, "metrics.jsonl"), "w") as f:
    for i, (t, acc) in enumerate(commit_curve):
      f.write(json.dumps({"event": "commit", **times(t), "worker": i % 2,
                          "clock": i + 1, "staleness": i % 3, "loss": 1 - acc,
                          "accuracy": acc}) + "\n")
    for i, (worker, start, end, steps) in enumerate(windows):
      row = {"event": "commit", **times(end), "worker": worker, "clock": i,
             "staleness": 0, "loss": 0.5, "accuracy": float(np.mean(steps)),
             "window_start": start, "window_end": end,
             "step_accuracy": list(steps)}
      if sim_scale is not None:
        row["sim_window_start"] = start * sim_scale
      f.write(json.dumps(row) + "\n")
    for i, (t, acc) in enumerate(eval_curve):
      f.write(json.dumps({"event": "eval", **times(t), "clock": i,
                          "loss": 1 - acc, "accuracy": acc}) + "\n")
    for line in extra_lines:
      f.write(line + "\n")
  if summary is not None:
    with open(os.path.join(directory, "summary.json"), "w") as f:
      json.dump(summary, f)
  if config is not None:
    with open(os.path.join(directory, "config.json"), "w") as f:
      json.dump(config, f)
  return str(directory)


def config(**changes):
  base = {"dataset": "mnist", "dataset_size": None, "epochs": 40.0,
          "batch_size": 128, "model": "mlp", "hidden_sizes": [1000, 2000, 1000],
          "strategy": "agn", "learning_rate": 0.001}
  base.update(changes)
  return base


def e_only(result):
  return {"test": result["test"], "train": result["train"]}


def ramp(end, slope, step=0.5):
  """Samples of f(t) = slope * t on [0, end]."""
  return [(t, slope * t) for t in np.arange(0, end + step / 2, step)]


def test_efficiency_of_test_accuracy_matches_known_integrals(tmp_path):
  # a: f = 0.1 t on [0, 10] -> ∫₀^8 = 3.2; b: f = 0.8 constant on [0, 8]
  # -> ∫₀^8 = 6.4; m = 8 (b is shorter), so E(a, b) = 0.5 and E(b, a) = 2.
  a = compare.read_run(write_run(tmp_path / "a", eval_curve=ramp(10, 0.1)))
  b = compare.read_run(
      write_run(tmp_path / "b", eval_curve=[(t, 0.8) for t in range(9)]))
  assert compare.efficiency(a, b)["test"] == pytest.approx(0.5)
  assert compare.efficiency(b, a)["test"] == pytest.approx(2.0)


def test_efficiency_of_windowed_training_accuracy(tmp_path):
  # Samples every second; each 5 s window [5k, 5k+5) averages to its constant
  # and is stamped at its last sample 5k+4. a: 0.3 then 0.9, b: 0.6 throughout,
  # both ending at t = 19 (four windows, stamps 4, 9, 14, 19).
  # Curves get (0, 0) in front.
  times = range(20)
  a_values = [0.3 if t < 10 else 0.9 for t in times]
  a = compare.read_run(write_run(tmp_path / "a",
                                 commit_curve=list(zip(times, a_values))))
  b = compare.read_run(write_run(tmp_path / "b",
                                 commit_curve=[(t, 0.6) for t in times]))
  t, means = compare.train_curve(a)
  np.testing.assert_allclose(t, [4, 9, 14, 19])
  np.testing.assert_allclose(means, [0.3, 0.3, 0.9, 0.9])
  # ∫a = 4*0.3/2 + 5*0.3 + 5*(0.3+0.9)/2 + 5*0.9 = 0.6+1.5+3+4.5 = 9.6
  # ∫b = 4*0.6/2 + 15*0.6 = 1.2 + 9 = 10.2
  e = compare.efficiency(a, b, curve="commits")
  assert e["train"] == pytest.approx(9.6 / 10.2)
  assert e["test"] is None  # No eval events.
  # These rows predate step accuracies: the thesis' curve has nothing.
  assert compare.efficiency(a, b)["train"] is None


# The thesis' example of tests/unit/test_metrics.py as commit rows: each window's
# steps end evenly over it, so a's steps fall at 3, 4 (worker 0's [2, 4]),
# 6, 9 (worker 1's [3, 9]) and 10, 16 (worker 0's [4, 16]); b's at 0, 2, 4
# and 8, 11. There E(a, b) = 9.4 / 7.8.
THESIS_A = [(0, 2, 4, [0.2, 0.4]), (1, 3, 9, [0.6, 0.8]),
            (0, 4, 16, [1.0, 1.0])]
THESIS_B = [(0, -2, 4, [0.4, 0.6, 0.8]), (1, 5, 11, [0.8, 0.6])]


def test_thesis_efficiency_from_commit_rows(tmp_path):
  a = compare.read_run(write_run(tmp_path / "a", windows=THESIS_A,
                                 startup=1.0, sim_scale=2.0))
  b = compare.read_run(write_run(tmp_path / "b", windows=THESIS_B,
                                 startup=7.0, sim_scale=2.0))
  times, values = curves.step_curve(a, "training")
  np.testing.assert_allclose(times, [3, 4, 6, 9, 10, 16])
  np.testing.assert_allclose(values, [0.2, 0.4, 0.6, 0.8, 1.0, 1.0])
  np.testing.assert_allclose(curves.step_curve(a, "wall")[0],
                             [4, 5, 7, 10, 11, 17])
  np.testing.assert_allclose(curves.step_curve(b, "simulated")[0],
                             [0, 4, 8, 16, 22])
  # Each run counts from its own first step: the start-ups (1 s and 7 s)
  # change nothing. On simulated time every time is doubled, and so is the
  # window (5 s is 10 local steps): the same E.
  for base in ("training", "wall", "simulated"):
    e = compare.efficiency(a, b, time_base=base)
    assert e["curve"] == "thesis"
    assert abs(e["train"] - 9.4 / 7.8) < 1e-9, base
  # The commits' curve is the earlier one: one sample per commit.
  assert compare.efficiency(a, b, curve="commits")["train"] == pytest.approx(
      metrics.temporal_efficiency([4, 9, 16], [0.3, 0.7, 1.0], [4, 11],
                                  [0.6, 0.7]))
  with pytest.raises(ValueError, match="curve"):
    compare.efficiency(a, b, curve="bins")
  # A malformed list is an error naming the file and line.
  path = write_run(tmp_path / "c", windows=THESIS_A, extra_lines=[
      '{"event": "commit", "time": 20, "step_accuracy": [0.5, "x"]}'])
  with pytest.raises(compare.RunDirError, match="metrics.jsonl:4: field "
                     "'step_accuracy' is not a list of numbers"):
    compare.read_run(path)


def test_modeled_seconds_are_not_converted_from_steps(tmp_path):
  # A clock of modeled seconds (--cluster=paper): sim_time = time, so the
  # thesis' E on the simulated base is the training base's with its 5 s
  # window (9.4 / 7.8), not one of 10 s (the step counter's 10 steps).
  a = compare.read_run(write_run(tmp_path / "a", windows=THESIS_A,
                                 startup=1.0, sim_scale=1.0,
                                 config=config(cluster="paper")))
  b = compare.read_run(write_run(tmp_path / "b", windows=THESIS_B,
                                 startup=7.0, sim_scale=1.0,
                                 config=config(cluster="paper")))
  assert curves.sim_unit(a) == "seconds"
  e = compare.efficiency(a, b, time_base="simulated")
  assert abs(e["train"] - 9.4 / 7.8) < 1e-9
  ten = compare.efficiency(a, b, window=10.0, time_base="training")["train"]
  assert abs(ten - 9.4 / 7.8) > 1e-3
  result = compare.comparison([a, b], time_base="simulated")
  assert "5 modeled s" in result["train_curve_description"]
  # A step counter's run against a modeled one: no shared simulated clock.
  steps = compare.read_run(write_run(tmp_path / "c", windows=THESIS_B,
                                     startup=7.0, sim_scale=2.0,
                                     config=config(cluster="none")))
  assert compare.efficiency(a, steps)["time_base"] == "training"
  with pytest.raises(ValueError, match="different units.*c: steps"):
    compare.efficiency(a, steps, time_base="simulated")


def test_efficiency_of_a_run_with_itself_is_exactly_one(tmp_path):
  rng = np.random.default_rng(0)
  times = np.sort(rng.uniform(0, 30, 200))
  windows = [(k % 3, t, t + 0.5, list(rng.uniform(0, 1, 4)))
             for k, t in enumerate(times)]
  path = write_run(tmp_path / "a",
                   eval_curve=list(zip(times[::10], rng.uniform(0, 1, 20))),
                   commit_curve=list(zip(times, rng.uniform(0, 1, 200))),
                   windows=windows)
  a, again = compare.read_run(path), compare.read_run(path)
  for curve in compare.EFFICIENCY_CURVES:
    assert e_only(compare.efficiency(a, a, curve=curve)) == {"test": 1.0,
                                                             "train": 1.0}
    assert e_only(compare.efficiency(a, again, curve=curve)) == {
        "test": 1.0, "train": 1.0}


def test_convergence_of_runs_read_from_disk(tmp_path):
  rise = [(0, 0.1), (1, 0.6), (2, 0.95), (3, 0.94)]

  def convergence(name, **kwargs):
    run = compare.read_run(write_run(tmp_path / name, **kwargs))
    return curves.convergence(run)

  assert convergence("rise", eval_curve=rise) == "converged"
  assert convergence("fell", eval_curve=rise + [(4, 0.11)]) == "diverged"
  # Non-finite anywhere in the center's numbers: diverged, whatever its
  # accuracy. (JSON rows write NaN and Infinity as Python's json does.)
  nan_loss = ('{"event": "eval", "time": 4, "clock": 9, "loss": NaN, '
              '"accuracy": 0.95}')
  assert convergence("nan", eval_curve=rise,
                     extra_lines=[nan_loss]) == "diverged"
  assert convergence("inf", eval_curve=rise, summary={
      "final_test_loss": float("inf")}) == "diverged"
  # More commits rejected as non-finite than the books accept.
  assert convergence("rejected", eval_curve=rise, commit_curve=rise[:3],
                     summary={"num_commits": 3,
                              "rejected_commits": 4}) == "diverged"
  assert convergence("one_rejected", eval_curve=rise,
                     commit_curve=[(t, 0.5) for t in range(10)], summary={
                         "num_commits": 10, "rejected_commits": 1}) == (
                             "converged")
  # Chance is 1 / classes: 10 unless the summary says otherwise.
  assert convergence("ten", eval_curve=[(0, 0.5), (1, 0.9)]) == "converged"
  assert convergence("two", eval_curve=[(0, 0.5), (1, 0.9)],
                     summary={"num_classes": 2}) == "inconclusive"


def test_truncated_last_line_is_ignored_but_corrupt_middle_line_is_not(
    tmp_path):
  path = write_run(tmp_path / "a", eval_curve=[(0, 0.1), (1, 0.2)],
                   extra_lines=['{"event": "eval", "ti'])
  assert len(compare.read_run(path).evals["time"]) == 2
  with open(os.path.join(path, "metrics.jsonl"), "a") as f:
    f.write(json.dumps({"event": "eval", "time": 3, "accuracy": 0.3}) + "\n")
  with pytest.raises(compare.RunDirError, match="metrics.jsonl:3"):
    compare.read_run(path)


def test_final_metric_prefers_the_summary(tmp_path):
  path = write_run(tmp_path / "a", eval_curve=[(0, 0.1), (1, 0.2)])
  assert compare.final_metric(compare.read_run(path)) == pytest.approx(0.2)
  path = write_run(tmp_path / "b", eval_curve=[(0, 0.1), (1, 0.2)],
                   summary={"final_test_accuracy": 0.25})
  assert compare.final_metric(compare.read_run(path)) == 0.25


def test_training_time_base_leaves_start_up_out(tmp_path):
  # Both runs evaluate at training times 0 and 4; a holds 0.5, b holds 1.0.
  # a's start-up took 2 s, b's 6 s (wall_time = time + start-up).
  a = compare.read_run(write_run(tmp_path / "a", startup=2.0,
                                 eval_curve=[(0, 0.5), (4, 0.5)]))
  b = compare.read_run(write_run(tmp_path / "b", startup=6.0,
                                 eval_curve=[(0, 1.0), (4, 1.0)]))
  # Training base: ∫₀⁴ 0.5 / ∫₀⁴ 1.0 = 2 / 4.
  e = compare.efficiency(a, b)
  assert e["test"] == pytest.approx(0.5)
  assert e["time_base"] == "training" and e["same_time_base"]
  # Wall base: a = (0,0),(2,.5),(6,.5); b = (0,0),(6,1),(10,1); m = 6.
  # ∫a = 2·0.25 + 4·0.5 = 2.5; ∫b = 6·0.5 = 3.
  e = compare.efficiency(a, b, time_base="wall")
  assert e["test"] == pytest.approx(2.5 / 3)
  assert e["time_bases"] == ("wall", "wall")
  assert curves.startup_seconds(a) == pytest.approx(2.0)


def test_evaluations_before_the_start_barrier_carry_to_zero(tmp_path):
  # a: 0.2 at t = -2 (before the barrier), 0.6 at t = 2 and 4, so on [0, 4]
  # a = (0, 0.2), (2, 0.6), (4, 0.6): ∫ = 2·0.4 + 2·0.6 = 2.0. b = 1 on
  # [0, 4]: ∫ = 4.
  a = compare.read_run(write_run(tmp_path / "a", startup=3.0,
                                 eval_curve=[(-2, 0.2), (2, 0.6), (4, 0.6)]))
  b = compare.read_run(write_run(tmp_path / "b", startup=3.0,
                                 eval_curve=[(0, 1.0), (4, 1.0)]))
  assert compare.efficiency(a, b)["test"] == pytest.approx(0.5)
  np.testing.assert_allclose(curves.eval_curve(a)[0], [-2, 2, 4])


def test_auto_is_simulated_only_when_every_run_has_simulated_times(tmp_path):
  # Simulated seconds are twice the training seconds in a, three times in b:
  # a = 0.5 on sim [0, 8], b = 1.0 on sim [0, 12]; m = 8: E = 4 / 8.
  # On the training base both last 4 s and E is also 0.5, so b's curve is
  # made different: 1.0 until t = 2, then 0 (sim: until 6).
  a = write_run(tmp_path / "a", startup=1.0, sim_scale=2.0,
                eval_curve=[(0, 0.5), (4, 0.5)])
  b = write_run(tmp_path / "b", startup=1.0, sim_scale=3.0,
                eval_curve=[(0, 1.0), (2, 1.0), (2.5, 0.0), (4, 0.0)])
  run_a, run_b = compare.read_run(a), compare.read_run(b)
  # Simulated: a = 0.5 on [0, 8] -> 4; b = 1 on [0, 6], down to 0 at 7.5
  # -> 6 + 0.75 = 6.75 (0 after). E = 4 / 6.75.
  e = compare.efficiency(run_a, run_b)
  assert e["time_base"] == "simulated"
  assert e["test"] == pytest.approx(4 / 6.75)
  # Training: a -> 2; b = 1 on [0, 2], down to 0 at 2.5 -> 2.25. E = 2/2.25.
  e = compare.efficiency(run_a, run_b, time_base="training")
  assert e["test"] == pytest.approx(2 / 2.25)
  # One run without sim_time: auto falls back to training, and asking for
  # simulated is an error naming the run.
  old = compare.read_run(write_run(tmp_path / "c", startup=1.0,
                                   eval_curve=[(0, 1.0), (4, 1.0)]))
  assert compare.efficiency(run_a, old)["time_base"] == "training"
  with pytest.raises(ValueError, match="c: has no simulated times"):
    compare.efficiency(run_a, old, time_base="simulated")


def test_data_budget_and_same_budget(tmp_path):
  curve = [(0, 0.5), (4, 0.5)]
  agn = compare.read_run(write_run(tmp_path / "agn", eval_curve=curve,
                                   config=config()))
  # Strategy settings differ but the budget is the same; epochs as an int.
  aeasgd = compare.read_run(write_run(
      tmp_path / "aeasgd", eval_curve=curve,
      config=config(strategy="aeasgd", learning_rate=0.01, epochs=40)))
  longer = compare.read_run(write_run(
      tmp_path / "longer", eval_curve=curve,
      config=config(epochs=100, batch_size=64)))
  # A run written before tasks had names trained for classification.
  assert compare.data_budget(agn) == {
      "task": "classification", "dataset": "mnist", "dataset_size": None,
      "epochs": 40.0, "batch_size": 128, "model": "mlp",
      "hidden_sizes": [1000, 2000, 1000]}
  assert compare.same_budget([agn, aeasgd]) == (True, [])
  assert compare.same_budget([agn, aeasgd, longer]) == (
      False, ["epochs", "batch_size"])
  # The cnn ignores hidden_sizes: different ones are the same budget.
  cnn_a = compare.read_run(write_run(tmp_path / "cnn_a", eval_curve=curve,
                                     config=config(model="cnn")))
  cnn_b = compare.read_run(write_run(
      tmp_path / "cnn_b", eval_curve=curve,
      config=config(model="cnn", hidden_sizes=[8])))
  assert compare.same_budget([cnn_a, cnn_b]) == (True, [])
  # summary.json's config counts when there is no config.json.
  from_summary = compare.read_run(write_run(
      tmp_path / "s", eval_curve=curve, summary={"config": config(epochs=7)}))
  assert compare.data_budget(from_summary)["epochs"] == 7.0


def test_compare_and_plots_do_not_import_each_other():
  # The curve data lives in experiments.curves; plots needs only that.
  import ast  # pylint: disable=g-import-not-at-top
  for module, other in (("plots", "compare"), ("curves", "compare"),
                        ("curves", "plots")):
    with open(os.path.join(ROOT, "experiments", f"{module}.py")) as f:
      tree = ast.parse(f.read())
    imported = {alias.name for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) for alias in node.names}
    assert other not in imported, (module, other)


def _instrumented_run(directory, commits, n=4, every=3, seed=0):
  """A run whose commit rows carry the instruments (`--diagnostics`), one a second; their values are seeded noise, the cosines NaN at the first commit."""
  rng = np.random.default_rng(seed)
  extra = []
  for i in range(commits):
    row = {"event": "commit", "time": float(i), "wall_time": float(i) + 1,
           "worker": i % n, "clock": i + 1, "staleness": i % n, "loss": 0.5,
           "accuracy": 0.5}
    for name in ("commit_norm", "distance_staleness", "center_step_norm"):
      row[name] = float(rng.uniform(0.5, 1.5))
    row["cosine_previous_commit"] = None if i == 0 else float(
        rng.uniform(-1, 1))
    row["cosine_center_movement"] = None if i == 0 else float(
        rng.uniform(-1, 1))
    row["implicit_momentum"] = None if i < 2 else float(rng.uniform(0, 1))
    if i % every == 0:
      row["gradient_cosine"] = float(rng.uniform(-1, 1))
    extra.append(json.dumps(row))
  summary = {"implicit_momentum": json.loads(extra[-1])["implicit_momentum"],
             "theory_momentum": 1 - 1 / n, "instrumented_commits": commits,
             "mean_commit_norm": 1.0}
  return write_run(directory, eval_curve=[(0, 0.1), (commits, 0.9)],
                   extra_lines=extra, startup=1.0, summary=summary,
                   config=config(num_workers=n))


def test_instrument_traces_leave_out_commits_without_a_value(tmp_path):
  run = compare.read_run(_instrumented_run(tmp_path / "a", commits=10))
  assert curves.instrument_names(run) == events.INSTRUMENTS
  times, values, mean = curves.instrument_trace(run, "gradient_cosine",
                                                smooth=2)
  rows = [json.loads(line) for line in
          open(tmp_path / "a" / "metrics.jsonl")]
  taken = [r for r in rows if "gradient_cosine" in r]
  np.testing.assert_allclose(times, [r["time"] for r in taken])
  np.testing.assert_allclose(values, [r["gradient_cosine"] for r in taken])
  # The running mean of each value and the one before it, by hand.
  by_hand = [values[0]] + [(a + b) / 2 for a, b in zip(values, values[1:])]
  np.testing.assert_allclose(mean, by_hand)
  times, _, _ = curves.instrument_trace(run, "cosine_previous_commit")
  assert times[0] == 1.0  # The first commit's cosine has no value.


def test_compare_draws_the_instruments_of_the_runs_that_have_them(tmp_path):
  with_them = compare.read_run(_instrumented_run(tmp_path / "a", 30))
  without = compare.read_run(write_run(
      tmp_path / "b", eval_curve=[(0, 0.1), (30, 0.8)],
      commit_curve=[(t, 0.5) for t in range(30)], startup=1.0,
      config=config(num_workers=4)))
  path = plots.plot_instruments([with_them, without],
                                str(tmp_path / "instruments.png"))
  assert path and os.path.getsize(path) > 0
  assert plots.plot_instruments([without, without],
                                str(tmp_path / "none.png")) is None
  assert not os.path.exists(tmp_path / "none.png")
  report = compare.comparison([with_them, without])
  assert report["runs"][0]["instruments"]["theory_momentum"] == 0.75
  assert report["runs"][0]["instruments"]["instrumented_commits"] == 30
  assert report["runs"][1]["instruments"] is None


def runtime_run(directory, commits=12, summary=None):
  """A finished run as the runtime writes one: commits at clocks 1..N, evaluations at 0 and N, a summary that says so."""
  os.makedirs(directory, exist_ok=True)
  with open(os.path.join(directory, "metrics.jsonl"), "w") as f:
    f.write(json.dumps({"event": "eval", "time": 0.0, "clock": 0,
                        "loss": 2.3, "accuracy": 0.1, "final": False}) + "\n")
    for clock in range(1, commits + 1):
      f.write(json.dumps({"event": "commit", "time": float(clock),
                          "worker": clock % 2, "clock": clock,
                          "staleness": 1, "loss": 1.0,
                          "accuracy": 0.5}) + "\n")
    f.write(json.dumps({"event": "eval", "time": commits + 0.25,
                        "clock": commits, "loss": 0.4, "accuracy": 0.875,
                        "final": True}) + "\n")
  with open(os.path.join(directory, "summary.json"), "w") as f:
    json.dump(dict({"outcome": "completed", "num_commits": commits,
                    "rejected_commits": 0, "final_clock": commits,
                    "final_test_accuracy": 0.875, "final_test_loss": 0.4,
                    "training_seconds": float(commits),
                    "resumed_from_commit": None}, **(summary or {})), f)
  return str(directory)


def cut(path, keep=1 / 3):
  with open(path) as f:
    lines = f.readlines()
  with open(path, "w") as f:
    f.writelines(lines[:int(len(lines) * keep)])


def test_a_metrics_file_cut_short_disagrees_with_its_summary(tmp_path):
  whole = compare.read_run(runtime_run(tmp_path / "whole"))
  assert len(whole.commits["time"]) == 12
  path = runtime_run(tmp_path / "cut")
  cut(os.path.join(path, "metrics.jsonl"))  # 4 of its 14 rows: 3 commits.
  with pytest.raises(compare.RunDirError) as e:
    compare.read_run(path)
  said = str(e.value)
  assert said.startswith(f"{path}: metrics.jsonl and summary.json disagree")
  assert "3 commit rows, summary.json: num_commits 12" in said
  assert "the last commit row is at clock 3" in said
  assert "the last commit row is at 3 s, summary.json: training_seconds 12" in (
      said)
  assert "final evaluation (final_clock 12) has no eval row" in said
  assert "\n" not in said


@pytest.mark.parametrize("field, value, said", [
    ("final_test_accuracy", 0.5, "final_test_accuracy is 0.5, its eval row "
     "at clock 12 says 0.875"),
    ("num_commits", 13, "12 commit rows, summary.json: num_commits 13"),
    ("final_clock", 11, "final evaluation (final_clock 11) has no eval row "
     "(the last is at clock 12)"),
])
def test_a_summary_of_another_run_disagrees(tmp_path, field, value, said):
  path = runtime_run(tmp_path / "a", summary={field: value})
  with pytest.raises(compare.RunDirError, match=re.escape(said)):
    compare.read_run(path)


def test_a_resumed_run_s_rows_go_on_from_its_earlier_sittings(tmp_path):
  # Its training_seconds counts its last sitting alone: not checked.
  path = runtime_run(tmp_path / "a", summary={"training_seconds": 4.0,
                                              "resumed_from_commit": 8})
  assert len(compare.read_run(path).commits["time"]) == 12
  path = runtime_run(tmp_path / "b", summary={"training_seconds": 4.0})
  with pytest.raises(compare.RunDirError, match="training_seconds 4"):
    compare.read_run(path)


def test_archived_rows_are_read_gzipped_and_checked(tmp_path):
  path = runtime_run(tmp_path / "a")
  plain = compare.read_run(path)
  rows = os.path.join(path, "metrics.jsonl")
  with open(rows, "rb") as src, gzip.open(rows + ".gz", "wb") as dst:
    dst.write(src.read())
  os.remove(rows)
  archived = compare.read_run(path)
  np.testing.assert_array_equal(archived.commits["clock"],
                                plain.commits["clock"])
  assert archived.summary == plain.summary
  with open(rows + ".gz", "rb") as f:
    data = f.read()
  with open(rows + ".gz", "wb") as f:
    f.write(data[:len(data) // 2])
  with pytest.raises(compare.RunDirError,
                     match=re.escape(f"{rows}.gz: cannot read")):
    compare.read_run(path)


@pytest.mark.parametrize("field, value", [
    ("num_commits", "16"), ("num_commits", True), ("final_clock", -1),
    ("final_test_accuracy", "0.9"), ("training_seconds", [1.0]),
    ("completed", "yes"), ("outcome", 1), ("worker_commits", [1, "2"]),
    ("metrics", ["accuracy"])])
def test_summary_fields_of_the_wrong_type_are_named(tmp_path, field, value):
  path = runtime_run(tmp_path / "a", summary={field: value})
  with pytest.raises(compare.RunDirError, match=re.escape(
      f"summary.json: field {field!r} is {value!r}, not ")):
    compare.read_run(path)
