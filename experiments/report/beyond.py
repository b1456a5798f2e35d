"""The beyond study's MNIST part: its runs (`design.preset("beyond")`).

Delayed Nesterov, Dynamic Local Updates and compressed commits beside AGN
and AEASGD under heterogeneous speeds; `sections/beyond.py` reports them.
Its language-model part is `language_model`.
"""

from typing import Sequence, Tuple

from experiments.report import budget
from experiments.report import design


def runs(base: Tuple[str, ...], cells: Sequence[Tuple[int, int]],
         epochs: float, train_examples: int,
         codecs: Sequence[str] = design.CODECS
         ) -> Tuple[design.RunSpec, ...]:
  """The beyond section's runs: AGN, AGN + DN, AGN + DyLU and AEASGD per cell.

  Every run draws each worker's speed from `lognormal(0.5)` (the same draws
  for one seed), at the grid's full per-run budget. DN is Delayed Nesterov
  (Liu, Douillard et al. 2024) at DiLoCo's outer settings, lr 0.7 and
  momentum 0.9, updating its momentum once per n commits; DyLU gives each
  worker a window proportional to its speed. AGN then runs with each codec
  at the first cell. DyLU's runs come last. Every run evaluates the center
  at least `budget.EVALUATIONS` times (`budget.with_evaluations`, on
  `train_examples` training examples), as the grid's runs do: E test
  decides the DN and DyLU claims.

  >>> [r.name for r in runs(("--batch_size=8",), [(4, 2)], 1.0, 1000,
  ...                       ("int8",))]
  ['agn-n4-l2-s0-plain', 'aeasgd-n4-l2-s0-plain', 'agn-n4-l2-s0-dn', \
'agn-n4-l2-s0-int8', 'agn-n4-l2-s0-dylu']
  """
  speeds = base + (f"--speed_model={design.HETEROGENEOUS_SPEEDS}",)

  batch = int(design.flag_value(base, "batch_size"))

  def run(strategy, n, l, flags, variant):
    return budget.with_evaluations(
        design.RunSpec(design.BEYOND, strategy, n, l, 0, epochs,
                       speeds + flags, variant), train_examples, batch)

  found, dylu = [], []
  for n, l in cells:
    found.append(run(design.REFERENCE, n, l, (), design.PLAIN))
    found.append(run(design.BASELINE, n, l, (), design.PLAIN))
    found.append(run(design.REFERENCE, n, l, delayed_nesterov_flags(n),
                     design.DN))
    dylu.append(run(design.REFERENCE, n, l, ("--dynamic_local_updates",),
                    design.DYLU))
  n, l = cells[0]
  for codec in codecs:
    found.append(run(design.REFERENCE, n, l,
                     (f"--commit_compression={codec}",), codec_variant(codec)))
  return tuple(found + dylu)


def delayed_nesterov_flags(num_workers: int) -> Tuple[str, ...]:
  """Delayed Nesterov at DiLoCo's outer settings, its momentum moved once per n commits."""
  return ("--server_optimizer=delayed_nesterov", "--server_learning_rate=0.7",
          "--server_momentum=0.9", f"--server_every={num_workers}")


def codec_variant(codec: str) -> str:
  """A codec's run variant: its name without the colon (`topk:0.1` -> `topk0.1`)."""
  return codec.replace(":", "")
