"""Per-commit instruments: the geometry of commits and of the center's path.

Pure and jittable functions over parameter pytrees (a flat float32 vector is a
pytree of one leaf, so a server loop that holds `agn_jax.wire` vectors uses
them as they are). They measure what the paper's argument is about: how large
commits are, how far the center moved under a worker while it computed
(distance staleness, the thesis' definition), whether consecutive commits and
the center's own movement point the same way (implicit momentum in action),
whether a stale commit still points down the gradient, and the implicit
momentum μ̂ of a whole run against the theory's `1 − 1/n`.

Conventions, the same for every instrument:

* `Δ` is the commit **as sent** (the worker's payload delta, before the
  server's rule scales it). The paper's claims are about what workers send;
  the rule (DynSGD's `1/(τ+1)`, ADAG's element-wise damping, a server
  optimizer's momentum) is a separate mechanism, and a server momentum would
  otherwise show up as the workers' alignment. A positive scalar scaling
  (AGN, DOWNPOUR, DynSGD) leaves every cosine unchanged anyway. What the
  center actually did is the **center step** `s_t = θ̃_after − θ̃_before` of
  the t-th applied commit, which μ̂ and `center_step_norm` use.
* A cosine with a zero vector has no value and is **NaN**, never 0 (0 would
  claim orthogonality and pull a run's mean towards it; e.g. the first commit
  has no previous commit and, at `τ = 0`, no center movement). The event
  books write NaN as null; aggregate with `nanmean`. Nothing divides by zero.
* With a `Subsample`, every vector is first restricted to the subsample's
  coordinates. Cosines and μ̂ are then those of the restricted vectors; norms
  and distances are scaled by `√(p/m)` (`p` parameters, `m` sampled), an
  estimate of the full norm whose square is unbiased. Without one (the
  default) everything is exact over all `p` parameters.

References:
  J. Hermans, *On Scalable Deep Learning and Parallelizing Gradient Descent*,
  master thesis, 2017 (staleness as a distance); I. Mitliagkas et al.,
  *Asynchrony begets Momentum*, 2016, arXiv:1605.09774 (`μ ≈ 1 − 1/n`).
"""

import math
from typing import Any, Callable, Dict, NamedTuple, Optional

import jax
from jax import lax
import jax.numpy as jnp
import numpy as np

Params = Any


# --- Coordinates -------------------------------------------------------------


class Subsample:
  """A fixed set of coordinates of the flat parameter vector, shared by every instrument.

  Coordinates are positions in the vector `agn_jax.wire.FlatLayout.ravel`
  builds: the leaves in `jax.tree.leaves` order, each raveled row-major. The
  indices are numpy, fixed when the object is built, so a jitted function
  that closes over a `Subsample` gathers each leaf's coordinates with
  constant indices (no ravel of the whole tree).

  Attributes:
    indices: sorted, distinct int64 positions in `[0, num_params)`.
    num_params: `p`, the length of the flat vector.
    scale: `√(p/m)` with `m = len(indices)`: what a subsample's norm is
      multiplied by to estimate the full norm.

  Example:
    >>> import jax.numpy as jnp
    >>> sub = Subsample([1, 4], num_params=5)
    >>> sub.gather({"a": jnp.arange(2.0), "b": jnp.arange(10.0, 13.0)})
    Array([ 1., 12.], dtype=float32)
  """

  def __init__(self, indices, num_params: int):
    num_params = int(num_params)
    if num_params < 1:
      raise ValueError(f"num_params must be at least 1, got {num_params}")
    indices = np.asarray(indices, np.int64).reshape(-1)
    if indices.size == 0:
      raise ValueError("indices must name at least one coordinate")
    if np.any(np.diff(indices) <= 0):
      raise ValueError("indices must be sorted and distinct")
    if indices[0] < 0 or indices[-1] >= num_params:
      raise ValueError(
          f"indices must lie in [0, num_params={num_params}), got "
          f"[{indices[0]}, {indices[-1]}]")
    self.indices = indices
    self.num_params = num_params
    self.scale = math.sqrt(num_params / indices.size)

  @classmethod
  def from_seed(cls, seed: int, num_params: int,
                fraction: float = 0.01) -> "Subsample":
    """`⌈fraction · p⌉` coordinates drawn uniformly without replacement.

    Args:
      seed: the seed of the draw; the same seed and `num_params` give the
        same coordinates in every process.
      num_params: `p`, the number of parameters.
      fraction: the share of coordinates, in `(0, 1]`.

    Returns:
      A `Subsample`.

    Example:
      >>> sub = Subsample.from_seed(0, num_params=1000, fraction=0.01)
      >>> len(sub), sub.scale
      (10, 10.0)
      >>> bool((Subsample.from_seed(0, 1000, 0.01).indices == sub.indices).all())
      True
    """
    if not 0.0 < fraction <= 1.0:
      raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    num_params = int(num_params)
    if num_params < 1:
      raise ValueError(f"num_params must be at least 1, got {num_params}")
    size = min(num_params, math.ceil(fraction * num_params))
    rng = np.random.default_rng(seed)
    return cls(np.sort(rng.choice(num_params, size, replace=False)),
               num_params)

  def __len__(self) -> int:
    return int(self.indices.size)

  def gather(self, tree: Params) -> jax.Array:
    """The sampled coordinates of `tree`, as one float32 vector (jittable)."""
    leaves = jax.tree.leaves(tree)
    sizes = [int(np.prod(np.shape(leaf), dtype=np.int64)) for leaf in leaves]
    if sum(sizes) != self.num_params:
      raise ValueError(
          f"the subsample is of {self.num_params} parameters, the tree has "
          f"{sum(sizes)}")
    offsets = np.cumsum([0] + sizes)
    bounds = np.searchsorted(self.indices, offsets)
    parts = [
        jnp.ravel(leaf)[self.indices[lo:hi] - offset].astype(jnp.float32)
        for leaf, offset, lo, hi in zip(leaves, offsets, bounds[:-1],
                                        bounds[1:])
        if hi > lo
    ]
    return jnp.concatenate(parts)


