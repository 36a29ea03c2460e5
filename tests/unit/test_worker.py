"""The worker's delivery rules, on in-memory queues and stores."""

from __future__ import annotations

import io
import json
import math
import signal
import threading
import time
from contextlib import contextmanager

import numpy as np
import pytest

from harness.fakes import (
    EchoRuntime,
    FakePayloads,
    FakeQueue,
    FakeResults,
    worker_over_fakes,
)
from harness.waiting import wait_for
from harness.worker_log import delivery_events, logged_at
from switchyard.generation import Chunk
from switchyard.queues import encode_message
from switchyard.schemas import QueueMessage, ResultRecord
from switchyard_worker.generation_loop import GenerationLoop
from switchyard_worker.micro_batch_loop import MicroBatchLoop
from switchyard_worker.stages import log as worker_log
from switchyard_worker.stages import log_batch
from switchyard_worker.worker import WorkLoop


@pytest.fixture
def parts(digits_v1):
    return build(digits_v1, EchoRuntime())


def build(digits_v1, runtime, visibility_timeout=60, preload=True):
    log: list = []
    realtime, batch = FakeQueue("realtime"), FakeQueue("batch")
    realtime.log = batch.log = log
    results = FakeResults(log)
    worker = worker_over_fakes(
        digits_v1,
        runtime,
        realtime=realtime,
        batch=batch,
        results=results,
        visibility_timeout=visibility_timeout,
        preload=preload,
    )
    return worker, realtime, batch, results, runtime, log


def send(
    queue, rid, tenant="acme", inputs=None, version="v1", expires_at=None, respond_by=None,
    fallback=False, counted=False, block=False,
):  # fmt: skip
    """Send a request's message as the router does (``block``: its rows as one block
    of numbers, as the router sends a tensor signature's)."""
    inputs = inputs if inputs is not None else [[1] * 64]
    message = QueueMessage(
        request_id=rid,
        tenant=tenant,
        model="digits-cnn",
        version=version,
        lane=queue.lane,
        inputs=inputs,
        n_inputs=len(inputs),
        enqueued_at=time.time(),
        expires_at=expires_at or time.time() + 3600,
        respond_by=respond_by,
        fallback=fallback,
        queued_counted=counted,
    )
    queue.send(encode_message(message, FakePayloads(), 200_000, rows=block), tenant)


def run_until_idle(worker, turns=50):
    for _ in range(turns):
        worker.step()
    worker.intake.assembler.take(force=True)
    worker.wait_for_results()


def drain(worker, turns=20):
    for _ in range(turns):
        worker.step()
        batch = worker.intake.assembler.take(force=True)
        if batch:
            worker.loop.execute(batch)
    worker.wait_for_results()


def test_results_are_written_many_to_a_call_the_sync_ones_new_the_others_over_queued(parts):
    """A sync request has no record yet (unless handed off at its deadline): its
    result is inserted with the batch's others, in one write; a fallback's copy of
    one too (where it finds a record, the conditional put stores it, and says whether
    its tenant's queued work counted it). An async request's queued record is written
    over ``queued`` only, many to a write as well."""
    worker, realtime, _, results, _, log = parts
    soon = time.time() + 30
    for i in range(30):
        send(realtime, f"s{i}", respond_by=soon)
    for i in range(3):
        send(realtime, f"async{i}")
    send(realtime, "copy", respond_by=soon, fallback=True)
    drain(worker)
    # a batch of this model is 10 at most: one write of its sync results each (the
    # fallback's copy, a sync caller's, among them), and one of its async results
    assert [n for kind, n in log if kind == "batch"] == [10, 10, 10, 1]
    assert [n for kind, n in log if kind == "queued-batch"] == [3]
    stored = [rid for kind, rid in log if kind == "result"]
    assert sorted(stored) == sorted(
        [f"s{i}" for i in range(30)] + ["async0", "async1", "async2", "copy"]
    )
    assert all(results.get("acme", rid).status == "done" for rid in stored)
    # and results before deletes: never more messages deleted than results stored
    written = deleted = 0
    for kind, _ in log:
        written += kind == "result"
        deleted += kind == "delete"
        assert deleted <= written
    assert deleted == 34


def test_results_are_written_before_their_messages_are_deleted(parts):
    worker, realtime, _, results, _, log = parts
    send(realtime, "r1")
    send(realtime, "r2")
    drain(worker)
    assert results.get("acme", "r1").status == "done"
    events = [kind for kind, _ in log if kind in ("result", "delete")]
    assert events == ["result", "result", "delete", "delete"]
    assert realtime.depth == 0


