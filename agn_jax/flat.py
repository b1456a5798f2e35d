"""One flat float32 vector per parameter pytree: the form the center and commits travel in.

The treedef stays in each process (every process builds the same model from
the same config); only shapes and dtypes travel, as metadata to check against.
"""

from typing import Any, List, Tuple

import numpy as np


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
