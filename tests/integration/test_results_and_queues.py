from __future__ import annotations

import json
import struct
import threading
import time

from switchyard.payloads import S3PayloadStore
from switchyard.queues import SqsWorkQueue, encode_message, load_inputs
from switchyard.results import (
    PACKED,
    AsStored,
    DynamoDBResultStore,
    Stored,
    as_stored,
)
from switchyard.schemas import QueueMessage, RequestCost, ResultRecord
from switchyard.tables import RESULTS
from tests.unit.test_together import while_one_is_out


def store(manifest, clients, threshold=200_000):
    names = manifest.names("dev")
    payloads = S3PayloadStore(clients("s3"), names.payloads_bucket)
    return DynamoDBResultStore(clients("dynamodb"), names.results_table, payloads, threshold)


def record(status="queued", tenant="acme", outputs=None):
    return ResultRecord(
        request_id="r1",
        tenant=tenant,
        model="digits-cnn",
        version="v1",
        status=status,
        outputs=outputs,
        created_at=time.time(),
        expires_at=int(time.time()) + 60,
    )


def test_a_result_is_written_once(manifest, provisioned, clients):
    results = store(manifest, clients)
    results.put_queued(record())
    assert results.get("acme", "r1").status == "queued"
    assert results.complete(record("done", outputs=[1])) == Stored.STORED
    assert results.complete(record("done", outputs=[2])) == Stored.REFUSED
    assert results.get("acme", "r1").outputs == [1]


def test_statuses_of_a_batch_come_in_one_read(manifest, provisioned, clients):
    results = store(manifest, clients)
    results.put_queued(record())
    results.complete(record("done", tenant="globex", outputs=[1]))
    keys = [("acme", "r1"), ("globex", "r1"), ("initech", "r1"), ("acme", "r1")]
    assert results.statuses(keys) == {("acme", "r1"): "queued", ("globex", "r1"): "done"}
    many = [("acme", f"x{i}") for i in range(150)]  # over BatchGetItem's 100 keys
    for _, rid in many[::50]:
        results.put_queued(record().model_copy(update={"request_id": rid}))
    assert set(results.statuses(many)) == {("acme", "x0"), ("acme", "x50"), ("acme", "x100")}


def test_records_of_many_requests_come_whole_in_one_read(manifest, provisioned, clients):
    results = store(manifest, clients)
    results.put_queued(record())
    results.complete(record("done", tenant="globex", outputs=[[0.5, 1.5]]))
    keys = [("acme", "r1"), ("globex", "r1"), ("initech", "r1"), ("globex", "r1")]
    found = results.get_many(keys)
    assert set(found) == {("acme", "r1"), ("globex", "r1")}
    assert found[("acme", "r1")].status == "queued"
    assert found[("globex", "r1")] == results.get("globex", "r1")
    assert found[("globex", "r1")].outputs == [[0.5, 1.5]]
    many = [("acme", f"y{i}") for i in range(150)]  # over BatchGetItem's 100 keys
    for _, rid in many[::50]:
        results.complete(record("done", outputs=[rid]).model_copy(update={"request_id": rid}))
    assert {k: r.outputs for k, r in results.get_many(many).items()} == {
        ("acme", "y0"): ["y0"],
        ("acme", "y50"): ["y50"],
        ("acme", "y100"): ["y100"],
    }


def test_only_a_queued_request_is_cancelled(manifest, provisioned, clients):
    results = store(manifest, clients)
    results.put_queued(record())
    cancelled = results.cancel("acme", "r1", time.time())
    assert cancelled.status == "cancelled"
    assert results.get("acme", "r1").status == "cancelled"
    # a worker cannot answer it
    assert results.complete(record("done", outputs=[1])) == Stored.REFUSED
    assert results.get("acme", "r1").status == "cancelled"
    results.complete(record("done", tenant="globex", outputs=[1]))
    assert results.cancel("globex", "r1", time.time()).status == "done"  # keeps its result
    assert results.get("globex", "r1").outputs == [1]
    assert results.cancel("initech", "r1", time.time()) is None


