"""Accumulated Gradient Normalization (AGN) as an optax gradient transformation.

The transformation is pure and jittable; it knows nothing of processes. A
distributed worker uses `commit_delta` and `reanchor` around it.
"""

import weakref
from typing import Any, Callable, NamedTuple, Union

import jax
import jax.numpy as jnp
import optax

Normalization = Union[str, Callable[[optax.Updates, Any], optax.Updates]]
NORMALIZATIONS = ("window", "none", "l2")


class AGNState(NamedTuple):
  """State of the `GradientTransformation` returned by `agn`.

  Attributes:
    inner_state: state of the inner (local) optimizer, kept across windows.
    anchor: the center at the start of the current communication window.
    count: local steps taken in the current window, in `[0, window)`.
    delta: the normalized delta of the window that ended last (zeros before the
      first commit). This is what a distributed worker commits.
    window: local steps of the current window (int32): λ, unless the worker
      set its own for this window (`set_window`, Dynamic Local Updates).
      The window commits after this many steps and `"window"` normalization
      divides by it.
  """

  inner_state: optax.OptState
  anchor: optax.Params
  count: jax.Array
  delta: optax.Updates
  window: jax.Array


class WindowPhases(NamedTuple):
  """An `agn` transformation's update with the commit decided before tracing.

  `agn`'s own `update` decides at run time whether a step ends its window,
  in a loop of zero or one trip; XLA cannot fuse the inner optimizer's
  update with the parameters' update across that loop, so every local step
  writes and reads its updates once more than the inner optimizer alone
  (4–7 % of a paper-MLP window on a CPU, at λ = 40 and 10). A caller that
  knows where its window ends calls these instead (`window_phases`); they
  give the same updates and state as `update` at those steps.

  Attributes:
    local: `update(updates, state, params)` for a step that does not end
      its window (`count < window − 1`).
    commit: the same for the step that ends it (`count == window − 1`).
  """
  local: Callable[..., Any]
  commit: Callable[..., Any]


# The phases of each `agn` transformation, by its `update` function.
_PHASES: "weakref.WeakKeyDictionary[Callable, WindowPhases]" = (
    weakref.WeakKeyDictionary())


def window_phases(tx: optax.GradientTransformation):
  """The `WindowPhases` of a transformation `agn` returned, or None for any other.

  Example:
    >>> import optax
    >>> from agn_jax import agn
    >>> window_phases(agn(optax.sgd(0.1), 4)) is not None
    True
    >>> window_phases(optax.sgd(0.1)) is None
    True
  """
  try:
    return _PHASES.get(tx.update)
  except TypeError:  # Not weakly referenceable: not `agn`'s.
    return None


def _needs_params(params) -> None:
  if params is None:
    raise ValueError("agn needs `params` in update(updates, state, params)")


def _normalizer(normalization: Normalization):
  """Returns `f(accumulated, window) -> delta` for a `normalization` argument.

  `window` is the window's own number of local steps (an int32 array), λ
  unless the worker set another (`set_window`).
  """
  if callable(normalization):
    return normalization
  if normalization == "window":
    return lambda a, window: jax.tree.map(
        lambda x: x / window.astype(x.dtype), a)
  if normalization == "none":
    return lambda a, window: a
  if normalization == "l2":

    def l2(a, window):
      del window
      norm = optax.tree.norm(a)
      # A zero accumulated update has no direction: commit zeros, not 0/0.
      scale = jnp.where(norm > 0, 1.0 / jnp.where(norm > 0, norm, 1.0), 0.0)
      return jax.tree.map(lambda x: (x * scale).astype(x.dtype), a)

    return l2
  raise ValueError(
      f"normalization must be one of {NORMALIZATIONS} or a callable "
      f"(accumulated, window) -> delta, got {normalization!r}")