def test_a_bad_item_gets_an_error_result_and_the_rest_of_its_batch_succeeds(parts):
    worker, realtime, _, results, runtime, _ = parts
    send(realtime, "good")
    send(realtime, "bad", inputs=[[1] * 63])
    send(realtime, "also-good")
    drain(worker)
    assert results.get("acme", "good").status == "done"
    assert results.get("acme", "also-good").status == "done"
    bad = results.get("acme", "bad")
    assert bad.status == "error" and bad.error.code == "invalid_input"
    assert bad.error.field == "inputs[0]"
    assert len(runtime.calls) == 1 and len(runtime.calls[0]) == 2
    assert realtime.depth == 0  # the bad item is not retried


class RowSums:
    """A model that answers each row with its sum, and keeps what each call got."""

    def __init__(self) -> None:
        self.calls: list = []

    def predict(self, inputs):
        self.calls.append(inputs)
        return [float(sum(row)) for row in inputs]


def test_rows_sent_as_blocks_of_numbers_run_as_one_array_and_answer_as_json_rows(digits_v1):
    # GIVEN requests whose rows come as blocks of numbers (as the router sends a
    # tensor signature's), one of two rows, beside one whose rows came as JSON
    worker, realtime, _, results, runtime, _ = build(digits_v1, RowSums())
    row = [float(i % 17) for i in range(64)]
    send(realtime, "block-two", inputs=[row, [16.0] * 64], block=True)
    send(realtime, "json", inputs=[[0.5] * 64])
    send(realtime, "block-one", inputs=[[1e-300] * 63 + [16]], block=True)
    # WHEN the worker runs them
    drain(worker)
    # THEN they ran as one float64 array of their rows, in order, and each request's
    # answers are its own rows', as from JSON rows
    [batch] = runtime.calls
    assert isinstance(batch, np.ndarray) and batch.dtype == np.float64
    assert batch.tolist() == [row, [16.0] * 64, [0.5] * 64, [1e-300] * 63 + [16.0]]
    assert results.get("acme", "block-two").outputs == [sum(row), 1024.0]
    assert results.get("acme", "json").outputs == [32.0]
    assert results.get("acme", "block-one").outputs == [16.0 + 63e-300]
    assert realtime.depth == 0


@pytest.mark.parametrize(
    ("rows", "field", "why"),
    [
        ([[1.0] * 63 + [17.0]], "inputs[0][63]", "the maximum is 16"),
        ([[1.0] * 10 + [math.nan] + [1.0] * 53], "inputs[0][10]", "finite"),
        ([[1.0] * 63], "inputs[0]", "64"),
    ],
    ids=["over the range", "not a number", "a row short"],
)
def test_a_block_off_the_signature_is_answered_invalid_naming_the_value(
    digits_v1, rows, field, why
):
    # GIVEN a block whose rows are off the version's signature (as a fallback's
    # copy may be, if the fallback's signature differs), beside a good one
    worker, realtime, _, results, runtime, _ = build(digits_v1, RowSums())
    send(realtime, "bad", inputs=rows, block=True)
    send(realtime, "good", inputs=[[2.0] * 64], block=True)
    # WHEN the worker runs them
    drain(worker)
    # THEN the bad one is answered invalid_input, naming the value as for JSON rows,
    # and only the good one ran
    bad = results.get("acme", "bad")
    assert bad.status == "error" and bad.error.code == "invalid_input"
    assert bad.error.field == field and why in bad.error.message
    assert results.get("acme", "good").outputs == [128.0]
    assert [c.tolist() for c in runtime.calls] == [[[2.0] * 64]]
    assert realtime.depth == 0


def test_outputs_map_back_to_their_requests(parts):
    worker, realtime, _, results, _, _ = parts
    send(realtime, "two", inputs=[[1] * 64, [2] * 64])
    send(realtime, "one", inputs=[[3] * 64])
    drain(worker)
    assert len(results.get("acme", "two").outputs) == 2
    assert len(results.get("acme", "one").outputs) == 1
    assert results.get("acme", "one").timings["batch_size"] == 3


def test_a_failing_batch_goes_back_for_retry_and_a_poison_message_reaches_the_dlq(parts):
    worker, realtime, _, results, runtime, log = parts
    runtime.fail = True
    send(realtime, "r1")
    drain(worker, turns=3)
    # a failed attempt is no result: the request is still queued, its attempts counted
    # (on a queued record the worker writes if the router wrote none, as for sync)
    attempted = results.get("acme", "r1")
    assert attempted.status == "queued" and attempted.failures >= 1
    for _ in range(10):
        drain(worker)
    assert len(realtime.dead) == 1  # after maxReceiveCount receives
    assert len(runtime.calls) == realtime.max_receive_count
    # The last allowed attempt wrote the request's final error before the message
    # went to the DLQ: the request ends, it does not stay queued.
    record = results.get("acme", "r1")
    assert record.status == "error" and record.error.code == "retries_exhausted"
    assert f"failed after {realtime.max_receive_count} attempts" in record.error.message
    assert "injected" in record.error.message or "Error" in record.error.message
    assert [k for k, rid in log if rid == "r1" and k == "result"] == ["result"]