def test_expiring_a_queued_request_never_overwrites_a_result(manifest, provisioned, clients):
    results = store(manifest, clients)
    results.put_queued(record())
    expired = results.expire(results.get("acme", "r1"), time.time())
    assert expired.status == "expired" and expired.error.code == "expired"
    assert results.get("acme", "r1").status == "expired"
    results.complete(record("done", tenant="globex", outputs=[1]))
    late = results.expire(record(tenant="globex"), time.time())
    assert late.status == "done" and late.outputs == [1]


def test_only_an_exhausted_request_is_reopened(manifest, provisioned, clients):
    from switchyard.schemas import ErrorInfo

    results = store(manifest, clients)
    exhausted = record("error").model_copy(
        update={"error": ErrorInfo(code="retries_exhausted", message="failed after 3 attempts")}
    )
    results.complete(exhausted)
    assert results.reopen("acme", "r1") is True
    reopened = results.get("acme", "r1")
    assert reopened.status == "queued" and reopened.error is None
    assert results.complete(record("done", outputs=[7])) == Stored.STORED  # a worker answers it now
    assert results.reopen("acme", "r1") is False  # done stays done
    invalid = record("error", tenant="globex").model_copy(
        update={"error": ErrorInfo(code="invalid_input", message="bad")}
    )
    results.complete(invalid)
    assert results.reopen("globex", "r1") is False
    assert results.get("globex", "r1").status == "error"
    assert results.reopen("initech", "r1") is False


def test_no_tenant_reads_another_tenants_result(manifest, provisioned, clients):
    results = store(manifest, clients)
    results.complete(record("done", outputs=[1]))
    assert results.get("globex", "r1") is None


def test_large_outputs_go_to_s3_behind_a_claim_check(manifest, provisioned, clients):
    results = store(manifest, clients, threshold=1_000)
    outputs = [[0.123456] * 384 for _ in range(4)]
    results.complete(record("done", outputs=outputs))
    assert results.get("acme", "r1").outputs == outputs
    keys = clients("s3").list_objects_v2(Bucket=manifest.names("dev").payloads_bucket)["Contents"]
    assert len(keys) == 1 and keys[0]["Key"].startswith("results/acme/r1.")


def test_a_tenants_large_outputs_written_together_share_one_object(manifest, provisioned, clients):
    """A batch's results: three of acme's and one of globex's too large to hold
    inline, one of acme's small enough. Two objects, not four (one per tenant), each
    result read back whole and alone; a second copy of one, run again and refused,
    leaves the stored result's object as it was."""
    results = store(manifest, clients, threshold=1_000)
    bucket = manifest.names("dev").payloads_bucket
    s3 = clients("s3")

    def large(rid, tenant, k):
        outputs = [[round(0.001 * (k + j), 6)] * 384 for j in range(3)]
        return record("done", tenant=tenant, outputs=outputs).model_copy(update={"request_id": rid})

    batch = [large("a1", "acme", 1), large("a2", "acme", 2), large("g1", "globex", 3)]
    batch += [large("a3", "acme", 4), result_of("small", outputs=[[0.5, 0.25]])]
    assert inserted(results, batch) == [True] * 5
    keys = sorted(k["Key"] for k in s3.list_objects_v2(Bucket=bucket)["Contents"])
    assert len(keys) == 2
    assert keys[0].startswith("results/acme/a1.") and keys[1].startswith("results/globex/g1.")
    for r in batch:
        assert results.get(r.tenant, r.request_id).outputs == r.outputs
    assert results.get("globex", "a1") is None  # scoped to the tenant as before
    shared = json.loads(s3.get_object(Bucket=bucket, Key=keys[0])["Body"].read())
    assert shared == [batch[0].outputs, batch[1].outputs, batch[3].outputs]
    again = large("a2", "acme", 9)
    assert inserted(results, [again]) == [False]
    assert results.get("acme", "a2").outputs == batch[1].outputs


