"""The study as data: which runs each preset holds, with what settings and budget.

A run is a `RunSpec`: a section, a strategy, a cell (n, λ), a seed, a budget
in epochs and the flags it trains with (flagfiles first, later flags win).
A `Preset` is the list of runs plus the axes its sections show. Nothing here
runs anything; `runner` runs the specs and `results` reads them back.

Example:
  >>> p = preset("cpu")
  >>> sorted({(r.num_workers, r.communication_window) for r in p.runs
  ...         if r.section == GRID})
  [(10, 10), (10, 40), (20, 15), (25, 25), (40, 10), (40, 20), (40, 40)]
  >>> [r.name for r in p.runs if r.section == DOWNPOUR][:3]
  ['downpour-n10-l1-s0-adam0.001', 'downpour-n20-l1-s0-adam0.001', \
'downpour-n10-l1-s0-adagrad0.01']
"""

import functools
import math
import os
from typing import Dict, NamedTuple, Optional, Sequence, Tuple

from experiments.report import budget
from experiments.report import thesis

CONFIGS = os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "configs")
PRESETS = ("quick", "cpu", "refit", "paper", "beyond")
REFERENCE, BASELINE = "agn", "aeasgd"
# Sections that own runs. The grid, DOWNPOUR, the normalization ablation
# (RQ1) and DynSGD (RQ3) run in the thesis' setting (`THESIS_SETTING`); the
# sensitivity section is the grid again in the round robin over fixed shards
# of the study committed before it.
GRID, DOWNPOUR, ABLATION, DILOCO = "grid", "downpour", "ablation", "diloco"
SENSITIVITY, NORMALIZATION, DYNSGD = "sensitivity", "normalization", "dynsgd"
# RQ2 and RQ4: the mechanism, measured commit by commit (`--diagnostics`).
MECHANISM = "mechanism"
# The thesis' setting: each epoch a fresh random 1/n slice of the data per
# worker (dist-keras' repartition), and the speed model fitted to the
# thesis' staleness histogram (scripts/fit_cluster.py, before any run).
THESIS_ASSIGNMENT, THESIS_SPEEDS = "epoch_slices", "thesis"
THESIS_SETTING = (f"--data_assignment={THESIS_ASSIGNMENT}",
                  f"--speed_model={THESIS_SPEEDS}")
# DOWNPOUR's sweep: the thesis names no optimizer; Adam 1e-3 (its other
# runs), Adagrad 1e-2 (dist-keras' workflow notebook) and plain SGD 1e-2
# (Dean et al.'s DOWNPOUR without Adagrad).
DOWNPOUR_OPTIMIZERS = (("adam", 1e-3), ("adagrad", 1e-2), ("sgd", 1e-2))
# The refit's: Keras' Adam and Adagrad first, as the thesis' dist-keras
# workers ran them (Keras' Adagrad starts its accumulator at 0, optax's at
# 0.1), then optax's three as the cpu study ran them.
KERAS_DOWNPOUR_OPTIMIZERS = (("keras_adam", 1e-3),
                             ("keras_adagrad", 1e-2)) + DOWNPOUR_OPTIMIZERS
# RQ1: AGN with its normalization on against off ("DOWNPOUR with
# accumulation": the accumulated delta committed whole).
NORMALIZED, UNNORMALIZED = "normalized", "unnormalized"
# Methods after the paper (issue: beyond the paper), under heterogeneous speeds,
# on MNIST and on the language model (`language_model`).
BEYOND, BEYOND_LM = "beyond", "beyond_lm"
HETEROGENEOUS_SPEEDS = "lognormal:0.5"
# The beyond section's variants: plain AGN and AEASGD, DN (its N is
# the cell's n: one momentum update per n commits) and DyLU.
PLAIN, DN, DYLU = "plain", "dn", "dylu"
# Its codecs, beside the plain AGN run (no compression) of the first cell.
CODECS = ("bf16", "int8", "topk:0.1")
# The ablation's variants at its cell: how commits are ordered, and α.
ROUND_ROBIN, RANDOM, PROCESSES = "round_robin", "random", "processes"
RANDOM_SPEEDS = "random:0.5"
# Each worker's own speed for the whole run (not redrawn per window): a fast
# worker finishes its share early, and the last commits come from few.
LOGNORMAL, LOGNORMAL_SPEEDS = "lognormal", HETEROGENEOUS_SPEEDS
# AEASGD's α = ρη beside the thesis' 0.05 (η = 0.01): dist-keras' default
# η = 0.1, so α = 0.5.
ALPHA_VARIANT = 0.5
THESIS_ALPHA = "alpha0.05"  # The variant name of a run at the thesis' α.
# Every section that owns runs, in the order `--sections` and the ledger list
# them.
RUN_SECTIONS = (GRID, DOWNPOUR, NORMALIZATION, MECHANISM, DYNSGD, ABLATION,
                DILOCO, SENSITIVITY, BEYOND, BEYOND_LM)
