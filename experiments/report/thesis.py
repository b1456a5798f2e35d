"""The master thesis' own published figures, beside which the report puts ours.

Transcribed digit for digit (no rounding, nothing computed) from the LaTeX of
J. Hermans, *On Scalable Deep Learning and Parallelizing Gradient Descent*,
master thesis, Maastricht University (2017), public repository
`JoeriHermans/master-thesis`. Line numbers are those of the version named in
`SOURCES`; the index holds 19 versions of the AGN chapter and does not order
them, so a later one may differ (the summary table of the earlier version
d990da49 is identical, row for row).

Where every figure comes from:

* `GRID` (times and accuracies): `AGN_CHAPTER` at 6111c822, lines 352-460,
  `table:agn_experiments_summary` ("Summary of AGN and AEASGD experiments
  using different distributed hyperparameters (n and λ)"); columns n, λ,
  AGN t, AGN Acc., AGN Val., AEASGD t, AEASGD Acc., AEASGD Val.
* `GRID` (`efficiency`): the same file, lines 242-350,
  `table:agn_temporal_efficiency` ("Temporal efficiency of AGN and AEASGD
  compared to different distributed hyperparameters"); one column,
  "Temporal Efficiency AGN", i.e. E(AGN, AEASGD) of eq:temporal_efficiency
  (lines 215-218: the ratio of the two training-accuracy integrals up to the
  shorter run's end).
* What the columns measure, from the thesis' grid script
  `experiments/easgd_experiments.py` (d1874f3f): "Acc." is the last entry of
  dist-keras' averaged worker history (`history[len(history) - 1][1]`, lines
  71-73), the workers' training accuracy at the end; "Val." is the trained
  center evaluated on `data/mnist_test.parquet` (lines 114-124), MNIST's 10,000
  test images, so it is our test accuracy.
* `CLAIMED_FRACTION_EFFICIENCY_ABOVE_ONE`: the caption of
  `table:agn_temporal_efficiency` (line 348), "AGN is outperforming AEASGD in
  69.73% of the cases". No k / 49 is 69.73 %: the table has 33 cells with
  E > 1 (67.35 %) and 34 with E >= 1 (69.39 %, the cells it sets in bold).
* `DOWNPOUR`: `thesis/body/chapter_distributed_deep_learning.tex` (87a1da7d),
  `fig:downpour_convergence` ("Divergence due to number (n = 20) of
  asynchronous workers ... Lowering the number workers (n = 10) causes the
  central variable to converge") and `algo:downpour_worker` (a commit after
  every mini-batch); the AGN chapter (6111c822), line 41 (the n = 10 run's
  figure captioned λ = 1), lines 36-60 (`fig:downpour_accumulated_divergence`:
  at n = 10, λ = 5, 10, 20 do "not converge as before"), line 147 (batch 128
  for all optimizers; "DOWNPOUR, which will only use 5 epochs"). The repository
  holds no DOWNPOUR script, and the thesis states neither its worker optimizer
  nor its learning rate nor any DOWNPOUR accuracy: those fields are None.
* `LAMBDA_HEURISTIC`: the AGN chapter (6111c822), line 499, the caption of
  `fig:agn_experiments_workers`. The thesis gives no per-n best λ.
* `STALENESS`: `chapter_distributed_deep_learning.tex` (87a1da7d), line 22
  (E[τ] = n − 1 under a homogeneous cluster and a queueing model), line 28
  (`eq:implicit_momentum`, μ = 1 − 1/n), lines 33-61
  (`fig:staleness_distribution`: histograms at n = 10, 20, 30, 60 "validate"
  E[τ] = n − 1; no number is given).

Units: accuracies are fractions in [0, 1], times are seconds.
"""

from typing import Dict, NamedTuple, Optional, Tuple

REPOSITORY = "JoeriHermans/master-thesis"
AGN_CHAPTER = "thesis/body/chapter_accumulated_gradient_normalization.tex"
DDL_CHAPTER = "thesis/body/chapter_distributed_deep_learning.tex"
GRID_SCRIPT = "experiments/easgd_experiments.py"
WORKERS = (10, 15, 20, 25, 30, 35, 40)
COMMUNICATION_WINDOWS = (10, 15, 20, 25, 30, 35, 40)


class Source(NamedTuple):
  """Where a figure stands in the thesis' repository.

  Attributes:
    path: the file, relative to the repository root.
    commit: the version read (the index keeps several).
    lines: first and last line, both included; None where not counted.
    label: the LaTeX label of the table or figure, if any.
    quote: the words the figure is taken from, abridged.
  """
  path: str
  commit: str
  lines: Optional[Tuple[int, int]]
  label: Optional[str]
  quote: str