def test_large_inputs_travel_by_claim_check_with_the_tenant_as_group(
    manifest, provisioned, clients
):
    names = manifest.names("dev")
    payloads = S3PayloadStore(clients("s3"), names.payloads_bucket)
    queue = SqsWorkQueue(clients("sqs"), provisioned.queues["minilm-embed"]["realtime"], "realtime")
    inputs = ["x" * 4000] * 60
    message = QueueMessage(
        request_id="big",
        tenant="acme",
        model="minilm-embed",
        version="v1",
        inputs=inputs,
        n_inputs=60,
        enqueued_at=time.time(),
        expires_at=time.time() + 60,
    )
    body = encode_message(message, payloads, manifest.platform.claim_check_bytes)
    assert len(body) < 1_000
    queue.send(body, "acme")
    (received,) = queue.receive(10, 1)
    assert received.group == "acme"
    decoded = QueueMessage.model_validate_json(received.body)
    assert decoded.inputs is None and decoded.inputs_ref
    assert load_inputs(decoded, payloads) == inputs


def test_a_batchs_messages_are_received_released_and_deleted_ten_to_a_call_together(
    provisioned, clients
):
    sqs = clients("sqs")
    seen: list[tuple[str, str]] = []
    for event in ("before-call", "after-call"):
        for operation in ("ReceiveMessage", "DeleteMessageBatch", "ChangeMessageVisibilityBatch"):
            sqs.meta.events.register(
                f"{event}.sqs.{operation}",
                lambda event_name, **_: seen.append(tuple(event_name.split(".")[::2])),
            )

    def together(operation: str, calls: int) -> list[tuple[str, str]]:
        return [("before-call", operation)] * calls + [("after-call", operation)] * calls

    queue = SqsWorkQueue(sqs, provisioned.queues["minilm-embed"]["realtime"], "realtime")
    for i in range(25):
        queue.send(json.dumps({"n": i}), "acme")
    # WHEN 25 are received without a wait: three calls, all sent before an answer
    held = queue.receive(25, 0)
    assert sorted(json.loads(r.body)["n"] for r in held) == list(range(25))
    assert seen == together("ReceiveMessage", 3)
    # AND released: three calls the same way
    seen.clear()
    queue.set_visibility(held, 0)
    assert seen == together("ChangeMessageVisibilityBatch", 3)
    # AND a long poll is one call, of ten at most
    seen.clear()
    first = queue.receive(25, 1)
    assert len(first) == 10 and seen == together("ReceiveMessage", 1)
    rest = queue.receive(15, 0)
    assert len(rest) == 15
    # AND deleted: three calls, all sent before an answer
    seen.clear()
    queue.delete(first + rest)
    assert seen == together("DeleteMessageBatch", 3)
    assert queue.receive(10, 0) == []


def test_tensor_rows_travel_as_a_block_and_by_claim_check_as_json_when_large(
    manifest, provisioned, clients
):
    names = manifest.names("dev")
    payloads = S3PayloadStore(clients("s3"), names.payloads_bucket)
    queue = SqsWorkQueue(clients("sqs"), provisioned.queues["digits-cnn"]["realtime"], "realtime")
    small, large = [[0.25] * 64] * 2, [[16.0] * 64] * 400  # 400 rows: 205 KB as a block
    for request_id, inputs in (("small", small), ("large", large)):
        message = QueueMessage(
            request_id=request_id, tenant="acme", model="digits-cnn", version="v1",
            inputs=inputs, n_inputs=len(inputs), enqueued_at=time.time(),
            expires_at=time.time() + 60,
        )  # fmt: skip
        queue.send(
            encode_message(message, payloads, manifest.platform.claim_check_bytes, rows=True),
            "acme",
        )
    received = {}
    for _ in range(5):
        for r in queue.receive(10, 1):
            decoded = QueueMessage.model_validate_json(r.body)
            received[decoded.request_id] = decoded
        if len(received) == 2:
            break
    # the small one's rows are one block of numbers in the message
    assert received["small"].inputs is None and received["small"].inputs_ref is None
    assert received["small"].tensor == struct.pack("<128d", *([0.25] * 128))
    # the large one's are in S3, as JSON, as any large inputs are
    assert received["large"].tensor is None and received["large"].inputs_ref
    assert load_inputs(received["large"], payloads) == large


