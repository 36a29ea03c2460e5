"""The worker against real SQS/DynamoDB wire behaviour (visibility, receive counts,
redrive to the DLQ). The model here is a small test model with switchable faults;
the e2e tier runs the real demo models."""

from __future__ import annotations

import threading
import time

import pytest

from harness.fakes import EchoRuntime
from switchyard.payloads import S3PayloadStore
from switchyard.queues import SqsWorkQueue
from switchyard.registry import DynamoDBRegistry
from switchyard.results import DynamoDBResultStore
from switchyard.schemas import QueueMessage
from switchyard_worker.runtimes import FaultyRuntime
from switchyard_worker.worker import Worker


@pytest.fixture
def setup(manifest, provisioned, clients):
    names = manifest.names("dev")
    registry = DynamoDBRegistry(clients("dynamodb"), names.registry_table)
    spec = manifest.models["digits-cnn"]

    def register(version: str, **faults):
        registry.register(
            spec.version_record("digits-cnn", version, "s3://x/y", "0" * 64, faults=faults)
        )

    payloads = S3PayloadStore(clients("s3"), names.payloads_bucket)
    results = DynamoDBResultStore(clients("dynamodb"), names.results_table, payloads, 200_000)
    sqs = clients("sqs")
    lanes = {
        lane: SqsWorkQueue(sqs, provisioned.queues["digits-cnn"][lane], lane)
        for lane in ("realtime", "batch")
    }

    def worker(held_seconds: int | None = None) -> Worker:
        return Worker(
            model="digits-cnn",
            worker_id="it",
            realtime=lanes["realtime"],
            batch=lanes["batch"],
            registry=registry,
            results=results,
            payloads=payloads,
            load_runtime=lambda record: FaultyRuntime(EchoRuntime(), record.faults),
            visibility_timeout=held_seconds or manifest.platform.visibility_timeout_seconds,
            poll_wait_seconds=0,
            max_receive_count=manifest.platform.max_receive_count,
        )

    def send(rid: str, version: str = "v1") -> None:
        m = QueueMessage(
            request_id=rid,
            tenant="acme",
            model="digits-cnn",
            version=version,
            inputs=[[1] * 64],
            n_inputs=1,
            enqueued_at=time.time(),
            expires_at=time.time() + 600,
        )
        lanes["realtime"].send(m.model_dump_json(), "acme")

    return register, worker, send, results, lanes, sqs, provisioned.dlqs["digits-cnn"]["realtime"]


def dlq_depth(sqs, url) -> int:
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
    return int(attrs["Attributes"]["ApproximateNumberOfMessages"])


def test_a_message_whose_batch_always_fails_ends_in_the_dlq(setup):
    register, worker, send, results, lanes, sqs, dlq = setup
    register("v1", fail_every_call=True)
    send("poison")
    w = worker()
    thread = threading.Thread(target=w.run)
    thread.start()
    deadline = time.monotonic() + 30  # backoffs of 1 s and 2 s between the 3 receives
    while dlq_depth(sqs, dlq) == 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    w.stop()
    thread.join(timeout=15)
    assert dlq_depth(sqs, dlq) == 1
    assert w.loop.batches_run >= 3  # it was tried three times before it was moved
    # Its last allowed attempt wrote the request's final error: it does not stay
    # "queued" while its message sits in the DLQ.
    record = results.get("acme", "poison")
    assert record is not None and record.status == "error"
    assert record.error.code == "retries_exhausted"
    assert record.error.message.startswith(
        "failed after 3 attempts: RuntimeError: injected fault"  # maxReceiveCount 3
    )


def test_long_batches_keep_their_messages_invisible(setup):
    register, worker, send, results, lanes, sqs, dlq = setup
    register("v1", hang_seconds=11.5)  # longer than the 10 s visibility timeout
    send("slow")
    w = worker()
    thread = threading.Thread(target=w.run)
    thread.start()
    time.sleep(10.7)
    # Past the queue's visibility timeout, another consumer still sees nothing.
    assert lanes["realtime"].receive(10, 0) == []
    while results.get("acme", "slow") is None and thread.is_alive():
        time.sleep(0.2)
    w.stop()
    thread.join(timeout=10)
    assert results.get("acme", "slow").status == "done"
    assert w.loop.batches_run == 1


def test_a_dead_workers_messages_come_back_after_its_hold_not_the_queues_timeout(setup):
    register, worker, send, results, lanes, sqs, dlq = setup
    register("v1")
    send("orphan")
    # GIVEN a worker that holds its messages for 3 s (the queue's own timeout is 10 s)
    w = worker(held_seconds=3)
    w.intake.receive()
    assert [p.message.request_id for p in w.intake.assembler.held] == ["orphan"]
    received_at = time.monotonic()
    # WHEN it dies before its heartbeat extends the hold (nothing more is done with it)
    assert lanes["realtime"].receive(10, 0) == []
    # THEN another worker receives the message once the hold ends, not the queue's 10 s
    again: list = []
    while not again and time.monotonic() - received_at < 9:
        again = lanes["realtime"].receive(10, 1)
    assert [QueueMessage.model_validate_json(r.body).request_id for r in again] == ["orphan"]
    assert again[0].receive_count == 2
    lanes["realtime"].delete(again)