def agn(
    inner: optax.GradientTransformation,
    communication_window: int,
    normalization: Normalization = "window",
) -> optax.GradientTransformation:
  """Accumulated Gradient Normalization.

  Between commits the parameters follow `inner`. Every
  `communication_window`-th update (λ) the parameters become the new center
  `anchor + normalize(a)`, where `anchor` is the center at the start of the
  window and `a = θ − anchor` is the update accumulated over the window (the
  sum of the window's local updates). With the default normalization
  `"window"`, `normalize(a) = a / λ`, the rule of the paper. The inner state is
  kept across windows.

  A worker may give one window another length (`set_window`: Dynamic Local
  Updates, where a slower worker's window is shorter); that window commits
  after its own λ_k steps and `"window"` divides by λ_k, the steps it
  actually took.

  With one worker and no server AGN is exactly
  `optax.lookahead(inner, sync_period=λ, slow_step_size=1/λ)`.

  Like `optax.lookahead`, the updates returned must be applied unchanged, so
  that the parameters stay `anchor + a`. The commit is a `lax.while_loop` of
  zero or one trip (a `lax.cond` would copy the model on every local step
  inside a `scan`), so `update` itself cannot be reverse-differentiated.

  Args:
    inner: the local optimizer, any optax transformation or chain.
    communication_window: λ, the number of local steps between commits, >= 1.
    normalization: `"window"` (a/λ, the paper's rule), `"none"` (the raw
      accumulated update, as DOWNPOUR and DynSGD commit it), `"l2"` (a/‖a‖₂, a
      direction for a server-side step size), or a callable
      `(accumulated, window) -> delta`, `window` the window's local steps
      (an int32 array).

  Returns:
    An `optax.GradientTransformation`; its `update` needs `params`.

  Example:
    >>> import jax.numpy as jnp, optax
    >>> from agn_jax import agn
    >>> tx = agn(optax.sgd(0.1), communication_window=2)
    >>> params = jnp.array([1.0])
    >>> state = tx.init(params)
    >>> for _ in range(2):  # two steps of -0.1: 1.0 -> 0.9 -> 0.8
    ...   updates, state = tx.update(jnp.array([1.0]), state, params)
    ...   params = optax.apply_updates(params, updates)
    >>> params  # the window ends: 1.0 + (0.8 - 1.0) / 2
    Array([0.9], dtype=float32)

  References:
    Hermans, Spanakis, Möckel, `Accumulated Gradient Normalization
    <https://arxiv.org/abs/1710.02368>`_, ACML 2017.
  """
  if isinstance(communication_window, bool) or not isinstance(
      communication_window, int) or communication_window < 1:
    raise ValueError(
        "communication_window must be an integer >= 1, got "
        f"{communication_window!r}")
  normalize = _normalizer(normalization)

  def init_fn(params):
    return AGNState(
        inner_state=inner.init(params),
        anchor=params,
        count=jnp.zeros([], jnp.int32),
        delta=optax.tree_utils.tree_zeros_like(params),
        window=jnp.asarray(communication_window, jnp.int32),
    )

  def commit(params, updates, state):
    """The window's last step: the parameters move to the new center."""
    # `a` is read off the parameters rather than summed step by step: the sum
    # would cost a pass over the model on every local step.
    accumulated = jax.tree.map(lambda p, u, c: p + u - c, params, updates,
                               state.anchor)
    delta = normalize(accumulated, state.window)
    center = jax.tree.map(lambda c, d: c + d.astype(c.dtype), state.anchor,
                          delta)
    to_center = jax.tree.map(lambda c, p, u: (c - p).astype(u.dtype),
                             center, params, updates)
    delta = jax.tree.map(lambda d, p: d.astype(p.dtype), delta, params)
    return to_center, center, delta

  def local_update(updates, state, params=None):
    """A step known not to end its window (`count < window − 1`)."""
    _needs_params(params)
    updates, inner_state = inner.update(updates, state.inner_state, params)
    return updates, state._replace(inner_state=inner_state,
                                   count=state.count + 1)

  def commit_update(updates, state, params=None):
    """A step known to end its window (`count == window − 1`)."""
    _needs_params(params)
    updates, inner_state = inner.update(updates, state.inner_state, params)
    updates, anchor, delta = commit(params, updates, state)
    return updates, AGNState(inner_state, anchor, jnp.zeros_like(state.count),
                             delta, state.window)

  def update_fn(updates, state, params=None):
    _needs_params(params)
    updates, inner_state = inner.update(updates, state.inner_state, params)
    commit_now = state.count == state.window - 1

    # The commit runs in a while_loop of 0 or 1 trips, not a lax.cond: inside
    # the kernel's scan XLA copies the operands a cond branch passes through
    # (anchor and delta, then the anchor again: three model-sized copies per
    # local step), while a while_loop updates its carry in place.
    def body(carry):
      _, updates, anchor, delta = carry
      return (jnp.zeros_like(commit_now),
              *commit(params, updates, state._replace(anchor=anchor,
                                                      delta=delta)))

    _, updates, anchor, delta = jax.lax.while_loop(
        lambda carry: carry[0], body,
        (commit_now, updates, state.anchor, state.delta))
    count = jnp.where(commit_now, 0, state.count + 1).astype(jnp.int32)
    return updates, AGNState(inner_state, anchor, count, delta, state.window)

  _PHASES[update_fn] = WindowPhases(local_update, commit_update)
  return optax.GradientTransformation(init_fn, update_fn)


