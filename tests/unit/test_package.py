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

import pytest
from absl import flags

from experiments import console
from experiments import flags as flags_lib
from helpers import REPO

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
