"""The one configuration object that the CLI builds and the runtime consumes.

The lists of valid names live with their owners: `agn_jax.strategies.available()`,
`agn_jax.models.MODELS`, `agn_jax.data.DATASETS`,
`agn_jax.strategies.WORKER_OPTIMIZERS` / `SERVER_OPTIMIZERS`,
`agn_jax.transform.NORMALIZATIONS` and `agn_jax.runtime.placement.PLATFORMS`.
Ask the owner; this module keeps no copy.
"""

import dataclasses
from typing import Optional, Tuple

# The fields a per-strategy flagfile (`sweep --strategy_flagfile`) may set:
# a strategy's own settings, never the data budget or the grid.
STRATEGY_SETTINGS = ("worker_optimizer", "learning_rate", "momentum", "rho",
                     "normalization", "server_optimizer",
                     "server_learning_rate", "server_momentum")

# What a strategy-specific field that is None and has no paper default for
# the strategy becomes (e.g. the momentum of agn's optional momentum workers).
GENERIC_DEFAULTS = {"worker_optimizer": "adam", "learning_rate": 1e-3,
                    "momentum": 0.9, "rho": 5.0, "normalization": "none"}


@dataclasses.dataclass
class TrainConfig:
  """Everything one distributed training run needs.

  Attributes:
    strategy: name in the strategy registry (`agn_jax.strategies.available()`).
    num_workers: number of worker processes `n`.
    communication_window: local steps `λ` between commits.
    dataset: one of `agn_jax.data.DATASETS`.
    data_dir: where the mnist IDX files live (or are downloaded to).
    dataset_size: number of examples for generated datasets (synthetic, mnist1d).
    model: one of `agn_jax.models.MODELS`.
    hidden_sizes: widths of the MLP's hidden layers.
    batch_size: mini-batch size of every local step.
    epochs: total epochs' worth of data, split equally over the workers.
    worker_optimizer: the local optimizer, one of
      `agn_jax.strategies.WORKER_OPTIMIZERS`; None: the strategy's paper
      default (`agn_jax.strategies.paper_defaults`), as for the next four.
    learning_rate: the local optimizer's learning rate `η`.
    momentum: momentum of the `momentum` optimizer (and of eamsgd's workers).
    rho: elasticity `ρ` of aeasgd/eamsgd (`α = ρ η`).
    normalization: what AGN divides the accumulated update by before it is
      committed: "window" (λ, the paper), "none" (DOWNPOUR's raw delta) or
      "l2" (its L2 norm); used by agn and adag.
    server_optimizer: DiLoCo-style outer optimizer on the committed deltas.
    server_learning_rate: its learning rate.
    server_momentum: its momentum.
    platform: cpu, gpu, tpu, or None for whatever JAX finds.
    eval_every_seconds: evaluator period; 0 or less turns the evaluator off
      (the final evaluation still runs).
    max_seconds: stop the run after this much wall time (None: no limit).
    seed: seed of parameter init and data shuffling.
    workdir: where metrics, summary, plots and checkpoints go.
    checkpoints: False writes no checkpoint at all (the run cannot be
      resumed), e.g. for a study whose many runs need none: a simulated
      run's checkpoint holds every worker's state.
    checkpoint_every_seconds: checkpoint period; 0 or less: only at the end
      (and on an interrupt).
    max_worker_restarts: how many worker restarts the whole run allows (all
      workers together; each --resume session starts afresh) before it fails.
    resume: continue the run found in `workdir` from its last checkpoint.
    backend: how the run is run (`agn_jax.runtime.backend.available()`):
      "processes" (real processes and shared memory on one host, the
      reference), "simulated" (the workers vmapped in one deterministic
      program) or "ray" (actors on a Ray cluster).
    commit_order: simulated backend: the order of each round's commits,
      "round_robin" (homogeneous workers), "random" (a seeded permutation
      each round) or "speeds" (heterogeneous workers, see `worker_speeds`).
    worker_speeds: simulated backend, "speeds" order: each worker's speed
      factor; None draws them from a seeded log-normal spread.
    speed_spread: sigma of that log-normal spread.
    workers_per_call: simulated backend: workers vmapped together in one
      call of the window kernel (None: the platform's measured default).
    eval_every_rounds: simulated backend: rounds between evaluations of the
      center (0: only the final one).
    ray_address: ray backend: "local" (start a private Ray instance on this
      machine), "auto" (the cluster this machine belongs to) or an address.
  """
  strategy: str = "agn"
  num_workers: int = 4
  communication_window: int = 10
  dataset: str = "digits"
  data_dir: Optional[str] = None
  dataset_size: Optional[int] = None
  model: str = "mlp"
  hidden_sizes: Tuple[int, ...] = (256, 128)
  batch_size: int = 16
  epochs: float = 40.0
  worker_optimizer: Optional[str] = None
  learning_rate: Optional[float] = None
  momentum: Optional[float] = None
  rho: Optional[float] = None
  normalization: Optional[str] = None
  server_optimizer: str = "none"
  server_learning_rate: float = 0.7
  server_momentum: float = 0.9
  platform: Optional[str] = None
  eval_every_seconds: float = 1.0
  max_seconds: Optional[float] = None
  seed: int = 0
  workdir: str = "runs/default"
  checkpoint_every_seconds: float = 60.0
  checkpoints: bool = True
  max_worker_restarts: int = 3
  resume: bool = False
  backend: str = "processes"
  commit_order: str = "round_robin"
  worker_speeds: Optional[Tuple[float, ...]] = None
  speed_spread: float = 0.5
  workers_per_call: Optional[int] = None
  eval_every_rounds: int = 10
  ray_address: str = "local"

  def resolved(self) -> "TrainConfig":
    """A copy whose strategy-specific fields left at None hold the values used.

    Each None among `worker_optimizer`, `learning_rate`, `momentum`, `rho`
    and `normalization` takes the strategy's paper default
    (`agn_jax.strategies.paper_defaults`), else `GENERIC_DEFAULTS`. Values
    already set are kept, so resolving twice changes nothing.

    Raises:
      ValueError: for a strategy not in the registry.

    Example:
      >>> c = TrainConfig(strategy="aeasgd", rho=2.0).resolved()
      >>> c.worker_optimizer, c.learning_rate, c.rho
      ('sgd', 0.01, 2.0)
    """
    from agn_jax import strategies  # pylint: disable=g-import-not-at-top
    defaults = dict(GENERIC_DEFAULTS, **strategies.paper_defaults(
        self.strategy))
    return dataclasses.replace(self, **{
        name: value for name, value in defaults.items()
        if getattr(self, name) is None})

  def is_resolved(self) -> bool:
    """Whether no strategy-specific field is left at None."""
    return all(getattr(self, name) is not None for name in GENERIC_DEFAULTS)

  def to_dict(self):
    d = dataclasses.asdict(self)
    d["hidden_sizes"] = list(self.hidden_sizes)
    if self.worker_speeds is not None:
      d["worker_speeds"] = list(self.worker_speeds)
    return d

  @classmethod
  def from_dict(cls, d):
    known = {f.name for f in dataclasses.fields(cls)}
    d = {k: v for k, v in d.items() if k in known}
    if "hidden_sizes" in d:
      d["hidden_sizes"] = tuple(int(h) for h in d["hidden_sizes"])
    if d.get("worker_speeds") is not None:
      d["worker_speeds"] = tuple(float(s) for s in d["worker_speeds"])
    return cls(**d)
