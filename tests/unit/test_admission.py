"""A tenant's caps on streams and sync requests at once (switchyard.admission), the
router's 429 at a cap, and the manifest's concurrency budget."""

from __future__ import annotations

import threading
import tomllib

import pytest
from pydantic import ValidationError

from harness.fakes import (
    FakeQueue,
    FakeResults,
    version_record,
)
from harness.router_app import predict_service, router_client
from stacks.assets import MANIFEST_FILE
from switchyard.admission import Admission, AtCapacity, InMemorySlotStore
from switchyard.manifest import Manifest
from switchyard.queues import ModelLanes
from tests.unit.test_router_app import IMAGE, KEYS, InstantQueue
from tests.unit.test_together import while_one_is_out

LEASES = {"streams": 300.0, "sync_requests": 30.0}


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def admission(store=None, clock=None, **limits):
    caps = {"acme": {"streams": 2, "sync_requests": 3}, **limits}
    return Admission(store or InMemorySlotStore(), caps, LEASES, 7, clock or Clock())


def test_a_tenant_at_its_cap_is_refused_with_when_to_retry():
    # GIVEN acme holding both of its streams
    caps = admission()
    caps.take("acme", "streams")
    caps.take("acme", "streams")
    # WHEN it asks for a third
    with pytest.raises(AtCapacity) as refused:
        caps.take("acme", "streams")
    # THEN it is refused, with its limit and a Retry-After
    assert refused.value.limit == 2 and refused.value.retry_after_seconds == 7
    assert "2 streams" in str(refused.value)
    # AND its sync requests are counted apart
    assert caps.take("acme", "sync_requests") is not None


def test_a_slot_given_back_is_free_again_and_giving_back_twice_changes_nothing():
    store = InMemorySlotStore()
    caps = admission(store)
    first = caps.take("acme", "streams")
    caps.take("acme", "streams")
    caps.give_back(first)
    caps.give_back(first)
    assert caps.take("acme", "streams") is not None
    with pytest.raises(AtCapacity):
        caps.take("acme", "streams")


def test_a_crashed_holders_slot_is_reclaimed_after_its_lease():
    # GIVEN acme's two streams held by routers that died without giving them back
    clock = Clock()
    caps = admission(clock=clock)
    caps.take("acme", "streams")
    caps.take("acme", "streams")
    # WHEN the leases have run out
    clock.now += LEASES["streams"] + 1
    # THEN the next stream is admitted, and the cap holds again after it
    caps.take("acme", "streams")
    caps.take("acme", "streams")
    with pytest.raises(AtCapacity):
        caps.take("acme", "streams")


def test_one_tenant_at_its_cap_leaves_another_alone_and_an_unnamed_tenant_is_uncapped():
    caps = admission(globex={"streams": 1, "sync_requests": 1})
    caps.take("acme", "streams")
    caps.take("acme", "streams")
    assert caps.take("globex", "streams") is not None
    assert caps.take("initech", "streams") is None  # no limits given: not counted


def test_holding_gives_the_slot_back_however_the_block_ends():
    store = InMemorySlotStore()
    caps = admission(store)
    with pytest.raises(RuntimeError), caps.holding("acme", "sync_requests"):
        raise RuntimeError("the request failed")
    assert store.held[("acme", "sync_requests")] == {}


def test_a_failure_to_give_back_is_not_the_callers():
    class Broken(InMemorySlotStore):
        def give_back(self, slots):
            raise ConnectionError("DynamoDB is unreachable")

    caps = admission(Broken())
    with caps.holding("acme", "sync_requests") as slot:
        assert slot is not None  # and leaving the block raises nothing


