"""A workload written outside agn_jax, as a user would write one: the fixture of tests/{unit,e2e}/test_workloads*.py and the example of docs/workloads.md.

Bag-of-tokens regression. Each example is a sequence of `LENGTH` integer
token ids from a vocabulary of `VOCAB`; its target is the sum of a hidden
weight per token, plus noise. The model gives every token one learned
number and sums them, plus a bias: linear regression on the tokens'
counts, which the tests replay in numpy. The task minimizes the mean
squared error and reports two named metrics: the mean absolute error (lower
is better; what temporal efficiency reads) and the share of examples
predicted within 0.5 of their target (higher is better).

Nothing in agn_jax names it. A run selects its parts by where they live
(`--task=tests.regression_workload:regression`
`--model=tests.regression_workload:bag_of_tokens`
`--dataset=tests.regression_workload:load`), and every process of the run
imports them from here, so this module imports nothing from tests/. The
code below the docstring is docs/workloads.md's example, verbatim.
"""

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from agn_jax import data, tasks

VOCAB, LENGTH = 12, 5


def load(size=None, seed=0) -> data.Dataset:
  """`size` training sequences (default 96) and 32 test ones, with their targets."""
  n = size or 96
  rng = np.random.default_rng(seed)
  weights = rng.normal(size=VOCAB)
  tokens = rng.integers(0, VOCAB, (n + 32, LENGTH)).astype(np.int32)
  targets = weights[tokens].sum(1) + 0.1 * rng.normal(size=n + 32)
  targets = targets.astype(np.float32)
  return data.Dataset(tokens[:n], targets[:n], tokens[n:], targets[n:],
                      num_classes=1, input_shape=(LENGTH,),
                      name="bag_of_tokens")


class BagOfTokens(nn.Module):
  """One learned number per token, summed over the sequence, plus a bias."""
  vocab: int

  @nn.compact
  def __call__(self, tokens):
    embed = nn.Embed(self.vocab, 1, embedding_init=nn.initializers.normal(0.1))
    bias = self.param("bias", nn.initializers.zeros, ())
    return embed(tokens)[..., 0].sum(-1) + bias


def bag_of_tokens() -> nn.Module:
  """The model: it reads nothing of the dataset (`num_classes`, `input_shape`) but the vocabulary it knows."""
  return BagOfTokens(VOCAB)


def squared_error(apply_fn):
  """The loss of `apply_fn`: mean squared error, and the named metrics."""

  def loss_fn(params, batch):
    tokens, targets = batch
    error = apply_fn(params, tokens) - targets
    return jnp.mean(error ** 2), {
        "mae": jnp.mean(jnp.abs(error)),
        "hit_rate": jnp.mean((jnp.abs(error) <= 0.5).astype(jnp.float32))}

  return loss_fn


def regression() -> tasks.Task:
  """The task: minimize the squared error; E reads the mean absolute error."""
  return tasks.Task(
      name="regression", loss=squared_error,
      metrics=(tasks.Metric("mae", higher_is_better=False),
               tasks.Metric("hit_rate", higher_is_better=True)),
      efficiency_metric="mae")
