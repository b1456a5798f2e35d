"""The simulated backend: n asynchronous workers in one deterministic program (`agn_jax.sim.simulation`).

This module only drives the engine round by round and hands what happens to
the shared books, as events like the processes backend's: commits, rejected
commits, evaluations of the center every `eval_every_rounds` rounds (and
after every `eval_every_commits`-th commit, where a round then ends),
checkpoints every `checkpoint_every_seconds` of wall time (and at the end
unless `--nocheckpoint_at_end`, or on Ctrl-C / SIGTERM, between two rounds),
each worker's end, the server's end. Rows carry `sim_time` on the time
model's clock (modeled seconds of `--cluster`, or local steps of a speed-1
worker for `--cluster=none`; see `agn_jax.sim.clock`) beside the wall-time
fields, and a commit row its window's `sim_window_start` and
`sim_window_end` on that clock.

The same flags and seed give the same metrics.jsonl apart from the wall-time
fields (`time`, `wall_time`, a checkpoint's `seconds`), provided checkpoints
are taken only at the end (`checkpoint_every_seconds <= 0`): a periodic
checkpoint's row lands wherever the wall clock puts it.
"""

import os
import resource
import signal
import threading
import time
from typing import Optional

import numpy as np

from agn_jax.errors import (CheckpointError, Diverged, RunError, Terminated,
                            resume_error)
from agn_jax.runtime import backend as backend_lib
from agn_jax.runtime import events as ev


class _DeferredSignals:
  """Ctrl-C and SIGTERM take effect between rounds, where the books and the state agree."""

  def __init__(self):
    self.received = None
    self._saved = {}

  def __enter__(self):
    if threading.current_thread() is threading.main_thread():
      for signum in (signal.SIGINT, signal.SIGTERM):
        self._saved[signum] = signal.signal(signum, self._note)
    return self

  def _note(self, signum, frame):
    del frame
    if self.received is not None:  # A second one: stop waiting.
      self.raise_received()
    self.received = signum

  def raise_received(self):
    signum, self.received = self.received, None
    if signum == signal.SIGTERM:
      raise Terminated(f"received signal {signum}")
    raise KeyboardInterrupt()

  def __exit__(self, exc_type, *exc):
    for signum, handler in self._saved.items():
      signal.signal(signum, handler)
    self._saved = {}
    # One that came after the last round (while the run finished) is not
    # lost: the run is complete and its books written, and the caller stops.
    if exc_type is None and self.received is not None:
      self.raise_received()


