"""The training flags shared by `experiments.train` and `experiments.sweep`.

A thin layer over absl: every setting's flag parses its value with the
setting's own check (`config.field_error`), so a bad value ends the program
with one line naming the flag and what it accepts, before any process
starts. The errors are built from absl's exception types and our own
checks, never by reading absl's messages.
"""

import atexit
import dataclasses
import difflib
import json
import logging as std_logging
import os
import shlex
import sys
import typing
from typing import Iterable, List, Optional, Sequence

from absl import flags

from agn_jax import config as config_lib
from agn_jax.runtime import events
from experiments import lazy_flags


class UsageError(Exception):
  """A bad command line or workdir, reported as one line and exit status 2."""


def positive_int_list(values: Optional[Sequence[str]]) -> bool:
  """Whether a list flag holds one or more positive integers."""
  try:
    ints = tuple(int(v) for v in values or ())
  except ValueError:
    return False
  return config_lib.POSITIVE_INTS.test(ints)


def _flag_kind(field: dataclasses.Field):
  """The flag type of a field: bool, int, float, tuple (a list flag) or str."""
  kind = field.type
  if typing.get_origin(kind) is typing.Union:  # Optional[X]: X.
    kind = next(a for a in typing.get_args(kind) if a is not type(None))
  return typing.get_origin(kind) or kind


def _flag_value(kind, value):
  if kind is tuple and value is not None:
    return tuple(int(v) for v in value)
  return value


def field_value(name: str, value):
  """The value of flag `name` as its setting's field holds it (a list flag: a tuple)."""
  return _flag_value(_flag_kind(config_lib.setting_field(name)), value)


class _SettingParser(flags.ArgumentParser):
  """A setting flag's parser: its type's (`base`), then the setting's own check.

  A value the check refuses raises `ValueError`, which absl reports as
  `flag --NAME=VALUE: ` followed by these words: what a `Check` accepts,
  or the owner's own words for a value its `parse` refuses.
  """

  def __init__(self, name: str, base: flags.ArgumentParser):
    super().__init__()
    self.name, self.base = name, base
    self.syntactic_help = base.syntactic_help

  def flag_type(self) -> str:
    return self.base.flag_type()

  def parse(self, argument):
    meta = config_lib.describe(config_lib.setting_field(self.name))
    accepts = config_lib.accepts(self.name)
    try:
      value = self.base.parse(argument)
      held = field_value(self.name, value)
      default = config_lib.setting_field(self.name).default
      if lazy_flags.is_default(held, default):
        return value
      error = config_lib.field_error(self.name, held)
    except (TypeError, ValueError):
      if not accepts:
        raise
      error = "refused"
    if error and (meta.get("check") is not None or error == "refused"):
      raise ValueError(f"--{self.name} accepts {accepts}")
    if error:  # The owner's words, without the "NAME: " absl says already.
      said, _, rest = error.partition(": ")
      raise ValueError(rest if rest and (said == self.name or said.startswith(
          f"--{self.name}=")) else error)
    return value


def _define_field(field: dataclasses.Field,
                  flag_values: flags.FlagValues) -> None:
  """The flag of one setting, from its field's metadata (`_SettingParser`)."""
  name, meta = field.name, config_lib.describe(field)
  default = meta.get("flag_default", field.default)
  help_ = lambda: config_lib.help_text(name)
  kind = _flag_kind(field)
  if meta.get("choices") is not None:
    parser = lazy_flags.ChoicesWhenAsked(meta["choices"], default)
    flag = lazy_flags.Flag(
        parser, flags.ArgumentSerializer(), name, default,
        # As absl's enum flag says it.
        lambda: f"<{'|'.join(parser.enum_values)}>: {help_()}")
  elif kind is bool:
    flag = lazy_flags.BooleanFlag(name, default, help_)
  elif kind is tuple:
    flag = lazy_flags.Flag(_SettingParser(name, flags.ListParser()),
                           flags.CsvListSerializer(","), name,
                           [str(v) for v in default], help_)
  else:
    base = {int: flags.IntegerParser, float: flags.FloatParser}.get(
        kind, flags.ArgumentParser)()
    flag = lazy_flags.Flag(_SettingParser(name, base),
                           flags.ArgumentSerializer(), name, default, help_)
  flags.DEFINE_flag(flag, flag_values)


