"""A generation worker's stream writer: every stream's due chunk written together, a
tick at a time, each stream's chunks once and in order, and chunks that grow with
the number of streams."""

from __future__ import annotations

import pytest

from switchyard.generation import Chunk
from switchyard_worker.generation_loop import MOST_FLUSH_S, STREAMS_PER_FLUSH, flush_interval

# test_worker's generative worker (its fixture), and how it sends and generates
from tests.unit.test_worker import ask, generate_all, generating  # noqa: F401


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


def test_the_streams_first_tokens_are_written_in_one_call_and_each_stream_in_order(
    generating,  # noqa: F811
):
    worker, realtime, results, stream, _, log = generating
    # GIVEN three streamed requests that join the running batch together
    for rid, n in (("a", 5), ("b", 9), ("c", 12)):
        ask(realtime, rid, max_tokens=n, stream=True)
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


def test_a_stream_whose_place_another_worker_wrote_is_written_no_more_but_answered(
    generating,  # noqa: F811
):
    worker, realtime, results, stream, _, _ = generating
    # GIVEN another worker has written the first chunk of b (it holds b too)
    stream.put("acme", "b", Chunk(0, [ord("X")], ["X"]), 0)
    ask(realtime, "a", max_tokens=6, stream=True)
    ask(realtime, "b", max_tokens=6, stream=True)
    # WHEN this worker generates both
    generate_all(worker, realtime)
    # THEN b's stream is left as the other worker wrote it, a's is whole
    assert [c.pieces for c in stream.after("acme", "b", 0)] == [["X"]]
    assert stream.after("acme", "a", 0)[-1].end == 6
    # AND both have their results (whichever worker stores first answers)
    assert results.get("acme", "a").outputs[0]["text"] == "The qu"
    assert results.get("acme", "b").outputs[0]["usage"]["completion_tokens"] == 6


def test_a_stream_whose_writes_fail_still_gets_its_result(
    generating,  # noqa: F811
):
    worker, realtime, results, stream, _, _ = generating

    def unavailable(writes):
        raise ConnectionError("the table is not there")

    stream.put_many = unavailable
    # WHEN a streamed request generates while no chunk can be written
    ask(realtime, "a", max_tokens=6, stream=True)
    generate_all(worker, realtime)
    # THEN its chunks are lost, but its result is stored (its reader ends with the
    # result's text) and its message deleted
    assert stream.after("acme", "a", 0) == []
    assert results.get("acme", "a").outputs[0]["text"] == "The qu"
    assert realtime.depth == 0 and not realtime.in_flight
