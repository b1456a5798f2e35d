"""How a setting is declared, checked and looked up: the machinery behind `agn_jax.config`.

A setting is a dataclass field made by `setting`: its default, help and check
(`Check`, its owner's `choices` or `parse`) in one declaration. The classes
that hold settings register here: `TrainConfig` (`register_run_settings`)
and each backend's options (`register_options`); `setting_names`,
`field_error`, `help_text` and `foreign_error` answer for all of them.
`agn_jax.config` declares the settings themselves.
"""

import dataclasses
import importlib
import math
import os
from typing import (Any, Callable, ClassVar, Dict, List, Mapping, NamedTuple,
                    Optional, Tuple)

def _is_int(value) -> bool:
  return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
  return (isinstance(value, (int, float)) and not isinstance(value, bool) and
          math.isfinite(value))


class Check(NamedTuple):
  """What a setting accepts: a test of its value and the words for it.

  Attributes:
    test: True for a value the setting accepts.
    accepts: what it accepts, completing "--NAME accepts ..." and
      "NAME accepts ...".
  """
  test: Callable[[Any], bool]
  accepts: str

  def or_unset(self, say: bool = True) -> "Check":
    """The same check, None allowed too (said so in `accepts` with `say`)."""
    return Check(lambda v: v is None or self.test(v),
                 self.accepts + (" (or leave it unset)" if say else ""))


# The largest integer a setting takes: counts and sizes reach JAX as int32,
# and a larger one would overflow there after the run started.
MAX_INT = 2**31 - 1
POSITIVE_INT = Check(lambda v: _is_int(v) and 1 <= v <= MAX_INT,
                     f"an integer in [1, {MAX_INT}]")
NON_NEGATIVE_INT = Check(lambda v: _is_int(v) and 0 <= v <= MAX_INT,
                         f"an integer in [0, {MAX_INT}]")
POSITIVE = Check(lambda v: _is_number(v) and v > 0, "a finite number > 0")
NON_NEGATIVE = Check(lambda v: _is_number(v) and v >= 0,
                     "a finite number >= 0")
UNIT_INTERVAL = Check(lambda v: _is_number(v) and 0 <= v < 1,
                      "a number in [0, 1)")
FRACTION = Check(lambda v: _is_number(v) and 0 <= v <= 1,
                 "a number in [0, 1]")
POSITIVE_INTS = Check(
    lambda v: isinstance(v, (list, tuple)) and bool(v) and all(
        _is_int(h) and 1 <= h <= MAX_INT for h in v),
    f"a comma-separated list of integers in [1, {MAX_INT}], e.g. 1000,2000,1000")


def missing_extra(what: str, module: str, extra: str) -> Optional[str]:
  """Why `what` cannot run here (one line naming the extra to install), or None.

  One rule for every optional library (Ray, tensorboardX): a setting that
  needs one is refused when the config is checked, with exit status 2 on the
  command line, before anything starts.

  Example:
    >>> missing_extra("--backend=x", "no_such_module_here", "agn-jax[x]")
    "--backend=x needs no_such_module_here, which is not installed; pip install 'agn-jax[x]'"
    >>> missing_extra("--backend=x", "json", "agn-jax[x]") is None
    True
  """
  import importlib.util  # pylint: disable=g-import-not-at-top
  try:
    if importlib.util.find_spec(module) is not None:
      return None
  except (ImportError, ValueError):
    pass  # A parent package missing, or a module set to None: not there.
  return (f"{what} needs {module}, which is not installed; "
          f"pip install '{extra}'")


def directory_error(path: str, named: str) -> Optional[str]:
  """Why `path` cannot be (or become) a writable directory, in one line starting with `named`; None if it can.

  Example:
    >>> directory_error("/etc/hostname/cache", "AGN_JAX_CACHE_DIR=/etc/hostname/cache")
    'AGN_JAX_CACHE_DIR=/etc/hostname/cache: /etc/hostname is a file, not a directory'
  """
  if not path:
    return None
  path = os.path.abspath(os.path.expanduser(path))
  existing = path
  while not os.path.lexists(existing):
    existing = os.path.dirname(existing)
  if not os.path.isdir(existing):
    return f"{named}: {existing} is a file, not a directory"
  if not os.access(existing, os.W_OK | os.X_OK):
    return f"{named}: {existing} is not writable"
  return None


def finite(accepts: str) -> Check:
  """Any finite number, with what its values mean in `accepts`."""
  return Check(_is_number, accepts)



def _names(module: str, attribute: str) -> Callable[[], Tuple[str, ...]]:
  """The names an owner module lists, read when first asked (its imports are heavy)."""

  def names():
    return tuple(getattr(importlib.import_module(module), attribute))

  return names