# The mechanism section's methods: AGN normalized and not (both at the
# section's λ), and DOWNPOUR, a commit after every local step (λ = 1: AGN
# and DOWNPOUR are then the same rule), all with Adam 1e-3.
MECHANISM_METHODS = (NORMALIZED, UNNORMALIZED, "downpour")
# Its two commit orders, by speed model: the thesis' fitted cluster (the
# grid's setting) and every worker equally fast (round robin: τ = n − 1
# after the first round), both with epoch slices, so that only the order of
# the commits differs.
MECHANISM_SETTINGS = {
    THESIS_SPEEDS: THESIS_SETTING,
    ROUND_ROBIN: (f"--data_assignment={THESIS_ASSIGNMENT}",
                  "--speed_model=constant")}


class RunSpec(NamedTuple):
  """One training run of the study.

  Attributes:
    section: the section that owns it (one of `RUN_SECTIONS`); its runs
      live in `<study_dir>/<section>/<name>`.
    strategy: the strategy's registry name.
    num_workers: n.
    communication_window: λ.
    seed: initialization, data order and speed draws.
    epochs: epochs' worth of data, split over the n workers.
    flags: the training flags, in order (`--flagfile`s first).
    variant: what sets it apart within its section ("" for none), part of
      its name.
    directory: the folder of the study it lives in (default: its section's).
    examples: its dataset's training examples, where they are not the
      preset's (`Preset.train_examples`); 0: the preset's.
  """
  section: str
  strategy: str
  num_workers: int
  communication_window: int
  seed: int
  epochs: float
  flags: Tuple[str, ...]
  variant: str = ""
  directory: str = ""
  examples: int = 0

  @property
  def name(self) -> str:
    return (f"{self.strategy}-n{self.num_workers}-l{self.communication_window}"
            f"-s{self.seed}" + (f"-{self.variant}" if self.variant else ""))

  @property
  def cell(self) -> Tuple[int, int]:
    return self.num_workers, self.communication_window

  def path(self, study_dir: str) -> str:
    return os.path.join(study_dir, self.directory or self.section, self.name)

  def argv(self) -> Tuple[str, ...]:
    """Every flag of the run, as `python -m experiments.train` takes them."""
    return self.flags + (f"--strategy={self.strategy}",
                         f"--num_workers={self.num_workers}",
                         f"--communication_window={self.communication_window}",
                         f"--seed={self.seed}", f"--epochs={self.epochs:g}")


class Preset(NamedTuple):
  """A study: its runs and what its sections show.

  Attributes:
    name: `quick`, `cpu` or `paper`.
    description: one line for the report and the cost.
    runs: every run, in the order they run.
    workers, windows: the grid's axes, as the heat maps show them.
    seeds: seeds per grid cell (the cells of `seeded_cells` may have
      more: `headline_seeds`).
    train_examples: the dataset's training examples (for the cost).
    ablation_cell: the (n, λ) of the ablation and DiLoCo runs.
    gap_cell: the (n, λ) where AEASGD runs again with both α, and AGN
      under three commit orders, at the gap's budget: the most workers, then
      the longest window, that keeps `budget.MIN_WINDOWS` windows a worker (see
      `budget.gap_cell`).
    layers: weight layers of the model, for λ ≈ (n + layers) / 2.
    platform: the `--platform` its runs ask for (None: JAX's default).
    mechanism: the design of its mechanism section's runs (RQ2, RQ4), or
      None.
  """
  name: str
  description: str
  runs: Tuple[RunSpec, ...]
  workers: Tuple[int, ...]
  windows: Tuple[int, ...]
  seeds: int
  train_examples: int
  ablation_cell: Tuple[int, int]
  layers: int
  platform: Optional[str] = None
  gap_cell: Optional[Tuple[int, int]] = None
  headline_seeds: Optional[int] = None
  mechanism: Optional["Mechanism"] = None
  seeded_cells: Tuple[Tuple[int, int], ...] = ()

  @property
  def many_seeded_cells(self) -> Tuple[Tuple[int, int], ...]:
    """The grid cells run with `headline_seeds` seeds (default: the first)."""
    return self.seeded_cells or self.grid_cells[:1]

  @property
  def grid_cells(self) -> Tuple[Tuple[int, int], ...]:
    return self.section_cells(GRID)

  def section_cells(self, section: str) -> Tuple[Tuple[int, int], ...]:
    """The cells of a section's runs, in run order."""
    seen = []
    for r in self.runs:
      if r.section == section and r.cell not in seen:
        seen.append(r.cell)
    return tuple(seen)

  def as_sensitivity(self) -> "Preset":
    """This study with the sensitivity section's runs standing in for the grid.

    Its grid specs keep their own directories, so `results.Results` of it
    reads the round-robin, fixed-shard runs wherever a section reads the
    grid; every other section's runs are the same.
    """
    runs = tuple(r._replace(section=GRID, directory=SENSITIVITY)
                 if r.section == SENSITIVITY else r
                 for r in self.runs if r.section != GRID)
    return self._replace(runs=runs, headline_seeds=None)

  def section_runs(self, section: str) -> Tuple[RunSpec, ...]:
    return tuple(r for r in self.runs if r.section == section)

  def samples(self, run: RunSpec) -> float:
    """Training samples of one run: epochs × its dataset's training examples."""
    return run.epochs * (run.examples or self.train_examples)

  def batch_size(self) -> int:
    return int(flag_value(self.runs[0].flags, "batch_size"))


