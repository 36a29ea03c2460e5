"""Routing, shadow and fallback in the router, on in-memory stores."""

from __future__ import annotations

import base64
import json
import struct
import time

import pytest

from harness.fakes import (
    FakeQueue,
    FakeResults,
    answered,
)
from harness.router_app import predict_service, router_client
from switchyard.queues import ModelLanes
from switchyard.routing import RoutingDocument
from switchyard.schemas import QueueMessage, ResultRecord
from switchyard.telemetry import dimension_sets

IMAGE = [0] * 64


class ScriptedWorkers(FakeQueue):
    """Plays the workers: per version, answer, fail an attempt, or stay silent."""

    def __init__(self, results: FakeResults, behaviour: dict[str, str]) -> None:
        super().__init__("realtime")
        self.results = results
        self.behaviour = behaviour

    def send(self, body: str, group: str) -> None:
        super().send(body, group)
        m = QueueMessage.model_validate_json(body)
        action = self.behaviour.get(m.version, "silent")
        if action == "fail":
            queued = ResultRecord.queued_for(m, int(m.expires_at))
            self.results.mark_failed(queued, "batch failed")
        elif action == "answer":
            output = {"class": int(m.version[1:])}
            self.results.complete(answered(m, output, received_at=time.time()))


class StaticRouting:
    def __init__(self, document: RoutingDocument) -> None:
        self.doc = document

    def document(self, model: str) -> RoutingDocument:
        return self.doc


def make(digits_v1, digits_v2, document, behaviour):
    results = FakeResults()
    realtime = ScriptedWorkers(results, behaviour)
    batch = FakeQueue("batch")
    lanes = {"digits-cnn": ModelLanes(realtime=realtime, batch=batch)}
    service = predict_service(
        lanes, digits_v1, digits_v2, results=results, routing=StaticRouting(document)
    )
    keys = {"k": "acme", "g": "globex"}
    return router_client(service, keys, max_body_bytes=100_000), realtime, batch, service


def predict(client, user="u1", deadline="2000", **headers):
    return client.post(
        "/v1/models/digits-cnn/predict",
        json={"inputs": [IMAGE]},
        headers={"x-api-key": "k", "x-user-id": user, "x-deadline-ms": deadline, **headers},
    )


def test_a_pinned_request_goes_to_its_version_only(digits_v1, digits_v2):
    doc = RoutingDocument(
        weights={"v1": 100, "v2": 0}, shadow={"version": "v2", "percent": 100}, fallback="v2"
    )
    client, realtime, batch, _ = make(digits_v1, digits_v2, doc, {"v1": "fail", "v2": "answer"})
    by_header = predict(client, deadline="300", **{"x-model-version": "v1"})
    # v1 fails its attempt and would be answered by the fallback, but a pinned
    # request has none, and no shadow copy either.
    assert by_header.status_code == 202
    assert by_header.headers["x-model-version"] == "v1"
    assert batch.visible == []
    sent = [json.loads(m["body"])["version"] for m in realtime.visible]
    assert sent == ["v1"]
    by_body = client.post(
        "/v1/models/digits-cnn/predict",
        json={"inputs": [IMAGE], "params": {"version": "v2"}},
        headers={"x-api-key": "k"},
    )
    assert by_body.status_code == 200 and by_body.json()["version"] == "v2"


