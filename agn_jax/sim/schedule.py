"""The simulator's schedule: the commits of n workers and one FIFO server, in the order it applies them.

`EventSchedule` gives them from a time model (`agn_jax.sim.clock.TimeModel`),
with their times; `ReplaySchedule` replays a given commit order. Pure numpy:
the engine runs the numerics in the order these give. A commit is a
`ScheduledCommit` as the clock sees it and a `Handled` as the server saw
it, once the simulation has applied it.

Example:
  >>> from agn_jax.sim.clock import TimeModel
  >>> model = TimeModel(step_seconds=0.1, commit_seconds=0.05,
  ...                   pull_seconds=0.05, server_apply_seconds=0.01,
  ...                   num_workers=2, communication_window=10)
  >>> schedule = EventSchedule(model, num_windows=2)
  >>> [(c.worker, round(c.applied, 2)) for c in schedule.drain()]
  [(0, 1.06), (1, 1.07), (0, 2.17), (1, 2.18)]
"""

import heapq
from typing import (Any, Dict, Iterator, List, NamedTuple, Optional, Sequence,
                    Tuple)

import numpy as np

from agn_jax.shares import Windows
from agn_jax.sim.clock import TimeModel
from agn_jax.sim.speeds import SPEED_MODEL_FORMS
from agn_jax.wire import CommitMeta


class ScheduledCommit(NamedTuple):
  """One commit as the clock sees it.

  Attributes:
    worker: the committing worker.
    window: its window index over its share (from 0).
    window_start: when the window's first step began.
    window_end: when its last step was done.
    arrival: when the commit reached the server.
    applied: when the server had applied it: the commit's time.
    barrier: a replayed round begins here (see `ReplaySchedule`).
  """
  worker: int
  window: int
  window_start: float
  window_end: float
  arrival: float
  applied: float
  barrier: bool = False


class Handled(NamedTuple):
  """One commit as the server handled it, in the simulation.

  Attributes:
    meta: the commit's `agn_jax.wire.CommitMeta`, as a process worker would
      have sent it, its times on the time model's clock (modeled seconds;
      local steps of a speed-1 worker for the `none` cluster):
      `meta.window_start` when the window's first step began, `meta.time`
      when its last step was done (its i-th step, from 0, ends at
      `window_start + (i + 1) (time − window_start) / λ`; the commit's
      message and the server's queue come after it); `meta.clock` the clock
      of the center the worker last pulled; `meta.local_updates` the
      window's local steps (λ, or with Dynamic Local Updates the worker's
      λ_k, or fewer in the last window of its share).
    clock: the server clock after the commit (unchanged if rejected).
    staleness: server clock at the apply − `meta.clock` (as the process
      server counts it; for a rejected commit, what it would have been).
    rejected: the payload had a non-finite number and was not applied.
    simulated_time: when the server had applied it, on the same clock.
    round: the round it was applied in (from 0).
    window: the worker's window index over its whole share (from 0).
    window_round: the round the window ran in (the commit's own or earlier).
    instruments: with diagnostics, an applied commit's instruments,
      `{name: float}` (`agn_jax.instruments.SCALARS`, and `gradient_cosine`
      at every k-th commit; NaN where a cosine has no value); else None.
  """
  meta: CommitMeta
  clock: int
  staleness: int
  rejected: bool
  simulated_time: float
  round: int
  window: int = 0
  window_round: int = 0
  instruments: Optional[Dict[str, float]] = None


