"""The worker's pipeline stages, each on its own: the intake's decoding and its
forming batch, triage, the finisher and the messages in hand, on in-memory queues
and stores (``tests/test_worker.py`` runs them wired together)."""

from __future__ import annotations

import threading
import time

import msgspec
import numpy as np
import pytest

from harness.fakes import EchoRuntime, FakePayloads, FakeRegistry, version_record
from harness.waiting import wait_for
from switchyard.results import Stored
from switchyard.schemas import QueueMessage, ResultRecord
from switchyard.telemetry import prediction_records
from switchyard_worker.finisher import BatchRun, _outcomes
from switchyard_worker.intake import read_messages
from switchyard_worker.tensors import stacked
from switchyard_worker.versions import ServedVersions
from tests.unit.test_batching import pending
from tests.unit.test_worker import build, send


class Stages:
    """The stages as the worker wires them (``tests/unit/test_worker.py``'s ``build``),
    each called directly: the worker's threads are never started."""

    def __init__(self, digits_v1, visibility: int = 60) -> None:
        self.worker, self.realtime, self.batch, self.results, _, self.log = build(
            digits_v1, EchoRuntime(), visibility_timeout=visibility
        )
        self.intake = self.worker.intake
        self.triage = self.worker.triage
        self.finisher = self.worker.finisher
        self.in_hand = self.worker.in_hand
        self.stopping = threading.Event()

    def pending(self, queue=None):
        """What one receive of ``queue`` (the realtime lane) gives, decoded and held."""
        return self.intake.keep((queue or self.realtime).receive(10, 0))

    def close(self) -> None:
        self.stopping.set()
        self.finisher.close()


@pytest.fixture
def stages(digits_v1):
    s = Stages(digits_v1)
    yield s
    s.close()


# -- intake ------------------------------------------------------------------------


def test_read_messages_keeps_what_is_wrong_with_each_message_as_its_error(stages, digits_v1):
    # GIVEN an undecodable body, a version nobody serves, inputs off the signature,
    # and a good request
    stages.realtime.send("{not json", "acme")
    send(stages.realtime, "r-unknown", version="v9")
    send(stages.realtime, "r-bad", inputs=[[1] * 63])
    send(stages.realtime, "r-good")
    received = stages.realtime.receive(10, 0)
    # WHEN they are read together, as one receive
    read = read_messages(
        received,
        time.monotonic(),
        time.time(),
        model="digits-cnn",
        versions=ServedVersions("digits-cnn", FakeRegistry(digits_v1), lambda _: EchoRuntime()),
        payloads=FakePayloads(),
    )
    # THEN the undecodable one has no request to answer, the others their own error
    undecodable, unknown, bad, good = read
    assert undecodable.message is None and undecodable.error is None
    assert unknown.error is not None and unknown.error.code == "unknown_version"
    assert bad.error is not None and bad.error.code == "invalid_input"
    assert bad.error.field == "inputs[0]"
    assert good.error is None and good.inputs == [[1] * 64]


def test_texts_read_together_are_taken_whole_or_each_named_what_is_wrong(stages):
    # GIVEN a text model's version, and a receive of good sentences, then one where
    # a sentence is blank
    record = version_record("minilm-embed")
    versions = ServedVersions("minilm-embed", FakeRegistry(record), lambda _: EchoRuntime())

    def receive(*texts):
        for i, text in enumerate(texts):
            message = QueueMessage(
                request_id=f"r{i}", tenant="acme", model="minilm-embed", version="v1",
                inputs=[text], n_inputs=1, enqueued_at=time.time(), expires_at=time.time() + 60,
            )  # fmt: skip
            stages.realtime.send(message.model_dump_json(), "acme")
        return read_messages(
            stages.realtime.receive(10, 0), time.monotonic(), time.time(), model="minilm-embed",
            versions=versions, payloads=FakePayloads(),
        )  # fmt: skip

    # WHEN each receive is read
    good = receive("a sentence", "another one")
    mixed = receive("fine", " \t ", "x" * (record.signature.max_chars + 1))
    # THEN the good ones are taken as they came, and in the other each is named
    # what is wrong with it, as the signature's check of it alone names it
    assert [(p.error, p.inputs) for p in good] == [(None, ["a sentence"]), (None, ["another one"])]
    assert mixed[0].error is None and mixed[0].inputs == ["fine"]
    assert [(p.error.code, p.error.field) for p in mixed[1:] if p.error] == [
        ("invalid_input", "inputs[0]"), ("invalid_input", "inputs[0]"),
    ]  # fmt: skip
    assert "must not be empty" in mixed[1].error.message
    assert "characters" in mixed[2].error.message


