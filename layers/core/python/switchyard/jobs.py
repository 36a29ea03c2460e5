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
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Literal

from pydantic import BaseModel, Field

from switchyard.jsontext import json_bytes
from switchyard.registry import ModelVersion, Registry
from switchyard.routing import RoutingSource, stable_version
from switchyard.schemas import JobChunk, LineError, ResultRecord
from switchyard.tables import JOBS

JobStatus = Literal["queued", "running", "succeeded", "failed", "cancelled"]
TERMINAL: tuple[JobStatus, ...] = ("succeeded", "failed", "cancelled")
# Ended without an output: the split stops and chunks not yet run are not run.
STOPPED: tuple[JobStatus, ...] = ("cancelled", "failed")
MAX_REPORTED_ERRORS = 100


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
    chunks_done: int = 0  # chunks answered (done, error or expired), each counted once
    lines_done: int = 0  # lines of the answered chunks
    lines_errored: int = 0  # of those, lines without an output (refused or failed)
    assembling_at: float | None = None  # when the output's assembly was claimed
    finished_at: float | None = None
    output_uri: str | None = None
    lines_ok: int | None = None  # lines of the output with an output, once finished
    lines_failed: int | None = None  # and with an error
    failure: str | None = None  # why a failed job failed
    callback_url: str | None = None  # where the summary goes when the job ends
    callback: list[str] | None = None  # what each delivery try got

    @property
    def answered(self) -> bool:
        """Every chunk of a fully split job has its final result."""
        return self.split_done and self.chunks is not None and self.chunks_done >= self.chunks

    @property
    def display_status(self) -> JobStatus:
        """``running`` once a chunk is answered, until the job ends."""
        if self.status == "queued" and self.chunks_done > 0:
            return "running"
        return self.status

    @property
    def bucket_key(self) -> tuple[str, str]:
        bucket, _, key = self.source.removeprefix("s3://").partition("/")
        return bucket, key


class JobRejected(Exception):
    """The file cannot be run at all (unknown model or tenant path, no version)."""


def job_for_file(
    s3: Any,
    registry: Registry,
    models: Iterable[str],
    bucket: str,
    key: str,
    ttl_seconds: int,
    routing: RoutingSource | None,
) -> Job:
    """The job a file at ``<tenant>/<model>/<name>`` makes (not yet recorded): on
    the model's stable version (``job_version``), with the file's size and ETag as
    they are now."""
    parts = key.split("/")
    if len(parts) < 3 or not all(parts):
        raise JobRejected(f"{key}: expected <tenant>/<model>/<file>.jsonl")
    tenant, model = parts[0], parts[1]
    if model not in set(models):
        raise JobRejected(f"{key}: unknown model {model!r}")
    chosen = job_version(registry, model, routing)
    head = s3.head_object(Bucket=bucket, Key=key)
    now = time.time()
    return Job(
        job_id=job_id_for(bucket, key, head["ETag"]),
        tenant=tenant,
        model=model,
        version=chosen.version,
        source=f"s3://{bucket}/{key}",
        etag=head["ETag"],
        size_bytes=int(head["ContentLength"]),
        created_at=now,
        updated_at=now,
        expires_at=int(now + ttl_seconds),
    )


def job_version(registry: Registry, model: str, routing: RoutingSource | None) -> ModelVersion:
    """The version a job runs on: the stable version of the model's routing document
    (the largest share, where a rollback returns the traffic), or, with no document
    or one naming no active version, the newest active one. A canary, or a version
    rolled back to 0 %, answers no job."""
    active = {v.version: v for v in registry.versions(model) if v.status == "active"}
    if not active:
        raise JobRejected(f"model {model!r} has no active version")
    document = routing.document(model) if routing is not None else None
    stable = active.get(stable_version(document)) if document is not None else None
    return stable or max(active.values(), key=lambda v: v.created_at)


JOB_ID_PATTERN = "[0-9a-f]{24}"  # what job_id_for makes


def job_id_for(bucket: str, key: str, etag: str) -> str:
    """The job of these bytes at this key (S3's ETag names the bytes)."""
    return hashlib.sha256(f"{bucket}\n{key}\n{etag}".encode()).hexdigest()[:24]


def chunk_request_id(job_id: str, index: int) -> str:
    return f"{job_id}-{index:06d}"


