"""How long the local platform's processes live.

Two rules, one place:

- A process started for the platform (a child of the supervisor, or the platform
  itself started by the test harness or the benchmarks) is sent SIGTERM by the
  kernel when the process that started it dies (:func:`terminate_with_parent`), so
  a killed parent leaves nothing behind holding ports.
- Starting a child and recording it is one step that a Ctrl-C cannot split
  (:func:`signals_held`): an interrupt that lands between the fork and the record
  would leave a process that nobody stops.
"""

from __future__ import annotations

import contextlib
import ctypes
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

_PR_SET_PDEATHSIG = 1
# The signals that stop the platform (Ctrl-C, and SIGTERM from make, ECS or a kill).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def terminate_with_parent() -> None:
    """For ``preexec_fn``, in the child before exec: SIGTERM when the parent dies
    (Linux; kept across exec). The parent is the thread that forked: start
    long-lived children from the main thread or a thread that outlives them."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


@contextlib.contextmanager
def signals_held(signums: tuple[int, ...] = STOP_SIGNALS) -> Iterator[None]:
    """Hold ``signums`` for the block: one that arrives is delivered when the block
    ends, to whichever handler was in place before it. Outside the main thread (which
    alone runs Python's signal handlers) it does nothing. Nested blocks deliver to the
    outer block, which delivers at its own end."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []

    def remember(signum: int, _frame: FrameType | None) -> None:
        arrived.append(signum)

    before: dict[int, Any] = {}
    try:
        for signum in signums:
            if signal.getsignal(signum) is not None:  # None: set outside Python
                before[signum] = signal.signal(signum, remember)
        yield
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)
        for signum in dict.fromkeys(arrived):
            signal.raise_signal(signum)