def test_a_model_returning_too_few_outputs_fails_the_batch(parts):
    worker, realtime, _, results, runtime, _ = parts
    runtime.drop_one = True
    send(realtime, "r1", inputs=[[1] * 64, [2] * 64])
    drain(worker, turns=3)
    assert results.get("acme", "r1").status == "queued"  # no result, one failure counted
    assert realtime.visible  # released for retry


def test_a_redelivered_message_whose_result_exists_is_deleted_without_a_second_result(parts):
    worker, realtime, _, results, _, log = parts
    send(realtime, "r1")
    send(realtime, "r1")  # the same request delivered twice
    drain(worker)
    assert [k for k, rid in log if rid == "r1" and k in ("result", "duplicate")] == [
        "result",
        "duplicate",
    ]
    assert realtime.depth == 0


def test_a_log_lines_message_is_written_as_it_was_given(caplog):
    # GIVEN the worker's log, and a message that reads as JSON text beside a phrase
    with caplog.at_level("INFO", logger=worker_log.name):
        worker_log.info('{"not": "an object"}', extra={"n": 1})
        worker_log.info("results stored", extra={"n": 2})
    # WHEN each is written as the worker's log writes it
    lines = [json.loads(worker_log.registered_formatter.format(r)) for r in caplog.records]
    # THEN each message is the text it was given, its fields beside it
    assert [(e["message"], e["n"]) for e in lines[-2:]] == [
        ('{"not": "an object"}', 1),
        ("results stored", 2),
    ]


def test_a_batch_line_is_the_line_the_worker_log_writes_for_the_same_fields(worker_lines):
    # GIVEN a batch's fields, written once through the logger and once as a batch line
    fields = {"worker": "w-1", "stored": {"done": ["r1", "r2"]}, "suppressed": {}, "n": 2}

    def store_batch():
        worker_log.info("results stored", extra=fields)
        log_batch("results stored", fields)

    before = time.time()
    store_batch()
    # THEN both lines hold the same keys in the same order, the same values, and the
    # same caller; each timestamp reads back as when it was written
    through_logger, batch_line = (json.loads(x) for x in worker_lines.getvalue().splitlines())
    assert list(batch_line) == list(through_logger)
    stamped = {k for k in batch_line if batch_line[k] != through_logger[k]}
    assert stamped <= {"timestamp", "location"}
    caller, line = batch_line["location"].split(":")
    line_before = through_logger["location"].split(":")[1]
    assert (caller, int(line)) == ("store_batch", int(line_before) + 1)
    assert before - 0.001 <= logged_at(batch_line) <= time.time()
    # AND below the logger's level nothing is written
    worker_log.setLevel("WARNING")
    try:
        log_batch("results stored", fields)
    finally:
        worker_log.setLevel("INFO")
    assert len(worker_lines.getvalue().splitlines()) == 2


@pytest.fixture
def worker_lines():
    """The lines the worker's log writes to its stream, as they are written."""
    written = io.StringIO()
    handler = worker_log.registered_handler
    before = handler.setStream(written)  # type: ignore[attr-defined]
    try:
        yield written
    finally:
        handler.setStream(before)  # type: ignore[attr-defined]


def test_each_batch_logs_one_line_naming_every_requests_outcome(parts, worker_lines):
    worker, realtime, *_ = parts
    send(realtime, "r1")
    send(realtime, "r1")  # the same request twice: its second result is refused
    send(realtime, "bad", inputs=[[1] * 63])
    send(realtime, "again")
    realtime.visible[-1]["count"] = 1  # received once before: it runs alone
    drain(worker)
    # each line as the worker's log wrote it
    lines = [json.loads(line) for line in worker_lines.getvalue().splitlines()]
    batches = [e for e in lines if e.get("message") == "results stored"]
    assert len(batches) == 2
    outcomes = {
        (e["message"], e["request_id"], e["status"], e["receive_count"])
        for e in delivery_events(lines)
        if e.get("message") in ("result stored", "duplicate suppressed")
    }
    assert outcomes == {
        ("result stored", "r1", "done", 1),
        ("duplicate suppressed", "r1", "done", 1),
        ("result stored", "bad", "error", 1),
        ("result stored", "again", "done", 2),
    }


def test_an_undecodable_message_is_released_and_ends_in_the_dlq(parts):
    worker, realtime, _, results, _, _ = parts
    realtime.send('{"not": "a message"}', "acme")
    for _ in range(10):
        drain(worker)
    assert len(realtime.dead) == 1
    assert results.items == {}