def define_train_flags(flag_values: flags.FlagValues = flags.FLAGS,
                       skip: Iterable[str] = ()) -> None:
  """Defines one flag per setting, each with its validator.

  The settings are `TrainConfig`'s and every backend's options'
  (`config.setting_names`). Type, default, help and check come from the
  field (`config.setting`), so a new setting gets its flag without a
  change here.

  Args:
    flag_values: where to define them.
    skip: names the caller defines itself (the sweep's grid axes).
  """
  skip = set(skip)
  for name in config_lib.setting_names():
    if name not in skip:
      _define_field(config_lib.setting_field(name), flag_values)
  if "plots" not in skip:
    flags.DEFINE_bool(
        "plots", True, "Draw each run's curves.png and staleness.png "
        "(--noplots: skip them, e.g. for a sweep of many runs; "
        "metrics.jsonl holds everything they show).", flag_values=flag_values)
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
  if wants_help(argv[1:]):
    print_help(flag_values)
    sys.exit(0)
  try:
    remaining = parse(argv, flag_values)
  except UsageError as e:
    exit_with_error(program or "error", e, status=2)
  if not allow_positional and len(remaining) > 1:
    exit_with_error(program, "unexpected arguments "
                    f"{' '.join(remaining[1:])!r}; every option is a --flag",
                    status=2)
  return remaining


def parse(argv: Sequence[str], flag_values: flags.FlagValues) -> List[str]:
  """Parses `argv` (program name first) into `flag_values`; the positional arguments left.

  `--config=NAME` is read as the `--flagfile` it names (`expand_configs`);
  the flagfiles are checked first (`check_flagfile_cycles`); then absl
  parses, and the chosen backend's settings are checked together
  (`BackendOptions.fit_error`).

  Raises:
    UsageError: one line naming the problem.

  Example:
    >>> fv = flags.FlagValues()
    >>> define_train_flags(fv)
    >>> parse(["train", "--num_worker=2"], fv)
    Traceback (most recent call last):
    ...
    experiments.flags.UsageError: unknown flag --num_worker (did you mean --num_workers?)
  """
  args = list(argv[1:])
  if "config" in flag_values:
    args = expand_configs(args)
  check_flagfile_cycles(args)
  try:
    remaining = flag_values(list(argv[:1]) + args)
  except flags.UnrecognizedFlagError as e:
    close = difflib.get_close_matches(e.flagname, list(flag_values), n=1)
    message = f"unknown flag --{e.flagname}" + (
        f" (did you mean --{close[0]}?)" if close else "")
    files = [a for a in argv[1:] if a.lstrip("-").startswith(
        ("flagfile", "config"))]
    if files:
      message += f" (on the command line or in {', '.join(files)})"
    raise UsageError(message) from None
  except flags.Error as e:
    raise UsageError(" ".join(str(e).split())) from None
  error = _options_fit_error(flag_values)
  if error:
    raise UsageError(error)
  return remaining


def _options_fit_error(flag_values: flags.FlagValues) -> Optional[str]:
  """Why the chosen backend's settings do not fit together, or None.

  Each flag has passed its own check while parsing; this is the one check
  of several together, made once absl is done.
  """
  if "backend" not in flag_values:
    return None
  own = config_lib.options_class(flag_values["backend"].value)
  return own(**{f.name: field_value(f.name, flag_values[f.name].value)
                for f in dataclasses.fields(own)
                if f.name in flag_values}).fit_error()


HELP_FLAGS = ("--help", "-help", "-h", "--helpshort", "-helpshort", "-?")


def wants_help(args: Sequence[str]) -> bool:
  """Whether a command line asks for help (before a lone `--`).

  Example:
    >>> wants_help(["--num_workers=2", "--help"]), wants_help(["--", "-h"])
    (True, False)
  """
  for arg in args:
    if arg == "--":
      return False
    if arg in HELP_FLAGS:
      return True
  return False


