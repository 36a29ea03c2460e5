"""E2E tier: the local platform started as real processes (`switchyard up`, what
`make up` runs), spoken to over HTTP. Started, read and stopped by the harness the
bench shares (``harness.local_platform``); what is the tier's own is here: `make up`
itself, the manifest the tier runs and its fixtures."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from harness.local_platform import ROOT, set_everywhere, start
from harness.local_platform import RunningPlatform as Platform
from switchyard.registry import DynamoDBRegistry
from switchyard_local.models import build_all

GENERATION_MODEL = "pydoc-gpt"
# Exactly what a person runs (test_stop presses Ctrl-C on all of it).
MAKE_UP = ("make", "--no-print-directory", "up")

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
    recovery after a killed worker is quick, three receives before the DLQ (backoffs
    of 1 and 2 s, not 1 to 8 s), so that a request that always fails ends quickly, a
    short rollout window, so that a
    rollout test watches a whole one quickly, and a tenant on a tier small enough to
    run into its limits within a test. The result cache is off: these tests send the
    same inputs again and again and follow what the workers do with each request (the
    cache is tried in tests/deploy, tests/integration and tests/unit)."""
    text = set_everywhere(
        (ROOT / "manifest.toml").read_text(),
        {
            "visibility_timeout_seconds": 10,
            "max_receive_count": 3,
            "result_cache_seconds": 0,
            "window_seconds": 20,
        },
    )
    return text + TRIAL_TENANT + extra


def start_platform(run_dir: Path, manifest_text: str, env: dict[str, str]) -> Platform:
    """`make up` with ``manifest_text`` and ``env`` (``SWITCHYARD_*`` settings of
    `switchyard up`), in ``run_dir``; returns once it has printed its READY line."""
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
    build_all(ROOT / "build" / "models")
    return start(run_dir, manifest_text, env, MAKE_UP)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    """A test of the shared platform that fails carries what its router and workers
    were doing then (every thread's stack), in its report: a request that never ends
    shows where it waits."""
    report = yield
    shared = getattr(item, "funcargs", {}).get("platform")
    running = isinstance(shared, Platform) and shared.process.poll() is None
    if report.when == "call" and report.failed and running:
        report.sections.append(("the platform's stacks when it failed", shared.stacks()))
    return report


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """test_stop presses Ctrl-C on the shared platform: it runs after every other
    test of the tier, whatever their modules' names."""
    last = [item for item in items if item.path.name == "test_stop.py"]
    items[:] = [item for item in items if item.path.name != "test_stop.py"] + last


@pytest.fixture(scope="session")
def platform(tmp_path_factory):
    """The platform most e2e tests share, with one warm worker per model (the
    scaling test starts its own, from zero)."""
    run_dir = tmp_path_factory.mktemp("platform")
    started = start_platform(run_dir, e2e_manifest(), {"SWITCHYARD_MIN_WORKERS": "1"})
    yield started
    started.stop()  # test_stop, which runs last, has usually stopped it already


@pytest.fixture
def http(platform):
    with httpx.Client(base_url=platform.url, timeout=60) as client:
        yield client


@contextmanager
def slow_version(platform, version: str, step_delay_seconds: float = 0.08) -> Iterator[None]:
    """``version`` of pydoc-gpt: v1 with each decode step ``step_delay_seconds``
    longer (a stream that lasts), registered while the block runs, then retired."""
    table = platform.info["settings"]["registry_table"]
    registry = DynamoDBRegistry(platform.client("dynamodb"), table)
    registry.register(
        registry.get(GENERATION_MODEL, "v1").model_copy(
            update={"version": version, "faults": {"step_delay_seconds": step_delay_seconds},
                    "created_at": 0.0}
        )
    )  # fmt: skip
    try:
        yield
    finally:
        platform.client("dynamodb").update_item(
            TableName=table,
            Key={"model": {"S": GENERATION_MODEL}, "version": {"S": version}},
            UpdateExpression="SET #s = :r",
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues={":r": {"S": "retired"}},
        )
