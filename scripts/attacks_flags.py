"""Attacks 16. Round four: bad flag values, --help, --config, sweeps.

Mixed into `attacks.Attacks`; each `attack_*` method raises `Failed` or
returns a note. See attacks.py for how they run.
"""

# pylint: disable=wildcard-import,unused-wildcard-import
from attacklib import *


class FlagAttacks:
  """bad flag values, --help, --config, sweeps (issue 34)."""
