"""The router's side of a token stream: the hub reads every stream's chunks, first
tokens too, in shared reads; a chunk's tokens reach the caller in one write, as an
event per token on the platform's own route and one chunk object on OpenAI's."""

from __future__ import annotations

import json
import threading
import time

from harness.fakes import FakeResults, FakeTokenStream
from harness.waiting import wait_for
from switchyard.generation import Chunk
from switchyard_router.generate_api import NativeFormat
from switchyard_router.openai_api import _Completions
from switchyard_router.outcome import Admitted
from switchyard_router.streaming import Ending, Piece, StreamHub, TokenReader


def admitted(request_id: str = "r1") -> Admitted:
    return Admitted(request_id, "pydoc-gpt", "v1", "acme", time.monotonic() + 60, 60.0)


def events_of(written: bytes) -> list[dict]:
    return [
        json.loads(line[6:]) if line != "data: [DONE]" else "[DONE]"
        for line in written.decode().split("\n\n")
        if line.startswith("data: ")
    ]


def test_the_hub_reads_the_first_tokens_of_waiting_streams_in_one_read():
    # GIVEN two streams whose first chunks are written, and a hub whose first look at
    # a stream comes 0.3 s after its caller asks
    log: list = []
    stream = FakeTokenStream(log)
    for rid in ("r1", "r2"):
        stream.put("acme", rid, Chunk(0, [1, 2], ["He", "llo"]), 0)
    hub = StreamHub(stream, interval_s=0.3, first_interval_s=0.3)
    readers = [TokenReader(stream, FakeResults(), "acme", rid, hub=hub) for rid in ("r1", "r2")]
    firsts: dict[str, list] = {}

    def wait_first(reader: TokenReader, rid: str) -> None:
        firsts[rid] = reader.first(time.monotonic() + 10) or []

    threads = [
        threading.Thread(target=wait_first, args=(r, rid))
        for r, rid in zip(readers, ("r1", "r2"), strict=True)
    ]
    # WHEN both callers wait for their first tokens at once
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    # THEN one read found both, and each caller has its tokens
    reads = [entry for entry in log if entry[0] == "at"]
    assert reads[0] == ("at", 2) and all(places == 2 for _, places in reads)
    assert firsts["r1"] == [Piece("He", 0), Piece("llo", 1)] == firsts["r2"]
    for reader in readers:
        reader.close()


def test_a_reader_behind_the_stream_takes_every_chunk_found_in_one_group_each_token_once():
    # GIVEN a stream of three chunks, the last with its end, all written
    log: list = []
    stream = FakeTokenStream(log)
    stream.put("acme", "r1", Chunk(0, [1], ["a"]), 0)
    stream.put("acme", "r1", Chunk(1, [2, 3], ["b", ""]), 0)  # a token that adds no text
    stream.put("acme", "r1", Chunk(3, [4], ["c"], "length", {"completion_tokens": 4}), 0)
    hub = StreamHub(stream, interval_s=0.01, first_interval_s=0.01)
    reader = TokenReader(stream, FakeResults(), "acme", "r1", hub=hub)
    # WHEN its caller reads it
    first = reader.first(time.monotonic() + 10)
    rest = list(reader.rest(time.monotonic() + 10))
    # THEN every token's text came once, in order, and the end last
    pieces = [p for group in [first, *rest] for p in group if isinstance(p, Piece)]
    assert [(p.text, p.index) for p in pieces] == [("a", 0), ("b", 1), ("c", 3)]
    assert isinstance(rest[-1][-1], Ending) and rest[-1][-1].finish_reason == "length"
    assert reader.text == "abc" and reader.next_index == 4
    # AND the chunks found together made one group, not a group each, all of them read
    # by the hub (no Query of the stream)
    assert len(rest) <= 2
    assert not [kind for kind, _ in log if kind == "after"]


def test_a_reader_dropped_while_the_hub_holds_its_lock_is_forgotten_without_waiting():
    # GIVEN a stream read through the hub, its caller gone midway: the response's
    # generator suspended after a group, held by nothing but the collector's reach
    log: list = []
    stream = FakeTokenStream(log)
    stream.put("acme", "r1", Chunk(0, [1], ["a"]), 0)
    hub = StreamHub(stream, interval_s=0.01, first_interval_s=0.01)
    reader = TokenReader(stream, FakeResults(), "acme", "r1", hub=hub)
    deadline = time.monotonic() + 10
    assert reader.first(deadline) == [Piece("a", 0)]
    stream.put("acme", "r1", Chunk(1, [2], ["b"]), 0)
    held = [reader.rest(deadline)]
    assert next(held[0]) == [Piece("b", 1)]
    dropped = threading.Event()

    def drop_inside_the_hubs_look() -> None:
        # WHEN the generator is finalized on a thread that holds the hub's lock, as
        # the collector does when the hub's own thread allocates inside its look
        with hub._lock:  # noqa: SLF001 - where the collector may run it
            held.clear()
        dropped.set()

    threading.Thread(target=drop_inside_the_hubs_look, daemon=True).start()
    # THEN the generator's end runs through (it used to wait forever for the lock its
    # own thread held, and every stream of the router with it)
    assert dropped.wait(5)
    # AND the hub stops reading that stream: its looks end
    wait_for(lambda: _reads_stopped(log), timeout_s=5, every_s=0)


def _reads_stopped(log: list) -> bool:
    reads = sum(1 for entry in log if entry[0] == "at")
    time.sleep(0.1)  # ten of the hub's intervals
    return sum(1 for entry in log if entry[0] == "at") == reads


def test_the_native_route_writes_a_chunks_tokens_in_one_write_an_event_per_token():
    groups = [
        [Piece("Hel", 0), Piece("lo", 1)],
        [Piece(" you", 2), Ending("length", {"completion_tokens": 3})],
    ]
    writes = list(NativeFormat().events(admitted(), iter(groups)))
    assert len(writes) == 2
    assert events_of(writes[0]) == [{"token": "Hel"}, {"token": "lo"}]
    last = events_of(writes[1])
    assert last[0] == {"token": " you"}
    assert last[1]["done"] is True and last[1]["usage"] == {"completion_tokens": 3}


def test_openai_streams_a_chunk_object_per_group_with_all_its_tokens_text():
    groups = [
        [Piece("Hel", 0), Piece("lo", 1)],
        [Piece(" you", 2), Ending("length", {"completion_tokens": 3})],
    ]
    writes = list(_Completions("pydoc-gpt", include_usage=True).events(admitted(), iter(groups)))
    events = [e for w in writes for e in events_of(w)]
    texts = [e["choices"][0]["text"] for e in events[:3]]
    assert texts == ["Hello", " you", ""]
    assert [e["choices"][0]["finish_reason"] for e in events[:3]] == [None, None, "length"]
    assert events[3]["choices"] == [] and events[3]["usage"] == {"completion_tokens": 3}
    assert events[4] == "[DONE]"
    assert len(writes) == 3  # a write per group, then [DONE]
