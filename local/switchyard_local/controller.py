"""The local rollback controller: AppConfig's alarm-driven rollback, played locally.

In the cloud the router's EMF metrics become CloudWatch metrics, the model's canary
alarms watch them, and AppConfig rolls a deployment back when one fires. Locally
the controller reads the same EMF documents from the router's log, applies the same
rule (``switchyard.canary.judge``) over the same window, and publishes the rolled-back
document with who, when and why.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from switchyard.canary import VersionStats, judge
from switchyard.manifest import Manifest
from switchyard.routing import rolled_back
from switchyard.telemetry import dimension_sets
from switchyard_local.routing_changes import Change, TrafficStore

CONTROLLER = "rollback-controller"


@dataclass(frozen=True)
class Sample:
    at: float
    model: str
    version: str
    latency_ms: float
    error: bool


class MetricsWindow:
    """Request samples from the router's EMF lines in a log file, kept for a window.

    By default one sample per request and version (the documents the rollback rule
    reads; pinned requests are not among them). With ``totals``, one per request of
    the model, whatever its version or role: what throughput and latency figures
    read. ``tail_bytes`` starts a reader near the end of a long log instead of at
    its beginning (a window only needs the recent lines)."""

    def __init__(
        self,
        log_path: Path,
        window_seconds: float,
        *,
        totals: bool = False,
        tail_bytes: int | None = None,
    ) -> None:
        self._path = log_path
        self._window = window_seconds
        self._totals = totals
        self._tail_bytes = tail_bytes
        self._offset = 0
        self._partial = b""
        self._samples: deque[Sample] = deque()

    def poll(self, now: float | None = None) -> None:
        if self._path.exists():
            with open(self._path, "rb") as fh:
                if self._tail_bytes is not None:
                    size = fh.seek(0, 2)
                    if size > self._tail_bytes:
                        # Into the middle of a line: what precedes the first newline
                        # is a fragment, dropped below as an unparseable line.
                        self._offset = size - self._tail_bytes
                    self._tail_bytes = None
                fh.seek(self._offset)
                data = fh.read()
                self._offset += len(data)
            lines = (self._partial + data).split(b"\n")
            self._partial = lines.pop()
            for line in lines:
                self._samples.extend(_parse(line, self._totals))
        horizon = (now or time.time()) - self._window
        while self._samples and self._samples[0].at < horizon:
            self._samples.popleft()

    def stats(self, model: str, since: float) -> dict[str, VersionStats]:
        out: dict[str, VersionStats] = {}
        for s in self._samples:
            if s.model == model and s.at >= since:
                v = out.setdefault(s.version, VersionStats(latencies=[]))
                v.requests += 1
                v.errors += int(s.error)
                assert v.latencies is not None
                v.latencies.append(s.latency_ms)
        return out

    def overall(self, model: str, since: float) -> VersionStats:
        """Every sample of ``model`` since ``since``, versions together."""
        total = VersionStats(latencies=[])
        assert total.latencies is not None
        for s in self._samples:
            if s.model == model and s.at >= since:
                total.requests += 1
                total.errors += int(s.error)
                total.latencies.append(s.latency_ms)
        return total


_EMF = '{"_aws"'
_DECODER = json.JSONDecoder()


def _parse(line: bytes, totals: bool = False) -> list[Sample]:
    """The request samples on one log line. The router's threads print EMF documents
    concurrently, and ``print`` writes a document and its newline separately, so
    one line may hold two documents (and the next none)."""
    text = line.decode(errors="replace")
    samples = []
    at = text.find(_EMF)
    while at != -1:
        try:
            doc, end = _DECODER.raw_decode(text, at)
        except ValueError:
            end = at + len(_EMF)
        else:
            sample = _sample(doc, totals)
            if sample is not None:
                samples.append(sample)
        at = text.find(_EMF, end)
    return samples


def _sample(doc: object, totals: bool = False) -> Sample | None:
    """A request's sample from an EMF document of the router's that files its
    metrics under (model, version), or with ``totals`` under (model) alone; None
    for any other document."""
    if not isinstance(doc, dict) or "Latency" not in doc:
        return None
    if (["model"] if totals else ["model", "version"]) not in dimension_sets(doc):
        return None
    try:
        return Sample(
            at=doc["_aws"]["Timestamp"] / 1000,
            model=doc["model"],
            version="*" if totals else doc["version"],
            latency_ms=float(doc["Latency"][0]),
            error=float(doc.get("Errors", [0])[0]) > 0,
        )
    except (ValueError, KeyError, TypeError, IndexError):
        return None


class RollbackController:
    def __init__(
        self,
        store: TrafficStore,
        window: MetricsWindow,
        manifest: Manifest,
        on_rollback: Callable[[str, Change], None] | None = None,
    ) -> None:
        self._store = store
        self._window = window
        self._manifest = manifest
        self._on_rollback = on_rollback
        self._stop = threading.Event()

    def check_once(self, now: float | None = None) -> list[Change]:
        now = now or time.time()
        self._window.poll(now)
        done = []
        window_start = now - self._manifest.rollout.window_seconds
        for model, spec in self._manifest.models.items():
            if not self._window.stats(model, window_start):
                continue  # no traffic in the window: nothing to judge, nothing to read
            change = self._store.deployed(model)
            if change is None:
                continue
            # Only what happened under the document in force counts.
            since = max(change.at, window_start)
            verdicts = judge(
                change.document,
                self._window.stats(model, since),
                self._manifest.rollout,
                spec.slo_p99_ms,
            )
            if verdicts:
                why = "; ".join(f"{v}: {reason}" for v, reason in verdicts.items())
                rolled = self._store.publish(
                    model, rolled_back(change.document, list(verdicts)), CONTROLLER, why
                )
                done.append(rolled)
                if self._on_rollback:
                    self._on_rollback(model, rolled)
        return done

    def run(self, interval: float = 1.0) -> None:
        while not self._stop.wait(interval):
            try:
                self.check_once()
            except Exception as exc:  # noqa: BLE001 - keep watching
                print(f"rollback controller: {exc!r}", flush=True)

    def stop(self) -> None:
        self._stop.set()