class CellFigures(NamedTuple):
  """One (n, λ) cell of the thesis' grid, AGN against AEASGD.

  Attributes:
    agn_seconds: AGN's training time ("AGN t").
    agn_train_accuracy: the workers' final training accuracy ("AGN Acc.").
    agn_test_accuracy: the center's MNIST test accuracy ("AGN Val.").
    aeasgd_seconds: AEASGD's training time ("AEASGD t").
    aeasgd_train_accuracy: "AEASGD Acc.".
    aeasgd_test_accuracy: "AEASGD Val.".
    efficiency: E(AGN, AEASGD), "Temporal Efficiency AGN"; None where the
      thesis did not tabulate it (it did for every cell).
  """
  agn_seconds: float
  agn_train_accuracy: float
  agn_test_accuracy: float
  aeasgd_seconds: float
  aeasgd_train_accuracy: float
  aeasgd_test_accuracy: float
  efficiency: Optional[float]


# Keyed by (n, λ), in the tables' row order.
GRID: Dict[Tuple[int, int], CellFigures] = {
    (10, 10): CellFigures(1066.08, 1.0000, 0.9843, 953.61, 0.9922, 0.9864, 1.009),
    (10, 15): CellFigures(864.01, 0.9953, 0.9854, 846.86, 0.9938, 0.9869, 1.012),
    (10, 20): CellFigures(886.34, 0.9938, 0.9861, 804.07, 0.9891, 0.9867, 1.003),
    (10, 25): CellFigures(855.51, 0.9875, 0.9852, 784.46, 0.9891, 0.9874, 0.999),
    (10, 30): CellFigures(886.01, 0.9922, 0.9850, 930.73, 0.9891, 0.9864, 0.988),
    (10, 35): CellFigures(850.87, 0.9844, 0.9842, 798.74, 0.9922, 0.9862, 0.990),
    (10, 40): CellFigures(845.21, 0.9875, 0.9843, 791.04, 0.9766, 0.9858, 0.990),
    (15, 10): CellFigures(979.72, 0.9967, 0.9861, 813.32, 0.9911, 0.9867, 1.008),
    (15, 15): CellFigures(638.13, 0.9989, 0.9858, 721.47, 0.9866, 0.9865, 1.015),
    (15, 20): CellFigures(562.72, 0.9989, 0.9849, 564.92, 0.9900, 0.9860, 1.009),
    (15, 25): CellFigures(580.71, 0.9877, 0.9850, 542.28, 0.9833, 0.9862, 1.005),
    (15, 30): CellFigures(544.97, 0.9844, 0.9844, 660.58, 0.9855, 0.9858, 1.000),
    (15, 35): CellFigures(562.93, 0.9866, 0.9845, 573.54, 0.9833, 0.9845, 0.997),
    (15, 40): CellFigures(561.17, 0.9922, 0.9842, 566.00, 0.9888, 0.9852, 0.994),
    (20, 10): CellFigures(839.94, 0.9926, 0.9836, 821.12, 0.9790, 0.9852, 0.983),
    (20, 15): CellFigures(571.17, 1.0000, 0.9845, 610.88, 0.9852, 0.9849, 1.018),
    (20, 20): CellFigures(432.93, 0.9938, 0.9847, 510.72, 0.9778, 0.9839, 1.022),
    (20, 25): CellFigures(479.72, 0.9963, 0.9845, 421.50, 0.9786, 0.9834, 1.009),
    (20, 30): CellFigures(433.36, 0.9942, 0.9849, 429.16, 0.9836, 0.9833, 1.007),
    (20, 35): CellFigures(418.83, 0.9852, 0.9844, 409.86, 0.9819, 0.9833, 1.002),
    (20, 40): CellFigures(434.86, 0.9844, 0.9834, 420.46, 0.9766, 0.9828, 0.997),
    (25, 10): CellFigures(768.45, 0.9862, 0.9787, 753.27, 0.9826, 0.9840, 0.954),
    (25, 15): CellFigures(524.85, 0.9976, 0.9857, 540.20, 0.9832, 0.9832, 1.021),
    (25, 20): CellFigures(455.92, 0.9970, 0.9852, 401.17, 0.9766, 0.9823, 1.017),
    (25, 25): CellFigures(351.30, 0.9910, 0.9844, 372.74, 0.9844, 0.9826, 1.014),
    (25, 30): CellFigures(365.58, 0.9856, 0.9848, 364.29, 0.9820, 0.9814, 1.008),
    (25, 35): CellFigures(364.04, 0.9832, 0.9846, 371.01, 0.9754, 0.9802, 1.003),
    (25, 40): CellFigures(373.22, 0.9805, 0.9835, 346.99, 0.9772, 0.9804, 0.999),
    (30, 10): CellFigures(778.42, 0.9792, 0.9725, 764.59, 0.9917, 0.9828, 0.926),
    (30, 15): CellFigures(507.43, 0.9972, 0.9851, 527.42, 0.9812, 0.9813, 1.017),
    (30, 20): CellFigures(428.09, 0.9974, 0.9848, 461.58, 0.9792, 0.9803, 1.045),
    (30, 25): CellFigures(341.44, 0.9901, 0.9848, 334.52, 0.9859, 0.9796, 1.015),
    (30, 30): CellFigures(318.41, 0.9917, 0.9839, 310.19, 0.9766, 0.9777, 1.012),
    (30, 35): CellFigures(312.96, 0.9917, 0.9835, 305.48, 0.9828, 0.9786, 1.005),
    (30, 40): CellFigures(316.68, 0.9865, 0.9830, 343.07, 0.9828, 0.9773, 1.005),
    (35, 10): CellFigures(691.38, 0.9665, 0.9674, 785.00, 0.9809, 0.9796, 0.881),
    (35, 15): CellFigures(511.17, 0.9901, 0.9818, 515.88, 0.9791, 0.9806, 0.997),
    (35, 20): CellFigures(390.05, 0.9961, 0.9851, 405.90, 0.9777, 0.9801, 1.017),
    (35, 25): CellFigures(314.71, 0.9952, 0.9837, 324.66, 0.9782, 0.9781, 1.020),
    (35, 30): CellFigures(273.62, 0.9867, 0.9843, 379.93, 0.9763, 0.9782, 1.016),
    (35, 35): CellFigures(276.11, 0.9929, 0.9813, 357.71, 0.9750, 0.9784, 1.027),
    (35, 40): CellFigures(284.50, 0.9869, 0.9817, 543.86, 0.9779, 0.9759, 1.012),
    (40, 10): CellFigures(748.94, 0.9417, 0.9555, 1256.09, 0.9657, 0.9799, 1.044),
    (40, 15): CellFigures(506.25, 0.9599, 0.9725, 534.42, 0.9688, 0.9789, 0.964),
    (40, 20): CellFigures(383.51, 0.9924, 0.9840, 412.37, 0.9665, 0.9783, 1.027),
    (40, 25): CellFigures(308.15, 0.9886, 0.9839, 347.50, 0.9665, 0.9767, 1.025),
    (40, 30): CellFigures(351.54, 0.9866, 0.9845, 305.50, 0.9647, 0.9767, 0.997),
    (40, 35): CellFigures(279.30, 0.9873, 0.9832, 252.70, 0.9632, 0.9760, 1.009),
    (40, 40): CellFigures(257.62, 0.9788, 0.9818, 250.74, 0.9665, 0.9745, 1.009),
}

