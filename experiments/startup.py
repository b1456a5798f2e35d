"""Ctrl-C and SIGTERM while a command still loads its modules: one line, exit 130 or 143.

Loading JAX (and Ray) takes seconds before a command's `main` runs. The
command blocks both signals first (`hold_while_loading`), so an interrupt
meanwhile waits, and every thread the imports start (BLAS, XLA) inherits the
block for good: a signal to the process then always reaches the main thread,
where Python handles it, never a library's thread. When the command takes
over (`take_over`), an interrupt that came meanwhile ends it with one line,
before anything is started or written. Standard library only, so that it is
in place first.

Example:
  >>> hold_while_loading()
  >>> take_over("doctest")  # No interrupt came: Python handles them again.
  >>> signal.getsignal(signal.SIGINT) is signal.default_int_handler
  True
"""

import os
import signal
import sys
import threading
import time
from typing import Callable, Optional

EXIT_INTERRUPTED = 130  # 128 + SIGINT
EXIT_TERMINATED = 143  # 128 + SIGTERM
_SIGNALS = {signal.SIGINT, signal.SIGTERM}


def hold_while_loading() -> None:
  """Blocks Ctrl-C and SIGTERM in this (the main) thread until `take_over`."""
  signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)


def take_over(program: str, cleanup: Optional[Callable[[], None]] = None
             ) -> None:
  """Ends the program in one line (130 / 143) if an interrupt came while loading; else Python handles them from here.

  SIGINT raises KeyboardInterrupt again, SIGTERM has its default action until
  the command installs its own handler.

  Args:
    program: the command's name, for the line.
    cleanup: called before such an end, e.g. to remove a workdir the
      command created meanwhile.
  """
  pending = _SIGNALS & signal.sigpending()
  if pending:
    if cleanup is not None:
      cleanup()
    signum = signal.SIGTERM if signal.SIGTERM in pending else signal.SIGINT
    what = ("terminated (SIGTERM)" if signum == signal.SIGTERM else
            "interrupted")
    os.write(2, f"{program}: error: {what} before the run started; nothing "
                "was written\n".encode())
    os._exit(128 + signum)  # pylint: disable=protected-access
  signal.signal(signal.SIGINT, signal.default_int_handler)
  signal.signal(signal.SIGTERM, signal.SIG_DFL)
  redeliver_dropped_interrupts()
  signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGNALS)


def redeliver_dropped_interrupts() -> None:
  """Sends again a Ctrl-C (or SIGTERM) whose exception Python dropped.

  Python prints and drops an exception raised where it cannot propagate:
  in a `__del__`, or in a garbage-collection callback such as JAX's. An
  interrupt that lands there would be lost and the run would go on. The
  signal is sent again from another thread, so its handler runs afresh in
  the main thread, in whatever code runs next.
  """
  previous = sys.unraisablehook

  def hook(unraisable):
    if (unraisable.exc_type is not None and
        issubclass(unraisable.exc_type, KeyboardInterrupt)):
      # SIGTERM's interrupt is `agn_jax.errors.Terminated`.
      signum = (signal.SIGTERM if unraisable.exc_type.__name__ == "Terminated"
                else signal.SIGINT)
      # Not inside this hook: an interrupt raised here would be dropped
      # again ("Exception ignored in sys.unraisablehook"), so the signal is
      # sent only once the hook has returned, and sent again if it landed
      # here all the same.
      while True:
        try:
          _send_after_return(signum)
          return
        except KeyboardInterrupt:
          continue
    previous(unraisable)

  sys.unraisablehook = hook


def _send_after_return(signum: int) -> None:
  """Sends `signum` to this process from a thread, once the caller has gone on."""
  go = threading.Event()

  def send():
    go.wait()
    time.sleep(0.05)  # The hook's last bytecodes run first.
    os.kill(os.getpid(), signum)

  threading.Thread(target=send, daemon=True).start()
  go.set()
