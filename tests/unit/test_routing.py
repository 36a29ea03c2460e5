from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from harness.fakes import FakeRegistry, version_record
from switchyard.jobs import JobRejected, job_version
from switchyard.routing import CachedRouting, RoutingDocument, load_schema, pick_version


def keys(n: int) -> list[str]:
    return [f"user-{i}" for i in range(n)]


def test_same_key_keeps_its_version():
    doc = RoutingDocument(weights={"v1": 50, "v2": 50})
    first = [pick_version(doc, k) for k in keys(500)]
    again = [pick_version(doc, k) for k in keys(500)]
    assert first == again


def test_split_follows_the_weights():
    doc = RoutingDocument(weights={"v1": 90, "v2": 10})
    picks = [pick_version(doc, k) for k in keys(2000)]
    share = picks.count("v2") / len(picks)
    # 2000 Bernoulli(0.1) draws: the standard deviation is ~0.0067; 4 sigma bounds.
    assert 0.073 <= share <= 0.127


def test_raising_the_canary_only_moves_keys_into_it():
    before = RoutingDocument(weights={"v1": 90, "v2": 10})
    after = RoutingDocument(weights={"v1": 80, "v2": 20})
    moved_out = [k for k in keys(3000) if pick_version(before, k) == "v2" != pick_version(after, k)]
    moved_in = [k for k in keys(3000) if pick_version(before, k) == "v1" != pick_version(after, k)]
    assert moved_out == []
    assert 200 <= len(moved_in) <= 400  # about 10 % of 3000


def test_zero_weight_version_gets_nothing():
    doc = RoutingDocument(weights={"v1": 100, "v2": 0})
    assert {pick_version(doc, k) for k in keys(500)} == {"v1"}


@pytest.mark.parametrize(
    ("doc", "fragment"),
    [
        ({"weights": {"v1": 90, "v2": 20}}, "sum to 110"),
        ({"weights": {}}, "weights"),
        ({"weights": {"v1": 100}, "surprise": 1}, "surprise"),
        ({"weights": {"v1": 100}, "shadow": {"version": "v2", "percent": 101}}, "percent"),
    ],
)
def test_invalid_documents_are_refused_with_the_field(doc, fragment):
    with pytest.raises(ValidationError) as info:
        RoutingDocument.model_validate(doc)
    assert fragment in str(info.value)


def test_the_json_schema_accepts_a_valid_document_and_names_its_properties():
    schema = load_schema()
    doc = RoutingDocument(weights={"v1": 100}).model_dump()
    assert set(doc) <= set(schema["properties"])
    assert schema["additionalProperties"] is False


def test_cache_keeps_the_last_good_document_when_a_fetch_turns_bad():
    now = [0.0]
    answers = [json.dumps({"weights": {"v1": 100}}).encode(), b'{"weights": {"v1": 50}}']
    routing = CachedRouting(lambda model: answers.pop(0), ttl_seconds=5, clock=lambda: now[0])
    assert routing.document("m").weights == {"v1": 100}
    now[0] = 10.0
    assert routing.document("m").weights == {"v1": 100}  # the invalid one is ignored


def test_cache_picks_up_a_change_after_its_ttl():
    now = [0.0]
    answers = [b'{"weights": {"v1": 100}}', b'{"weights": {"v1": 50, "v2": 50}}']
    routing = CachedRouting(lambda model: answers.pop(0), ttl_seconds=5, clock=lambda: now[0])
    assert routing.document("m").weights == {"v1": 100}
    now[0] = 1.0
    assert routing.document("m").weights == {"v1": 100}
    now[0] = 6.0
    assert routing.document("m").weights == {"v1": 50, "v2": 50}


class Documents:
    """A routing source holding one document per model (or none)."""

    def __init__(self, **documents: RoutingDocument) -> None:
        self._documents = documents

    def document(self, model: str) -> RoutingDocument | None:
        return self._documents.get(model)


def test_a_job_runs_on_the_stable_version_not_a_newer_canary_or_a_rolled_back_one():
    registry = FakeRegistry(
        version_record("digits-cnn", "v1", created_at=1.0),
        version_record("digits-cnn", "v2", created_at=2.0),
        version_record("digits-cnn", "v3", created_at=3.0, status="retired"),
    )

    def chosen(routing: Documents | None) -> str:
        return job_version(registry, "digits-cnn", routing).version

    # a canary at 10 %, or rolled back to 0 %: the stable version
    assert (
        chosen(Documents(**{"digits-cnn": RoutingDocument(weights={"v1": 90, "v2": 10})})) == "v1"
    )
    assert (
        chosen(Documents(**{"digits-cnn": RoutingDocument(weights={"v1": 100, "v2": 0})})) == "v1"
    )
    # promoted: the version with the larger share
    assert (
        chosen(Documents(**{"digits-cnn": RoutingDocument(weights={"v1": 10, "v2": 90})})) == "v2"
    )
    # no document, or one whose stable version is not active: the newest active one
    assert chosen(None) == chosen(Documents()) == "v2"
    assert chosen(Documents(**{"digits-cnn": RoutingDocument(weights={"v3": 100})})) == "v2"
    with pytest.raises(JobRejected, match="no active version"):
        job_version(FakeRegistry(), "digits-cnn", None)
