"""Attacks 18. Round four: one rule for completed, traces, leaks after kill -9.

Mixed into `attacks.Attacks`; each `attack_*` method raises `Failed` or
returns a note. See attacks.py for how they run.
"""

# pylint: disable=wildcard-import,unused-wildcard-import
from attacklib import *


class RuntimeAttacks:
  """one rule for completed, traces, leaks after kill -9 (issue 34)."""
