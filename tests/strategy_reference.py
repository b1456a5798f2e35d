"""The paper's strategies as numpy pseudo-code on a deterministic asynchronous schedule.

The independent reference of `test_strategies` (the real strategy objects) and
`test_simulator` (the simulated backend). The loss is `½‖θ − b‖²` per
mini-batch, so the gradient is `θ − b` and a local SGD step is
`θ ← θ − η (θ − b)`. The elastic strategies take the local steps their papers
give them, written out here: Adam for AEASGD (the thesis' grid), Nesterov
momentum for EAMSGD (Zhang et al. 2015, Algorithm 2).
"""

from typing import List, NamedTuple

import numpy as np

DIM = 5
WINDOW = 3
LR = 0.1
# α = ρ · ELASTIC_LR = 0.1, not ρ · LR = 0.5: a run that ties α to the local
# learning rate leaves this reference at once.
ELASTIC_LR = 0.02
RHO = 5.0
MOMENTUM = 0.9
SCHEDULE = [0, 1, 2, 0, 0, 2, 1, 1, 0, 2]  # Which worker commits next.
NUM_WORKERS = 3
# The local optimizer of each strategy's reference (the others: SGD).
LOCAL_OPTIMIZER = {"aeasgd": "adam", "eamsgd": "nesterov"}
ELASTIC = ("aeasgd", "eamsgd")
# Adam's constants as Kingma & Ba give them (and optax.adam's defaults).
ADAM_B1, ADAM_B2, ADAM_EPS = 0.9, 0.999, 1e-8


def data():
  """`data()[k, i]`: worker k's i-th window, WINDOW targets of DIM values."""
  rng = np.random.default_rng(0)
  # data[k][i] is worker k's i-th window: WINDOW mini-batch targets b.
  return rng.normal(size=(NUM_WORKERS, len(SCHEDULE), WINDOW, DIM)).astype(
      np.float32)


def initial_center():
  """The center every run starts from."""
  return np.linspace(-1.0, 1.0, DIM).astype(np.float64)


class Trajectory(NamedTuple):
  """What `trajectory` returns, one entry per commit of the schedule.

  Attributes:
    centers: the center after the commit, `[commits, DIM]`.
    stalenesses: the commit's staleness.
    params: the committing worker's parameters after its commit and pull, as
      the point its next gradient is taken at: the center (commit-then-pull),
      its own `x` (aeasgd), or Zhang's look-ahead `x + δv` (eamsgd).
  """

  centers: np.ndarray
  stalenesses: List[int]
  params: np.ndarray


def trajectory(name, lr=LR, rho=RHO, elastic_lr=ELASTIC_LR, momentum=MOMENTUM,
               outer=None, schedule=SCHEDULE, local=None,
               outer_every=1) -> Trajectory:
  """PAPER.md's pseudo-code in numpy (float64).

  Args:
    name: the strategy.
    lr: the local optimizer's learning rate `η`.
    rho: `ρ` of the elastic strategies.
    elastic_lr: the `η` of their `α = ρη`.
    momentum: `δ` of the Nesterov steps.
    outer: "nesterov" for DiLoCo's server optimizer (0.7, 0.9),
      "delayed_nesterov" for Liu, Douillard et al.'s Delayed Nesterov (0.7,
      0.9, every `outer_every` commits), else None.
    schedule: which worker commits next; worker k's i-th window is
      `data()[k, i]`.
    local: "sgd", "adam" or "nesterov" (elastic strategies only); None: the
      strategy's own (`LOCAL_OPTIMIZER`, else SGD).
    outer_every: N of "delayed_nesterov".
  """
  local = local or LOCAL_OPTIMIZER.get(name, "sgd")
  assert local != "nesterov" or name in ELASTIC, (name, local)
  targets = data().astype(np.float64)
  center = initial_center()
  theta = [center.copy() for _ in range(NUM_WORKERS)]
  velocity = [np.zeros(DIM) for _ in range(NUM_WORKERS)]  # Nesterov's v.
  moments = [[np.zeros(DIM), np.zeros(DIM), 0] for _ in range(NUM_WORKERS)]
  pulled = [center.copy() for _ in range(NUM_WORKERS)]
  m = [0] * NUM_WORKERS  # DynSGD: the server clock at each worker's pull.
  c = 0
  window_index = [0] * NUM_WORKERS
  outer_velocity = np.zeros(DIM)
  outer_sum = np.zeros(DIM)  # Delayed Nesterov's Δ since its last momentum step.
  centers, stalenesses, params = [], [], []
  for k in schedule:
    a = np.zeros(DIM)
    for b in targets[k, window_index[k]]:
      if local == "nesterov":  # v ← δv − η ∇f(x + δv); x ← x + v.
        look_ahead = theta[k] + momentum * velocity[k]
        velocity[k] = momentum * velocity[k] - lr * (look_ahead - b)
        g = velocity[k]
      elif local == "adam":  # Kingma & Ba, bias-corrected, ε outside the root.
        grad = theta[k] - b
        first, second, t = moments[k]
        first = ADAM_B1 * first + (1 - ADAM_B1) * grad
        second = ADAM_B2 * second + (1 - ADAM_B2) * grad**2
        t += 1
        moments[k] = [first, second, t]
        g = -lr * (first / (1 - ADAM_B1**t)) / (
            np.sqrt(second / (1 - ADAM_B2**t)) + ADAM_EPS)
      else:
        g = -lr * (theta[k] - b)
      a += g
      theta[k] = theta[k] + g
    window_index[k] += 1
    tau = c - m[k]
    if name in ("agn", "adag"):
      delta = a / WINDOW
    elif name in ("downpour", "dynsgd"):
      delta = a
    else:  # aeasgd, eamsgd: pull, E = α (x_k − θ̃), x_k ← x_k − E, v kept.
      delta = rho * elastic_lr * (theta[k] - center)
      theta[k] = theta[k] - delta
      tau = 0
    if name == "dynsgd":
      increment = delta / (tau + 1)
    elif name == "adag":
      increment = delta / ((center - pulled[k])**2 / lr + 1)
    else:
      increment = delta
    if outer == "nesterov":  # optax.sgd(0.7, 0.9, nesterov) on g = −increment.
      g = -increment
      outer_velocity = g + 0.9 * outer_velocity
      center = center - 0.7 * (g + 0.9 * outer_velocity)
    elif outer == "delayed_nesterov":  # The (c + 1)-th commit, g = −increment.
      g = -increment
      outer_sum = outer_sum + g
      if (c + 1) % outer_every == 0:  # m ← βm + Δ/N; θ ← θ − ε(βm + g/N).
        outer_velocity = 0.9 * outer_velocity + outer_sum / outer_every
        center = center - 0.7 * (0.9 * outer_velocity + g / outer_every)
        outer_sum = np.zeros(DIM)
      else:  # θ ← θ − ε g/N.
        center = center - 0.7 * g / outer_every
    else:
      center = center + increment
    c += 1
    if name not in ELASTIC:
      theta[k] = center.copy()
    pulled[k] = center.copy()
    m[k] = c
    centers.append(center.copy())
    stalenesses.append(tau)
    params.append(theta[k] + momentum * velocity[k] if local == "nesterov"
                  else theta[k].copy())
  return Trajectory(np.stack(centers), stalenesses, np.stack(params))


def reference(name, **kwargs):
  """`(centers, stalenesses)` of `trajectory(name, **kwargs)`."""
  result = trajectory(name, **kwargs)
  return result.centers, result.stalenesses
