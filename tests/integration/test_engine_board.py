"""Which engine runs each version, as its workers say (switchyard.engines), kept in
the results table on the emulator: the last word stands, and no request reads it."""

from __future__ import annotations

from switchyard.engines import EngineBoard
from switchyard.results import DynamoDBResultStore


def test_the_last_workers_word_on_a_versions_engine_stands(manifest, provisioned, clients):
    table = manifest.names("dev").results_table
    board = EngineBoard(clients("dynamodb"), table)
    # GIVEN nothing said of pydoc-gpt v1
    assert board.engine_of("pydoc-gpt", "v1") is None
    # WHEN a worker on a host without vLLM loads it, then one with vLLM
    board.say("pydoc-gpt", "v1", "transformers", "worker-a")
    board.say("pydoc-gpt", "v1", "vllm", "worker-b")
    # THEN the last word stands, per version
    assert board.engine_of("pydoc-gpt", "v1") == "vllm"
    assert board.engine_of("pydoc-gpt", "v2") is None
    # AND it is no tenant's request
    results = DynamoDBResultStore(clients("dynamodb"), table, None, 8_192)
    assert results.get("engine#pydoc-gpt", "v1") is None
