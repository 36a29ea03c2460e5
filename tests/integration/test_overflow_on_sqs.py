"""CPU overflow against the emulator's SQS, DynamoDB and CloudWatch: a CPU pool's
worker takes a GPU pool's ``cpu_capable`` model's work only while that pool has no
worker running (each running worker's word in the results table), or while the
model's oldest message is older than the pool's limit (SQS's age metric, read from
CloudWatch as in AWS); each answer says which service ran it."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import pytest

from harness.fakes import EchoRuntime
from harness.waiting import wait_for
from switchyard.overflow import OverflowSource, PoolBeats, oldest_ages, queue_name
from switchyard.payloads import S3PayloadStore
from switchyard.queues import ModelLanes, SqsWorkQueue
from switchyard.registry import DynamoDBRegistry
from switchyard.results import DynamoDBResultStore
from switchyard.schemas import QueueMessage
from switchyard_worker.overflow import OverflowGates
from switchyard_worker.pool import PoolWorker
from switchyard_worker.worker import Wiring

MODEL = "digits-cnn"
GPU_POOL, CPU_POOL = "gpu-tail", "cpu-tail"
NEVER_MS = 600_000  # an age limit no test reaches: only a stopped GPU pool opens


class Platform:
    def __init__(self, manifest, provisioned, clients) -> None:
        names = manifest.names("dev")
        self.manifest = manifest
        self.registry = DynamoDBRegistry(clients("dynamodb"), names.registry_table)
        self.registry.register(
            manifest.models[MODEL].version_record(MODEL, "v1", "s3://x/y", "0" * 64)
        )
        self.payloads = S3PayloadStore(clients("s3"), names.payloads_bucket)
        self.results = DynamoDBResultStore(
            clients("dynamodb"), names.results_table, self.payloads, 200_000
        )
        self.beats = PoolBeats(clients("dynamodb"), names.results_table)
        self.cloudwatch = clients("cloudwatch")
        self.sqs = clients("sqs")
        self.urls = provisioned.queues[MODEL]
        self.lanes = ModelLanes(
            SqsWorkQueue(self.sqs, self.urls["realtime"], "realtime"),
            SqsWorkQueue(self.sqs, self.urls["batch"], "batch"),
        )

    def cpu_worker(self, after_ms: int) -> PoolWorker:
        """A CPU pool's worker that serves digits-cnn on overflow alone."""
        gates = OverflowGates(
            {MODEL: OverflowSource(pool=GPU_POOL, after_ms=after_ms)},
            queue_names={MODEL: [queue_name(u) for u in self.urls.values()]},
            running=self.beats.running,
            ages=lambda names: oldest_ages(self.cloudwatch, names),
            age_read_seconds=0.5,
        )
        worker = PoolWorker(
            pool=CPU_POOL,
            lanes={MODEL: self.lanes},
            wiring=Wiring(
                worker_id="it-cpu",
                service=CPU_POOL,
                registry=self.registry,
                results=self.results,
                payloads=self.payloads,
                visibility_timeout=self.manifest.platform.visibility_timeout_seconds,
                poll_wait_seconds=1,
                emit=False,
            ),
            load_runtime=lambda record: EchoRuntime(),
            memory_budget_mib=256,
            gates=gates,
        )
        worker.preload()
        return worker

    def send(self, rid: str) -> None:
        message = QueueMessage(
            request_id=rid,
            tenant="acme",
            model=MODEL,
            version="v1",
            inputs=[[1.0] * 64],
            n_inputs=1,
            enqueued_at=time.time(),
            expires_at=time.time() + 600,
        )
        self.lanes.realtime.send(message.model_dump_json(), "acme")

    def received(self) -> dict[str, str]:
        return self.sqs.get_queue_attributes(
            QueueUrl=self.urls["realtime"],
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]


@pytest.fixture
def platform(manifest, provisioned, clients) -> Platform:
    return Platform(manifest, provisioned, clients)


@contextlib.contextmanager
def serving(worker: PoolWorker) -> Iterator[PoolWorker]:
    thread = threading.Thread(target=worker.run, name="cpu-pool-worker")
    thread.start()
    try:
        yield worker
    finally:
        worker.stop()
        thread.join(timeout=30)


def test_the_cpu_pool_waits_while_a_gpu_worker_runs_and_takes_the_work_once_none_does(
    platform,
):
    # GIVEN a running GPU pool worker (its word in the results table) and a CPU
    # pool's worker whose age limit is never reached
    platform.beats.beat(GPU_POOL, "gpu-1")
    assert platform.beats.running(GPU_POOL) == 1
    with serving(platform.cpu_worker(after_ms=NEVER_MS)):
        # WHEN a request arrives
        platform.send("held-1")
        # THEN the CPU pool leaves it alone: three rounds of its gate later it is
        # still waiting in the queue, never received
        time.sleep(3 * 1.0 + 0.5)
        assert platform.received() == {
            "ApproximateNumberOfMessages": "1",
            "ApproximateNumberOfMessagesNotVisible": "0",
        }
        assert platform.results.get("acme", "held-1") is None
        # WHEN the GPU pool's last worker stops (it takes its word back)
        platform.beats.end(GPU_POOL, "gpu-1")
        assert platform.beats.running(GPU_POOL) == 0
        # THEN the CPU pool answers it, and says so
        record = wait_for(lambda: platform.results.get("acme", "held-1"), 30, 0.1, "the answer")
        assert (record.status, record.served_by) == ("done", CPU_POOL)


def test_work_older_than_the_limit_goes_to_the_cpu_pool_while_a_gpu_worker_runs(platform):
    # GIVEN a running GPU pool worker that takes nothing, and a CPU pool whose limit
    # is 1.5 s (the emulator answers SQS's age metric live)
    platform.beats.beat(GPU_POOL, "gpu-2")
    with serving(platform.cpu_worker(after_ms=1500)):
        # WHEN a request waits
        sent = time.time()
        platform.send("aged-1")
        # THEN the CPU pool takes it once it is older than the limit, not before
        record = wait_for(lambda: platform.results.get("acme", "aged-1"), 30, 0.1, "the answer")
        assert (record.status, record.served_by) == ("done", CPU_POOL)
        assert record.timings["received_at"] - sent > 1.5
    assert platform.beats.running(GPU_POOL) == 1  # the GPU worker's word was never taken
    platform.beats.end(GPU_POOL, "gpu-2")


def test_a_worker_s_word_goes_stale_when_it_stops_saying_it(platform):
    # A GPU worker killed unasked never takes its word back: it stops counting once
    # it is older than three beats.
    now = time.time()
    platform.beats.beat(GPU_POOL, "gpu-killed", at=now - 16.0)
    platform.beats.beat(GPU_POOL, "gpu-alive", at=now - 1.0)
    assert platform.beats.running(GPU_POOL) == 1
    platform.beats.end(GPU_POOL, "gpu-alive")
    assert platform.beats.running(GPU_POOL) == 0