def flagfile(name: str) -> str:
  """The flag that reads the shipped flagfile `name`."""
  return "--flagfile=" + os.path.join(CONFIGS, name)


@functools.lru_cache(maxsize=None)
def _parsed(flags: Tuple[str, ...]):
  from absl import flags as absl_flags  # pylint: disable=g-import-not-at-top
  from experiments import flags as flags_lib  # pylint: disable=g-import-not-at-top
  values = absl_flags.FlagValues()
  flags_lib.define_train_flags(values)
  values(["report", *flags])
  return values


def flag_value(flags: Tuple[str, ...], name: str):
  """The value a run's flags give the train flag `name` (flagfiles read).

  >>> flag_value(("--num_workers=3",), "num_workers")
  3
  """
  return _parsed(tuple(flags))[name].value


class Mechanism(NamedTuple):
  """The mechanism section's runs (RQ2 and RQ4), every one with `--diagnostics`.

  RQ2's sweep runs each of `MECHANISM_METHODS` at every n of `workers` in
  the thesis' setting (the fitted cluster); at the largest n the methods of
  `round_robin` run again with every worker equally fast. RQ4 runs the
  methods at `cosine_workers` with `cosine_seeds` seeds, the first of them
  the sweep's own run. Every run has the same budget, `epochs`, and no
  checkpoint: the instruments are not checkpointed, so a run interrupted
  midway starts again whole (a few minutes) rather than resume with μ̂
  restarted.

  Attributes:
    workers: the sweep's n.
    window: λ of AGN normalized and not (DOWNPOUR commits every step).
    epochs: each run's epochs' worth of data, split over its n workers.
    round_robin: the methods that also run under round robin at the
      largest n.
    cosine_workers: n of RQ4's cell (one of `workers`).
    cosine_seeds: RQ4's seeds.
    probe_steps: local steps (over all workers) between two gradient-cosine
      probes: `--diagnostics_every` is `probe_steps / λ` commits, so a run
      of any λ probes as often per sample.
    budget: why this budget, for the report.
  """
  workers: Tuple[int, ...]
  window: int
  epochs: float
  round_robin: Tuple[str, ...]
  cosine_workers: int
  cosine_seeds: int
  probe_steps: int
  budget: str = ""


class Extras(NamedTuple):
  """The sections of the verdicts issue beside the grid, as a preset runs them.

  Attributes:
    sensitivity_cells: grid cells run again in the grid's old setting
      (round robin over fixed shards), 1 seed.
    downpour_optimizers: DOWNPOUR's sweep, (optimizer, learning rate).
    normalization: (n, the λ's, epochs) of RQ1's normalization ablation.
    dynsgd_cells: grid cells where DynSGD runs beside AGN and AEASGD.
    mechanism: the runs of RQ2 and RQ4 (None: none).
  """
  sensitivity_cells: Tuple[Tuple[int, int], ...] = ()
  downpour_optimizers: Tuple[Tuple[str, float], ...] = DOWNPOUR_OPTIMIZERS
  normalization: Optional[Tuple[int, Tuple[int, ...], float]] = None
  dynsgd_cells: Tuple[Tuple[int, int], ...] = ()
  mechanism: Optional[Mechanism] = None