def _restrict(tree: Params, subsample: Optional[Subsample]) -> Params:
  return tree if subsample is None else subsample.gather(tree)


def _scale(subsample: Optional[Subsample]) -> float:
  return 1.0 if subsample is None else subsample.scale


# --- Vector arithmetic over pytrees (float32 reductions) -----------------------


# Products are summed along contiguous rows of this many entries, then the
# row sums are summed: a row's sequential sum keeps float32 rounding at about
# 1e-6 relative, however long the vector (one sequential sum over a flat
# 4.8 M-entry center loses about three digits).
_ROW = 1024


def _rows(x: jax.Array):
  """A 1-D array as whole rows of `_ROW` entries and the rest as one row."""
  whole = x.shape[0] - x.shape[0] % _ROW
  parts = [x[:whole].reshape(-1, _ROW)] if whole else []
  if whole < x.shape[0]:
    parts.append(x[whole:].reshape(1, -1))
  return parts


def _dots(pairs):
  """`[⟨a, b⟩ for a, b in pairs]` as float32 scalars, in one pass over the leaves.

  Every product is an operand of one variadic `lax.reduce` per leaf, so XLA
  reads each vector once for all the sums that use it: on a 2-core CPU,
  `commit_instruments().update` on the paper MLP took twice as long with one
  `jnp.sum` per product (six sums over five 2 M-entry vectors: 27 ms against
  7 ms as one reduction).
  """
  per_pair = [(jax.tree.leaves(a), jax.tree.leaves(b)) for a, b in pairs]
  totals = [jnp.zeros([], jnp.float32) for _ in pairs]
  for i in range(len(per_pair[0][0])):
    products = [
        jnp.ravel(a[i]).astype(jnp.float32) * jnp.ravel(b[i]).astype(
            jnp.float32) for a, b in per_pair
    ]
    for operands in zip(*map(_rows, products)):
      row_sums = lax.reduce(
          operands, tuple(jnp.zeros([], jnp.float32) for _ in operands),
          lambda xs, ys: tuple(x + y for x, y in zip(xs, ys)), (1,))
      totals = [t + jnp.sum(r) for t, r in zip(totals, row_sums)]
  return totals


def _dot(a: Params, b: Params) -> jax.Array:
  return _dots([(a, b)])[0]


def _sub(a: Params, b: Params) -> Params:
  return jax.tree.map(
      lambda x, y: x.astype(jnp.float32) - y.astype(jnp.float32), a, b)


def _safe_ratio(num: jax.Array, den: jax.Array) -> jax.Array:
  """`num / den`, NaN where `den` is 0 (with no division by zero traced)."""
  positive = den > 0
  return jnp.where(positive, num / jnp.where(positive, den, 1.0), jnp.nan)


def _cosine_from(dot, norm_a, norm_b):
  return _safe_ratio(dot, norm_a * norm_b)


# --- The instruments, one at a time ------------------------------------------