def test_expired_work_is_refused_not_run(parts):
    worker, realtime, _, results, runtime, _ = parts
    send(realtime, "old", expires_at=time.time() - 1)
    drain(worker)
    record = results.get("acme", "old")
    assert record.status == "expired" and record.error.code == "expired"
    assert runtime.calls == []
    # The result's own TTL is the platform's, not the work's expiry.
    assert record.expires_at > time.time() + 3600


def queued(results, rid, tenant="acme"):
    results.put_queued(
        ResultRecord(
            request_id=rid,
            tenant=tenant,
            model="digits-cnn",
            version="v1",
            status="queued",
            created_at=time.time(),
            expires_at=int(time.time()) + 60,
        )
    )


def test_a_cancelled_request_is_deleted_without_running(parts):
    worker, realtime, _, results, runtime, log = parts
    queued(results, "keep")
    queued(results, "drop")
    results.cancel("acme", "drop", time.time())
    send(realtime, "keep")
    send(realtime, "drop")
    drain(worker)
    assert realtime.depth == 0
    assert results.get("acme", "drop").status == "cancelled"
    assert results.get("acme", "keep").status == "done"
    assert len(runtime.calls) == 1 and len(runtime.calls[0]) == 1  # "keep" alone ran
    assert ("statuses", 2) in log  # one read for the batch, not one per message


class GatedRuntime(EchoRuntime):
    """Holds its first call until ``gate`` is set; ``running`` is set as it starts."""

    def __init__(self) -> None:
        super().__init__()
        self.running, self.gate = threading.Event(), threading.Event()

    def predict(self, inputs):
        self.running.set()
        self.gate.wait(5)
        return super().predict(inputs)


def test_the_next_batchs_statuses_are_read_while_the_model_runs_the_one_before(digits_v1):
    # GIVEN a worker running a full batch (64 inputs) in a model that holds it
    worker, realtime, _, results, runtime, log = build(digits_v1, GatedRuntime())
    for rid in ("a1", "b1", "b2"):
        queued(results, rid)
    send(realtime, "a1", inputs=[[1] * 64] * 64)
    with running(worker):
        assert runtime.running.wait(5)
        # WHEN the next batch is received meanwhile, full (two requests of 32 inputs)
        send(realtime, "b1", inputs=[[1] * 64] * 32)
        send(realtime, "b2", inputs=[[1] * 64] * 32)
        # THEN their statuses are read before the model is free: one read for both
        wait_for(lambda: ("statuses", 2) in log, timeout_s=5, every_s=0.005)
        assert not runtime.calls
        # and a request cancelled after that read runs, but its result is not stored
        results.cancel("acme", "b2", time.time())
        runtime.gate.set()
        assert results.wait_for(2, 5)
    assert [len(call) for call in runtime.calls] == [64, 64]
    assert results.get("acme", "b1").status == "done"
    assert results.get("acme", "b2").status == "cancelled"
    assert realtime.depth == 0  # its message deleted all the same
    assert [entry for entry in log if entry[0] == "statuses"] == [("statuses", 1), ("statuses", 2)]


def test_what_arrives_while_the_model_runs_joins_the_next_batch_at_one_look(digits_v1):
    # GIVEN a worker whose model takes about 0.5 s a batch, running one (held there)
    worker, realtime, _, results, runtime, log = build(digits_v1, GatedRuntime())
    worker.intake.assembler.ran("v1", 1, 0.5)
    send(realtime, "a1")
    with running(worker):
        assert runtime.running.wait(5)
        # WHEN a request is received meanwhile, its batch due at once (max_wait_ms 5),
        # and a second arrives after it
        send(realtime, "b1")
        wait_for(lambda: len(worker.intake.assembler.held) == 1, timeout_s=5, every_s=0.005)
        receives = len(realtime.waits)
        send(realtime, "b2")
        # THEN the intake looks at the queue once more before the running batch ends,
        # and the second joins the first
        wait_for(lambda: len(worker.intake.assembler.held) == 2, timeout_s=5, every_s=0.005)
        time.sleep(1.0)  # and no more looks while the model still runs
        assert len(realtime.waits) - receives <= 2  # the look when due, and the one before the end
        runtime.gate.set()
        assert results.wait_for(3, 5)
    assert [len(call) for call in runtime.calls] == [1, 2]


@contextmanager
def running(worker):
    """The worker's loop on a thread of its own, stopped (and waited for) on exit."""
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        yield
    finally:
        worker.stop()
        thread.join(10)


def test_an_unknown_version_gets_an_error_result(parts):
    worker, realtime, _, results, _, _ = parts
    send(realtime, "r1", version="v9")
    drain(worker)
    assert results.get("acme", "r1").error.code == "unknown_version"