def setting(default, help: str, *, check: Optional[Check] = None,  # pylint: disable=redefined-builtin
            **metadata):
  """A setting: a field of `TrainConfig` or of a backend's options, with its default, help and check.

  The field's metadata is the one source for everything that is said about
  the setting elsewhere: its flag (`experiments.flags.define_train_flags`),
  its validation (`TrainConfig.validate`) and the lists of settings that
  share a role (`fields_where`). A setting's name is its flag's and its key
  in config.json, whether `TrainConfig` or a backend's options hold it.

  Args:
    default: the default value.
    help: the flag's help text.
    check: what a value must satisfy (`Check`), if anything beyond
      `choices` or `parse`.
    **metadata: more of the setting's description:
      choices: a callable returning the names the setting accepts (its
        owner's list; a flag of them is an enum);
      parse: a callable that raises `ValueError` (one line, its owner's
        words) for a value it refuses;
      flag_default: the flag's default where it differs from the field's;
      strategy: a strategy's own setting (a per-strategy flagfile may set
        it), with `generic_default`: its value where the strategy has no
        paper default;
      budget: decides how much data a run trains on, and on what model;
      resume_fixed: a resumed run must keep it (`agn_jax.checkpoint`);
      cost: changes what a step, a commit or an apply costs;
      per_run: names one run of a study (its cell and its directory);
      seconds: a time or rate in seconds, which a clock that counts local
        steps cannot take (`agn_jax.sim.clock.clock_error`).

  Returns:
    The `dataclasses.field`.
  """
  return dataclasses.field(default=default,
                           metadata=dict(metadata, help=help, check=check))


def describe(field: dataclasses.Field) -> Dict[str, Any]:
  """A field's metadata (its `choices` and `parse` read their owners when called)."""
  return dict(field.metadata)


def _owner(module: str, attribute: str) -> Callable[..., Any]:
  """A function of an owner module above this one, imported when first called.

  The runtime owns the backends, platforms and metric writers; a setting
  asks it for them lazily, so what a config accepts never depends on what
  happens to have been imported.
  """

  def call(*args):
    return getattr(importlib.import_module(module), attribute)(*args)

  return call


def _text(value) -> str:
  return value() if callable(value) else value



# --- The classes that hold settings -------------------------------------------

# The class of every run's settings (`TrainConfig`), once registered.
_RUN: List[type] = []
# backend name -> its options class, in registration order.
_OPTIONS: Dict[str, type] = {}


def register_run_settings(cls):
  """Class decorator: `cls` holds the settings of every run (`TrainConfig`)."""
  _RUN[:] = [cls]
  return cls


@dataclasses.dataclass(frozen=True)
class BackendOptions:
  """Base of a backend's options class: the settings that backend reads and no other.

  A subclass is a frozen dataclass of `setting` fields, registered under
  its backend's name with `register_options`; a run's config holds one
  (`TrainConfig.options`). Its fields are flags and config.json keys like
  every other setting's.
  """
  backend: ClassVar[str] = ""

  def fit_error(self) -> Optional[str]:
    """Why these settings do not fit together (one line), or None."""
    return None


def register_options(backend: str):
  """Class decorator: `cls` is the options class of backend `backend`.

  It is declared below the runtime, where the flags, the records and the
  simulator engine read it without importing a backend.
  """

  def wrap(cls):
    if not issubclass(cls, BackendOptions):
      raise TypeError(f"{cls.__name__} is not a BackendOptions")
    cls.backend = backend
    _OPTIONS[backend] = cls
    return cls

  return wrap


def options_class(backend: str) -> type:
  """The options class of `backend`.

  Raises:
    ValueError: for a backend without one.

  Example:
    >>> options_class("simulated").__name__
    'SimulatedOptions'
  """
  _classes()
  if backend not in _OPTIONS:
    raise ValueError(f"backend must be one of {', '.join(_OPTIONS)}, got "
                     f"{backend!r}")
  return _OPTIONS[backend]


def _settings_of(cls) -> Tuple[dataclasses.Field, ...]:
  """The setting fields of a dataclass: all but `TrainConfig.options`."""
  return tuple(f for f in dataclasses.fields(cls)
               if not f.metadata.get("options"))




# --- Every setting, whichever class holds it ----------------------------------


def _classes() -> Tuple[type, ...]:
  # Importing the config registers its classes: what a name means never
  # depends on what happened to be imported before.
  importlib.import_module("agn_jax.config")
  return (*_RUN, *_OPTIONS.values())


