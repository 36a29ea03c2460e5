"""Batch jobs over HTTP: submit, list, show and cancel a tenant's jobs.

A job runs the way a dropped file does (``switchyard_batch.splitter``): submitted
inputs are written to the drop bucket as a JSON Lines file under the tenant's prefix,
whose notification starts the split; a submitted ``input_uri`` names a file already
there. The job is recorded here first, so that it can be read at once. Every route
is scoped to the caller's tenant: another tenant's job is 404.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from switchyard.callbacks import JobEvents, cancel
from switchyard.fields import FieldError, field_path
from switchyard.jobs import TERMINAL, Job, JobRejected, JobStore, job_for_file
from switchyard.missing_objects import object_missing
from switchyard.registry import Registry
from switchyard.routing import RoutingSource
from switchyard_router.answers import json_body
from switchyard_router.logic import RequestRejected

MAX_INPUTS = 10_000  # per submission with inputs (a larger job is a dropped file)
MAX_KEY_BYTES = 1024  # an S3 object key's longest, in UTF-8
# A JSON Lines file in S3 (which bucket and prefix are the caller's is checked after).
INPUT_URI_PATTERN = "^s3://[^/]+/.+[.]jsonl$"
# An http(s) URL in printable ASCII (a character outside it is written
# percent-encoded), spelled as ranges so that the router and the API document's
# readers mean the same characters: optional user info ending in @; a host (not an
# IPv6 literal: no brackets, and neither : nor @); an optional port of 0 to 65535;
# then the rest, after the / ? or # that ends the host. Every URL it takes, urllib
# can post to (``tests/unit/test_callback_urls.py``).
_PORT = "[0-9]{1,4}|[0-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]"
CALLBACK_URL_PATTERN = (
    f'^https?://([!-"$-.0->@-Z^-~]*@)?[!-"$-.0-9;->A-Z^-~]+(:({_PORT})?)?([/?#][!-~]*)?$'
)


class JobSubmission(BaseModel):
    """``inputs`` (one per output line), or ``input_uri`` of a JSON Lines file in the
    drop bucket under the tenant's prefix."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1, max_length=64)
    inputs: list[Any] | None = Field(default=None, min_length=1, max_length=MAX_INPUTS)
    input_uri: str | None = Field(
        default=None, min_length=6, max_length=1024, pattern=INPUT_URI_PATTERN
    )
    callback_url: str | None = Field(default=None, max_length=2048, pattern=CALLBACK_URL_PATTERN)

    @model_validator(mode="before")
    @classmethod
    def _no_nulls(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name, value in data.items():
                if value is None:
                    raise ValueError(f"{name} is null: leave it out instead")
        return data

    @model_validator(mode="after")
    def _one_source(self) -> JobSubmission:
        if (self.inputs is None) == (self.input_uri is None):
            raise ValueError("give exactly one of inputs and input_uri")
        return self


# The body as the API document states it: exactly one of inputs and input_uri.
JOB_BODY = {
    "required": True,
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "additionalProperties": False,
                "required": ["model"],
                "properties": {
                    "model": {"type": "string", "minLength": 1, "maxLength": 64},
                    "inputs": {
                        "type": "array",
                        "minItems": 1,
                        "maxItems": MAX_INPUTS,
                        "items": {},
                        "description": "One input per output line, as in a dropped file",
                    },
                    "input_uri": {
                        "type": "string",
                        "minLength": 6,
                        "maxLength": 1024,
                        "pattern": INPUT_URI_PATTERN,
                        "description": "s3://<drop bucket>/<tenant>/<model>/<name>.jsonl",
                    },
                    "callback_url": {
                        "type": "string",
                        "maxLength": 2048,
                        "pattern": CALLBACK_URL_PATTERN,
                        "description": "POSTed the job's summary when it ends, signed "
                        "(X-Switchyard-Signature: sha256=HMAC of the body with the "
                        "tenant's webhook secret)",
                    },
                },
                "oneOf": [
                    {"required": ["inputs"], "not": {"required": ["input_uri"]}},
                    {"required": ["input_uri"], "not": {"required": ["inputs"]}},
                ],
            },
            "examples": {
                "inputs": {"value": {"model": "minilm-embed", "inputs": ["a", "b"]}},
                "file": {
                    "value": {
                        "model": "minilm-embed",
                        "input_uri": "s3://<drop bucket>/acme/minilm-embed/nightly.jsonl",
                    }
                },
            },
        }
    },
}


