"""Tests for the config: each backend's options, from flags and records, and the one source of every setting.

Expected values are the settings written out here, not read back from the
config module.
"""

import dataclasses
import inspect
import json
import sys

import pytest
from absl import flags

from agn_jax import config as config_lib
from agn_jax.config import (ProcessesOptions, RayOptions, SimulatedOptions,
                            TrainConfig)
from agn_jax.runtime import backend as backend_lib
from experiments import flags as flags_lib


def _flags(*args):
  values = flags.FlagValues()
  flags_lib.define_train_flags(values)
  values(["train", *args])
  return values


def _from_flags(*args, **overrides):
  """The config of a command line whose flags were all typed on it."""
  values = _flags(*args)
  return flags_lib.config_from_flags(
      values, flags_lib.typed_flags(["train", *args], values),
      workdir="/tmp/unused", **overrides)


def test_every_backend_has_its_options_class():
  assert set(config_lib._OPTIONS) == set(backend_lib.available())  # pylint: disable=protected-access
  for name in backend_lib.available():
    assert config_lib.options_class(name).backend == name
  with pytest.raises(ValueError, match="backend must be one of"):
    config_lib.options_class("mpi")


def test_a_config_gets_its_backends_default_options():
  assert TrainConfig().options == ProcessesOptions()
  assert TrainConfig(backend="simulated").options == SimulatedOptions(
      cluster="none", speed_model="constant", eval_every_rounds=10)
  assert TrainConfig(backend="ray").options == RayOptions(
      num_slots=None, cache_dir=None, ray_address="local")


def test_flags_fill_the_chosen_backends_options():
  config = _from_flags("--backend=simulated", "--cluster=paper",
                       "--speed_model=lognormal:0.5", "--latency_ms=2",
                       "--eval_every_rounds=0", "--workers_per_call=3")
  assert config.options == SimulatedOptions(
      cluster="paper", speed_model="lognormal:0.5", latency_ms=2.0,
      eval_every_rounds=0, workers_per_call=3)
  assert _from_flags("--num_slots=3", "--cache_dir=").options == (
      ProcessesOptions(num_slots=3, cache_dir=""))
  assert _from_flags("--backend=ray", "--ray_address=auto",
                     "--num_slots=2").options == RayOptions(
                         num_slots=2, ray_address="auto")


def test_every_option_is_a_flag_that_names_its_backends():
  values = _flags()
  expected = {"num_slots": "Processes and ray backends: ",
              "cache_dir": "Processes and ray backends: ",
              "cluster": "Simulated backend: ",
              "speed_model": "Simulated backend: ",
              "bandwidth_gbps": "Simulated backend: ",
              "latency_ms": "Simulated backend: ",
              "server_apply_ms": "Simulated backend: ",
              "workers_per_call": "Simulated backend: ",
              "eval_every_rounds": "Simulated backend: ",
              "eval_every_commits": "Simulated backend: ",
              "ray_address": "Ray backend: "}
  options = [n for n in config_lib.setting_names() if config_lib.owners(n)]
  assert sorted(options) == sorted(expected)
  for name, prefix in expected.items():
    # An enum flag's help begins with its choices, as absl writes it.
    assert values[name].help.split(">: ")[-1].startswith(prefix), name
  assert values["cluster"].default == "none"
  # The instruments are every backend's.
  assert not any(config_lib.owners(n) for n in (
      "diagnostics", "diagnostics_subsample", "diagnostics_every"))
  assert values["eval_every_rounds"].default == 10
  assert values["eval_every_commits"].default == 0
  assert values["ray_address"].default == "local"
  assert not config_lib.owners("epochs")
  assert "backend" not in values["epochs"].help


def test_a_typed_flag_of_another_backend_is_refused():
  with pytest.raises(ValueError) as error:
    _from_flags("--cluster=paper")
  assert str(error.value) == ("--cluster is a setting of the simulated "
                              "backend; --backend=processes does not use it")
  with pytest.raises(ValueError, match="--num_slots is a setting of the "
                     "processes and ray backends; --backend=simulated"):
    _from_flags("--backend=simulated", "--num_slots=2")
  with pytest.raises(ValueError, match="--ray_address is a setting of the "
                     "ray backend"):
    _from_flags("--backend=processes", "--ray_address=auto")


def test_a_flagfiles_setting_of_another_backend_is_ignored(tmp_path):
  # One flagfile for a study whose runs use two backends.
  flagfile = tmp_path / "study.flags"
  flagfile.write_text("--backend=simulated\n--cluster=paper\n"
                      "--eval_every_rounds=1\n")
  args = [f"--flagfile={flagfile}", "--backend=processes"]
  values = _flags(*args)
  config = flags_lib.config_from_flags(
      values, flags_lib.typed_flags(["train", *args], values), workdir="x")
  assert config.options == ProcessesOptions()
  assert "cluster" not in config.to_dict()
  assert flags_lib.config_from_flags(
      _flags(f"--flagfile={flagfile}"), workdir="x").options == (
          SimulatedOptions(cluster="paper", eval_every_rounds=1))


