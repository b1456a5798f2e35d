"""The parts of a run as threads of one process, under the shared supervisor (tests).

`InProcessBackend` runs the real server, worker and evaluator loops on
threads over `agn_jax.runtime.transports.inprocess`, so a test drives them
in seconds without spawning a process. It is no choice of `train()`: threads
of one interpreter share its GIL and cannot be killed.
"""

import queue
import threading
import time
from typing import Dict, List

from agn_jax.runtime import backend as backend_lib
from agn_jax.runtime.transports.inprocess import (InMemoryData,
                                                  InProcessEvents,
                                                  InProcessReplies,
                                                  InProcessSwitches,
                                                  InProcessTransport)


class InProcessBackend(backend_lib.ServerBackend):
  """The server, the workers and the evaluator as threads of this process, under the shared supervisor.

  For tests of the loops and of the supervision; a part that fails is
  started again as with any backend, but a thread cannot be killed, so a
  `context.Fault` of kind `exit` (which ends the process) has no place
  here.

  Example:
    >>> from agn_jax.config import ProcessesOptions, TrainConfig
    >>> from agn_jax.runtime.bookkeeping import RunBook
    >>> config = TrainConfig(num_workers=2, epochs=1.0,
    ...                      workdir="/tmp/agn_inprocess_doc",
    ...                      options=ProcessesOptions(cache_dir="")).resolved()
    >>> run = InProcessBackend(config, RunBook(config, None, "inprocess"))  # doctest: +SKIP
    >>> run.prepare(); run.run(); run.shutdown()  # doctest: +SKIP
  """

  name = "inprocess"
  poll_seconds = 0.02

  def _set_up(self, plan, slots, dataset):
    del dataset  # The plan's arrays are shared by reference.
    self.transport = InProcessTransport(plan.layout.num_params,
                                        plan.payload_size,
                                        self.config.num_workers, slots,
                                        wire=plan.wire)
    self.switches = InProcessSwitches()
    self.inbox = queue.Queue()
    self.events = InProcessEvents(self.inbox)
    self.replies = InProcessReplies()
    self.data = InMemoryData(backend_lib.dataset_arrays(plan.dataset))
    self.threads: Dict[str, threading.Thread] = {}
    self.results: Dict[str, bool] = {}
    self.ended: List[str] = []
    self.changed = threading.Event()  # An event was put or a part ended.

  def _launch(self, role):
    incarnation = self.incarnations.get(backend_lib.worker_of(role), 0)

    def part():
      try:
        self.results[role] = backend_lib.run_part(
            self.ctx, role, self.replies, self.config.resume, incarnation)
      finally:
        self.ended.append(role)
        self.changed.set()

    self.results.pop(role, None)
    self.threads[role] = threading.Thread(target=part, name=f"agn-{role}",
                                          daemon=True)
    self.threads[role].start()

  def _wait(self, timeout):
    if not self.ended and self.inbox.empty():
      self.changed.wait(timeout)
    self.changed.clear()
    return list(self.ended)

  def _exit_cause(self, role):
    self.threads[role].join()
    self.ended.remove(role)
    ok = self.results.get(role, False)
    return ok, "ended early" if ok else "failed"

  def _take_events(self):
    while True:
      try:
        yield self.inbox.get_nowait()
      except queue.Empty:
        return

  def _reply(self, answer):
    self.replies.answers.put(answer)

  def _pid(self, role):
    return None

  def _end_parts(self):
    deadline = time.monotonic() + backend_lib.GRACE_SECONDS
    for thread in self.threads.values():
      thread.join(max(0.0, deadline - time.monotonic()))
