"""The parameter-server process: owns the center, applies commits FIFO through the strategy's rule.

The math is `strategy.rule.apply`, jitted; this module only moves bytes,
counts staleness and refuses non-finite commits. No JAX at module level.
"""

import time

import numpy as np

from agn_jax.runtime import _child
from agn_jax.runtime.transport import WorkerDone

_POLL_SECONDS = 0.2


def server_apply_fn(strategy, layout):
  """`apply(center_flat, payload, state, staleness) -> (center_flat, state)`, jitted.

  The rule sees the same pytrees it sees in a single process; the flat vector
  is only the wire format.
  """
  import jax

  def apply(center_flat, payload, state, staleness):
    center = layout.unravel(center_flat)
    commit = {
        key: layout.unravel(vector)
        for key, vector in zip(strategy.payload, payload)
    }
    center, state = strategy.rule.apply(center, commit, state, staleness)
    return layout.ravel(center), state

  return jax.jit(apply, donate_argnums=(0,))


def server_main(ctx: _child.RunContext, placement) -> None:
  """Entry point of the server (a spawned process)."""
  _child.enter(placement)
  try:
    _serve(ctx)
  except BaseException as e:  # pylint: disable=broad-except
    _child.report_failure(ctx, "server", e)
    raise SystemExit(1)


def _serve(ctx: _child.RunContext) -> None:
  jax = _child.configure_jax(ctx.cache_dir)
  import jax.numpy as jnp
  from agn_jax import build
  config, strategy, model, _, layout = _child.build_parts(ctx)
  transport = ctx.transport
  input_dim = int(np.prod(ctx.input_shape))
  initial = layout.ravel_numpy(build.initial_center(config, model, input_dim))
  center = jnp.asarray(initial)
  state = strategy.rule.init(layout.unravel(center))
  apply = server_apply_fn(strategy, layout)
  transport.publish(initial, clock=0)

  # Compile before the first commit arrives, on a copy (the center is donated).
  zeros = tuple(
      np.zeros(layout.num_params, np.float32) for _ in strategy.payload)
  jax.block_until_ready(apply(jnp.array(center), zeros, state, np.int32(0)))
  ctx.events.put(("ready", {"time": time.time(), "role": "server"}))

  clock, rejected = 0, 0
  done = {}
  while len(done) < config.num_workers:
    message = transport.next_commit(_POLL_SECONDS)
    if message is None:
      if not _child.parent_alive(ctx):
        return
      continue
    if isinstance(message, WorkerDone):
      done[message.worker] = message
      ctx.events.put(("worker_done", message._asdict()))
      continue
    payload = transport.slot(message.slot)
    if not np.isfinite(payload).all():
      # A diverged worker must not poison the center; it pulls again anyway.
      transport.free_slot(message.slot)
      transport.acknowledge(message.worker)
      rejected += 1
      ctx.events.put(("rejected", {
          "time": time.time(), "worker": message.worker, "clock": clock}))
      continue
    staleness = clock - message.clock
    center, state = apply(center, tuple(payload), state, np.int32(staleness))
    host = np.asarray(center)  # Waits for the result: the slot is read.
    transport.free_slot(message.slot)
    clock += 1
    transport.publish(host, clock)
    transport.acknowledge(message.worker)
    del host  # No view may outlive the buffer, which the next apply donates.
    ctx.events.put(("commit", {
        "time": time.time(),
        "worker": message.worker,
        "clock": clock,
        "staleness": staleness,
        "loss": message.loss,
        "accuracy": message.accuracy,
    }))
  ctx.events.put(("server_done", {
      "time": time.time(), "num_commits": clock, "rejected_commits": rejected,
  }))
