"""The simulator's synchronous rounds: every worker's window from one center, then one step of the server on the mean of their commits.

For a synchronous strategy (`Strategy.synchronous`: sync_data_parallel,
diloco) a simulator round is one synchronous round. `RoundSchedule` times
it with the same `agn_jax.sim.clock.TimeModel` as the asynchronous
schedule: each worker's window lasts what the speed model gives it
(`TimeModel.window_seconds`), its commit's message follows
(`commit_seconds_of`), the one FIFO server takes each commit as it arrives
(`server_apply_seconds` each), and the round's step lands with the last of
them; every worker then receives the new center (`pull_seconds_of`) and
starts its next window. A round thus lasts as long as its slowest worker,
plus the messages and the server's applies; with `--cluster=none` (free
messages and server) a round of λ steps lasts λ / min_k s_k.

`build_round` is the round, jitted, with the asynchronous round's
signature (`agn_jax.sim.engine.build_round`): every worker's window
(`engine.build_windows`), then `strategies.synchronous_exchange`. A commit
is still one worker's message, so the server clock moves by n a round (by
the accepted commits), and every commit's staleness is 0.

Example:
  >>> from agn_jax.shares import Windows
  >>> from agn_jax.sim.clock import TimeModel
  >>> model = TimeModel(1.0, 0.0, 0.0, 0.0, num_workers=2,
  ...                   communication_window=3, speed_model="speeds:1,0.5")
  >>> schedule = RoundSchedule(model, Windows.fixed(2, 3, 2))
  >>> [(c.worker, c.window_end, c.applied) for c in schedule.drain()]
  [(0, 3.0, 6.0), (1, 6.0, 6.0), (0, 9.0, 12.0), (1, 12.0, 12.0)]
"""

from typing import Any, Dict, List, Optional

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from agn_jax import strategies
from agn_jax.kept import kept
from agn_jax.shares import Windows
from agn_jax.sim import engine
from agn_jax.sim.clock import TimeModel
from agn_jax.sim.schedule import EventSchedule, ScheduledCommit


def check_simulation(*, commit_order, data_assignment: str,
                     dynamic_local_updates: bool, diagnostics: bool) -> None:
  """Raises `ValueError` (one line) for a simulation setting a synchronous round cannot take.

  The config refuses the same settings first
  (`agn_jax.strategies.synchronous.fit_error`); a `Simulation` built from
  parts has only this check.
  """
  refused = [name for name, value in (
      ("commit_order", commit_order is not None),
      ("data_assignment=stream", data_assignment == "stream"),
      ("dynamic_local_updates", dynamic_local_updates),
      ("diagnostics", diagnostics)) if value]
  if refused:
    raise ValueError(f"a synchronous strategy runs every worker in lockstep "
                     f"on its own share; it takes no {refused[0]}")


class RoundSchedule:
  """The commits of n workers in synchronous rounds, in the order the server takes them.

  Args:
    model: the `TimeModel` (commit-then-pull).
    windows: every worker's windows (`agn_jax.shares.Windows`), one a
      round: the rounds are the fewest windows of a worker.

  Each round's first commit is a `barrier` (`ScheduledCommit`), so that the
  simulation's round is the synchronous round; every commit of a round is
  `applied` when the round's step lands, and ties in arrival go by worker
  index.
  """

  def __init__(self, model: TimeModel, windows: Windows):
    self.model = model
    self.windows = windows
    n = model.num_workers
    self._rounds = min(windows.count(k) for k in range(n))
    self._round = 0
    self._position = 0
    # When each worker starts the round's window: it holds the center.
    self._starts = [model.start_seconds(k) for k in range(n)]
    self._commits = self._time_round()

  def _time_round(self) -> List[ScheduledCommit]:
    """The current round's commits, in the server's order, with their times."""
    if self._round >= self._rounds:
      return []
    m, r = self.model, self._round
    arrivals = []
    for k, start in enumerate(self._starts):
      end = start + m.window_seconds(k, r, self.windows.steps(k, r))
      arrivals.append((end + m.commit_seconds_of(k), k, start, end))
    arrivals.sort()
    server_free = 0.0
    for arrival, *_ in arrivals:
      server_free = max(arrival, server_free) + m.server_apply_seconds
    return [ScheduledCommit(k, r, start, end, arrival, server_free,
                            barrier=i == 0)
            for i, (arrival, k, start, end) in enumerate(arrivals)]

  def peek(self) -> Optional[ScheduledCommit]:
    """The next commit the server takes, or None after the last round."""
    if self._position >= len(self._commits):
      return None
    return self._commits[self._position]

  def pop(self) -> Optional[ScheduledCommit]:
    """`peek()`, and the clock moves past that commit (and the round past its last)."""
    commit = self.peek()
    if commit is None:
      return None
    self._position += 1
    if self._position == len(self._commits):
      # Every worker starts the next round once the new center reaches it.
      self._starts = [commit.applied + self.model.pull_seconds_of(k)
                      for k in range(len(self._starts))]
      self._round += 1
      self._position = 0
      self._commits = self._time_round()
    return commit

  drain = EventSchedule.drain

  def state(self) -> Dict[str, Any]:
    """The clock's position, JSON-able (`restore` takes it back)."""
    return {"round": self._round, "position": self._position,
            "starts": list(self._starts)}

  def restore(self, state: Dict[str, Any]) -> None:
    """Continues from `state()`; the share (`windows`) may have grown."""
    if "round" not in state or len(state["starts"]) != len(self._starts):
      raise ValueError("the schedule's state is not of synchronous rounds "
                       f"of {len(self._starts)} workers")
    self._round = int(state["round"])
    self._starts = [float(t) for t in state["starts"]]
    self._position = 0
    self._commits = self._time_round()
    self._position = int(state["position"])


