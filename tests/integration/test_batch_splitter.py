"""A file dropped in the batch bucket becomes a job and validated work on the batch
lane: read in ranges, continued across invocations, resumed after a crash, and
made once per file's bytes. Against the emulator over its wire protocol."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from switchyard.budgets import DynamoDBBudgetStore
from switchyard.jobs import JobStore, chunk_request_id
from switchyard.registry import DynamoDBRegistry
from switchyard.schemas import QueueMessage
from switchyard.settings import SplitterSettings
from switchyard.wiring import build_adapters
from switchyard_batch.splitter import CONTINUE, handle_message, splitter_of

MODEL = "digits-cnn"  # 256 inputs per request at most
VECTOR = json.dumps([1] * 64)
BAD_PIXEL = json.dumps([1, 1, "1"] + [1] * 61)


def event(bucket: str, key: str) -> dict:
    return {"Records": [{"s3": {"bucket": {"name": bucket}, "object": {"key": key}}}]}


def forever() -> int:
    return 900_000


@pytest.fixture
def rig(manifest, provisioned, clients, emulator_url):
    names = manifest.names("dev")
    spec = manifest.models[MODEL]
    registry = DynamoDBRegistry(clients("dynamodb"), names.registry_table)
    if registry.get(MODEL, "v1") is None:
        registry.register(spec.version_record(MODEL, "v1", "s3://x/y", "0" * 64))
    adapters = build_adapters(SplitterSettings(**provisioned.splitter_values(None)))
    sqs = clients("sqs")
    for url in (provisioned.queues[MODEL]["batch"], provisioned.drop_queue):
        sqs.purge_queue(QueueUrl=url)

    class Rig:
        bucket = names.batch_drop_bucket
        jobs = JobStore(clients("dynamodb"), names.jobs_table)
        splitter = splitter_of(adapters)

        @staticmethod
        def drop(key: str, lines: list[str]) -> dict:
            clients("s3").put_object(Bucket=names.batch_drop_bucket, Key=key, Body="\n".join(lines))
            return event(names.batch_drop_bucket, key)

        @staticmethod
        def enqueued() -> list[QueueMessage]:
            out = []
            while True:
                got = sqs.receive_message(
                    QueueUrl=provisioned.queues[MODEL]["batch"], MaxNumberOfMessages=10
                ).get("Messages", [])
                if not got:
                    return out
                out += [QueueMessage.model_validate_json(m["Body"]) for m in got]

        @staticmethod
        def continuations() -> list[dict]:
            # (the bucket's own notifications of the drops arrive there too)
            got = sqs.receive_message(QueueUrl=provisioned.drop_queue, MaxNumberOfMessages=10)
            bodies = [json.loads(m["Body"]) for m in got.get("Messages", [])]
            return [b for b in bodies if CONTINUE in b]

    return Rig


def test_a_dropped_file_is_validated_split_and_enqueued_once(rig):
    deep = "[" * 5000 + "]" * 5000  # the json module raised RecursionError on it
    lines = [VECTOR] * 300 + ["not json", json.dumps([1] * 3), "", deep, VECTOR, BAD_PIXEL]
    (job,) = handle_message(rig.drop("acme/digits-cnn/scores.jsonl", lines), rig.splitter, forever)

    assert job.split_done and job.status == "queued"
    assert (job.inputs, job.rejected, job.chunks, job.split_line) == (301, 5, 2, 306)
    assert [(e.line, e.code) for e in job.errors] == [
        (301, "invalid_json"),
        (302, "invalid_input"),
        (303, "invalid_input"),
        (304, "invalid_json"),
        (306, "invalid_input"),
    ]
    assert job.errors[1].message == "line 302 must hold exactly 64 numbers, got 3"
    assert job.errors[4].message == "line 306: [2] must be a number, got string"
    assert rig.jobs.get("acme", job.job_id) == job
    messages = rig.enqueued()
    assert sorted(m.request_id for m in messages) == [
        chunk_request_id(job.job_id, i) for i in range(2)
    ]
    assert [m.n_inputs for m in sorted(messages, key=lambda m: m.request_id)] == [256, 45]
    assert {m.lane for m in messages} == {"batch"} and {m.tenant for m in messages} == {"acme"}


def test_the_same_bytes_dropped_again_are_the_same_job_and_new_bytes_a_new_one(rig):
    key = "acme/digits-cnn/daily.jsonl"
    (job,) = handle_message(rig.drop(key, [VECTOR] * 10), rig.splitter, forever)
    rig.enqueued()
    # WHEN the same notification is delivered again, or the same bytes are put again
    assert handle_message(event(rig.bucket, key), rig.splitter, forever) == []
    assert handle_message(rig.drop(key, [VECTOR] * 10), rig.splitter, forever) == []
    # THEN nothing more is enqueued
    assert rig.enqueued() == []
    # WHEN other bytes are put at the same key THEN that is a new job
    (other,) = handle_message(rig.drop(key, [VECTOR] * 11), rig.splitter, forever)
    assert other.job_id != job.job_id and other.inputs == 11
    assert [j.job_id for j in rig.jobs.list("acme", limit=100)[0]][:2] == [
        other.job_id,
        job.job_id,
    ]


def test_a_large_file_is_read_in_slices_and_continued_in_the_next_invocation(rig):
    # GIVEN an invocation that may read two slices of 4 KiB (a vector line is ~200 B)
    splitter = replace(rig.splitter, slice_bytes=4096, max_slices=2)
    lines = [VECTOR] * 1000
    key = "acme/digits-cnn/large.jsonl"

    # WHEN the drop is handled
    (job,) = handle_message(rig.drop(key, lines), splitter, forever)

    # THEN it stopped at a chunk boundary with the rest sent to its own queue
    assert not job.split_done and job.split_chunk >= 1
    (continuation,) = rig.continuations()
    assert continuation == {CONTINUE: {"tenant": "acme", "job_id": job.job_id}}
    # AND invocation after invocation it goes on from there until the file ends
    rounds = 1
    while not job.split_done:
        (job,) = handle_message(continuation, splitter, forever)
        if not job.split_done:
            (continuation,) = rig.continuations()
        rounds += 1
    assert rounds > 1 and job.chunks == 4 and job.inputs == 1000 and job.split_line == 1000
    ids = [m.request_id for m in rig.enqueued()]
    assert sorted(ids) == [chunk_request_id(job.job_id, i) for i in range(4)]  # each once


def test_a_file_replaced_while_it_is_split_ends_its_job_failed(rig):
    # GIVEN a split that stopped after its first slices, to continue in a new invocation
    splitter = replace(rig.splitter, slice_bytes=4096, max_slices=1)
    key = "acme/digits-cnn/replaced.jsonl"
    (job,) = handle_message(rig.drop(key, [VECTOR] * 1000), splitter, forever)
    (continuation,) = rig.continuations()
    sent = len(rig.enqueued())

    # WHEN other bytes are put at its key before it continues
    rig.drop(key, [VECTOR] * 10)
    (after,) = handle_message(continuation, splitter, forever)

    # THEN the job ends failed, saying why, and sends nothing more
    assert after.status == "failed" and after.finished_at is not None
    assert "changed or was deleted" in (after.failure or "")
    assert sent >= 1 and rig.enqueued() == []
    # AND it stays failed: the same message again (a redelivery) changes nothing
    (again,) = handle_message(continuation, splitter, forever)
    assert again.status == "failed" and rig.enqueued() == []


def test_a_file_deleted_while_it_is_split_ends_its_job_failed(rig, clients):
    # GIVEN a split that stopped after its first slices, to continue in a new invocation
    splitter = replace(rig.splitter, slice_bytes=4096, max_slices=1)
    key = "acme/digits-cnn/deleted.jsonl"
    (job,) = handle_message(rig.drop(key, [VECTOR] * 1000), splitter, forever)
    (continuation,) = rig.continuations()

    # WHEN the file is deleted before it continues (S3 answers its next slice 404, or
    # 403 to a role without s3:ListBucket: tests/integration/test_iam_enforced.py)
    clients("s3").delete_object(Bucket=rig.bucket, Key=key)
    (after,) = handle_message(continuation, splitter, forever)

    # THEN the job ends failed, saying why, not retried
    assert after.status == "failed" and "changed or was deleted" in (after.failure or "")


def test_a_file_deleted_before_its_drop_is_read_makes_no_job(rig, clients):
    # GIVEN a drop's notification, its file deleted before the splitter reads it
    drop = rig.drop("acme/digits-cnn/fleeting.jsonl", [VECTOR])
    clients("s3").delete_object(Bucket=rig.bucket, Key="acme/digits-cnn/fleeting.jsonl")

    # WHEN it is handled THEN no job is made and nothing is retried
    assert handle_message(drop, rig.splitter, forever) == []


def test_a_crashed_split_resumes_from_its_last_recorded_boundary(rig):
    # GIVEN a split that crashes on enqueueing its fourth chunk, having recorded
    # its progress slice by slice
    splitter = replace(rig.splitter, slice_bytes=8192)
    queue = splitter.queues[MODEL]
    sent = []

    class Crashing:
        def send(self, body, tenant):
            if len(sent) == 3:
                raise ConnectionError("the invocation died")
            sent.append(1)
            return queue.send(body, tenant)

    crashing = replace(splitter, queues={MODEL: Crashing()})
    drop = rig.drop("acme/digits-cnn/crash.jsonl", [VECTOR] * 1100)
    with pytest.raises(ConnectionError):
        handle_message(drop, crashing, forever)
    (job,) = rig.jobs.list("acme", limit=1)[0]
    assert not job.split_done and 0 < job.split_chunk <= 3
    recorded = job.split_chunk

    # WHEN SQS delivers the notification again
    (job,) = handle_message(drop, splitter, forever)

    # THEN the split ends, every chunk enqueued, only those past the boundary twice
    assert job.split_done and job.chunks == 5 and job.inputs == 1100
    ids = [m.request_id for m in rig.enqueued()]
    assert set(ids) == {chunk_request_id(job.job_id, i) for i in range(5)}
    assert len(ids) == 3 + (5 - recorded)


def test_a_line_too_long_is_an_error_and_the_split_goes_on(rig, monkeypatch):
    monkeypatch.setattr("switchyard_batch.splitter.MAX_LINE_BYTES", 1000)
    splitter = replace(rig.splitter, slice_bytes=1024)
    lines = [VECTOR, json.dumps([1] * 2000), VECTOR]
    (job,) = handle_message(rig.drop("acme/digits-cnn/long.jsonl", lines), splitter, forever)
    assert (job.inputs, job.rejected) == (2, 1)
    assert [(e.line, e.code) for e in job.errors] == [(2, "line_too_long")]


def test_a_file_saved_with_a_byte_order_mark_reads_its_first_line(rig):
    # Windows tools begin UTF-8 text with U+FEFF: its first line was invalid JSON.
    # Only at the file's start is it a mark; elsewhere it is a line's mistake.
    lines = ["\ufeff" + VECTOR, "\r\n".join([VECTOR, VECTOR]), "\ufeff" + VECTOR]
    (job,) = handle_message(rig.drop("acme/digits-cnn/bom.jsonl", lines), rig.splitter, forever)
    assert (job.inputs, job.rejected) == (3, 1)
    assert [(e.line, e.code) for e in job.errors] == [(4, "invalid_json")]


def test_a_file_for_an_unknown_model_is_rejected_without_enqueuing(rig):
    assert handle_message(rig.drop("acme/nope/x.jsonl", ["[1]"]), rig.splitter, forever) == []
    assert rig.enqueued() == []


def test_a_file_dropped_by_a_tenant_over_its_budget_fails_its_job_unsplit(rig, clients, manifest):
    # GIVEN globex over its budget (lowered to nothing), acme under its own
    store = DynamoDBBudgetStore(clients("dynamodb"), manifest.names("dev").results_table)
    store.set_budget("globex", 0.0)
    try:
        # WHEN each drops a file
        (refused,) = handle_message(
            rig.drop("globex/digits-cnn/over.jsonl", [VECTOR] * 5), rig.splitter, forever
        )
        # THEN globex's job fails, saying why, and nothing of it is queued
        assert refused.status == "failed"
        assert "budget_exceeded" in (refused.failure or "")
        assert rig.enqueued() == []
        # AND acme's runs
        (job,) = handle_message(
            rig.drop("acme/digits-cnn/under.jsonl", [VECTOR] * 5), rig.splitter, forever
        )
        assert job.status == "queued" and len(rig.enqueued()) == 1
    finally:
        store.set_budget("globex", None)
