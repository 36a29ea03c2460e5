"""Checking routing documents, the rollback rule and the local controller."""

from __future__ import annotations

import json
import random

import pytest

from switchyard.manifest import RolloutLimits
from switchyard.routing import RoutingDocument, rolled_back
from switchyard.telemetry import (
    COUNT,
    MILLISECONDS,
    metrics_document,
    request_dimension_sets,
)
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
    noise_z=4.0,
    noise_min_count=5,
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


def test_a_canary_failing_where_stable_does_not_is_rolled_back():
    verdict = judge(CANARY, {"v1": stats(200, 0, 20), "v2": stats(25, 25, 20)}, LIMITS, 500)
    assert "error rate 100.0%" in verdict["v2"] and "stable's 0.0%" in verdict["v2"]


@pytest.mark.parametrize(
    ("stable_errors", "canary_errors", "rolled_back"),
    [
        (90, 10, False),  # both fail 10 %: the model fails, not the canary
        (180, 10, False),  # stable fails more
        (0, 4, False),  # 4 % against none: worse, but within the 5 % limit
        (9, 10, True),  # 10 % against 1 %: over the limit, and by the canary's doing
    ],
)
def test_an_error_rate_over_the_limit_counts_only_where_stable_is_better(
    stable_errors, canary_errors, rolled_back
):
    # GIVEN 900 stable and 100 canary requests in the window
    s = {"v1": stats(900, stable_errors, 20), "v2": stats(100, canary_errors, 20)}
    # WHEN the canary is judged
    verdict = judge(CANARY, s, LIMITS, 500)
    # THEN it is rolled back only when it fails more than stable by the margin
    assert ("v2" in verdict) is rolled_back


def test_an_error_excess_within_sampling_noise_is_not_rolled_back():
    # 3 of 30 against 6 of 270: 10 % against 2 %, but a small sample's luck
    assert judge(CANARY, {"v1": stats(270, 6, 20), "v2": stats(30, 3, 20)}, LIMITS, 500) == {}
    # the same rates over ten times the requests are no luck
    verdict = judge(CANARY, {"v1": stats(2700, 54, 20), "v2": stats(300, 30, 20)}, LIMITS, 500)
    assert "beyond noise" in verdict["v2"]


@pytest.mark.parametrize(
    ("stable_p99", "canary_p99", "rolled_back"),
    [
        (1380, 1404, False),  # the whole model is saturated: both over the SLO
        (400, 700, False),  # over the SLO, but within twice stable's p99
        (20, 50, False),  # 2.5 times stable's, but within the SLO
        (100, 600, True),  # over the SLO, and six times stable's
    ],
)
def test_a_p99_over_the_slo_counts_only_where_stable_is_much_faster(
    stable_p99, canary_p99, rolled_back
):
    s = {"v1": stats(200, 0, stable_p99), "v2": stats(30, 0, canary_p99)}
    verdict = judge(CANARY, s, LIMITS, 500)
    assert ("v2" in verdict) is rolled_back
    if rolled_back:
        assert "> SLO 500 ms and > 2 x stable's 100 ms" in verdict["v2"]


def test_without_a_stable_baseline_the_canary_is_judged_alone():
    # GIVEN a stable version with fewer requests than a judgement needs
    few = stats(LIMITS.min_requests - 1, 0, 2000)
    # WHEN the canary breaks an absolute limit THEN it is rolled back on it alone
    slow = judge(CANARY, {"v1": few, "v2": stats(100, 0, 900)}, LIMITS, 500)
    assert "SLO" in slow["v2"] and "too few" in slow["v2"]
    failing = judge(CANARY, {"v2": stats(100, 10, 20)}, LIMITS, 500)
    assert "error rate" in failing["v2"] and "too few" in failing["v2"]
    # but not within them
    assert judge(CANARY, {"v1": few, "v2": stats(100, 3, 300)}, LIMITS, 500) == {}


def saturated(rng, requests, error_rate, median_ms):
    """A window of a saturated version: latencies spread around a queue's wait."""
    latencies = [median_ms * rng.lognormvariate(0, 0.35) for _ in range(requests)]
    errors = sum(rng.random() < error_rate for _ in range(requests))
    return VersionStats(requests, errors, latencies)


def test_identical_versions_at_saturation_are_never_parted_by_noise():
    # GIVEN 300 windows of two identical versions at 90/10, both far over the SLO
    # and both failing 8 % of their requests
    rng = random.Random(1)
    windows = [
        {"v1": saturated(rng, 270, 0.08, 1400), "v2": saturated(rng, 30, 0.08, 1400)}
        for _ in range(300)
    ]
    # WHEN each is judged
    verdicts = [judge(CANARY, w, LIMITS, 500) for w in windows]
    # THEN none rolls the canary back
    assert [v for v in verdicts if v] == []
    # while a canary that fails 40 % against the same stable version is caught
    caught = sum(
        bool(judge(CANARY, {**w, "v2": saturated(rng, 100, 0.40, 1400)}, LIMITS, 500))
        for w in windows
    )
    assert caught >= 0.9 * len(windows)


