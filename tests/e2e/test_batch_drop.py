"""A file dropped in the batch bucket becomes a job on the running local platform:
S3's notification goes to the batch-drop queue, the splitter (from its deployed
layout) reads it as Lambda's event source mapping would, and the workers answer
every line on the batch lane."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from botocore.exceptions import ClientError

from harness.waiting import wait_for
from switchyard.jobs import Job, JobStore, chunk_request_id


def jobs_of(platform, tenant: str) -> list[Job]:
    store = JobStore(platform.client("dynamodb"), platform.info["names"]["jobs_table"])
    return [job for job in store.list(tenant, limit=1000)[0] if job.split_done]


def test_a_dropped_file_is_split_and_every_line_answered(platform, http):
    # GIVEN a data team's file of 100 sentences, and a file that is not a drop, put
    # with the tenant's own drop credentials (its role in AWS)
    bucket = platform.info["names"]["batch_drop_bucket"]
    s3 = platform.client_as("s3", platform.info["drop_credentials"]["globex"])
    lines = "\n".join(json.dumps(f"line {i} of the nightly export") for i in range(100))
    s3.put_object(Bucket=bucket, Key="globex/minilm-embed/nightly.jsonl", Body=lines.encode())
    s3.put_object(Bucket=bucket, Key="globex/minilm-embed/README.txt", Body=b"not a drop")
    # (which reach no other tenant's prefix)
    with pytest.raises(ClientError) as refused:
        s3.put_object(Bucket=bucket, Key="acme/minilm-embed/nightly.jsonl", Body=b'"x"\n')
    assert refused.value.response["Error"]["Code"] == "AccessDenied"

    # WHEN the platform takes it up, with nothing else asked of it
    def of_this_drop() -> list[Job]:
        return [j for j in jobs_of(platform, "globex") if j.source.endswith("/nightly.jsonl")]

    (job,) = wait_for(of_this_drop)

    # THEN one job holds its lines, in requests the workers answer on the batch lane
    assert job.source == f"s3://{bucket}/globex/minilm-embed/nightly.jsonl"
    assert job.inputs == 100 and job.chunks == 2
    auth = {"x-api-key": platform.keys["globex"]}
    request_ids = [chunk_request_id(job.job_id, i) for i in range(job.chunks)]

    def answered() -> list:
        bodies = [http.get(f"/v1/requests/{rid}", headers=auth).json() for rid in request_ids]
        return bodies if all(b.get("status") == "done" for b in bodies) else []

    bodies = wait_for(answered)
    assert sum(len(b["outputs"]) for b in bodies) == 100
    # and the drop queue is empty: every notification was processed and deleted
    sqs = platform.client("sqs")
    attrs = sqs.get_queue_attributes(
        QueueUrl=platform.info["drop_queue"],
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    assert attrs == {
        "ApproximateNumberOfMessages": "0",
        "ApproximateNumberOfMessagesNotVisible": "0",
    }
    # the README made no job
    assert not [j for j in jobs_of(platform, "globex") if j.source.endswith("README.txt")]


def test_a_dropped_file_ends_in_one_output_line_per_input_line_in_order(platform):
    # GIVEN a 2,000-line file with three bad lines: not JSON, not text, and empty
    bucket = platform.info["names"]["batch_drop_bucket"]
    s3 = platform.client("s3")
    bad = {17: "{not json", 1001: "[1, 2, 3]", 1999: ""}
    lines = [bad.get(n, json.dumps(f"sentence {n} of the export")) for n in range(1, 2001)]
    key = "acme/minilm-embed/export.jsonl"
    s3.put_object(Bucket=bucket, Key=key, Body="\n".join(lines).encode())

    # WHEN the platform takes it up, with nothing else asked of it
    store = JobStore(platform.client("dynamodb"), platform.info["names"]["jobs_table"])

    def of_this_file() -> list[Job]:
        return [j for j in store.list("acme", limit=1000)[0] if j.source.endswith(key)]

    def finished() -> list[Job]:
        jobs = of_this_file()
        return jobs if jobs and all(j.status == "succeeded" for j in jobs) else []

    (job,) = wait_for(finished, timeout_s=240)

    # THEN it succeeded with its output beside the file: exactly one line per input
    # line, in input order, the three bad lines as errors and the rest as outputs
    assert job.output_uri == f"s3://{bucket}/{key}.out"
    assert (job.inputs, job.rejected, job.lines_ok, job.lines_failed) == (1997, 3, 1997, 3)
    body = s3.get_object(Bucket=bucket, Key=key + ".out")["Body"].read().decode()
    out = [json.loads(line) for line in body.splitlines()]
    assert [o["line"] for o in out] == list(range(1, 2001))
    assert {o["line"]: o["error"]["code"] for o in out if "error" in o} == {
        17: "invalid_json",
        1001: "invalid_input",
        1999: "invalid_input",
    }
    embeddings = [o["output"] for o in out if "output" in o]
    assert len(embeddings) == 1997 and {len(e) for e in embeddings} == {384}
    # and the embedding a sync predict gives for the same sentence (batched with other
    # sentences, the last digit may differ)
    auth = {"x-api-key": platform.keys["acme"]}
    sync = httpx.post(
        f"{platform.url}/v1/models/minilm-embed/predict",
        json={"inputs": [json.loads(lines[41])]},
        headers=auth,
        timeout=60,
    ).json()
    assert sync["outputs"][0] == pytest.approx(out[41]["output"], abs=1e-5)

    # WHEN the same bytes are dropped again THEN there is no second job
    s3.put_object(Bucket=bucket, Key=key, Body="\n".join(lines).encode())
    time.sleep(5)  # the notification is taken up within a second or two
    assert [j.job_id for j in of_this_file()] == [job.job_id]
