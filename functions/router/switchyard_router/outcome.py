"""An admitted request and how it ends for its caller.

``PredictService`` admits a request (``Admitted``) and answers it with an
``Outcome``: done, queued (its result will be at its location), failed with its
code, expired or cancelled. Each outcome has one status, the same on every route
that answers it (predict, generate, the OpenAI-compatible API); the routes only
format it, each in its API's shapes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from switchyard.schemas import ResultRecord

OutcomeKind = Literal["done", "queued", "failed", "expired", "cancelled"]

# The status of each outcome, on every route. A failure is the model's refusal of
# its inputs (422; OpenAI's 400) or anything else (500).
_STATUS: dict[OutcomeKind, int] = {
    "done": 200,
    "queued": 202,
    "expired": 504,
    "cancelled": 409,
    "failed": 500,
}
_REFUSED_INPUT = "invalid_input"


@dataclass
class Admitted:
    """A request that was accepted and enqueued, with what a fallback would need."""

    request_id: str
    model: str
    version: str
    tenant: str
    deadline: float  # monotonic
    budget_s: float
    inputs: list[Any] = field(default_factory=list)
    # Its inputs are rows of its version's tensor signature, checked: its copies send
    # them as one block of numbers too (``QueueMessage.tensor``).
    rows: bool = False
    expires_at: float = 0.0
    fallback: str | None = None  # the version that answers if this one cannot
    fell_back: str | None = None  # why the fallback was asked: "failure" or "deadline"
    shadow: str | None = None
    # "canary" when the routing document would roll it back; "pinned" when the
    # caller chose the version (kept out of the canary's judgement).
    role: str = "stable"
    timings: dict[str, float] = field(default_factory=dict)
    # Answered from the result cache: nothing was queued, and this is the answer.
    cached: ResultRecord | None = None
    # The request's queued record, and whether it is written: an async or batch
    # request's is, before it is enqueued; a sync request's only if it is handed off
    # at its deadline (see PredictService.hand_off).
    queued: ResultRecord | None = None
    recorded: bool = True
    # Its message says it was counted in its tenant's queued work on the model
    # (switchyard.admission): an async request's, from its enqueue. A sync request
    # counts from its hand-off, which its queued record says instead.
    queued_counted: bool = False
    # An earlier request with the same Idempotency-Key and body: this is that one,
    # answered again (nothing was sent for it).
    replayed: bool = False

    @property
    def location(self) -> str:
        """Where its result is read (``GET``) and where it is cancelled (``DELETE``),
        below the API's base path."""
        return f"/v1/requests/{self.request_id}"


@dataclass(frozen=True)
class Outcome:
    """How an admitted request ended for its caller: ``record`` is its result, or
    None while it is queued (async, or past its deadline)."""

    admitted: Admitted
    record: ResultRecord | None = None

    @property
    def kind(self) -> OutcomeKind:
        if self.record is None:
            return "queued"
        if self.record.status == "done":
            return "done"
        if self.code in ("expired", "cancelled"):
            return self.code  # type: ignore[return-value]
        return "failed"

    @property
    def code(self) -> str:
        """Why it did not end done: its error's code, or its status."""
        assert self.record is not None
        return self.record.error.code if self.record.error else self.record.status

    @property
    def message(self) -> str:
        assert self.record is not None
        if self.record.error is not None:
            return self.record.error.message
        if self.record.status == "cancelled":
            return "the request was cancelled"
        return f"the request ended {self.record.status}"

    @property
    def status(self) -> int:
        if self.kind == "failed" and self.code == _REFUSED_INPUT:
            return 422
        return _STATUS[self.kind]

    @property
    def fell_back(self) -> bool:
        """Answered by the model's fallback version."""
        return self.record is not None and self.record.version != self.admitted.version
