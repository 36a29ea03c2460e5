"""Routing changes as both substrates keep them: a change (the document, who made
it, when and why), the store of them that each substrate implements, and the
audit line written with each.

The local platform's rollback controller and dashboard read and write changes
through :class:`TrafficStore`; the emulator's store is ``bridge.LocalTrafficStore``,
a deployed stage's is the operator CLI's ``switchyard_cli.traffic.AppConfigTrafficStore``.
On the emulator the audit line is the hosted configuration version's description;
in AWS it travels the same way, beside AppConfig's own deployment history.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Protocol

from switchyard.routing import RoutingDocument

# The states of a change that ended without being in force (AppConfig's, lowercased).
NOT_IN_FORCE = {"rolling_back", "rolled_back", "reverted"}


@dataclass(frozen=True)
class Change:
    number: int
    document: RoutingDocument
    by: str
    at: float
    why: str
    state: str = "deployed"


class TrafficStore(Protocol):
    def history(self, model: str, limit: int = 10) -> list[Change]:
        """Changes, newest first."""
        ...

    def deployed(self, model: str) -> Change | None:
        """The change in force (a rolled-back deployment is not)."""
        ...

    def publish(self, model: str, document: RoutingDocument, by: str, why: str) -> Change: ...

    def stop_rollout(self, model: str) -> int | None:
        """Stop a change still rolling out, so that the document before it is in force
        again; the stopped change's number, or None when nothing is rolling out."""
        ...


def describe(by: str, why: str, at: float | None = None) -> str:
    """The audit line kept with a change (AppConfig descriptions hold 1024 chars)."""
    return json.dumps({"by": by, "at": at or time.time(), "why": why})[:1024]


def parse_description(text: str | None) -> tuple[str, float, str]:
    try:
        doc = json.loads(text or "")
        return str(doc["by"]), float(doc["at"]), str(doc["why"])
    except (ValueError, KeyError, TypeError):
        return "unknown", 0.0, text or ""
