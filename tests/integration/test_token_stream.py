"""A generation's token stream in the results table, on the emulator: chunks beside
the request's record, under its tenant, written once, read in order from a token."""

from __future__ import annotations

import time

from switchyard.generation import Chunk, DynamoDBTokenStream, tokens_written
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