_NUMBERS = ("size_bytes", "created_at", "updated_at", "expires_at", "split_offset")
_COUNTS = (
    "split_line", "split_chunk", "inputs", "rejected", "chunks_done", "lines_done",
    "lines_errored",
)  # fmt: skip
_OPTIONAL = ("chunks", "assembling_at", "finished_at", "lines_ok", "lines_failed")
_FLOATS = ("created_at", "updated_at", "assembling_at", "finished_at")
# A claim on the output's assembly older than this is taken to have died with its
# worker: the next chunk answered, or the next look, may claim it again.
ASSEMBLY_LEASE_SECONDS = 900


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

    def count_chunk(self, record: ResultRecord) -> dict[str, Any]:
        """The update that counts a chunk's final result on its job, as an item of a
        DynamoDB transaction: written with the result, so the count and the result
        are stored together or not at all (``ResultStore.complete(also=...)``)."""
        chunk = record.job
        assert chunk is not None
        lines = chunk.last_line - chunk.first_line + 1
        errored = lines if record.status != "done" else len(chunk.errors)
        return {
            "Update": {
                "TableName": self._table,
                "Key": {JOBS.partition: {"S": record.tenant}, JOBS.sort: {"S": chunk.job_id}},
                "UpdateExpression": "ADD chunks_done :one, lines_done :lines, "
                "lines_errored :errored",
                "ExpressionAttributeValues": {
                    ":one": {"N": "1"},
                    ":lines": {"N": str(lines)},
                    ":errored": {"N": str(errored)},
                },
            }
        }

    def cancel(self, tenant: str, job_id: str) -> tuple[Job | None, bool]:
        """Cancel a job that has not ended: its split stops, chunks not yet run are
        answered as cancelled, and no output is written. The job as it stands after
        (cancelled, or as it ended; None if there is none), and whether this call
        is the one that ended it."""
        # (once its output is being written, it is too late to cancel)
        ended = self._end(tenant, job_id, "cancelled", "attribute_not_exists(assembling_at)")
        return self.get(tenant, job_id), ended

    def fail(self, job: Job, reason: str) -> bool:
        """The job cannot go on (its file changed or went away while it was read):
        it ends ``failed`` with ``reason``, and its chunks not yet run are answered
        as cancelled. False if it had ended already."""
        return self._end(job.tenant, job.job_id, "failed", failure={"S": reason[:500]})

    def _end(
        self, tenant: str, job_id: str, status: JobStatus, condition: str = "", **fields: Any
    ) -> bool:
        """End a job that has not ended (and meets ``condition``) with ``status`` and
        ``fields`` (attribute values); whether this call ended it."""
        values = {f":{name}": value for name, value in fields.items()}
        try:
            self._ddb.update_item(
                TableName=self._table,
                Key={JOBS.partition: {"S": tenant}, JOBS.sort: {"S": job_id}},
                UpdateExpression="SET #st = :status, finished_at = :now, updated_at = :now"
                + "".join(f", {name} = :{name}" for name in fields),
                ConditionExpression="#st = :queued" + (f" AND {condition}" if condition else ""),
                ExpressionAttributeNames={"#st": "status"},
                ExpressionAttributeValues={
                    ":status": {"S": status},
                    ":queued": {"S": "queued"},
                    ":now": {"N": repr(time.time())},
                    **values,
                },
            )
            return True
        except self._ddb.exceptions.ConditionalCheckFailedException:
            return False

    def claim_assembly(self, job: Job) -> bool:
        """Claim the output's assembly of a job whose chunks are all answered: True
        for exactly one caller (or again once a claim is older than the lease)."""
        now = time.time()
        try:
            self._ddb.update_item(
                TableName=self._table,
                Key={JOBS.partition: {"S": job.tenant}, JOBS.sort: {"S": job.job_id}},
                UpdateExpression="SET assembling_at = :now",
                ConditionExpression="#st = :queued AND split_done = :true AND chunks_done >= "
                "chunks AND (attribute_not_exists(assembling_at) OR assembling_at < :stale)",
                ExpressionAttributeNames={"#st": "status"},
                ExpressionAttributeValues={
                    ":now": {"N": repr(now)},
                    ":stale": {"N": repr(now - ASSEMBLY_LEASE_SECONDS)},
                    ":queued": {"S": "queued"},
                    ":true": {"BOOL": True},
                },
            )
            return True
        except self._ddb.exceptions.ConditionalCheckFailedException:
            return False

    def finish(self, job: Job, output_uri: str, lines_ok: int, lines_failed: int) -> bool:
        """The job succeeded: its output is at ``output_uri``. False if it had
        ended otherwise meanwhile."""
        return self._end(
            job.tenant,
            job.job_id,
            "succeeded",
            output_uri={"S": output_uri},
            lines_ok={"N": str(lines_ok)},
            lines_failed={"N": str(lines_failed)},
        )

    def record_callback(self, job: Job, outcome: str) -> None:
        """What a delivery try of the job's callback got (appended)."""
        self._ddb.update_item(
            TableName=self._table,
            Key={JOBS.partition: {"S": job.tenant}, JOBS.sort: {"S": job.job_id}},
            UpdateExpression="SET callback = list_append(if_not_exists(callback, :none), :try)",
            ExpressionAttributeValues={":none": {"L": []}, ":try": {"L": [{"S": outcome}]}},
        )

    def add_callback(self, tenant: str, job_id: str, url: str) -> Job | None:
        """Give a job that has no callback yet ``url``: the job after, or None if
        it had one (or does not exist). A job that had ended already is not called
        back by whoever ended it: its caller sends the *job ended* message."""
        try:
            self._ddb.update_item(
                TableName=self._table,
                Key={JOBS.partition: {"S": tenant}, JOBS.sort: {"S": job_id}},
                UpdateExpression="SET callback_url = :url",
                ConditionExpression="attribute_exists(job_id) "
                "AND attribute_not_exists(callback_url)",
                ExpressionAttributeValues={":url": {"S": url}},
            )
        except self._ddb.exceptions.ConditionalCheckFailedException:
            return None
        return self.get(tenant, job_id)

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
    for name in _OPTIONAL:
        if getattr(job, name) is not None:
            item[name] = {"N": repr(getattr(job, name))}
    for name in ("output_uri", "callback_url", "failure"):
        if getattr(job, name) is not None:
            item[name] = {"S": getattr(job, name)}
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
    for name in (*_NUMBERS, *_COUNTS, *_OPTIONAL):
        if name in item:
            number = float(item[name]["N"])
            values[name] = number if name in _FLOATS else int(number)
    for name in ("output_uri", "callback_url", "failure"):
        if name in item:
            values[name] = item[name]["S"]
    if "callback" in item:
        values["callback"] = [outcome["S"] for outcome in item["callback"]["L"]]
    return Job(**values)


