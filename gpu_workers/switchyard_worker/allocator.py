"""The C allocator's settings for a process that runs a model on the CPU.

glibc's malloc serves a large block (above a threshold that starts at 128 KiB and
follows the largest block freed, up to 32 MiB) with a fresh ``mmap`` and unmaps it
when it is freed, and gives the heap's free top back to the kernel once it exceeds
twice that threshold. A model's activations are such blocks, made and freed at every
call, so every batch faults its memory in again, page by page, each page zeroed by
the kernel: minilm-embed on this machine's two cores, a batch of 32, faulted
4,000-9,000 pages (16-36 MiB) a batch and spent 8-17 ms of system time on it
(~5 % of the batch's CPU).

With the thresholds fixed (blocks up to 32 MiB from the heap, the heap's top kept
up to 64 MiB), freed activations are reused by the next batch: 0-25 faults a batch,
0.5 ms of system time, 4-11 % more inputs a second from the model alone (five 2 s
windows a setting, three settings alternated), for ~20 MiB more resident memory.
Blocks above 32 MiB (a large batch's activations) are still mapped and unmapped
each time. Standard library only; where the C library has no ``mallopt`` or refuses
it (musl, macOS), nothing changes and the ready line says so.
"""

from __future__ import annotations

import ctypes
from typing import Any

# mallopt's parameters (malloc.h); setting either threshold also stops glibc moving
# them with the blocks freed.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD = 32 << 20  # glibc's upper limit on 64-bit hosts
TRIM_THRESHOLD = 64 << 20

_applied: dict[str, Any] = {"tuned": False}


def tune_for_inference() -> dict[str, Any]:
    """Keep a model's freed activations for its next call (see the module's
    docstring). Idempotent; returns what was set, for the worker's ready line."""
    if _applied["tuned"]:
        return dict(_applied)
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library this interpreter runs on
    except (OSError, AttributeError):
        return {"tuned": False, "reason": "no mallopt"}
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    if mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) != 1 or (
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) != 1
    ):
        return {"tuned": False, "reason": "mallopt refused"}
    _applied.update(tuned=True, mmap_threshold=MMAP_THRESHOLD, trim_threshold=TRIM_THRESHOLD)
    return dict(_applied)
