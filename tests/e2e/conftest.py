"""E2E tier: the local platform started as real processes (`switchyard up`, what
`make up` runs), spoken to over HTTP."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from switchyard import aws
from switchyard_local.models import build_all
from switchyard_local.supervisor import free_port
from tests.e2e.worker_log import delivery_events

ROOT = Path(__file__).resolve().parents[2]
READY = re.compile(r"^READY (http://127\.0\.0\.1:(\d+)) api_key=(\S+)$")


@dataclass
class Platform:
    process: subprocess.Popen[str]
    url: str
    api_key: str
    ready_line: str
    run_dir: Path
    info: dict
    output: list[str]

    @property
    def keys(self) -> dict[str, str]:
        return self.info["api_keys"]

    def client(self, service: str):
        return aws.client(service, self.info["region"], self.info["emulator_url"])

    def worker_pid(self, model: str) -> int:
        ready = self.run_dir / f"worker-{model}-0.ready"
        deadline = time.monotonic() + 120
        while not ready.exists():
            assert time.monotonic() < deadline, f"{ready} never appeared"
            time.sleep(0.1)
        return int(ready.read_text().rsplit("-", 1)[1])

    def worker_log_events(self) -> list[dict]:
        events = []
        for path in (self.run_dir / "logs").glob("worker-*.log"):
            for line in path.read_text(errors="replace").splitlines():
                if line.startswith("{"):
                    try:
                        events.append(json.loads(line))
                    except ValueError:
                        continue
        return delivery_events(events)

    def queue_depth(self, model: str, lane: str = "realtime", dlq: bool = False) -> int:
        url = self.info["dlqs" if dlq else "queues"][model][lane]
        attrs = self.client("sqs").get_queue_attributes(
            QueueUrl=url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return int(attrs["ApproximateNumberOfMessages"]) + int(
            attrs["ApproximateNumberOfMessagesNotVisible"]
        )

    def wait_until_idle(self, model: str, timeout_s: float = 180) -> None:
        """Wait for both lanes of a model to empty, so that a test's async
        backlog does not sit in front of the next test's requests."""
        deadline = time.monotonic() + timeout_s
        while self.queue_depth(model, "realtime") or self.queue_depth(model, "batch"):
            assert time.monotonic() < deadline, f"{model}'s queues did not empty"
            time.sleep(0.5)


TRIAL_TENANT = """
[tiers.trial]
rate = 2
burst = 4
quota_per_day = 12

[tenants.initech]
tier = "trial"
"""


def e2e_manifest(extra: str = "") -> str:
    """The manifest as the e2e platforms run it. A short visibility timeout, so that
    recovery after a killed worker is quick, a short rollout window, so that a
    rollout test watches a whole one quickly, and a tenant on a tier small enough to
    run into its limits within a test. The result cache is off: these tests send the
    same inputs again and again and follow what the workers do with each request (the
    cache is tried in tests/deploy, tests/integration and tests/unit)."""
    text = (ROOT / "manifest.toml").read_text()
    text = re.sub(r"visibility_timeout_seconds = \d+", "visibility_timeout_seconds = 10", text)
    text = re.sub(r"(?m)^result_cache_seconds = \d+", "result_cache_seconds = 0", text)
    text = re.sub(r"(?m)^window_seconds = \d+", "window_seconds = 20", text)
    return text + TRIAL_TENANT + extra


def start_platform(run_dir: Path, manifest_text: str, env: dict[str, str]) -> Platform:
    """`make up` with ``manifest_text`` and ``env`` (``SWITCHYARD_*`` settings of
    `switchyard up`), in ``run_dir``; returns once it has printed its READY line."""
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
    build_all(ROOT / "build" / "models")
    manifest = run_dir / "manifest.toml"
    manifest.write_text(manifest_text)
    port = free_port()
    # Exactly what a person runs; a new session stands in for the terminal's
    # foreground process group, so the stop test can press Ctrl-C on all of it.
    process = subprocess.Popen(
        ["make", "--no-print-directory", "up"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={
            **os.environ,
            "PORT": str(port),
            "SWITCHYARD_MANIFEST": str(manifest),
            "SWITCHYARD_RUN_DIR": str(run_dir),
            **env,
        },
        start_new_session=True,
    )
    output: list[str] = []
    ready: list[str] = []

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            output.append(line.rstrip("\n"))
            if READY.match(line.strip()):
                ready.append(line.strip())

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + 300
    while not ready:
        if process.poll() is not None or time.monotonic() > deadline:
            os.killpg(process.pid, signal.SIGKILL)
            pytest.fail("the platform did not become ready:\n" + "\n".join(output[-40:]))
        time.sleep(0.2)
    match = READY.match(ready[0])
    assert match is not None and int(match.group(2)) == port
    info = json.loads((run_dir / "platform.json").read_text())
    return Platform(process, match.group(1), match.group(3), ready[0], run_dir, info, output)


def kill_platform(platform: Platform) -> None:
    if platform.process.poll() is None:
        os.killpg(platform.process.pid, signal.SIGKILL)


@pytest.fixture(scope="session")
def platform(tmp_path_factory):
    """The platform most e2e tests share, with one warm worker per model (the
    scaling test starts its own, from zero)."""
    run_dir = tmp_path_factory.mktemp("platform")
    started = start_platform(run_dir, e2e_manifest(), {"SWITCHYARD_MIN_WORKERS": "1"})
    yield started
    kill_platform(started)


@pytest.fixture
def http(platform):
    with httpx.Client(base_url=platform.url, timeout=60) as client:
        yield client
