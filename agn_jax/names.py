"""How a run names what it is made of: a built-in by its registered name, anything else by where it lives.

Strategies, tasks, models and datasets are named alike: a name this
package registers (`"agn"`, `"classification"`, `"mlp"`, `"digits"`), or
a function written outside it, `"package.module:function"`, as an entry
point names one. A registration would not reach the run's other processes
(a spawned worker, a Ray actor); an import path does: each process imports
the function from there when it first needs it, so the module must be
importable wherever the run runs.

Module level imports no JAX: the launcher resolves names before placement.

Example:
  >>> lookup("dataset", "math:sqrt", {})(9.0)
  3.0
  >>> lookup("dataset", "cifar", {"digits": None})
  Traceback (most recent call last):
  ...
  ValueError: unknown dataset 'cifar'; available: digits, or package.module:function
"""

import importlib
import inspect
from typing import Any, Callable, Mapping, Tuple

IMPORT_FORM = "package.module:function"


def is_import_path(name) -> bool:
  """Whether `name` has the form `"package.module:function"`.

  Example:
    >>> is_import_path("tests.workload:load"), is_import_path("digits")
    (True, False)
  """
  if not isinstance(name, str):
    return False
  module, sep, function = name.partition(":")
  return bool(sep and module and function)


def lookup(kind: str, name: str, registry: Mapping[str, Any]) -> Callable:
  """What `name` names: `registry[name]`, or the function its import path names.

  Args:
    kind: what is named, for the error ("strategy", "task", "model",
      "dataset").
    name: a key of `registry`, or `"package.module:function"`.
    registry: the built-ins by name.

  Returns:
    The registered value, or the imported callable.

  Raises:
    ValueError: one line: an unknown name (listing the registered ones), a
      module that cannot be imported (whatever its import raised), or a
      name that is not a callable there.
  """
  if isinstance(name, str) and name in registry:
    return registry[name]
  if is_import_path(name):
    module, _, function = name.partition(":")
    try:
      found = getattr(importlib.import_module(module), function)
    except (ImportError, AttributeError) as e:
      raise ValueError(f"{kind} {name!r} cannot be imported: {e}") from None
    except (Exception, SystemExit) as e:  # pylint: disable=broad-except
      # The user's module failed while it was imported (a syntax error, a
      # failing top-level statement, a `sys.exit()` that would end the run
      # without a word): say so in one line.
      raise ValueError(f"{kind} {name!r} cannot be imported: module "
                       f"{module!r} {what_raised(e)}") from None
    if callable(found):
      return found
  raise ValueError(f"unknown {kind} {name!r}; available: "
                   f"{', '.join(registry)}, or {IMPORT_FORM}")


def parameters(fn: Callable) -> Tuple[str, ...]:
  """The names of the keyword arguments `fn` takes (`("**",)` if it takes any).

  Example:
    >>> parameters(lambda size=None, seed=0: None)
    ('size', 'seed')
  """
  out = []
  for p in inspect.signature(fn).parameters.values():
    if p.kind == p.VAR_KEYWORD:
      out.append("**")
    elif p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
      out.append(p.name)
  return tuple(out)


def call_with(fn: Callable, **available):
  """Calls `fn` with those of `available` it takes: each by name, all of them if it takes `**kwargs`.

  How a built-in and a user's factory are called alike: the caller offers
  everything it has, a factory names what it reads.

  Example:
    >>> call_with(lambda seed, size=None: (seed, size), seed=1, data_dir="d")
    (1, None)
  """
  accepted = parameters(fn)
  if "**" in accepted:
    return fn(**available)
  return fn(**{k: v for k, v in available.items() if k in accepted})


def raised(kind: str, name: str, error: BaseException) -> str:
  """The one line a run ends with when the function `name` names raised `error`.

  Example:
    >>> raised("dataset", "my.data:load", TypeError("load() takes no size"))
    "dataset 'my.data:load': its function raised TypeError: load() takes no size"
  """
  return f"{kind} {name!r}: its function {what_raised(error)}"


def what_raised(error: BaseException) -> str:
  """What `error` says of the code that raised it, one line: `raised T: first line`, or `called sys.exit(code)`.

  Example:
    >>> what_raised(SystemExit(3)), what_raised(KeyError("k"))
    ('called sys.exit(3)', "raised KeyError: 'k'")
  """
  if isinstance(error, SystemExit):
    return f"called sys.exit({error.code!r})"
  said = str(error).splitlines()[0] if str(error) else ""
  return f"raised {type(error).__name__}" + (f": {said}" if said else "")


def where(fn: Callable) -> str:
  """Where a function lives, `"package.module:function"` (its qualified name), for messages.

  Example:
    >>> where(parameters)
    'agn_jax.names:parameters'
  """
  return (f"{getattr(fn, '__module__', None) or '?'}:"
          f"{getattr(fn, '__qualname__', None) or type(fn).__name__}")