def test_realtime_is_served_before_batch(parts):
    worker, realtime, batch, results, runtime, _ = parts
    send(batch, "b1")
    send(realtime, "r1")
    worker.step()  # the realtime lane drained, nothing more expected: it runs at once
    worker.wait_for_results()
    assert results.get("acme", "r1").status == "done" and results.get("acme", "b1") is None
    drain(worker)
    assert results.get("acme", "b1").status == "done"


def test_a_batch_backlog_is_taken_without_waiting_on_the_idle_realtime_lane(parts):
    # GIVEN a worker whose idle long poll is 10 s, and more requests on the batch lane
    # than one receive takes
    worker, realtime, batch, results, _, _ = parts
    worker.intake.poll_wait = 10
    for i in range(25):
        send(batch, f"b{i}", inputs=[[1] * 64] * 64)  # a full batch each

    # WHEN it works until the batch lane is empty, and on until it is idle
    turns = 0
    while batch.visible and turns < 100:
        worker.step()
        turns += 1
    looks = len(realtime.waits)
    drain(worker)

    # THEN only its first look at the realtime lane waited; while the batch lane had
    # work it only glanced there (wait 0), and once that was empty it waited again
    assert all(results.get("acme", f"b{i}").status == "done" for i in range(25))
    assert realtime.waits[0] == 10 and looks >= 3
    assert set(realtime.waits[1:looks]) == {0}
    assert 10 in realtime.waits[looks:]


def test_stop_releases_what_was_received_but_not_started(parts):
    worker, realtime, _, results, _, _ = parts
    for i in range(3):
        send(realtime, f"r{i}")
    worker.intake.receive()
    assert len(worker.intake.assembler.held) == 3
    worker.stop()
    worker.run()  # returns at once: stopping; releases what it holds
    assert len(realtime.visible) == 3
    assert results.items == {}


def test_a_failed_batch_marks_its_requests_so_the_router_can_fall_back(parts, digits_v1):
    worker, realtime, _, results, runtime, log = parts
    runtime.fail = True
    results.put_queued(
        ResultRecord(
            request_id="r1",
            tenant="acme",
            model="digits-cnn",
            version="v1",
            status="queued",
            created_at=time.time(),
            expires_at=int(time.time()) + 60,
        )
    )
    send(realtime, "r1")
    drain(worker, turns=3)
    record = results.get("acme", "r1")
    assert record.failures == len(runtime.calls) >= 1 and record.status == "queued"


def test_a_retry_of_an_answered_request_is_deleted_without_running(parts):
    worker, realtime, _, results, runtime, log = parts
    runtime.fail = True
    send(realtime, "r1")
    drain(worker, turns=3)  # fails once; released for retry
    runtime.fail = False
    done = ResultRecord(
        request_id="r1",
        tenant="acme",
        model="digits-cnn",
        version="v2",
        status="done",
        outputs=[{"class": 1}],
        created_at=time.time(),
        expires_at=int(time.time()) + 60,
    )
    results.complete(done)  # answered by the fallback meanwhile
    calls = len(runtime.calls)
    drain(worker)
    assert len(runtime.calls) == calls
    assert realtime.depth == 0
    assert results.get("acme", "r1").version == "v2"


def slow_store(results) -> threading.Event:
    """Make ``results`` wait, on every store, until the returned event is set."""
    gate = threading.Event()

    def slowed(store):
        def slow(records, *more):
            gate.wait(5)
            return store(records, *more)

        return slow

    for name in ("complete", "complete_batch"):
        setattr(results, name, slowed(getattr(results, name)))
    return gate


def test_the_next_batch_runs_while_the_last_ones_results_are_stored(parts):
    # GIVEN a results store that is slow to answer
    worker, realtime, _, results, runtime, log = parts
    gate = slow_store(results)
    send(realtime, "r1")
    send(realtime, "r2")
    # WHEN the worker runs two batches, one message each
    worker.intake.receive()
    batch = worker.intake.assembler.take(force=True)
    assert len(batch) == 2
    worker.loop.execute(batch[:1])
    worker.loop.execute(batch[1:])
    # THEN the model has run both batches while the first store still waits
    assert len(runtime.calls) == 2
    assert results.items == {} and realtime.depth == 2
    gate.set()
    worker.wait_for_results()
    # and the results were stored, then deleted, batch after batch
    assert [kind for kind, _ in log if kind in ("result", "delete")] == [
        "result",
        "delete",
        "result",
        "delete",
    ]
    assert realtime.depth == 0


def test_stopping_waits_for_finished_batches_to_be_stored(parts):
    worker, realtime, _, results, _, _ = parts
    gate = slow_store(results)
    send(realtime, "r1")
    worker.intake.receive()
    worker.loop.execute(worker.intake.assembler.take(force=True))
    threading.Timer(0.2, gate.set).start()
    worker.stop()
    worker.run()  # returns only once the stored result is in
    assert results.get("acme", "r1").status == "done"
    assert realtime.depth == 0


