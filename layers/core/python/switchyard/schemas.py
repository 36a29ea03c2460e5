"""Wire formats: model signatures, the queue message between router and worker,
and result records.

Every message carries ``schema_version`` so that a worker can refuse (and leave for
the DLQ) what it does not understand rather than guess. Signatures travel in the
registry's version records; the manifest uses the same types for its defaults.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Base64Bytes, BaseModel, ConfigDict, Field, model_validator

from switchyard import SCHEMA_VERSION

Lane = Literal["realtime", "batch"]
LANES: tuple[Lane, ...] = ("realtime", "batch")
# Every request ends in one of the final statuses; "queued" is the only other one.
Status = Literal["queued", "done", "error", "expired", "cancelled"]
FINAL_STATUSES: frozenset[str] = frozenset({"done", "error", "expired", "cancelled"})
# The error code of a request whose every allowed attempt failed (its message goes
# to the DLQ next); a redrive from the DLQ reopens exactly these.
RETRIES_EXHAUSTED = "retries_exhausted"


class TextSignature(BaseModel):
    """Each input is a non-empty string of at most ``max_chars`` characters."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["text"] = "text"
    max_chars: int = Field(gt=0)


class TensorSignature(BaseModel):
    """Each input is a flat list of numbers of a fixed length within a range."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["tensor"] = "tensor"
    shape: tuple[int]
    minimum: float | None = None
    maximum: float | None = None


class GenerationSignature(BaseModel):
    """Each input is a generation request (``switchyard.generation.GenerationRequest``,
    or a bare prompt string): its prompt and ``max_tokens`` together fit in
    ``context_length`` tokens, and ``max_tokens`` is at most ``max_tokens``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["generation"] = "generation"
    context_length: int = Field(gt=0)
    max_tokens: int = Field(gt=0)
    max_chars: int = Field(gt=0)


Signature = Annotated[
    TextSignature | TensorSignature | GenerationSignature, Field(discriminator="kind")
]


class LineError(BaseModel):
    """Why one line of a batch file has no output."""

    line: int
    code: str
    message: str


class JobChunk(BaseModel):
    """Which part of a batch job a request is: chunk ``index`` of job ``job_id``,
    lines ``first_line`` to ``last_line`` of its file. Its inputs are those lines
    less the ones in ``errors`` (refused by the splitter), in order."""

    job_id: str
    index: int = Field(ge=0)
    first_line: int = Field(ge=1)
    last_line: int
    errors: list[LineError] = Field(default_factory=list)


# A value of a ``tensor`` message's rows: float64, little-endian.
TENSOR_VALUE_BYTES = 8