def mechanism_runs(m: Mechanism, base: Tuple[str, ...]) -> Tuple[RunSpec, ...]:
  """The mechanism section's runs: RQ2's sweep, its round robin, RQ4's seeds.

  `base` is the preset's flags before the setting (the flagfile, and the
  grid's platform flags). A run's name says its method (the variant of an
  AGN run, the strategy of DOWNPOUR's) and, under round robin, its setting.

  >>> m = Mechanism((2, 4), 2, 1.0, (NORMALIZED,), 2, 2, 4)
  >>> [r.name for r in mechanism_runs(m, ())]  # doctest: +NORMALIZE_WHITESPACE
  ['agn-n2-l2-s0-normalized', 'agn-n2-l2-s0-unnormalized', 'downpour-n2-l1-s0',
   'agn-n4-l2-s0-normalized', 'agn-n4-l2-s0-unnormalized', 'downpour-n4-l1-s0',
   'agn-n4-l2-s0-normalized-round_robin', 'agn-n2-l2-s1-normalized',
   'agn-n2-l2-s1-unnormalized', 'downpour-n2-l1-s1']
  """
  def run(method, n, seed, setting):
    strategy, window, variant = (
        ("downpour", 1, "") if method == "downpour" else
        (REFERENCE, m.window, method))
    if setting == ROUND_ROBIN:
      variant = "-".join(filter(None, (variant, ROUND_ROBIN)))
    flags = base + MECHANISM_SETTINGS[setting] + (
        "--diagnostics",
        f"--diagnostics_every={max(1, m.probe_steps // window)}",
        "--nocheckpoints")
    if strategy == REFERENCE:
      flags += ("--normalization="
                + ("window" if method == NORMALIZED else "none"),)
    return RunSpec(MECHANISM, strategy, n, window, seed, m.epochs, flags,
                   variant)

  runs = [run(method, n, 0, THESIS_SPEEDS)
          for n in m.workers for method in MECHANISM_METHODS]
  runs += [run(method, max(m.workers), 0, ROUND_ROBIN)
           for method in m.round_robin]
  runs += [run(method, m.cosine_workers, seed, THESIS_SPEEDS)
           for seed in range(1, m.cosine_seeds)
           for method in MECHANISM_METHODS]
  return tuple(runs)


def mechanism_method(run: RunSpec) -> str:
  """Which of `MECHANISM_METHODS` a mechanism run is, from its flags."""
  if run.strategy != REFERENCE:
    return run.strategy
  return (NORMALIZED if flag_value(run.flags, "normalization") == "window"
          else UNNORMALIZED)


def mechanism_spec(p: "Preset", method: str, n: int, setting: str,
                   seed: int = 0) -> Optional[RunSpec]:
  """The preset's mechanism run of a method, n, commit order and seed, or None."""
  for run in p.section_runs(MECHANISM):
    if ((run.num_workers, run.seed) == (n, seed) and
        mechanism_method(run) == method and
        mechanism_setting(run) == setting):
      return run
  return None


def mechanism_setting(run: RunSpec) -> str:
  """A mechanism run's key in `MECHANISM_SETTINGS`, from its speed model."""
  return (THESIS_SPEEDS if flag_value(run.flags, "speed_model") ==
          THESIS_SPEEDS else ROUND_ROBIN)


def downpour_variant(optimizer: str, learning_rate: float) -> str:
  """A DOWNPOUR sweep run's variant: `adam1e-3`, `adagrad0.01`, ...

  >>> downpour_variant("adam", 1e-3), downpour_variant("sgd", 0.01)
  ('adam0.001', 'sgd0.01')
  """
  return f"{optimizer}{learning_rate:g}"