def norm(tree: Params, subsample: Optional[Subsample] = None) -> jax.Array:
  """`‖x‖₂` over every leaf; on a subsample, `√(p/m) ‖x_S‖₂`.

  The commit norm is `norm(Δ)`.

  Example:
    >>> import jax.numpy as jnp
    >>> float(norm({"w": jnp.array([3.0, 0.0]), "b": jnp.array([4.0])}))
    5.0
  """
  x = _restrict(tree, subsample)
  return jnp.sqrt(_dot(x, x)) * _scale(subsample)


def distance_staleness(center_at_apply: Params, center_pulled: Params,
                       subsample: Optional[Subsample] = None) -> jax.Array:
  """`‖θ̃_at_apply − θ̃_pulled‖₂`: how far the center moved while the worker computed.

  The thesis' definition of staleness. `θ̃_at_apply` is the center just
  before this commit is applied. Exact over all parameters by default; on a
  subsample, `√(p/m) ‖(θ̃_at_apply − θ̃_pulled)_S‖₂`.

  Example:
    >>> import jax.numpy as jnp
    >>> float(distance_staleness(jnp.array([1.0, 5.0]), jnp.array([4.0, 1.0])))
    5.0
  """
  return norm(_sub(_restrict(center_at_apply, subsample),
                   _restrict(center_pulled, subsample))) * _scale(subsample)


def cosine(a: Params, b: Params,
           subsample: Optional[Subsample] = None) -> jax.Array:
  """`⟨a, b⟩ / (‖a‖ ‖b‖)` over every leaf (or the subsample); NaN if either is 0.

  Example:
    >>> import jax.numpy as jnp
    >>> round(float(cosine(jnp.array([1.0, 0.0]), jnp.array([1.0, 1.0]))), 4)
    0.7071
    >>> float(cosine(jnp.array([1.0, 0.0]), jnp.zeros(2)))
    nan
  """
  a, b = _restrict(a, subsample), _restrict(b, subsample)
  ab, aa, bb = _dots([(a, b), (a, a), (b, b)])
  return _cosine_from(ab, jnp.sqrt(aa), jnp.sqrt(bb))


def gradient_cosine(loss_fn: Callable[..., Any], center_at_apply: Params,
                    batch: Any, commit: Params,
                    subsample: Optional[Subsample] = None,
                    has_aux: bool = False) -> jax.Array:
  """`cos(Δ, −∇L(θ̃_at_apply))` on a fixed probe batch.

  How well a stale commit points where the center needs to go when it
  arrives. The gradient is always computed in full (one backward pass over
  `batch`); with a subsample only the cosine is restricted to it. Its cost
  is a forward and backward pass, so a caller takes it every k-th commit.

  Args:
    loss_fn: `loss_fn(params, batch) -> loss`, or `-> (loss, aux)` with
      `has_aux=True` (as `agn_jax.models.classification_loss` returns).
    center_at_apply: `θ̃` just before the commit is applied.
    batch: the probe batch, the same one every time.
    commit: `Δ` as sent.
    subsample: restricts the cosine to these coordinates, or None.
    has_aux: whether `loss_fn` returns `(loss, aux)`.

  Returns:
    A float32 scalar in `[−1, 1]`, NaN if `Δ` or the gradient is zero.

  Example:
    >>> import jax.numpy as jnp
    >>> loss = lambda p, b: 0.5 * jnp.sum((p - b) ** 2)  # ∇ = θ − b
    >>> float(gradient_cosine(loss, jnp.zeros(2), jnp.array([1.0, 0.0]),
    ...                       commit=jnp.array([2.0, 0.0])))
    1.0
  """
  grad = jax.grad(loss_fn, has_aux=has_aux)(center_at_apply, batch)
  if has_aux:
    grad, _ = grad
  return cosine(commit, jax.tree.map(jnp.negative, grad), subsample)


def theory_momentum(num_workers: int) -> float:
  """The implicit momentum of `n` equally fast asynchronous workers, `1 − 1/n`.

  Mitliagkas et al. (2016): asynchrony with `n` workers acts like momentum
  `μ ≈ 1 − 1/n` on the center's steps; μ̂ (`MomentumEstimate`) measures it.

  Example:
    >>> theory_momentum(10)
    0.9
    >>> theory_momentum(1)
    0.0
  """
  if isinstance(num_workers, bool) or int(num_workers) != num_workers or (
      num_workers < 1):
    raise ValueError(
        f"num_workers must be a positive integer, got {num_workers!r}")
  return 1.0 - 1.0 / int(num_workers)


