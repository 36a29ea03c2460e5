"""Batch jobs: one per dropped file, kept small whatever the file's size.

A job is one item of the jobs table (tenant, job id). Its id comes from the file's
bucket, key and ETag, so the same bytes dropped again at the same key are the same
job, and different bytes at that key a new one. While the splitter reads the file
(``split_done`` false) the item records how far it got: the byte offset, line and
chunk at the last chunk boundary it enqueued, so a later invocation (or a retry
after a crash) goes on from there, re-enqueueing at most the chunks after that
point under the same request ids (which the workers answer once). Errors keep only
the first :data:`MAX_REPORTED_ERRORS` lines; the counts cover every line.

Chunk ``i`` of a job is the request ``chunk_request_id(job_id, i)`` on the model's
batch lane.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any, Literal

from pydantic import BaseModel, Field

from switchyard.tables import JOBS

JobStatus = Literal["queued", "running", "succeeded", "failed", "cancelled"]
MAX_REPORTED_ERRORS = 100


class LineError(BaseModel):
    line: int
    code: str
    message: str


class Job(BaseModel):
    job_id: str
    tenant: str
    model: str
    version: str
    source: str  # s3://bucket/key
    etag: str
    size_bytes: int
    status: JobStatus = "queued"
    created_at: float
    updated_at: float
    expires_at: int
    # The split's progress: the last chunk boundary enqueued.
    split_offset: int = 0  # bytes of the file read up to that boundary
    split_line: int = 0  # lines read up to it
    split_chunk: int = 0  # chunks enqueued before it
    split_done: bool = False
    inputs: int = 0  # valid lines up to it
    rejected: int = 0  # invalid lines up to it
    errors: list[LineError] = Field(default_factory=list)  # the first few
    chunks: int | None = None  # once split_done

    @property
    def bucket_key(self) -> tuple[str, str]:
        bucket, _, key = self.source.removeprefix("s3://").partition("/")
        return bucket, key


def job_id_for(bucket: str, key: str, etag: str) -> str:
    """The job of these bytes at this key (S3's ETag names the bytes)."""
    return hashlib.sha256(f"{bucket}\n{key}\n{etag}".encode()).hexdigest()[:24]


def chunk_request_id(job_id: str, index: int) -> str:
    return f"{job_id}-{index:06d}"


_NUMBERS = ("size_bytes", "created_at", "updated_at", "expires_at", "split_offset")
_COUNTS = ("split_line", "split_chunk", "inputs", "rejected")


class JobStore:
    """Jobs in DynamoDB: one item each, with top-level attributes so that progress
    is a conditional update, never a read-modify-write."""

    def __init__(self, ddb: Any, table: str) -> None:
        self._ddb = ddb
        self._table = table

    def create(self, job: Job) -> tuple[Job, bool]:
        """Record a new job; if one with its id exists already, that one and False."""
        try:
            self._ddb.put_item(
                TableName=self._table,
                Item=_to_item(job),
                ConditionExpression="attribute_not_exists(#sk)",
                ExpressionAttributeNames={"#sk": JOBS.sort},
            )
            return job, True
        except self._ddb.exceptions.ConditionalCheckFailedException:
            existing = self.get(job.tenant, job.job_id)
            if existing is None:  # expired between the two calls
                return self.create(job)
            return existing, False

    def get(self, tenant: str, job_id: str) -> Job | None:
        item = self._ddb.get_item(
            TableName=self._table,
            Key={JOBS.partition: {"S": tenant}, JOBS.sort: {"S": job_id}},
            ConsistentRead=True,
        ).get("Item")
        return _from_item(item) if item else None

    def record_split(
        self,
        job: Job,
        *,
        offset: int,
        line: int,
        chunk: int,
        inputs: int,
        rejected: int,
        errors: list[LineError],
        done: bool = False,
    ) -> bool:
        """Move the split's progress forward to a chunk boundary (and, with ``done``,
        close it with the job's chunk count). False if it is already at or past that
        point, or closed: another invocation got there first."""
        now = time.time()
        names = {"#done": "split_done", "#chunk": "split_chunk", "#line": "split_line"}
        values: dict[str, Any] = {
            ":offset": {"N": str(offset)},
            ":line": {"N": str(line)},
            ":chunk": {"N": str(chunk)},
            ":inputs": {"N": str(inputs)},
            ":rejected": {"N": str(rejected)},
            ":errors": {"S": _errors_json(errors)},
            ":now": {"N": repr(now)},
            ":false": {"BOOL": False},
            ":done": {"BOOL": done},
        }
        update = (
            "SET split_offset = :offset, #line = :line, #chunk = :chunk, inputs = :inputs, "
            "rejected = :rejected, errors = :errors, updated_at = :now, #done = :done"
        )
        if done:
            update += ", chunks = :chunk"
        try:
            self._ddb.update_item(
                TableName=self._table,
                Key={JOBS.partition: {"S": job.tenant}, JOBS.sort: {"S": job.job_id}},
                UpdateExpression=update,
                # Forward only: a slower, older invocation never moves it back.
                ConditionExpression="#done = :false AND #line "
                + ("<=" if done else "<")
                + " :line",
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
            )
            return True
        except self._ddb.exceptions.ConditionalCheckFailedException:
            return False

    def list(
        self, tenant: str, limit: int = 20, after: str | None = None
    ) -> tuple[list[Job], str | None]:
        """A tenant's jobs, newest first: a page and the cursor of the next (None at
        the end). The cursor is the last job id of the page."""
        jobs: list[Job] = []
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "#pk = :t",
            "ExpressionAttributeNames": {"#pk": JOBS.partition},
            "ExpressionAttributeValues": {":t": {"S": tenant}},
        }
        while True:
            page = self._ddb.query(**kwargs)
            jobs += [_from_item(item) for item in page.get("Items", [])]
            if "LastEvaluatedKey" not in page:
                break
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        jobs.sort(key=lambda j: (j.created_at, j.job_id), reverse=True)
        if after is not None:
            ids = [j.job_id for j in jobs]
            jobs = jobs[ids.index(after) + 1 :] if after in ids else []
        return jobs[:limit], (jobs[limit - 1].job_id if len(jobs) > limit else None)


def _errors_json(errors: list[LineError]) -> str:
    return json.dumps([e.model_dump() for e in errors[:MAX_REPORTED_ERRORS]])


def _to_item(job: Job) -> dict[str, Any]:
    item: dict[str, Any] = {
        JOBS.partition: {"S": job.tenant},
        JOBS.sort: {"S": job.job_id},
        "model": {"S": job.model},
        "version": {"S": job.version},
        "source": {"S": job.source},
        "etag": {"S": job.etag},
        "status": {"S": job.status},
        "split_done": {"BOOL": job.split_done},
        "errors": {"S": _errors_json(job.errors)},
    }
    for name in (*_NUMBERS, *_COUNTS):
        item[name] = {"N": repr(getattr(job, name))}
    if job.chunks is not None:
        item["chunks"] = {"N": str(job.chunks)}
    return item


def _from_item(item: dict[str, Any]) -> Job:
    values: dict[str, Any] = {
        "job_id": item[JOBS.sort]["S"],
        "tenant": item[JOBS.partition]["S"],
        "split_done": item["split_done"]["BOOL"],
        "errors": json.loads(item["errors"]["S"]),
    }
    for name in ("model", "version", "source", "etag", "status"):
        values[name] = item[name]["S"]
    for name in (*_NUMBERS, *_COUNTS, "chunks"):
        if name in item:
            number = float(item[name]["N"])
            values[name] = number if name in ("created_at", "updated_at") else int(number)
    return Job(**values)
