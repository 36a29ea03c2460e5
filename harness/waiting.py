"""Waiting in tests and in the bench for something another thread or process does."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(
    check: Callable[[], Any],
    timeout_s: float = 120,
    every_s: float = 0.5,
    what: str = "the condition waited for",
) -> Any:
    """``check()``'s first truthy value, polled every ``every_s``; raises
    ``TimeoutError`` naming ``what`` if none comes within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what}: not within {timeout_s:.0f} s")
        time.sleep(every_s)
