"""Which file a job submitted by ``input_uri`` names: refused before S3 is asked
when no file of the caller's could be there."""

from __future__ import annotations

import json

import pytest

from switchyard.bodies import JobSubmission
from switchyard_router.app import JOB_REFUSAL
from switchyard_router.bodies import validated
from switchyard_router.jobs_api import JobsApi
from switchyard_router.logic import RequestRejected

BUCKET = "drop"


def api() -> JobsApi:
    # nothing but the bucket's name is read to name the file
    return JobsApi(store=None, s3=None, registry=None, models=["minilm-embed"],
                   drop_bucket=BUCKET, ttl_seconds=60)  # type: ignore[arg-type]  # fmt: skip


def key_of(uri: str) -> str:
    return api()._own_key("acme", JobSubmission(model="minilm-embed", input_uri=uri))


def test_a_file_under_the_tenants_model_prefix_is_its_key():
    assert key_of(f"s3://{BUCKET}/acme/minilm-embed/a/b.jsonl") == "acme/minilm-embed/a/b.jsonl"


@pytest.mark.parametrize(
    "uri",
    [
        f"s3://{BUCKET}/globex/minilm-embed/a.jsonl",  # another tenant's
        f"s3://{BUCKET}/acme/digits-cnn/a.jsonl",  # another model's
        "s3://other/acme/minilm-embed/a.jsonl",  # another bucket
        # 784 characters, a key of 1,524 bytes: S3 answers a HEAD of it 400 (was a 500)
        pytest.param(f"s3://{BUCKET}/acme/minilm-embed/" + "é" * 750 + ".jsonl", id="1524-bytes"),
    ],
)
def test_a_uri_no_file_of_the_callers_can_be_at_is_404(uri):
    with pytest.raises(RequestRejected) as refused:
        key_of(uri)
    assert (refused.value.status, refused.value.code) == (404, "no_such_file")


@pytest.mark.parametrize(
    "uri",
    [
        f"s3://{BUCKET}/acme/minilm-embed/a.csv",
        "https://example.com/acme/minilm-embed/a.jsonl",
        "s3://drop",
    ],
)
def test_a_uri_that_names_no_jsonl_file_in_s3_is_a_mistake_in_the_field(uri):
    body = json.dumps({"model": "minilm-embed", "input_uri": uri}).encode()
    with pytest.raises(RequestRejected) as refused:
        validated(JobSubmission, json.loads(body), JOB_REFUSAL)
    assert (refused.value.status, refused.value.errors[0].field) == (422, "input_uri")
    assert refused.value.errors[0].message == (
        "must be s3://<drop bucket>/<tenant>/<model>/<name>.jsonl"
    )