class SimulatedBackend(backend_lib.Backend):
  """The workers vmapped in one jitted program per round, sharded over this host's devices.

  Its settings: `agn_jax.config.SimulatedOptions`, the time model's and
  the engine's.
  """

  name = "simulated"

  def __init__(self, config, book, faults=None):
    del faults  # No worker loop runs here: nothing to inject a fault into.
    super().__init__(config, book)
    self.sim = None
    self.x_test = self.y_test = None
    self.checkpointer = None
    self.saved_step = None  # A restored checkpoint's step.
    self.stopped = False
    self.finished = False
    # Wall-clock bounds of the rounds whose windows still await a commit.
    self._round_walls = {}

  def prepare(self, dataset=None):
    # pylint: disable=g-import-not-at-top
    from agn_jax.sim import engine
    from agn_jax.sim.simulation import Simulation
    config, book = self.config, self.book
    plan = backend_lib.plan(config, dataset)
    cluster = None
    if config.options.cluster == "this_host":
      from agn_jax.runtime.backends import calibration  # pylint: disable=g-import-not-at-top
      cluster = calibration.this_host(config, plan.dataset.input_shape,
                                      plan.dataset.num_classes)
    mesh = None
    if config.platform:
      import jax  # pylint: disable=g-import-not-at-top
      try:
        devices = jax.local_devices(backend=config.platform)
      except RuntimeError:
        raise ValueError(f"--platform={config.platform}: JAX finds no such "
                         f"device on this host") from None
      mesh = engine.default_mesh(config.num_workers, devices)
    self.sim = Simulation.from_config(config, plan.dataset, cluster=cluster,
                                      mesh=mesh)
    # The plan's n × windows, or more with Dynamic Local Updates (shorter
    # windows over the same share); on a stream with them, the samples.
    book.expected_commits = self.sim.expected_commits
    if book.expected_commits is None:
      book.expected_samples = (config.num_workers *
                               self.sim.windows.share_steps *
                               config.batch_size)
    self.layout = plan.layout
    self.x_test, self.y_test = plan.dataset.x_test, plan.dataset.y_test
    info = self.sim.info
    book.extra_summary["simulation"] = info
    book.extra_summary["platform"] = info.get("platform")
    if config.resume:
      self._restore()
    else:
      book.open()

  def _checkpoint_dir(self):
    return os.path.join(self.config.workdir, "checkpoints")

  def _restore(self):
    from agn_jax import checkpoint
    try:
      ckpt = checkpoint.restore(self._checkpoint_dir())
      if ckpt.damaged:  # Not the one whose metadata was checked at the start.
        checkpoint.validate_meta(ckpt.meta, ckpt.step,
                                 where=f"checkpoint {ckpt.step}",
                                 center_size=int(ckpt.center.size))
    except CheckpointError as e:  # As the processes' server reports it.
      raise resume_error(self.config.workdir, str(e)) from None
    state = ckpt.meta.get("simulation")
    if not isinstance(state, dict):
      raise resume_error(self.config.workdir, "its checkpoint is not a "
                         "simulated run's (resume it with its own --backend)")
    try:
      self.sim.restore({"arrays": ckpt.server_leaves, "meta": state})
    except (ValueError, KeyError, TypeError) as e:
      raise resume_error(self.config.workdir, str(e)) from None
    self.saved_step = ckpt.step
    # From here the run goes on from `ckpt`: newer damaged ones step aside.
    checkpoint.set_aside_damaged(self._checkpoint_dir(), ckpt)
    checkpoint.tell(ckpt.notes())
    self.book.handle(ev.Restored(ckpt.step, ckpt.meta.get("metrics_offset"),
                                 int(ckpt.meta.get("rejected_commits", 0)),
                                 list(ckpt.meta["worker_commits"]),
                                 ckpt.meta.get("traffic"),
                                 ckpt.meta.get("wall_seconds"), ckpt.notes()))
    self.book.open(ckpt.meta.get("metrics_offset"))

  # The run.

  def run(self):
    from agn_jax import checkpoint
    config, book, sim = self.config, self.book, self.sim
    self.checkpointer = checkpoint.Checkpointer(self._checkpoint_dir(),
                                                self.saved_step)
    book.timeline["built"] = time.time()
    book.start_training()
    with _DeferredSignals() as signals:
      self._evaluate(final=False)
      period = config.checkpoint_every_seconds
      saved_at = time.monotonic()
      rounds, every = 0, config.options.eval_every_rounds
      per_commits = config.options.eval_every_commits
      while not sim.done:
        if config.max_seconds and time.time() - book.t0 >= config.max_seconds:
          break  # As the processes' stop: the workers' shares end here.
        # With --eval_every_commits the round ends at the next such commit.
        cap = per_commits - sim.num_commits % per_commits if per_commits else None
        self._book_round(*self._round(cap))
        rounds += 1
        if ((every and rounds % every == 0) or
            (per_commits and sim.num_commits % per_commits == 0)):
          self._evaluate(final=False)
        # The final checkpoint follows the last round at once.
        if (period and period > 0 and not sim.done and
            time.monotonic() - saved_at >= period):
          self._save(final=False)
          saved_at = time.monotonic()
        if signals.received is not None:
          signals.raise_received()
      self._finish(save=config.checkpoint_at_end)

  def _round(self, max_commits=None):
    """`(records, when the round began)`; the round ends after `max_commits` commits at most."""
    started = time.time()
    try:
      return self.sim.run_round(max_commits), started
    except Diverged as e:  # Its message names the worker.
      self._book_round(e.records, started)
      raise RunError(str(e)) from None

  def _book_round(self, records, started):
    sim = self.sim
    now = time.time()
    round_index = records[0].round if records else None
    self._round_walls[round_index] = (started, now)
    for r in records:
      sim_time = float(r.simulated_time)
      if r.rejected:
        self.book.handle(ev.Rejected(now, r.meta.worker, r.clock, sim_time))
      else:
        # The window ran during its round, this one or an earlier one: its
        # wall times are the round's; its modeled ones are the meta's.
        ran = self._round_walls.get(r.window_round, (started, now))
        meta = r.meta._replace(
            window_start=ran[0], time=ran[1],
            local_updates=(r.meta.local_updates
                           if sim.dynamic_local_updates else 0))
        self.book.handle(ev.Committed(
            now, meta, r.clock, r.staleness, sim_time,
            sim_window_start=float(r.meta.window_start),
            sim_window_end=float(r.meta.time), instruments=r.instruments))
    # Only the rounds whose windows still await their commits are kept.
    oldest = self.sim.oldest_waiting_round
    for key in [k for k in self._round_walls
                if oldest is None or k is None or k < oldest]:
      del self._round_walls[key]

  def _sim_time(self) -> float:
    return float(self.sim.simulated_time)

  def _evaluate(self, final: bool):
    loss, metrics = self.sim.evaluate(self.x_test, self.y_test)
    self.book.handle(ev.Evaluated(time.time(), self.sim.clock, loss, metrics,
                                  final, self._sim_time()))

  def _save(self, final: bool):
    if not self.config.checkpoints:
      return
    seconds = self.checkpointer.save_once(self.sim.clock, self._contents,
                                          final)
    if seconds is not None:
      self.book.handle(ev.CheckpointSaved(time.time(), self.sim.clock, final,
                                          seconds))

  def _contents(self):
    """The checkpoint of the simulation now: `(center, leaves, meta)`."""
    import jax
    from agn_jax import checkpoint
    sim = self.sim
    state = sim.state()
    meta = state["meta"]
    book_meta = checkpoint.Meta.now(
        num_commits=sim.clock, rejected_commits=meta["rejected_commits"],
        worker_commits=list(meta["windows_done"]),
        config=self.config.to_dict(), layout=self.layout,
        metrics_offset=self.book.metrics_position(),
        wall_seconds=self.book.wall_seconds(),
        worker_steps=([sim.steps_done(k) for k in range(sim.num_workers)]
                      if sim.dynamic_local_updates or
                      self.config.data_assignment == "stream" else None),
        simulation=meta,
        traffic=self._traffic()).to_json()
    return sim.center(), jax.tree.leaves(state["arrays"]), book_meta

  def _traffic(self):
    """Each worker's bytes so far, the restored checkpoint's included (`checkpoint.Meta.traffic`, as the books hold it)."""
    from agn_jax import checkpoint
    n = self.sim.num_workers
    restored = self.book.restored
    base = (restored.traffic if restored and restored.traffic is not None
            else {key: [0] * n for key in checkpoint.TRAFFIC})
    return {key: [int(base[key][k]) + self.sim.traffic(k)[key]
                  for k in range(n)] for key in checkpoint.TRAFFIC}

  def _finish(self, save: bool = True):
    """The end of the shares (or of the time): as the processes' workers, server and evaluator end.

    Args:
      save: whether to write the final checkpoint (always on Ctrl-C or
        SIGTERM, through `wind_down`).
    """
    if self.finished:
      return
    self.finished = True
    config, sim = self.config, self.sim
    meta = sim.state()["meta"]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    self.book.extra_summary["peak_rss_mb"] = peak
    if sim.strategy.synchronous:  # Each round applied its commits together.
      self.book.extra_summary["simulation"]["rounds"] = meta["round"]
    for k, windows in enumerate(meta["windows_done"]):
      self.book.handle(ev.WorkerDone(
          k, windows, sim.steps_done(k) * config.batch_size, sim.traffic(k)))
    if save:
      self._save(final=True)
    self.book.handle(ev.ServerDone(time.time(), sim.clock,
                                   meta["rejected_commits"],
                                   list(meta["windows_done"])))
    self._evaluate(final=True)

  def wind_down(self, seconds):
    del seconds  # Between rounds everything is consistent at once.
    if self.sim is not None and self.book.owns_files and self.checkpointer:
      self._finish()

  def final_center(self) -> Optional[np.ndarray]:
    return self.sim.center()

  def shutdown(self):
    if self.checkpointer is not None:
      self.checkpointer.close()
      self.checkpointer = None