def test_embeddings_are_stored_packed_and_read_back_exactly(manifest, provisioned, clients):
    results = store(manifest, clients)
    embeddings = [[round(0.001 * i - 0.19, 7) for i in range(384)] for _ in range(3)]
    classes = [{"class": 3, "label": "3", "probabilities": [0.1] * 10}]
    for request_id, outputs in (("emb", embeddings), ("cls", classes)):
        done = record("done", outputs=outputs).model_copy(update={"request_id": request_id})
        assert results.complete(done) == Stored.STORED
        assert results.get("acme", request_id).outputs == outputs
    table = manifest.names("dev").results_table
    ddb = clients("dynamodb")

    def item(request_id):
        key = {"tenant": {"S": "acme"}, "request_id": {"S": request_id}}
        return ddb.get_item(TableName=table, Key=key)["Item"]

    packed = item("emb")
    assert "outputs" not in packed and len(packed["outputs_e7"]["B"]) == 4 + 4 * 3 * 384
    assert "outputs_e7" not in item("cls") and item("cls")["outputs"]["S"].startswith('[{"class"')
    # An item written when embeddings were packed as float32 still reads back.
    old = [[0.25, -0.5], [0.1234567, 0.0]]
    done = record("done", outputs=old).model_copy(update={"request_id": "old"})
    assert results.complete(done) == Stored.STORED
    written = item("old")
    del written["outputs_e7"]
    floats = struct.pack("<4f", *(v for row in old for v in row))
    written["outputs_f32"] = {"B": struct.pack("<I", 2) + floats}
    ddb.put_item(TableName=table, Item=written)
    assert results.get("acme", "old").outputs == old


def test_cached_outputs_are_kept_per_tenant_and_version_until_they_expire(
    manifest, provisioned, clients
):
    from switchyard.result_cache import CacheEntry, DynamoDBResultCache, cache_key

    names = manifest.names("dev")
    cache = DynamoDBResultCache(clients("dynamodb"), names.results_table)
    soon = int(time.time()) + 60
    # GIVEN 60 entries (over BatchWriteItem's 25), one of them twice, one already expired
    entries = [
        CacheEntry("acme", "minilm-embed", "v1", cache_key([f"text {i}"]), [[i / 8, 0.5]], soon)
        for i in range(60)
    ]
    entries.append(entries[0])
    entries.append(CacheEntry("acme", "minilm-embed", "v1", cache_key(["old"]), [[0]], 1))
    # WHEN they are stored
    stored = cache.put(entries)
    # THEN each is stored once, and read back by its own tenant and version only
    assert stored == 61
    key = cache_key(["text 7"])
    assert cache.get("acme", "minilm-embed", "v1", key) == [[0.875, 0.5]]  # packed as float32
    digits = [{"class": 3, "probabilities": [0.1] * 10}]
    cache.put([CacheEntry("acme", "digits-cnn", "v1", key, digits, soon)])
    assert cache.get("acme", "digits-cnn", "v1", key) == digits  # kept as JSON
    assert cache.get("globex", "minilm-embed", "v1", key) is None
    assert cache.get("acme", "minilm-embed", "v2", key) is None
    assert cache.get("acme", "minilm-embed", "v1", cache_key(["old"])) is None  # expired
    # and the tenant's requests are untouched by its cache entries
    results = store(manifest, clients)
    assert results.get("acme", "r1") is None


