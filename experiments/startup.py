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
  signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGNALS)