@pytest.mark.parametrize(
    ("headers", "body", "status", "field"),
    [
        ({"x-model-version": "v9"}, {}, 404, "version"),
        ({}, {"params": {"version": "v9"}}, 404, "version"),
        ({"x-model-version": "v1"}, {"params": {"version": "v2"}}, 422, "params.version"),
        ({}, {"params": {"version": 2}}, 422, "params.version"),
        ({}, {"params": {"other": 1}}, 422, "params.other"),
        ({}, {"params": []}, 422, "params"),
    ],
)
def test_a_bad_pin_is_refused_and_enqueues_nothing(
    digits_v1, digits_v2, headers, body, status, field
):
    doc = RoutingDocument(weights={"v1": 100, "v2": 0})
    client, realtime, batch, _ = make(digits_v1, digits_v2, doc, {"v1": "answer"})
    response = client.post(
        "/v1/models/digits-cnn/predict",
        json={"inputs": [IMAGE], **body},
        headers={"x-api-key": "k", **headers},
    )
    assert response.status_code == status, response.text
    assert response.json()["errors"][0]["field"] == field
    assert realtime.visible == [] and batch.visible == []
    if status == 404:
        assert "v9" in response.json()["message"] and "v1" in response.json()["message"]


def test_an_inactive_version_cannot_be_pinned(digits_v1, digits_v2):
    retired = digits_v2.model_copy(update={"status": "retired"})
    doc = RoutingDocument(weights={"v1": 100})
    client, realtime, _, _ = make(digits_v1, retired, doc, {"v1": "answer"})
    response = predict(client, **{"x-model-version": "v2"})
    assert response.status_code == 404
    assert "not active" in response.json()["message"]
    assert realtime.visible == []


def test_cancel_a_queued_request_and_not_a_finished_one(digits_v1, digits_v2):
    doc = RoutingDocument(weights={"v1": 100, "v2": 0})
    client, realtime, _, _ = make(digits_v1, digits_v2, doc, {"v2": "answer"})
    queued = client.post(
        "/v1/models/digits-cnn/predict?async=true",
        json={"inputs": [IMAGE]},
        headers={"x-api-key": "k"},
    ).json()["request_id"]
    done = predict(client, **{"x-model-version": "v2"}).json()["request_id"]
    other_tenant = {"x-api-key": "g"}
    assert client.delete(f"/v1/requests/{queued}", headers=other_tenant).status_code == 404
    assert client.get(f"/v1/requests/{queued}", headers=other_tenant).status_code == 404
    cancelled = client.delete(f"/v1/requests/{queued}", headers={"x-api-key": "k"})
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    again = client.get(f"/v1/requests/{queued}", headers={"x-api-key": "k"})
    assert again.json()["status"] == "cancelled"
    finished = client.delete(f"/v1/requests/{done}", headers={"x-api-key": "k"})
    assert finished.status_code == 409
    assert finished.json()["code"] == "already_finished" and finished.json()["status"] == "done"
    assert client.get(f"/v1/requests/{done}", headers={"x-api-key": "k"}).json()["outputs"]
    missing = client.delete("/v1/requests/nope", headers={"x-api-key": "k"})
    assert missing.status_code == 404


def test_work_expires_at_the_deadline_plus_grace_or_the_lanes_maximum_age(digits_v1, digits_v2):
    doc = RoutingDocument(weights={"v1": 100})
    client, realtime, _, service = make(digits_v1, digits_v2, doc, {})
    before = time.time()
    predict(client, deadline="100")
    client.post(
        "/v1/models/digits-cnn/predict?async=true",
        json={"inputs": [IMAGE]},
        headers={"x-api-key": "k"},
    )
    sync, async_ = (json.loads(m["body"]) for m in realtime.visible)
    assert before + 0.1 + 60 <= sync["expires_at"] <= time.time() + 0.1 + 60
    assert before + 3600 <= async_["expires_at"] <= time.time() + 3600


def test_a_request_still_queued_after_its_work_expired_reads_as_expired(digits_v1, digits_v2):
    doc = RoutingDocument(weights={"v1": 100})
    client, realtime, _, service = make(digits_v1, digits_v2, doc, {})
    now = [time.time()]
    service._clock = lambda: now[0]
    rid = client.post(
        "/v1/models/digits-cnn/predict?async=true",
        json={"inputs": [IMAGE]},
        headers={"x-api-key": "k"},
    ).json()["request_id"]
    assert (
        client.get(f"/v1/requests/{rid}", headers={"x-api-key": "k"}).json()["status"] == "queued"
    )
    now[0] += 3601
    answer = client.get(f"/v1/requests/{rid}", headers={"x-api-key": "k"}).json()
    assert answer["status"] == "expired" and answer["error"]["code"] == "expired"


