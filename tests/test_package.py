"""agn-jax as a package: its pins, its console scripts, its shipped configurations, and the wheel installed elsewhere.

pyproject.toml is the one list of what agn-jax needs; requirements.txt and
requirements-ray.txt repeat its pins for the suite and must agree with it.
The wheel tests build the package and read what it holds; the soak one
(`bash scripts/soak.sh`) also installs it into a fresh virtual environment
that reuses the suite's installed packages, and trains from a directory
outside the checkout.
"""

import glob
import importlib.util
import os
import re
import shutil
import site
import subprocess
import sys
import sysconfig
import zipfile

import pytest
from absl import flags

from experiments import console
from experiments import flags as flags_lib
from helpers import REPO
import test_metric_writers

tomllib = pytest.importorskip("tomllib")


def _pyproject():
  with open(REPO / "pyproject.toml", "rb") as f:
    return tomllib.load(f)["project"]


def _name(requirement: str) -> str:
  """The normalized project name of a requirement (`tensorboardX==2.6.5` -> `tensorboardx`)."""
  return re.split(r"[\[=<>!~; ]", requirement, maxsplit=1)[0].lower().replace(
      "_", "-")


def _expand(requirements, extras):
  """Requirements with `agn-jax[EXTRA]` replaced by that extra's own."""
  out = []
  for r in requirements:
    match = re.fullmatch(r"agn-jax\[(\w+)\]", r)
    out += _expand(extras[match.group(1)], extras) if match else [r]
  return out


def _requirements_file(name):
  with open(REPO / name) as f:
    return [line.strip() for line in f
            if line.strip() and not line.startswith("#")]


def test_requirements_files_repeat_the_pins_of_pyproject():
  project = _pyproject()
  extras = project["optional-dependencies"]
  assert set(extras) >= {"ray", "test", "report", "tensorboard"}
  suite = project["dependencies"] + _expand(extras["test"], extras)
  assert sorted(_requirements_file("requirements.txt")) == sorted(suite)
  assert _requirements_file("requirements-ray.txt") == extras["ray"]
  # Every requirement is one exact pin, and one project has one pin.
  pins = {}
  for r in project["dependencies"] + _expand(
      [r for extra in extras.values() for r in extra], extras):
    assert re.fullmatch(r"[A-Za-z0-9_.\-]+==[A-Za-z0-9_.]+", r), r
    assert pins.setdefault(_name(r), r) == r, (pins[_name(r)], r)
  # The writers' libraries are optional: not in the core.
  core = {_name(r) for r in project["dependencies"]}
  assert not core & {"tensorboardx", "tensorboard", "ray", "pytest"}


def test_console_scripts_run_the_programs():
  scripts = _pyproject()["scripts"]
  assert sorted(scripts) == ["agn-compare", "agn-report", "agn-sweep",
                             "agn-train"]
  for name, target in scripts.items():
    program = name[len("agn-"):]
    assert target == f"experiments.console:{program}"
    assert callable(getattr(console, program))
    # What `python -m experiments.PROGRAM` runs.
    assert console.SCRIPTS[name] == f"experiments.{program}"
    assert importlib.util.find_spec(f"experiments.{program}") is not None
  assert importlib.util.find_spec("experiments.report.__main__") is not None


def _parse(*args):
  values = flags.FlagValues()
  flags_lib.define_train_flags(values)
  flags_lib.parse_flags_or_exit(["train", *args], values)
  return values


def test_config_names_a_shipped_flagfile_read_in_place():
  names = flags_lib.available_configs()
  assert "quickstart" in names and "paper_mnist_agn" in names
  shipped = sorted(os.path.basename(p)[:-len(".flags")] for p in
                   glob.glob(str(REPO / "experiments/configs/*.flags")))
  assert names == shipped
  values = _parse("--config=quickstart", "--epochs=1")
  assert (values.epochs, values.num_workers, values.dataset) == (1.0, 4,
                                                                 "digits")
  assert values.batch_size == 16 and values.config is None
  # In place, as a --flagfile: a flag before it is overridden by it.
  assert _parse("--epochs=1", "--config", "quickstart").epochs == 40.0
  assert _parse("--config=paper_mnist_agn").hidden_sizes == [
      "1000", "2000", "1000"]
  # A path works too.
  path = str(REPO / "experiments/configs/mnist1d.flags")
  assert _parse(f"--config={path}").dataset == "mnist1d"


def test_every_shipped_config_parses_as_train_flags():
  for name in flags_lib.available_configs():
    values = _parse(f"--config={name}")
    assert values.config is None, name


@pytest.mark.parametrize("args, message", [
    (["--config=nope"], "train: error: --config=nope: no such configuration; "
     "the shipped ones are mnist1d, paper_mnist_aeasgd, paper_mnist_agn, "
     "quickstart, "),
    (["--config=quickstart", "--epochs=0"], "train: error: flag --epochs=0: "
     "--epochs accepts a finite number > 0"),
])
def test_bad_config_is_one_line(args, message, capsys):
  with pytest.raises(SystemExit) as exit_:
    _parse(*args)
  assert exit_.value.code == 2
  (line,) = capsys.readouterr().err.strip().splitlines()
  assert line.startswith(message), line


def test_config_inside_a_flagfile_is_one_line(tmp_path, capsys):
  path = tmp_path / "mine.flags"
  path.write_text("--config=quickstart\n--epochs=2\n")
  with pytest.raises(SystemExit) as exit_:
    _parse(f"--flagfile={path}")
  assert exit_.value.code == 2
  (line,) = capsys.readouterr().err.strip().splitlines()
  assert "--config names a configuration on the command line only" in line


def test_package_data_ships_every_config():
  with open(REPO / "pyproject.toml", "rb") as f:
    setuptools = tomllib.load(f)["tool"]["setuptools"]
  assert setuptools["package-data"]["experiments"] == ["configs/*.flags"]


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


@pytest.mark.slow
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
# programs, and tests/test_metric_writers.py the TensorBoard event files, in
# the suite; this one installs the wheel into a fresh environment and trains
# with `agn-train` outside the checkout.
@pytest.mark.slow
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