def _grid_and_extras(name: str, description: str, base: Tuple[str, ...],
                     cells: Sequence[Tuple[int, int]], seeds: int,
                     epochs: float, downpour_workers: Sequence[int],
                     downpour_epochs: float, ablation_cell: Tuple[int, int],
                     ablation_epochs: float, workers: Sequence[int],
                     windows: Sequence[int], train_examples: int, layers: int,
                     platform: Optional[str] = None,
                     grid_flags: Tuple[str, ...] = (),
                     ablation_flags: Tuple[str, ...] = (),
                     gap_epochs: Optional[float] = None,
                     ablation_alpha: bool = True,
                     ablation_processes: Tuple[str, ...] = (REFERENCE, BASELINE),
                     headline_seeds: Optional[int] = None,
                     setting: Tuple[str, ...] = THESIS_SETTING,
                     extras: Extras = Extras(),
                     seeded_cells: Sequence[Tuple[int, int]] = ()) -> Preset:
  """A preset's runs: the grid and every section beside it.

  The grid, DOWNPOUR, the normalization ablation and DynSGD run with
  `setting` added (the thesis' data assignment and fitted speeds); the
  sensitivity section, the commit-order ablation and DiLoCo without it;
  the mechanism's runs in each of `MECHANISM_SETTINGS`.
  `gap_epochs` is the budget of the gap cell's runs (default: the
  ablation's); `ablation_alpha=False` varies AEASGD's α only at the gap
  cell, where it is expected to matter most; `ablation_processes` are the
  strategies that run again as real processes (the staleness claim reads
  AGN's); `headline_seeds` (default `seeds`) is the seeds of the cells of
  `seeded_cells` (default: the first cell), which then run first, seed by
  seed.
  """
  gap_epochs = ablation_epochs if gap_epochs is None else gap_epochs
  batch = int(flag_value(base, "batch_size"))
  headline_seeds = headline_seeds or seeds
  thesis_base = base + setting

  def evaluated(run):
    return budget.with_evaluations(run, train_examples, batch)

  def grid_run(section, strategy, cell, seed, flags):
    return evaluated(RunSpec(section, strategy, *cell, seed, epochs, flags))

  runs = []
  seeded = [tuple(c) for c in seeded_cells] or [tuple(cells[0])]
  for seed in range(max(seeds, headline_seeds)):
    for n, l in cells:
      if seed >= (headline_seeds if (n, l) in seeded else seeds):
        continue
      for strategy in (REFERENCE, BASELINE):
        runs.append(grid_run(GRID, strategy, (n, l), seed,
                             thesis_base + grid_flags))
  # The thesis' DOWNPOUR: a commit after every mini-batch (λ = 1), 5 epochs'
  # worth of data, batch 128 (thesis.DOWNPOUR), for each optimizer of the
  # sweep (the thesis names none).
  downpour = thesis_base + (flagfile("report_downpour.flags"),)
  for optimizer, lr in extras.downpour_optimizers:
    for n in downpour_workers:
      runs.append(evaluated(RunSpec(
          DOWNPOUR, "downpour", n,
          thesis.DOWNPOUR.runs[0].communication_window, 0, downpour_epochs,
          downpour + grid_flags + (f"--worker_optimizer={optimizer}",
                                   f"--learning_rate={lr:g}"),
          downpour_variant(optimizer, lr))))
  if extras.normalization:
    n, lams, norm_epochs = extras.normalization
    for l in lams:
      for variant, how in ((NORMALIZED, "window"), (UNNORMALIZED, "none")):
        runs.append(evaluated(RunSpec(
            NORMALIZATION, REFERENCE, n, l, 0, norm_epochs,
            thesis_base + grid_flags + (f"--normalization={how}",), variant)))
  for cell in extras.dynsgd_cells:
    runs.append(grid_run(DYNSGD, "dynsgd", cell, 0, thesis_base + grid_flags))
  if extras.mechanism:
    runs += [evaluated(r) for r in mechanism_runs(extras.mechanism,
                                                  base + grid_flags)]
  # One cell at a reduced budget: the commit order (round robin, random
  # speeds, real processes) for both strategies, and AEASGD's α.
  n, l = ablation_cell
  # The processes runs ignore the flagfile's simulator settings.
  order = {ROUND_ROBIN: (), RANDOM: (f"--speed_model={RANDOM_SPEEDS}",),
           PROCESSES: ("--backend=processes",)}
  for variant, extra in order.items():
    for strategy in (REFERENCE, BASELINE):
      if variant == PROCESSES and strategy not in ablation_processes:
        continue
      runs.append(RunSpec(ABLATION, strategy, n, l, 0, ablation_epochs,
                          base + ablation_flags + extra, variant))
  if ablation_alpha:
    runs.append(RunSpec(
        ABLATION, BASELINE, n, l, 0, ablation_epochs,
        base + ablation_flags + (
            f"--elastic_learning_rate={ALPHA_VARIANT / 5:g}", "--rho=5"),
        f"alpha{ALPHA_VARIANT:g}"))
  # Both α again where the gap to the thesis is expected to be widest.
  gap = budget.gap_cell(cells, gap_epochs, train_examples, batch)
  if gap is not None:
    # AGN's commit order there too: the cell of the grid where AGN parts
    # furthest from the thesis in the committed study (n/λ = 4).
    gap_orders = dict(order, **{LOGNORMAL: (
        f"--speed_model={LOGNORMAL_SPEEDS}",)})
    for variant in (ROUND_ROBIN, RANDOM, LOGNORMAL):
      runs.append(RunSpec(ABLATION, REFERENCE, *gap, 0, gap_epochs,
                          base + ablation_flags + gap_orders[variant],
                          variant))
    for eta in (None, ALPHA_VARIANT / 5):
      runs.append(RunSpec(
          ABLATION, BASELINE, *gap, 0, gap_epochs,
          base + ablation_flags + (
              (f"--elastic_learning_rate={eta:g}", "--rho=5") if eta else ()),
          f"alpha{ALPHA_VARIANT:g}" if eta else THESIS_ALPHA))
  # DiLoCo's outer Nesterov step made fair for asynchrony: one commit is one
  # worker's delta, not the mean of n, so the outer learning rate is ÷ n.
  runs.append(RunSpec(
      DILOCO, REFERENCE, n, l, 0, ablation_epochs,
      base + ablation_flags + ("--server_optimizer=nesterov",
                               f"--server_learning_rate={0.7 / n:g}",
                               "--server_momentum=0.9"), "nesterov"))
  for cell in extras.sensitivity_cells:
    for strategy in (REFERENCE, BASELINE):
      runs.append(grid_run(SENSITIVITY, strategy, cell, 0, base + grid_flags))
  # The headline cell's first seed first, then the cheap sections, then the
  # rest of the grid, its other seeds, and the sensitivity grid last: a study
  # stopped early still has something in most sections.
  # The unstable cell (n = 4λ, the thesis' (40, 10)) follows the headline.
  unstable = [c for c in cells if c[0] == 4 * c[1]][:1]
  first = [r for c in [cells[0]] + unstable for r in runs
           if r.section == GRID and r.cell == c and r.seed == 0]
  if seeded_cells:
    # Every seed of the cells whose verdict the seeds decide, seed by seed,
    # and then one seed of every other cell, before anything else.
    first = [r for r in runs if r.section == GRID and r.cell in seeded]
    first += [r for r in runs if r.section == GRID and r.seed == 0
              and r not in first]
  # The mechanism's runs are cheap below the grid's budget (cpu), and come
  # late at the grid's own (paper).
  cheap = [r for r in runs if r.section in (DOWNPOUR, NORMALIZATION) or
           (r.section == MECHANISM and r.epochs < epochs)]
  rest = [r for r in runs if r.section == GRID and r not in first]
  rest.sort(key=lambda r: r.seed)
  late = [r for r in runs if r.section in (DYNSGD, ABLATION, DILOCO) or
          (r.section == MECHANISM and r not in cheap)]
  last = [r for r in runs if r.section == SENSITIVITY]
  return Preset(name, description, tuple(first + cheap + rest + late + last),
                tuple(workers), tuple(windows), seeds, train_examples,
                ablation_cell, layers, platform, gap, headline_seeds,
                extras.mechanism, tuple(tuple(c) for c in seeded_cells))