def test_the_routing_document_decides_and_the_response_says_which_version(digits_v1, digits_v2):
    doc = RoutingDocument(weights={"v1": 0, "v2": 100})
    client, *_ = make(digits_v1, digits_v2, doc, {"v1": "answer", "v2": "answer"})
    response = predict(client)
    assert response.json()["version"] == "v2" and response.headers["x-model-version"] == "v2"
    assert response.json()["fallback"] is False


def test_a_failed_attempt_is_answered_by_the_fallback_once(digits_v1, digits_v2):
    doc = RoutingDocument(weights={"v1": 0, "v2": 100}, fallback="v1")
    client, realtime, _, _ = make(digits_v1, digits_v2, doc, {"v1": "answer", "v2": "fail"})
    response = predict(client)
    assert response.status_code == 200
    body = response.json()
    assert body["fallback"] is True and body["version"] == "v1"
    assert response.headers["x-model-version"] == "v1"
    sent = [json.loads(m["body"]) for m in realtime.visible]
    assert [(m["version"], m.get("fallback", False)) for m in sent] == [("v2", False), ("v1", True)]
    assert sent[0]["request_id"] == sent[1]["request_id"]  # one request, one result


def test_a_near_deadline_asks_the_fallback(digits_v1, digits_v2):
    doc = RoutingDocument(weights={"v1": 0, "v2": 100}, fallback="v1")
    client, *_ = make(digits_v1, digits_v2, doc, {"v1": "answer", "v2": "silent"})
    response = predict(client, deadline="300")
    assert response.status_code == 200 and response.json()["fallback"] is True


def test_without_a_fallback_a_failing_version_ends_in_202(digits_v1, digits_v2):
    doc = RoutingDocument(weights={"v1": 0, "v2": 100})
    client, *_ = make(digits_v1, digits_v2, doc, {"v2": "fail"})
    assert predict(client, deadline="200").status_code == 202


def test_shadow_copies_go_to_the_batch_lane_and_never_change_the_response(digits_v1, digits_v2):
    plain = RoutingDocument(weights={"v1": 100, "v2": 0})
    shadowed = RoutingDocument(
        weights={"v1": 100, "v2": 0}, shadow={"version": "v2", "percent": 100}
    )
    behaviour = {"v1": "answer", "v2": "answer"}
    client_a, _, batch_a, _ = make(digits_v1, digits_v2, plain, behaviour)
    client_b, _, batch_b, service = make(digits_v1, digits_v2, shadowed, behaviour)
    a, b = predict(client_a), predict(client_b)
    # The copy was sent before the response: nothing runs after a Lambda handler
    # returns, so no background work is waited for here.
    strip = lambda r: {k: v for k, v in r.json().items() if k not in ("request_id", "timings")}  # noqa: E731
    assert strip(a) == strip(b)
    assert batch_a.visible == []
    (copy,) = [json.loads(m["body"]) for m in batch_b.visible]
    assert copy["version"] == "v2" and copy["lane"] == "batch"
    assert copy["shadow_of"] == b.json()["request_id"]
    assert batch_b.visible[0]["group"] == "shadow:acme"


