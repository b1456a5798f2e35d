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
                     "elastic_learning_rate", "normalization",
                     "server_optimizer", "server_learning_rate",
                     "server_momentum")

# What a strategy-specific field that is None and has no paper default for
# the strategy becomes (e.g. the momentum of agn's optional momentum workers).
GENERIC_DEFAULTS = {"worker_optimizer": "adam", "learning_rate": 1e-3,
                    "momentum": 0.9, "rho": 5.0,
                    "elastic_learning_rate": 0.01, "normalization": "none"}


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
      default (`agn_jax.strategies.paper_defaults`), as for the next five.
    learning_rate: the local optimizer's learning rate.
    momentum: momentum `δ` of the `momentum` and `nesterov` optimizers
      (eamsgd's workers use `nesterov`).
    rho: elasticity `ρ` of aeasgd/eamsgd: `α = ρ η` with `η` the next one.
    elastic_learning_rate: the `η` of aeasgd/eamsgd's elastic coefficient
      `α = ρ η`, its own setting: the thesis' AEASGD steps with Adam 1e-3
      and pulls with `α = 5 · 0.01` (see `elastic_alpha`).
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
    cluster: simulated backend: the time model's cluster
      (`agn_jax.cluster.CLUSTERS`): "none" (time counts local steps;
      messages and the server are free), "this_host" (measured on this
      machine) or "paper" (the thesis' 15 nodes).
    speed_model: simulated backend: how fast each worker or window is
      (`agn_jax.cluster.parse_speed_model`): "constant" (round robin,
      staleness n − 1), "lognormal:SIGMA", "random:SIGMA",
      "straggler:P:SLOWDOWN", "speeds:S0,S1,..." or "trace:RUN_DIR".
    bandwidth_gbps: simulated backend: a message's bandwidth in Gb/s
      (None: the cluster's).
    latency_ms: simulated backend: a message's fixed cost in ms (None: the
      cluster's).
    server_apply_ms: simulated backend: the server's time per commit in ms
      (None: the cluster's).
    workers_per_call: simulated backend: workers vmapped together in one
      call of the window kernel (None: the platform's measured default).
    eval_every_rounds: simulated backend: rounds between evaluations of the
      center (0: only the final one).
    ray_address: ray backend: "local" (start a private Ray instance on this
      machine), "auto" (the cluster this machine belongs to) or an address.
    metric_writers: where the rows of metrics.jsonl also go, comma-separated
      (`agn_jax.runtime.metric_writers.WRITERS`): "jsonl" (metrics.jsonl
      alone; it is always written) or "jsonl,tensorboard" (TensorBoard event
      files in the workdir too).
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
  elastic_learning_rate: Optional[float] = None
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
  cluster: str = "none"
  speed_model: str = "constant"
  bandwidth_gbps: Optional[float] = None
  latency_ms: Optional[float] = None
  server_apply_ms: Optional[float] = None
  workers_per_call: Optional[int] = None
  eval_every_rounds: int = 10
  ray_address: str = "local"
  metric_writers: str = "jsonl"

  def resolved(self) -> "TrainConfig":
    """A copy whose strategy-specific fields left at None hold the values used.

    Each None among `worker_optimizer`, `learning_rate`, `momentum`, `rho`,
    `elastic_learning_rate` and `normalization` takes the strategy's paper
    default (`agn_jax.strategies.paper_defaults`), else `GENERIC_DEFAULTS`.
    Values already set are kept, so resolving twice changes nothing.

    Raises:
      ValueError: for a strategy not in the registry.

    Example:
      >>> c = TrainConfig(strategy="aeasgd", rho=2.0).resolved()
      >>> c.worker_optimizer, c.learning_rate, c.rho, c.elastic_learning_rate
      ('adam', 0.001, 2.0, 0.01)
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

  def elastic_alpha(self) -> Optional[float]:
    """The elastic coefficient `α = ρ η` of aeasgd/eamsgd; None for the others.

    None as well while `rho` or `elastic_learning_rate` is unset (see
    `resolved`).

    Example:
      >>> round(TrainConfig(strategy="aeasgd").resolved().elastic_alpha(), 12)
      0.05
      >>> TrainConfig(strategy="agn").resolved().elastic_alpha() is None
      True
    """
    from agn_jax import strategies  # pylint: disable=g-import-not-at-top
    if (self.strategy not in strategies.available() or
        "elastic_learning_rate" not in strategies.parameters(self.strategy) or
        self.rho is None or self.elastic_learning_rate is None):
      return None
    return self.rho * self.elastic_learning_rate

  def to_record(self):
    """What config.json and summary.json hold: `to_dict()` and `elastic_alpha`.

    `elastic_alpha` is derived, not a field: `from_dict` ignores it.
    """
    return dict(self.to_dict(), elastic_alpha=self.elastic_alpha())

  def to_dict(self):
    d = dataclasses.asdict(self)
    d["hidden_sizes"] = list(self.hidden_sizes)
    return d

  @classmethod
  def from_dict(cls, d):
    known = {f.name for f in dataclasses.fields(cls)}
    d = {k: v for k, v in d.items() if k in known}
    if "hidden_sizes" in d:
      d["hidden_sizes"] = tuple(int(h) for h in d["hidden_sizes"])
    return cls(**d)