def test_the_intake_receives_no_more_than_the_forming_batch_has_room_for(stages):
    # GIVEN 70 one-input requests queued, and a version whose batch holds 64
    for i in range(70):
        send(stages.realtime, f"r{i}")
    # WHEN the intake receives until the forming batch is full
    while stages.intake.room() > 0:
        stages.intake.receive()
    # THEN it holds exactly one batch, and the rest wait in the queue
    assert stages.intake.assembler.held_inputs == 64
    assert len(stages.realtime.visible) == 6
    # AND the model's thread takes that batch at once, as it is full
    batch = stages.intake.take_due()
    assert len(batch) == 64 and stages.intake.assembler.held == []


def test_a_batch_forming_from_a_backlog_asks_for_its_room_at_once(stages):
    # GIVEN 70 one-input requests queued, and a version whose batch holds 64
    for i in range(70):
        send(stages.realtime, f"r{i}")
    # WHEN the intake receives until the forming batch is full
    while stages.intake.room() > 0:
        stages.intake.receive()
    # THEN its first look (a long poll) asked for ten, and, having found all ten, the
    # next asked for the rest of the batch's room in one receive
    assert stages.realtime.asked == [10, 54]
    assert stages.intake.assembler.held_inputs == 64
    # AND once a look finds fewer than it asked for, the next asks for ten at most
    stages.intake.take_due()
    stages.intake.receive()  # the six left
    assert stages.intake.assembler.held_inputs == 6
    send(stages.realtime, "r70")
    stages.worker.stop()  # so that its next look does not wait for the batch to be due
    stages.intake.receive()
    assert stages.realtime.asked[2:] == [10, 10]
    assert stages.intake.assembler.held_inputs == 7


def test_the_intake_learns_the_batch_cost_from_what_the_model_reports(stages):
    # GIVEN the model ran batches of 8 and 32 of v1, and one failed
    stages.intake.model_started("v1", 8)
    stages.intake.model_ended("v1", 8, 0.010)
    stages.intake.model_started("v1", 32)
    stages.intake.model_ended("v1", 32, 0.040)
    stages.intake.model_started("v1", 16)
    stages.intake.model_ended("v1", 16, None)
    # THEN a batch of 16 is expected to take between the two
    assert 0.010 < stages.intake.assembler.expected("v1", 16) < 0.040


# -- triage ------------------------------------------------------------------------


def test_triage_answers_what_needs_no_model_and_deletes_what_was_answered(stages):
    # GIVEN an expired request, one with bad inputs, one answered already, one to run
    send(stages.realtime, "r-expired", expires_at=time.time() - 1)
    send(stages.realtime, "r-bad", inputs=[[99] * 64])
    send(stages.realtime, "r-answered")
    send(stages.realtime, "r-run")
    stages.results.complete(
        ResultRecord(
            request_id="r-answered",
            tenant="acme",
            model="digits-cnn",
            version="v1",
            status="done",
            outputs=[1],
            created_at=0.0,
            expires_at=10**10,
        )
    )
    batch = stages.pending()
    # WHEN the batch is triaged
    answered, runnable = stages.triage(batch)
    # THEN only the last one runs; the first two get their final results, and the
    # answered one's message is deleted without a second result
    assert [p.message.request_id for p in runnable] == ["r-run"]
    assert {p.message.request_id: r.status for p, r in answered} == {
        "r-expired": "expired",
        "r-bad": "error",
    }
    assert ("delete", batch[2].received.message_id) in stages.log
    assert ("statuses", 4) in stages.log  # one read of the results table for the batch


# -- finisher ----------------------------------------------------------------------


