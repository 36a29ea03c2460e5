"""Checking routing documents, the rollback rule and the local controller."""

from __future__ import annotations

import json

import pytest

from switchyard.manifest import RolloutLimits
from switchyard.routing import RoutingDocument, rolled_back
from switchyard_local.controller import MetricsWindow, RollbackController
from switchyard_local.traffic import (
    Change,
    TrafficError,
    VersionStats,
    check_document,
    document_from_args,
    judge,
)

LIMITS = RolloutLimits(
    window_seconds=60,
    min_requests=20,
    max_error_rate=0.05,
    max_error_rate_over_stable=0.02,
    max_p99_ratio=2.0,
)


@pytest.fixture
def versions(digits_v1, digits_v2, manifest):
    v3 = manifest.models["digits-cnn"].version_record(
        "digits-cnn", "v3", "s3://a/b", "0" * 64, created_at=3.0
    )
    old = v3.model_copy(update={"version": "v0", "status": "retired", "created_at": 0.5})
    return {v.version: v for v in (digits_v1, digits_v2, v3, old)}


def raw(*weights, **kw):
    return document_from_args(
        list(weights),
        sticky=kw.get("sticky"),
        shadow=kw.get("shadow"),
        fallback=kw.get("fallback"),
        previous=None,
    )


def test_a_valid_document_is_ordered_oldest_version_first(versions):
    doc = check_document(raw("v2=10", "v1=90", shadow="v3:5", fallback="v1"), versions)
    assert list(doc.weights) == ["v1", "v2"]
    assert doc.shadow.version == "v3" and doc.shadow.percent == 5
    assert doc.fallback == "v1"


@pytest.mark.parametrize(
    ("args", "kw", "message"),
    [
        (["v1=90", "v2=20"], {}, "sum to 110, not 100"),
        (["v1=90", "v9=10"], {}, "unknown version 'v9'"),
        (["v0=100"], {}, "version 'v0' is retired"),
        (["v1=100"], {"fallback": "v7"}, "unknown version 'v7'"),
        (["v1=100"], {"shadow": "v2:101"}, "shadow"),
        (["v1=150"], {}, "weights.v1"),
    ],
)
def test_bad_documents_are_refused_with_a_clear_message(versions, args, kw, message):
    with pytest.raises(TrafficError, match=message):
        check_document(raw(*args, **kw), versions)


@pytest.mark.parametrize(
    ("args", "kw", "message"),
    [
        (["v1"], {}, "expected VERSION=PERCENT"),
        (["v1=ten"], {}, "whole number"),
        (["v1=100"], {"shadow": "v2"}, "expected VERSION:PERCENT"),
    ],
)
def test_bad_arguments_are_refused(args, kw, message):
    with pytest.raises(TrafficError, match=message):
        raw(*args, **kw)


def stats(requests, errors, latency):
    return VersionStats(requests, errors, [latency] * requests)


CANARY = RoutingDocument(weights={"v1": 90, "v2": 10})


def test_a_failing_canary_is_judged_on_its_absolute_error_rate():
    verdict = judge(CANARY, {"v1": stats(200, 0, 20), "v2": stats(25, 25, 20)}, LIMITS, 500)
    assert "error rate 100%" in verdict["v2"]


def test_a_canary_is_judged_relative_to_stable():
    s = {"v1": stats(1000, 0, 20), "v2": VersionStats(100, 4, [20] * 100)}
    assert "stable" in judge(CANARY, s, LIMITS, 500)["v2"]


def test_a_slow_canary_is_judged_on_p99_absolute_and_relative():
    assert (
        "SLO"
        in judge(CANARY, {"v1": stats(100, 0, 20), "v2": stats(30, 0, 600)}, LIMITS, 500)["v2"]
    )
    relative = judge(CANARY, {"v1": stats(100, 0, 20), "v2": stats(30, 0, 50)}, LIMITS, 500)
    assert "x stable" in relative["v2"]