# The cpu preset's grid: today's five cells, then (40, 20), the heuristic's
# λ at n = 40, and (20, 15), the cell of the thesis' staleness histogram.
CPU_CELLS = ((40, 40), (10, 10), (10, 40), (25, 25), (40, 10), (40, 20),
             (20, 15))


# The refit study: the thesis' setting on the cluster model
# refitted to all 98 of its published times, its staleness histogram and its
# per-worker traces (scripts/fit_cluster.py, committed before any run), with
# the model and optimizers as Keras built them. The clock decides the cells
# at n = 4λ and n = 2λ, so they run 3 seeds each, first.
# The model as the thesis' Keras 2.0 built it (glorot_uniform kernels, zero
# biases, Keras' Adam): docs/reproducing.md, "As Keras built it".
KERAS_MODEL = ("--initializer=keras", "--worker_optimizer=keras_adam")
REFIT_CLUSTER, REFIT_SPEEDS = "paper_refit", "thesis_refit"
REFIT_SETTING = (f"--data_assignment={THESIS_ASSIGNMENT}",
                 f"--cluster={REFIT_CLUSTER}",
                 f"--speed_model={REFIT_SPEEDS}") + KERAS_MODEL
REFIT_SEEDED_CELLS = ((40, 10), (40, 20))
# A seed "recovers" when the mean of its last five evaluations of the
# center's test accuracy is at least this: the thesis' (40, 10) curve ends
# near 0.96 after staying below 0.90 for 520 of its 749 s. Stated before the
# refit's runs.
RECOVERED_ACCURACY = 0.90