def test_options_that_do_not_fit_are_one_line_at_parse_time(capsys):
  values = flags.FlagValues()
  flags_lib.define_train_flags(values)
  with pytest.raises(SystemExit) as exit_:
    flags_lib.parse_flags_or_exit(
        ["train", "--backend=simulated", "--bandwidth_gbps=1"], values)
  assert exit_.value.code == 2
  (line,) = capsys.readouterr().err.strip().splitlines()
  assert line == ("train: error: --bandwidth_gbps needs --cluster=this_host "
                  "or paper (--cluster=none counts local steps, not seconds)")
  # Another backend's run does not read them.
  values = flags.FlagValues()
  flags_lib.define_train_flags(values)
  flags_lib.parse_flags_or_exit(["train", "--bandwidth_gbps=1"], values)


def test_another_backends_options_are_refused_unless_they_say_nothing():
  with pytest.raises(ValueError) as error:
    TrainConfig(options=SimulatedOptions(cluster="paper"))
  assert str(error.value) == ("cluster='paper' is a setting of the simulated "
                              "backend; backend 'processes' does not use it")
  # Defaults say nothing: they become this backend's.
  assert TrainConfig(options=SimulatedOptions()).options == ProcessesOptions()
  assert dataclasses.replace(TrainConfig(), backend="simulated").options == (
      SimulatedOptions())
  # What two backends share carries over.
  config = TrainConfig(options=ProcessesOptions(num_slots=2, cache_dir=""))
  assert dataclasses.replace(config, backend="ray").options == RayOptions(
      num_slots=2, cache_dir="", ray_address="local")
  with pytest.raises(ValueError, match="ray_address='auto' is a setting of "
                     "the ray backend; backend 'processes'"):
    TrainConfig(options=RayOptions(ray_address="auto"))


def test_validate_checks_the_options_once():
  with pytest.raises(ValueError, match=r"num_slots accepts an integer in \[1, 2147483647\] "
                     r"\(or leave it unset\), got 0"):
    TrainConfig(options=ProcessesOptions(num_slots=0)).validate()
  with pytest.raises(ValueError, match="--server_apply_ms needs "
                     "--cluster=this_host or paper"):
    TrainConfig(backend="simulated", options=SimulatedOptions(
        server_apply_ms=5.0)).validate()
  with pytest.raises(ValueError, match="speed_model"):
    TrainConfig(backend="simulated",
                options=SimulatedOptions(speed_model="fast")).validate()
  config = TrainConfig(backend="simulated", options=SimulatedOptions(
      cluster="paper", server_apply_ms=5.0))
  assert config.validate().options == config.options
  config.options = {"cluster": "paper"}  # Not an options object.
  with pytest.raises(ValueError, match="options of backend 'simulated' must "
                     "be a SimulatedOptions, got dict"):
    config.validate()


@pytest.mark.parametrize("config", [
    TrainConfig(strategy="aeasgd", rho=2.0, hidden_sizes=(8, 4),
                options=ProcessesOptions(num_slots=3, cache_dir="")),
    TrainConfig(backend="simulated", epochs=2.0, options=SimulatedOptions(
        cluster="paper", speed_model="speeds:1,2", latency_ms=0.5,
        workers_per_call=2, eval_every_rounds=0)),
    TrainConfig(backend="ray", options=RayOptions(ray_address="auto")),
], ids=["processes", "simulated", "ray"])
def test_records_round_trip(config):
  record = json.loads(json.dumps(config.to_record()))
  assert TrainConfig.from_dict(record) == config
  # Flat: a setting's key is its flag's name, the backend's own included.
  options = dataclasses.asdict(config.options)
  assert {k: record[k] for k in options} == options
  assert set(record) == set(TrainConfig().to_dict()) - {
      "num_slots", "cache_dir"} | set(options) | {"elastic_alpha"}


def test_from_dict_reads_only_the_records_backends_settings():
  # A record that lists every backend's settings.
  record = dict(TrainConfig().to_dict(), backend="processes", num_slots=4,
                cluster="paper", eval_every_rounds=1, ray_address="auto",
                command="python -m experiments.train")
  assert TrainConfig.from_dict(record).options == ProcessesOptions(
      num_slots=4)
  record["backend"] = "simulated"
  assert TrainConfig.from_dict(record).options == SimulatedOptions(
      cluster="paper", eval_every_rounds=1)


