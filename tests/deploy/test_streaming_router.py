"""The router function as it runs where responses stream: under the Lambda Web
Adapter, whose command is the asset's ``run.sh``. The adapter turns each API
Gateway event into an HTTP request to that server, with the event's request
context in ``x-amzn-request-context``, and streams the answer back. Here the
request is sent as the adapter sends it, to ``run.sh`` started from the router's
code asset and the core layer alone (at ``/var/task`` and ``/opt/python``), against
the emulator and a ``pydoc-gpt`` worker running from the image's ``/app``."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator

import httpx
import pytest

from switchyard_local.deployed import Launcher
from switchyard_local.supervisor import LocalPlatform, base_environment, free_port
from tests.deploy.conftest import router_environment

MODEL = "pydoc-gpt"


@pytest.fixture(scope="module")
def served(platform: LocalPlatform, launcher: Launcher, tmp_path_factory) -> Iterator[str]:
    port = free_port()
    command = launcher.streaming_router(tmp_path_factory.mktemp("lambda-bin"))
    log = platform.run_dir / "logs" / "function-streaming-router.log"
    with open(log, "ab") as out:
        process = subprocess.Popen(
            command.argv,
            env={
                **base_environment(),
                **router_environment(platform, [MODEL]),
                **command.env,
                "PORT": str(port),
            },
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, log.read_text()[-2000:]
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(10)


def context(platform: LocalPlatform, tenant: str = "acme") -> dict[str, str]:
    """The header the adapter sets from the event's request context."""
    assert platform.provisioned is not None
    request_context = {
        "stage": "dev",
        "identity": {"apiKeyId": platform.provisioned.api_key_ids[tenant]},
    }
    return {"x-amzn-request-context": json.dumps(request_context)}


def test_run_sh_serves_the_shipped_app_and_streams_tokens_as_they_come(served, platform):
    body = {"prompt": "Return the", "max_tokens": 16, "temperature": 0, "stream": True}
    with httpx.stream(
        "POST",
        f"{served}/v1/models/{MODEL}/generate",
        json=body,
        headers=context(platform),
        timeout=60,
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [
            json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")
        ]
    assert [e for e in events if "token" in e]
    assert events[-1]["done"] is True and events[-1]["usage"]["completion_tokens"] == 16
    whole = httpx.post(
        f"{served}/v1/models/{MODEL}/generate",
        json={**body, "stream": False},
        headers=context(platform),
        timeout=60,
    )
    assert whole.json()["text"] == "".join(e["token"] for e in events if "token" in e)


def test_without_the_adapters_request_context_the_caller_is_no_tenant(served, platform):
    # A caller's own x-amzn-request-context cannot name a key the gateway did not
    # verify: API Gateway and the adapter set it; without one the router refuses.
    assert httpx.get(f"{served}/v1/models", timeout=10).status_code == 403
    unknown = {"x-amzn-request-context": json.dumps({"identity": {"apiKeyId": "id-nobody"}})}
    assert httpx.get(f"{served}/v1/models", headers=unknown, timeout=10).status_code == 403
    assert (
        httpx.get(f"{served}/v1/models", headers=context(platform), timeout=10).status_code == 200
    )


def test_the_python_it_runs_has_no_site_packages(served, platform, launcher, tmp_path):
    command = launcher.streaming_router(tmp_path / "bin")
    probe = subprocess.run(
        ["python", "-c", "import sys; print([p for p in sys.path if 'site-packages' in p])"],
        env={**os.environ, **command.env},
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.strip() == "[]"
