"""Pools on the local platform: a pool is one worker service, scaled on the sum of
its models' work, given the pool's settings and role, and seen by the status (its
workers, what they hold, their loads and evictions) and the CLI's table."""

from __future__ import annotations

import copy
import io
import json
import os
import tomllib
from pathlib import Path

from harness.local_platform import edit_manifest, pooled
from harness.scaling_scenarios import SAMPLE_POLICY
from stacks.assets import MANIFEST_FILE
from switchyard.manifest import Manifest
from switchyard.scaling import LaneSignals
from switchyard.settings import WorkerSettings
from switchyard_cli.status import format_status, pool_metrics
from switchyard_local.autoscaler import Autoscaler, WorkerCounts, summed
from switchyard_local.provision import Provisioned
from switchyard_local.role_policies import worker_roles
from switchyard_local.status import (
    POOL_STATE_SUFFIX,
    LocalStatusReader,
    pool_figures,
)

POOL = "small-cpu"
MODELS = ("minilm-embed", "digits-cnn")
# The repository's models with services of their own: its manifest cut down to them
# (its demo pools go with their models), for these tests to pool as they say.
OWN = {"minilm-embed", "digits-cnn", "pydoc-gpt"}


def own_models_text() -> str:
    return edit_manifest(MANIFEST_FILE.read_text(), keep_models=OWN)


def pooled_manifest() -> Manifest:
    data = tomllib.loads(own_models_text())
    data["pools"] = {
        POOL: {
            "compute": "cpu",
            "instance_types": ["c7i.xlarge"],
            "memory_budget_mib": 300,
            "scaling": {"max_tasks": 3},
        }
    }
    for model in MODELS:
        spec = data["models"][model]
        spec.update(pool=POOL, compute="cpu")
        spec.pop("instance_types", None)
        spec.pop("scaling", None)
    return Manifest.model_validate(copy.deepcopy(data))


# -- scaling ---------------------------------------------------------------------------


class Queues:
    def __init__(self) -> None:
        self.lanes: dict[str, dict[str, LaneSignals]] = {
            m: {"realtime": LaneSignals(), "batch": LaneSignals()} for m in (*MODELS, "pydoc-gpt")
        }

    def read(self) -> dict[str, dict[str, LaneSignals]]:
        return {m: dict(lanes) for m, lanes in self.lanes.items()}


class Workers:
    def __init__(self) -> None:
        self.started: dict[str, int] = {}

    def counts(self, service: str) -> WorkerCounts:
        return WorkerCounts(starting=self.started.get(service, 0))

    def start(self, service: str, count: int) -> list[str]:
        first = self.started.get(service, 0)
        self.started[service] = first + count
        return [f"worker-{service}-{first + i}" for i in range(count)]

    def stop(self, service: str, count: int) -> list[str]:
        return []


def test_a_pools_lanes_are_its_models_added_up_the_oldest_the_oldest_of_all():
    lanes = summed(
        [
            {"realtime": LaneSignals(3, 1, 2.0), "batch": LaneSignals(0, 0, 0.0)},
            {"realtime": LaneSignals(4, 0, 9.5), "batch": LaneSignals(20, 2, 30.0)},
        ]
    )
    assert lanes == {"realtime": LaneSignals(7, 1, 9.5), "batch": LaneSignals(20, 2, 30.0)}


def test_a_pool_is_one_service_scaled_on_the_sum_of_its_models_work(tmp_path):
    # GIVEN a pool of two models and a model with a service of its own, all at zero
    queues, workers, log = Queues(), Workers(), io.StringIO()
    autoscaler = Autoscaler(
        {POOL: SAMPLE_POLICY, "pydoc-gpt": SAMPLE_POLICY},
        queues,
        workers,
        log,
        state_path=tmp_path / "scaling.json",
        announce=lambda _: None,
        pools={POOL: MODELS},
    )
    # WHEN each pooled model has a backlog one worker would hold (10), 25 together
    queues.lanes["minilm-embed"]["realtime"] = LaneSignals(10, 0, 3.0)
    queues.lanes["digits-cnn"]["batch"] = LaneSignals(15, 0, 8.0)
    decisions = autoscaler.tick()
    # THEN the pool wakes with the workers the sum asks for; the other stays at zero
    assert decisions[POOL].action == "wake" and decisions[POOL].desired == 3
    assert workers.started == {POOL: 3}
    assert decisions["pydoc-gpt"].desired == 0
    record = next(
        json.loads(line)
        for line in log.getvalue().splitlines()
        if '"scaling decision"' in line and POOL in line
    )
    assert record["service"] == record["pool"] == POOL and record["models"] == list(MODELS)
    assert record["inputs"]["lanes"]["batch"]["visible"] == 15
    # AND the scaling file has the pool's service, and each model's own queues beside
    # its pool's workers
    state = json.loads((tmp_path / "scaling.json").read_text())
    assert state["services"][POOL]["models"] == list(MODELS)
    assert state["services"][POOL]["workers"]["desired"] == 3
    digits = state["models"]["digits-cnn"]
    assert digits["service"] == POOL and digits["workers"]["desired"] == 3
    assert digits["lanes"]["batch"]["visible"] == 15 and digits["lanes"]["realtime"]["visible"] == 0
    assert state["models"]["pydoc-gpt"]["service"] == "pydoc-gpt"
    metrics = [json.loads(line) for line in log.getvalue().splitlines() if '"_aws"' in line]
    assert any(m.get("pool") == POOL for m in metrics)  # the pool's dimension, not a model's