# RQ2 and RQ4 on this CPU, about an hour (18 runs of 5 epochs, 5.4 M
# samples): n = 10, 20, 40 at λ = 10, so n = 40 is the thesis' unstable
# cell, at the smallest budget that leaves it 5 windows a worker (RQ1's
# budget too); the three methods again under round robin there; RQ4 at
# n = 10, λ = 10 with 3 seeds. A gradient-cosine probe (a forward and
# backward pass over 1,000 examples, about 8 local steps' work) every 50
# local steps gives about 47 probes a run.
CPU_MECHANISM = Mechanism(
    workers=(10, 20, 40), window=10, epochs=5.0,
    round_robin=MECHANISM_METHODS, cosine_workers=10, cosine_seeds=3,
    probe_steps=50,
    budget="about an hour of this 2-core CPU: the study's runs train "
    "1,500–1,900 samples per CPU second, and the instruments add about 30 % "
    "CPU time to DOWNPOUR's commit-every-step runs (measured here on one "
    "epoch at n = 10) and less at λ = 10; 5 epochs is the smallest whole "
    "budget that leaves each of 40 workers the report's 5 windows at "
    "λ = 10, and RQ1's budget too. The unstable cell is thus seen over the "
    "first 5 of the thesis' 40 epochs (the grid's own 40-epoch run of it "
    "has no instruments)")
# On one GPU: also n = 30, and every run at the paper's full 40 epochs, so
# the unstable cell is seen over its whole run.
PAPER_MECHANISM = CPU_MECHANISM._replace(
    workers=(10, 20, 30, 40), epochs=40.0,
    budget="the paper's full 40 epochs, so the unstable cell is seen over "
    "its whole run, on one GPU")
# The test's shrink, 7 runs: two n, one method under round robin, RQ4 on
# the sweep's own runs (one seed: its interval is left to unit tests).
QUICK_MECHANISM = Mechanism(
    workers=(2, 4), window=2, epochs=1.0, round_robin=(NORMALIZED,),
    cosine_workers=2, cosine_seeds=1, probe_steps=4,
    budget="the test's shrink, seconds a run")


