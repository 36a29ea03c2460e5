"""A generation's token stream in the results table, on the emulator: chunks beside
the request's record, under its tenant, written once, read in order from a token."""

from __future__ import annotations

import time

from switchyard.generation import Chunk, ChunkWrite, DynamoDBTokenStream, tokens_written
from tests.integration.test_results_and_queues import record, store


def stream(manifest, clients) -> DynamoDBTokenStream:
    return DynamoDBTokenStream(clients("dynamodb"), manifest.names("dev").results_table)


def test_chunks_are_written_once_and_read_in_order_from_a_token(manifest, provisioned, clients):
    tokens = stream(manifest, clients)
    ttl = int(time.time()) + 60
    # written out of order, one twice: the second write of a place is refused
    assert tokens.put("acme", "r1", Chunk(3, [4, 5], ["d", "e"], "length", {"n": 5}), ttl)
    assert tokens.put("acme", "r1", Chunk(0, [1, 2, 3], ["a", "b", "c"]), ttl)
    assert not tokens.put("acme", "r1", Chunk(0, [9], ["z"]), ttl)
    assert tokens.put("acme", "r10", Chunk(0, [7], ["q"]), ttl)  # a longer id, same prefix
    assert [(c.start, c.pieces) for c in tokens.after("acme", "r1", 0)] == [
        (0, ["a", "b", "c"]),
        (3, ["d", "e"]),
    ]
    assert [c.start for c in tokens.after("acme", "r1", 1)] == [3]
    assert tokens.after("acme", "r1", 4) == []
    assert tokens.after("globex", "r1", 0) == []  # another tenant's request is not there
    assert [c.end for c in tokens_written(tokens, "acme", "r1")] == [3, 5]


def test_chunks_leave_the_requests_record_as_it_was(manifest, provisioned, clients):
    results = store(manifest, clients)
    results.put_queued(record())
    tokens = stream(manifest, clients)
    tokens.put("acme", "r1", Chunk(0, [1], ["a"]), int(time.time()) + 60)
    assert results.get("acme", "r1").status == "queued"
    assert results.statuses([("acme", "r1")]) == {("acme", "r1"): "queued"}
    assert results.complete(record("done", outputs=[{"text": "a"}]))
    assert [c.pieces for c in tokens.after("acme", "r1", 0)] == [["a"]]


def test_many_streams_chunks_are_written_together_each_once(manifest, provisioned, clients):
    tokens = stream(manifest, clients)
    ttl = int(time.time()) + 60
    # GIVEN a chunk already written at r1's token 0 (another worker's)
    assert tokens.put("acme", "r1", Chunk(0, [9], ["z"]), ttl)
    # WHEN 30 streams' chunks are written together (two calls: 25 a call), r1's too
    writes = [ChunkWrite("acme", f"s{i}", Chunk(0, [i], [str(i)]), ttl) for i in range(30)]
    writes.insert(7, ChunkWrite("acme", "r1", Chunk(0, [1, 2], ["a", "b"]), ttl))
    writes.append(ChunkWrite("globex", "s1", Chunk(0, [5], ["g"]), ttl))
    written = tokens.put_many(writes)
    # THEN each is written but r1's, whose place was taken: that one is left as it was
    assert written == [True] * 7 + [False] + [True] * 24
    assert [c.pieces for c in tokens.after("acme", "r1", 0)] == [["z"]]
    assert [c.pieces for c in tokens.after("acme", "s29", 0)] == [["29"]]
    assert [c.pieces for c in tokens.after("globex", "s1", 0)] == [["g"]]
    # AND a chunk after them reads in order, as any chunk
    assert tokens.put_many([ChunkWrite("acme", "s3", Chunk(1, [4], ["d"], "length"), ttl)])
    assert [c.end for c in tokens_written(tokens, "acme", "s3")] == [1, 2]
