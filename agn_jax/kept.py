"""Built once per process: what a builder returned, kept for the same arguments.

The parts a run builds from its settings (the strategy, the model and its
loss, the simulator's jitted round) are pure, so a second run in the same
process with the same settings can reuse them, and with them every program
JAX traced and compiled on them: another seed, budget or clock then traces,
lowers and compiles nothing again (the report's studies run many such runs
in one process). `kept` keeps the last 16 results of each builder;
`forget` drops them all.

Module level imports no JAX.

Example:
  >>> built = []
  >>> @kept
  ... def double(x):
  ...   built.append(x)
  ...   return 2 * x
  >>> double(3), double(3), double([3]), built
  (6, 6, [3, 3], [3, [3]])
"""

import functools

MAXSIZE = 16
_CACHES = []  # Every kept builder's cache, for `forget`.


def forget() -> None:
  """Drops what every kept builder kept: the next build of each is fresh."""
  for cache in _CACHES:
    cache.cache_clear()


def kept(builder):
  """`builder`, its result kept for the same (hashable) arguments.

  Arguments that cannot be hashed (a list in a module built outside this
  package, a strategy with an unhashable leaf) build anew each time, as
  without `kept`.
  """
  cached = functools.lru_cache(maxsize=MAXSIZE)(builder)

  @functools.wraps(builder)
  def build(*args, **kwargs):
    try:
      hash((args, tuple(sorted(kwargs.items()))))
    except TypeError:
      return builder(*args, **kwargs)
    return cached(*args, **kwargs)

  _CACHES.append(cached)
  return build