def test_a_signal_landing_while_the_stop_is_being_set_does_not_hang_the_worker(parts):
    # GIVEN the stop Event's lock held, as the main thread holds it inside the Event's
    # own set() when a second signal follows the first (Ctrl-C, then the supervisor's
    # SIGTERM); threading.Event keeps that lock as _cond
    worker = parts[0]
    held, release, letting_go = threading.Event(), threading.Event(), threading.Event()

    def hold_the_lock():
        with worker._stopping._cond:
            held.set()
            release.wait(10)
            letting_go.set()

    holder = threading.Thread(target=hold_the_lock)
    holder.start()
    held.wait(10)
    # WHEN the signal handler runs
    worker.on_signal(signal.SIGTERM, None)
    # THEN it returned without waiting for that lock, and the worker stops once the
    # lock is free
    returned_while_held = not letting_go.is_set()
    release.set()
    holder.join()
    assert returned_while_held
    wait_for(worker._stopping.is_set, timeout_s=10, every_s=0.05, what="the stop")


def test_when_storing_fails_the_messages_go_back_at_once(parts):
    worker, realtime, _, results, _, _ = parts

    def broken(records, *more):
        raise ConnectionError("the results table is unreachable")

    results.complete = results.complete_batch = broken
    send(realtime, "r1")
    drain(worker)
    assert realtime.depth == 1 and len(realtime.visible) == 1  # released, not held
    assert worker.in_hand.held() == []


def test_a_realtime_request_waits_behind_one_batch_of_a_job_not_all_received(parts):
    # GIVEN a worker that took five full batches from the batch lane at once
    worker, realtime, batch, results, runtime, _ = parts
    for i in range(5):
        send(batch, f"b{i}", inputs=[[1] * 64] * 64)
    worker.step()  # receives them all and runs the first
    assert len(worker.intake.assembler.held) == 4

    # WHEN a realtime request arrives
    send(realtime, "r1", inputs=[[1] * 64] * 2)
    worker.step()

    # THEN it runs next, before the batch-lane work already in hand
    assert [len(call) for call in runtime.calls] == [64, 2]
    drain(worker)
    assert all(
        results.get("acme", rid).status == "done" for rid in ["r1", *(f"b{i}" for i in range(5))]
    )


# -- generative models: continuous batching ----------------------------------------------


@pytest.fixture
def generating(manifest):
    from harness.fakes import FakeTokenStream, GenerativeRuntime, ScriptDecoder

    record = manifest.models["pydoc-gpt"].version_record(
        "pydoc-gpt", "v1", "s3://a/m.tar", "0" * 64, created_at=1.0
    )
    log: list = []
    realtime, batch = FakeQueue("realtime"), FakeQueue("batch")
    realtime.log = batch.log = log
    results, stream = FakeResults(log), FakeTokenStream(log)
    decoder = ScriptDecoder("The quick brown fox.")
    worker = worker_over_fakes(
        record,
        GenerativeRuntime(decoder),
        realtime=realtime,
        batch=batch,
        results=results,
        stream=stream,
        stream_flush_seconds=3600,  # one chunk for the first token, one at the end
    )
    return worker, realtime, results, stream, decoder, log


def ask(queue, rid, **request):
    message = QueueMessage(
        request_id=rid,
        tenant="acme",
        model="pydoc-gpt",
        version="v1",
        inputs=[{"prompt": "Say", **request}],
        n_inputs=1,
        enqueued_at=time.time(),
        expires_at=time.time() + 3600,
    )
    queue.send(message.model_dump_json(), "acme")


def generate_all(worker, queue, steps=100):
    for pending in worker.intake.keep(queue.receive(10, 0)):
        worker.loop.arrivals.put(pending)
    for _ in range(steps):
        worker.step()
    worker.loop.stream_writer.submit(lambda: None).result()
    worker.wait_for_results()


def test_a_generative_runtime_gets_the_generation_loop_a_predicting_one_micro_batches(
    digits_v1, generating
):
    # GIVEN a worker whose model predicts and one whose model generates, each preloaded
    predicting, *_ = build(digits_v1, EchoRuntime())
    generative, *_ = generating
    # THEN the predicting one runs micro-batches, its messages held for the lane's time
    assert isinstance(predicting.loop, MicroBatchLoop) and isinstance(predicting.loop, WorkLoop)
    assert predicting.in_hand.visibility == 60
    # AND the generative one batches continuously, its messages held briefly
    assert isinstance(generative.loop, GenerationLoop) and isinstance(generative.loop, WorkLoop)
    assert generative.in_hand.visibility == 10


def test_a_worker_run_without_preload_micro_batches(digits_v1):
    # GIVEN a worker whose versions were never read
    worker, *_ = build(digits_v1, EchoRuntime(), preload=False)
    # THEN its loop, chosen when first needed, is the micro-batch loop
    assert isinstance(worker.loop, MicroBatchLoop)


