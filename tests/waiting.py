"""Waiting in tests for something another thread or process does."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(check: Callable[[], Any], timeout_s: float = 120, every_s: float = 0.5) -> Any:
    """``check()``'s first truthy value, polled every ``every_s``; the test fails if
    none comes within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, "gave up waiting"
        time.sleep(every_s)
