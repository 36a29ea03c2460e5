"""A pool's worker against the emulator's SQS, DynamoDB and S3: two models' queues
long-polled by one worker, whose budget holds one of their versions at a time."""

from __future__ import annotations

import json
import threading
import time

from harness.fakes import EchoRuntime
from harness.waiting import wait_for
from switchyard.payloads import S3PayloadStore
from switchyard.queues import ModelLanes, SqsWorkQueue
from switchyard.registry import DynamoDBRegistry
from switchyard.results import DynamoDBResultStore
from switchyard.schemas import QueueMessage
from switchyard_worker.model_cache import Footprint
from switchyard_worker.pool import PoolWorker
from switchyard_worker.worker import Wiring

MODELS = ("digits-cnn", "minilm-embed")
INPUTS = {"digits-cnn": [[1.0] * 64], "minilm-embed": ["a sentence"]}


class Sized(EchoRuntime):
    """An echo model that takes 60 MiB: the budget of 100 holds one at a time."""

    mib = 60.0


class Meter:
    def sample(self) -> Footprint:
        return Footprint()

    def floor(self, runtime) -> Footprint:
        return Footprint(runtime.mib)

    def release(self) -> None:
        pass


def test_a_pool_worker_serves_two_models_queues_within_its_budget(
    manifest, provisioned, clients, tmp_path
):
    names = manifest.names("dev")
    registry = DynamoDBRegistry(clients("dynamodb"), names.registry_table)
    for model in MODELS:
        registry.register(manifest.models[model].version_record(model, "v1", "s3://x/y", "0" * 64))
    payloads = S3PayloadStore(clients("s3"), names.payloads_bucket)
    results = DynamoDBResultStore(clients("dynamodb"), names.results_table, payloads, 200_000)
    sqs = clients("sqs")
    lanes = {
        model: ModelLanes(
            SqsWorkQueue(sqs, provisioned.queues[model]["realtime"], "realtime"),
            SqsWorkQueue(sqs, provisioned.queues[model]["batch"], "batch"),
        )
        for model in MODELS
    }
    state = tmp_path / "worker-small-0.pool.json"
    # GIVEN a pool's worker over both models' queues, with room for one version
    worker = PoolWorker(
        pool="small",
        lanes=lanes,
        wiring=Wiring(
            worker_id="it-pool",
            registry=registry,
            results=results,
            payloads=payloads,
            visibility_timeout=manifest.platform.visibility_timeout_seconds,
            poll_wait_seconds=1,
            emit=False,
        ),
        load_runtime=lambda record: Sized(),
        memory_budget_mib=100,
        meter=Meter(),
        state_file=state,
    )
    worker.preload()
    thread = threading.Thread(target=worker.run, name="pool-worker")
    thread.start()
    try:
        # WHEN requests to each model arrive in turn, each after the one before is answered
        sent = []
        for i in range(6):
            model = MODELS[i % 2]
            rid = f"{model}-{i}"
            message = QueueMessage(
                request_id=rid,
                tenant="acme",
                model=model,
                version="v1",
                inputs=INPUTS[model],
                n_inputs=1,
                enqueued_at=time.time(),
                expires_at=time.time() + 600,
            )
            lanes[model].realtime.send(message.model_dump_json(), "acme")
            sent.append(rid)
            wait_for(lambda rid=rid: results.get("acme", rid), 30, 0.1, f"{rid}'s result")
    finally:
        worker.stop()
        thread.join(timeout=30)
    # THEN each was answered by its own model, once, and its message deleted
    for rid in sent:
        record = results.get("acme", rid)
        assert record.status == "done" and rid.startswith(record.model)
    for model in MODELS:
        attributes = sqs.get_queue_attributes(
            QueueUrl=provisioned.queues[model]["realtime"],
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        assert set(attributes.values()) == {"0"}
    # AND each turn loaded the other model's version in place of the last one
    written = json.loads(state.read_text())
    assert written["loads"] == 6 and written["evictions"] == 5
    assert written["loads_by_model"] == {"digits-cnn": 3, "minilm-embed": 3}
    assert [r["model"] for r in written["resident"]] == ["minilm-embed"]
    assert written["held_mib"] <= written["budget_mib"] == 100
