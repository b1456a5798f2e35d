"""Flags and the program of `python -m experiments.report`.

Runs the preset's pending runs (a study resumes by running the same command
again), then writes REPORT.md and its plots from whatever runs have
completed, so a partial study gives a partial report.
"""

import os
import shlex
import sys

from absl import flags
from absl import logging

from agn_jax import workdir as workdir_lib
from agn_jax.errors import WorkdirBusy, WorkdirError
from experiments import compare
from experiments import flags as flags_lib
from experiments import rundirs
from experiments.report import archive
from experiments.report import design
from experiments.report import language_model
from experiments.report import runner
from experiments.report import sections

FLAGS = flags.FLAGS
PROGRAM = "report"
# Seconds per training sample on this 2-core CPU (an Intel Xeon), from the
# committed cpu study: 5,473 s for its 30.3 M samples (grid, DOWNPOUR,
# ablation, DiLoCo; report_paper.flags); the estimate before a study has
# completed runs of its own.
CPU_SECONDS_PER_SAMPLE = 5473 / 30.3e6


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  flags.DEFINE_enum("preset", "cpu", list(design.PRESETS),
                    "The study: cpu (this CPU, ~5 h), refit (cpu's cells on "
                    "the refitted cluster, 3 seeds at n = 40, λ = 10 and 20, "
                    "this CPU, ~10 h), paper (the full "
                    "grid, 3 seeds, one GPU), beyond (methods after the "
                    "paper, this CPU, ~2 h) or quick (seconds, for tests).",
                    flag_values=flag_values)
  flags.DEFINE_string("study_dir", None, "Where the runs go (default: "
                      "runs/report-<preset>). Running the same command again "
                      "resumes the study.", flag_values=flag_values)
  flags.DEFINE_string("output_dir", None, "Where REPORT.md and its plots go "
                      "(default: experiments/results, experiments/results/"
                      "<preset> for beyond and refit, or <study_dir>/results "
                      "for --preset=quick).", flag_values=flag_values)
  flags.DEFINE_string("paper_study_dir", os.path.join("runs", "report-paper"),
                      "A --preset=paper study whose grid the report shows "
                      "beside this one's, if it holds runs.",
                      flag_values=flag_values)
  flags.DEFINE_list("sections", list(design.RUN_SECTIONS), "Sections whose "
                    "runs to run; the report always covers every section from "
                    "the runs found.", flag_values=flag_values)
  flags.DEFINE_string("archive_dir", None, "Where the study's results are "
                      "kept as files to commit: each completed run's config, "
                      "summary and rows, and the study's books. A study "
                      "restores them on start, so it resumes on a fresh "
                      "clone (default: <output_dir>/study; none for "
                      "--preset=quick; '' for none).", flag_values=flag_values)
  flags.DEFINE_bool("report_only", False, "Run nothing; rewrite REPORT.md "
                    "from the runs found.", flag_values=flag_values)
  flags.DEFINE_bool("progress", True, "Draw each run's progress bar.",
                    flag_values=flag_values)
  compare.define_efficiency_flags(flag_values)
  flags.register_validator(
      "sections", lambda v: bool(v) and set(v) <= set(design.RUN_SECTIONS),
      message="--sections accepts " + ", ".join(design.RUN_SECTIONS)
      + ", comma-separated", flag_values=flag_values)


def main(argv):
  del argv
  # The report prints a line a run of its own; each run's "training in ..."
  # line is the train CLI's. -v (--verbosity) brings them back.
  if not FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)
  p = design.preset(FLAGS.preset)
  study_dir = FLAGS.study_dir or os.path.join("runs", f"report-{p.name}")
  if os.path.lexists(study_dir) and not os.path.isdir(study_dir):
    flags_lib.exit_with_error(PROGRAM, f"--study_dir={study_dir} is a file",
                              status=2)
  output_dir = FLAGS.output_dir or (
      os.path.join(study_dir, "results") if p.name == "quick" else
      os.path.join("experiments", "results", p.name)
      if p.name in ("beyond", "refit") else
      os.path.join("experiments", "results"))
  archive_dir = (FLAGS.archive_dir if FLAGS.archive_dir is not None else
                 None if p.name == "quick" else archive.default_dir(output_dir))
  archived = bool(archive_dir) and os.path.isfile(
      os.path.join(archive_dir, archive.BOOKS))
  if FLAGS.report_only and not os.path.isdir(study_dir) and not archived:
    flags_lib.exit_with_error(PROGRAM, f"--study_dir={study_dir} holds no "
                              f"study ({runner.STUDY_FILE}); run one first",
                              status=2)
  # One study per directory, as one run per workdir: a second report would
  # move the first one's live runs aside and share its ledger.
  try:
    lock = workdir_lib.lock_workdir(
        study_dir, create=not FLAGS.report_only or archived,
        owner=shlex.join(sys.argv),
        flag="--study_dir")
  except (WorkdirBusy, WorkdirError) as e:
    flags_lib.exit_with_error(PROGRAM, f"--study_dir={study_dir}: {e}",
                              status=2)
  with lock:
    _main(p, study_dir, output_dir, archive_dir or None)