def test_a_healthy_or_unproven_canary_is_left_alone():
    assert judge(CANARY, {"v1": stats(100, 0, 20), "v2": stats(30, 0, 25)}, LIMITS, 500) == {}
    assert judge(CANARY, {"v1": stats(100, 0, 20), "v2": stats(5, 5, 20)}, LIMITS, 500) == {}
    assert judge(RoutingDocument(weights={"v1": 100}), {"v1": stats(50, 50, 20)}, LIMITS, 500) == {}


def test_rollback_gives_the_canary_share_to_stable_and_keeps_the_order():
    doc = RoutingDocument(weights={"v1": 80, "v2": 20}, fallback="v1")
    back = rolled_back(doc, ["v2"])
    assert back.weights == {"v1": 100, "v2": 0}
    assert back.fallback == "v1"


class MemoryStore:
    def __init__(self, document, at=0.0):
        self.changes = [Change(1, document, "operator", at, "canary")]

    def history(self, model, limit=10):
        return [c for c in reversed(self.changes) if c.document is not None][:limit]

    def deployed(self, model):
        return self.changes[-1] if model == "digits-cnn" else None

    def publish(self, model, document, by, why):
        change = Change(len(self.changes) + 1, document, by, 1000.0, why)
        self.changes.append(change)
        return change


def emf(at, version, latency, error):
    return json.dumps(
        {
            "_aws": {"Timestamp": int(at * 1000), "CloudWatchMetrics": []},
            "model": "digits-cnn",
            "version": version,
            "Requests": [1.0],
            "Latency": [latency],
            "Errors": [1.0 if error else 0.0],
        }
    )


def test_the_controller_rolls_back_a_failing_canary_from_the_router_log(tmp_path, manifest):
    log = tmp_path / "router.log"
    lines = ["INFO: uvicorn noise"]
    lines += [emf(995 + i * 0.01, "v1", 20, False) for i in range(100)]
    lines += [emf(995 + i * 0.01, "v2", 20, True) for i in range(30)]
    log.write_text("\n".join(lines) + "\n")
    store = MemoryStore(RoutingDocument(weights={"v1": 90, "v2": 10}), at=990.0)
    seen = []
    controller = RollbackController(
        store, MetricsWindow(log, 60), manifest, lambda m, c: seen.append((m, c))
    )

    (change,) = controller.check_once(now=1000.0)

    assert change.document.weights == {"v1": 100, "v2": 0}
    assert change.by == "rollback-controller" and "v2: error rate 100%" in change.why
    assert seen[0][0] == "digits-cnn"
    assert controller.check_once(now=1001.0) == []  # nothing left to roll back


def test_the_controller_ignores_samples_from_before_the_current_document(tmp_path, manifest):
    log = tmp_path / "router.log"
    log.write_text("\n".join(emf(980 + i * 0.01, "v2", 20, True) for i in range(30)) + "\n")
    store = MemoryStore(RoutingDocument(weights={"v1": 90, "v2": 10}), at=990.0)
    assert RollbackController(store, MetricsWindow(log, 60), manifest).check_once(1000.0) == []


def test_an_idle_platform_costs_the_controller_no_reads(tmp_path, manifest):
    # GIVEN no request in the window (an idle platform)
    store = MemoryStore(RoutingDocument(weights={"v1": 90, "v2": 10}), at=990.0)
    reads = []
    deployed = store.deployed
    store.deployed = lambda model: reads.append(model) or deployed(model)
    controller = RollbackController(store, MetricsWindow(tmp_path / "router.log", 60), manifest)
    # WHEN it checks
    assert controller.check_once(1000.0) == []
    # THEN it asked the store for no document
    assert reads == []
    # but once a model has traffic, its document is read
    (tmp_path / "router.log").write_text(emf(999.0, "v1", 20, False) + "\n")
    controller.check_once(1000.0)
    assert reads == ["digits-cnn"]
