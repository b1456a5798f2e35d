"""The host side of the simulator's instruments (`--diagnostics`): their set-up, their carry between rounds, their values per commit.

The instruments themselves are `agn_jax.instruments`; the round measures
each applied commit with them (`engine.build_round`'s `diagnostics`). This
module decides what they measure (a subsample of the parameters, the probe
set of the gradient cosine), holds what they carry from round to round, and
reads one commit's values out of a round's records.

The defaults (`instruments.default_subsample`, `instruments.PROBE_EXAMPLES`)
are the instruments' own, the same on every backend.
"""

from typing import Any, Dict, Optional

import jax

from agn_jax import instruments
from agn_jax.sim import engine

class Measuring:
  """The instruments of one simulation: what they measure and what they carry between rounds.

  Args:
    subsample: the share of the parameters they use (None:
      `instruments.default_subsample`; 1: every parameter, exact), drawn
      from `seed`.
    every: the gradient cosine is taken at every `every`-th commit.
    seed: seeds the subsample.
    num_params: the model's parameters.
    x_train, y_train: the training set; its first
      `instruments.PROBE_EXAMPLES` are the probe set.
    center: the center the workers start from.
    num_workers: n.
    replicated: the sharding of what every device holds.

  Raises:
    ValueError: `every` is not an integer >= 1.
  """

  def __init__(self, subsample: Optional[float], every: int, *, seed: int,
               num_params: int, x_train, y_train, center, num_workers: int,
               replicated):
    self.num_params = num_params
    self.diagnostics = instruments.Diagnostics.of(
        subsample, every, seed=seed, num_params=num_params)
    probe = min(instruments.PROBE_EXAMPLES, len(x_train))
    self.probe = (jax.device_put(x_train[:probe], replicated),
                  jax.device_put(y_train[:probe], replicated))
    self._num_workers, self._replicated = num_workers, replicated
    self.reset(center)

  def reset(self, center) -> None:
    """No commit measured yet; every worker holds `center` (a start, or a resume: the instruments are not checkpointed)."""
    self.carry = engine.initial_diagnostics(
        self.diagnostics, center, self._num_workers, self._replicated)

  def info(self) -> Dict[str, Any]:
    """How they measure: `subsample` (the share of the parameters; 1.0: all, exact), `subsample_size`, `gradient_cosine_every`, `probe_examples`."""
    sub = self.diagnostics.subsample
    size = self.num_params if sub is None else len(sub)
    return {"subsample": size / self.num_params, "subsample_size": size,
            "gradient_cosine_every": self.diagnostics.every,
            "probe_examples": int(self.probe[0].shape[0])}

  def of_commit(self, values, i: int, clock: int) -> Dict[str, float]:
    """The i-th commit's instruments from a round's `values` (`{name: [slots]}`), applied at server clock `clock` (after the apply).

    The gradient cosine is taken at the commits applied at a server clock
    (before the apply) that is a multiple of `every`; it is absent from the
    others.
    """
    measured = {name: float(v[i]) for name, v in values.items()}
    if (clock - 1) % self.diagnostics.every:
      del measured[instruments.GRADIENT_COSINE]
    return measured