def test_slots_wanted_while_a_take_is_out_are_taken_together_each_answered_its_own():
    # GIVEN acme's cap of three sync requests, a take being written
    class HeldStore(InMemorySlotStore):
        def __init__(self) -> None:
            super().__init__()
            self.calls: list[int] = []
            self.first_in = threading.Event()
            self.release = threading.Event()

        def take(self, wanted, now):
            self.calls.append(len(wanted))
            if len(self.calls) == 1:
                self.first_in.set()
                assert self.release.wait(10)
            return super().take(wanted, now)

    store = HeldStore()
    caps = admission(store)
    answers: list[str] = []

    def request() -> None:
        try:
            caps.take("acme", "sync_requests")
            answers.append("admitted")
        except AtCapacity:
            answers.append("429")

    # WHEN three more requests want one while it is out
    while_one_is_out(
        caps._taking, request, [request] * 3, store.first_in, store.release
    )
    # THEN the three are taken in one call, and each is answered by its own slot:
    # two admitted, one refused at the cap
    assert store.calls == [1, 3]
    assert sorted(answers) == ["429", "admitted", "admitted", "admitted"]
    assert len(store.held[("acme", "sync_requests")]) == 3


# The router: 429 with Retry-After, in the platform's error shape or OpenAI's.


@pytest.fixture
def capped(digits_v1):
    results = FakeResults()
    lanes = {
        "digits-cnn": ModelLanes(realtime=InstantQueue(results, True), batch=FakeQueue("b")),
        "pydoc-gpt": ModelLanes(realtime=FakeQueue("realtime"), batch=FakeQueue("batch")),
        "minilm-embed": ModelLanes(realtime=FakeQueue("realtime"), batch=FakeQueue("batch")),
    }
    store = InMemorySlotStore()
    caps = Admission(
        store,
        {"acme": {"streams": 1, "sync_requests": 1}, "globex": {"streams": 1, "sync_requests": 1}},
        LEASES,
        5,
    )
    versions = (digits_v1, version_record("pydoc-gpt"), version_record("minilm-embed"))
    service = predict_service(lanes, *versions, results=results, admission=caps)
    return router_client(service, KEYS), caps, store, lanes


@pytest.mark.parametrize(
    ("path", "body", "kind", "code"),
    [
        ("/v1/models/digits-cnn/predict", {"inputs": [IMAGE]}, "sync_requests",
         "too_many_requests"),
        ("/v1/models/pydoc-gpt/generate", {"prompt": "x", "stream": True}, "streams",
         "too_many_streams"),
        ("/v1/models/pydoc-gpt/generate", {"prompt": "x"}, "sync_requests",
         "too_many_requests"),
    ],
)  # fmt: skip
def test_the_router_answers_429_at_the_cap_and_enqueues_nothing(capped, path, body, kind, code):
    # GIVEN acme holding its one slot of the kind this request needs
    client, caps, _, lanes = capped
    caps.take("acme", kind)
    # WHEN it sends one more
    response = client.post(path, json=body, headers={"x-api-key": "k-acme", "x-deadline-ms": "50"})
    # THEN 429, Retry-After, the platform's error shape; nothing is queued
    assert response.status_code == 429, response.text
    assert response.headers["retry-after"] == "5"
    assert response.json() == {"message": response.json()["message"], "code": code}
    assert lanes["pydoc-gpt"].realtime.visible == []


def test_the_openai_api_answers_its_own_429_shape(capped):
    client, caps, _, lanes = capped
    caps.take("acme", "streams")
    response = client.post(
        "/openai/v1/chat/completions",
        json={"model": "pydoc-gpt", "stream": True, "messages": [{"role": "user", "content": "x"}]},
        headers={"x-api-key": "k-acme"},
    )
    assert response.status_code == 429 and response.headers["retry-after"] == "5"
    error = response.json()["error"]
    assert error["type"] == "rate_limit_error" and error["code"] == "too_many_streams"
    assert lanes["pydoc-gpt"].realtime.visible == []


def test_another_tenant_is_answered_and_a_sync_slot_is_given_back_after_its_answer(capped):
    # GIVEN acme at both of its caps
    client, caps, store, _ = capped
    caps.take("acme", "streams")
    caps.take("acme", "sync_requests")
    # WHEN globex predicts, twice (its cap is one at a time)
    for _ in range(2):
        response = client.post(
            "/v1/models/digits-cnn/predict",
            json={"inputs": [IMAGE]},
            headers={"x-api-key": "k-globex"},
        )
        # THEN each is answered, and its slot is free once it is
        assert response.status_code == 200, response.text
    assert store.held[("globex", "sync_requests")] == {}