def _is_agn_state(x: Any) -> bool:
  return isinstance(x, AGNState)


def holds_agn_state(opt_state: optax.OptState) -> bool:
  """Whether `opt_state` holds exactly one `AGNState` (`find_agn_state` finds it)."""
  return len([s for s in jax.tree.leaves(opt_state, is_leaf=_is_agn_state)
              if _is_agn_state(s)]) == 1


def find_agn_state(opt_state: optax.OptState) -> AGNState:
  """Returns the one `AGNState` inside `opt_state` (which may be a chain's).

  Raises:
    ValueError: when `opt_state` holds no `AGNState` or more than one.
  """
  found = [
      s for s in jax.tree.leaves(opt_state, is_leaf=_is_agn_state)
      if _is_agn_state(s)
  ]
  if len(found) != 1:
    raise ValueError(
        f"expected exactly one AGNState in the optimizer state, found {len(found)}")
  return found[0]


def commit_delta(opt_state: optax.OptState) -> optax.Updates:
  """The normalized delta of the window that just ended: what a worker commits.

  Args:
    opt_state: the state of `agn(...)`, or of a chain that contains it.

  Returns:
    The delta pytree (`anchor_new − anchor_old`), zeros before the first commit.

  Example:
    >>> import jax.numpy as jnp, optax
    >>> from agn_jax import agn, commit_delta
    >>> tx = agn(optax.sgd(1.0), communication_window=1, normalization="none")
    >>> params = jnp.zeros(2)
    >>> updates, state = tx.update(jnp.ones(2), tx.init(params), params)
    >>> commit_delta(state)
    Array([-1., -1.], dtype=float32)
  """
  return find_agn_state(opt_state).delta


def reanchor(opt_state: optax.OptState, center: optax.Params):
  """Re-anchors a worker onto a `center` it pulled.

  The parameters become the center, the window restarts at the center, and the
  inner optimizer's state (e.g. Adam's moments) is kept.

  Args:
    opt_state: the state of `agn(...)`, or of a chain that contains it.
    center: the pulled center, a pytree like the parameters.

  Returns:
    `(params, opt_state)`: the new local parameters (the center) and state.

  Example:
    >>> import jax.numpy as jnp, optax
    >>> from agn_jax import agn, reanchor
    >>> tx = agn(optax.adam(1e-3), communication_window=4)
    >>> state = tx.init(jnp.zeros(3))
    >>> params, state = reanchor(state, jnp.ones(3))
    >>> params
    Array([1., 1., 1.], dtype=float32)
  """
  find_agn_state(opt_state)  # Validates that there is exactly one.

  def replace(s):
    if _is_agn_state(s):
      return s._replace(anchor=center, count=jnp.zeros_like(s.count))
    return s

  new_state = jax.tree.map(replace, opt_state, is_leaf=_is_agn_state)
  return center, new_state


def set_window(opt_state: optax.OptState, steps):
  """Gives the window that starts now `steps` local steps instead of λ.

  Call it at the start of a window (after `init` or `reanchor`, before the
  first local step): the window then commits after `steps` steps, and
  `"window"` normalization divides its accumulated update by `steps`. The
  next windows keep that length until it is set again. Dynamic Local Updates
  set each window to the worker's own λ_k this way.

  Args:
    opt_state: the state of `agn(...)`, or of a chain that contains it.
    steps: local steps of the window, >= 1 (an int or an int32 array).

  Returns:
    The state with its window set.

  Example:
    >>> import jax.numpy as jnp, optax
    >>> from agn_jax import agn, commit_delta
    >>> from agn_jax.transform import set_window
    >>> tx = agn(optax.sgd(1.0), communication_window=4)
    >>> params = jnp.zeros(1)
    >>> state = set_window(tx.init(params), 2)
    >>> for _ in range(2):  # Two steps of -1, then a commit: a = -2, a / 2.
    ...   updates, state = tx.update(jnp.ones(1), state, params)
    ...   params = params + updates
    >>> commit_delta(state)
    Array([-1.], dtype=float32)
  """
  find_agn_state(opt_state)  # Validates that there is exactly one.

  def replace(s):
    if _is_agn_state(s):
      return s._replace(window=jnp.asarray(steps, jnp.int32).reshape(
          jnp.shape(s.window)))
    return s

  return jax.tree.map(replace, opt_state, is_leaf=_is_agn_state)
