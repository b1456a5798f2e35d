"""--metric_writers: TensorBoard's event files read back with TensorBoard's own reader, against metrics.jsonl.

The books (`RunBook`) are fed the events a backend sends and write
metrics.jsonl and the event files side by side; what TensorBoard reads must
be what metrics.jsonl says, a resumed run included; a sweep's runs are one
TensorBoard run each. tests/e2e/test_package_e2e.py reads back the event files of a
real run of the installed `agn-train`.
"""

import collections
import json
import os
import sys
import time

import numpy as np
import pytest
from absl import flags
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.backend.event_processing import event_multiplexer

from agn_jax import metric_writers
from agn_jax.config import TrainConfig
from agn_jax.runtime import events as ev
from agn_jax.runtime.bookkeeping import RunBook
from agn_jax.wire import CommitMeta
from experiments import flags as flags_lib
from experiments import sweep

# Staleness of commits 1..12, uneven so that every bucket count matters.
STALENESS = [0, 1, 1, 0, 2, 3, 1, 1, 2, 0, 4, 1]


def _config(workdir, **overrides):
  return TrainConfig(num_workers=2, workdir=str(workdir),
                     metric_writers="jsonl,tensorboard", **overrides).resolved()


def _session(book, clocks, shift=0.0, eval_every=4, final=12):
  """Commits at `clocks` (their numbers moved by `shift`), an evaluation every `eval_every`."""
  book.start_training()
  t0 = time.time()
  for clock in clocks:
    meta = CommitMeta(worker=clock % 2, clock=clock - 1 - STALENESS[clock - 1],
                      loss=1.0 / clock + shift,
                      metrics={"accuracy": clock / 13 + shift},
                      time=t0 + 0.01 * clock)
    book.handle(ev.Committed(
        time=t0 + 0.01 * clock, meta=meta, clock=clock,
        staleness=STALENESS[clock - 1], sim_time=0.25 * clock + shift))
    if clock % eval_every == 0:
      book.handle(ev.Evaluated(
          time=t0 + 0.01 * clock + 0.005, clock=clock,
          loss=2.0 / clock + shift, metrics={"accuracy": clock / 14 + shift},
          final=clock == final, sim_time=0.25 * clock + shift))


def _rows(workdir, kind):
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [r for r in map(json.loads, f) if r["event"] == kind]


def _reader(logdir):
  reader = event_accumulator.EventAccumulator(str(logdir), size_guidance={
      event_accumulator.SCALARS: 0, event_accumulator.HISTOGRAMS: 0,
      event_accumulator.TENSORS: 0})
  reader.Reload()
  return reader


def _scalars(reader, tag):
  return [(e.step, e.value) for e in reader.Scalars(tag)]


def _counts(histogram):
  """{staleness: commits} of a histogram with one bucket per integer."""
  return {int(round(limit - 0.5)): int(count) for limit, count in
          zip(histogram.bucket_limit, histogram.bucket) if count}


def _between_evals(workdir):
  """The staleness counts of the commits between one evaluation row and the next, in metrics.jsonl's order."""
  out, current = [], []
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    for row in map(json.loads, f):
      if row["event"] == "commit":
        current.append(row["staleness"])
      elif row["event"] == "eval" and current:
        out.append(dict(collections.Counter(current)))
        current = []
  if current:
    out.append(dict(collections.Counter(current)))
  return out


def assert_events_match_metrics(workdir, metrics=("accuracy",)):
  """Everything the event files say, against metrics.jsonl and config.json; `metrics` the task's."""
  reader = _reader(workdir)
  commits, evals = _rows(workdir, "commit"), _rows(workdir, "eval")
  assert commits and evals
  f32 = lambda rows, key: [(r["clock"], float(np.float32(r[key])))
                           for r in rows]
  for key in ("loss", *metrics, "staleness", "time"):
    assert _scalars(reader, f"commit/{key}") == f32(commits, key), key
  for key in ("loss", *metrics, "time"):
    assert _scalars(reader, f"eval/{key}") == f32(evals, key), key
  if "sim_time" in commits[0]:
    assert _scalars(reader, "commit/sim_time") == f32(commits, "sim_time")
    assert _scalars(reader, "eval/sim_time") == f32(evals, "sim_time")
  # The staleness histograms: one per evaluation (the commits since the
  # previous one), and the whole run's at its end.
  everything = dict(collections.Counter(c["staleness"] for c in commits))
  (run,) = reader.Histograms("staleness/run")
  assert _counts(run.histogram_value) == everything
  assert run.step == commits[-1]["clock"]
  per_eval = [_counts(h.histogram_value)
              for h in reader.Histograms("staleness")]
  assert per_eval == _between_evals(workdir)
  # The resolved config, as JSON text (a resumed session's last).
  text = reader.Tensors("config/text_summary")[-1].tensor_proto.string_val[
      0].decode()
  assert text.startswith("```json\n") and text.endswith("\n```")
  with open(os.path.join(workdir, "config.json")) as f:
    config = json.load(f)
  assert json.loads(text[len("```json\n"):-len("\n```")]) == {
      k: v for k, v in config.items() if k != "command"}
  return reader