class EventSchedule:
  """The commits of n workers and one FIFO server, in the order the server applies them.

  Args:
    model: the `TimeModel`.
    num_windows: windows in each worker's share, λ local steps each; or an
      `agn_jax.shares.Windows` that gives each worker's count and each
      window's steps (Dynamic Local Updates).

  Ties (commits that arrive at the same time) go by worker index. Every
  worker starts at time 0, or when the replayed run's did
  (`TimeModel.start_seconds`).

  Example:
    >>> model = TimeModel(1.0, 0.0, 0.0, 0.0, num_workers=3,
    ...                   communication_window=2)
    >>> [c.worker for c in EventSchedule(model, num_windows=2).drain()]
    [0, 1, 2, 0, 1, 2]
  """

  def __init__(self, model: TimeModel, num_windows, tickets=None):
    self.model = model
    n = model.num_workers
    self.windows = _windows(num_windows, model.communication_window, n)
    # `data_assignment=stream`: no worker has a share of its own; each takes
    # the stream's next steps (an `agn_jax.shares.Tickets`) when it starts a
    # window, its first at the start and each next one with the center its
    # commit's reply carries, so a fast worker takes more.
    self.tickets = tickets
    self._assigned: List[List[Tuple[int, int]]] = [[] for _ in range(n)]
    if tickets is not None:
      for k in range(n):
        self._give(k)
    self._ready = [model.start_seconds(k) for k in range(n)]
    self._next_window = [0] * n
    self._server_free = 0.0
    self._build_heap()

  def _give(self, worker: int) -> None:
    ticket = self.tickets.take(self.windows.local_updates[worker])
    if ticket is not None:
      self._assigned[worker].append(ticket)

  def window_count(self, worker: int) -> int:
    """Windows of `worker`: its share's, or on a stream the tickets it took so far."""
    if self.tickets is None:
      return self.windows.count(worker)
    return len(self._assigned[worker])

  def window_steps(self, worker: int, window: int) -> int:
    """Local steps of `worker`'s window `window` (from 0)."""
    if self.tickets is None:
      return self.windows.steps(worker, window)
    return self._assigned[worker][window][1]

  def steps_before(self, worker: int, window: int) -> int:
    """Local steps of `worker`'s first `window` windows."""
    if self.tickets is None:
      return self.windows.steps_before(worker, window)
    return sum(steps for _, steps in self._assigned[worker][:window])

  def ticket(self, worker: int, window: int) -> Tuple[int, int]:
    """`(start_step, steps)` of the stream that `worker`'s window `window` trains on."""
    return self._assigned[worker][window]

  def _arrival(self, worker: int):
    m = self.model
    start = self._ready[worker]
    window = self._next_window[worker]
    end = start + m.window_seconds(worker, window,
                                   self.window_steps(worker, window))
    arrival = end + m.commit_seconds_of(worker) + (
        m.pull_seconds_of(worker) if m.pull_before_commit else 0.0)
    return arrival, worker, start, end

  def _build_heap(self):
    self._heap = [self._arrival(k) for k in range(self.model.num_workers)
                  if self._next_window[k] < self.window_count(k)]
    heapq.heapify(self._heap)

  def peek(self) -> Optional[ScheduledCommit]:
    """The next commit the server applies, or None once every share is done."""
    if not self._heap:
      return None
    arrival, worker, start, end = self._heap[0]
    applied = max(arrival, self._server_free) + self.model.server_apply_seconds
    return ScheduledCommit(worker, self._next_window[worker], start, end,
                           arrival, applied)

  def pop(self) -> Optional[ScheduledCommit]:
    """`peek()`, and the clock moves past that commit."""
    commit = self.peek()
    if commit is None:
      return None
    heapq.heappop(self._heap)
    k = commit.worker
    self._server_free = commit.applied
    # A pull-before-commit worker goes on once its commit is sent (or, on a
    # server that answers its pulls itself, once the server has handled
    # it); the others once the center their commit's reply carries has
    # arrived.
    if self.model.pull_before_commit:
      self._ready[k] = (commit.applied if self.model.pull_waits_for_server
                        else commit.arrival)
    else:
      self._ready[k] = commit.applied + self.model.pull_seconds_of(k)
    self._next_window[k] += 1
    if self.tickets is not None:
      self._give(k)
    if self._next_window[k] < self.window_count(k):
      heapq.heappush(self._heap, self._arrival(k))
    return commit

  def drain(self) -> Iterator[ScheduledCommit]:
    """Pops every remaining commit, in order."""
    while True:
      commit = self.pop()
      if commit is None:
        return
      yield commit

  def state(self) -> Dict[str, Any]:
    """The clock's position, JSON-able (`restore` takes it back)."""
    out = {"ready": list(self._ready), "next_window": list(self._next_window),
           "server_free": self._server_free}
    if self.tickets is not None:
      out["tickets"] = [[list(t) for t in mine] for mine in self._assigned]
      out["tickets_taken"] = self.tickets.taken
    return out

  def restore(self, state: Dict[str, Any]) -> None:
    """Continues from `state()`; the share (`windows`) may have grown."""
    n = self.model.num_workers
    if len(state["ready"]) != n or len(state["next_window"]) != n:
      raise ValueError(f"the schedule's state is of {len(state['ready'])} "
                       f"workers, this one has {n}")
    self._ready = [float(t) for t in state["ready"]]
    self._next_window = [int(w) for w in state["next_window"]]
    self._server_free = float(state["server_free"])
    if self.tickets is not None:
      if "tickets" not in state:
        raise ValueError("the schedule's state has no stream tickets: it is "
                         "of a run with another data assignment")
      self._assigned = [[(int(a), int(b)) for a, b in mine]
                        for mine in state["tickets"]]
      self.tickets.taken = int(state["tickets_taken"])
      # A worker without a ticket found the stream spent when it asked; a
      # resume with more epochs has more to hand out: the next steps go to
      # those workers in the order they asked (when each was ready).
      idle = [k for k in range(n)
              if self._next_window[k] >= len(self._assigned[k])]
      for k in sorted(idle, key=lambda k: (self._ready[k], k)):
        self._give(k)
    self._build_heap()