def test_a_failed_attempt_on_a_request_with_no_record_yet_writes_its_queued_record(
    manifest, provisioned, clients
):
    # GIVEN a sync request in flight: no queued record (the router writes none)
    results = store(manifest, clients)
    queued = record().model_copy(update={"request_id": "sync-1"})
    # WHEN its batch fails twice
    results.mark_failed(queued, "RuntimeError: boom")
    results.mark_failed(queued, "RuntimeError: boom again")
    # THEN it reads back queued, with both failures, as the router's wait looks for
    stored = results.get("acme", "sync-1")
    assert stored.status == "queued" and stored.failures == 2
    assert stored.last_failure == "v1: RuntimeError: boom again"
    # and an answered request is left as it is
    assert results.complete(record("done", outputs=[1]).model_copy(update={"request_id": "sync-1"}))
    results.mark_failed(queued, "late")
    assert results.get("acme", "sync-1").status == "done"
    # and the router's hand-off finds the record taken
    assert results.put_queued(queued) is False


def dynamodb_calls(clients) -> list[str]:
    """The operations the DynamoDB client makes from now on, in order."""
    calls: list[str] = []
    clients("dynamodb").meta.events.register(
        "before-call.dynamodb.*", lambda model, **_: calls.append(model.name)
    )
    return calls


def result_of(rid, status="done", outputs=None):
    return record(status, outputs=outputs).model_copy(update={"request_id": rid})


def inserted(results, batch, outputs=None):
    """``batch`` stored as sync requests' results are: new."""
    return results.complete_batch(batch, [True] * len(batch), outputs)


def over_queued(results, batch, outputs=None):
    """``batch`` stored as async requests' results are: over their queued records."""
    return results.complete_batch(batch, [False] * len(batch), outputs)


def test_a_batchs_writes_are_sent_together_new_ones_inserted_the_others_over_queued(
    manifest, provisioned, clients
):
    """A worker's batch of 60: 30 sync results (two BatchExecuteStatements of
    INSERTs) and 30 async ones over their queued records (two of UPDATEs), the four
    calls sent before any answer is read; each result stored its way."""
    seen: list[str] = []
    for event in ("before-call", "after-call"):
        clients("dynamodb").meta.events.register(
            f"{event}.dynamodb.BatchExecuteStatement",
            lambda event_name, **_: seen.append(event_name.split(".")[0]),
        )
    results = store(manifest, clients)
    waiting = [result_of(f"q{i}", "queued") for i in range(30)]
    for r in waiting:
        assert results.put_queued(r)
    sync = [result_of(f"s{i}", outputs=[i]) for i in range(30)]
    done = [result_of(f"q{i}", outputs=[-i]) for i in range(30)]
    # WHEN the batch is stored, its sync and async results interleaved
    batch = [r for pair in zip(sync, done, strict=True) for r in pair]
    new = [r.request_id.startswith("s") for r in batch]
    assert results.complete_batch(batch, new) == [Stored.STORED] * 60
    # THEN its four calls all went out before the first answer came back
    assert seen == ["before-call"] * 4 + ["after-call"] * 4
    for r in batch:
        assert results.get("acme", r.request_id).outputs == r.outputs


def test_new_results_are_inserted_many_to_a_call_and_never_replace_one(
    manifest, provisioned, clients
):
    """A worker's sync results: 30 new ones (two BatchExecuteStatements of INSERTs);
    one handed off at its deadline (queued: stored over it); one already answered
    (kept); one with outputs too large to hold inline (behind a claim-check); a
    second copy of one of the new ones (kept out of the call, and not stored)."""
    calls = dynamodb_calls(clients)
    results = store(manifest, clients, threshold=2_000)
    one = result_of

    results.put_queued(one("handed-off", "queued"))
    assert results.complete(one("answered", outputs=["first"])) == Stored.STORED
    new = [one(f"n{i}", outputs=[[0.5, -0.25, float(i)]]) for i in range(30)]
    batch = [*new, one("handed-off", outputs=[1]), one("answered", outputs=["second"])]
    batch.append(one("large", outputs=[["x" * 100] * 50]))
    batch.append(one("n3", outputs=["delivered twice"]))
    calls.clear()
    assert inserted(results, batch) == [True] * 31 + [False, True, False]
    assert calls.count("BatchExecuteStatement") == 2
    # The two whose keys were taken went on to the conditional put, one each, and so
    # did the second copy of a request in the same batch (one statement per item).
    assert calls.count("PutItem") == 3
    for r in new:
        stored = results.get("acme", r.request_id)
        assert stored == r
    assert results.get("acme", "handed-off").outputs == [1]
    assert results.get("acme", "answered").outputs == ["first"]
    assert results.get("acme", "large").outputs == [["x" * 100] * 50]