def test_event_files_hold_what_metrics_jsonl_holds(tmp_path):
  book = RunBook(_config(tmp_path / "run"), None, "test")
  book.open()
  _session(book, range(1, 13))
  book.write_summary(interrupted=False)
  book.close()
  assert_events_match_metrics(tmp_path / "run")
  names = [n for n in os.listdir(tmp_path / "run") if "tfevents" in n]
  assert len(names) == 1


def test_a_resumed_run_supersedes_what_ran_past_its_checkpoint(tmp_path):
  workdir = tmp_path / "run"
  book = RunBook(_config(workdir), None, "test")
  book.open()
  _session(book, range(1, 11))
  book.close()
  # The checkpoint was taken at clock 6: the rows after it are cut back on
  # resume, and the event file (flushed when the session ended) ran past it.
  with open(workdir / "metrics.jsonl", "rb") as f:
    lines = f.readlines()
  offset = sum(len(line) for line in lines if json.loads(line)["clock"] <= 6)
  assert _scalars(_reader(workdir), "commit/loss")[-1][0] == 10

  book = RunBook(_config(workdir, resume=True), None, "test")
  book.open(offset)
  _session(book, range(7, 13), shift=100.0)
  book.write_summary(interrupted=False)
  book.close()
  commits = _rows(workdir, "commit")
  assert [c["clock"] for c in commits] == list(range(1, 13))
  assert commits[6]["loss"] > 100  # The new session's numbers.
  reader = assert_events_match_metrics(workdir)
  # TensorBoard dropped the first session's steps 7..10, once for all tags.
  assert [s for s, _ in _scalars(reader, "commit/staleness")] == list(
      range(1, 13))


def test_jsonl_alone_writes_no_event_file(tmp_path):
  book = RunBook(TrainConfig(num_workers=2, workdir=str(tmp_path)).resolved(),
                 None, "test")
  book.open()
  _session(book, range(1, 5))
  book.write_summary(interrupted=False)
  book.close()
  assert not [n for n in os.listdir(tmp_path) if "tfevents" in n]
  assert len(_rows(tmp_path, "commit")) == 4


def test_writer_names(monkeypatch):
  assert metric_writers.parse("jsonl") == ("jsonl",)
  assert metric_writers.parse("tensorboard,jsonl,tensorboard") == (
      "jsonl", "tensorboard")
  with pytest.raises(ValueError, match="unknown writer 'wandb'"):
    metric_writers.parse("jsonl,wandb")
  # A library that cannot be imported (as when it is not installed).
  monkeypatch.setitem(sys.modules, "tensorboardX", None)
  with pytest.raises(ValueError) as error:
    metric_writers.parse("jsonl,tensorboard")
  assert str(error.value) == (
      "metric_writers: tensorboard needs tensorboardX, which is not "
      "installed; pip install 'agn-jax[tensorboard]'")


def test_missing_library_is_one_line_before_anything_starts(
    tmp_path, monkeypatch, capsys):
  monkeypatch.setitem(sys.modules, "tensorboardX", None)
  values = flags.FlagValues()
  flags_lib.define_train_flags(values)
  with pytest.raises(SystemExit) as exit_:
    flags_lib.parse_flags_or_exit(
        ["train", "--metric_writers=jsonl,tensorboard"], values)
  assert exit_.value.code == 2
  (line,) = capsys.readouterr().err.strip().splitlines()
  assert line == ("train: error: flag --metric_writers=jsonl,tensorboard: "
                  "tensorboard needs tensorboardX, which is not installed; "
                  "pip install 'agn-jax[tensorboard]'")
  # The Python API refuses it too, before the workdir exists.
  from agn_jax.runtime import train  # pylint: disable=g-import-not-at-top
  with pytest.raises(ValueError, match=r"agn-jax\[tensorboard\]"):
    train(_config(tmp_path / "run"))
  assert not (tmp_path / "run").exists()


def test_a_sweep_gives_every_run_the_writers_and_tensorboard_one_run_per_cell(
    tmp_path):
  values = flags.FlagValues()
  sweep.define_flags(values)
  argv = ["sweep", "--config=quickstart", "--num_workers=2,3",
          "--metric_writers=jsonl,tensorboard"]
  flags_lib.parse_flags_or_exit(argv, values)
  typed = flags_lib.typed_flags(argv, values)
  runs = []
  for n in (2, 3):
    workdir = sweep.run_dir(str(tmp_path), "agn", n, 10)
    config = sweep.run_config(values, typed, {}, "agn", n, 10, workdir, False)
    assert config.metric_writers == "jsonl,tensorboard"
    book = RunBook(config.resolved(), None, "test")
    book.open()
    _session(book, range(1, 5 + n))
    book.write_summary(interrupted=False)
    book.close()
    assert_events_match_metrics(workdir)
    runs.append(os.path.basename(workdir))
  # `tensorboard --logdir SWEEP_DIR` overlays them, named by subdirectory.
  multiplexer = event_multiplexer.EventMultiplexer()
  multiplexer.AddRunsFromDirectory(str(tmp_path))
  multiplexer.Reload()
  assert sorted(multiplexer.Runs()) == runs == ["agn-n2-l10", "agn-n3-l10"]
  for run in runs:
    assert "commit/loss" in multiplexer.Runs()[run]["scalars"]