def job_view(job: Job, base_path: str = "") -> dict[str, Any]:
    """A job as the API (and the CLI) shows it."""
    total = job.split_line if job.split_done else None
    if total:
        progress = job.lines_done / total
    elif job.split_done:
        progress = 1.0  # an empty file
    elif job.split_offset:  # lines expected, from the share of the file read
        progress = job.lines_done / (job.split_line * job.size_bytes / job.split_offset)
    else:
        progress = 0.0
    return {
        "job_id": job.job_id,
        "status": job.display_status,
        "model": job.model,
        "version": job.version,
        "source": job.source,
        "location": f"{base_path}/v1/jobs/{job.job_id}",
        "counts": {
            "total": total,
            "read": job.split_line,
            "done": job.lines_done,
            "failed": job.lines_errored,
            "refused": job.rejected,
        },
        "progress": round(min(progress, 1.0), 4),
        "timings": {
            "created_at": job.created_at,
            "updated_at": job.updated_at,
            "finished_at": job.finished_at,
        },
        "output_uri": job.output_uri,
        "failure": job.failure,
        "callback_url": job.callback_url,
        "callback": job.callback,
        "errors": [e.model_dump() for e in job.errors[:10]],
    }


# -- the output ---------------------------------------------------------------------

OUTPUT_SUFFIX = ".out"  # not .jsonl: an output in the drop bucket starts no job
PART_BYTES = 8 << 20  # multipart upload parts (S3's minimum is 5 MiB)


def output_key(job: Job) -> tuple[str, str]:
    """Where a job's output goes: beside its file, with ``.out`` appended."""
    bucket, key = job.bucket_key
    return bucket, key + OUTPUT_SUFFIX