def test_tensor_rows_travel_as_one_block_of_numbers_in_every_copy(digits_v1, digits_v2):
    # GIVEN a version that fails its attempt, a fallback, and a shadow copy
    doc = RoutingDocument(
        weights={"v1": 0, "v2": 100}, fallback="v1", shadow={"version": "v1", "percent": 100}
    )
    client, realtime, batch, _ = make(digits_v1, digits_v2, doc, {"v1": "answer", "v2": "fail"})
    image = [i / 4 for i in range(64)]
    # WHEN a request is answered by the fallback
    response = client.post(
        "/v1/models/digits-cnn/predict",
        json={"inputs": [image, IMAGE]},
        headers={"x-api-key": "k", "x-deadline-ms": "2000"},
    )
    assert response.status_code == 200 and response.json()["fallback"] is True
    # THEN the request, its fallback and its shadow copy each carry its rows as one
    # block of float64 numbers, not as JSON
    sent = [json.loads(m["body"]) for m in realtime.visible + batch.visible]
    assert [(m["version"], m["lane"]) for m in sent] == [
        ("v2", "realtime"), ("v1", "realtime"), ("v1", "batch"),
    ]  # fmt: skip
    for message in sent:
        assert "inputs" not in message and message["n_inputs"] == 2
        values = struct.unpack("<128d", base64.b64decode(message["tensor"], validate=True))
        assert list(values) == image + IMAGE


@pytest.mark.parametrize("percent", [10])
def test_the_shadow_share_is_about_its_percent(digits_v1, digits_v2, percent):
    from switchyard.routing import shadow_version

    doc = RoutingDocument(weights={"v1": 100}, shadow={"version": "v2", "percent": percent})
    picked = sum(shadow_version(doc, f"req-{i}", "v1") == "v2" for i in range(2000))
    assert 0.07 * 2000 <= picked <= 0.13 * 2000


def test_the_sticky_key_is_the_header_the_document_names(digits_v1, digits_v2):
    doc = RoutingDocument(weights={"v1": 50, "v2": 50}, sticky_key="x-session")
    client, *_ = make(digits_v1, digits_v2, doc, {"v1": "answer", "v2": "answer"})

    def version(session: str, user: str) -> str:
        response = client.post(
            "/v1/models/digits-cnn/predict?async=true",
            json={"inputs": [IMAGE]},
            headers={"x-api-key": "k", "x-session": session, "x-user-id": user},
        )
        return response.json()["version"]

    sessions = [f"s{i}" for i in range(40)]
    by_session = {s: version(s, "alice") for s in sessions}
    assert by_session == {s: version(s, "bob") for s in sessions}
    assert set(by_session.values()) == {"v1", "v2"}


def test_locations_carry_the_api_gateway_stage():
    from starlette.requests import Request

    from switchyard_router.answers import base_path

    behind_gateway = Request({"type": "http", "aws.event": {"requestContext": {"stage": "dev"}}})
    assert base_path(behind_gateway) == "/dev"
    assert base_path(Request({"type": "http"})) == ""


def test_metrics_say_whether_a_canary_or_the_stable_version_answered(digits_v1, digits_v2, capsys):
    """The cloud's canary alarms compare (model, role) metrics: each request counts
    once under its role, and a failure answered by the fallback counts against the
    canary that failed."""
    doc = RoutingDocument(weights={"v1": 90, "v2": 10}, fallback="v1")
    client, *_ = make(digits_v1, digits_v2, doc, {"v1": "answer", "v2": "fail"})
    capsys.readouterr()
    answered = [predict(client, user=f"user-{i}").json() for i in range(60)]
    by_role: dict[str, list[float]] = {"canary": [], "stable": []}
    for line in capsys.readouterr().out.splitlines():
        emf = json.loads(line) if line.startswith("{") else {}
        if "Latency" in emf:
            # One document per request, filed per version, per model and per role.
            assert dimension_sets(emf) == [["model", "version"], ["model"], ["model", "role"]]
            assert emf["model"] == "digits-cnn"
            (errors,) = emf["Errors"]
            by_role[emf["role"]].append(errors)
    fell_back = sum(r["fallback"] for r in answered)
    assert 0 < fell_back < 60  # both versions were chosen
    assert len(by_role["canary"]) == fell_back and set(by_role["canary"]) == {1.0}
    assert len(by_role["stable"]) == 60 - fell_back and set(by_role["stable"]) == {0.0}