class ReplaySchedule:
  """A given commit order (tests, references): times count commits.

  Args:
    order: a flat sequence of worker indices, or a sequence of rounds (each
      a sequence of distinct workers, applied in one call of the simulator).
    num_workers: n.
    num_windows: windows in each worker's share, or an
      `agn_jax.shares.Windows` (as `EventSchedule` takes it).

  The j-th commit (from 0) happens at j + 1; its window began at its
  worker's previous commit (0 for the first).

  Raises:
    ValueError: a round with a repeated worker, an unknown worker, or more
      commits of a worker than its share holds.

  Example:
    >>> s = ReplaySchedule([[0, 1], [1]], num_workers=2, num_windows=2)
    >>> [(c.worker, c.applied, c.barrier) for c in s.drain()]
    [(0, 1.0, True), (1, 2.0, False), (1, 3.0, True)]
  """

  def __init__(self, order, num_workers: int, num_windows):
    windows = _windows(num_windows, 1, num_workers)
    if isinstance(order, str):
      raise ValueError(f"commit_order must be a sequence of workers or of "
                       f"rounds, got {order!r} (the clock's orders are speed "
                       f"models: {', '.join(SPEED_MODEL_FORMS)})")
    order = list(order)
    nested = bool(order) and not isinstance(order[0], (int, np.integer))
    rounds = ([[int(k) for k in r] for r in order] if nested else
              [[int(k)] for k in order])
    counts = [0] * num_workers
    for r in rounds:
      if nested and (not r or len(set(r)) != len(r)):
        raise ValueError(f"commit_order: every round needs distinct workers, "
                         f"got {r}")
      for k in r:
        if not 0 <= k < num_workers:
          raise ValueError(f"commit_order: worker {k} is not in [0, "
                           f"{num_workers})")
        counts[k] += 1
    over = [k for k in range(num_workers) if counts[k] > windows.count(k)]
    if over:
      raise ValueError(f"commit_order: worker {over[0]} commits "
                       f"{counts[over[0]]} times, but its share holds "
                       f"{windows.count(over[0])} windows")
    self.rounds = rounds
    self.nested = nested
    self.num_windows = num_windows
    self._flat = [(k, nested and i == 0) for r in rounds
                  for i, k in enumerate(r)]
    self._position = 0
    self._last = [0.0] * num_workers
    self._windows = [0] * num_workers

  def peek(self) -> Optional[ScheduledCommit]:
    if self._position >= len(self._flat):
      return None
    k, barrier = self._flat[self._position]
    time = float(self._position + 1)
    return ScheduledCommit(k, self._windows[k], self._last[k], time, time,
                           time, barrier)

  def pop(self) -> Optional[ScheduledCommit]:
    commit = self.peek()
    if commit is not None:
      self._position += 1
      self._last[commit.worker] = commit.applied
      self._windows[commit.worker] += 1
    return commit

  drain = EventSchedule.drain

  def state(self) -> Dict[str, Any]:
    return {"position": self._position}

  def restore(self, state: Dict[str, Any]) -> None:
    target = int(state["position"])
    self.__init__([r for r in self.rounds] if self.nested else
                  [r[0] for r in self.rounds], len(self._last),
                  self.num_windows)
    while self._position < target:
      self.pop()

  def describe(self) -> Dict[str, Any]:
    return {"cluster": "replay", "unit": "commits",
            "rounds": [list(r) for r in self.rounds]}


def _windows(num_windows, communication_window: int,
             num_workers: int) -> Windows:
  """`num_windows` as `Windows`: itself, or that many windows of λ for each worker."""
  if isinstance(num_windows, Windows):
    if len(num_windows.local_updates) != num_workers:
      raise ValueError(f"windows of {len(num_windows.local_updates)} workers "
                       f"for {num_workers}")
    return num_windows
  return Windows.fixed(num_windows, communication_window, num_workers)


def staleness_of(commits: Sequence[ScheduledCommit], num_workers: int,
                 pull_before_commit: bool = False) -> List[int]:
  """Each commit's staleness: server clock at its apply − clock of the center it started from.

  What the simulator's server counts, from the order alone (every commit
  applied).

  Example:
    >>> model = TimeModel(1.0, 0.0, 0.0, 0.0, num_workers=3,
    ...                   communication_window=2)
    >>> staleness_of(list(EventSchedule(model, 3).drain()), 3)
    [0, 1, 2, 2, 2, 2, 2, 2, 2]
  """
  pulled = [0] * num_workers
  out = []
  for clock, c in enumerate(commits):
    out.append(0 if pull_before_commit else clock - pulled[c.worker])
    pulled[c.worker] = clock + 1
  return out


def server_bound_share(commits: Sequence[ScheduledCommit],
                       apply_seconds: float) -> float:
  """The fraction of consecutive commits applied exactly one apply apart: the server busy back to back.

  A FIFO server that starts the next apply the moment one ends is the
  bottleneck there; a gap longer than the apply means it waited for an
  arrival. 0 for fewer than two commits.

  Example:
    >>> model = TimeModel(1.0, 0.0, 0.0, 0.5, num_workers=3,
    ...                   communication_window=1)
    >>> server_bound_share(list(EventSchedule(model, 2).drain()), 0.5)
    1.0
  """
  gaps = np.diff([c.applied for c in commits])
  if not len(gaps):
    return 0.0
  return float(np.mean(np.isclose(gaps, apply_seconds, rtol=1e-9,
                                  atol=1e-9)))