def test_the_finisher_stores_each_batch_before_deleting_its_messages(stages):
    # GIVEN two batches answered, one after the other
    for rid in ("r1", "r2", "r3"):
        send(stages.realtime, rid)
    held = stages.pending()
    # WHEN both are submitted
    for batch in (held[:1], held[1:]):
        stages.finisher.submit(
            [(p, stages.finisher.record(p, "done", outputs=[[0]])) for p in batch]
        )
    stages.finisher.flush()
    # THEN each result was written before its message was deleted, batch by batch
    kinds = [kind for kind, _ in stages.log if kind in ("result", "delete")]
    assert kinds == ["result", "delete", "result", "result", "delete", "delete"]
    assert stages.realtime.depth == 0 and stages.in_hand.held() == []


def test_a_batchs_records_are_each_its_own_and_what_validation_would_make(stages):
    # GIVEN a batch of three requests, of one, two and one inputs, run in the model
    for rid, n in (("r1", 1), ("r2", 2), ("r3", 1)):
        send(stages.realtime, rid, inputs=[[n] * 64] * n)
    held = stages.pending()
    started = time.time()
    # WHEN the finisher builds their records from the batch's run (8 ms for 4 inputs)
    ran = BatchRun(started, 8.0, 4)
    records = stages.finisher.records(held, "done", outputs=[[[i]] for i in range(3)], ran=ran)
    # THEN each is the record validation makes of its fields, with its own message's
    # fields and its share of the batch's time
    assert [r.request_id for r in records] == ["r1", "r2", "r3"]
    for p, r, share in zip(held, records, (2.0, 4.0, 2.0), strict=True):
        assert r == ResultRecord.model_validate(r.model_dump())
        assert r.worker == "w1" and r.status == "done" and r.outputs == [[held.index(p)]]
        assert r.created_at == p.message.enqueued_at
        assert r.timings["worker_ms"] == share and r.timings["batch_size"] == 4.0
        assert r.timings["batch_wait_ms"] == (started - p.received_at) * 1000
    # and completing one changes no other
    records[0].completed_at = records[0].timings["completed_at"] = started + 60
    records[0].outputs.append(["more"])
    assert {r.completed_at for r in records[1:]} == {records[1].timings["completed_at"]}
    assert records[1].completed_at != started + 60 and records[1].outputs == [[1]]


def test_a_result_is_completed_as_its_write_leaves_not_when_it_was_built(stages):
    # GIVEN a sync and an async request's results, built a while before they are stored
    send(stages.realtime, "r-sync", respond_by=time.time() + 30)
    send(stages.realtime, "r-async")
    held = stages.pending()
    answered = [(p, stages.finisher.record(p, "done", outputs=[[0]])) for p in held]
    built = max(r.completed_at for _, r in answered)
    time.sleep(0.05)
    # WHEN the finisher stores them
    submitted = time.time()
    stages.finisher.submit(answered)
    stages.finisher.flush()
    # THEN each stored record was completed as it was written, its timings saying so
    for rid in ("r-sync", "r-async"):
        stored = stages.results.get("acme", rid)
        assert stored.completed_at >= submitted > built
        assert stored.timings["completed_at"] == stored.completed_at


def test_a_batchs_stored_line_names_each_request_by_how_it_ended(stages):
    # GIVEN results for three requests: two first deliveries, one a redelivery
    first, second, again = pending("acme"), pending("globex"), pending("acme", count=3)
    ids = [p.message.request_id for p in (first, second, again)]

    def answered(*batch):
        return [(p, stages.finisher.record(p, status, outputs=[[0]])) for p, status in batch]

    # WHEN the line is made for the usual batch (all stored, one status, no retry),
    # for one with a result refused and another status, and for one with a retry
    usual = _outcomes(answered((first, "done"), (second, "done")), [Stored.STORED] * 2)
    mixed = _outcomes(
        answered((first, "done"), (second, "expired")), [Stored.REFUSED, Stored.OVER_COUNTED]
    )
    retried = _outcomes(answered((first, "done"), (again, "done")), [Stored.STORED] * 2)
    # THEN each names every request once, under how it ended, and the retry's count
    assert usual == {"stored": {"done": ids[:2]}, "suppressed": {}, "receive_counts": {}}
    assert mixed == {
        "stored": {"expired": [ids[1]]},
        "suppressed": {"done": [ids[0]]},
        "receive_counts": {},
    }
    assert retried == {
        "stored": {"done": [ids[0], ids[2]]},
        "suppressed": {},
        "receive_counts": {ids[2]: 3},
    }


