"""A file dropped in the batch bucket becomes a job on the running local platform:
S3's notification goes to the batch-drop queue, the splitter (from its deployed
layout) reads it as Lambda's event source mapping would, and the workers answer
every line on the batch lane."""

from __future__ import annotations

import json
import time

from switchyard.jobs import Job, JobStore, chunk_request_id


def jobs_of(platform, tenant: str) -> list[Job]:
    store = JobStore(platform.client("dynamodb"), platform.info["names"]["jobs_table"])
    return [job for job in store.list(tenant, limit=1000)[0] if job.split_done]


def wait_for(check, timeout_s: float = 120):
    deadline = time.monotonic() + timeout_s
    while not (value := check()):
        assert time.monotonic() < deadline, "gave up waiting"
        time.sleep(0.5)
    return value


def test_a_dropped_file_is_split_and_every_line_answered(platform, http):
    # GIVEN a data team's file of 100 sentences, and a file that is not a drop
    bucket = platform.info["names"]["batch_drop_bucket"]
    s3 = platform.client("s3")
    lines = "\n".join(json.dumps(f"line {i} of the nightly export") for i in range(100))
    s3.put_object(Bucket=bucket, Key="globex/minilm-embed/nightly.jsonl", Body=lines.encode())
    s3.put_object(Bucket=bucket, Key="globex/minilm-embed/README.txt", Body=b"not a drop")

    # WHEN the platform takes it up, with nothing else asked of it
    (job,) = wait_for(lambda: jobs_of(platform, "globex"))

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
    assert len(jobs_of(platform, "globex")) == 1  # the README made no job
