"""The console scripts pip installs: `agn-train`, `agn-compare`, `agn-sweep`, `agn-report`.

Each runs its module exactly as `python -m experiments.<module>` does (the
module's own `__main__` block: its flags, its absl main, `train`'s signal
handling before JAX loads), so the two ways to run a program never differ.
Standard library only, so that nothing loads before the module's own block.

Example:
  >>> SCRIPTS["agn-train"]
  'experiments.train'
"""

import runpy

# Each console script and the module it runs (pyproject.toml's
# [project.scripts] names the functions below).
SCRIPTS = {
    "agn-train": "experiments.train",
    "agn-compare": "experiments.compare",
    "agn-sweep": "experiments.sweep",
    "agn-report": "experiments.report",
}


def _run(script: str) -> None:
  # alter_sys: the module runs as __main__ with its own sys.argv[0], as
  # under `python -m` (the spawned worker processes find it the same way).
  runpy.run_module(SCRIPTS[script], run_name="__main__", alter_sys=True)


def train() -> None:
  """`agn-train`: `python -m experiments.train`."""
  _run("agn-train")


def compare() -> None:
  """`agn-compare`: `python -m experiments.compare`."""
  _run("agn-compare")


def sweep() -> None:
  """`agn-sweep`: `python -m experiments.sweep`."""
  _run("agn-sweep")


def report() -> None:
  """`agn-report`: `python -m experiments.report`."""
  _run("agn-report")
