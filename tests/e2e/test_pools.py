"""The demo pool on the local platform: the shipped manifest's ``small-cpu`` serves six
classifiers (four ONNX, two TorchScript) from one worker service whose budget holds
about half of them: two of its three wide networks beside the three small models.
Requests going round-robin across the six make its worker load and evict; every
request is answered exactly once, by the pool, and the versions it holds never add
up to more than the budget by the footprints the worker reported. ``switchyard
status`` shows what the pool holds, its loads and evictions; ``small-gpu``'s model
answers too (on this machine's CPU).

It runs on the e2e tier's shared platform (one warm worker per service), after
whatever other tests asked of the pools: it counts the loads and evictions its own
requests caused.
"""

from __future__ import annotations

import json
import time

import httpx

from harness.waiting import wait_for
from harness.worker_log import delivery_events, logged_at
from switchyard.manifest import load_manifest
from switchyard_local.models import SKLEARN_DEMOS, TABULAR_MLPS, data_set_split
from switchyard_local.status import read_pool_states
from tests.e2e.accounting import stored_per_request, wait_all_done
from tests.e2e.conftest import Platform
from tests.e2e.test_api import DIGIT_ZERO

POOL = "small-cpu"
GPU_POOL = "small-gpu"
ROUNDS = 3
# Each pooled model's input: the first held-out row of its data set.
LOADERS = {
    **{model: loader for model, (loader, _) in SKLEARN_DEMOS.items()},
    **{model: loader for model, (loader, _) in TABULAR_MLPS.items()},
}


def an_input(model: str) -> list[float]:
    if model not in LOADERS:
        return DIGIT_ZERO
    return [float(x) for x in data_set_split(LOADERS[model])[1][0]]


def ask(client: httpx.Client, platform: Platform, model: str) -> str:
    """One sync predict; its request id (answered, or 202 while a version loads)."""
    response = client.post(
        f"/v1/models/{model}/predict",
        json={"inputs": [an_input(model)]},
        headers={"x-api-key": platform.api_key},
    )
    assert response.status_code in (200, 202), response.text
    return str(response.json()["request_id"])


def pool_status(platform: Platform) -> dict:
    shown = platform.cli("status", "--json")
    assert shown.returncode == 0, shown.stderr
    return json.loads(shown.stdout)


def test_the_demo_pool_loads_and_evicts_as_requests_go_round_its_models(platform):
    manifest = load_manifest(platform.run_dir / "manifest.toml")
    models = manifest.pool_models(POOL)
    budget = manifest.pools[POOL].memory_budget_mib
    # GIVEN the demo pool: one service for its six models, none of their own
    assert len(models) == 6
    assert {platform.service_of(m) for m in models} == {POOL}
    before = pool_status(platform)["pools"][POOL]

    # WHEN requests go round-robin across the six, one after another, and one goes to
    # the GPU pool's model
    sent: dict[str, str] = {}
    began = time.time()
    with httpx.Client(base_url=platform.url, timeout=60) as client:
        for _ in range(ROUNDS):
            for model in models:
                sent[ask(client, platform, model)] = model
        for model in manifest.pool_models(GPU_POOL):
            sent[ask(client, platform, model)] = model
    answers = wait_all_done(platform, list(sent), timeout=120)

    # THEN each is answered by the model it asked for, with one of its labels
    for rid, model in sent.items():
        answer = answers[rid]
        assert answer["status"] == "done", answer
        assert answer["model"] == model
        (output,) = answer["outputs"]
        assert output["label"] in manifest.models[model].labels
    # AND exactly once, the small-cpu models' by the pool's workers
    stored = stored_per_request(platform)
    assert {rid: stored[rid] for rid in sent} == dict.fromkeys(sent, 1)
    by_pool = {
        e["request_id"]
        for e in delivery_events(platform.log_events(f"worker-{POOL}-*.log"))
        if e.get("message") == "result stored"
    }
    assert {rid for rid, m in sent.items() if m in models} <= by_pool

    # AND the worker loaded versions on first use and evicted them to make room, the
    # versions it held never over the budget by the footprints it measured
    events = platform.log_events(f"worker-{POOL}-*.log")
    cached = [e for e in events if e.get("message") == "model cached"]
    evicted = [e for e in events if e.get("message") == "model evicted"]
    assert all(e["held_mib"] <= e["budget_mib"] == budget for e in cached + evicted)
    mine = [e for e in cached if logged_at(e) >= began]
    assert {e["model"] for e in mine} == set(models)
    # each network's smallest footprint: a small model's is under 2 MiB once ONNX
    # Runtime is loaded; a network's never under its weights' bytes (digits-mlp's graph
    # file 16.6 MiB, each TorchScript network's tensors 64), even where a load reuses
    # heap pages an eviction left and the resident memory grows by less
    smallest: dict[str, float] = {}
    for e in mine:
        smallest[e["model"]] = min(e["footprint_mib"], smallest.get(e["model"], budget))
    networks = {model: mib for model, mib in smallest.items() if mib > budget / 10}
    assert len(networks) == 3
    assert sum(networks.values()) > budget  # the three never fit: the demo's premise
    refused = [e for e in events if e.get("message", "").startswith("model refused")]
    assert refused == []  # and none alone is over the budget
    states = read_pool_states(platform.run_dir, POOL)
    assert states and all(sum(r["footprint_mib"] for r in s["resident"]) <= budget for s in states)

    # AND the operator's status shows the pool: what it holds, its loads and evictions
    status = pool_status(platform)
    pool = status["pools"][POOL]
    assert pool["resident"] and {r["model"] for r in pool["resident"]} <= set(models)
    assert sum(r["footprint_mib"] for r in pool["resident"]) <= budget
    loads, evictions = pool["loads"] - before["loads"], pool["evictions"] - before["evictions"]
    assert loads >= len(models) and evictions > 0
    assert pool["load_p50_seconds"] is not None
    assert all(status["models"][m]["pool"] == POOL for m in models)
    text = platform.cli("status").stdout
    assert f"pool {POOL}: {', '.join(models)}" in text
    # and the dashboard serves the same figures to its page
    dashboard = next(line.split()[1] for line in platform.output if line.startswith("DASHBOARD "))
    served = wait_for(
        lambda: httpx.get(f"{dashboard}api/status").json()["pools"][POOL]["resident"],
        30,
        every_s=0.5,
        what="the dashboard's pool figures",
    )
    assert {r["model"] for r in served} <= set(models)
    print(
        "pool figures:",
        json.dumps(
            {
                "budget_mib": budget,
                "footprints_mib": {e["model"]: e["footprint_mib"] for e in mine},
                "load_seconds": sorted(round(e["load_seconds"], 3) for e in mine),
                "loads": loads,
                "evictions": evictions,
                "resident": [r["model"] for r in pool["resident"]],
            }
        ),
    )