# The paper's headline configuration, n = λ = 40.
HEADLINE = GRID[(40, 40)]
CLAIMED_FRACTION_EFFICIENCY_ABOVE_ONE = 0.6973
# The E values the thesis plots as its worst, equal and best cases (captions
# of the figure after eq:temporal_efficiency, lines 222-240).
EFFICIENCY_EXAMPLES = (0.964, 0.999, 1.044)


class DownpourRun(NamedTuple):
  """One DOWNPOUR run the thesis shows.

  Attributes:
    workers: n.
    communication_window: λ, local steps between commits.
    converged: the thesis' verdict on its plot.
    accuracy: a tabulated accuracy; None, the thesis only plots the run.
  """
  workers: int
  communication_window: int
  converged: bool
  accuracy: Optional[float] = None


class DownpourExperiment(NamedTuple):
  """The thesis' DOWNPOUR experiment on MNIST with the paper MLP.

  Attributes:
    runs: the runs it shows, each with its verdict.
    batch_size: mini-batch size m.
    epochs: epochs' worth of data split equally over the n workers.
    worker_optimizer: not stated (None).
    learning_rate: not stated (None).
  """
  runs: Tuple[DownpourRun, ...]
  batch_size: int
  epochs: int
  worker_optimizer: Optional[str]
  learning_rate: Optional[float]


DOWNPOUR = DownpourExperiment(
    runs=(DownpourRun(10, 1, converged=True),
          DownpourRun(20, 1, converged=False),
          # The same n = 10 run committing accumulated (not averaged) deltas.
          DownpourRun(10, 5, converged=False),
          DownpourRun(10, 10, converged=False),
          DownpourRun(10, 20, converged=False)),
    batch_size=128, epochs=5, worker_optimizer=None, learning_rate=None)


class UnstableCurve(NamedTuple):
  """The thesis' AGN training-accuracy curve at n = 40, λ = 10, as PAPER.md describes it.

  Attributes:
    cell: (n, λ).
    below_090_seconds: how long it stays below 0.90 training accuracy.
    seconds: the run's length.
    end_accuracy: where it climbs to at the end, as workers finish.
  """
  cell: Tuple[int, int]
  below_090_seconds: float
  seconds: float
  end_accuracy: float