# -- settings and role -----------------------------------------------------------------


def test_a_pools_workers_get_the_pools_settings():
    manifest = pooled_manifest()
    provisioned = Provisioned(
        manifest=manifest,
        stage="dev",
        region="us-east-1",
        endpoint_url="http://127.0.0.1:1",
        names=manifest.names("dev"),
        queues={m: {"realtime": f"http://q/{m}-rt", "batch": f"http://q/{m}-b"} for m in MODELS},
    )
    pool = WorkerSettings.model_validate(provisioned.worker_values(POOL))
    assert pool.worker_pool == POOL and pool.worker_model is None
    assert pool.served_models == list(MODELS) and pool.memory_budget_mib == 300
    own = WorkerSettings.model_validate(provisioned.worker_values("pydoc-gpt"))
    assert own.worker_model == "pydoc-gpt" and own.worker_pool is None


def test_a_pools_workers_hold_its_services_role_or_else_its_models_roles_together():
    statement = {"Effect": "Allow", "Action": "sqs:ReceiveMessage"}
    roles = {
        "worker:minilm-embed": [{**statement, "Resource": "arn:minilm"}],
        "worker:digits-cnn": [{**statement, "Resource": "arn:digits"}],
    }
    together = worker_roles(roles, {POOL: MODELS})
    assert [s["Resource"] for s in together[f"worker:{POOL}"]] == ["arn:minilm", "arn:digits"]
    own = worker_roles({**roles, f"worker:{POOL}": [statement]}, {POOL: MODELS})
    assert own[f"worker:{POOL}"] == [statement]


# -- status ----------------------------------------------------------------------------


def state(worker: str, pid: int, **fields) -> dict:
    return {
        "pool": POOL,
        "worker": worker,
        "pid": pid,
        "budget_mib": 300.0,
        "held_mib": 0.0,
        "resident": [],
        "loads": 0,
        "evictions": 0,
        "refusals": 0,
        "loads_by_model": {},
        "recent": [],
        **fields,
    }


def test_a_pools_figures_are_its_live_workers_holdings_and_every_workers_loads():
    live = state(
        "w-live",
        1,
        live=True,
        held_mib=95.0,
        resident=[
            {"model": "digits-cnn", "version": "v1", "footprint_mib": 5.0, "last_used": 990.0},
            {"model": "minilm-embed", "version": "v1", "footprint_mib": 90.0, "last_used": 999.0},
        ],
        loads=4,
        evictions=2,
        recent=[
            {"kind": "load", "at": 900.0, "load_seconds": 3.0},
            {"kind": "load", "at": 980.0, "load_seconds": 1.0},
            {"kind": "evict", "at": 985.0},
            {"kind": "load", "at": 990.0, "load_seconds": 2.0},
        ],
    )
    gone = state(
        "w-gone",
        2,
        live=False,
        held_mib=90.0,
        resident=[{"model": "minilm-embed", "version": "v1", "footprint_mib": 90.0}],
        loads=1,
        recent=[{"kind": "load", "at": 970.0, "load_seconds": 4.0}],
    )
    figures = pool_figures([live, gone], now=1_000.0, window=60.0)
    # what the live worker holds, most recently used first; nothing of the gone one's
    assert [(r.model, r.footprint_mib, r.worker) for r in figures.resident] == [
        ("minilm-embed", 90.0, "w-live"),
        ("digits-cnn", 5.0, "w-live"),
    ]
    assert figures.held_mib == {"w-live": 95.0} and figures.budget_mib == 300.0
    # counts over both; rates over the last minute; load times over all remembered
    assert (figures.loads, figures.evictions) == (5, 2)
    assert figures.loads_per_minute == 3.0 and figures.evictions_per_minute == 1.0
    assert figures.load_p50_seconds == 2.0 and figures.load_p99_seconds == 4.0