# --- μ̂, streamed ---------------------------------------------------------------


class MomentumEstimate(NamedTuple):
  """The running estimate μ̂ of the implicit momentum, one center step at a time.

  μ̂ is the least-squares slope of each center step on the one before,
  through the origin, pooled over coordinates and steps:

    `μ̂ = Σ_t ⟨s_t, s_{t−1}⟩ / Σ_t ‖s_{t−1}‖²`,

  with `s_t = θ̃_after − θ̃_before` of the t-th applied commit. Why this one:
  the implicit-momentum model is `s_t = μ s_{t−1} + ε_t` with `ε_t` the fresh
  (zero-mean) update, which has no intercept, and for it the slope through
  the origin is the least-squares (Gaussian maximum-likelihood) estimate; it
  is consistent, and with `N` regression pairs of independent noise its
  standard error is about `√((1 − μ²)/N)`. Unlike a mean of per-step cosines
  it is a slope, the quantity `1 − 1/n` predicts, and it weighs steps by
  their size, as the center's path does. Only two sums and the last step
  are kept, so a server folds steps in without keeping the trajectory. The
  sums are float32; over `T` steps their relative rounding error is of the
  order `√T · 6e-8`.

  Attributes:
    previous: `s_{t−1}` (zeros before the first step, which therefore adds
      nothing to either sum), a pytree like the center, or the subsampled
      vector.
    cross: `Σ ⟨s_t, s_{t−1}⟩` (float32).
    square: `Σ ‖s_{t−1}‖²` (float32).
    count: steps folded in (int32).

  Example:
    >>> import jax.numpy as jnp
    >>> state = MomentumEstimate.init(jnp.zeros(2))
    >>> for step in ([2.0, 0.0], [1.0, 1.0], [0.5, 0.0]):
    ...   state = MomentumEstimate.update(state, jnp.array(step))
    >>> round(float(MomentumEstimate.value(state)), 4)  # (2 + 0.5) / (4 + 2)
    0.4167
  """

  previous: Params
  cross: jax.Array
  square: jax.Array
  count: jax.Array

  @staticmethod
  def init(like: Params) -> "MomentumEstimate":
    """No steps yet: `like` gives the steps' structure, shapes and dtypes."""
    return MomentumEstimate(
        previous=jax.tree.map(lambda x: jnp.zeros(jnp.shape(x), x.dtype),
                              like),
        cross=jnp.zeros([], jnp.float32),
        square=jnp.zeros([], jnp.float32),
        count=jnp.zeros([], jnp.int32))

  @staticmethod
  def update(state: "MomentumEstimate", step: Params) -> "MomentumEstimate":
    """Folds in the next center step `s_t` (jittable)."""
    cross, square = _dots([(step, state.previous),
                           (state.previous, state.previous)])
    return MomentumEstimate._advance(state, step, cross, square)

  @staticmethod
  def _advance(state, step, cross, square) -> "MomentumEstimate":
    """`update` with `⟨s_t, s_{t−1}⟩` and `‖s_{t−1}‖²` already summed."""
    return MomentumEstimate(
        previous=jax.tree.map(lambda p, s: s.astype(p.dtype), state.previous,
                              step),
        cross=state.cross + cross,
        square=state.square + square,
        count=state.count + 1)

  @staticmethod
  def value(state: "MomentumEstimate") -> jax.Array:
    """μ̂ so far; NaN before two nonzero consecutive steps were seen."""
    return _safe_ratio(state.cross, state.square)


# --- All of them, once per applied commit ------------------------------------


class CommitInstrumentsState(NamedTuple):
  """What the per-commit instruments carry from one applied commit to the next.

  Attributes:
    previous_commit: the previous applied commit's `Δ` as sent, from any
      worker (zeros before the first), a pytree like the center or the
      subsampled vector.
    momentum: the `MomentumEstimate` of the center steps; its `previous` is
      the previous center step.
  """

  previous_commit: Params
  momentum: MomentumEstimate


class CommitInstruments(NamedTuple):
  """`init(center)` and `update(state, commit, center_pulled, center_before_apply, center_after_apply)`.

  Built by `commit_instruments`; see there.
  """

  init: Callable[[Params], CommitInstrumentsState]
  update: Callable[..., Any]


# The per-commit scalars `CommitInstruments.update` returns, in this order.
SCALARS = ("commit_norm", "distance_staleness", "cosine_previous_commit",
           "cosine_center_movement", "center_step_norm", "implicit_momentum")