def setting_names() -> Tuple[str, ...]:
  """Every setting's name: `TrainConfig`'s, then each backend's options' (a name once).

  A name is a flag's and a config.json key.

  Example:
    >>> names = setting_names()
    >>> names[:2], names[-1]
    (('strategy', 'num_workers'), 'ray_address')
  """
  names = []
  for cls in _classes():
    names += [f.name for f in _settings_of(cls) if f.name not in names]
  return tuple(names)


def setting_field(name: str) -> dataclasses.Field:
  """The field that declares setting `name`, in `TrainConfig` or an options class.

  Raises:
    KeyError: for a name that is no setting.
  """
  for cls in _classes():
    for field in _settings_of(cls):
      if field.name == name:
        return field
  raise KeyError(name)


def owners(name: str) -> Tuple[str, ...]:
  """The backends whose options hold setting `name`; () for a setting of every run.

  Example:
    >>> owners("num_slots"), owners("cluster"), owners("epochs")
    (('processes', 'ray'), ('simulated',), ())
  """
  _classes()
  return tuple(backend for backend, cls in _OPTIONS.items()
               if any(f.name == name for f in _settings_of(cls)))


def foreign_error(backend: str, settings: Mapping[str, Any],
                  flags: bool = False) -> Optional[str]:
  """Why a run on `backend` refuses these settings of other backends, or None.

  Args:
    backend: the run's backend.
    settings: setting name -> value given; those of `backend` or of every
      run are fine.
    flags: say it in flags' words (`--cluster`, `--backend=processes`).

  Example:
    >>> foreign_error("processes", {"num_slots": 2, "epochs": 1.0})
    >>> foreign_error("simulated", {"num_slots": 2}, flags=True)
    '--num_slots is a setting of the processes and ray backends; --backend=simulated does not use it'
  """
  for name, value in settings.items():
    others = owners(name)
    if others and backend not in others:
      what = f"--{name}" if flags else f"{name}={value!r}"
      run = f"--backend={backend}" if flags else f"backend {backend!r}"
      return (f"{what} is a setting of the {' and '.join(others)} "
              f"backend{'s' if len(others) > 1 else ''}; {run} does not use "
              "it")
  return None


def fields_where(key: str, value: Any = True) -> Tuple[str, ...]:
  """The names of the settings whose metadata has `key` == `value`, in order.

  Example:
    >>> fields_where("budget")
    ('task', 'dataset', 'dataset_size', 'model', 'hidden_sizes', 'epochs', 'batch_size')
    >>> fields_where("seconds")
    ('bandwidth_gbps', 'latency_ms', 'server_apply_ms')
  """
  return tuple(name for name in setting_names()
               if setting_field(name).metadata.get(key) == value)


# A strategy's own settings: what a per-strategy flagfile

def help_text(name: str) -> str:
  """The help of setting `name` (its flag's), naming the backends of a backend's own.

  Example:
    >>> help_text("ray_address")[:31]
    'Ray backend: local (start a pri'
  """
  text = _text(describe(setting_field(name))["help"])
  backends = owners(name)
  if not backends:
    return text
  return (f"{' and '.join(backends).capitalize()} "
          f"backend{'s' if len(backends) > 1 else ''}: {text}")


def accepts(name: str) -> Optional[str]:
  """What setting `name` accepts, in words; None where only its owner can say."""
  meta = describe(setting_field(name))
  if meta.get("check") is not None:
    return meta["check"].accepts
  if meta.get("accepts") is not None:
    return _text(meta["accepts"])
  if meta.get("choices") is not None:
    return "one of " + ", ".join(meta["choices"]())
  return None


def field_error(name: str, value) -> Optional[str]:
  """Why setting `name` cannot take `value` (one line), or None.

  None is accepted for a strategy setting: it stands for the strategy's
  paper default (`TrainConfig.resolved`).

  Example:
    >>> field_error("momentum", 1.5)
    'momentum accepts a number in [0, 1), got 1.5'
    >>> field_error("backend", "spark")
    "backend must be one of processes, simulated, ray, got 'spark'"
  """
  field = setting_field(name)
  meta = describe(field)
  optional = field.default is None
  if meta.get("check") is not None:
    if not meta["check"].test(value):
      return f"{name} accepts {meta['check'].accepts}, got {value!r}"
  elif value is None and optional:
    return None
  if meta.get("choices") is not None:
    choices = tuple(meta["choices"]())
    if value not in choices:
      return (f"{name} must be one of {', '.join(choices)}, got {value!r}")
  if meta.get("parse") is not None:
    try:
      meta["parse"](value)
    except ValueError as e:
      return " ".join(str(e).split())
  return None