def chunk_lines(record: ResultRecord | None, chunk: JobChunk) -> Iterator[dict[str, Any]]:
    """One output line per line of the chunk's range, in order: the model's output,
    or the error of a line the splitter refused or whose request failed."""
    refused = {e.line: e for e in chunk.errors}
    outputs = iter(record.outputs or []) if record and record.status == "done" else None
    for line in range(chunk.first_line, chunk.last_line + 1):
        if line in refused:
            error = refused[line]
            yield {"line": line, "error": {"code": error.code, "message": error.message}}
            continue
        output = next(outputs, _MISSING) if outputs is not None else _MISSING
        if output is not _MISSING:
            yield {"line": line, "output": output}
        elif record is None:
            yield {"line": line, "error": {"code": "missing", "message": "no result stored"}}
        elif record.error is not None:
            yield {
                "line": line,
                "error": {"code": record.error.code, "message": record.error.message},
            }
        else:
            yield {
                "line": line,
                "error": {"code": record.status, "message": f"the chunk is {record.status}"},
            }


_MISSING = object()


class MultipartWriter:
    """Bytes written to one S3 object in parts, never held whole: a small object is
    one PutObject; a large one a multipart upload, aborted if the writing fails."""

    def __init__(self, s3: Any, bucket: str, key: str, part_bytes: int = PART_BYTES) -> None:
        self._s3, self._bucket, self._key, self._part_bytes = s3, bucket, key, part_bytes
        self._buffer = bytearray()
        self._upload_id: str | None = None
        self._parts: list[dict[str, Any]] = []

    def write(self, data: bytes) -> None:
        self._buffer += data
        if len(self._buffer) >= self._part_bytes:
            self._upload_part()

    def _upload_part(self) -> None:
        if self._upload_id is None:
            self._upload_id = self._s3.create_multipart_upload(
                Bucket=self._bucket, Key=self._key, ContentType="application/jsonl"
            )["UploadId"]
        number = len(self._parts) + 1
        answer = self._s3.upload_part(
            Bucket=self._bucket,
            Key=self._key,
            UploadId=self._upload_id,
            PartNumber=number,
            Body=bytes(self._buffer),
        )
        self._parts.append({"PartNumber": number, "ETag": answer["ETag"]})
        self._buffer.clear()

    def close(self) -> None:
        if self._upload_id is None:
            self._s3.put_object(
                Bucket=self._bucket,
                Key=self._key,
                Body=bytes(self._buffer),
                ContentType="application/jsonl",
            )
            return
        if self._buffer:
            self._upload_part()
        self._s3.complete_multipart_upload(
            Bucket=self._bucket,
            Key=self._key,
            UploadId=self._upload_id,
            MultipartUpload={"Parts": self._parts},
        )

    def abort(self) -> None:
        if self._upload_id is not None:
            self._s3.abort_multipart_upload(
                Bucket=self._bucket, Key=self._key, UploadId=self._upload_id
            )


def assemble_output(
    job: Job, get_result: Callable[[str, str], ResultRecord | None], s3: Any
) -> tuple[str, int, int]:
    """Write a job's output, chunk by chunk in order, one line per input line; its
    URI and the lines with an output and with an error."""
    bucket, key = output_key(job)
    writer = MultipartWriter(s3, bucket, key)
    ok = failed = 0
    try:
        for index in range(job.chunks or 0):
            record = get_result(job.tenant, chunk_request_id(job.job_id, index))
            if record is None or record.job is None:
                raise RuntimeError(f"chunk {index} of job {job.job_id} has no result")
            for line in chunk_lines(record, record.job):
                if "output" in line:
                    ok += 1
                else:
                    failed += 1
                writer.write(json_bytes(line) + b"\n")
        writer.close()
    except BaseException:
        writer.abort()
        raise
    return f"s3://{bucket}/{key}", ok, failed


def finish_if_answered(
    jobs: JobStore,
    tenant: str,
    job_id: str,
    get_result: Callable[[str, str], ResultRecord | None],
    s3: Any,
    ended: Callable[[Job], None] | None = None,
) -> Job | None:
    """If every chunk of the job is answered and nobody has claimed its assembly,
    assemble its output, mark it succeeded and tell ``ended`` (which asks for its
    callback); the job as it ends, else None."""
    job = jobs.get(tenant, job_id)
    if job is None or not job.answered or not jobs.claim_assembly(job):
        return None
    uri, ok, failed = assemble_output(job, get_result, s3)
    succeeded = jobs.finish(job, uri, ok, failed)
    finished = jobs.get(tenant, job_id)
    if succeeded and finished is not None and ended is not None:
        ended(finished)
    return finished