def test_resuming_keeps_the_saved_options_and_takes_the_typed_ones(tmp_path):
  saved = TrainConfig(backend="simulated", workdir=str(tmp_path),
                      options=SimulatedOptions(cluster="paper",
                                               eval_every_rounds=2))
  (tmp_path / "config.json").write_text(json.dumps(saved.to_record()))

  def resumed(*args):
    values = _flags(*args)
    return flags_lib.resumed_config(
        values, str(tmp_path), flags_lib.typed_flags(["train", *args], values))

  config = resumed("--resume", "--epochs=80")
  assert config.options == saved.options
  assert (config.backend, config.epochs, config.resume) == (
      "simulated", 80.0, True)
  assert resumed("--resume", "--latency_ms=3").options == SimulatedOptions(
      cluster="paper", eval_every_rounds=2, latency_ms=3.0)
  # The saved backend decides: --num_slots is no setting of this run.
  with pytest.raises(ValueError, match="--num_slots is a setting of the "
                     "processes and ray backends; --backend=simulated"):
    resumed("--resume", "--num_slots=2")


def test_a_missing_extra_and_an_impossible_cache_are_refused_by_validate(
    tmp_path, monkeypatch):
  monkeypatch.setitem(sys.modules, "ray", None)  # As when not installed.
  with pytest.raises(ValueError) as caught:
    TrainConfig(backend="ray", options=RayOptions()).validate()
  assert str(caught.value) == ("--backend=ray needs ray, which is not "
                               "installed; pip install 'agn-jax[ray]'")
  regular = tmp_path / "file"
  regular.write_text("x")
  monkeypatch.setenv("AGN_JAX_CACHE_DIR", str(regular / "cache"))
  with pytest.raises(ValueError) as caught:
    TrainConfig().validate()
  assert str(caught.value) == (f"AGN_JAX_CACHE_DIR={regular}/cache: "
                               f"{regular} is a file, not a directory")
  monkeypatch.setenv("AGN_JAX_CACHE_DIR", str(tmp_path / "new" / "cache"))
  TrainConfig().validate()  # Missing directories are created later.


@pytest.mark.parametrize("settings,message", [
    (dict(server_every=2**31), "server_every accepts an integer in "
     "[1, 2147483647], got 2147483648"),
    (dict(seed=-1), "seed accepts an integer in [0, 2147483647], got -1"),
    (dict(num_workers=4, backend="simulated",
          options=SimulatedOptions(speed_model="speeds:1,2")),
     "--speed_model=speeds:1,2 gives 2 speeds, one for each worker of "
     "--num_workers=4"),
])
def test_numbers_out_of_range_are_refused_by_validate(settings, message):
  with pytest.raises(ValueError) as caught:
    TrainConfig(**settings).validate()
  assert str(caught.value) == message


def _flag_help(name: str) -> str:
  values = flags.FlagValues()
  flags_lib.define_train_flags(values)
  return " ".join(values[name].help.split())


def test_the_help_names_every_strategy_and_its_paper_defaults(monkeypatch):
  # Built from the registry here, not from the config's own helpers: each
  # registered strategy is named, and each of its paper defaults is said
  # next to it (a value every strategy shares is said once).
  from agn_jax import strategies  # pylint: disable=g-import-not-at-top
  # A strategy registered now, with defaults no built-in one has: the help
  # must be generated from the registry to name it.
  monkeypatch.setitem(strategies._REGISTRY, "zeta",
                      strategies._REGISTRY["aeasgd"])
  monkeypatch.setitem(strategies._PAPER_DEFAULTS, "zeta", dict(
      worker_optimizer="adagrad", learning_rate=0.0123, momentum=0.77,
      rho=3.5, elastic_learning_rate=0.042, normalization="none"))
  names = strategies.available()
  assert "zeta" in names
  for flag in ("strategy", "dynamic_local_updates"):
    said = _flag_help(flag)
    for name in names:
      assert name in said, (flag, name, said)
  for setting in config_lib.GENERIC_DEFAULTS:
    said = _flag_help(setting)
    values = {}
    for name in names:
      value = strategies.paper_defaults(name).get(
          setting, config_lib.GENERIC_DEFAULTS[setting])
      values.setdefault(f"{value:g}" if isinstance(value, float) else
                        str(value), []).append(name)
    for value, who in values.items():
      if len(values) == 1:
        assert f"paper default ({value})" in said, said
      else:
        assert f"{value} for {', '.join(who)}" in said, said
  assert "0.0123 for zeta" in _flag_help("learning_rate")
  # The strategies that take a normalization are named from their factories.
  takers = [n for n in names if "normalization" in inspect.signature(
      strategies._REGISTRY[n]).parameters]
  assert f"What {' and '.join(takers)} divide" in _flag_help("normalization")


def test_the_server_settings_help_names_the_optimizers_that_read_them():
  assert _flag_help("server_momentum").endswith(
      "(read by nesterov, delayed_nesterov).")
  assert _flag_help("server_learning_rate").endswith(
      "(read by sgd, nesterov, delayed_nesterov).")
  assert _flag_help("server_every").endswith(
      "Read by delayed_nesterov only.")
