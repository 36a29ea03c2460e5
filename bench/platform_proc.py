"""Starts the local platform as real processes, as `make up` does, with an edited
copy of the manifest, and stops it again.

``switchyard up`` runs in its own session with PORT, SWITCHYARD_RUN_DIR (a temporary
folder) and SWITCHYARD_MANIFEST (the edited copy) in its environment. It is ready
when it prints its READY line; it is stopped with SIGINT, as Ctrl-C would, and its
process group is killed only if it does not stop in time.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import ROOT

READY = re.compile(r"^READY (http://127\.0\.0\.1:\d+) api_key=(\S+)$")
_HEADER = re.compile(r"^\[([^\]]+)\]\s*$")


def edit_manifest(
    text: str,
    keep_models: set[str] | None = None,
    settings: dict[str, dict[str, Any]] | None = None,
) -> str:
    """The manifest with only ``keep_models`` and with ``settings`` replaced per model
    (``{"minilm-embed": {"max_batch_size": 1}}``). Edits are made line by line in
    the model's own table, so comments and the rest of the file are kept as they are."""
    settings = settings or {}
    out: list[str] = []
    section = ""
    for line in text.splitlines():
        header = _HEADER.match(line)
        if header:
            section = header.group(1).strip()
        # A model's own table and its sub-tables ([models.<model>.scaling]).
        model = section.split(".")[1] if section.startswith("models.") else None
        if model is not None and keep_models is not None and model not in keep_models:
            continue
        if model is not None and not header:
            for key, value in settings.get(model, {}).items():
                if re.match(rf"^{re.escape(key)}\s*=", line):
                    line = f"{key} = {json.dumps(value)}"
        out.append(line)
    edited = "\n".join(out) + "\n"
    tomllib.loads(edited)  # still a valid manifest file
    return edited


@dataclass
class RunningPlatform:
    url: str
    api_key: str
    run_dir: Path
    info: dict[str, Any]
    process: subprocess.Popen[str]
    output: list[str] = field(default_factory=list)

    @property
    def keys(self) -> dict[str, str]:
        return self.info["api_keys"]


def free_port() -> int:
    from switchyard_local.supervisor import free_port as platform_free_port

    return platform_free_port()


@contextmanager
def local_platform(
    keep_models: set[str] | None = None,
    settings: dict[str, dict[str, Any]] | None = None,
    ready_timeout: float = 300,
    stage_scaling: dict[str, int] | None = None,
    result_cache: bool = False,
) -> Iterator[RunningPlatform]:
    """A running local platform; stopped (and its run folder removed) on exit.
    ``stage_scaling`` replaces settings of every stage's ``[stages.<stage>.scaling]``.
    The result cache is off unless ``result_cache``: the sections measure the queue
    path and the model, and their workloads repeat inputs (the cache is measured in
    ``bench/aws_calls.py``)."""
    run_dir = Path(tempfile.mkdtemp(prefix="switchyard-bench-"))
    manifest = run_dir / "manifest.toml"
    source = (ROOT / "manifest.toml").read_text()
    if not result_cache:
        source = re.sub(r"(?m)^result_cache_seconds\s*=\s*\d+", "result_cache_seconds = 0", source)
    text = edit_manifest(source, keep_models, settings)
    for key, value in (stage_scaling or {}).items():
        text, found = re.subn(rf"(?m)^{re.escape(key)}\s*=\s*\d+", f"{key} = {value}", text)
        if not found:
            raise ValueError(f"the manifest has no scaling setting {key!r}")
    tomllib.loads(text)
    manifest.write_text(text)
    env = {
        **os.environ,
        "PORT": str(free_port()),
        "SWITCHYARD_RUN_DIR": str(run_dir),
        "SWITCHYARD_MANIFEST": str(manifest),
        # Measured with a worker per model loaded from the start, as before the
        # platform scaled from zero (dev's minimum).
        "SWITCHYARD_MIN_WORKERS": os.environ.get("SWITCHYARD_MIN_WORKERS", "1"),
        # No standby importing beside the measured workers (bench/scaling.py asks
        # for one: it measures starts).
        "SWITCHYARD_STANDBY_WORKERS": os.environ.get("SWITCHYARD_STANDBY_WORKERS", "0"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "AWS_ACCESS_KEY_ID": "local",
        "AWS_SECRET_ACCESS_KEY": "local",
        "PYTHONUNBUFFERED": "1",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "switchyard_local", "up"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    output: list[str] = []
    ready: list[re.Match[str]] = []

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            output.append(line.rstrip("\n"))
            match = READY.match(line.strip())
            if match:
                ready.append(match)

    threading.Thread(target=pump, name="platform-output", daemon=True).start()
    try:
        deadline = time.monotonic() + ready_timeout
        while not ready:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    "the local platform did not become ready:\n" + "\n".join(output[-30:])
                )
            time.sleep(0.2)
        info = json.loads((run_dir / "platform.json").read_text())
        yield RunningPlatform(ready[0].group(1), ready[0].group(2), run_dir, info, process, output)
    finally:
        stop(process)
        shutil.rmtree(run_dir, ignore_errors=True)


def stop(process: subprocess.Popen[str], timeout: float = 90) -> None:
    """SIGINT (Ctrl-C) and wait; kill the process group if it hangs."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)
