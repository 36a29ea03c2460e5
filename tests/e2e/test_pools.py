"""A pool on the local platform: minilm-embed and digits-cnn served by one worker
service whose budget holds fewer versions than are asked for, so its worker loads
and evicts as requests go round-robin across them; every request answered exactly
once, the budget never exceeded by the footprints the worker reported.

digits-cnn's versions take 0.1-3 MiB against minilm-embed's 87, so no budget holds
exactly one of the two models: a second version of minilm-embed (registered here as
a copy of v1, asked for by pinning it, as a canary is) is an entry of its own, and
a budget of 150 MiB holds one minilm-embed version beside digits-cnn's, never two.
"""

from __future__ import annotations

import json
import time

import httpx
import pytest

from harness.local_platform import pooled
from harness.waiting import wait_for
from switchyard.registry import DynamoDBRegistry
from switchyard_local.status import read_pool_states
from tests.e2e.accounting import SENTENCES, stored_per_request, wait_all_done
from tests.e2e.conftest import Platform, e2e_manifest, start_platform
from tests.e2e.test_api import DIGIT_ZERO

POOL = "small-cpu"
BUDGET_MIB = 150
IDLE_SECONDS = 5
# (model, version, pinned): minilm-embed v2 is asked for by pinning it; the others
# are each model's routed versions or pinned ones, as a canary's are.
TARGETS = [
    ("minilm-embed", "v1", False),
    ("digits-cnn", "v1", False),
    ("minilm-embed", "v2", True),
    ("digits-cnn", "v2", True),
]
ROUNDS = 5


@pytest.fixture(scope="module")
def pool_platform(tmp_path_factory):
    manifest = pooled(
        e2e_manifest(),
        POOL,
        ["minilm-embed", "digits-cnn"],
        memory_budget_mib=BUDGET_MIB,
        # one worker, whose log has every load; no scale-in cool-down, so a gap in
        # the requests (the router reading the new version's record) that scaled
        # the pool in does not hold its return to zero at the end
        scaling={"max_tasks": 1, "scale_in_cooldown_seconds": 0},
    )
    started = start_platform(
        tmp_path_factory.mktemp("pool-platform"),
        manifest,
        {"SWITCHYARD_MIN_WORKERS": "0", "SWITCHYARD_IDLE_SECONDS": str(IDLE_SECONDS)},
    )
    yield started
    started.stop()


def register_copy(platform: Platform, model: str, version: str) -> None:
    """``model``'s v1 again as ``version``: the same artifact, a cache entry of its own."""
    registry = DynamoDBRegistry(
        platform.client("dynamodb"), platform.info["settings"]["registry_table"]
    )
    v1 = registry.get(model, "v1")
    assert v1 is not None
    registry.register(v1.model_copy(update={"version": version}))


def ask(client: httpx.Client, platform: Platform, model: str, version: str, pinned: bool) -> str:
    """One predict, sync; its request id (answered, or 202 while a version loads)."""
    headers = {"x-api-key": platform.api_key}
    if pinned:
        headers["x-model-version"] = version
    inputs = SENTENCES[:2] if model == "minilm-embed" else [DIGIT_ZERO]
    deadline = time.monotonic() + 30
    while True:  # a version just registered: the router reads records every few seconds
        response = client.post(
            f"/v1/models/{model}/predict", json={"inputs": inputs}, headers=headers
        )
        if response.status_code != 404 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert response.status_code in (200, 202), response.text
    return response.json()["request_id"]


def test_a_pool_serves_more_versions_than_its_budget_holds(pool_platform):
    platform = pool_platform
    register_copy(platform, "minilm-embed", "v2")

    # GIVEN a pool at zero: one service for both models, no worker of either's own
    assert platform.service_of("digits-cnn") == platform.service_of("minilm-embed") == POOL
    assert platform.at_zero("minilm-embed") and platform.at_zero("digits-cnn")

    # WHEN requests go round-robin across four versions, one after another
    sent: dict[str, tuple[str, str]] = {}
    with httpx.Client(base_url=platform.url, timeout=60) as client:
        for _ in range(ROUNDS):
            for model, version, pinned in TARGETS:
                sent[ask(client, platform, model, version, pinned)] = (model, version)
    answers = wait_all_done(platform, list(sent), timeout=120)

    # THEN each is answered by the version it asked for
    for rid, (model, version) in sent.items():
        answer = answers[rid]
        assert answer["status"] == "done", answer
        assert (answer["model"], answer["version"]) == (model, version)
    # AND exactly once, by the pool's workers alone
    platform.wait_until_idle("minilm-embed", timeout_s=30)
    stored = stored_per_request(platform)
    assert {rid: stored[rid] for rid in sent} == dict.fromkeys(sent, 1)
    assert {
        p.name.rsplit("-", 1)[0] for p in (platform.run_dir / "logs").glob("worker-*-*.log")
    } <= {
        f"worker-{POOL}",
        "worker-standby",
    }

    # AND the worker loaded versions on first use and evicted them to make room, the
    # versions it held never over the budget by the footprints it measured
    events = platform.log_events(f"worker-{POOL}-*.log")
    cached = [e for e in events if e.get("message") == "model cached"]
    evicted = [e for e in events if e.get("message") == "model evicted"]
    assert {(e["model"], e["version"]) for e in cached} == {(m, v) for m, v, _ in TARGETS}
    assert evicted, "no version was evicted"
    assert all(e["held_mib"] <= e["budget_mib"] == BUDGET_MIB for e in cached + evicted)
    minilm = [e["footprint_mib"] for e in cached if e["model"] == "minilm-embed"]
    assert min(minilm) * 2 > BUDGET_MIB  # two of them never fit: the test's premise
    states = read_pool_states(platform.run_dir, POOL)
    assert states and all(
        sum(r["footprint_mib"] for r in s["resident"]) <= BUDGET_MIB for s in states
    )

    # AND the operator's status shows the pool: what it holds, its loads and evictions
    shown = platform.cli("status", "--json")
    assert shown.returncode == 0, shown.stderr
    status = json.loads(shown.stdout)
    pool = status["pools"][POOL]
    assert pool["resident"] and pool["loads"] >= len(TARGETS) and pool["evictions"] >= 1
    assert sum(r["footprint_mib"] for r in pool["resident"]) <= BUDGET_MIB
    assert pool["load_p50_seconds"] is not None
    assert status["models"]["digits-cnn"]["pool"] == POOL
    assert status["models"]["minilm-embed"]["cold_loads"] >= 2
    text = platform.cli("status")
    assert f"pool {POOL}: minilm-embed, digits-cnn" in text.stdout
    # and the dashboard serves the same figures to its page
    dashboard = next(line.split()[1] for line in platform.output if line.startswith("DASHBOARD "))
    served = wait_for(
        lambda: httpx.get(f"{dashboard}api/status").json()["pools"][POOL]["resident"],
        30,
        every_s=0.5,
        what="the dashboard's pool figures",
    )
    assert {(r["model"], r["version"]) for r in served} <= {(m, v) for m, v, _ in TARGETS}
    print(
        "pool figures:",
        json.dumps(
            {
                "footprints_mib": {
                    f"{e['model']} {e['version']}": e["footprint_mib"] for e in cached
                },
                "load_seconds": sorted(e["load_seconds"] for e in cached),
                "loads": pool["loads"],
                "evictions": pool["evictions"],
            }
        ),
    )

    # AND with no work left, the pool's service goes back to zero (dev's minimum)
    wait_for(lambda: platform.at_zero("digits-cnn"), 60, every_s=0.5, what="the pool at zero")
