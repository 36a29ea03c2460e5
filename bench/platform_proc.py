"""The local platform as the benchmarks run it, on the tests' harness
(``harness.local_platform``: started as real processes, ready at its READY line,
stopped as Ctrl-C stops it).

What is the bench's own: ``switchyard up`` itself (not through make), a temporary
run folder removed afterwards, a copy of the manifest edited per section, offline
models, a warm worker per model and no standby.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harness.local_platform import (
    LOCAL_CREDENTIALS,
    READY_TIMEOUT_S,
    ROOT,
    RunningPlatform,
    edit_manifest,
    set_everywhere,
    start,
)

SWITCHYARD_UP = (sys.executable, "-m", "switchyard_cli", "up")


@contextmanager
def local_platform(
    keep_models: set[str] | None = None,
    settings: dict[str, dict[str, Any]] | None = None,
    ready_timeout: float = READY_TIMEOUT_S,
    stage_scaling: dict[str, int] | None = None,
    result_cache: bool = False,
    env: Mapping[str, str] | None = None,
) -> Iterator[RunningPlatform]:
    """A running local platform with ``keep_models`` and per-model ``settings``
    (``edit_manifest``); stopped (and its run folder removed) on exit.
    ``stage_scaling`` sets scaling settings wherever they stand (``set_everywhere``:
    every stage's ``[stages.<stage>.scaling]``, and a model's own where it has one).
    The result cache is off unless ``result_cache``: the sections measure the queue
    path and the model, and their workloads repeat inputs (the cache is measured in
    ``bench/aws_calls.py``). ``env`` adds to or overrides the environment of
    `switchyard up` (``SWITCHYARD_GENERATION_PYTHON``: the generation engine)."""
    source = (ROOT / "manifest.toml").read_text()
    if not result_cache:
        source = set_everywhere(source, {"result_cache_seconds": 0})
    text = set_everywhere(edit_manifest(source, keep_models, settings), stage_scaling or {})
    env = {
        # Measured with a worker per model loaded from the start, as before the
        # platform scaled from zero (dev's minimum).
        "SWITCHYARD_MIN_WORKERS": os.environ.get("SWITCHYARD_MIN_WORKERS", "1"),
        # No standby importing beside the measured workers (bench/scaling.py asks
        # for one: it measures starts).
        "SWITCHYARD_STANDBY_WORKERS": os.environ.get("SWITCHYARD_STANDBY_WORKERS", "0"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        **LOCAL_CREDENTIALS,
        "PYTHONUNBUFFERED": "1",
        **(env or {}),
    }
    with tempfile.TemporaryDirectory(
        prefix="switchyard-bench-", ignore_cleanup_errors=True
    ) as run_dir:
        platform = start(Path(run_dir), text, env, SWITCHYARD_UP, ready_timeout)
        try:
            yield platform
        finally:
            platform.stop()
