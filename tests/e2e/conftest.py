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
        return events

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


@pytest.fixture(scope="session")
def platform(tmp_path_factory):
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
    build_all(ROOT / "build" / "models")
    run_dir = tmp_path_factory.mktemp("platform")
    manifest = run_dir / "manifest.toml"
    text = (ROOT / "manifest.toml").read_text()
    # A short visibility timeout, so that recovery after a killed worker is quick,
    # a short rollout window, so that a rollout test watches a whole one quickly,
    # and a tenant on a tier small enough to run into its limits within a test.
    text = re.sub(r"visibility_timeout_seconds = \d+", "visibility_timeout_seconds = 10", text)
    text = re.sub(r"(?m)^window_seconds = \d+", "window_seconds = 20", text)
    manifest.write_text(text + TRIAL_TENANT)
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
    yield Platform(process, match.group(1), match.group(3), ready[0], run_dir, info, output)
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)


@pytest.fixture
def http(platform):
    with httpx.Client(base_url=platform.url, timeout=60) as client:
        yield client
