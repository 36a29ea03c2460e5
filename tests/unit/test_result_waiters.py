"""Sync requests' looks for their results, read together (ResultWaiters), and the
wait around them in PredictService: deadlines, fallbacks and the look schedule."""

from __future__ import annotations

import threading
import time

import pytest

from harness.fakes import FakeQueue, FakeResults
from harness.router_app import predict_service
from switchyard.queues import ModelLanes
from switchyard.routing import RoutingDocument
from switchyard.schemas import QueueMessage, ResultRecord
from switchyard_router.logic import LookSchedule, PredictService
from switchyard_router.waiters import ResultWaiters
from tests.unit.test_router_traffic import IMAGE, ScriptedWorkers, StaticRouting


def final(tenant: str, request_id: str) -> ResultRecord:
    return ResultRecord(
        request_id=request_id,
        tenant=tenant,
        model="m",
        version="v1",
        status="done",
        outputs=[request_id],
        created_at=time.time(),
        completed_at=time.time(),
        expires_at=int(time.time()) + 60,
    )


class CountedResults(FakeResults):
    """Results that log each single read too (``get_many`` logs its own)."""

    def get(self, tenant: str, request_id: str) -> ResultRecord | None:
        self.log.append(("get", request_id))
        return super().get(tenant, request_id)


def reads(results: FakeResults) -> list[tuple]:
    return [e for e in results.log if e[0] in ("get", "get_many")]


def in_threads(*calls) -> list:
    """Each call run on a thread of its own; their returns (or exceptions), in order."""
    out: list = [None] * len(calls)

    def run(i: int) -> None:
        try:
            out[i] = calls[i]()
        except Exception as exc:  # noqa: BLE001 - the test reads it
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads)
    return out


def test_looks_that_fall_due_together_are_one_read_and_each_gets_its_own_record():
    # GIVEN three requests whose results are stored, and looks due at the same time
    results = CountedResults()
    for rid in ("r1", "r2", "r3"):
        results.complete(final("acme", rid))
    announced = threading.Barrier(3)
    hub = ResultWaiters(results, sleep=lambda _s: announced.wait(5), together_s=5.0)
    waiters = [hub.join("acme", rid) for rid in ("r1", "r2", "r3")]
    # WHEN each looks, once all three have said when
    found = in_threads(*(lambda w=w: hub.look(w, 0.01) for w in waiters))
    # THEN one read of the three keys answered them, each with its own record
    assert [r.request_id for r in found] == ["r1", "r2", "r3"]
    assert reads(results) == [("get_many", 3)]


def test_a_look_is_not_held_for_looks_due_later_and_none_is_read_before_its_time():
    # GIVEN two waiting requests: one looks now, the other's look is due in a minute
    results = CountedResults()
    results.complete(final("acme", "now"))
    later_may_look = threading.Event()
    hub = ResultWaiters(results, sleep=lambda _s: later_may_look.wait(10), together_s=0.01)
    early, late = hub.join("acme", "now"), hub.join("acme", "later")
    looking_later = threading.Thread(target=hub.look, args=(late, 60.0))
    looking_later.start()
    # WHEN the first looks
    record = hub.look(early, 0.0)
    # THEN it was read alone (its own GetItem), at once; the later look was not read
    # with it
    assert record is not None and record.request_id == "now"
    assert reads(results) == [("get", "now")]
    later_may_look.set()
    looking_later.join(10)
    assert reads(results) == [("get", "now"), ("get", "later")]


def test_a_read_that_fails_fails_each_look_in_it():
    class Failing(FakeResults):
        def get(self, tenant, request_id):
            raise ConnectionError("results table unreachable")

    hub = ResultWaiters(Failing())
    waiter = hub.join("acme", "r1")
    with pytest.raises(ConnectionError):
        hub.look(waiter, 0.0)
    hub.leave(waiter)


# -- the wait in PredictService --------------------------------------------------------


