"""A process's init (a Lambda cold start, a worker's start) with Python's cyclic
collector held off.

What an init makes (imported modules, the wired app, a loaded model) lives as long
as the process, and the collector traverses all of it again and again on the way if
it runs: ~40 ms of the router's ~450 ms cold start (~140,000 objects, ~200
collections), ~0.8 s of a worker's ~4.5 s start with its model's libraries
(~450,000 objects, ~1,100 collections). Inside :func:`init_phase` it does not run; at
its end what the init made is frozen (no later collection traverses it, so none
pauses a request to do so) and the collector is on again. What the init left as
garbage stays frozen with the rest (~0.7 MiB in the router, ~8 MiB in a worker).

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
