"""The paper's strategies as numpy pseudo-code on a deterministic asynchronous schedule.

The independent reference of `test_strategies` (the real strategy objects) and
`test_simulator` (the simulated backend). The loss is `½‖θ − b‖²` per
mini-batch, so a local SGD step is `θ ← θ − η (θ − b)`.
"""

import numpy as np

DIM = 5
WINDOW = 3
LR = 0.1
SCHEDULE = [0, 1, 2, 0, 0, 2, 1, 1, 0, 2]  # Which worker commits next.
NUM_WORKERS = 3


def data():
  """`data()[k, i]`: worker k's i-th window, WINDOW targets of DIM values."""
  rng = np.random.default_rng(0)
  # data[k][i] is worker k's i-th window: WINDOW mini-batch targets b.
  return rng.normal(size=(NUM_WORKERS, len(SCHEDULE), WINDOW, DIM)).astype(
      np.float32)


def initial_center():
  """The center every run starts from."""
  return np.linspace(-1.0, 1.0, DIM).astype(np.float64)


def reference(name, lr=LR, rho=5.0, momentum=0.9, outer=None):
  """PAPER.md's pseudo-code in numpy (float64)."""
  targets = data().astype(np.float64)
  center = initial_center()
  theta = [center.copy() for _ in range(NUM_WORKERS)]
  velocity = [np.zeros(DIM) for _ in range(NUM_WORKERS)]
  pulled = [center.copy() for _ in range(NUM_WORKERS)]
  m = [0] * NUM_WORKERS  # DynSGD: the server clock at each worker's pull.
  c = 0
  window_index = [0] * NUM_WORKERS
  outer_velocity = np.zeros(DIM)
  centers, stalenesses = [], []
  for k in SCHEDULE:
    a = np.zeros(DIM)
    for b in targets[k, window_index[k]]:
      grad = theta[k] - b
      if name == "eamsgd":  # optax.sgd(momentum): v ← g + μ v; θ ← θ − η v.
        velocity[k] = grad + momentum * velocity[k]
        g = -lr * velocity[k]
      else:
        g = -lr * grad
      a += g
      theta[k] = theta[k] + g
    window_index[k] += 1
    tau = c - m[k]
    if name in ("agn", "adag"):
      delta = a / WINDOW
    elif name in ("downpour", "dynsgd"):
      delta = a
    else:  # aeasgd, eamsgd: pull, E = α (θ_k − θ̃), θ_k ← θ_k − E.
      alpha = rho * lr
      delta = alpha * (theta[k] - center)
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
    else:
      center = center + increment
    c += 1
    if name not in ("aeasgd", "eamsgd"):
      theta[k] = center.copy()
    pulled[k] = center.copy()
    m[k] = c
    centers.append(center.copy())
    stalenesses.append(tau)
  return np.stack(centers), stalenesses

