"""A job's chunks counted as their results are stored, its output assembled once,
in line order, by multipart upload when large: against the emulator."""

from __future__ import annotations

import json
import time

from switchyard.jobs import Job, JobStore, chunk_request_id, finish_if_answered, job_id_for
from switchyard.schemas import ErrorInfo, JobChunk, LineError, ResultRecord
from switchyard.settings import Settings
from switchyard.wiring import build_adapters

BIG = "x" * (3 << 20)  # three of these make an output past one 8 MiB part


def make_job(store: JobStore, bucket: str) -> Job:
    now = time.time()
    key = f"acme/minilm-embed/out-{now}.jsonl"
    job = Job(
        job_id=job_id_for(bucket, key, f'"{now}"'),
        tenant="acme",
        model="minilm-embed",
        version="v1",
        source=f"s3://{bucket}/{key}",
        etag=f'"{now}"',
        size_bytes=1,
        created_at=now,
        updated_at=now,
        expires_at=int(now + 3600),
    )
    store.create(job)
    return job


def result(job: Job, index: int, chunk: JobChunk, **fields) -> ResultRecord:
    now = time.time()
    return ResultRecord(
        request_id=chunk_request_id(job.job_id, index),
        tenant=job.tenant,
        model=job.model,
        version=job.version,
        lane="batch",
        created_at=now,
        completed_at=now,
        expires_at=int(now + 3600),
        job=chunk,
        **fields,
    )


def test_chunks_count_once_and_the_last_assembles_the_output_in_order(
    manifest, provisioned, clients
):
    names = manifest.names("dev")
    adapters = build_adapters(Settings(**provisioned.settings_values()))
    store = JobStore(clients("dynamodb"), names.jobs_table)
    s3 = clients("s3")
    job = make_job(store, names.batch_drop_bucket)
    # GIVEN a split job of three chunks: lines 1-3 (line 2 refused), 4-5 (failed),
    # 6-8 (large outputs, so the output goes up in parts)
    chunks = [
        JobChunk(job_id=job.job_id, index=0, first_line=1, last_line=3,
                 errors=[LineError(line=2, code="invalid_json", message="not valid JSON")]),
        JobChunk(job_id=job.job_id, index=1, first_line=4, last_line=5),
        JobChunk(job_id=job.job_id, index=2, first_line=6, last_line=8),
    ]  # fmt: skip
    records = [
        result(job, 0, chunks[0], status="done", outputs=[[0.5], [0.25]]),
        result(job, 1, chunks[1], status="error",
               error=ErrorInfo(code="retries_exhausted", message="failed after 5 attempts")),
        result(job, 2, chunks[2], status="done", outputs=[BIG, BIG, BIG]),
    ]  # fmt: skip
    assert store.record_split(
        job, offset=1, line=8, chunk=3, inputs=7, rejected=1, errors=chunks[0].errors, done=True
    )

    def store_result(record: ResultRecord) -> bool:
        return adapters.results.complete(record, also=store.count_chunk(record))

    # WHEN each chunk's result is stored, one of them twice (a redelivery)
    assert store_result(records[0]) and not store_result(records[0])
    assert finish_if_answered(store, "acme", job.job_id, adapters.results.get, s3) is None
    assert store_result(records[1]) and store_result(records[2])

    # THEN the job counted each once, and exactly one claim assembles its output
    answered = store.get("acme", job.job_id)
    assert answered is not None and answered.chunks_done == 3 and answered.answered
    done = finish_if_answered(store, "acme", job.job_id, adapters.results.get, s3)
    assert finish_if_answered(store, "acme", job.job_id, adapters.results.get, s3) is None
    assert done is not None and done.status == "succeeded"
    assert (done.lines_ok, done.lines_failed) == (5, 3)
    bucket, key = done.output_uri.removeprefix("s3://").split("/", 1)
    assert key == job.bucket_key[1] + ".out"
    lines = [json.loads(x) for x in s3.get_object(Bucket=bucket, Key=key)["Body"].iter_lines()]
    assert [line["line"] for line in lines] == list(range(1, 9))
    assert lines[0] == {"line": 1, "output": [0.5]}
    assert lines[1]["error"]["code"] == "invalid_json"
    assert lines[2] == {"line": 3, "output": [0.25]}
    assert [lines[i]["error"]["code"] for i in (3, 4)] == ["retries_exhausted"] * 2
    assert [len(lines[i]["output"]) for i in (5, 6, 7)] == [len(BIG)] * 3
    # AND no multipart upload is left open
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