def _main(p, study_dir, output_dir, archive_dir):
  """The study in `study_dir`, whose lock this process holds."""
  from experiments import train as train_lib  # pylint: disable=g-import-not-at-top
  try:
    study = runner.Study(study_dir, archive_dir)
  except flags_lib.UsageError as e:
    flags_lib.exit_with_error(PROGRAM, e, status=2)
  if study.preset not in (None, p.name):
    flags_lib.exit_with_error(
        PROGRAM, f"--study_dir={study_dir} holds a --preset={study.preset} "
        f"study, not {p.name}; choose another --study_dir", status=2)
  if archive_dir:
    try:
      restored, _ = archive.sync(p, study)
    except ValueError as e:
      flags_lib.exit_with_error(PROGRAM, f"--archive_dir: {e}", status=2)
    except (OSError, EOFError) as e:
      flags_lib.exit_with_error(PROGRAM, f"--archive_dir={archive_dir}: "
                                "cannot read or write "
                                f"({getattr(e, 'strerror', None) or e})")
    if restored:
      print(f"{restored} completed runs restored from {archive_dir}")
  if FLAGS.report_only and study.preset is None:
    flags_lib.exit_with_error(PROGRAM, f"--study_dir={study_dir} holds no "
                              f"study ({runner.STUDY_FILE}); run one first",
                              status=2)
  command = shlex.join(["python", "-m", "experiments.report",
                        f"--preset={p.name}"] + [
                            a for a in sys.argv[1:]
                            if not a.startswith(("--preset", "--report_only",
                                                 "--sections", "--progress",
                                                 "--noprogress"))])
  failures = []
  if not FLAGS.report_only:
    study.data["preset"] = p.name
    if not study.data.get("command"):  # The books start with None.
      study.data["command"] = command
    study.save()
    on_cpu = p.platform in (None, "cpu")
    rate = runner.seconds_per_sample(study, exclude=(design.BEYOND_LM,)) or (
        CPU_SECONDS_PER_SAMPLE if on_cpu else None)
    # The language model's windows cost otherwise than MNIST's images.
    lm_rate = runner.seconds_per_sample(study, design.BEYOND_LM) or (
        language_model.CPU_SECONDS_PER_WINDOW if on_cpu else None)
    c = design.cost(p, rate, {design.BEYOND_LM: lm_rate})
    pending = sum(not os.path.isdir(r.path(study_dir)) for r in p.runs)
    print(f"{p.name}: {p.description}: {c['runs']} runs ({pending} not "
          f"started), {c['samples'] / 1e6:.1f} M samples, estimated "
          + (f"{c['seconds'] / 60:.0f} min" if c["seconds"] == c["seconds"]
             else "time unknown until a run completes on this device")
          + f" in all; study in {study_dir}")
    try:
      with train_lib.sigterm_as_interrupt():
        failures = runner.run_all(p, study, set(FLAGS.sections),
                                  show_progress=FLAGS.progress)
    except KeyboardInterrupt as e:
      terminated = train_lib.was_terminated(e)
      _write(p, study, output_dir)
      flags_lib.exit_with_error(
          PROGRAM, f"{'terminated' if terminated else 'interrupted'}; the "
          "report shows the runs so far; run the same command to continue",
          status=143 if terminated else 130)
  path = _write(p, study, output_dir)
  print(f"report: {path}")
  if failures:
    flags_lib.exit_with_error(PROGRAM, f"{len(failures)} runs failed: "
                              + "; ".join(failures))


README = "README.md"
CLAIMS_BEGIN = "<!-- report-claims: quoted from experiments/results/REPORT.md -->"
CLAIMS_END = "<!-- /report-claims -->"


def claims_table(report: str) -> str:
  """The claims table of a REPORT.md's text."""
  start = report.index("| claim |")
  end = report.index("\n\n", start)
  return report[start:end]


def quote_in_readme(report_path: str, readme: str = README) -> bool:
  """Copies the committed report's claims table into the README; whether it changed."""
  with open(report_path) as f:
    table = claims_table(f.read())
  with open(readme) as f:
    text = f.read()
  start = text.index(CLAIMS_BEGIN) + len(CLAIMS_BEGIN)
  end = text.index(CLAIMS_END)
  new = text[:start] + "\n" + table + "\n" + text[end:]
  if new != text:
    rundirs.write_report(readme, new)
  return new != text


def _write(p, study, output_dir) -> str:
  try:
    ctx = sections.Context.build(
        p, study, output_dir, (FLAGS.efficiency_curve,
                               FLAGS.efficiency_window),
        FLAGS.paper_study_dir)
    path = sections.write(ctx)
    for why in map(ctx.results.refusal, p.runs):
      if why:
        print(f"left out: {why}")
    # The committed report's verdicts are quoted in the README.
    if (p.name != "quick" and os.path.isfile(README) and
        os.path.abspath(output_dir) == os.path.abspath(
            os.path.join("experiments", "results"))):
      quote_in_readme(path)
    return path
  except OSError as e:
    flags_lib.exit_with_error(PROGRAM, f"--output_dir={output_dir}: cannot "
                              f"write ({e.strerror or e})")