def parse_submission(body: bytes) -> JobSubmission:
    """The submission in a request body; a mistake is refused with its fields."""
    document = json_body(body)
    try:
        return JobSubmission.model_validate(document)
    except ValidationError as exc:
        errors = [FieldError(field_path(e["loc"]) or "body", _said(e)) for e in exc.errors()]
        raise RequestRejected(422, "invalid_request", "the job is not valid", errors) from None


# What a field whose pattern failed must be, in words, not as its pattern.
_PATTERNS_SAID = {
    "callback_url": "must be an http:// or https:// URL of printable ASCII naming a host (not "
    "an IPv6 literal), with a port from 0 to 65535 if it gives one",
    "input_uri": "must be s3://<drop bucket>/<tenant>/<model>/<name>.jsonl",
}


def _said(error: Any) -> str:
    """A validation error's message; a pattern's in words."""
    if error["type"] == "string_pattern_mismatch" and len(error["loc"]) == 1:
        return _PATTERNS_SAID.get(str(error["loc"][0]), str(error["msg"]))
    return str(error["msg"])


@dataclass
class JobsApi:
    store: JobStore
    s3: Any
    registry: Registry
    models: list[str]
    drop_bucket: str
    ttl_seconds: int
    routing: RoutingSource | None = None  # a job runs on its model's stable version
    events: JobEvents | None = None  # asks for an ended job's callback

    def submit(self, tenant: str, submission: JobSubmission) -> tuple[Job, bool]:
        """The job (recorded) and whether it is new: the same file again is the
        same job."""
        if submission.model not in self.models:
            raise RequestRejected(404, "unknown_model", f"no model {submission.model!r}")
        if submission.inputs is not None:
            key = f"{tenant}/{submission.model}/api-{uuid.uuid4().hex}.jsonl"
            body = "\n".join(json.dumps(item, separators=(",", ":")) for item in submission.inputs)
            self.s3.put_object(Bucket=self.drop_bucket, Key=key, Body=body.encode())
        else:
            key = self._own_key(tenant, submission)
        try:
            job = job_for_file(
                self.s3,
                self.registry,
                self.models,
                self.drop_bucket,
                key,
                self.ttl_seconds,
                self.routing,
            )
        except JobRejected as exc:
            raise RequestRejected(404, "unknown_model", str(exc)) from None
        except self.s3.exceptions.ClientError as exc:
            if object_missing(exc):  # 404, or 403 to a role that cannot list
                raise RequestRejected(
                    404, "no_such_file", f"{submission.input_uri} does not exist"
                ) from None
            raise
        if submission.callback_url:
            job = job.model_copy(update={"callback_url": submission.callback_url})
        recorded, new = self.store.create(job)
        if submission.callback_url and recorded.callback_url is None:
            # Recorded first by the splitter (woken by the file's notification), or
            # the same file submitted before: the callback is added to that job, and
            # asked for here if the job has ended already.
            added = self.store.add_callback(tenant, recorded.job_id, submission.callback_url)
            if added is not None:
                recorded = added
                if added.status in TERMINAL and self.events is not None:
                    self.events.ended(added)
        # Submitted inputs are a file of their own: the job is new even when the
        # splitter recorded it a moment first.
        return recorded, new or submission.inputs is not None

    def cancel(self, tenant: str, job_id: str) -> Job:
        """Cancel the tenant's job: the job after (``cancelled``, or as it had
        ended already); its callback is asked for if this cancel ended it."""
        self.get(tenant, job_id)
        job = cancel(self.store, tenant, job_id, self.events)
        assert job is not None
        return job

    def _own_key(self, tenant: str, submission: JobSubmission) -> str:
        uri = submission.input_uri or ""
        prefix = f"s3://{self.drop_bucket}/{tenant}/{submission.model}/"
        if not uri.startswith(prefix):
            # Another tenant's file is no more visible than a missing one.
            raise RequestRejected(
                404, "no_such_file", f"no .jsonl file of yours at {uri} (under {prefix})"
            )
        key = uri.removeprefix(f"s3://{self.drop_bucket}/")
        if len(key.encode()) > MAX_KEY_BYTES:  # S3 would refuse to look (400)
            why = f"no file can be at {uri}: S3 keys are at most {MAX_KEY_BYTES:,} bytes"
            raise RequestRejected(404, "no_such_file", why)
        return key

    def get(self, tenant: str, job_id: str) -> Job:
        job = self.store.get(tenant, job_id)
        if job is None:
            raise RequestRejected(404, "unknown_job", f"job {job_id} does not exist")
        return job