def test_a_generation_is_stored_after_its_stream_then_its_message_deleted(generating):
    worker, realtime, results, stream, _, log = generating
    assert isinstance(worker.loop, GenerationLoop)
    assert worker.in_hand.visibility == 10  # held briefly, extended
    ask(realtime, "g1", max_tokens=9, stream=True)
    ask(realtime, "g2", max_tokens=3)  # not streamed: no chunks
    generate_all(worker, realtime)
    first = results.get("acme", "g1").outputs[0]
    assert first["text"] == "The quick" and first["finish_reason"] == "length"
    assert first["usage"]["completion_tokens"] == 9
    assert results.get("acme", "g2").outputs[0]["text"] == "The"
    chunks = stream.after("acme", "g1", 0)
    assert [(c.start, len(c.ids)) for c in chunks] == [(0, 1), (1, 8)]  # first token at once
    assert chunks[-1].finish_reason == "length"
    assert ("acme", "g2") not in stream.chunks
    g1 = [kind for kind, rid in log if rid == "g1" and kind != "after"]
    assert g1 == ["chunk", "chunk", "result"]  # the stream's last chunk before the result
    assert [kind for kind, _ in log if kind in ("result", "delete")][-2:] == ["result", "delete"]
    assert realtime.depth == 0 and not realtime.in_flight


def test_a_redelivered_stream_continues_from_the_tokens_already_written(generating):
    worker, realtime, results, stream, decoder, _ = generating
    # GIVEN a worker died after streaming the first 4 tokens of g1
    stream.put("acme", "g1", Chunk(0, [ord(c) for c in "The "], ["T", "h", "e", " "]), 0)
    ask(realtime, "g1", max_tokens=9, stream=True)
    realtime.set_visibility(realtime.receive(10, 0), 0)  # its first receive, by the dead one
    generate_all(worker, realtime)
    # THEN it is not sampled again: the new tokens follow the old in the stream
    assert results.get("acme", "g1").outputs[0]["usage"]["completion_tokens"] == 9
    chunks = stream.after("acme", "g1", 0)
    assert [c.start for c in chunks] == [0, 4, 5]
    assert decoder.steps[0] == ["g1"] and len(decoder.steps) == 5  # 9 tokens less 4


def test_a_decode_step_that_fails_releases_its_requests_for_retry(generating):
    worker, realtime, results, _, decoder, _ = generating
    decoder.fail_at_step = 2
    ask(realtime, "g1", max_tokens=5)
    generate_all(worker, realtime, steps=5)
    assert results.get("acme", "g1") is None or results.get("acme", "g1").status == "queued"
    assert realtime.depth == 1 and not realtime.in_flight  # back in the queue
    generate_all(worker, realtime)
    assert results.get("acme", "g1").outputs[0]["text"] == "The q"


def test_a_prompt_over_the_context_is_answered_invalid_without_running(generating):
    worker, realtime, results, _, decoder, _ = generating
    ask(realtime, "g1", max_tokens=256)
    decoder.context_length = 100  # the model's own context is shorter than the signature's
    generate_all(worker, realtime)
    record = results.get("acme", "g1")
    assert record.status == "error" and record.error.code == "invalid_input"
    assert "context" in record.error.message and decoder.steps == []


def test_realtime_work_runs_between_the_parts_of_a_jobs_chunk(parts):
    # GIVEN a job's chunk of 128 inputs on the batch lane (digits-cnn runs 64 at a time)
    worker, realtime, batch, results, runtime, _ = parts
    send(batch, "chunk", inputs=[[1] * 64] * 128)
    calls: list[int] = []
    predict = runtime.predict

    def a_request_arrives_during_the_first_part(inputs):
        if not calls:
            send(realtime, "rt")
            worker.intake.hold(realtime.receive(10, 0))  # as the realtime watcher would
        calls.append(len(inputs))
        return predict(inputs)

    runtime.predict = a_request_arrives_during_the_first_part
    # WHEN the worker runs the chunk
    drain(worker)
    # THEN the realtime request ran after the chunk's first part, not after the chunk,
    # and the rest of the chunk ran in parts of an eighth, realtime work coming in now
    assert calls == [64, 1] + [8] * 8
    assert results.get("acme", "rt").status == "done"
    assert len(results.get("acme", "chunk").outputs) == 128