def commit_instruments(subsample: Optional[Subsample] = None,
                       gathered: bool = False) -> CommitInstruments:
  """Every per-commit instrument in one pure update, for one call per applied commit.

  `update(state, commit, center_pulled, center_before_apply,
  center_after_apply)` takes the applied commit's `Δ` as sent, the center
  its worker pulled, and the center just before and just after the server
  applied it, and returns `(new_state, scalars)` with float32 scalars:

  * `commit_norm`: `‖Δ‖`;
  * `distance_staleness`: `‖θ̃_before − θ̃_pulled‖`;
  * `cosine_previous_commit`: `cos(Δ_t, Δ_{t−1})`, the previous commit
    applied, from any worker (NaN at the first commit);
  * `cosine_center_movement`: `cos(Δ, θ̃_before − θ̃_pulled)`, positive when
    the center moved, under the worker, the way the worker's commit goes
    (implicit momentum in action; NaN when the center did not move);
  * `center_step_norm`: `‖s_t‖`, `s_t = θ̃_after − θ̃_before`, the commit as
    the rule applied it;
  * `implicit_momentum`: μ̂ over the run so far, after folding in `s_t`.

  Only applied commits go in: a rejected (non-finite) one moved nothing.
  The gradient cosine needs a loss and a probe batch and a caller takes it
  every k-th commit: `gradient_cosine`.

  Args:
    subsample: restricts every instrument to these coordinates (norms
      scaled by `√(p/m)`); the state then holds `m` floats per vector
      instead of the whole center twice. None (the default): exact, over
      every parameter.
    gathered: with a subsample, `init` and `update` take vectors already
      restricted to it (`Subsample.gather`), as a caller that keeps only
      those coordinates (each worker's pulled center in the simulator)
      passes them; norms are still scaled by `√(p/m)`.

  Returns:
    A `CommitInstruments` of pure, jittable `init` and `update`.

  Example:
    >>> import jax.numpy as jnp
    >>> tools = commit_instruments()
    >>> state = tools.init(jnp.zeros(2))
    >>> # Pulled at 0; another worker moved the center to (1, 0); Δ = (1, 1).
    >>> state, out = tools.update(state, jnp.array([1.0, 1.0]), jnp.zeros(2),
    ...                           jnp.array([1.0, 0.0]), jnp.array([2.0, 1.0]))
    >>> float(out["distance_staleness"])
    1.0
    >>> round(float(out["cosine_center_movement"]), 4)  # cos 45°
    0.7071
    >>> float(out["cosine_previous_commit"])  # No previous commit.
    nan
  """
  scale = _scale(subsample)
  restrict_to = None if gathered else subsample

  def init(center: Params) -> CommitInstrumentsState:
    like = _restrict(center, restrict_to)
    return CommitInstrumentsState(
        previous_commit=jax.tree.map(lambda x: jnp.zeros(jnp.shape(x), x.dtype),
                                     like),
        momentum=MomentumEstimate.init(like))

  def update(state: CommitInstrumentsState, commit: Params,
             center_pulled: Params, center_before_apply: Params,
             center_after_apply: Params):
    delta = _restrict(commit, restrict_to)
    pulled = _restrict(center_pulled, restrict_to)
    before = _restrict(center_before_apply, restrict_to)
    after = _restrict(center_after_apply, restrict_to)
    moved = _sub(before, pulled)
    step = _sub(after, before)
    previous = state.previous_commit
    previous_step = state.momentum.previous
    (delta_sq, delta_previous, previous_sq, moved_sq, delta_moved, step_sq,
     step_cross, previous_step_sq) = _dots([
         (delta, delta), (delta, previous), (previous, previous),
         (moved, moved), (delta, moved), (step, step), (step, previous_step),
         (previous_step, previous_step)])
    delta_norm, moved_norm = jnp.sqrt(delta_sq), jnp.sqrt(moved_sq)
    momentum = MomentumEstimate._advance(  # pylint: disable=protected-access
        state.momentum, step, step_cross, previous_step_sq)
    scalars = {
        "commit_norm": delta_norm * scale,
        "distance_staleness": moved_norm * scale,
        "cosine_previous_commit": _cosine_from(
            delta_previous, delta_norm, jnp.sqrt(previous_sq)),
        "cosine_center_movement": _cosine_from(
            delta_moved, delta_norm, moved_norm),
        "center_step_norm": jnp.sqrt(step_sq) * scale,
        "implicit_momentum": MomentumEstimate.value(momentum),
    }
    new_state = CommitInstrumentsState(
        previous_commit=jax.tree.map(lambda p, d: d.astype(p.dtype), previous,
                                     delta),
        momentum=momentum)
    return new_state, {name: scalars[name] for name in SCALARS}

  return CommitInstruments(init, update)


