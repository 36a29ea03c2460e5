"""The batch splitter as Lambda runs it, invoked with the event AWS sends it when a
file is dropped (S3's notification, delivered through the batch-drop queue); the
workers answer the work it enqueues."""

from __future__ import annotations

import json

from harness.lambda_events import s3_event, sqs_event
from harness.waiting import wait_for
from switchyard.jobs import Job, JobStore, chunk_request_id
from switchyard_local.deployed import LambdaProcess, Launcher

from .conftest import deployed_roots


def test_the_cold_start_imports_the_platform_from_the_asset_and_layer_only(
    splitter: LambdaProcess, launcher: Launcher
) -> None:
    task, layer = deployed_roots(launcher, "splitter")
    assert "switchyard_batch.splitter" in splitter.modules
    for name, file in splitter.modules.items():
        root = task if name.startswith("switchyard_batch") or name == "handler" else layer
        assert file.startswith(f"{root}/"), f"{name} was imported from {file}"
    assert not any(n.startswith("switchyard_local") for n in splitter.modules)
    assert not {"torch", "fastapi"} & set(splitter.top_level)


def test_a_dropped_file_becomes_a_job_whose_lines_the_workers_answer(
    splitter: LambdaProcess, platform, adapters
) -> None:
    # GIVEN a data team's file in the drop bucket (a name S3 URL-encodes in events)
    names = platform.provisioned.names
    key = "acme/minilm-embed/nightly run.jsonl"
    lines = [json.dumps(f"sentence number {i}") for i in range(70)] + ["", '"   "']
    adapters.client("s3").put_object(
        Bucket=names.batch_drop_bucket, Key=key, Body="\n".join(lines).encode()
    )
    # WHEN S3's notification reaches the function through the queue, with one for
    # an object that is already gone
    notification = json.dumps(s3_event(names.batch_drop_bucket, key))
    gone = json.dumps(s3_event(names.batch_drop_bucket, "acme/minilm-embed/gone.jsonl"))
    response = splitter.invoke(sqs_event(notification, gone))

    # THEN no message is handed back to SQS: the file is split, and the object that
    # is gone (deleted before its notification was read; S3 answers 404 or, to a
    # role that may not list the bucket, 403) makes no job and nothing to retry
    assert response == {"batchItemFailures": []}

    # and one job holds the valid lines, in chunks of the model's request size (the
    # empty line and the blank sentence are refused with their line numbers)
    # (the platform's own splitter also takes the bucket's notification of the file,
    # and whichever of the two claims the job first splits it: wait for the split)
    def split() -> Job | None:
        store = JobStore(adapters.client("dynamodb"), names.jobs_table)
        (job,) = [j for j in store.list("acme")[0] if j.source.endswith(key)]
        return job if job.split_done else None

    job = wait_for(split, timeout_s=60)
    assert (job.inputs, job.rejected, job.chunks) == (70, 2, 2)
    assert [e.line for e in job.errors] == [71, 72]
    request_ids = [chunk_request_id(job.job_id, i) for i in range(job.chunks)]

    # and the workers answer every chunk on the batch lane
    def answered() -> list:
        records = [adapters.results.get("acme", rid) for rid in request_ids]
        return records if all(r and r.status == "done" for r in records) else []

    records = wait_for(answered)
    assert sum(len(r.outputs or []) for r in records) == 70
    assert {r.lane for r in records} == {"batch"}
    # and the file that was gone has no job
    store = JobStore(adapters.client("dynamodb"), names.jobs_table)
    assert not [j for j in store.list("acme")[0] if j.source.endswith("gone.jsonl")]