def test_queued_results_are_updated_many_to_a_call_and_never_replace_a_final_one(
    manifest, provisioned, clients
):
    """A worker's async results: 30 over their queued records (two
    BatchExecuteStatements of UPDATEs), one of them after failed attempts (whose
    count goes with the queued record); one already cancelled (kept); one with no
    record at all (stored by the conditional put); one with outputs too large to hold
    inline; a second copy of one of the 30 (kept out of the call, and not stored)."""
    calls = dynamodb_calls(clients)
    results = store(manifest, clients, threshold=2_000)
    one = result_of

    waiting = [one(f"q{i}", "queued") for i in range(30)] + [one("large", "queued")]
    for r in waiting:
        assert results.put_queued(r)
    results.mark_failed(waiting[0], "RuntimeError: boom")
    assert results.get("acme", "q0").failures == 1
    assert results.put_queued(one("gone", "queued"))
    assert results.cancel("acme", "gone", at=time.time()).status == "cancelled"
    done = [one(f"q{i}", outputs=[[0.5, -0.25, float(i)]]) for i in range(30)]
    batch = [*done, one("gone", outputs=[1]), one("unrecorded", outputs=[2])]
    batch.append(one("large", outputs=[["x" * 100] * 50]))
    batch.append(one("q3", outputs=["delivered twice"]))
    calls.clear()
    assert over_queued(results, batch) == [True] * 30 + [False, True, True, False]
    assert calls.count("BatchExecuteStatement") == 2
    # The cancelled one and the one without a record went on to the conditional put,
    # and so did the second copy of a request in the same batch.
    assert calls.count("PutItem") == 3
    for r in done:
        assert results.get("acme", r.request_id) == r  # no failure left on q0
    assert results.get("acme", "gone").status == "cancelled"
    assert results.get("acme", "unrecorded").outputs == [2]
    assert results.get("acme", "large").outputs == [["x" * 100] * 50]
    assert results.get("acme", "q3").outputs == [[0.5, -0.25, 3.0]]


def test_a_result_stored_over_a_counted_queued_record_says_so(manifest, provisioned, clients):
    """A sync request handed off at its deadline: its queued record says its tenant's
    queued work counted it, and the worker's result replacing it says so (the put's
    old item, no call more), so that its writer gives the place back, once."""
    calls = dynamodb_calls(clients)
    results = store(manifest, clients)
    one = result_of
    counted = one("handed-off", "queued").model_copy(update={"queued_counted": True})
    assert results.put_queued(counted)
    assert results.put_queued(one("uncounted", "queued"))
    assert results.get("acme", "handed-off").queued_counted
    assert not results.get("acme", "uncounted").queued_counted
    batch = [one("handed-off", outputs=[1]), one("uncounted", outputs=[2]), one("new")]
    calls.clear()
    stored = inserted(results, batch)
    assert stored == [Stored.OVER_COUNTED, Stored.STORED, Stored.STORED]
    assert calls == ["BatchExecuteStatement", "PutItem", "PutItem"]
    # a second result is refused and says nothing; the result holds no count
    assert results.complete(one("handed-off", outputs=[3])) == Stored.REFUSED
    assert results.get("acme", "handed-off").outputs == [1]
    assert not results.get("acme", "handed-off").queued_counted
    # an UPDATE over a counted record cannot tell (the message says it for async
    # work), and leaves no count on the result either
    assert results.put_queued(counted.model_copy(update={"request_id": "async"}))
    assert over_queued(results, [one("async", outputs=[4])]) == [Stored.STORED]
    assert not results.get("acme", "async").queued_counted


