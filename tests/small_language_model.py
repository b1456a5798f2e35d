"""The built-in language-model workload, shrunk for the suite: `--task=next_token` with these two.

The built-in dataset (`shakespeare`) through `agn_jax.data.load`, its
held-out split cut to its first `TEST_WINDOWS` windows, and the built-in
model's transformer at a width of 16 and one block: evaluating the whole
held-out split (525 KB) with it twice a run would cost the suite more than
the run. Every process of a run imports them from here
(`--dataset=tests.small_language_model:load`,
`--model=tests.small_language_model:transformer`).
"""

import flax.linen as nn
import jax.numpy as jnp

from agn_jax import data
from agn_jax import transformer as transformer_lib

TEST_WINDOWS = 16


def load(data_dir=None, size=None) -> data.Dataset:
  """`shakespeare`'s first `size` training windows and first `TEST_WINDOWS` held-out ones."""
  full = data.load("shakespeare", data_dir, size=size)
  return full._replace(x_test=full.x_test[:TEST_WINDOWS],
                       y_test=full.y_test[:TEST_WINDOWS])


def transformer(num_classes, input_shape):
  """The built-in `transformer`'s model, 16 wide with one block of two heads."""
  return transformer_lib.create_transformer(
      input_shape[0], d_model=16, num_layers=1, num_heads=2,
      vocab_size=num_classes)



class Bigram(nn.Module):
  """Each byte's next from that byte alone: an 8-wide embedding, then the logits."""
  vocab_size: int

  @nn.compact
  def __call__(self, tokens):
    x = nn.Embed(self.vocab_size, 8)(jnp.asarray(tokens).astype(jnp.int32))
    return nn.Dense(self.vocab_size)(x)


def bigram(num_classes, input_shape):
  """A bigram model of the task's bytes (`Bigram`): no attention, a second to compile.

  For tests that need many runs of the task rather than a transformer (the
  report's language-model section).
  """
  del input_shape
  return Bigram(num_classes)
