"""The end-to-end half of tests/unit/test_package.py: real processes, subprocesses or whole runs."""

import os
import re
import shutil
import site
import subprocess
import sys
import sysconfig
import zipfile

import pytest

from experiments import console
from experiments import flags as flags_lib
from helpers import REPO
import test_metric_writers
from test_package import _pyproject, tomllib


def _build_wheel(tmp_path):
  """The wheel of agn-jax, built from a copy (the build writes nothing into the checkout)."""
  source = tmp_path / "source"
  source.mkdir()
  for name in ("pyproject.toml", "README.md"):
    shutil.copy(REPO / name, source / name)
  for name in ("agn_jax", "experiments"):
    shutil.copytree(REPO / name, source / name,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
  wheels = tmp_path / "wheels"
  pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
  subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation",
                  "--no-index", "-w", str(wheels), str(source)],
                 check=True, capture_output=True, timeout=300)
  (wheel,) = wheels.glob("agn_jax-0.1.0-py3-none-any.whl")
  return wheel


def test_the_wheel_ships_every_config_and_the_pins(tmp_path):
  wheel = _build_wheel(tmp_path)
  with zipfile.ZipFile(wheel) as z:
    files = set(z.namelist())
    metadata = z.read("agn_jax-0.1.0.dist-info/METADATA").decode()
  for name in flags_lib.available_configs():
    assert f"experiments/configs/{name}.flags" in files, name
  assert not [f for f in files if f.startswith("tests/")]
  requires = re.findall(r"^Requires-Dist: ([^;\n]+)$", metadata, re.M)
  assert sorted(requires) == sorted(_pyproject()["dependencies"])
  # The console scripts the installed wheel would create.
  with zipfile.ZipFile(wheel) as z:
    entry_points = z.read("agn_jax-0.1.0.dist-info/entry_points.txt").decode()
  section = entry_points.split("[console_scripts]", 1)[1].split("\n[", 1)[0]
  assert dict(tuple(part.strip() for part in line.split("=", 1))
              for line in section.splitlines() if "=" in line
              ) == _pyproject()["scripts"]


# soak: test_the_wheel_ships_every_config_and_the_pins covers what the wheel
# holds, test_console_scripts_run_the_programs the console scripts'
# programs, and tests/unit/test_metric_writers.py the TensorBoard event files, in
# the suite; this one installs the wheel into a fresh environment and trains
# with `agn-train` outside the checkout.
@pytest.mark.soak
def test_the_wheel_installs_and_trains_outside_the_checkout(tmp_path):
  wheel = _build_wheel(tmp_path)

  # A fresh environment. --system-site-packages reaches the interpreter's
  # own; the suite's packages (its virtual environment's, when it runs in
  # one) come through a .pth file, so nothing is downloaded.
  venv = tmp_path / "venv"
  subprocess.run([sys.executable, "-m", "venv", "--system-site-packages",
                  "--without-pip", str(venv)], check=True, timeout=120)
  python = str(venv / "bin" / "python")
  purelib = subprocess.run(
      [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
      check=True, capture_output=True, text=True).stdout.strip()
  suite = {*site.getsitepackages(), sysconfig.get_paths()["purelib"],
           sysconfig.get_paths()["platlib"]}
  with open(os.path.join(purelib, "suite-packages.pth"), "w") as f:
    f.write("\n".join(sorted(suite)) + "\n")
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  subprocess.run([python, "-m", "pip", "--disable-pip-version-check", "-q",
                  "install", "--no-deps", "--no-index", str(wheel)],
                 check=True, env=env, timeout=300)

  elsewhere = tmp_path / "elsewhere"
  elsewhere.mkdir()
  where = subprocess.run(
      [python, "-c", "import importlib.util as u; "
       "print(u.find_spec('agn_jax').origin); "
       "print(u.find_spec('experiments').origin)"],
      cwd=elsewhere, env=env, check=True, capture_output=True, text=True)
  for origin in where.stdout.split():
    assert origin.startswith(purelib), where.stdout
  for name in console.SCRIPTS:
    assert (venv / "bin" / name).is_file(), name

  # The real processes backend, with TensorBoard's event files beside
  # metrics.jsonl, read back with TensorBoard's own reader.
  result = subprocess.run(
      [str(venv / "bin" / "agn-train"), "--config=quickstart", "--epochs=1",
       "--metric_writers=jsonl,tensorboard"],
      cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  (run,) = (elsewhere / "runs").iterdir()
  assert run.name.startswith("agn-n4-l10-")
  assert f"results: runs/{run.name}" in result.stdout
  summary = (run / "summary.json").read_text()
  assert '"outcome": "completed"' in summary
  test_metric_writers.assert_events_match_metrics(run)
