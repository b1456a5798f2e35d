"""The window kernel: a worker's λ local steps in one XLA dispatch (`lax.scan`)."""

import functools
from typing import Any, Callable, Dict, NamedTuple, Optional, Tuple

import jax
import jax.numpy as jnp
import optax

from agn_jax import transform

LossFn = Callable[[optax.Params, Any], Tuple[jax.Array, Dict[str, jax.Array]]]


class WindowResult(NamedTuple):
  """What one communication window returns.

  Attributes:
    params: the local parameters after the window.
    opt_state: the optimizer state after the window.
    delta: the normalized delta of the window (`transform.commit_delta`) when
      the transformation contains `agn`, else None.
    metrics: per-step metrics, each an array of shape [λ]: `loss` and whatever
      the loss function returns as auxiliary metrics (e.g. `accuracy`); for
      a window of fewer `steps`, the entries past them are NaN.
  """

  params: optax.Params
  opt_state: optax.OptState
  delta: Optional[optax.Updates]
  metrics: Dict[str, jax.Array]


def window_kernel(loss_fn: LossFn,
                  tx: optax.GradientTransformation,
                  donate: bool = True) -> Callable[..., WindowResult]:
  """Builds the jitted window kernel.

  The kernel takes `(params, opt_state, batches)`, where every leaf of
  `batches` has a leading axis of length λ (one mini-batch per local step), and
  runs the λ steps `g = ∇loss; u, s = tx.update(g, s, θ); θ = θ + u` in one
  `lax.scan`, i.e. one dispatch. With `donate=True` the parameter and state
  buffers are donated, so a window keeps no second copy of them alive: do not
  use the arrays you passed in afterwards.

  `kernel(params, opt_state, batches, steps)` runs only the first `steps`
  mini-batches (an int32 scalar, traced: one compilation serves every
  window length up to λ), in a `lax.fori_loop` whose trip count is `steps`:
  the steps after them cost nothing and change nothing (vmapped, the loop
  runs the longest window and leaves the finished ones as they are). With
  `agn`, set the window's length first (`transform.set_window`), or it
  commits after λ steps only. Dynamic Local Updates run windows this way.

  With `agn` (`transform.window_phases(tx)` finds its phases), a call
  that starts a window (`count == 0`) and runs all of its steps (λ, or
  the window `set_window` gave it) places the commit on its last step
  before tracing, so that XLA fuses every step's optimizer update into
  the parameters'; any other call runs `tx.update` at every step. Both
  give the same steps.

  Args:
    loss_fn: `loss_fn(params, batch) -> (loss, aux)` with `aux` a dict of
      scalar metrics, e.g. `{"accuracy": acc}`.
    tx: the worker's transformation, typically `agn(inner, λ)`.
    donate: donate the input parameters and optimizer state.

  Returns:
    `kernel(params, opt_state, batches) -> WindowResult`.

  Example:
    >>> import jax.numpy as jnp, optax
    >>> from agn_jax import agn, window_kernel
    >>> loss_fn = lambda p, b: (jnp.mean((p - b) ** 2), {})
    >>> tx = agn(optax.sgd(0.5), communication_window=4)
    >>> kernel = window_kernel(loss_fn, tx, donate=False)
    >>> params = jnp.zeros(1)
    >>> result = kernel(params, tx.init(params), jnp.ones((4, 1)))
    >>> result.metrics["loss"].shape
    (4,)
    >>> short = kernel(params, tx.init(params), jnp.ones((4, 1)), 3)
    >>> bool(jnp.isnan(short.metrics["loss"][3]))
    True
  """
  grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
  phases = transform.window_phases(tx)

  def step(carry, batch, update=tx.update):
    params, opt_state = carry
    (loss, aux), grads = grad_fn(params, batch)
    updates, opt_state = update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    metrics = {"loss": loss, **aux}
    return (params, opt_state), metrics

  def first(batches):
    return jax.tree.map(lambda b: b[0], batches)

  def step_metric_shapes(carry, batches):
    """`step`'s metrics for one batch, shapes only: the loss, no gradient."""
    loss, aux = jax.eval_shape(loss_fn, carry[0], first(batches))
    return {"loss": loss, **aux}

  def either(pred, if_true, if_false, *operands):
    """`if_true(*operands)` where `pred`, else `if_false(*operands)`.

    Each in a loop of zero or one trip, which XLA runs in place (a
    `lax.cond` would copy the operands, the model among them).
    """
    def once(fn):
      return lambda loop: (jnp.zeros_like(pred),) + tuple(fn(*loop[1:]))

    loop = jax.lax.while_loop(lambda l: l[0], once(if_true),
                              (pred,) + operands)
    return jax.lax.while_loop(lambda l: l[0], once(if_false),
                              (~pred,) + loop[1:])[1:]

  def starts_window(carry, steps):
    """Whether the call runs one whole `agn` window from its first step."""
    state = carry[1]
    return (state.count == 0) & (state.window == steps)

  # Where a call runs one whole window from its start (every window of the
  # runtime's), the commit's step is known, and `agn`'s phases
  # (`transform.WindowPhases`) take the steps instead of `tx.update`: the
  # same updates, with each step's optimizer update fused into its
  # parameters'.

  def all_steps(carry, batches):
    if phases is None:
      return jax.lax.scan(step, carry, batches)

    def whole_window(carry, metrics):
      del metrics
      head = jax.tree.map(lambda b: b[:-1], batches)
      carry, metrics = jax.lax.scan(
          functools.partial(step, update=phases.local), carry, head)
      carry, last = step(carry, jax.tree.map(lambda b: b[-1], batches),
                         phases.commit)
      return carry, jax.tree.map(
          lambda m, v: jnp.concatenate([m, v[None]]), metrics, last)

    length = jax.tree.leaves(batches)[0].shape[0]
    metrics = jax.tree.map(
        lambda s: jnp.zeros((length,) + s.shape, s.dtype),
        step_metric_shapes(carry, batches))
    return either(starts_window(carry, length), whole_window,
                  lambda c, m: jax.lax.scan(step, c, batches), carry, metrics)

  def first_steps(carry, batches, steps):
    """The first `steps` of `batches`' steps; NaN metrics for the others."""
    length = jax.tree.leaves(batches)[0].shape[0]
    shapes = step_metric_shapes(carry, batches)
    metrics = jax.tree.map(
        lambda s: jnp.full((length,) + s.shape, jnp.nan if jnp.issubdtype(
            s.dtype, jnp.inexact) else 0, s.dtype), shapes)

    def steps_between(start, stop, carry, metrics, update=tx.update):
      def body(i, loop):
        carry, metrics = loop
        carry, values = step(carry, jax.tree.map(
            lambda b: jax.lax.dynamic_index_in_dim(b, i, keepdims=False),
            batches), update)
        metrics = jax.tree.map(
            lambda m, v: jax.lax.dynamic_update_index_in_dim(m, v, i, 0),
            metrics, values)
        return carry, metrics
      return jax.lax.fori_loop(start, stop, body, (carry, metrics))

    upper = jnp.minimum(jnp.asarray(steps, jnp.int32), length)
    if phases is None:
      return steps_between(0, upper, carry, metrics)

    def whole_window(carry, metrics):
      carry, metrics = steps_between(0, upper - 1, carry, metrics,
                                     phases.local)
      return steps_between(upper - 1, upper, carry, metrics, phases.commit)

    return either(starts_window(carry, upper), whole_window,
                  lambda c, m: steps_between(0, upper, c, m), carry, metrics)

  def window(params, opt_state, batches, steps=None):
    if steps is None:
      (params, opt_state), metrics = all_steps((params, opt_state), batches)
    else:
      (params, opt_state), metrics = first_steps((params, opt_state),
                                                 batches, steps)
    delta = (transform.commit_delta(opt_state)
             if transform.holds_agn_state(opt_state) else None)
    return WindowResult(params, opt_state, delta, metrics)

  if not donate:
    return jax.jit(window)  # Has `.lower` too.
  jitted = jax.jit(window, donate_argnums=(0, 1))

  def kernel(params, opt_state, batches, steps=None):
    # XLA refuses to donate one buffer twice, and `agn(...).init(params)` or
    # `reanchor` leave the anchor aliasing the parameters: copy such leaves.
    seen = set()

    def unalias(x):
      if isinstance(x, jax.Array):
        if id(x) in seen:
          return jnp.copy(x)
        seen.add(id(x))
      return x

    params, opt_state = jax.tree.map(unalias, (params, opt_state))
    return jitted(params, opt_state, batches, steps)

  # Ahead-of-time compilation without running a window (`kernel.lower(...)
  # .compile()`), e.g. to fill JAX's persistent compilation cache.
  kernel.lower = jitted.lower
  return kernel