class QueueMessage(BaseModel):
    """One request's work: its inputs inline (as JSON, or a tensor signature's rows
    as one block of numbers), or a claim-check pointer to them."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = SCHEMA_VERSION
    request_id: str = Field(min_length=1, max_length=64)
    tenant: str = Field(min_length=1, max_length=128)
    model: str
    version: str
    lane: Lane = "realtime"
    inputs: list[Any] | None = None
    inputs_ref: str | None = None  # s3://bucket/key of a JSON list, for large payloads
    # The inputs as rows of numbers (a tensor signature's), in one block: ``n_inputs``
    # rows of float64 values, little-endian, row after row, base64 in the JSON. The
    # router sends tensor inputs so; a worker stacks them into one array without
    # parsing a number, and checks them against its version's signature. Validated
    # from base64 (JSON or Python: build a message with raw rows by ``model_copy``, as
    # ``switchyard.queues.encode_message`` does); held as raw bytes, and dumped to JSON
    # in standard, padded base64, which the worker's msgspec reads.
    tensor: Base64Bytes | None = None
    n_inputs: int = Field(ge=1)
    enqueued_at: float  # epoch seconds, set by the router just before sending
    # Epoch seconds; work not started by then is answered "expired" without running.
    # The work's own expiry (a sync caller's deadline plus the hand-off's grace, or
    # the lane's maximum age), not the result's TTL.
    expires_at: float
    # A sync caller's deadline (epoch seconds): the worker starts a forming batch
    # early rather than answer it late. None for async and batch work.
    respond_by: float | None = None
    # Set on shadow copies: the primary request they mirror.
    shadow_of: str | None = None
    # Set when the router re-sent the request to the model's fallback version
    # (same request id: whichever version stores a result first answers).
    fallback: bool = False
    # Set on a batch job's chunk (the splitter's).
    job: JobChunk | None = None
    # Set when the answer may be cached: the inputs' hash (switchyard.result_cache),
    # under which the worker stores the outputs for the version's cache time.
    cache_key: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    # Set when the router counted the request in its tenant's queued work on the
    # model (switchyard.admission.QueuedWork): whoever stores its final result gives
    # the place back (the lease is worked out from the tenant, model and expiry).
    queued_counted: bool = False

    @model_validator(mode="after")
    def _one_payload(self) -> QueueMessage:
        one_payload(self.inputs, self.inputs_ref, self.tensor, self.n_inputs)
        return self


def one_payload(
    inputs: list[Any] | None, inputs_ref: str | None, tensor: bytes | None, n_inputs: int
) -> None:
    """A message's rule for its payload (``QueueMessage``'s and the worker's reading
    of it): exactly one of its three forms, holding ``n_inputs`` inputs (a tensor's
    rows of one length, at least one value each)."""
    if (inputs is not None) + (inputs_ref is not None) + (tensor is not None) != 1:
        raise ValueError("exactly one of inputs, inputs_ref and tensor must be set")
    if inputs is not None and len(inputs) != n_inputs:
        raise ValueError("n_inputs does not match the number of inputs")
    if tensor is not None and (not tensor or len(tensor) % (TENSOR_VALUE_BYTES * n_inputs)):
        raise ValueError(
            f"tensor does not hold n_inputs rows of {TENSOR_VALUE_BYTES}-byte values"
        )


class ErrorInfo(BaseModel):
    code: str
    message: str
    field: str | None = None


AwsService = Literal["apigateway", "lambda", "sqs", "dynamodb", "s3", "firehose"]
AWS_SERVICES: tuple[AwsService, ...] = ("apigateway", "lambda", "sqs", "dynamodb", "s3", "firehose")


class RequestCost(BaseModel):
    """What an answered request cost (USD, list prices): its share of the worker's
    time (``worker_seconds`` of an instance, priced per second) and the AWS requests
    its path made, by service (``switchyard.costs`` counts and prices them)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    usd: float = Field(ge=0, description="worker_usd + aws_usd")
    worker_usd: float = Field(ge=0)
    aws_usd: float = Field(ge=0)
    worker_seconds: float = Field(
        ge=0,
        description="Its share of its batch's time in the model: the batch's time x "
        "its inputs / the batch's inputs",
    )
    instance_type: str | None = Field(default=None, description="What the worker time is priced as")
    aws: dict[AwsService, float] = Field(default_factory=dict, description="USD by service")


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
    expires_at: int  # the result's TTL (epoch seconds): the table forgets it then
    # Until when the work may still run (the message's ``expires_at``): a request
    # still queued after that is answered "expired".
    work_expires_at: float | None = None
    worker: str | None = None
    # The worker service that ran it: the model's own, its pool, or a CPU pool that
    # took it on overflow.
    served_by: str | None = None
    shadow_of: str | None = None
    # Attempts that failed as a whole batch (the router's cue to fall back).
    failures: int = 0
    last_failure: str | None = None
    # A batch job's chunk: its place in the job, kept for the job's output.
    job: JobChunk | None = None
    # What it cost, set by the worker that answered it (switchyard.costs).
    cost: RequestCost | None = None
    # Set on a queued record whose request the router counted in its tenant's queued
    # work on the model (switchyard.admission.QueuedWork): an async request's from
    # its enqueue, a sync one's from its hand-off at its deadline. Whoever ends the
    # request over this record gives the place back.
    queued_counted: bool = False

    @classmethod
    def queued_for(cls, message: QueueMessage, expires_at: int) -> ResultRecord:
        """The queued record of the request ``message`` carries (kept until
        ``expires_at``): what a worker writes for one that has no record yet."""
        return cls(
            request_id=message.request_id,
            tenant=message.tenant,
            model=message.model,
            version=message.version,
            status="queued",
            lane=message.lane,
            created_at=message.enqueued_at,
            expires_at=expires_at,
            work_expires_at=message.expires_at,
            job=message.job,
            shadow_of=message.shadow_of,
        )


# Every field is set on an assembled record: one set shared by them all (setting a
# field adds its name, which is in it already).
_RECORD_FIELDS = set(ResultRecord.model_fields)
_new_object = object.__new__
_set_slot = object.__setattr__


def assembled_record(fields: dict[str, Any]) -> ResultRecord:
    """A result record from every one of its fields, in their declared order, that a
    worker put together from a message already validated and values of its own
    making: taken as given, not validated again (validating a batch's records was
    1.9 µs of the ~26 µs a digits-cnn input cost the worker; this is 0.4). It is
    what pydantic's ``model_construct`` does, without its pass over each field's
    default; ``tests/unit/test_result_records.py`` holds the two ways to each other."""
    if len(fields) != len(_RECORD_FIELDS):
        raise ValueError(f"a result record has {len(_RECORD_FIELDS)} fields, not {len(fields)}")
    record = _new_object(ResultRecord)
    _set_slot(record, "__dict__", fields)
    _set_slot(record, "__pydantic_fields_set__", _RECORD_FIELDS)
    _set_slot(record, "__pydantic_extra__", None)
    _set_slot(record, "__pydantic_private__", None)
    return record


@dataclass(frozen=True)
class GatewayAnswer:
    """An answer API Gateway gives itself, before any function runs (its gateway
    responses in ``stacks/api.py``); the local platform's stand-in gives the same."""

    status: int
    code: str
    message: str

    def body(self) -> dict[str, str]:
        return {"message": self.message, "code": self.code}


# A request with no key at all: the API's key authorizer refuses it.
UNAUTHORIZED = GatewayAnswer(
    401, "unauthorized", "Unauthorized: send an API key as x-api-key or Authorization: Bearer"
)
FORBIDDEN = GatewayAnswer(403, "forbidden", "Forbidden: a valid x-api-key is required")
THROTTLED = GatewayAnswer(429, "throttled", "Too many requests for this API key's usage plan")
QUOTA_EXCEEDED = GatewayAnswer(429, "quota_exceeded", "This API key's daily quota is spent")
PAYLOAD_TOO_LARGE = GatewayAnswer(
    413, "payload_too_large", "The request body is over API Gateway's 10 MB payload limit"
)
