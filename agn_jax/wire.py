"""The wire: what a commit is, and the flat arrays it and the center travel in, on every backend.

One module owns the form things travel in:

* `FlatLayout`: one flat float32 vector per parameter pytree (the center, a
  payload's `delta`). The treedef stays in each process (every process builds
  the same model from the same config); only shapes and dtypes travel, as
  metadata to check against.
* `CommitMeta`: the one record of a commit's metadata. The workers send it
  through every transport, the server's `events.Committed` carries it into
  `metrics.jsonl`, and the simulator's `sim.schedule.Handled` holds it.
* A strategy's payload as flat arrays: `pack`, `unpack`, `payload_spec`
  (their shapes and dtypes), `wire_of` and `wire_spec` (`(length, dtype)`
  per array), `commit_bytes` and `wire_bytes` (what one commit costs).

Module level imports no JAX: the launcher imports it before placement.

Example:
  >>> import jax.numpy as jnp
  >>> from agn_jax import get_strategy
  >>> s = get_strategy("adag")
  >>> center = {"b": jnp.zeros(2), "w": jnp.ones((2, 2))}
  >>> wire_of(s, FlatLayout.from_tree(center))
  ((6, '<f4'), (6, '<f4'))
  >>> commit_bytes(s, center)
  48
"""

import math
from typing import Any, List, Mapping, NamedTuple, Optional, Sequence, Tuple

import numpy as np


class CommitMeta(NamedTuple):
  """What travels with a commit's payload, whatever the backend: the one record of a commit's metadata.

  Attributes:
    worker: the committing worker's index.
    clock: the server clock of the center the worker last pulled: the one
      its window started from, or the one it pulled just before the commit
      (`Strategy.pull_before_commit`); staleness is `clock at apply − clock`.
    loss: the worker's mean local loss over the window.
    metrics: the window's means of the task's named metrics
      (`agn_jax.tasks.Task`), `{name: value}` (classification's:
      `{"accuracy": ...}`); empty when the loss reports none.
    time: when the window's steps were done (the worker commits right
      after): a `time.time()` stamp, or on the simulator modeled seconds.
    window_start: when the window's first step was dispatched (on the same
      clock as `time`), or None.
    step_metrics: each of the window's local steps' value of the task's
      efficiency metric (`Task.efficiency_metric`), in order (float32),
      `{name: values}` (classification's: `{"accuracy": [...]}`); empty
      when the loss reports no such metric.
    local_updates: the window's local steps (its λ_k with Dynamic Local
      Updates); 0: not said, λ.
    bytes_committed: the commit's payload bytes as sent (compressed with
      `--commit_compression`); 0: not said.
    bytes_pulled: the center bytes its worker pulled since its previous
      commit (its first: since the worker started), as sent; 0: none or
      not said. A checkpoint books both per worker, so a resume counts the
      traffic of the commits it keeps.
  """
  worker: int
  clock: int
  loss: float
  metrics: Mapping[str, float]
  time: float
  window_start: Optional[float] = None
  step_metrics: Mapping[str, Sequence[float]] = {}
  local_updates: int = 0
  bytes_committed: int = 0
  bytes_pulled: int = 0


Wire = Tuple[Tuple[int, str], ...]


