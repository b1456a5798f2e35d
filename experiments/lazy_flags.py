"""absl flags whose help and choices are read when first needed.

A setting's help and choices come from the registries that own them (the
strategies and their paper defaults, the models, the normalizations), and
reading those imports JAX: seconds that a command line's one-line error, or
a run's start, need not wait for. So these flags hold a callable in place of
the help or the choices and call it once, when something first reads it; and
a setting's own default is taken without its check, whose owner would import
JAX too (`is_default`).
"""

from typing import Callable, List, Sequence

from absl import flags


def read_once(holder, attribute: str, convert=lambda value: value):
  """`holder.attribute`; a callable there is called once and its result kept.

  Example:
    >>> class Holder: pass
    >>> holder = Holder()
    >>> holder.text = lambda: "read"
    >>> read_once(holder, "text"), holder.text
    ('read', 'read')
  """
  value = getattr(holder, attribute)
  if callable(value):
    value = convert(value())
    setattr(holder, attribute, value)
  return value


def is_default(value, default) -> bool:
  """Whether a parsed value is its setting's own default: it needs no check."""
  return value == default


class _HelpWhenShown:
  """A flag whose help is written when something reads it."""

  @property
  def help(self) -> str:
    return read_once(self, "_help_when_shown")

  @help.setter
  def help(self, value) -> None:
    self._help_when_shown = value


class Flag(_HelpWhenShown, flags.Flag):
  """absl's `Flag`, its help a string or a callable that returns one."""


class BooleanFlag(_HelpWhenShown, flags.BooleanFlag):
  """absl's `BooleanFlag`, its help a string or a callable that returns one."""


class ChoicesWhenAsked(flags.EnumParser):
  """absl's enum parser, its choices read from their owner when first needed.

  Example:
    >>> parser = ChoicesWhenAsked(lambda: ("sgd", "adam"), default="sgd")
    >>> parser.parse("adam"), parser.enum_values
    ('adam', ['sgd', 'adam'])
  """

  def __init__(self, choices: Callable[[], Sequence[str]], default):
    flags.ArgumentParser.__init__(self)  # pylint: disable=non-parent-init-called
    self._choices, self._default, self.case_sensitive = choices, default, True

  @property
  def enum_values(self) -> List[str]:
    return read_once(self, "_choices", list)

  def parse(self, argument):
    if is_default(argument, self._default):
      return argument
    return super().parse(argument)