def test_outputs_worked_out_for_the_store_are_written_as_given(manifest, provisioned, clients):
    """The worker works out its results' outputs as their items hold them to price
    them (``switchyard.costs.price_answers``); the store writes those rather than
    pack them again, and works them out itself if they were for another limit."""
    results = store(manifest, clients, threshold=2_000)
    ddb = clients("dynamodb")
    table = manifest.names("dev").results_table
    embedding, large = [[0.5, -0.25, 3.0]], [["x" * 100] * 50]
    batch = [
        result_of("packed", outputs=embedding),
        result_of("json", outputs=[{"class": 1}]),
        result_of("large", outputs=large),
        result_of("none"),
    ]
    for r in batch:
        assert results.put_queued(r.model_copy(update={"status": "queued", "outputs": None}))
    worked_out = as_stored(batch, 2_000)
    assert worked_out.each[0][0] == PACKED and isinstance(worked_out.each[2], bytes)
    assert worked_out.each[3] is None

    def item(rid):
        key = {RESULTS.partition: {"S": "acme"}, RESULTS.sort: {"S": rid}}
        return ddb.get_item(TableName=table, Key=key, ConsistentRead=True)["Item"]

    # WHEN a batch is stored with its outputs as worked out, but one of them given
    # as JSON text rather than packed (what the store itself would not write)
    as_json = ("outputs", {"S": json.dumps(embedding)})
    # and the docs as worked out, but one of them naming another worker
    docs = list(worked_out.docs)
    docs[1] = json.dumps({**json.loads(docs[1]), "worker": "given"})
    given = AsStored(2_000, [as_json, *worked_out.each[1:]], docs)
    assert over_queued(results, batch, given) == [Stored.STORED] * 4
    # THEN each item holds what was given, and reads back as its record
    assert "outputs" in item("packed") and PACKED not in item("packed")
    assert "outputs_ref" in item("large")
    assert [item(r.request_id)["doc"]["S"] for r in batch] == docs
    assert results.get("acme", "json").worker == "given"
    for r in batch:
        assert results.get("acme", r.request_id).outputs == r.outputs
    # AND outputs worked out for another limit are worked out again for the store's:
    # held inline there, too large here
    again = [result_of("again", outputs=large)]
    assert inserted(results, again, as_stored(again, 200_000)) == [Stored.STORED]
    assert "outputs_ref" in item("again") and "outputs" not in item("again")
    assert results.get("acme", "again").outputs == large