class FlatLayout:
  """Ravels a float32 pytree into one vector and back, in numpy or inside `jax.jit`.

  Example:
    >>> import numpy as np
    >>> layout = FlatLayout.from_tree({"b": np.zeros(2, np.float32),
    ...                                "w": np.ones((2, 2), np.float32)})
    >>> layout.num_params
    6
    >>> layout.unravel(np.arange(6, dtype=np.float32))["w"]
    array([[2., 3.],
           [4., 5.]], dtype=float32)
  """

  def __init__(self, treedef, shapes, dtypes):
    self.treedef = treedef
    self.shapes = [tuple(int(d) for d in s) for s in shapes]
    self.dtypes = [np.dtype(d) for d in dtypes]
    for dtype in self.dtypes:
      if dtype != np.float32:
        raise ValueError(
            f"the runtime moves float32 parameters only, found a {dtype} leaf")
    self.sizes = [int(np.prod(s, dtype=np.int64)) for s in self.shapes]
    self.offsets = np.cumsum([0] + self.sizes).tolist()
    self.num_params = int(self.offsets[-1])

  @classmethod
  def from_tree(cls, tree) -> "FlatLayout":
    """The layout of `tree`, whose leaves are arrays or `jax.ShapeDtypeStruct`s."""
    import jax  # Deferred: the launcher imports this module before placement.
    leaves, treedef = jax.tree.flatten(tree)
    return cls(treedef, [l.shape for l in leaves], [l.dtype for l in leaves])

  def metadata(self) -> List[Tuple[Tuple[int, ...], str]]:
    """Shapes and dtypes: what another process checks its own layout against."""
    return [(s, d.str) for s, d in zip(self.shapes, self.dtypes)]

  def check(self, metadata) -> None:
    """Raises ValueError unless `metadata` (from another process) matches."""
    mine = self.metadata()
    theirs = [(tuple(s), np.dtype(d).str) for s, d in metadata]
    if mine != theirs:
      raise ValueError(
          "parameter layout differs between processes: "
          f"{len(mine)} leaves / {self.num_params} values here, "
          f"{len(theirs)} leaves there")

  def ravel(self, tree):
    """The flat float32 vector of `tree` (jittable)."""
    import jax
    import jax.numpy as jnp
    leaves = jax.tree.leaves(tree)
    return jnp.concatenate([jnp.ravel(l).astype(jnp.float32) for l in leaves])

  def ravel_numpy(self, tree) -> np.ndarray:
    """`ravel` on the host, as one numpy copy."""
    import jax
    out = np.empty(self.num_params, np.float32)
    for leaf, start, size in zip(
        jax.tree.leaves(tree), self.offsets, self.sizes):
      out[start:start + size] = np.asarray(leaf, np.float32).reshape(-1)
    return out

  def unravel(self, flat) -> Any:
    """The pytree of `flat` (numpy views, or slices inside `jax.jit`)."""
    leaves = [
        flat[start:start + size].reshape(shape)
        for start, size, shape in zip(self.offsets, self.sizes, self.shapes)
    ]
    return self.treedef.unflatten(leaves)


def _layout_of(tree) -> FlatLayout:
  """The layout of any pytree of arrays or `jax.ShapeDtypeStruct`s, its leaves read as float32."""
  import jax
  import jax.numpy as jnp
  leaves, treedef = jax.tree.flatten(tree)
  return FlatLayout(treedef, [jnp.shape(l) for l in leaves],
                    [np.float32] * len(leaves))


def num_params(tree) -> int:
  """The number of entries of a pytree's leaves (arrays or `jax.ShapeDtypeStruct`s).

  Example:
    >>> import numpy as np
    >>> num_params({"b": np.zeros(2), "w": np.zeros((2, 3))})
    8
  """
  return _layout_of(tree).num_params


def ravel(tree):
  """A pytree as one flat float32 vector, its leaves in `jax.tree.leaves` order (jittable)."""
  return _layout_of(tree).ravel(tree)


def unravel_like(flat, like):
  """`flat` as a pytree shaped like `like` (`ravel` undone; jittable)."""
  return _layout_of(like).unravel(flat)


def pack(strategy, payload) -> Tuple[Any, ...]:
  """A strategy's payload as the runtime sends it: flat arrays of plain dtypes (jittable).

  Each entry in `strategy.payload` order: a pytree raveled into one float32
  vector (`ravel`: the leaves in `jax.tree.leaves` order, as `FlatLayout`
  ravels them), an encoded `delta` as its codec's arrays (`Codec.to_wire`).
  `unpack` undoes it.
  """
  arrays = []
  for key in strategy.payload:
    if key == "delta" and strategy.compression is not None:
      arrays.extend(strategy.compression.to_wire(payload[key]))
    else:
      arrays.append(ravel(payload[key]))
  return tuple(arrays)


