"""A generation worker's stream writer: every stream's due chunk written together, a
tick at a time, each stream's chunks once and in order, and chunks that grow with
the number of streams."""

from __future__ import annotations

import time

import pytest

from harness.fakes import (
    FakePayloads,
    FakeQueue,
    FakeRegistry,
    FakeResults,
    FakeTokenStream,
    GenerativeRuntime,
    ScriptDecoder,
)
from switchyard.generation import Chunk
from switchyard.schemas import QueueMessage
from switchyard_worker.generation_loop import MOST_FLUSH_S, STREAMS_PER_FLUSH, flush_interval
from switchyard_worker.worker import Worker


def test_the_flush_interval_grows_with_the_streams_and_a_slow_write_up_to_a_bound():
    # up to STREAMS_PER_FLUSH streams: the setting's interval
    assert flush_interval(0.05, 1, 0.0) == 0.05
    assert flush_interval(0.05, STREAMS_PER_FLUSH, 0.0) == 0.05
    # more: longer in proportion, up to the bound
    assert flush_interval(0.05, 2 * STREAMS_PER_FLUSH, 0.0) == pytest.approx(0.1)
    assert flush_interval(0.05, 100 * STREAMS_PER_FLUSH, 0.0) == MOST_FLUSH_S
    # a write that took long: four times it, up to the bound
    assert flush_interval(0.05, 1, 0.03) == pytest.approx(0.12)
    assert flush_interval(0.05, 1, 1.0) == MOST_FLUSH_S
    # a setting longer than the bound is kept
    assert flush_interval(3600, 1, 0.0) == 3600


@pytest.fixture
def generating(manifest):
    record = manifest.models["pydoc-gpt"].version_record(
        "pydoc-gpt", "v1", "s3://a/m.tar", "0" * 64, created_at=1.0
    )
    log: list = []
    realtime, batch = FakeQueue("realtime"), FakeQueue("batch")
    results, stream = FakeResults(log), FakeTokenStream(log)
    worker = Worker(
        model="pydoc-gpt",
        worker_id="w1",
        realtime=realtime,
        batch=batch,
        registry=FakeRegistry(record),
        results=results,
        payloads=FakePayloads(),
        load_runtime=lambda r: GenerativeRuntime(ScriptDecoder("The quick brown fox.")),
        visibility_timeout=60,
        poll_wait_seconds=0,
        max_receive_count=realtime.max_receive_count,
        stream=stream,
        stream_flush_seconds=3600,  # one chunk for the first token, one at the end
    )
    worker.preload()
    return worker, realtime, results, stream, log


def ask(queue, rid, max_tokens):
    message = QueueMessage(
        request_id=rid,
        tenant="acme",
        model="pydoc-gpt",
        version="v1",
        inputs=[{"prompt": "Say", "max_tokens": max_tokens, "stream": True}],
        n_inputs=1,
        enqueued_at=time.time(),
        expires_at=time.time() + 3600,
    )
    queue.send(message.model_dump_json(), "acme")


def generate_all(worker, queue, steps=40):
    for pending in worker.intake.keep(queue.receive(10, 0)):
        worker.loop.arrivals.put(pending)
    for _ in range(steps):
        worker.step()
    worker.loop.stream_writer.submit(lambda: None).result()  # the writes made so far
    worker.wait_for_results()


def test_the_streams_first_tokens_are_written_in_one_call_and_each_stream_in_order(generating):
    worker, realtime, results, stream, log = generating
    # GIVEN three streamed requests that join the running batch together
    for rid, n in (("a", 5), ("b", 9), ("c", 12)):
        ask(realtime, rid, n)
    # WHEN the worker generates them
    generate_all(worker, realtime)
    # THEN their first tokens went in one write, one chunk each
    writes = [n for kind, n in log if kind == "put_many"]
    assert writes[0] == 3
    # AND each stream's chunks hold its tokens once, in order, the last with its end,
    # and its result was stored after its last chunk
    for rid, n in (("a", 5), ("b", 9), ("c", 12)):
        chunks = stream.after("acme", rid, 0)
        assert [c.start for c in chunks] == [0, 1]
        assert chunks[-1].end == n and chunks[-1].finish_reason == "length"
        assert (
            "".join(p for c in chunks for p in c.pieces)
            == results.get("acme", rid).outputs[0]["text"]
        )
        events = [kind for kind, r in log if r == rid and kind in ("chunk", "result")]
        assert events == ["chunk", "chunk", "result"]
    # AND no chunk was written one call each: fewer writes than chunks
    assert len(writes) < 6


def test_a_stream_whose_place_another_worker_wrote_is_written_no_more_but_answered(generating):
    worker, realtime, results, stream, log = generating
    # GIVEN another worker has written the first chunk of b (it holds b too)
    stream.put("acme", "b", Chunk(0, [ord("X")], ["X"]), 0)
    ask(realtime, "a", 6)
    ask(realtime, "b", 6)
    # WHEN this worker generates both
    generate_all(worker, realtime)
    # THEN b's stream is left as the other worker wrote it, a's is whole
    assert [c.pieces for c in stream.after("acme", "b", 0)] == [["X"]]
    assert stream.after("acme", "a", 0)[-1].end == 6
    # AND both have their results (whichever worker stores first answers)
    assert results.get("acme", "a").outputs[0]["text"] == "The qu"
    assert results.get("acme", "b").outputs[0]["usage"]["completion_tokens"] == 6
