"""Keras 2.0's Adam and Adagrad as optax transformations: the local optimizers the thesis' workers ran.

The thesis' reference implementation, dist-keras (June 2017), compiled each
worker's Keras model with `optimizer='adam'` (or `'adagrad'`), so its local
steps were Keras 2.0.x's `Adam()` and `Adagrad()` at their defaults. Both
differ from optax's in where epsilon sits, and Adagrad in where its
accumulator starts:

* Adam: Keras folds the bias corrections into the step size,
  `lr_t = lr · sqrt(1 − β₂ᵗ) / (1 − β₁ᵗ)`, and adds ε to `sqrt(v)`, the
  uncorrected second moment; optax adds ε to `sqrt(v̂)`, the corrected one.
  Keras' ε is thus `ε / sqrt(1 − β₂ᵗ)` in optax's terms: about 32 ε at the
  first step. They differ where `sqrt(v)` is not much larger than ε.
* Adagrad: Keras' accumulator starts at 0 and ε (1e-8) is added outside
  the square root, `g / (sqrt(a) + ε)`: its first step is `lr · sign(g)`
  for any gradient far above ε. optax's starts at 0.1 and adds ε (1e-7)
  inside, `g / sqrt(a + ε)`: its first step is `lr · g / sqrt(0.1 + g²)`,
  a tenth of Keras' for |g| ≈ 0.03.

Source: keras-team/keras at tag 2.0.5 (commit d4b618bf23d8, 12 June 2017),
`keras/optimizers.py`, `Adam.get_updates` and `Adagrad.get_updates`; the
defaults (`Adam(lr=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-8)`,
`Adagrad(lr=0.01, epsilon=1e-8)`, accumulators `K.zeros`) are the same in
every Keras from 2.0.0 to 2.1.0.
"""

import jax
import jax.numpy as jnp
import optax

# Keras 2.0's defaults (`keras/optimizers.py`, tag 2.0.5).
KERAS_ADAM_EPSILON = 1e-8
KERAS_ADAGRAD_EPSILON = 1e-8


def scale_by_keras_adam(b1: float = 0.9, b2: float = 0.999,
                        eps: float = KERAS_ADAM_EPSILON
                       ) -> optax.GradientTransformation:
  """Keras 2.0's Adam direction: `sqrt(1 − b2ᵗ) / (1 − b1ᵗ) · m / (sqrt(v) + eps)`.

  With `t` the step (1 at the first update), `m ← b1 m + (1 − b1) g` and
  `v ← b2 v + (1 − b2) g²`, both starting at zero. The state is optax's
  `ScaleByAdamState` (uncorrected moments, as optax's Adam keeps them).

  Args:
    b1: `beta_1`, in [0, 1).
    b2: `beta_2`, in [0, 1).
    eps: `epsilon`, added to `sqrt(v)`, >= 0.

  Returns:
    An `optax.GradientTransformation` with an `optax.ScaleByAdamState`.
  """
  for name, value in (("b1", b1), ("b2", b2)):
    if not 0 <= value < 1:
      raise ValueError(f"{name} must be in [0, 1), got {value!r}")
  if not eps >= 0:
    raise ValueError(f"eps must be >= 0, got {eps!r}")

  def init_fn(params):
    # Two trees of zeros, not one twice: a donated state must not alias.
    return optax.ScaleByAdamState(jnp.zeros([], jnp.int32),
                                  optax.tree_utils.tree_zeros_like(params),
                                  optax.tree_utils.tree_zeros_like(params))

  def update_fn(updates, state, params=None):
    del params
    mu = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, state.mu, updates)
    nu = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * jnp.square(g),
                      state.nu, updates)
    count = optax.safe_increment(state.count)
    t = count.astype(jnp.float32)
    correction = jnp.sqrt(1 - b2**t) / (1 - b1**t)
    new_updates = jax.tree.map(
        lambda m, v: (correction * m / (jnp.sqrt(v) + eps)).astype(m.dtype),
        mu, nu)
    return new_updates, optax.ScaleByAdamState(count, mu, nu)

  return optax.GradientTransformation(init_fn, update_fn)