def test_the_local_status_shows_each_pool_and_each_pooled_models_cold_loads(tmp_path):
    # GIVEN a platform record with a pool, the pool's worker's state, and no scaling
    # file (the workers observed from their ready files)
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "router.log").write_text("")
    me = os.getpid()
    (tmp_path / f"worker-{POOL}-0.ready").write_text(f"host-{me}")
    (tmp_path / f"worker-{POOL}-0{POOL_STATE_SUFFIX}").write_text(
        json.dumps(
            state(
                f"host-{me}",
                me,
                held_mib=90.0,
                resident=[{"model": "minilm-embed", "version": "v1", "footprint_mib": 90.0}],
                loads=3,
                evictions=2,
                loads_by_model={"minilm-embed": 2, "digits-cnn": 1},
            )
        )
    )
    info = {
        "queues": {
            m: {"realtime": f"http://q/1/{m}-rt", "batch": f"http://q/1/{m}-b"} for m in MODELS
        },
        "services": {POOL: list(MODELS)},
        "pools": {POOL: {"models": list(MODELS), "memory_budget_mib": 300}},
    }

    class NoMetrics:
        def get_metric_data(self, **_):
            return {"MetricDataResults": []}

    reader = LocalStatusReader(Path(tmp_path), info, cloudwatch=NoMetrics(), clock=lambda: 1e9)
    # WHEN it reads
    status = reader.read()
    # THEN the pool has its worker, what it holds and its counts
    pool = status.pools[POOL]
    assert pool.workers.running == 1 and pool.source == "observed"
    assert [(r.model, r.footprint_mib) for r in pool.resident] == [("minilm-embed", 90.0)]
    assert (pool.loads, pool.evictions) == (3, 2)
    # AND each pooled model its pool, its pool's workers and its cold loads
    assert status.models["digits-cnn"].pool == POOL
    assert status.models["digits-cnn"].workers.running == 1
    assert status.models["minilm-embed"].cold_loads == 2
    doc = status.as_dict()
    assert doc["pools"][POOL]["resident"][0]["model"] == "minilm-embed"
    assert doc["pools"][POOL]["loads"] == 3 and doc["pools"][POOL]["evictions"] == 2
    # AND the table says the same
    text = format_status(status)
    assert f"pool {POOL}: minilm-embed, digits-cnn" in text
    assert f"worker-{POOL}-0 holds 90.0 MiB: minilm-embed v1 90.0 MiB" in text
    assert "cold loads per model: minilm-embed 2, digits-cnn 1" in text


def test_a_deployed_pools_figures_are_its_workers_metrics():
    class CloudWatch:
        """GetMetricData from (metric, dimension values, stat) -> values."""

        values = {
            ("ModelLoads", (POOL,), "Sum"): [6.0, 3.0],
            ("ModelEvictions", (POOL,), "Sum"): [4.0],
            ("ModelLoads", (POOL, "digits-cnn"), "Sum"): [2.0],
            ("ModelLoadTime", (POOL,), "p50"): [120.0],
            ("ModelLoadTime", (POOL,), "p99"): [1500.0],
        }

        def get_metric_data(self, **kwargs):
            results = []
            for query in kwargs["MetricDataQueries"]:
                stat = query["MetricStat"]
                assert stat["Metric"]["Namespace"] == "Switchyard"
                dims = tuple(d["Value"] for d in stat["Metric"]["Dimensions"])
                values = self.values.get((stat["Metric"]["MetricName"], dims, stat["Stat"]), [])
                results.append(
                    {
                        "Id": query["Id"],
                        "Values": values,
                        "Timestamps": [kwargs["EndTime"]] * len(values),
                    }
                )
            return {"MetricDataResults": results}

    figures = pool_metrics(CloudWatch(), {POOL: list(MODELS)}, now=1e9, window=300)[POOL]
    assert (figures.status.loads, figures.status.evictions) == (9, 4)
    assert figures.status.loads_per_minute == 1.8 and figures.status.refusals == 0
    assert (figures.status.load_p50_seconds, figures.status.load_p99_seconds) == (0.12, 1.5)
    assert figures.loads_by_model == {"minilm-embed": 0, "digits-cnn": 2}


def test_a_manifest_is_pooled_and_cut_down_line_by_line():
    text = pooled(own_models_text(), POOL, MODELS, memory_budget_mib=150, scaling={"max_tasks": 1})
    manifest = Manifest.model_validate(tomllib.loads(text))
    assert manifest.services() == {"pydoc-gpt": ("pydoc-gpt",), POOL: MODELS}
    assert manifest.pool_scaling_policy(POOL, "dev").max_tasks == 1
    assert "# A small GPT-2 trained at setup" in text  # comments kept
    # a pool none of whose models is kept goes with them
    alone = tomllib.loads(edit_manifest(text, keep_models={"pydoc-gpt"}))
    assert "pools" not in alone and set(alone["models"]) == {"pydoc-gpt"}
    kept = Manifest.model_validate(tomllib.loads(edit_manifest(text, keep_models={"digits-cnn"})))
    assert kept.services() == {POOL: ("digits-cnn",)}
