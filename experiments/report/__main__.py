"""`python -m experiments.report`: see experiments/report/main.py."""

from absl import app

from experiments import flags as flags_lib
from experiments.report import main

if __name__ == "__main__":
  main.define_flags()
  app.run(main.main, flags_parser=flags_lib.parse_flags_or_exit)