# --- A run's instruments: what they measure, and one commit measured --------

# The gradient cosine's name among a commit's instruments (taken every k-th).
GRADIENT_COSINE = "gradient_cosine"
# The probe set of the gradient cosine: the first this many training examples.
PROBE_EXAMPLES = 1000
# Above this many parameters the instruments default to a 1 % subsample.
SUBSAMPLE_ABOVE = 1_000_000


def default_subsample(num_params: int) -> float:
  """The share of the parameters the instruments use by default: 1 % above `SUBSAMPLE_ABOVE`, else all.

  Example:
    >>> default_subsample(1000), default_subsample(2_000_000)
    (1.0, 0.01)
  """
  return 0.01 if num_params > SUBSAMPLE_ABOVE else 1.0


class Diagnostics(NamedTuple):
  """What a run's instruments measure (`--diagnostics`), fixed when it starts.

  Attributes:
    subsample: a `Subsample`, or None (every parameter).
    every: the gradient cosine is taken at the commits applied when the
      server clock is a multiple of `every` (the 1st, the (k+1)-th, ...).

  Example:
    >>> d = Diagnostics.of(subsample=None, every=10, seed=0, num_params=50)
    >>> d.subsample is None, d.every
    (True, 10)
  """
  subsample: Any
  every: int

  @classmethod
  def of(cls, subsample: Optional[float], every: int, *, seed: int,
         num_params: int) -> "Diagnostics":
    """From the settings: `subsample` a share of the parameters (None: `default_subsample`; 1: all, exact), drawn from `seed`.

    Raises:
      ValueError: `every` is not an integer >= 1.
    """
    if subsample is None:
      subsample = default_subsample(num_params)
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
      raise ValueError(f"diagnostics_every must be an integer >= 1, got "
                       f"{every!r}")
    return cls(None if subsample >= 1 else Subsample.from_seed(
        seed, num_params, subsample), every)

  @property
  def tools(self) -> CommitInstruments:
    """The per-commit update over vectors already restricted to the subsample."""
    return commit_instruments(self.subsample, gathered=True)

  def restrict(self, tree):
    """`tree` on the subsample's coordinates (as it is without one)."""
    return tree if self.subsample is None else self.subsample.gather(tree)


def measure_commit(diagnostics: Diagnostics, loss_fn, state, probe, commit,
                   center_pulled, before, after, clock):
  """The instruments of one applied commit, the gradient cosine where due (jittable).

  What the simulator's round and the processes' server both call for every
  applied commit.

  Args:
    diagnostics: the `Diagnostics`.
    loss_fn: `loss_fn(params, (x, y)) -> (loss, aux)`.
    state: the `CommitInstrumentsState` so far.
    probe: the probe set `(x, y)` of the gradient cosine.
    commit: the commit's `Δ` as sent (decoded), a pytree like the center.
    center_pulled: the center its worker pulled, already restricted to the
      subsample (`Diagnostics.restrict`).
    before, after: the center just before and just after the apply.
    clock: the server clock before the apply.

  Returns:
    `(state, {name: float32 scalar})`: `SCALARS` and `GRADIENT_COSINE` (NaN
    unless `clock` is a multiple of `diagnostics.every`).
  """
  restrict = diagnostics.restrict
  state, scalars = diagnostics.tools.update(
      state, restrict(commit), center_pulled, restrict(before),
      restrict(after))

  def gradient(_):
    return gradient_cosine(loss_fn, before, probe, commit,
                           diagnostics.subsample,
                           has_aux=True).astype(jnp.float32)

  due = clock % diagnostics.every == 0
  return state, dict(scalars, **{GRADIENT_COSINE: lax.cond(
      due, gradient, lambda _: jnp.float32(jnp.nan), None)})


def scalars_to_floats(scalars: Dict[str, jax.Array]) -> Dict[str, float]:
  """The scalars of `update` as Python floats (one device-to-host transfer).

  Example:
    >>> import jax.numpy as jnp
    >>> scalars_to_floats({"commit_norm": jnp.float32(2.0)})
    {'commit_norm': 2.0}
  """
  host = jax.device_get(scalars)
  return {name: float(value) for name, value in host.items()}
