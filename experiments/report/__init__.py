r"""The reproduction report: runs a preset of the paper's study and writes REPORT.md.

  python -m experiments.report --preset=cpu          # ~4 h here; resumes
  python -m experiments.report --preset=paper --platform=gpu
  python -m experiments.report --preset=cpu --report_only
  python -m experiments.report --preset=beyond       # ~90 min here; DN, DyLU, codecs

Modules:
  design:   the study as data (presets, runs, budgets, cost).
  runner:   runs a preset's runs in-process and resumes; the compute ledger.
  results:  the one reader of a study's runs.
  claims:   the paper's claims, each with our figure and a verdict by a
            stated rule.
  sections: one module per section of REPORT.md.
  thesis:   the thesis' own published figures.
  main:     flags and the program.
"""
