"""``switchyard status`` and the dashboard's figures (``switchyard_local.status``,
``switchyard_cli.status``, ``switchyard_local.dashboard``): reading the
supervisor's scaling file, counting the router's requests, reading CloudWatch's
answers, and the text and history made of them. Fakes stand in for the clients;
no sockets."""

from __future__ import annotations

import datetime as dt
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest

from harness.scaling_scenarios import SAMPLE_POLICY
from switchyard.routing import RoutingDocument
from switchyard.scaling import LaneSignals
from switchyard.telemetry import COUNT, MILLISECONDS, metrics_document, request_dimension_sets
from switchyard_cli.status import (
    cluster_name_prefix,
    format_status,
    scaling_activity_decision,
    service_name_marker,
)
from switchyard_local.autoscaler import Autoscaler, WorkerCounts
from switchyard_local.controller import CONTROLLER, MetricsWindow
from switchyard_local.dashboard import (
    Dashboard,
    History,
    RoutingView,
    loopback_host,
    rollbacks,
    routing_summary,
)
from switchyard_local.routing_changes import Change
from switchyard_local.status import (
    LaneFigures,
    LocalStatusReader,
    ModelStatus,
    RequestFigures,
    Status,
    WorkerFigures,
    observe_workers,
    parse_scaling_file,
    queue_figures,
    read_scaling_file,
    request_figures,
)

MODEL = "minilm-embed"
POLICY = SAMPLE_POLICY


class Queues:
    def read(self) -> dict[str, dict[str, LaneSignals]]:
        return {MODEL: {"realtime": LaneSignals(25, 3, 4.25), "batch": LaneSignals(0, 0, 0.0)}}


class Workers:
    def __init__(self) -> None:
        self.started = 0

    def counts(self, model: str) -> WorkerCounts:
        return WorkerCounts(running=0, starting=self.started)

    def start(self, model: str, count: int) -> list[str]:
        self.started += count
        return [f"worker-{model}-{i}" for i in range(count)]

    def stop(self, model: str, count: int) -> list[str]:
        return []


def emf(model: str, latency: float, at_ms: float) -> str:
    """A request's document as the router writes it: per version, per model and per
    role."""
    first, *more = request_dimension_sets(model, "v1", "stable")
    doc = metrics_document(
        {"Requests": (COUNT, 1.0), "Latency": (MILLISECONDS, latency), "Errors": (COUNT, 0.0)},
        *more,
        **first,
    )
    doc["_aws"]["Timestamp"] = int(at_ms)
    return json.dumps(doc)


def router_log(path: Path, requests: list[tuple[float, float]], model: str = MODEL) -> None:
    with open(path, "a") as fh:
        for at, latency in requests:
            fh.write(emf(model, latency, at * 1000) + "\n")


# -- the scaling file -----------------------------------------------------------------


def test_the_autoscalers_state_file_reads_as_workers_lanes_and_decisions(tmp_path):
    # GIVEN the state file the supervisor's autoscaler writes after a round that woke
    # a model from zero
    clock = [2_000.0]
    autoscaler = Autoscaler(
        {MODEL: POLICY},
        Queues(),
        Workers(),
        io.StringIO(),
        state_path=tmp_path / "scaling.json",
        announce=lambda _: None,
        wall_clock=lambda: clock[0],
    )
    autoscaler.tick()
    clock[0] += 1
    autoscaler.tick()

    # WHEN status reads it two seconds later
    models, fresh = read_scaling_file(tmp_path / "scaling.json", now=2_003.0)

    # THEN the figures are the autoscaler's, the last decision a hold and the last
    # change the wake, each with its reason
    assert fresh
    entry = models[MODEL]
    assert entry.workers == WorkerFigures(running=0, starting=3, desired=3, draining=0)
    assert entry.lanes["realtime"] == LaneFigures(visible=25, in_flight=3, oldest_age_seconds=4.2)
    assert entry.lanes["realtime"].depth == 28
    assert entry.last_change is not None and entry.last_change["action"] == "wake"
    assert entry.last_change["desired"] == 3 and entry.last_change["at"] == 2_000.0
    assert "no worker" in entry.last_change["reason"]
    assert entry.last_change["inputs"]["lanes"]["realtime"]["visible"] == 25
    assert entry.last_decision is not None and entry.last_decision["action"] == "hold"


