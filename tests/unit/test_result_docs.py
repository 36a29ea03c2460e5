"""A result item's ``doc`` (``switchyard.results.result_docs``) and a record's JSON
(``records_json``): a batch's written in one pass by msgspec are pydantic's dump of
each record, value for value."""

from __future__ import annotations

import json
import time

import pytest

from switchyard import results
from switchyard.results import _NOT_IN_DOC, records_json, result_docs
from switchyard.schemas import ErrorInfo, JobChunk, LineError, RequestCost, ResultRecord
from tests.unit.test_result_records import record_fields


def _record(i: int, **changed) -> ResultRecord:
    now = time.time()
    # a duration small enough that JSON writes it with an exponent
    timings = {"received_at": now, "compute_ms": 1.25, "worker_ms": 1e-05}
    fields = record_fields(request_id=f"r-{i}", timings=timings)
    return ResultRecord.model_validate(fields | changed)


RECORDS = [
    _record(0),
    # an error whose message holds a newline, a quote and a letter beyond ASCII
    _record(1, status="error", outputs=None, timings={},
            error=ErrorInfo(code="invalid_input", message='"é"\nnext', field="inputs[0]")),
    # no field of its own left unset but the required ones
    _record(2, status="expired", outputs=None, completed_at=None, work_expires_at=None,
            worker=None, served_by=None, error=ErrorInfo(code="expired", message="late")),
    _record(3, lane="batch", shadow_of="v0", failures=2, last_failure="v1: boom",
            queued_counted=True,
            job=JobChunk(job_id="j-1", index=2, first_line=4, last_line=6,
                         errors=[LineError(line=5, code="invalid_input", message="x")])),
    _record(4, cost=RequestCost(usd=0.001, worker_usd=0.0004, aws_usd=0.0006,
                                worker_seconds=0.002, aws={"sqs": 0.0006})),
]  # fmt: skip


def _pydantic(record: ResultRecord) -> str:
    return record.model_dump_json(exclude=_NOT_IN_DOC, exclude_none=True)


def test_a_batchs_docs_are_each_records_pydantic_dump():
    # GIVEN records of every kind a worker stores: done, errors, a job's chunk, a cost
    # WHEN their docs are written together
    docs = result_docs(RECORDS)
    # THEN there is one doc a record, in order, each holding what pydantic's dump of
    # the record holds, no more and no less (the item's own attributes left out)
    assert len(docs) == len(RECORDS)
    assert [json.loads(d) for d in docs] == [json.loads(_pydantic(r)) for r in RECORDS]
    assert all(set(json.loads(d)).isdisjoint(_NOT_IN_DOC) for d in docs)
    # AND each reads back, with its item's attributes, as the record it was
    for record, doc in zip(RECORDS, docs, strict=True):
        fields = record.model_dump(include=_NOT_IN_DOC)
        assert ResultRecord.model_validate(json.loads(doc) | fields) == record


def test_a_batchs_json_without_its_outputs_is_each_records_pydantic_dump():
    # GIVEN the same records, their outputs left out (what a cost is priced by)
    # WHEN they are written together
    written = records_json(RECORDS, {"outputs"})
    # THEN each is what pydantic writes of it, value for value
    expected = [r.model_dump_json(exclude={"outputs"}, exclude_none=True) for r in RECORDS]
    assert [json.loads(w) for w in written] == [json.loads(e) for e in expected]
    assert [len(w) for w in written] == [len(e) for e in expected]


def test_records_that_hold_one_cost_each_write_it_and_others_their_own():
    # GIVEN a batch whose answers mostly hold one cost (priced alike) and one error,
    # among records holding costs of their own, one of them made after the first
    # batch's docs were written (a model's JSON is kept only while its batch is)
    shared = RequestCost(usd=0.5, worker_usd=0.2, aws_usd=0.3, worker_seconds=1.0,
                         aws={"sqs": 0.1, "dynamodb": 0.2})
    error = ErrorInfo(code="invalid_input", message="bad", field="inputs[0]")
    batch = [
        _record(i, cost=shared if i % 3 else RequestCost(
            usd=i, worker_usd=i, aws_usd=0.0, worker_seconds=i, aws={"s3": float(i)}),
            error=error if i % 2 else None)
        for i in range(12)
    ]  # fmt: skip
    first = result_docs(batch)
    later = [_record(20, cost=RequestCost(usd=9.0, worker_usd=9.0, aws_usd=0.0,
                                          worker_seconds=9.0, aws={"lambda": 9.0}))]
    # WHEN each batch's docs are written
    # THEN each record's is its own pydantic dump, value for value and byte count
    for records, docs in ((batch, first), (later, result_docs(later))):
        assert [json.loads(d) for d in docs] == [json.loads(_pydantic(r)) for r in records]
        assert [len(d) for d in docs] == [len(_pydantic(r)) for r in records]


def test_without_msgspec_each_doc_is_pydantics_dump(monkeypatch):
    # GIVEN a process without msgspec (a router's layer)
    monkeypatch.setattr(results, "_json_writer", lambda _: None)
    # WHEN docs are written
    # THEN each is pydantic's dump as it is
    assert result_docs(RECORDS) == [_pydantic(r) for r in RECORDS]


def test_a_value_a_doc_cannot_hold_is_refused_not_written(monkeypatch):
    # GIVEN a record that holds, where a model belongs, a value of no JSON type
    odd = _record(9).model_copy(update={"job": object()})
    # WHEN its doc is written
    # THEN the write fails, rather than storing a doc that cannot be read back
    with pytest.raises(NotImplementedError, match="not written in a result.s JSON"):
        result_docs([odd])
