"""The worker as its image runs it: from /app, laid out by the Dockerfile's COPY
lines, checked at build time by the same module the image runs."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from harness.local_platform import json_lines
from stacks.assets import REPO_ROOT, WORKER_DOCKERFILE, image_copies
from switchyard_local.deployed import Launcher
from switchyard_local.supervisor import base_environment

from .conftest import image_root


def test_app_holds_exactly_what_the_dockerfile_copies(launcher: Launcher) -> None:
    copies = dict((dst, src) for src, dst in image_copies())
    assert copies == {
        "switchyard": "layers/core/python/switchyard",
        "switchyard_worker": "gpu_workers/switchyard_worker",
    }
    built = {p.name for p in launcher.layouts.worker.iterdir() if not p.name.startswith(".")}
    assert built == set(copies)


def test_the_images_build_check_passes_from_app(launcher: Launcher) -> None:
    # GIVEN the check the Dockerfile runs at build time
    dockerfile = (REPO_ROOT / WORKER_DOCKERFILE).read_text()
    assert "RUN python -m switchyard_worker.check" in dockerfile
    # WHEN it runs in the laid-out /app, with the image's third-party packages only
    command = launcher.worker_check()
    done = subprocess.run(
        command.argv,
        env={**base_environment(), **command.env},
        capture_output=True,
        text=True,
        timeout=300,
        cwd="/",
    )
    # THEN every module imports, and the platform's come from /app
    assert done.returncode == 0, done.stderr
    root = image_root(launcher)
    assert f"switchyard from {root}/switchyard" in done.stdout
    assert f"switchyard_worker from {root}/switchyard_worker" in done.stdout


def test_the_platforms_workers_run_from_app(platform, launcher: Launcher) -> None:
    # The workers that answer the other tests' requests: started from the image layout.
    for worker in platform.workers:
        assert worker.process is not None and worker.alive()
        pid = worker.process.pid
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        assert argv[1:5] == [b"-S", b"-P", b"-m", b"switchyard_worker"]
        environ = dict(
            item.split(b"=", 1)
            for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            if b"=" in item
        )
        path = environ[b"PYTHONPATH"].decode().split(os.pathsep)
        assert path[0] == str(image_root(launcher))
        assert not any("layers/core" in p or "gpu_workers" in p for p in path)


def _ready_lines(platform) -> list[dict]:
    logs = sorted((platform.run_dir / "logs").glob("worker-*.log"))
    events = json_lines(line for path in logs for line in path.read_text().splitlines())
    ready = [event for event in events if event.get("message") == "worker ready"]
    assert len(ready) >= len(platform.workers) > 0
    return ready


def test_a_worker_starts_with_the_collector_held_off_until_its_model_is_loaded(
    platform,
) -> None:
    # GIVEN the platform's workers, each of which has logged that it is ready
    for event in _ready_lines(platform):
        # THEN the collector runs again for the requests, and what the start made
        # (the libraries, the model) is frozen out of its reach
        assert event["gc"]["enabled"] is True
        assert event["gc"]["frozen"] > 100_000


def test_a_worker_keeps_its_models_freed_memory_for_the_next_batch(platform) -> None:
    # GIVEN the platform's workers, each of which has logged that it is ready
    for event in _ready_lines(platform):
        # THEN each set the C allocator to serve blocks up to 32 MiB from its heap and
        # keep up to 64 MiB of it free (switchyard_worker.allocator)
        assert event["allocator"] == {
            "tuned": True,
            "mmap_threshold": 32 << 20,
            "trim_threshold": 64 << 20,
        }