def test_a_scaling_file_not_rewritten_for_a_while_is_stale(tmp_path):
    path = tmp_path / "scaling.json"
    path.write_text(json.dumps({"updated_at": 1_000.0, "models": {MODEL: {}}}))
    assert read_scaling_file(path, now=1_010.0)[1]
    assert not read_scaling_file(path, now=1_016.0)[1]


@pytest.mark.parametrize("text", ["", "{not json", "[]", '{"models": 3}'])
def test_a_missing_or_broken_scaling_file_reads_as_nothing(tmp_path, text):
    path = tmp_path / "scaling.json"
    if text:
        path.write_text(text)
    models, fresh = read_scaling_file(path, now=0.0)
    assert models == {} and not fresh


def test_unknown_fields_of_a_scaling_file_read_as_none():
    models = parse_scaling_file(
        {"models": {MODEL: {"workers": {"running": "2"}, "lanes": {"realtime": {"x": 1}}}}}
    )
    assert models[MODEL].workers == WorkerFigures(running=2)
    assert models[MODEL].lanes["batch"] == LaneFigures()
    assert models[MODEL].last_decision is None


# -- requests from the router's log -----------------------------------------------------


def test_each_request_counts_once_whatever_documents_the_router_wrote(tmp_path):
    # GIVEN ten requests in the last minute and one older, each written three times
    # by the router (per version, per model, per role)
    log = tmp_path / "router.log"
    router_log(log, [(1_000.0 + i, 10.0 * (i + 1)) for i in range(10)] + [(900.0, 1.0)])
    router_log(log, [(1_005.0, 99.0)], model="digits-cnn")

    # WHEN the model's totals are read over the window
    window = MetricsWindow(log, 60, totals=True)
    window.poll(now=1_010.0)
    stats = window.overall(MODEL, since=950.0)

    # THEN each request counts once, with its latency
    assert stats.requests == 10 and stats.errors == 0
    assert stats.p50_ms == 50.0 and stats.p99_ms == 100.0
    figures = RequestFigures.from_stats(stats, 60)
    assert figures.per_second == round(10 / 60, 3)


def test_the_per_version_samples_the_rollback_rule_reads_are_unchanged(tmp_path):
    log = tmp_path / "router.log"
    router_log(log, [(1_000.0, 10.0), (1_001.0, 20.0)])
    window = MetricsWindow(log, 60)
    window.poll(now=1_002.0)
    assert {v: s.requests for v, s in window.stats(MODEL, since=0).items()} == {"v1": 2}


