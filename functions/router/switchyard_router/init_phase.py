"""The router's init (a Lambda cold start) with Python's cyclic collector held off.

The imports and the wired app make ~140,000 objects that live as long as the
instance, and the collector traverses them ~200 times on the way if it runs: ~40 ms
of a ~450 ms cold start. Inside :func:`init_phase` it does not run; at its end what
the init made is frozen (no later collection traverses it, so none pauses a warm
request to do so) and the collector is on again. What the init left as garbage stays
frozen with the rest (~0.7 MiB).

Standard library only: it is imported before everything it holds the collector for.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def init_phase() -> Iterator[None]:
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()
