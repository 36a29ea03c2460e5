"""A result record assembled by the worker (``switchyard.schemas.assembled_record``)
is the record validation would have made of the same fields."""

from __future__ import annotations

import time

import pytest

from switchyard.schemas import ErrorInfo, JobChunk, ResultRecord, assembled_record


def record_fields(**changed) -> dict:
    """Every field of a done result's record, ``changed`` as given."""
    now = time.time()
    fields = {
        "request_id": "r-1",
        "tenant": "acme",
        "model": "digits-cnn",
        "version": "v1",
        "status": "done",
        "lane": "realtime",
        "outputs": [{"class": 3, "label": "3", "probabilities": [0.1, 0.9]}],
        "error": None,
        "timings": {"received_at": now, "compute_ms": 1.25, "completed_at": now},
        "created_at": now - 0.1,
        "completed_at": now,
        "expires_at": int(now) + 86_400,
        "work_expires_at": now + 30,
        "worker": "w-1",
        "served_by": "digits-cnn",
        "shadow_of": None,
        "failures": 0,
        "last_failure": None,
        "job": None,
        "cost": None,
        "queued_counted": False,
    }
    return fields | changed


@pytest.mark.parametrize(
    "changed",
    [
        {},
        {"status": "error", "outputs": None, "error": ErrorInfo(code="invalid_input",
                                                                 message="x", field="inputs")},
        {"lane": "batch", "job": JobChunk(job_id="j-1", index=2, first_line=4, last_line=6)},
    ],
)  # fmt: skip
def test_an_assembled_record_is_the_validated_one(changed):
    # GIVEN every field of a record, as the worker puts them together
    fields = record_fields(**changed)
    # WHEN it is assembled, and validated
    assembled = assembled_record(dict(fields))
    validated = ResultRecord.model_validate(fields)
    # THEN the two are equal, and written the same, field for field and in order
    assert assembled == validated
    assert assembled.model_dump_json() == validated.model_dump_json()
    assert list(assembled.model_dump()) == list(ResultRecord.model_fields)


def test_an_assembled_record_takes_assignment_and_copies_as_a_validated_one():
    # GIVEN two assembled records
    first, second = (
        assembled_record(record_fields()),
        assembled_record(record_fields(request_id="r-2")),
    )
    # WHEN one is completed again, and copied with a change
    first.completed_at = 5.0
    copy = first.model_copy(update={"status": "expired"})
    # THEN only that one changed, and its copy holds the change
    assert first.completed_at == 5.0 and second.completed_at != 5.0
    assert copy.status == "expired" and first.status == "done"
    assert ResultRecord.model_validate_json(copy.model_dump_json()) == copy


def test_a_record_missing_a_field_is_not_assembled():
    # GIVEN a record's fields without its cost
    fields = record_fields()
    del fields["cost"]
    # WHEN it is assembled THEN it is refused, saying how many fields a record has
    with pytest.raises(ValueError, match="21 fields, not 20"):
        assembled_record(fields)
