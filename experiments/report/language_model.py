"""The beyond study on the language model: its workload and its runs.

The methods designed for language models (Delayed Nesterov, Dynamic Local
Updates) beside AGN and AEASGD on the built-in next-byte task
(`--task=next_token --model=transformer`, Shakespeare; docs/language_model.md),
under heterogeneous speeds, on one cell chosen before any run:

* n = 8 workers, λ = 10: asynchronous Local-SGD's scale (Liu, Douillard et al.
  2024 ran 4 and 16 workers), a window as long as the MNIST study's shortest;
* every worker's speed drawn once from `lognormal(0.5)` (the MNIST study's);
* the shared data stream (`--data_assignment=stream`) for every method, as
  asynchronous Local-SGD assumes: a faster worker takes more of the data, and
  every run trains on the same number of windows of 128 bytes (`EPOCHS` of
  the training split), so the token budget is equal;
* batch 16, each strategy's paper optimizer (AGN: Adam 1e-3), the default
  transformer (1.9 M parameters), 2 seeds.

The center is evaluated on a fixed eighth of the held-out works (`load`):
the whole split (525 KB) costs half a minute of this CPU an evaluation.

Synchronous-round DiLoCo is not run: the simulator has no synchronous round
(every commit is applied as it comes), and the study's hour is spent.
"""

from typing import Optional, Tuple

from agn_jax import data as data_lib
from experiments.report import beyond
from experiments.report import design

SECTION = design.BEYOND_LM
# n, λ: chosen before the runs (module docstring).
CELL = (8, 10)
SEEDS = 2
# Half of the training split's 35,408 windows of 128 bytes (2.3 M tokens):
# 1,106 steps of 16 windows over the 8 workers, about 7 minutes a run here.
EPOCHS = 0.5
TRAIN_WINDOWS = 35408
BATCH_SIZE = 16
# Seconds of this 2-core CPU a training window costs in the study's runs
# (simulator, batch 16, the default transformer, evaluations included): the
# estimate before a run of its own has completed. The simulator trains about
# 50 windows a second here when quiet (docs/language_model.md's benchmark).
CPU_SECONDS_PER_WINDOW = 1 / 40
# Every EVAL_STRIDE-th held-out window: 513 windows (65,664 bytes) of all
# four held-out works.
EVAL_STRIDE = 8
WORKLOAD = ("--task=next_token", "--model=transformer",
            "--dataset=experiments.report.language_model:load")
SETTING = ("--backend=simulated", "--cluster=none",
           "--speed_model=lognormal:0.5", "--data_assignment=stream",
           f"--batch_size={BATCH_SIZE}", "--eval_every_rounds=1",
           "--nocheckpoint_at_end", "--checkpoint_every_seconds=300",
           "--noplots")


def load(data_dir: Optional[str] = None,
         size: Optional[int] = None) -> data_lib.Dataset:
  """The built-in `shakespeare` dataset with every `EVAL_STRIDE`-th held-out window.

  Args:
    data_dir: the corpus's cache (`--data_dir`).
    size: the training windows to keep (`--dataset_size`).

  Returns:
    The dataset, its test split strided.
  """
  full = data_lib.load("shakespeare", data_dir, size=size)
  return full._replace(x_test=full.x_test[::EVAL_STRIDE],
                       y_test=full.y_test[::EVAL_STRIDE])


def runs(workload: Tuple[str, ...] = WORKLOAD + SETTING,
         cell: Tuple[int, int] = CELL, epochs: float = EPOCHS,
         seeds: int = SEEDS, section: str = SECTION,
         examples: int = TRAIN_WINDOWS) -> Tuple[design.RunSpec, ...]:
  """The study's language-model runs: AGN, AEASGD, AGN + DN, AGN + DyLU, each seed.

  Plain AGN's and AEASGD's come first, then DN's, then DyLU's (as in the
  MNIST part), seed by seed.

  Args:
    workload: the flags every run shares (task, model, dataset, setting).
    cell: (n, λ).
    epochs: the runs' data budget, in epochs of the training split.
    seeds: seeds per method.
    section: the section that owns them.
    examples: the training windows of the workload's dataset (for the
      study's cost).

  Returns:
    The `design.RunSpec`s.

  >>> [r.name for r in runs((), (2, 2), 0.1, 1)]
  ['agn-n2-l2-s0-plain', 'aeasgd-n2-l2-s0-plain', 'agn-n2-l2-s0-dn', \
'agn-n2-l2-s0-dylu']
  """
  n, l = cell
  methods = ((design.REFERENCE, (), design.PLAIN),
             (design.BASELINE, (), design.PLAIN),
             (design.REFERENCE, beyond.delayed_nesterov_flags(n), design.DN),
             (design.REFERENCE, ("--dynamic_local_updates",), design.DYLU))
  return tuple(
      design.RunSpec(section, strategy, n, l, seed, epochs, workload + extra,
                     variant, examples=examples)
      for seed in range(seeds) for strategy, extra, variant in methods)