def unpack(strategy, arrays, center):
  """The payload `pack` sent, its pytrees shaped like `center` (jittable)."""
  import jax
  import jax.numpy as jnp
  arrays, payload = list(arrays), {}
  for key in strategy.payload:
    if key == "delta" and strategy.compression is not None:
      arity = len(jax.eval_shape(strategy.compression.encode,
                                 jax.ShapeDtypeStruct((1,), jnp.float32)))
      payload[key] = tuple(strategy.compression.from_wire(arrays[:arity]))
      del arrays[:arity]
    else:
      payload[key] = unravel_like(arrays.pop(0), center)
  return payload


def payload_spec(strategy, center) -> Tuple[Any, ...]:
  """The shapes and dtypes of `pack`'s arrays for a model shaped like `center` (arrays or `jax.ShapeDtypeStruct`s).

  Example:
    >>> import jax.numpy as jnp
    >>> from agn_jax import compression, get_strategy
    >>> from agn_jax.strategies import with_compression
    >>> s = with_compression(get_strategy("adag"), compression.parse("int8"))
    >>> [(x.shape, str(x.dtype)) for x in payload_spec(s, jnp.zeros(3000))]
    [((3000,), 'int8'), ((3,), 'float32'), ((3000,), 'float32')]
  """
  import jax
  return tuple(jax.eval_shape(
      lambda c: pack(strategy, strategy.worker_commit(
          strategy.init_worker(c), c)[0]), center))


def commit_bytes(strategy, center) -> int:
  """Bytes of one commit as sent (`payload_spec`'s arrays) for a model shaped like `center`.

  Example:
    >>> import jax.numpy as jnp
    >>> from agn_jax import compression, get_strategy
    >>> from agn_jax.strategies import with_compression
    >>> s = get_strategy("agn")
    >>> commit_bytes(s, jnp.zeros(1000)), commit_bytes(with_compression(
    ...     s, compression.parse("bf16")), jnp.zeros(1000))
    (4000, 2000)
  """
  return sum(math.prod(x.shape) * np.dtype(x.dtype).itemsize
             for x in payload_spec(strategy, center))


def wire_of(strategy, layout: FlatLayout) -> Wire:
  """`(length, dtype)` of each flat array a commit of `strategy` sends for `layout`'s model."""
  import jax
  shapes = layout.treedef.unflatten(
      [jax.ShapeDtypeStruct(s, np.float32) for s in layout.shapes])
  return tuple((int(np.prod(x.shape)), np.dtype(x.dtype).str)
               for x in payload_spec(strategy, shapes))


def wire_spec(num_params: int, payload_size: int,
              wire: Optional[Sequence] = None) -> Wire:
  """Each flat array of a commit as `(length, dtype)`: `wire`, or by default `payload_size` float32 vectors of `num_params`.

  With `--commit_compression` a commit is its codec's arrays (`wire_of`), of
  other lengths and dtypes.

  Example:
    >>> wire_spec(3, 2)
    ((3, '<f4'), (3, '<f4'))
    >>> wire_spec(3, 2, [(3, "|i1"), (1, "<f4")])
    ((3, '|i1'), (1, '<f4'))
  """
  if wire is None:
    return ((int(num_params), np.dtype(np.float32).str),) * int(payload_size)
  wire = tuple((int(n), np.dtype(d).str) for n, d in wire)
  if len(wire) != payload_size:
    raise ValueError(f"a wire of {len(wire)} arrays for a payload of "
                     f"{payload_size}")
  return wire


def wire_bytes(wire: Wire) -> int:
  """Bytes of one commit of this wire.

  Example:
    >>> wire_bytes(((3, "|i1"), (1, "<f4")))
    7
  """
  return sum(n * np.dtype(d).itemsize for n, d in wire)