def test_a_batch_goes_back_whole_when_its_write_fails(stages):
    # GIVEN 30 results to store, and a results table that fails the batch's write
    for i in range(30):
        send(stages.realtime, f"r{i}")
    held = [p for _ in range(3) for p in stages.pending()]
    store = stages.results.complete_batch

    def failing(records, *more):
        if any(r.request_id == "r29" for r in records):
            raise ConnectionError("the results table is unreachable")
        return store(records, *more)

    stages.results.complete_batch = failing
    # WHEN the batch is submitted
    stages.finisher.submit([(p, stages.finisher.record(p, "done", outputs=[[0]])) for p in held])
    stages.finisher.flush()
    # THEN no message is deleted: all 30 are released at once for another try
    assert not any(kind == "delete" for kind, _ in stages.log)
    assert len(stages.realtime.visible) == 30 and stages.in_hand.held() == []


def test_a_failed_batch_goes_back_for_retry_and_its_last_try_gets_a_final_error(digits_v1):
    s = Stages(digits_v1)
    try:
        # GIVEN two requests, one of them on its last allowed receive
        send(s.realtime, "r-last")
        for _ in range(s.realtime.max_receive_count - 1):
            s.realtime.set_visibility(s.realtime.receive(1, 0), 0)
        send(s.realtime, "r-again")
        batch = s.pending()
        assert {p.received.receive_count for p in batch} == {1, s.realtime.max_receive_count}
        # WHEN the model fails their batch
        s.finisher.failed(batch, "RuntimeError: boom")
        # THEN the last try has its final error, the other its failure counted, and
        # both messages are released (the last try's to go to the DLQ)
        assert s.results.get("acme", "r-last").error.code == "retries_exhausted"
        assert s.results.get("acme", "r-again").failures == 1
        assert s.in_hand.held() == []
        assert len(s.realtime.visible) == 2
    finally:
        s.close()


# -- messages in hand --------------------------------------------------------------


def test_messages_go_back_to_the_lane_they_came_from(stages):
    # GIVEN a message from each lane in hand
    send(stages.realtime, "r1")
    send(stages.batch, "b1")
    held = stages.pending() + stages.pending(stages.batch)
    assert len(stages.in_hand.held()) == 2
    # WHEN one is released and the other deleted
    realtime_one, batch_one = held
    stages.in_hand.release([realtime_one.received], 0)
    stages.in_hand.delete([batch_one.received])
    # THEN each lane saw only its own, and nothing is held any more
    assert len(stages.realtime.visible) == 1 and stages.batch.deleted == [
        batch_one.received.message_id
    ]
    assert stages.in_hand.held() == []


def test_the_heartbeat_extends_what_is_held_until_stopped(digits_v1):
    # GIVEN a message held with a 3 s visibility (a beat every second)
    s = Stages(digits_v1, visibility=3)
    send(s.realtime, "r1")
    (p,) = s.pending()
    beat = threading.Thread(target=s.in_hand.heartbeat, args=(s.stopping,))
    beat.start()
    try:
        # THEN its visibility is extended while it is held
        extension = ("visibility", (p.received.message_id, 3))
        wait_for(lambda: extension in s.log, timeout_s=10, every_s=0.1, what="an extension")
    finally:
        s.close()
        beat.join(5)
    assert not beat.is_alive()


def _emf_documents(text: str) -> list[dict]:
    import json

    return [json.loads(line) for line in text.splitlines() if line.startswith('{"_aws"')]


