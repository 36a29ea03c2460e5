"""Wire formats: the queue message between router and worker, and result records.

Every message carries ``schema_version`` so that a worker can refuse (and leave for
the DLQ) what it does not understand rather than guess.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from switchyard import SCHEMA_VERSION

Lane = Literal["realtime", "batch"]
Status = Literal["queued", "done", "error"]


class QueueMessage(BaseModel):
    """One request's work: its inputs inline, or a claim-check pointer to them."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = SCHEMA_VERSION
    request_id: str = Field(min_length=1, max_length=64)
    tenant: str = Field(min_length=1, max_length=128)
    model: str
    version: str
    lane: Lane = "realtime"
    inputs: list[Any] | None = None
    inputs_ref: str | None = None  # s3://bucket/key of a JSON list, for large payloads
    n_inputs: int = Field(ge=1)
    enqueued_at: float  # epoch seconds, set by the router just before sending
    expires_at: float  # epoch seconds; work not started by then is refused
    # Set on shadow copies: the primary request they mirror.
    shadow_of: str | None = None
    # Set when the router re-sent the request to the model's fallback version
    # (same request id: whichever version stores a result first answers).
    fallback: bool = False

    @model_validator(mode="after")
    def _one_payload(self) -> QueueMessage:
        if (self.inputs is None) == (self.inputs_ref is None):
            raise ValueError("exactly one of inputs and inputs_ref must be set")
        if self.inputs is not None and len(self.inputs) != self.n_inputs:
            raise ValueError("n_inputs does not match the number of inputs")
        return self


class ErrorInfo(BaseModel):
    code: str
    message: str
    field: str | None = None


class ResultRecord(BaseModel):
    """A request's status and, once done, its outputs. Stored in the results table."""

    request_id: str
    tenant: str
    model: str
    version: str
    status: Status
    lane: Lane = "realtime"
    outputs: list[Any] | None = None
    error: ErrorInfo | None = None
    # Epoch-second timestamps and millisecond durations recorded along the path.
    timings: dict[str, float] = Field(default_factory=dict)
    created_at: float
    completed_at: float | None = None
    expires_at: int
    worker: str | None = None
    shadow_of: str | None = None
    # Attempts that failed as a whole batch (the router's cue to fall back).
    failures: int = 0
    last_failure: str | None = None