def keras_adam(learning_rate: optax.ScalarOrSchedule = 1e-3, b1: float = 0.9,
               b2: float = 0.999, eps: float = KERAS_ADAM_EPSILON
              ) -> optax.GradientTransformation:
  """Keras 2.0's `Adam`: `θ ← θ − lr · sqrt(1 − b2ᵗ) / (1 − b1ᵗ) · m / (sqrt(v) + eps)`.

  Against `optax.adam(lr, b1, b2, eps)`, which steps `lr · m̂ / (sqrt(v̂) + eps)`
  with `m̂ = m / (1 − b1ᵗ)`, `v̂ = v / (1 − b2ᵗ)`: the same step with ε
  scaled by `1 / sqrt(1 − b2ᵗ)` (see the module's docstring).

  Args:
    learning_rate: `lr`, > 0 (Keras' default 1e-3), or a schedule of the
      step: `optax.scale_by_learning_rate` evaluates it at `t − 1`, the
      updates before this one, the same count as the `t` above.
    b1: `beta_1`.
    b2: `beta_2`.
    eps: `epsilon` (Keras 2.0's 1e-8).

  Returns:
    An `optax.GradientTransformation`.

  Example:
    >>> import jax.numpy as jnp
    >>> tx = keras_adam(0.1)
    >>> u, _ = tx.update(jnp.array([1e-8]), tx.init(jnp.zeros(1)))
    >>> round(float(u[0]), 4)  # optax.adam(0.1) steps -0.05 here.
    -0.0031

  References:
    keras-team/keras 2.0.5, `keras/optimizers.py`, `Adam`.
  """
  if not callable(learning_rate) and not learning_rate > 0:
    raise ValueError(f"learning_rate must be > 0, got {learning_rate!r}")
  return optax.chain(scale_by_keras_adam(b1, b2, eps),
                     optax.scale_by_learning_rate(learning_rate))


def scale_by_keras_adagrad(eps: float = KERAS_ADAGRAD_EPSILON
                          ) -> optax.GradientTransformation:
  """Keras 2.0's Adagrad direction: `a ← a + g²`, then `g / (sqrt(a) + eps)`, with `a` starting at 0.

  The state is optax's `ScaleByRssState` (its `sum_of_squares` is `a`).

  Args:
    eps: `epsilon`, added to `sqrt(a)`, >= 0.

  Returns:
    An `optax.GradientTransformation` with an `optax.ScaleByRssState`.
  """
  if not eps >= 0:
    raise ValueError(f"eps must be >= 0, got {eps!r}")

  def init_fn(params):
    return optax.ScaleByRssState(optax.tree_utils.tree_zeros_like(params))

  def update_fn(updates, state, params=None):
    del params
    accumulated = jax.tree.map(lambda a, g: a + jnp.square(g),
                               state.sum_of_squares, updates)
    new_updates = jax.tree.map(
        lambda g, a: (g / (jnp.sqrt(a) + eps)).astype(g.dtype), updates,
        accumulated)
    return new_updates, optax.ScaleByRssState(accumulated)

  return optax.GradientTransformation(init_fn, update_fn)


def keras_adagrad(learning_rate: optax.ScalarOrSchedule = 1e-2,
                  eps: float = KERAS_ADAGRAD_EPSILON
                 ) -> optax.GradientTransformation:
  """Keras 2.0's `Adagrad`: `a ← a + g²`, `θ ← θ − lr · g / (sqrt(a) + eps)`, `a` from 0.

  Against `optax.adagrad(lr)`: `a` from 0.1 and `g / sqrt(a + 1e-7)` (see
  the module's docstring).

  Args:
    learning_rate: `lr`, > 0 (Keras' default 1e-2), or a schedule of the
      step (the updates before this one).
    eps: `epsilon` (Keras 2.0's 1e-8).

  Returns:
    An `optax.GradientTransformation`.

  Example:
    >>> import jax.numpy as jnp
    >>> tx = keras_adagrad(0.01)
    >>> u, _ = tx.update(jnp.array([0.03]), tx.init(jnp.zeros(1)))
    >>> round(float(u[0]), 6)  # -lr · sign(g); optax.adagrad(0.01): -0.00094
    -0.01

  References:
    keras-team/keras 2.0.5, `keras/optimizers.py`, `Adagrad`.
  """
  if not callable(learning_rate) and not learning_rate > 0:
    raise ValueError(f"learning_rate must be > 0, got {learning_rate!r}")
  return optax.chain(scale_by_keras_adagrad(eps),
                     optax.scale_by_learning_rate(learning_rate))

