"""The local rollback controller (``switchyard_local.controller``): request
samples read from the router's EMF lines, and the canary rule applied to them."""

from __future__ import annotations

import json

from switchyard.routing import RoutingDocument
from switchyard.telemetry import (
    COUNT,
    MILLISECONDS,
    metrics_document,
    request_dimension_sets,
)
from switchyard_local.controller import MetricsWindow, RollbackController
from switchyard_local.routing_changes import Change


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
