"""Attacks 17. Round four: verified data files, one study per directory, compare at scale.

Mixed into `attacks.Attacks`; each `attack_*` method raises `Failed` or
returns a note. See attacks.py for how they run.
"""

# pylint: disable=wildcard-import,unused-wildcard-import
from attacklib import *


class DataAttacks:
  """verified data files, one study per directory, compare at scale (issue 34)."""