def preset(name: str) -> Preset:
  """The preset's study.

  * `paper`: the paper's experiment at its own scale: full MNIST, the paper
    MLP, batch 128, 40 epochs a run, AGN against AEASGD over the whole 7 × 7
    grid with 3 seeds, the simulator on the paper's cluster model, for one
    GPU.
  * `cpu`: the same settings at seven cells of the grid (`CPU_CELLS`), one
    seed (three at the headline cell), on this 2-core CPU; the first five
    again in the old setting (round robin over fixed shards) as the
    sensitivity section; the gap cell's ablation at 5 epochs, and AEASGD's α
    varied only there.
  * `beyond`: Delayed Nesterov, Dynamic Local Updates and compressed
    commits beside AGN and AEASGD under heterogeneous speeds, at two cells
    of the grid at the full budget (`beyond.runs`), on this CPU.
  * `quick`: a shrink on scikit-learn's digits for tests (seconds), with
    the beyond section's runs at one cell; it says nothing about the paper.

  Raises:
    ValueError: for another name.
  """
  paper_base = (flagfile("report_paper.flags"),)
  grid = thesis.WORKERS
  if name == "paper":
    cells = [(n, l) for n in grid for l in thesis.COMMUNICATION_WINDOWS]
    return _grid_and_extras(
        name, "the paper's whole 7 × 7 grid at its full budget, 3 seeds, on "
        "one GPU", paper_base, cells, 3, 40.0, (10, 20), 5.0, (10, 10), 10.0,
        grid, thesis.COMMUNICATION_WINDOWS, 60000, 4, platform="gpu",
        grid_flags=("--platform=gpu",),
        # Ten worker processes would share one GPU's memory: the ablation's
        # cell runs on the CPU, real processes and simulator alike.
        ablation_flags=("--platform=cpu",), setting=REFIT_SETTING,
        extras=Extras(normalization=(10, (5, 10, 20), 5.0),
                      dynsgd_cells=((40, 40), (10, 10)),
                      downpour_optimizers=KERAS_DOWNPOUR_OPTIMIZERS,
                      mechanism=PAPER_MECHANISM))
  if name == "cpu":
    return _grid_and_extras(
        name, "seven cells of the paper's grid at its full budget in the "
        "thesis' setting (epoch slices, the fitted cluster), 3 seeds at the "
        "headline cell, on this CPU", paper_base, CPU_CELLS, 1, 40.0,
        (10, 20), 5.0, (10, 10), 10.0, grid, thesis.COMMUNICATION_WINDOWS,
        60000, 4, gap_epochs=5.0, ablation_alpha=False, headline_seeds=3,
        extras=Extras(sensitivity_cells=CPU_CELLS[:5],
                      normalization=(10, (5, 10, 20), 5.0),
                      dynsgd_cells=((40, 40), (10, 10)),
                      mechanism=CPU_MECHANISM))
  if name == "refit":
    return _grid_and_extras(
        name, "the cpu study's seven cells on the cluster refitted to the "
        "thesis' clock, with the thesis' Keras model and optimizers, 3 seeds "
        "at n = 40, λ = 10 and 20, on this CPU", paper_base, CPU_CELLS, 1,
        40.0, (10, 20), 5.0, (10, 10), 10.0, grid,
        thesis.COMMUNICATION_WINDOWS, 60000, 4, gap_epochs=5.0,
        ablation_alpha=False, headline_seeds=3, setting=REFIT_SETTING,
        seeded_cells=REFIT_SEEDED_CELLS,
        extras=Extras(normalization=(10, (5, 10, 20), 5.0),
                      dynsgd_cells=((40, 40), (10, 10)),
                      downpour_optimizers=KERAS_DOWNPOUR_OPTIMIZERS,
                      mechanism=CPU_MECHANISM))
  if name == "beyond":
    # pylint: disable=g-import-not-at-top
    from experiments.report import beyond
    from experiments.report import language_model
    # pylint: enable=g-import-not-at-top
    cells = ((40, 40), (40, 10))
    # The language model's runs first: the hour they take is the study's
    # newest question.
    return Preset(
        name, "methods after the paper (Delayed Nesterov, Dynamic Local "
        "Updates, compressed commits) beside AGN and AEASGD under "
        f"`--speed_model={HETEROGENEOUS_SPEEDS}`: on the next-byte language "
        "model (n = 8, λ = 10, 2 seeds), and at two cells of the paper's "
        "grid at its full budget (one seed), on this CPU",
        language_model.runs() + beyond.runs(paper_base, cells, 40.0, 60000),
        (40,),
        (10, 40), 1, 60000, cells[0], 4)
  if name == "quick":
    quick_base = (flagfile("report_quick.flags"),)
    p = _grid_and_extras(
        name, "a shrink on scikit-learn's digits for tests; it says nothing "
        "about the paper", quick_base,
        [(2, 2), (2, 4), (4, 4)], 1, 2.0, (2, 4), 1.0, (2, 2), 2.0, (2, 4),
        (2, 4), 1438, 2,
        # Each run compiles its own programs unless an earlier run has the
        # same ones (the suite's JAX cache): AEASGD's α varies only at the
        # gap cell (as in `cpu`), only AGN runs as real processes (a few
        # seconds of process start each), DOWNPOUR runs with Adam alone.
        ablation_alpha=False, ablation_processes=(REFERENCE,),
        extras=Extras(sensitivity_cells=((2, 2),),
                      downpour_optimizers=(("adam", 1e-3),),
                      normalization=(2, (2,), 1.0), dynsgd_cells=((2, 2),),
                      mechanism=QUICK_MECHANISM))
    # At a cell of the grid, whose AGN and AEASGD programs it reuses.
    from experiments.report import beyond  # pylint: disable=g-import-not-at-top
    return p._replace(runs=p.runs + beyond.runs(quick_base, [(4, 4)], 2.0,
                                                p.train_examples, ("int8",)))
  raise ValueError(f"--preset accepts {', '.join(PRESETS)}, not {name!r}")


def cost(p: Preset, seconds_per_sample: Optional[float],
         section_rates: Optional[Dict[str, Optional[float]]] = None
         ) -> Dict[str, float]:
  """Runs, samples and the estimated seconds of the preset.

  Args:
    p: the preset.
    seconds_per_sample: the measured rate on this device, or None (no
      estimate).
    section_rates: a section's own rate where its samples cost otherwise
      (the language model's windows against MNIST's images); None: unknown.

  >>> run = RunSpec(GRID, REFERENCE, 2, 2, 0, 1.0, ())
  >>> lm = RunSpec(BEYOND_LM, REFERENCE, 2, 2, 0, 1.0, (), examples=10)
  >>> p = preset("quick")._replace(runs=(run, lm))
  >>> round(cost(p, 0.001, {BEYOND_LM: 0.1})["seconds"], 3)
  2.438
  """
  rates = section_rates or {}
  samples = sum(p.samples(r) for r in p.runs)
  seconds = 0.0
  for r in p.runs:
    rate = rates.get(r.section, seconds_per_sample)
    seconds += p.samples(r) * rate if rate else math.nan
  return {"runs": len(p.runs), "samples": samples, "seconds": seconds}
