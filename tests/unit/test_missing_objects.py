"""S3's two answers to a read of a missing key, each read as "missing": 404 where
the role may list the bucket (or no IAM stands between), 403 where it may not, as
the platform's roles may not (``switchyard.missing_objects``). Any other error stays
an error."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from harness.fakes import FakeRegistry, version_record
from switchyard.missing_objects import object_missing
from switchyard.payloads import PayloadMissing, S3PayloadStore
from switchyard_batch.splitter import FILE_GONE
from switchyard_router.jobs_api import JobsApi, JobSubmission
from switchyard_router.logic import RequestRejected

BUCKET = "drop"
# (operation, code) as botocore raises them: a HEAD's error has no body, so its code
# is the status; a GET's is S3's code.
MISSING = [
    pytest.param("HeadObject", "404", id="head-404"),
    pytest.param("GetObject", "NoSuchKey", id="get-404"),
    pytest.param("HeadObject", "403", id="head-403-no-list"),
    pytest.param("GetObject", "AccessDenied", id="get-403-no-list"),
]
NOT_MISSING = [("GetObject", "SlowDown"), ("HeadObject", "500"), ("GetObject", "InternalError")]


def client_error(operation: str, code: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": code}}, operation)


class RefusingS3:
    """An S3 client whose object reads fail with one error."""

    class exceptions:  # noqa: N801 - as boto3 names it
        ClientError = ClientError

    def __init__(self, error: ClientError) -> None:
        self.error = error

    def head_object(self, **_: Any) -> dict:
        raise self.error

    def get_object(self, **_: Any) -> dict:
        raise self.error


@pytest.mark.parametrize(("operation", "code"), MISSING)
def test_both_answers_to_a_missing_key_read_as_missing(operation, code):
    assert object_missing(client_error(operation, code))
    assert code in FILE_GONE  # a file deleted while split ends its job


@pytest.mark.parametrize(("operation", "code"), NOT_MISSING)
def test_other_errors_are_not_a_missing_key(operation, code):
    assert not object_missing(client_error(operation, code))
    assert code not in FILE_GONE  # a passing fault: the split is tried again


@pytest.mark.parametrize(("operation", "code"), MISSING)
def test_a_claim_checked_payload_that_is_gone_is_missing(operation, code):
    # GIVEN a payload that expired (its bucket's lifecycle) under either answer
    store = S3PayloadStore(RefusingS3(client_error(operation, code)), "payloads")

    # WHEN it is read back THEN it is missing, not an error
    with pytest.raises(PayloadMissing):
        store.get_json("s3://payloads/req/outputs.json")


@pytest.mark.parametrize(("operation", "code"), NOT_MISSING)
def test_a_payload_read_that_fails_otherwise_raises(operation, code):
    store = S3PayloadStore(RefusingS3(client_error(operation, code)), "payloads")
    with pytest.raises(ClientError):
        store.get_json("s3://payloads/req/outputs.json")


def jobs_api(s3: Any) -> JobsApi:
    registry = FakeRegistry(version_record("minilm-embed"))
    return JobsApi(store=None, s3=s3, registry=registry, models=["minilm-embed"],
                   drop_bucket=BUCKET, ttl_seconds=60)  # type: ignore[arg-type]  # fmt: skip


@pytest.mark.parametrize("code", ["404", "403"])
def test_a_job_whose_input_file_is_missing_is_404(code):
    # GIVEN S3 answers the HEAD of the named file 404, or 403 as to the router's role
    api = jobs_api(RefusingS3(client_error("HeadObject", code)))
    uri = f"s3://{BUCKET}/acme/minilm-embed/none.jsonl"

    # WHEN the job is submitted THEN it is refused 404, naming the file
    with pytest.raises(RequestRejected) as refused:
        api.submit("acme", JobSubmission(model="minilm-embed", input_uri=uri))
    assert (refused.value.status, refused.value.code) == (404, "no_such_file")
    assert uri in refused.value.message


def test_a_job_whose_input_file_cannot_be_read_otherwise_is_an_error():
    api = jobs_api(RefusingS3(client_error("HeadObject", "500")))
    uri = f"s3://{BUCKET}/acme/minilm-embed/a.jsonl"
    with pytest.raises(ClientError):
        api.submit("acme", JobSubmission(model="minilm-embed", input_uri=uri))
