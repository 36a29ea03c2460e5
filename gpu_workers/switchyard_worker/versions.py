"""The model versions a worker serves: their registry records, read once each, and
their runtimes: loaded once each and kept (a model's own worker), or held in the
pool's model cache (a pool's worker, ``model_cache``), which may evict them."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from switchyard.registry import ModelVersion, Registry
from switchyard_worker.model_cache import ModelCache
from switchyard_worker.runtimes import ModelRuntime

RuntimeLoader = Callable[[ModelVersion], ModelRuntime]


class ServedVersions:
    """A model's versions as this worker knows them. A version the registry does not
    have is asked for again the next time it is named (it may have been registered
    since)."""

    def __init__(
        self,
        model: str,
        registry: Registry,
        load_runtime: RuntimeLoader,
        cache: ModelCache | None = None,
    ) -> None:
        self.model = model
        self._registry = registry
        self._load_runtime = load_runtime
        self.cache = cache
        self._records: dict[str, ModelVersion | None] = {}
        self._runtimes: dict[str, ModelRuntime] = {}

    def all(self) -> list[ModelVersion]:
        """Every version of the model in the registry, each remembered."""
        records = self._registry.versions(self.model)
        for record in records:
            self._records[record.version] = record
        return records

    def known(self) -> list[ModelVersion]:
        """The versions read so far."""
        return [r for r in self._records.values() if r is not None]

    def get(self, version: str) -> ModelVersion | None:
        if self._records.get(version) is None:
            self._records[version] = self._registry.get(self.model, version)
        return self._records[version]

    def runtime(self, record: ModelVersion) -> ModelRuntime:
        """A version's runtime, loaded now if it is not (a model's own worker)."""
        if record.version not in self._runtimes:
            self._runtimes[record.version] = self._load_runtime(record)
        return self._runtimes[record.version]

    @contextlib.contextmanager
    def using(self, record: ModelVersion) -> Iterator[ModelRuntime]:
        """A version's runtime for one batch: kept loaded while the batch runs."""
        if self.cache is None:
            yield self.runtime(record)
            return
        with self.cache.using(record) as runtime:
            yield runtime

    def limits(self, version: str) -> tuple[int, float]:
        """A version's ``max_batch_size`` and ``max_wait_ms`` in seconds (1, 0 before
        its record is read)."""
        record = self._records.get(version)
        if record is None:
            return 1, 0.0
        return record.max_batch_size, record.max_wait_ms / 1000
