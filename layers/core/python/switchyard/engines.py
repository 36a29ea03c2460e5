"""Which engine runs each version of a generation model, as its workers say.

A version's engine is the host's, not the record's: the same `causal-lm` version
decodes with vLLM on a host where vLLM is installed and loads it, and with
transformers elsewhere (``switchyard_worker.runtimes.CausalLM``). So each worker,
once it has loaded a version, writes which engine it got in the results table (one
item per model and version: partition ``engine#<model>``, sort key the version),
and whatever names the engine (the Open Inference Protocol's model metadata, whose
``platform`` it is) reads the last word. The item expires a week after it was last
written; a version no worker has loaded has no word.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from switchyard.tables import RESULTS

_PARTITION = "engine#{model}"  # no tenant is named so: tenant names have no '#'
_TTL = RESULTS.ttl_attribute or "expires_at"
_KEPT_SECONDS = 7 * 86_400


class EngineBoard:
    """The workers' word on which engine runs each version (results table)."""

    def __init__(self, dynamodb: Any, table: str, clock: Callable[[], float] = time.time) -> None:
        self._ddb = dynamodb
        self._table = table
        self._clock = clock

    def _key(self, model: str, version: str) -> dict[str, Any]:
        return {
            RESULTS.partition: {"S": _PARTITION.format(model=model)},
            RESULTS.sort: {"S": version},
        }

    def say(self, model: str, version: str, engine: str, worker: str) -> None:
        """``worker`` runs ``model`` ``version`` on ``engine``."""
        now = self._clock()
        self._ddb.put_item(
            TableName=self._table,
            Item={
                **self._key(model, version),
                "engine": {"S": engine},
                "worker": {"S": worker},
                "said_at": {"N": f"{now:.3f}"},
                _TTL: {"N": str(int(now) + _KEPT_SECONDS)},
            },
        )

    def engine_of(self, model: str, version: str) -> str | None:
        """The engine the last worker to load ``model`` ``version`` said it runs on
        (None: no worker has said)."""
        item = self._ddb.get_item(TableName=self._table, Key=self._key(model, version)).get("Item")
        if not item or "engine" not in item:
            return None
        return str(item["engine"]["S"])