def test_realtime_arriving_while_realtime_waits_for_the_part_is_taken_with_it(parts):
    # GIVEN a job's chunk running and its next in hand, and two realtime requests
    # arriving one after the other during the first part, each looked for as the
    # realtime watcher looks
    worker, realtime, batch, results, runtime, _ = parts
    send(batch, "chunk1", inputs=[[1] * 64] * 128)
    send(batch, "chunk2", inputs=[[1] * 64] * 128)
    calls: list[int] = []
    predict = runtime.predict

    def two_requests_arrive_during_the_first_part(inputs):
        if not calls:
            for rid in ("rt1", "rt2"):
                send(realtime, rid)
                if worker.intake.watches_realtime():
                    worker.intake.look_at_realtime(0)
        calls.append(len(inputs))
        return predict(inputs)

    runtime.predict = two_requests_arrive_during_the_first_part
    # WHEN the worker runs the chunk
    drain(worker)
    # THEN the second was taken while the first waited (not once the first had run):
    # both ran together after the first part
    assert calls[:2] == [64, 2]
    assert all(results.get("acme", rid).status == "done" for rid in ("rt1", "rt2"))


def test_realtime_runs_beside_a_jobs_part_where_the_runtime_takes_two_calls_at_once(parts):
    # GIVEN a runtime that takes calls from two threads at once, a job's chunk of
    # two parts running and its next in hand, and a realtime request arriving during
    # the first part, which goes on until the realtime request has run (or 5 s)
    worker, realtime, batch, results, runtime, _ = parts
    runtime.concurrent_calls = True
    send(batch, "chunk", inputs=[[1] * 64] * 128)
    send(batch, "next", inputs=[[1] * 64] * 128)
    events: list[str] = []
    realtime_ran = threading.Event()
    predict = runtime.predict

    def part_waits_for_realtime(inputs):
        if len(inputs) == 1:
            events.append("realtime")
            realtime_ran.set()
            return predict(inputs)
        first = not events
        events.append(f"part of {len(inputs)} begins")
        if first:
            send(realtime, "rt")
            if worker.intake.watches_realtime():
                worker.intake.look_at_realtime(0)
            realtime_ran.wait(5)
        events.append(f"part of {len(inputs)} ends")
        return predict(inputs)

    runtime.predict = part_waits_for_realtime
    # WHEN the worker runs the chunk
    drain(worker)
    # THEN the realtime request ran while the first part was running, not after it,
    # and the parts stayed whole (64: digits-cnn's batch)
    assert events[:5] == [
        "part of 64 begins",
        "realtime",
        "part of 64 ends",
        "part of 64 begins",
        "part of 64 ends",
    ]
    assert results.get("acme", "rt").status == "done"
    assert all(len(results.get("acme", rid).outputs) == 128 for rid in ("chunk", "next"))


def test_the_realtime_watcher_stops_at_a_batch_of_realtime_work_in_hand(parts):
    # GIVEN a job's chunk in hand (the intake has stopped: the next batch is full)
    worker, realtime, batch, *_ = parts
    send(batch, "chunk", inputs=[[1] * 64] * 128)
    worker.intake.hold(batch.receive(10, 0))
    assert worker.intake.watches_realtime()
    # WHEN realtime work in hand reaches a batch of the model's (64 inputs)
    send(realtime, "rt1", inputs=[[1] * 64] * 63)
    worker.intake.look_at_realtime(0)
    assert worker.intake.watches_realtime()  # one input short of a batch: still watched
    send(realtime, "rt2")
    worker.intake.look_at_realtime(0)
    # THEN the lane is no longer watched: what is in hand is bounded
    assert not worker.intake.watches_realtime()


def test_a_jobs_chunk_runs_in_parts_of_like_size_and_is_answered_in_its_own_order(parts):
    # GIVEN a runtime whose inputs cost their size (as a text costs its length in a
    # padded batch), and a job's chunk of 128 inputs in no order of size
    worker, _, batch, results, runtime, _ = parts
    sizes = [(k * 37) % 128 for k in range(128)]  # each of 0..127 once
    runtime.size_of = lambda x: x[0]
    calls: list[list[float]] = []

    def first_values(inputs):
        calls.append([x[0] for x in inputs])
        return [{"first": x[0]} for x in inputs]

    runtime.predict = first_values
    send(batch, "chunk", inputs=[[s / 8] * 64 for s in sizes])
    # WHEN the worker runs it (digits-cnn runs 64 at a time)
    drain(worker)
    # THEN each part held inputs of like size: the smallest half, then the largest
    assert [sorted(call) for call in calls] == [
        [s / 8 for s in range(64)],
        [s / 8 for s in range(64, 128)],
    ]
    # AND the chunk's outputs are in its inputs' order
    record = results.get("acme", "chunk")
    assert [o["first"] for o in record.outputs] == [s / 8 for s in sizes]


def test_size_order_is_smallest_first_and_none_for_a_runtime_without_sizes():
    from switchyard_worker.runtimes import size_order

    assert size_order(object(), ["bb", "a"]) is None
    assert size_order(type("R", (), {"size_of": staticmethod(len)})(), ["ccc", "a", "bb"]) == [
        1,
        2,
        0,
    ]
