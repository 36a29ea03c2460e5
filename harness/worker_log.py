"""Reading the workers' JSON log lines: the e2e tests and the soak count deliveries
from them."""

from __future__ import annotations

import datetime as dt
from typing import Any


def delivery_events(events: list[dict]) -> list[dict]:
    """The workers' log events with each batch's ``results stored`` line read as one
    event per request: ``result stored`` (written) or ``duplicate suppressed`` (the
    request had already ended), with its ``request_id``, ``status`` and
    ``receive_count``."""
    out = []
    for e in events:
        if e.get("message") != "results stored":
            out.append(e)
            continue
        counts = e.get("receive_counts") or {}
        for key, message in (("stored", "result stored"), ("suppressed", "duplicate suppressed")):
            for status, request_ids in (e.get(key) or {}).items():
                out.extend(
                    {
                        "message": message,
                        "request_id": request_id,
                        "status": status,
                        "receive_count": counts.get(request_id, 1),
                        "stored": key == "stored",
                        "worker": e.get("worker"),
                        "timestamp": e.get("timestamp"),
                    }
                    for request_id in request_ids
                )
    return out


def logged_at(event: dict[str, Any]) -> float:
    """A log line's time: its ``at`` where it has one, else Powertools' ``timestamp``
    (``2026-01-01 12:00:00,123+0000``)."""
    if "at" in event:
        return float(event["at"])
    return dt.datetime.strptime(event["timestamp"], "%Y-%m-%d %H:%M:%S,%f%z").timestamp()