@kept
def build_round(strategy, loss_fn, *, mesh, num_workers: int,
                workers_per_call: int, keeps_pulled: bool = False,
                dynamic_local_updates: bool = False, diagnostics=None,
                step_metric: Optional[str] = "accuracy"):
  """One synchronous round, jitted, as `agn_jax.sim.engine.build_round`'s round is called.

  `round_fn(workers, center, server, indices, due, lengths, order,
  num_commits, x, y)`: every due worker's window (all of them, in a
  synchronous round), then `strategies.synchronous_exchange` on all n
  workers, the sum over them across the `workers` mesh. Its records give
  each commit (in `order`) the server clock after the round, staleness 0,
  and the clock the workers pulled (`RoundRecords.pulled_clock`).

  Args:
    strategy: a synchronous `Strategy`.
    loss_fn, mesh, num_workers, workers_per_call, step_metric: as
      `engine.build_round`'s.
    keeps_pulled, dynamic_local_updates, diagnostics: must be off
      (`check_simulation`); taken so that the simulation calls either
      builder alike.

  Returns:
    The jitted round; it returns `(workers, center, server, records)`, the
    first three donated.
  """
  if keeps_pulled or dynamic_local_updates or diagnostics is not None:
    raise ValueError("a synchronous round keeps no pulled center, runs "
                     "windows of λ and measures no commit one by one")
  windows = engine.build_windows(strategy, loss_fn, workers_per_call, False,
                                 step_metric)
  sharded = mesh.size > 1

  def total(tree):
    summed = jax.tree.map(lambda a: jnp.sum(a, axis=0), tree)
    return jax.lax.psum(summed, engine.AXIS) if sharded else summed

  def round_fn(workers, center, server, indices, due, lengths, order,
               num_commits, x, y):
    workers, loss, means, steps = windows(workers, indices, due, lengths,
                                          x, y)
    pulled_clock = server.clock
    ex = strategies.synchronous_exchange(strategy, workers.state(strategy),
                                         center, server, total)
    accepted = ex.accepted
    if sharded:
      loss, means, steps, accepted = engine.gather_workers(
          (loss, means, steps, accepted))
    state = ex.state
    workers = engine.Workers(
        state.params, state.opt_state, None,
        jnp.full_like(workers.clock, ex.server_state.clock),
        getattr(state, "residual", None))
    used = jnp.arange(order.shape[0]) < num_commits

    def by_commit(value):
      return jnp.where(used, value, jnp.zeros_like(value))

    records = engine.RoundRecords(
        clock=by_commit(jnp.full(order.shape, ex.server_state.clock)),
        staleness=jnp.zeros(order.shape, jnp.int32), loss=loss,
        metrics=means, rejected=used & ~accepted[order], step_metrics=steps,
        pulled_clock=by_commit(jnp.full(order.shape, pulled_clock)))
    return workers, ex.center, ex.server_state, records

  if sharded:
    round_fn = jax.shard_map(
        round_fn, mesh=mesh,
        in_specs=(P(engine.AXIS), P(), P(), P(engine.AXIS), P(engine.AXIS),
                  P(engine.AXIS), P(), P(), P(), P()),
        out_specs=(P(engine.AXIS), P(), P(), P()),
        # The center is the same psum on every device: replicated by
        # construction.
        check_vma=False)
  return jax.jit(round_fn, donate_argnums=(0, 1, 2))