def test_a_reader_of_a_long_log_starts_near_its_end(tmp_path):
    # GIVEN a log much longer than the tail a reader starts with
    log = tmp_path / "router.log"
    router_log(log, [(1_000.0 + i / 100, 5.0) for i in range(2_000)])
    size = log.stat().st_size

    # WHEN a reader starts with a tail of a tenth of it, then the router writes more
    window = MetricsWindow(log, 600, totals=True, tail_bytes=size // 10)
    window.poll(now=1_030.0)
    first = window.overall(MODEL, since=0).requests
    router_log(log, [(1_025.0, 5.0)])
    window.poll(now=1_030.0)

    # THEN it read about a tenth of the requests (the cut line is dropped), and then
    # the new one
    assert 150 <= first <= 200
    assert window.overall(MODEL, since=0).requests == first + 1


# -- observed workers -------------------------------------------------------------------


def test_workers_are_observed_from_ready_files_and_live_processes(tmp_path):
    # GIVEN a running worker (its ready file names a live process), a stale ready
    # file (a process long gone), and a process still loading
    me = os.getpid()
    (tmp_path / f"worker-{MODEL}-0.ready").write_text(f"host-{me}")
    (tmp_path / f"worker-{MODEL}-1.ready").write_text("host-999999999")
    (tmp_path / f"worker-{MODEL}-extra-0.ready").write_text(f"host-{me}")  # another model
    processes = {
        me: str(tmp_path / f"worker-{MODEL}-0.ready"),
        me + 1: str(tmp_path / f"worker-{MODEL}-2.ready"),
        me + 2: str(tmp_path / "elsewhere" / f"worker-{MODEL}-3.ready"),
    }

    # WHEN they are counted
    workers = observe_workers(tmp_path, [MODEL], lambda: processes)

    # THEN one runs and one starts; the desired count is not known
    assert workers[MODEL] == WorkerFigures(running=1, starting=1, desired=None)


# -- CloudWatch ------------------------------------------------------------------------


class FakeCloudWatch:
    """Answers GetMetricData from ``values``: (namespace, metric, dimension value,
    stat) -> values, newest first; fails for the stats in ``failing``."""

    def __init__(self, values: dict[tuple[str, str, str, str], list[float]]) -> None:
        self.values = values
        self.calls: list[dict[str, Any]] = []

    def get_metric_data(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        results = []
        for query in kwargs["MetricDataQueries"]:
            stat = query["MetricStat"]
            metric = stat["Metric"]
            key = (
                metric["Namespace"],
                metric["MetricName"],
                metric["Dimensions"][0]["Value"],
                stat["Stat"],
            )
            values = self.values.get(key, [])
            now = kwargs["EndTime"]
            stamps = [now - dt.timedelta(minutes=i) for i in range(len(values))]
            results.append({"Id": query["Id"], "Values": values, "Timestamps": stamps})
        return {"MetricDataResults": results}


def test_queue_figures_are_each_queues_newest_sqs_metrics():
    cloudwatch = FakeCloudWatch(
        {
            ("AWS/SQS", "ApproximateNumberOfMessagesVisible", "q-rt", "Maximum"): [12.0, 3.0],
            ("AWS/SQS", "ApproximateNumberOfMessagesNotVisible", "q-rt", "Maximum"): [4.0],
            ("AWS/SQS", "ApproximateAgeOfOldestMessage", "q-rt", "Maximum"): [7.26],
        }
    )
    figures = queue_figures(cloudwatch, {MODEL: {"realtime": "q-rt", "batch": "q-b"}}, 1e9)
    assert figures[MODEL]["realtime"] == LaneFigures(12, 4, 7.3)
    assert figures[MODEL]["batch"] == LaneFigures()  # no datapoints: not known


def test_request_figures_come_from_the_routers_metrics_over_one_period():
    cloudwatch = FakeCloudWatch(
        {
            ("Switchyard", "Requests", MODEL, "Sum"): [300.0, 60.0],
            ("Switchyard", "Errors", MODEL, "Sum"): [3.0],
            ("Switchyard", "Latency", MODEL, "p50"): [40.0, 41.0],
            ("Switchyard", "Latency", MODEL, "p99"): [210.0, 250.0],
        }
    )
    figures = request_figures(cloudwatch, [MODEL], now=1e9, window=300)[MODEL]
    assert figures.count == 360 and figures.errors == 3
    assert figures.per_second == round(360 / 300, 3)
    assert (figures.p50_ms, figures.p99_ms) == (41.0, 250.0)  # the whole period's
    assert cloudwatch.calls[0]["MetricDataQueries"][0]["MetricStat"]["Period"] == 300


def test_an_emulator_that_cannot_compute_percentiles_still_gives_counts():
    class NoPercentiles(FakeCloudWatch):
        def get_metric_data(self, **kwargs: Any) -> dict[str, Any]:
            if any(q["MetricStat"]["Stat"].startswith("p") for q in kwargs["MetricDataQueries"]):
                raise RuntimeError("p99 is not supported")
            return super().get_metric_data(**kwargs)

    cloudwatch = NoPercentiles({("Switchyard", "Requests", MODEL, "Sum"): [30.0]})
    figures = request_figures(cloudwatch, [MODEL], now=1e9, window=300)[MODEL]
    assert figures.count == 30 and figures.p99_ms is None


def test_a_scaling_activity_reads_as_a_decision():
    decision = scaling_activity_decision(
        {
            "StartTime": dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
            "Description": "Setting desired count to 3.",
            "Cause": "monitor alarm sy-dev-minilm-embed-scale-out in state ALARM triggered "
            "policy ScaleOut",
            "StatusCode": "Successful",
        }
    )
    assert decision["desired"] == 3 and decision["action"] == "Successful"
    assert decision["at"] == dt.datetime(2026, 1, 1, tzinfo=dt.UTC).timestamp()
    assert decision["reason"].startswith("monitor alarm")


def test_worker_services_are_looked_for_under_the_names_cloudformation_gives_them(manifest):
    names = manifest.names("dev")
    assert cluster_name_prefix(names) == f"{names.base}-serving-ComputeCluster"
    assert service_name_marker("minilm-embed") == "-ModelminilmembedWorkerService"


# -- the local reader ------------------------------------------------------------------


def test_without_a_fresh_scaling_file_the_local_reader_observes_for_itself(tmp_path):
    # GIVEN a run folder without a scaling file, one request in the router's log, and
    # an emulator whose CloudWatch knows the realtime queue
    (tmp_path / "logs").mkdir()
    router_log(tmp_path / "logs" / "router.log", [(995.0, 30.0)])
    info = {"queues": {MODEL: {"realtime": "http://sqs/1/q-rt", "batch": "http://sqs/1/q-b"}}}
    cloudwatch = FakeCloudWatch(
        {("AWS/SQS", "ApproximateNumberOfMessagesVisible", "q-rt", "Maximum"): [5.0]}
    )
    reader = LocalStatusReader(tmp_path, info, cloudwatch=cloudwatch, clock=lambda: 1_000.0)

    # WHEN it reads
    status = reader.read()

    # THEN the figures are its own observations, marked so
    figures = status.models[MODEL]
    assert figures.source == "observed"
    assert figures.lanes["realtime"].visible == 5
    assert figures.workers == WorkerFigures(running=0, starting=0)
    assert figures.requests.count == 1 and figures.requests.p99_ms == 30.0
    assert status.as_dict()["models"][MODEL]["lanes"]["realtime"]["depth"] == 5


# -- text ------------------------------------------------------------------------------


def status_of(**models: ModelStatus) -> Status:
    return Status(at=1_000.0, substrate="local", models=dict(models))


def test_the_table_has_a_row_per_model_and_a_dash_for_what_is_not_known():
    busy = ModelStatus(
        workers=WorkerFigures(2, 1, 3),
        lanes={"realtime": LaneFigures(40, 8, 12.5), "batch": LaneFigures(0, 0, 0.0)},
        requests=RequestFigures(60, 120, 0, 2.0, 35.0, 180.0),
        last_decision={"at": 990.0, "action": "hold", "desired": 3, "reason": "cool-down"},
        last_change={"at": 980.0, "action": "scale_out", "desired": 3, "reason": "backlog"},
        source="supervisor",
    )
    text = format_status(status_of(**{MODEL: busy, "digits-cnn": ModelStatus()}))
    lines = text.splitlines()
    row = next(line for line in lines if line.startswith(MODEL))
    assert row.split() == ["minilm-embed", "2", "1", "3", "40", "8", "12.5", "s", "0", "0"] + [
        "0.0",
        "s",
        "2.0",
        "35.0",
        "180",
        "0",
    ]
    quiet = next(line for line in lines if line.startswith("digits-cnn"))
    assert set(quiet.split()[1:]) == {"-"}
    assert any("scale_out → 3: backlog" in line for line in lines)
    assert any("hold → 3: cool-down" in line for line in lines)
    assert any("digits-cnn" in line and "none yet" in line for line in lines)


# -- the dashboard's history and routing -----------------------------------------------


def test_the_history_keeps_the_last_points_of_each_model():
    history = History(points=3)
    for i in range(5):
        history.add(
            Status(
                at=float(i),
                substrate="local",
                models={
                    MODEL: ModelStatus(
                        workers=WorkerFigures(i, 0, i),
                        lanes={"realtime": LaneFigures(i, 1, 2.0), "batch": LaneFigures()},
                    )
                },
            )
        )
    points = history.of(MODEL)
    assert [p["at"] for p in points] == [2.0, 3.0, 4.0]
    assert points[-1]["depth"] == {"realtime": 5, "batch": None}
    assert points[-1]["age"]["realtime"] == 2.0
    assert points[-1]["workers"] == {"running": 4, "starting": 0, "desired": 4}


def change(number: int, weights: dict[str, int], by: str, state: str = "deployed") -> Change:
    return Change(number, RoutingDocument(weights=weights), by, 100.0 + number, "why", state)


def test_the_routing_view_shows_the_split_and_only_the_rollbacks():
    class Store:
        def __init__(self) -> None:
            self.changes = [
                change(3, {"v1": 100, "v2": 0}, CONTROLLER),
                change(2, {"v1": 90, "v2": 10}, "ops"),
                change(1, {"v1": 100}, "provisioner"),
            ]
            self.reads = 0

        def deployed(self, model: str) -> Change | None:
            return self.changes[0]

        def history(self, model: str, limit: int = 10) -> list[Change]:
            self.reads += 1
            return self.changes[:limit]

    store = Store()
    view = RoutingView(store)  # type: ignore[arg-type]
    view.refresh([MODEL])
    view.refresh([MODEL])  # nothing new: not read again
    shown = view.of(MODEL)
    assert shown["routing"]["weights"] == {"v1": 100, "v2": 0}
    assert shown["routing"]["change"] == 3 and shown["routing"]["by"] == CONTROLLER
    assert [r["change"] for r in shown["rollbacks"]] == [3]
    assert store.reads == 1
    assert routing_summary(None) is None
    assert [
        r["change"] for r in rollbacks([change(7, {"v1": 100}, "AppConfig", "rolled_back")])
    ] == [7]


def test_the_served_document_is_the_status_with_history_and_routing():
    # GIVEN a dashboard whose status reads fail once after two good reads
    reads = iter([1.0, 2.0, None])

    def read() -> Status:
        at = next(reads)
        if at is None:
            raise ConnectionError("the emulator is gone")
        return status_of(**{MODEL: ModelStatus(workers=WorkerFigures(1, 0, 1))})

    dashboard = Dashboard(read, None, about={"url": "http://127.0.0.1:8080"})

    # WHEN it samples three times
    for _ in range(3):
        dashboard.sample()
    doc = json.loads(dashboard.document())

    # THEN the last good figures are served with their history, and the error
    assert doc["models"][MODEL]["workers"]["running"] == 1
    assert len(doc["models"][MODEL]["history"]) == 2
    assert "the emulator is gone" in doc["error"]
    assert doc["platform"]["url"] == "http://127.0.0.1:8080"
    assert b"<svg" not in dashboard.page() and b"data-chart" in dashboard.page()


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("127.0.0.1:8081", True),
        ("localhost:8081", True),
        ("[::1]:8081", True),
        ("LOCALHOST", True),
        ("evil.example:8081", False),
        ("127.0.0.1.evil.example", False),
        (None, False),
    ],
)
def test_only_loopback_hosts_are_served(host, allowed):
    assert loopback_host(host) is allowed
