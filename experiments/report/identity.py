"""Whether the run in a cell's directory is the run the study's design puts there.

A cell's directory can hold another run: one copied in from another cell,
or one a user trained there by hand with other flags. Its config.json says
what it ran with; every setting must hold the value the cell's flags give
it (`design.RunSpec.argv`: strategy, n, λ, seed, epochs, data assignment,
cluster, each flag of its flagfiles, and the defaults they leave), or the
run is not the cell's. The runner moves such a run aside and trains the cell's own; the
report leaves it out and names it.
"""

import json
import os
from typing import Dict, Optional

from experiments import flags as flags_lib
from experiments.report import design

# What config.json holds besides settings the design can give.
_NOT_DESIGNED = ("workdir", "resume")


def _as_json(value):
  """`value` as config.json holds it (a tuple is a list)."""
  return json.loads(json.dumps(value))


def expected(spec: design.RunSpec) -> Dict[str, object]:
  """Every setting of the cell's run, as its config.json records it.

  What the cell's flags give, and what they leave to a default or to the
  strategy's paper default (`TrainConfig.resolved`); only the settings of
  the run's backend (a processes run ignores its flagfile's simulator
  settings, and does not record them).

  Example:
    >>> spec = design.RunSpec(design.GRID, "aeasgd", 2, 4, 1, 2.0,
    ...                       ("--data_assignment=stream",))
    >>> e = expected(spec)
    >>> e["strategy"], e["num_workers"], e["seed"], e["data_assignment"]
    ('aeasgd', 2, 1, 'stream')
    >>> e["learning_rate"], e["rho"]  # AEASGD's paper defaults.
    (0.001, 5.0)
  """
  values = design._parsed(spec.argv())  # pylint: disable=protected-access
  config = flags_lib.config_from_flags(values, workdir=os.devnull)
  return {name: _as_json(value)
          for name, value in config.resolved().to_dict().items()
          if name not in _NOT_DESIGNED}


def mismatch(spec: design.RunSpec, path: str) -> Optional[str]:
  """One line naming how the run in `path` differs from the cell `spec`, or None.

  A run without config.json (or with an unreadable one) is not checked
  here: nothing says what it is, and whether it completed is the reader's
  question. A setting its config.json lacks is not checked either (a run
  written before the setting existed ran with its default).

  Example:
    >>> import tempfile
    >>> spec = design.RunSpec(design.GRID, "aeasgd", 2, 4, 0, 2.0, ())
    >>> path = tempfile.mkdtemp()
    >>> with open(os.path.join(path, "config.json"), "w") as f:
    ...   _ = f.write('{"strategy": "agn", "num_workers": 2}')
    >>> print(mismatch(spec, path))  # doctest: +ELLIPSIS
    grid/aeasgd-n2-l4-s0: .../config.json: strategy: expected 'aeasgd', found 'agn'
  """
  config_path = os.path.join(path, "config.json")
  try:
    with open(config_path) as f:
      found = json.load(f)
  except (OSError, ValueError):
    return None
  if not isinstance(found, dict):
    return None
  differ = [f"{name}: expected {value!r}, found {found[name]!r}"
            for name, value in expected(spec).items()
            if name in found and found[name] != value]
  if not differ:
    return None
  return (f"{spec.directory or spec.section}/{spec.name}: {config_path}: "
          + "; ".join(differ))
