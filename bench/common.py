"""Shared pieces of the benchmark suite: the inputs every section sends, the
percentile maths, timers, and what is recorded about the machine.

Every section uses the same sentences, so the model limit, the worker and the
end-to-end runs all pay for the same amount of model work per input.
"""

from __future__ import annotations

import inspect
import math
import os
import platform
import random
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, redirect_stdout, suppress
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from harness import MODELS_DIR, ROOT  # noqa: F401 - the sections import them from here
from switchyard.stats import percentile  # noqa: F401 - the sections import it from here

TEXT_MODEL = "minilm-embed"
TENSOR_MODEL = "digits-cnn"


def batching_of(model: str) -> tuple[int, float]:
    """``model``'s batching in the manifest: its max batch size and its max wait in
    seconds (the peers are given the same, and limits are measured at that size)."""
    from stacks.assets import MANIFEST_FILE
    from switchyard.manifest import load_manifest

    spec = load_manifest(MANIFEST_FILE).models[model]
    return spec.max_batch_size, spec.max_wait_ms / 1000


_TEXT = (
    "the platform routes each request to a queue where a worker gathers small batches "
    "and runs the model before it stores the result for the caller who waits or polls "
    "later with an id that names the request across tenants models versions and lanes "
    "while the router keeps to its deadline and answers with accepted when time runs out "
    "quiet river morning light market price weather report travel plans kitchen garden "
    "music library science history football season election city council budget meeting"
)
_WORDS = _TEXT.split()


def sentences(count: int = 256, seed: int = 7, words: tuple[int, int] = (8, 20)) -> list[str]:
    """Deterministic English-like sentences of ``words`` (least, most) words."""
    rng = random.Random(seed)
    return [
        " ".join(rng.choice(_WORDS) for _ in range(rng.randint(*words))).capitalize() + "."
        for _ in range(count)
    ]


def digit_images(count: int = 256, seed: int = 7) -> list[list[float]]:
    """8x8 images with values 0-16, as digits-cnn's signature asks."""
    rng = random.Random(seed)
    return [[float(rng.randint(0, 16)) for _ in range(64)] for _ in range(count)]


def median(values: Sequence[float]) -> float:
    return percentile(values, 50)


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, or None when either is missing or b is zero."""
    if a is None or b is None or not b or math.isnan(a) or math.isnan(b):
        return None
    return a / b


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


def wait_for_quiet(limit_s: float, threshold: float, log: Callable[[str], None]) -> float:
    """Wait (at most ``limit_s``) for the 1-minute load average to fall below
    ``threshold``: the machine is shared, and a busy neighbour skews every figure."""
    deadline = time.monotonic() + limit_s
    load = load_average()
    while load >= threshold and time.monotonic() < deadline:
        log(f"load average {load} >= {threshold}; waiting for a quieter machine")
        time.sleep(10)
        load = load_average()
    return load


@contextmanager
def stopwatch() -> Iterator[dict[str, float]]:
    out: dict[str, float] = {}
    start = time.perf_counter()
    try:
        yield out
    finally:
        out["seconds"] = time.perf_counter() - start


def accepted_kwargs(func: Callable[..., Any], **kwargs: Any) -> dict[str, Any]:
    """Only the keyword arguments ``func`` takes: the platform code changes while
    the suite is in use, and an optional collaborator it no longer (or not yet)
    accepts should not stop a measurement."""
    params = inspect.signature(func).parameters
    return {k: v for k, v in kwargs.items() if k in params}


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def machine_info() -> dict[str, Any]:
    """What the figures were measured on."""
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem_gib = round(int(re.findall(r"\d+", line)[0]) / 1024 / 1024, 1)
    except OSError:
        pass
    try:
        import torch

        torch_threads = torch.get_num_threads()
    except ImportError:  # pragma: no cover - torch is a platform requirement
        torch_threads = None
    commit = None
    with suppress(OSError, subprocess.SubprocessError):
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
    packages = [
        "torch",
        "sentence-transformers",
        "transformers",
        "fastapi",
        "uvicorn",
        "uvloop",
        "httptools",
        "boto3",
        "moto",
        "httpx",
        "pydantic",
        "litserve",
        "matplotlib",
    ]
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": mem_gib,
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "torch_threads": torch_threads,
        "commit": commit,
        "packages": {p: _version(p) for p in packages},
        "load_average_at_start": load_average(),
    }


_DEVNULL: Any = None


@contextmanager
def quiet_output() -> Iterator[None]:
    """The worker and router log every request and print metrics to stdout, as they
    do on the platform; they still pay for that here, but the lines go to /dev/null."""
    import logging

    global _DEVNULL
    if _DEVNULL is None:
        # Kept open for good: a logger created while output is redirected keeps
        # this stream as its own.
        _DEVNULL = open(os.devnull, "w")  # noqa: SIM115
    devnull = _DEVNULL
    with redirect_stdout(devnull):
        handlers = [
            h
            for name in list(logging.root.manager.loggerDict)
            if name.startswith("switchyard")
            for h in logging.getLogger(name).handlers
            if isinstance(h, logging.StreamHandler)
        ]
        previous = [h.setStream(devnull) for h in handlers]
        try:
            yield
        finally:
            for h, stream in zip(handlers, previous, strict=True):
                if stream is not None:
                    h.setStream(stream)


# -- figures the page and the goals read alike ----------------------------------------


def fmt(value: Any, digits: int = 1, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float | int):
        text = f"{value:,.{digits}f}" if isinstance(value, float) or digits else f"{value:,}"
        return text + unit
    return str(value)


def keyed(rows: list[dict[str, Any]] | None, key: str) -> dict[Any, dict[str, Any]]:
    """Rows (ladder steps, generation levels) by one of their figures."""
    return {row[key]: row for row in rows or []}


def cpu_step(target: dict[str, Any], rate: float | None = None) -> dict[str, Any] | None:
    """The step whose CPU is shown: at ``rate`` if given and tested, else at the
    target's sustainable rate, else its first step."""
    steps = [x for x in target.get("steps") or [] if x.get("cpu_ms_per_request")]
    if not steps:
        return None
    for wanted in (rate, target.get("sustainable_rate")):
        found = next((x for x in steps if wanted is not None and x["rate"] == wanted), None)
        if found:
            return found
    return steps[0]
