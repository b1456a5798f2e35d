"""The one configuration object that the CLI builds and the runtime consumes."""

import dataclasses
from typing import Optional, Tuple

STRATEGIES = ("agn", "downpour", "aeasgd", "eamsgd", "dynsgd", "adag")
DATASETS = ("digits", "mnist", "mnist1d", "synthetic")
MODELS = ("mlp", "cnn")
WORKER_OPTIMIZERS = ("adam", "sgd", "momentum")
SERVER_OPTIMIZERS = ("none", "sgd", "nesterov")
PLATFORMS = ("cpu", "gpu", "tpu")


@dataclasses.dataclass
class TrainConfig:
  """Everything one distributed training run needs.

  Attributes:
    strategy: name in the strategy registry (`agn_jax.strategies.STRATEGIES`).
    num_workers: number of worker processes `n`.
    communication_window: local steps `λ` between commits.
    dataset: one of `DATASETS`.
    data_dir: where the mnist IDX files live (or are downloaded to).
    dataset_size: number of examples for generated datasets (synthetic, mnist1d).
    model: one of `MODELS`.
    hidden_sizes: widths of the MLP's hidden layers.
    batch_size: mini-batch size of every local step.
    epochs: total epochs' worth of data, split equally over the workers.
    worker_optimizer: the local optimizer, one of `WORKER_OPTIMIZERS`.
    learning_rate: the local optimizer's learning rate `η`.
    momentum: momentum of the `momentum` optimizer (and of eamsgd's workers).
    rho: elasticity `ρ` of aeasgd/eamsgd (`α = ρ η`).
    server_optimizer: DiLoCo-style outer optimizer on the committed deltas.
    server_learning_rate: its learning rate.
    server_momentum: its momentum.
    platform: cpu, gpu, tpu, or None for whatever JAX finds.
    eval_every_seconds: evaluator period; 0 or less turns the evaluator off
      (the final evaluation still runs).
    max_seconds: stop the run after this much wall time (None: no limit).
    seed: seed of parameter init and data shuffling.
    workdir: where metrics, summary, plots and checkpoints go.
    checkpoint_every_seconds: checkpoint period; 0 or less: only at the end
      (and on an interrupt).
    max_worker_restarts: how many worker restarts the whole run allows (all
      workers together; each --resume session starts afresh) before it fails.
    resume: continue the run found in `workdir` from its last checkpoint.
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
  worker_optimizer: str = "adam"
  learning_rate: float = 1e-3
  momentum: float = 0.9
  rho: float = 5.0
  server_optimizer: str = "none"
  server_learning_rate: float = 0.7
  server_momentum: float = 0.9
  platform: Optional[str] = None
  eval_every_seconds: float = 1.0
  max_seconds: Optional[float] = None
  seed: int = 0
  workdir: str = "runs/default"
  checkpoint_every_seconds: float = 60.0
  max_worker_restarts: int = 3
  resume: bool = False

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