def test_batch_metrics_are_gathered_and_printed_as_one_document_per_version(capsys):
    from switchyard_worker.stages import MetricsEmitter

    # GIVEN an emitter that prints once an hour
    emitter = MetricsEmitter("digits-cnn", interval_s=3600)
    # WHEN three batches of v1 and one failed batch of v2 report
    for size in (4, 8, 16):
        emitter.emit("v1", batch_size=size, compute_ms=size / 2, queue_wait_ms=1.0)
    emitter.emit("v2", item_errors=3)
    assert _emf_documents(capsys.readouterr().out) == []  # nothing printed yet
    emitter.close()
    # THEN closing prints one document per version, each value a sample of its own
    docs = {d["version"]: d for d in _emf_documents(capsys.readouterr().out)}
    assert set(docs) == {"v1", "v2"}
    assert docs["v1"]["BatchSize"] == [4.0, 8.0, 16.0]
    assert docs["v1"]["Compute"] == [2.0, 4.0, 8.0]
    assert docs["v1"]["model"] == "digits-cnn"
    assert docs["v2"]["ItemErrors"] == [3.0] and "BatchSize" not in docs["v2"]
    assert docs["v1"]["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["model", "version"]]


def test_gathered_metrics_are_printed_every_interval_while_the_worker_runs(capsys):
    from switchyard_worker.stages import MetricsEmitter

    emitter = MetricsEmitter("digits-cnn", interval_s=0.05)
    try:
        emitter.emit("v1", batch_size=2)
        printed: list[dict] = []
        # WHEN the interval passes, THEN what was gathered is printed, without a close
        wait_for(
            lambda: printed.extend(_emf_documents(capsys.readouterr().out)) or printed,
            timeout_s=5,
            every_s=0.01,
        )
        assert printed[0]["BatchSize"] == [2.0]
        # AND a value is printed once: the next print holds only what came after it
        emitter.emit("v1", batch_size=5)
        wait_for(
            lambda: printed.extend(_emf_documents(capsys.readouterr().out)) or len(printed) > 1,
            timeout_s=5,
            every_s=0.01,
        )
        assert printed[1]["BatchSize"] == [5.0]
    finally:
        emitter.close()


def test_more_than_a_hundred_values_of_a_metric_go_out_in_several_documents(capsys):
    from switchyard_worker.stages import MetricsEmitter

    emitter = MetricsEmitter("digits-cnn", interval_s=3600)
    for i in range(250):
        emitter.emit("v1", batch_size=i + 1)
    emitter.close()
    docs = _emf_documents(capsys.readouterr().out)
    values = [v for d in docs for v in d.get("BatchSize", [])]
    assert values == [float(i + 1) for i in range(250)]
    assert max(len(d["BatchSize"]) for d in docs) <= 100


class _Writes:
    """A stdout that keeps each ``write`` call apart."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def write(self, text: str) -> int:
        self.calls.append(text)
        return len(text)

    def flush(self) -> None:
        pass


def test_each_metrics_document_is_one_line_written_in_one_call(monkeypatch):
    import json

    from switchyard.telemetry import COUNT, MILLISECONDS, emit_metrics

    # GIVEN a stdout that tells the calls apart (another thread's log line can land
    # between two calls, never inside one)
    out = _Writes()
    monkeypatch.setattr("sys.stdout", out)

    # WHEN metrics go out: more values of one metric than a document holds, beside
    # a single value and under two dimension sets, as the router files a request
    emit_metrics(
        {"BatchSize": (COUNT, [float(i) for i in range(250)]), "Latency": (MILLISECONDS, 5.0)},
        {"model": "m"},
        model="m",
        version="v1",
    )

    # THEN every call wrote one whole document and its newline, and nothing was lost
    assert len(out.calls) >= 3
    docs = []
    for text in out.calls:
        assert text.endswith("\n") and text.count("\n") == 1, text[-40:]
        docs.append(json.loads(text))
    assert [v for d in docs for v in d["BatchSize"]] == [float(i) for i in range(250)]
    latency = [d["Latency"] for d in docs if "Latency" in d]
    assert latency in ([5.0], [[5.0]])  # one value, in one document
    dimensions = {tuple(map(tuple, d["_aws"]["CloudWatchMetrics"][0]["Dimensions"])) for d in docs}
    assert dimensions == {(("model", "version"), ("model",))}


# -- the process -----------------------------------------------------------------


def test_collect_less_makes_young_collections_rarer_and_says_what_it_replaced():
    import gc

    from switchyard_worker.stages import YOUNG_COLLECTION_AFTER, collect_less

    # GIVEN the collector's thresholds as they are
    before = gc.get_threshold()
    try:
        # WHEN a started worker tunes it
        replaced = collect_less()
        # THEN young collections wait for more objects, the older ones as they were
        assert replaced == before
        assert gc.get_threshold() == (YOUNG_COLLECTION_AFTER, *before[1:])
    finally:
        gc.set_threshold(*before)


def test_a_prediction_log_record_keeps_durations_to_three_decimals_and_no_inputs():
    # GIVEN a classifier's result with epoch timings and durations
    now = time.time()
    record = ResultRecord(
        request_id="r-1", tenant="acme", model="digits-cnn", version="v1", status="done",
        outputs=[{"class": 3, "probs": [0.1] * 10}], created_at=now, completed_at=now,
        expires_at=int(now) + 60,
        timings={"received_at": now, "batch_wait_ms": 1.23456, "compute_ms": 0.0004,
                 "queue_wait_ms": 12.3449, "completed_at": now},
    )  # fmt: skip
    # WHEN it is logged
    [logged] = msgspec.to_builtins(prediction_records([record]))
    # THEN its durations are rounded, its epoch times left out, its outputs summarised
    assert logged["timings"] == {"batch_wait_ms": 1.235, "compute_ms": 0.0, "queue_wait_ms": 12.345}
    assert logged["outputs"] == [3]
    assert logged["n_outputs"] == 1
    assert (logged["request_id"], logged["status"], logged["error"]) == ("r-1", "done", None)


def test_inputs_read_once_their_version_is_known_are_checked_as_before(stages, digits_v1):
    # GIVEN a worker that has read its version, and a value above the signature's
    # maximum, a request of too many inputs, and a good request
    versions = ServedVersions("digits-cnn", FakeRegistry(digits_v1), lambda _: EchoRuntime())
    versions.get("v1")
    send(stages.realtime, "r-high", inputs=[[1] * 63 + [17]])
    send(stages.realtime, "r-many", inputs=[[1] * 64] * (digits_v1.max_inputs_per_request + 1))
    send(stages.realtime, "r-good")
    high, many, good = stages.realtime.receive(10, 0)

    def read(received):
        return read_messages(
            received, time.monotonic(), time.time(), model="digits-cnn", versions=versions,
            payloads=FakePayloads(),
        )  # fmt: skip

    # WHEN the good one is read with each bad one
    read_high = read([high, good])
    read_many = read([many, good])
    # THEN each bad one has its own error, as the signature's check names it, and the
    # good one none
    assert read_high[0].error is not None and read_high[0].error.field == "inputs[0][63]"
    assert read_many[0].error is not None and read_many[0].error.field == "inputs"
    for _, ok in (read_high, read_many):
        assert ok.error is None and ok.inputs == [[1] * 64]


def test_blocks_of_numbers_are_kept_as_they_came_and_stacked_per_batch(stages, digits_v1):
    # GIVEN a receive of requests whose rows came as blocks of numbers, one of two rows
    versions = ServedVersions("digits-cnn", FakeRegistry(digits_v1), lambda _: EchoRuntime())
    send(stages.realtime, "r1", inputs=[[1.0] * 64], block=True)
    send(stages.realtime, "r2", inputs=[[2.0] * 64, [3.0] * 64], block=True)
    send(stages.realtime, "r3", inputs=[[4.0] * 64], block=True)
    # WHEN it is read
    read = read_messages(
        stages.realtime.receive(10, 0), time.monotonic(), time.time(), model="digits-cnn",
        versions=versions, payloads=FakePayloads(),
    )  # fmt: skip
    # THEN each request keeps its block as it came, no number read from it yet
    assert [p.error for p in read] == [None] * 3
    assert all(p.inputs is p.message.tensor for p in read)
    assert [p.size for p in read] == [1, 2, 1]
    # AND the batch's rows are one float64 array, in order
    batch = stacked([p.inputs for p in read], [p.size for p in read])
    assert isinstance(batch, np.ndarray) and batch.dtype == np.float64
    assert batch.tolist() == [[1.0] * 64, [2.0] * 64, [3.0] * 64, [4.0] * 64]
    # AND JSON rows beside blocks take their places among the blocks' rows
    mixed = stacked([read[1].inputs, [[5.0] * 64], read[2].inputs], [2, 1, 1])
    assert mixed.tolist() == [[2.0] * 64, [3.0] * 64, [5.0] * 64, [4.0] * 64]