UNSTABLE = UnstableCurve((40, 10), 520.0, 749.0, 0.96)

LAMBDA_HEURISTIC = "λ ≈ (n + layers in network) / 2"
# The thesis names no best λ for any n.
BEST_COMMUNICATION_WINDOW: Optional[Dict[int, int]] = None


class Staleness(NamedTuple):
  """What the thesis says of staleness τ (commits between a pull and a commit).

  Attributes:
    expected: E[τ] as the thesis states it.
    implicit_momentum: μ as the thesis states it (Mitliagkas et al.).
    histogram_workers: the n of its measured staleness histograms.
    measured_mean: a measured mean per n; None, the thesis only plots them.
  """
  expected: str
  implicit_momentum: str
  histogram_workers: Tuple[int, ...]
  measured_mean: Optional[Dict[int, float]]


STALENESS = Staleness(expected="n − 1", implicit_momentum="1 − 1/n",
                      histogram_workers=(10, 20, 30, 60), measured_mean=None)

_AGN_COMMIT = "6111c822c0f0c306a1a479f6e2c67e1714f648c2"
_DDL_COMMIT = "87a1da7d66b7f929805295e32725b19bb06f0ade"
SOURCES: Dict[str, Source] = {
    "grid": Source(
        AGN_CHAPTER, _AGN_COMMIT, (352, 460),
        "table:agn_experiments_summary",
        "Summary of AGN and AEASGD experiments using different distributed "
        "hyperparameters (n and λ)."),
    "efficiency": Source(
        AGN_CHAPTER, _AGN_COMMIT, (242, 350),
        "table:agn_temporal_efficiency",
        "Temporal efficiency of AGN and AEASGD compared to different "
        "distributed hyperparameters. ... AGN is outperforming AEASGD in "
        "69.73% of the cases"),
    "efficiency_definition": Source(
        AGN_CHAPTER, _AGN_COMMIT, (213, 218), "eq:temporal_efficiency",
        "we have to limit the computation to the minimum m of both training "
        "times"),
    "columns": Source(
        GRID_SCRIPT, "d1874f3f3ea917d8b14a1d3ad539f8702f5af29d", (71, 124),
        None,
        "return history[len(history) - 1][1] ... "
        "reader.read.parquet(\"data/mnist_test.parquet\") ... "
        "AEASGD(keras_model=model, worker_optimizer='adam', ..., "
        "batch_size=128, communication_window=communication_frequency, "
        "num_epoch=40, learning_rate=0.01, ...)"),
    "setup": Source(
        AGN_CHAPTER, _AGN_COMMIT, (147, 147), "sec:agn_experimental_validation",
        "we will set the mini-batch size to m = 128 in all optimizers, and use "
        "40 epochs worth of training data that will be equally distributed "
        "over all n workers with the exception for DOWNPOUR, which will only "
        "use 5 epochs ... 15 nodes with a 10Gbps interconnect"),
    "downpour": Source(
        DDL_CHAPTER, _DDL_COMMIT, None, "fig:downpour_convergence",
        "Divergence due to number (n = 20) of asynchronous workers ... "
        "Lowering the number workers (n = 10) causes the central variable to "
        "converge."),
    "downpour_window": Source(
        AGN_CHAPTER, _AGN_COMMIT, (36, 60),
        "fig:downpour_accumulated_divergence",
        "downpour_10 captioned λ = 1; λ = 5, 10, 20: the central variable is "
        "not able to converge as before."),
    "lambda_heuristic": Source(
        AGN_CHAPTER, _AGN_COMMIT, (499, 499), "fig:agn_experiments_workers",
        "derrive the following heuristic λ ≈ (n + layers in network) / 2"),
    "staleness": Source(
        DDL_CHAPTER, _DDL_COMMIT, (22, 61), "fig:staleness_distribution",
        "E[τ] = (n − 1) under a homogeneous hardware configuration and a "
        "simple queuing model"),
}


def cell(n: int, l: int) -> Optional[CellFigures]:
  """The thesis' figures for `n` workers and communication window `l`.

  Args:
    n: number of workers.
    l: communication window λ.

  Returns:
    The cell's `CellFigures`, or None where the thesis ran no such cell.

  Example:
    >>> cell(40, 40).agn_test_accuracy, cell(40, 40).agn_seconds
    (0.9818, 257.62)
    >>> cell(40, 40).aeasgd_test_accuracy, cell(40, 40).efficiency
    (0.9745, 1.009)
    >>> cell(20, 1) is None
    True
  """
  return GRID.get((n, l))
