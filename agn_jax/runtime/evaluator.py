"""The evaluator process: the test loss and the task's metrics of a center snapshot, on a timer and at the end.

A separate process, so an evaluation never holds up the server's commits
(it only pulls, like a worker). No JAX at module level.
"""

import time

import numpy as np

from agn_jax.runtime import context
from agn_jax.runtime import events


def run_evaluator(ctx: context.RunContext) -> bool:
  """Runs the evaluator loop in this process until the final evaluation (any backend).

  Returns:
    False after reporting a failure to the launcher.
  """
  try:
    _evaluate_loop(ctx)
  except BaseException as e:  # pylint: disable=broad-except
    context.report_failure(ctx, "evaluator", e)
    return False
  finally:
    ctx.events.flush()
  return True


def _evaluate_loop(ctx):
  jax = context.configure_jax(ctx.cache_dir)
  from agn_jax import build
  config, _, model, _, layout = context.build_parts(ctx)
  task = build.build_task(config)
  arrays = ctx.data.arrays()
  x_test, y_test = arrays["x_test"], arrays["y_test"]
  unravel = jax.jit(layout.unravel)
  buffer = np.empty(layout.num_params, np.float32)

  def evaluate(is_final):
    clock = ctx.transport.pull(buffer)
    loss, metrics = task.evaluation(model.apply, unravel(buffer), x_test,
                                    y_test)
    ctx.events.put(events.Evaluated(time.time(), clock, loss, metrics,
                                    is_final))

  period = config.eval_every_seconds
  if period and period > 0:
    evaluate(False)  # The initial center: where every curve starts.
  else:
    # Compile now, so the final evaluation does not wait for it.
    task.evaluation(model.apply, unravel(np.zeros_like(buffer)), x_test,
                    y_test)
  next_time = time.monotonic() + (period or 0)
  while True:
    wait = max(0.0, next_time - time.monotonic()) if period > 0 else 0.5
    if ctx.switches.wait("final", min(wait, 0.5)):
      evaluate(True)
      return
    if not context.parent_alive(ctx) or ctx.switches.is_set("abort"):
      return
    if period > 0 and time.monotonic() >= next_time:
      evaluate(False)
      next_time = time.monotonic() + period