def service_over(versions, behaviour, document=None, sleep=time.sleep):
    results = CountedResults()
    realtime = ScriptedWorkers(results, behaviour)
    lanes = {"digits-cnn": ModelLanes(realtime=realtime, batch=FakeQueue("batch"))}
    routing = StaticRouting(document) if document else None
    service = predict_service(lanes, *versions, results=results, routing=routing, sleep=sleep)
    return service, realtime, results


def ask(service: PredictService, deadline_ms: int, user: str = "u1"):
    admitted = service.submit(
        model="digits-cnn",
        tenant="acme",
        inputs=[IMAGE],
        sticky_headers={"x-user-id": user},
        deadline_ms=deadline_ms,
    )
    return admitted, service.answer(admitted)


def test_looks_follow_the_schedule_until_the_deadline_hands_the_request_off(digits_v1):
    # GIVEN a model no worker answers, and a request of 100 ms
    pauses: list[float] = []

    def sleep(seconds: float) -> None:
        pauses.append(seconds)
        time.sleep(seconds)

    service, _, results = service_over([digits_v1], {}, sleep=sleep)
    # WHEN it is waited for
    admitted, outcome = ask(service, 100)
    # THEN it is handed off at its deadline: answered 202, its queued record written
    assert outcome.record is None and outcome.status == 202
    assert results.get("acme", admitted.request_id).status == "queued"
    # AND it looked where the schedule said: first at its one look for a model not seen
    # yet, then a quarter of the wait apart (at least 5 ms), each look its own read
    (first,) = LookSchedule().looks("digits-cnn")
    assert 0 < pauses[0] <= first
    assert all(p >= 0.005 for p in pauses[1:-1])
    looks = reads(results)
    assert looks == [("get", admitted.request_id)] * len(looks)
    assert len(looks) >= len(pauses)  # a look already due (at the deadline) sleeps 0


def test_a_failed_attempt_sends_the_fallback_once_however_often_it_is_seen(digits_v1, digits_v2):
    # GIVEN v2 chosen, failing every attempt, and v1 its fallback, silent
    doc = RoutingDocument(weights={"v1": 0, "v2": 100}, fallback="v1")
    service, realtime, results = service_over(
        [digits_v1, digits_v2], {"v2": "fail", "v1": "silent"}, doc
    )
    # WHEN the request is waited for until its deadline
    admitted, outcome = ask(service, 150)
    # THEN the failure was seen at several looks, the fallback asked once, and the
    # request handed off
    assert len(reads(results)) > 2
    sent = [QueueMessage.model_validate_json(m["body"]) for m in realtime.visible]
    assert [(m.version, m.fallback) for m in sent] == [("v2", False), ("v1", True)]
    assert admitted.fell_back == "failure" and outcome.status == 202


def test_requests_waiting_together_each_end_their_own_way(digits_v1, digits_v2):
    # GIVEN one user's requests go to v2, which fails (v1, its fallback, answers), and
    # another's to v1, which answers
    doc = RoutingDocument(weights={"v1": 50, "v2": 50}, fallback="v1")
    service, realtime, _ = service_over([digits_v1, digits_v2], {"v2": "fail", "v1": "answer"}, doc)
    users = {}
    for n in range(200):  # a user of each version, by the sticky hash
        version = service.choose_version("digits-cnn", f"user{n}", doc).version
        users.setdefault(version, f"user{n}")
    # WHEN both wait at once
    (a, on_v2), (b, on_v1) = in_threads(
        lambda: ask(service, 2000, users["v2"]), lambda: ask(service, 2000, users["v1"])
    )
    # THEN each is answered: the first by the fallback, sent for it alone
    assert on_v2.status == 200 and on_v2.fell_back and a.fell_back == "failure"
    assert on_v1.status == 200 and not on_v1.fell_back and b.fell_back is None
    fallbacks = [
        m
        for m in (QueueMessage.model_validate_json(x["body"]) for x in realtime.visible)
        if m.fallback
    ]
    assert [m.request_id for m in fallbacks] == [a.request_id]
