"""The local platform keeps its data from one run to the next: stopped (Ctrl-C) and
started again in the same run folder, it still has a version registered by the
operator, a routing change and its history, the tenants' keys, and an async request
accepted just before the stop, which it then answers. ``switchyard up --fresh``
starts empty."""

from __future__ import annotations

import httpx

from harness.waiting import wait_for
from tests.e2e.conftest import e2e_manifest, start_platform
from tests.e2e.test_api import DIGIT_ZERO
from tests.e2e.test_rollouts import STABLE, cli

MODEL = "digits-cnn"


def _request(platform, path: str) -> httpx.Response:
    with httpx.Client(base_url=platform.url, timeout=30) as client:
        return client.get(path, headers={"x-api-key": platform.api_key})


def test_a_restart_keeps_versions_routing_keys_and_queued_requests(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    manifest = e2e_manifest()
    first = start_platform(run_dir, manifest, {})
    try:
        cli(first, "models", "register", MODEL, "v7", "--artifact", str(STABLE))
        cli(first, "traffic", "set", MODEL, "v1=90", "v7=10", "--reason", "canary of v7")
        with httpx.Client(base_url=first.url, timeout=30) as client:
            accepted = client.post(
                f"/v1/models/{MODEL}/predict?async=true",
                json={"inputs": [DIGIT_ZERO]},
                headers={"x-api-key": first.api_key},
            )
        assert accepted.status_code == 202, accepted.text
    finally:
        first.stop()  # at once: from zero, no worker has taken the request yet
    location = accepted.headers["location"]

    second = start_platform(run_dir, manifest, {})
    try:
        assert "keeping the data of the last run" in "\n".join(second.output)
        assert second.api_key == first.api_key
        assert f"{MODEL}\tv7\tactive" in cli(second, "models", "list").stdout
        show = cli(second, "traffic", "show", MODEL).stdout
        assert "v1=90" in show.replace(" ", "") and "v7=10" in show.replace(" ", "")
        assert "canary of v7" in show

        def answered() -> httpx.Response | None:
            response = _request(second, location)
            return response if response.json()["status"] == "done" else None

        done = wait_for(answered, timeout_s=120, every_s=0.2, what="the request's answer")
        assert done.json()["outputs"][0]["class"] == 0
    finally:
        second.stop()

    fresh = start_platform(run_dir, manifest, {"SWITCHYARD_FRESH": "1"})
    try:
        assert fresh.api_key != first.api_key
        assert "\tv7\t" not in cli(fresh, "models", "list").stdout
        assert "v7" not in cli(fresh, "traffic", "show", MODEL).stdout
        assert _request(fresh, location).status_code == 404
    finally:
        fresh.stop()