def test_a_results_cost_is_held_apart_from_its_doc_and_read_back_with_it(
    manifest, provisioned, clients
):
    """An item holds its result's cost as an attribute of its own, so that the doc the
    worker writes to price the result is the one stored; an item written with its
    cost in its doc still reads back with it."""
    results = store(manifest, clients)
    ddb = clients("dynamodb")
    table = manifest.names("dev").results_table
    cost = RequestCost(
        usd=3e-6, worker_usd=1e-6, aws_usd=2e-6, worker_seconds=0.01,
        instance_type="c7i.xlarge", aws={"sqs": 1.5e-6, "dynamodb": 5e-7},
    )  # fmt: skip
    # GIVEN two results that cost the same (one cost, as the pricing makes them), one
    # with a cost of its own, and one that has no cost
    own = cost.model_copy(update={"usd": 4e-6, "aws_usd": 3e-6})
    priced = [result_of(rid, outputs=[1]).model_copy(update={"cost": cost}) for rid in "ab"]
    priced.append(result_of("own", outputs=[3]).model_copy(update={"cost": own}))
    batch = [*priced, result_of("free", outputs=[2])]
    # WHEN they are stored, their docs worked out before their costs were set
    worked_out = as_stored([r.model_copy(update={"cost": None}) for r in batch], 200_000)
    assert inserted(results, batch, worked_out) == [Stored.STORED] * 4

    def item(rid):
        key = {RESULTS.partition: {"S": "acme"}, RESULTS.sort: {"S": rid}}
        return ddb.get_item(TableName=table, Key=key, ConsistentRead=True)["Item"]

    # THEN each priced item holds its cost apart, and none holds one in its doc
    for rid in "ab":
        assert json.loads(item(rid)["cost"]["S"]) == cost.model_dump(exclude_none=True)
    assert json.loads(item("own")["cost"]["S"]) == own.model_dump(exclude_none=True)
    assert "cost" not in item("free")
    assert all("cost" not in json.loads(item(r.request_id)["doc"]["S"]) for r in batch)
    # AND each reads back as it was stored
    for r in batch:
        assert results.get("acme", r.request_id).cost == r.cost
    # AND an item whose doc holds its cost reads back with it
    old = item("a")
    doc = {**json.loads(old["doc"]["S"]), "cost": json.loads(old.pop("cost")["S"])}
    old.update({RESULTS.sort: {"S": "old"}, "doc": {"S": json.dumps(doc)}})
    ddb.put_item(TableName=table, Item=old)
    assert results.get("acme", "old").cost == cost


def test_a_key_naming_a_token_chunk_is_no_request(manifest, provisioned, clients):
    from switchyard.generation import Chunk, DynamoDBTokenStream, chunk_key

    # GIVEN a streamed request's first chunk, in the results table beside its record
    results = store(manifest, clients)
    results.put_queued(record())
    tokens = DynamoDBTokenStream(clients("dynamodb"), manifest.names("dev").results_table)
    tokens.put("acme", "r1", Chunk(start=0, ids=[1], pieces=["a"]), int(time.time()) + 60)
    # WHEN a client asks for (or cancels) the chunk's key as a request id
    # THEN there is no such request (its read raised KeyError: a 500)
    assert results.get("acme", chunk_key("r1", 0)) is None
    assert results.cancel("acme", chunk_key("r1", 0), time.time()) is None
    assert results.get("acme", "r1").status == "queued"


def test_messages_sent_at_once_by_threads_go_in_batches_each_with_its_group(
    provisioned, clients
):
    # GIVEN a queue whose first send is held on its way out
    sqs = clients("sqs")
    queue = SqsWorkQueue(sqs, provisioned.queues["minilm-embed"]["batch"], "batch")
    calls: list[tuple[str, int]] = []
    first_out, release = threading.Event(), threading.Event()

    def seen(params: dict, model: object, **_: object) -> None:
        calls.append((model.name, len(params.get("Entries", [None]))))  # type: ignore[attr-defined]
        if len(calls) == 1:
            first_out.set()
            assert release.wait(10)

    sqs.meta.events.register("before-parameter-build.sqs.*", seen)
    try:
        # WHEN 11 more are sent while it is out, by tenants of their own
        while_one_is_out(
            queue._sending,
            lambda: queue.send("first", "acme"),
            [lambda i=i: queue.send(f"m{i}", f"tenant{i % 3}") for i in range(11)],
            first_out,
            release,
        )
    finally:
        sqs.meta.events.unregister("before-parameter-build.sqs.*", seen)
    # THEN the first went alone, the 11 in two batches (SQS takes 10 a call)
    assert calls == [("SendMessage", 1), ("SendMessageBatch", 10), ("SendMessageBatch", 1)]
    # AND every message is queued once, with its tenant as its group
    got: dict[str, str | None] = {}
    deadline = time.monotonic() + 10
    while len(got) < 12 and time.monotonic() < deadline:
        received = queue.receive(10, 1)
        got.update({m.body: m.group for m in received})
        queue.delete(received)
    assert got == {"first": "acme", **{f"m{i}": f"tenant{i % 3}" for i in range(11)}}