def print_help(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """Prints the program's docstring and its own flags (not absl's) to stdout.

  absl's `--help` lists only the flags of the `__main__` module, which
  defines none here (`python -m` runs a module whose flags are defined by
  `define_train_flags`), and exits 1; `--helpfull` still lists every flag.
  """
  main = sys.modules.get("__main__")
  parts = [(getattr(main, "__doc__", None) or "").strip()]
  for module in flag_values.flags_by_module_dict():
    if not module.startswith(("absl.", "jax", "tensorflow")):
      parts.append(flag_values.module_help(module))
  parts.append("Try --helpfull for every flag, absl's own included.")
  try:
    sys.stdout.write("\n\n".join(p for p in parts if p) + "\n")
    sys.stdout.flush()
  except BrokenPipeError:  # `--help | head`: the reader has what it wanted.
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


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
    not_flags = not_a_flagfile(os.path.expanduser(name))
    if not_flags:
      raise UsageError(f"--config={name}: {not_flags}")
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
    return []  # `check_flagfile_cycles` reports an unreadable file.
  return [os.path.expanduser(line.split("=", 1)[1].strip()) for line in lines
          if line.startswith(("--flagfile=", "-flagfile="))]


def not_a_flagfile(path: str) -> Optional[str]:
  """Why `path` is not a flagfile, or None if it is one (or cannot be read).

  A flagfile holds one `--flag` a line, blank lines and comments (`#`,
  `//`). Any other line would reach the program as a positional argument,
  and the error would echo the file; this names the line instead.

  Example:
    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
    ...   _ = f.write("--epochs=2\\n# a comment\\nroot:x:0:0\\n"); f.flush()
    ...   not_a_flagfile(f.name).endswith("line 3 is not a --flag")
    True
  """
  try:
    with open(path, encoding="utf-8") as f:
      for number, line in enumerate(f, 1):
        line = line.strip()
        if line and not line.startswith(("-", "#", "//")):
          return f"{path} is not a flagfile: its line {number} is not a --flag"
  except UnicodeDecodeError:
    return f"{path} is not a flagfile: it is not UTF-8 text"
  except OSError:
    return None  # `check_flagfile_cycles` reports an unreadable file.
  return None


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
    try:
      with open(path, "rb"):
        pass
    except OSError as e:
      raise UsageError(f"--flagfile: cannot open {path}: "
                       f"{e.strerror or type(e).__name__}") from None
    not_flags = not_a_flagfile(path)
    if not_flags:
      raise UsageError(f"--flagfile: {not_flags}")
    for included in _included_flagfiles(path):
      walk(included, chain + [path])

  for path in _flagfile_arguments(args):
    walk(path, [])


def _print_error(program: str, message: str) -> None:
  """`program: error: message` as one line on stderr."""
  message = " ".join(str(message).split())
  print(f"{program}: error: {message}", file=sys.stderr, flush=True)


def exit_with_error(program: str, message: str, status: int = 1):
  """Prints `program: error: message` as one line on stderr and exits."""
  _print_error(program, message)
  sys.exit(status)


def exit_interrupted(program: str, message: str, status: int):
  """`exit_with_error` for an interrupt: the line, then an immediate exit.

  Ctrl-C can land while XLA's threads are still compiling; the interpreter's
  teardown then races them and may end in a segmentation fault after the
  line (exit −11 instead of 130). The Python-level exit work still runs
  (`atexit`: multiprocess's finalizers unlink and unregister the run's
  semaphores); only the interpreter's own teardown is skipped.
  """
  _print_error(program, message)
  sys.stdout.flush()
  atexit._run_exitfuncs()  # pylint: disable=protected-access
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(status)  # pylint: disable=protected-access


def default_workdir(strategy: str, num_workers: int,
                    communication_window: int, root: str = "runs") -> str:
  """Creates and returns `runs/<strategy>-n<N>-l<λ>-<timestamp>-<pid>-<random>`.

  Two runs started in the same second never share it.
  """
  from agn_jax import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
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
  from agn_jax import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  # A lock file alone (left by a killed run) is no run.
  non_empty = os.path.isdir(workdir) and bool(workdir_lib.entries(workdir))
  if non_empty and not resume:
    raise UsageError(f"--workdir={workdir} already holds files; pass "
                     "--resume to continue that run or choose another "
                     "--workdir")
  if resume and not non_empty:
    raise UsageError(f"--resume: --workdir={workdir} holds no run to resume")


def typed_flags(argv: Sequence[str], flag_values: flags.FlagValues) -> set:
  """Names of the flags typed on the command line itself (not in a --flagfile).

  Example:
    >>> fv = flags.FlagValues()
    >>> define_train_flags(fv)
    >>> sorted(typed_flags(["sweep", "--epochs=3", "--nohidden_sizes", "x",
    ...                     "--flagfile=f"], fv))
    ['epochs']
  """
  names = set()
  for arg in argv[1:]:
    if arg == "--":
      break
    if not arg.startswith("-"):
      continue
    name = arg.lstrip("-").split("=", 1)[0]
    if name not in flag_values and name.startswith("no"):
      name = name[2:]
      if name in flag_values and not isinstance(flag_values[name],
                                                flags.BooleanFlag):
        continue
    if name in flag_values and name != "flagfile":
      names.add(name)
  return names


def _refuse_foreign(backend: str, named: Iterable[str]) -> None:
  error = config_lib.foreign_error(backend, dict.fromkeys(named), flags=True)
  if error:
    raise ValueError(error)


def config_from_flags(flag_values: flags.FlagValues = flags.FLAGS,
                      typed: Iterable[str] = (),
                      **overrides) -> config_lib.TrainConfig:
  """Builds the `TrainConfig` from parsed flags.

  The run's backend takes its own settings from their flags
  (`TrainConfig.options`); another backend's flags are ignored where a
  flagfile sets them, so one flagfile may serve runs on several backends,
  and refused where they were typed on the command line.

  Args:
    flag_values: parsed flags; settings whose flag is not defined keep their
      default unless given in `overrides`.
    typed: the flags typed on the command line itself (`typed_flags`).
    **overrides: setting values that win over the flags (the sweep's axes).

  Returns:
    The config. Without a --workdir flag value it gets `default_workdir`.
    A strategy setting whose flag was not given stays None: the strategy's
    paper default, filled in by `TrainConfig.resolved()`.

  Raises:
    ValueError: a typed flag or an override of another backend.
  """
  values = {}
  for name in config_lib.setting_names():
    if name in overrides:
      values[name] = overrides[name]
    elif name in flag_values:
      values[name] = field_value(name, flag_values[name].value)
  backend = values.get("backend", config_lib.TrainConfig.backend)
  _refuse_foreign(backend, [*typed, *overrides])
  config = config_lib.TrainConfig.from_dict(values)
  if not values.get("workdir"):
    config.workdir = default_workdir(config.strategy, config.num_workers,
                                     config.communication_window)
  return config


def resumed_config(flag_values: flags.FlagValues, workdir: str,
                   typed: Iterable[str] = ()) -> config_lib.TrainConfig:
  """The config of the run in `workdir`, with the flags given now on top.

  `--resume --workdir=DIR` alone continues the run as it was configured; any
  flag given explicitly (on the command line or in a --flagfile) overrides the
  saved value, e.g. `--epochs` to train on for longer, as long as it is a
  setting of the run's backend (`config_from_flags` says how another
  backend's are treated). Fields that must not change (the model, the
  strategy, ...) are checked against the checkpoint by the runtime.

  Raises:
    UsageError: when DIR/config.json is missing or is not a JSON object.
    ValueError: a typed flag of another backend.
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
      name: field_value(name, flag_values[name].value)
      for name in config_lib.setting_names()
      if name in flag_values and flag_values[name].present
  }
  given.update(workdir=workdir, resume=True)
  _refuse_foreign(given.get("backend", config.backend), typed)
  return config_lib.TrainConfig.from_dict(dict(config.to_dict(), **given))


def write_config(config: config_lib.TrainConfig, workdir: str,
                 command: Optional[Sequence[str]] = None) -> str:
  """Makes sure config.json names every setting of the run with the value used.

  The runtime writes config.json when it starts; its values are kept, any
  setting it lacks is added, and a strategy setting it left at None (the
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
      f.write(events.strict_json(content, indent=2, sort_keys=True))
      f.write("\n")
    os.replace(tmp, path)
  return path