def test_an_async_request_holds_no_slot(capped):
    client, caps, _, _ = capped
    caps.take("acme", "sync_requests")
    response = client.post(
        "/v1/models/digits-cnn/predict?async=true",
        json={"inputs": [IMAGE]},
        headers={"x-api-key": "k-acme"},
    )
    assert response.status_code == 202, response.text


# The manifest's budget.


def manifest_with(change) -> dict:
    document = tomllib.loads(MANIFEST_FILE.read_text())
    change(document)
    return document


def test_the_manifest_refuses_reservations_that_leave_less_than_the_unreserved_minimum():
    def over(document):
        document["stages"]["prod"]["concurrency"]["account_limit"] = 300

    with pytest.raises(ValidationError, match=r"stages\.prod\.concurrency: the functions reserve"):
        Manifest.model_validate(manifest_with(over))


def test_the_manifest_refuses_a_tier_cap_that_could_fill_a_function():
    def greedy(document):
        budget = document["stages"]["dev"]["concurrency"]
        document["tiers"]["premium"]["max_streams"] = budget["generation"]

    with pytest.raises(ValidationError, match=r"tiers\.premium\.max_streams"):
        Manifest.model_validate(manifest_with(greedy))


def test_per_model_families_reserve_for_each_of_their_functions(manifest):
    budget = manifest.stages["prod"].concurrency
    reserved = manifest.reserved_concurrency("prod")
    generating = [m for m, spec in manifest.models.items() if spec.generates]
    pooled = [m for m, spec in manifest.models.items() if spec.pool is not None]
    own = len(manifest.models) - len(generating) - len(pooled)
    assert pooled and own
    assert reserved["generation"] == budget.generation * len(generating)
    assert reserved["predict"] == budget.predict * own
    # the shipped manifest leaves pooled_predict unset: pooled routers reserve nothing
    assert budget.pooled_predict is None and reserved["pooled_predict"] == 0
    assert all(budget.router_reservation(manifest.models[m]) is None for m in pooled)
    assert sum(reserved.values()) <= budget.account_limit - 100


def test_pooled_routers_reserve_pooled_predict_each_once_it_is_set():
    def reserve(document):
        for stage in document["stages"].values():
            stage["concurrency"] |= {"account_limit": 2000, "pooled_predict": 70}

    manifest = Manifest.model_validate(manifest_with(reserve))
    pooled = [m for m, spec in manifest.models.items() if spec.pool is not None]
    for stage in ("dev", "prod"):
        budget = manifest.stages[stage].concurrency
        assert manifest.reserved_concurrency(stage)["pooled_predict"] == 70 * len(pooled)
        assert {budget.router_reservation(manifest.models[m]) for m in pooled} == {70}


def test_a_tier_cap_must_stay_under_pooled_predict_once_it_is_set():
    def tight(document):
        for stage in document["stages"].values():
            stage["concurrency"] |= {"account_limit": 2000, "pooled_predict": 64}

    # premium's max_sync_requests is 64: one tenant could hold every pooled router
    with pytest.raises(ValidationError, match=r"tiers\.premium\.max_sync_requests: 64 is not "):
        Manifest.model_validate(manifest_with(tight))


def test_unset_pooled_routers_share_the_unreserved_rest_which_a_tier_cap_must_stay_under():
    def greedy(document):
        # every reservation over the cap, but prod leaves only 130 unreserved
        for stage in document["stages"].values():
            stage["concurrency"] |= {"account_limit": 1300, "predict": 300, "openai": 300}
        document["tiers"]["premium"]["max_sync_requests"] = 200

    with pytest.raises(ValidationError, match=r"max_sync_requests: 200 is not under the 130 of"):
        Manifest.model_validate(manifest_with(greedy))