def paused(rng, requests, median_ms, slow_share, slow_ms):
    """A window of a version under its SLO but for the requests a pause caught."""
    latencies = [
        slow_ms if rng.random() < slow_share else median_ms * rng.lognormvariate(0, 0.35)
        for _ in range(requests)
    ]
    return VersionStats(requests, 0, latencies)


def test_identical_versions_are_never_parted_by_one_slow_request():
    # GIVEN 300 windows of two identical versions at 90/10 well under the SLO, where
    # a pause makes one request in 200 take over a second
    rng = random.Random(2)
    windows = [
        {"v1": paused(rng, 450, 120, 0.005, 1160), "v2": paused(rng, 50, 120, 0.005, 1160)}
        for _ in range(300)
    ]
    # (the canary's p99, its slowest request or nearly, is over the SLO and many
    # times stable's in a fifth of them)
    over = [w for w in windows if w["v2"].p99_ms > max(500, 2 * w["v1"].p99_ms)]
    assert len(over) >= 0.1 * len(windows)
    # WHEN each is judged THEN none rolls the canary back
    assert [v for w in windows if (v := judge(CANARY, w, LIMITS, 500))] == []
    # while a canary that keeps one request in five waiting over a second is caught
    caught = [
        judge(CANARY, {**w, "v2": paused(rng, 50, 120, 1 / 5, 1160)}, LIMITS, 500) for w in windows
    ]
    assert sum("requests over the SLO" in v.get("v2", "") for v in caught) >= 0.9 * len(windows)


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


def emf(at, version, latency, error, role="stable"):
    """A request's document as the router writes it (``switchyard.telemetry``): per
    version, per model and per role; a pinned request's has no version set."""
    values = {
        "Requests": (COUNT, 1.0),
        "Latency": (MILLISECONDS, latency),
        "Errors": (COUNT, 1.0 if error else 0.0),
    }
    first, *more = request_dimension_sets("digits-cnn", version, role)
    doc = metrics_document(values, *more, **first)
    doc["_aws"]["Timestamp"] = int(at * 1000)
    return json.dumps(doc)


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
    assert change.by == "rollback-controller" and "v2: error rate 100.0%" in change.why
    assert seen[0][0] == "digits-cnn"
    assert controller.check_once(now=1001.0) == []  # nothing left to roll back


def test_the_controller_keeps_a_canary_as_slow_as_stable_under_overload(tmp_path, manifest):
    # GIVEN a router log in which both versions answer far over the 500 ms SLO
    log = tmp_path / "router.log"
    lines = [emf(995 + i * 0.01, "v1", 1380 + i % 30, False) for i in range(270)]
    lines += [emf(995 + i * 0.01, "v2", 1404 - i % 30, False) for i in range(30)]
    log.write_text("\n".join(lines) + "\n")
    store = MemoryStore(RoutingDocument(weights={"v1": 90, "v2": 10}), at=990.0)
    # WHEN the controller checks THEN the canary keeps its share
    assert RollbackController(store, MetricsWindow(log, 60), manifest).check_once(1000.0) == []
    assert len(store.changes) == 1


def test_documents_that_concurrent_prints_put_on_one_line_all_count(tmp_path):
    # GIVEN two EMF documents on one line (threads printing at once), then a blank one
    log = tmp_path / "router.log"
    pair = emf(999.0, "v1", 20, False) + emf(999.1, "v2", 30, True)
    log.write_text("\n".join([pair, "", "noise " + emf(999.2, "v2", 40, False), "{bad"]) + "\n")
    window = MetricsWindow(log, 60)
    # WHEN the window reads the log
    window.poll(now=1000.0)
    stats = window.stats("digits-cnn", since=990.0)
    # THEN every document is a sample
    assert (stats["v1"].requests, stats["v2"].requests, stats["v2"].errors) == (1, 2, 1)


def test_each_request_is_one_sample_of_its_version_and_one_of_its_model(tmp_path):
    # GIVEN a log of two routed requests and one pinned to a version (the caller's
    # choice: no sample of a rollout), each one document with its dimension sets
    log = tmp_path / "router.log"
    lines = [emf(999.0, "v1", 20, False), emf(999.1, "v2", 30, True, role="canary")]
    lines.append(emf(999.2, "v2", 40, True, role="pinned"))
    log.write_text("\n".join(lines) + "\n")
    versions, totals = MetricsWindow(log, 60), MetricsWindow(log, 60, totals=True)
    # WHEN both windows read it
    versions.poll(now=1000.0)
    totals.poll(now=1000.0)
    # THEN the rollback rule sees the routed requests per version, once each
    by_version = versions.stats("digits-cnn", since=990.0)
    assert {v: (s.requests, s.errors) for v, s in by_version.items()} == {
        "v1": (1, 0),
        "v2": (1, 1),
    }
    # AND the model's totals count every request once
    overall = totals.overall("digits-cnn", since=990.0)
    assert (overall.requests, overall.errors) == (3, 2)


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
