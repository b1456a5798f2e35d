"""Attacks 16. Round four: bad flag values, --help, --config, sweeps.

Mixed into `attacks.Attacks`; each `attack_*` method raises `Failed` or
returns a note. See attacks.py for how they run.
"""

# pylint: disable=wildcard-import,unused-wildcard-import
from attacklib import *


class FlagAttacks:
  """bad flag values, --help, --config, sweeps (issue 34)."""

  # 16a-d. --help shows the program's own flags and exits 0.

  def _help(self, program, flag):
    result = cli(program, "--help")
    if result.rc != 0:
      raise Failed(f"exit {result.rc}: {lines_of(result.stderr)[-1:]}")
    if f"--{flag}" not in result.stdout or "Traceback" in result.stderr:
      raise Failed(f"--{flag} is not listed: {lines_of(result.stdout)[-3:]}")
    return f"exit 0, {result.stdout.count(chr(10) + '  --')} flags listed"

  def attack_16a(self):
    """train --help: exit 0, the training flags listed"""
    return self._help("train", "communication_window")

  def attack_16b(self):
    """sweep --help: exit 0, the grid's flags listed"""
    return self._help("sweep", "communication_windows")

  def attack_16c(self):
    """compare --help: exit 0, its flags listed"""
    return self._help("compare", "time_base")

  def attack_16d(self):
    """report --help: exit 0, its flags listed"""
    return self._help("report", "study_dir")

  # 16e-i. Numeric values out of range: refused at the flag check.

  def _refused(self, name, *args, names=()):
    workdir = self.path(name)
    line = expect_exit_2_naming(
        cli("train", "--dataset=digits", *args, f"--workdir={workdir}"),
        "train", *names)
    if os.path.lexists(workdir):
      raise Failed(f"left {workdir} behind: {line}")
    return line

  def attack_16e(self):
    """--server_every=2147483648 (past int32): exit 2 naming the flag"""
    return self._refused("server_every", "--backend=simulated",
                         "--server_optimizer=delayed_nesterov",
                         "--server_every=2147483648",
                         names=("--server_every",))

  def attack_16f(self):
    """--speed_model=random:1000 (exp overflows): exit 2 naming the flag"""
    return self._refused("random1000", "--backend=simulated",
                         "--speed_model=random:1000",
                         names=("--speed_model",))

  def attack_16g(self):
    """--dynamic_local_updates --speed_model=lognormal:1000: exit 2 naming --speed_model"""
    return self._refused("dylu_lognormal", "--backend=simulated",
                         "--dynamic_local_updates",
                         "--speed_model=lognormal:1000",
                         names=("--speed_model",))

  def attack_16h(self):
    """--speed_model=speeds:1,2 with 4 workers: exit 2 naming both flags"""
    return self._refused("speeds_count", "--backend=simulated",
                         "--num_workers=4", "--speed_model=speeds:1,2",
                         names=("--speed_model", "--num_workers"))

  def attack_16i(self):
    """--seed=4294967296: exit 2 naming --seed"""
    return self._refused("big_seed", "--seed=4294967296", names=("--seed",))

  # 16j-k. A sweep checks its whole grid before its first run.

  def attack_16j(self):
    """sweep --dynamic_local_updates --communication_windows=5,1: refused before any run"""
    sweep_dir = self.path("sweep_dylu")
    line = expect_exit_2_naming(
        cli("sweep", "--dataset=digits", "--num_workers=2", "--epochs=1",
            "--dynamic_local_updates", "--communication_windows=5,1",
            f"--sweep_dir={sweep_dir}"), "sweep", "λ=1")
    if os.path.lexists(sweep_dir):
      raise Failed(f"ran something first: {sweep_dir} exists")
    return line

  def attack_16k(self):
    """sweep --num_workers=2,2: refused like duplicate --strategies"""
    sweep_dir = self.path("sweep_dup")
    line = expect_exit_2_naming(
        cli("sweep", "--dataset=digits", "--num_workers=2,2", "--epochs=1",
            f"--sweep_dir={sweep_dir}"), "sweep", "--num_workers")
    if os.path.lexists(sweep_dir):
      raise Failed(f"{sweep_dir} exists")
    return line

  # 16l-m. A missing extra: exit 2 naming what to install, whichever it is.

  def attack_16l(self):
    """--backend=ray without Ray installed: exit 2 naming agn-jax[ray]"""
    return expect_exit_2_naming(
        cli("train", *SMALL, "--backend=ray",
            f"--workdir={self.path('no_ray')}",
            env=without_module(self.root, "ray")), "train", "agn-jax[ray]")

  def attack_16m(self):
    """--metric_writers=tensorboard without tensorboardX: the same exit 2"""
    return expect_exit_2_naming(
        cli("train", *SMALL, "--metric_writers=tensorboard",
            f"--workdir={self.path('no_tbx')}",
            env=without_module(self.root, "tensorboardX")), "train",
        "agn-jax[tensorboard]")

  # 16n-o. A file that is not a flagfile is named, not echoed.

  def attack_16n(self):
    """--config=/etc/passwd: exit 2 naming --config, the file not echoed"""
    line = expect_exit_2_naming(cli("train", "--config=/etc/passwd"),
                                "train", "--config", "/etc/passwd")
    if "root:" in line:
      raise Failed(f"echoes the file: {line}")
    return line

  def attack_16o(self):
    """--flagfile=<a binary file>: exit 2 naming it"""
    return expect_exit_2_naming(cli("train", f"--flagfile={sys.executable}"),
                                "train", "--flagfile", "not a flagfile")
