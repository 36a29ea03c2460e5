"""Batch splitter: a JSON Lines file dropped in S3 becomes a job on the batch lane.

Drop a file at ``s3://<batch-drop-bucket>/<tenant>/<model>/<name>.jsonl``, one input
per line (a string for text models, a list of numbers for tensor models). S3's
ObjectCreated notification goes to the batch-drop queue, whose messages invoke the
splitter. The splitter records a job (``switchyard.jobs``: its id names the file's
bytes, so the same bytes dropped again are the same job), checks every line against
the model version's signature, and enqueues the valid lines in chunks of the
model's request size on its batch queue.

Any file size, bounded memory: the file is read in byte ranges of
``split_slice_bytes``, never whole, and at most one chunk of inputs is held. The job
records its progress at chunk boundaries, once per slice. An invocation that nears
Lambda's time limit (or has read ``split_max_slices`` slices) records where it is
and sends itself a continuation on the batch-drop queue; that message, or the
redelivery of one whose invocation crashed, goes on from the recorded boundary.
Chunks after the boundary are enqueued again under the same request ids, which
the workers answer once.

Every line belongs to one chunk (``switchyard.schemas.JobChunk``: its line range and
the lines refused in it). A chunk ends at the model's request size in valid lines or
at twice that in lines; one with no valid line is answered here at once. Each
chunk's result is counted on its job as it is stored; whoever stores the last one
(a worker, or this function when the chunks were answered before the split ended)
writes the job's output beside its file (``switchyard.jobs.assemble_output``).

Whoever ends a job (that writer, or a cancel) asks for its callback on the same
queue; this function makes each delivery try (``switchyard.callbacks``).
"""

from __future__ import annotations

import codecs
import functools
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote_plus

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from switchyard.budgets import Budgets, DynamoDBBudgetStore, OverBudget
from switchyard.callbacks import (
    JOB_ENDED,
    RETRY_DELAYS_S,
    JobEvents,
    call_back,
    deliver_once,
    secrets_reader,
)
from switchyard.jobs import (
    MAX_REPORTED_ERRORS,
    STOPPED,
    Job,
    JobRejected,
    JobStore,
    chunk_request_id,
    finish_if_answered,
    job_for_file,
)
from switchyard.jsontext import parse_json
from switchyard.missing_objects import MISSING_KEY_CODES, error_code, object_missing
from switchyard.payloads import PayloadStore
from switchyard.queues import WorkQueue, encode_message
from switchyard.registry import ModelVersion, Registry
from switchyard.results import ResultStore
from switchyard.routing import RoutingSource, routing_for
from switchyard.schemas import JobChunk, LineError, QueueMessage, ResultRecord
from switchyard.signatures import check_item
from switchyard.wiring import Adapters

# The longest line read; a longer one is answered as an error, never held whole.
MAX_LINE_BYTES = 1 << 20
# Time left at which an invocation stops and hands the rest to a continuation.
STOP_WITH_MS_LEFT = 60_000
# A chunk ends at the model's request size in valid lines, or at this many times
# that in lines of any kind: a long run of refused lines is carried by chunks of
# its own (answered by the splitter), never held whole.
CHUNK_LINES_PER_INPUT = 2
MAX_ERROR_CHARS = 160  # of a refused line's message: a chunk's errors ride its message
CONTINUE = "switchyard_continue"  # the continuation message's one key
log = Logger(service="switchyard-batch-splitter")


def lines_from(
    s3: Any, bucket: str, key: str, etag: str, start: int, size: int, slice_bytes: int
) -> Iterator[tuple[bytes | None, int, int]]:
    """Each line of the object from byte ``start`` (a line's start): the line (None
    if longer than :data:`MAX_LINE_BYTES`), the offset just past it, and how many
    slices were read so far. Read in ranges of ``slice_bytes``, only while the
    object still has ``etag``."""
    cursor = start  # where the line being read starts
    pos = start  # the next byte to fetch
    carry = b""
    overlong = False
    slices = 0
    while pos < size:
        end = min(pos + slice_bytes, size) - 1
        data = s3.get_object(Bucket=bucket, Key=key, Range=f"bytes={pos}-{end}", IfMatch=etag)[
            "Body"
        ].read()
        pos = end + 1
        slices += 1
        pieces = (carry + data).split(b"\n")
        carry = pieces.pop()
        for piece in pieces:
            cursor += len(piece) + 1
            yield (None if overlong or len(piece) > MAX_LINE_BYTES else piece), cursor, slices
            overlong = False
        if len(carry) > MAX_LINE_BYTES:
            overlong = True
            cursor += len(carry)
            carry = b""
    if carry or overlong:
        yield (None if overlong else carry), size, slices


# S3's answers to a ranged read of a file that is no longer the job's bytes: changed
# (412), or deleted (404, or 403 to a role without s3:ListBucket, as the splitter's:
# switchyard.missing_objects).
FILE_GONE = frozenset({"PreconditionFailed", "412"} | MISSING_KEY_CODES)


@dataclass
class Progress:
    """The split at its last chunk boundary (what the job records), and the lines
    read since (the chunk being formed: its valid inputs and refused lines)."""

    offset: int
    line: int
    chunk: int
    inputs: int
    rejected: int
    errors: list[LineError]
    pending: list[Any] = field(default_factory=list)
    pending_rejected: int = 0
    pending_errors: list[LineError] = field(default_factory=list)

    @classmethod
    def of(cls, job: Job) -> Progress:
        return cls(
            job.split_offset, job.split_line, job.split_chunk, job.inputs, job.rejected,
            list(job.errors),
        )  # fmt: skip

    def reject(self, line: int, code: str, message: str) -> None:
        self.pending_rejected += 1
        text = message if len(message) <= MAX_ERROR_CHARS else message[: MAX_ERROR_CHARS - 1] + "…"
        self.pending_errors.append(LineError(line=line, code=code, message=text))

    def boundary(self, offset: int, line: int) -> None:
        """The chunk of the lines up to ``offset`` is sent: the record moves on."""
        self.offset, self.line = offset, line
        self.chunk += 1
        self.inputs += len(self.pending)
        self.rejected += self.pending_rejected
        self.errors += self.pending_errors[: max(0, MAX_REPORTED_ERRORS - len(self.errors))]
        self.pending, self.pending_rejected, self.pending_errors = [], 0, []


@dataclass
class Splitter:
    """Splits jobs: what one invocation needs."""

    s3: Any
    jobs: JobStore
    results: ResultStore
    registry: Registry
    queues: dict[str, WorkQueue]  # model -> batch lane
    payloads: PayloadStore
    claim_check_bytes: int
    result_ttl_seconds: int
    max_age_seconds: int
    slice_bytes: int
    continue_to: Any  # sends a continuation: (tenant, job_id) -> None
    max_slices: int = 0  # 0: as many as the time allows
    events: JobEvents | None = None  # asks for an ended job's callback
    secret_of: Any = None  # tenant -> its webhook secret (None: no callbacks)
    callback_delays: tuple[int, ...] = RETRY_DELAYS_S  # between a callback's tries
    callbacks_to_private_addresses: bool = False  # True on the local platform only
    routing: RoutingSource | None = None  # a job runs on its model's stable version
    budgets: Budgets | None = None  # a tenant over its budget gets no new job

    def job_for_drop(self, bucket: str, key: str) -> tuple[Job, bool]:
        """The job of a dropped file (made if new) and whether it is new; a file
        deleted before its notification was read makes none (JobRejected)."""
        try:
            job = job_for_file(
                self.s3,
                self.registry,
                self.queues,
                bucket,
                key,
                self.result_ttl_seconds,
                self.routing,
            )
        except self.s3.exceptions.ClientError as exc:
            if not object_missing(exc):
                raise  # a passing fault: the notification is delivered again
            raise JobRejected(f"{key}: deleted before it was read") from None
        return self.jobs.create(job)

    def split(self, job: Job, remaining_ms: Any) -> Job:
        """Go on with ``job``'s split from its recorded boundary until the file ends
        or the invocation's budget does (then a continuation is sent)."""
        if job.status in STOPPED:
            return job
        if job.split_done:
            # Split already: its output may be due (every chunk answered, and no live
            # claim on the assembly).
            finished = finish_if_answered(
                self.jobs, job.tenant, job.job_id, self.results.get, self.s3, self._ended
            )
            return finished or job
        if self.budgets is not None and job.split_line == 0:
            try:  # a job not begun, of a tenant over its budget, does not begin
                self.budgets.admit_job(job.tenant)
            except OverBudget as exc:
                return self._fail(job, f"{exc.code}: {exc}")
        version = self.registry.get(job.model, job.version)
        if version is None:
            return self._fail(job, f"{job.model} {job.version} is no longer registered")
        try:
            return self._split(job, version, remaining_ms)
        except self.s3.exceptions.ClientError as exc:
            if error_code(exc) not in FILE_GONE:
                raise  # a passing fault: the message is delivered again
            return self._fail(job, f"{job.source} changed or was deleted while it was read")

    def _split(self, job: Job, version: ModelVersion, remaining_ms: Any) -> Job:
        bucket, key = job.bucket_key
        progress = Progress.of(job)
        chunk_size = version.max_inputs_per_request
        chunk_lines = chunk_size * CHUNK_LINES_PER_INPUT
        line = job.split_line
        last_checkpoint = job.split_offset
        for raw, end, slices in lines_from(
            self.s3, bucket, key, job.etag, job.split_offset, job.size_bytes, self.slice_bytes
        ):
            line += 1
            self._read_line(raw, line, version, progress)
            if len(progress.pending) < chunk_size and line - progress.line < chunk_lines:
                continue
            self._send(job, progress, line)
            progress.boundary(end, line)
            if end - last_checkpoint >= self.slice_bytes:
                self._record(job, progress)
                last_checkpoint = end
            out_of_slices = self.max_slices and slices >= self.max_slices
            if out_of_slices or remaining_ms() < STOP_WITH_MS_LEFT:
                self._record(job, progress)
                self.continue_to(job.tenant, job.job_id)
                log.info("split continues", extra={"job_id": job.job_id, "line": line})
                return self.jobs.get(job.tenant, job.job_id) or job
        if line > progress.line:
            self._send(job, progress, line)
            progress.boundary(job.size_bytes, line)
        self._record(job, progress, done=True)
        # Its chunks may all be answered already (refused lines only, or quick
        # workers): then the output is assembled here.
        finished = finish_if_answered(
            self.jobs, job.tenant, job.job_id, self.results.get, self.s3, self._ended
        )
        return finished or self.jobs.get(job.tenant, job.job_id) or job

    def _fail(self, job: Job, reason: str) -> Job:
        """End a job that cannot go on: ``failed``, its callback asked for."""
        log.warning("job failed", extra={"job_id": job.job_id, "reason": reason})
        ended = self.jobs.fail(job, reason)
        failed = self.jobs.get(job.tenant, job.job_id) or job
        if ended:
            self._ended(failed)
        return failed

    def _ended(self, job: Job) -> None:
        if self.events is not None:
            self.events.ended(job)

    def call_back(self, ref: dict[str, Any]) -> None:
        """One try of an ended job's callback (a *job ended* message)."""
        if self.events is None or self.secret_of is None:
            log.warning("a callback is asked for, but no webhook secrets are set", extra=ref)
            return
        public_only = not self.callbacks_to_private_addresses
        outcome = call_back(
            ref,
            self.jobs,
            self.secret_of,
            self.events,
            self.callback_delays,
            deliver=functools.partial(deliver_once, public_only=public_only),
        )
        log.info("job callback", extra={**ref, "outcome": outcome})

    def _read_line(
        self, raw: bytes | None, line: int, version: ModelVersion, progress: Progress
    ) -> None:
        if raw is None:
            progress.reject(line, "line_too_long", f"longer than {MAX_LINE_BYTES} bytes")
            return
        if line == 1 and raw.startswith(codecs.BOM_UTF8):
            raw = raw[len(codecs.BOM_UTF8) :]  # a file saved with a byte order mark
        if not raw.strip():
            progress.reject(line, "invalid_input", "an empty line")
            return
        try:
            item = parse_json(raw)
        except ValueError as exc:
            progress.reject(line, "invalid_json", f"not valid JSON: {exc}")
            return
        where = f"line {line}"
        problems = check_item(item, version.signature, where)
        if problems:
            # "line 3 must be a string", "line 3: max_tokens is 900; …", "line 3: [5] …"
            first = problems[0]
            inside = first.field.removeprefix(where).removeprefix(".")
            named = f"{where}: {inside}" if inside else where
            progress.reject(line, "invalid_input", f"{named} {first.message}")
            return
        progress.pending.append(item)

    def _send(self, job: Job, progress: Progress, last_line: int) -> None:
        """The chunk of lines after the last boundary up to ``last_line``: its valid
        inputs on the batch lane, or, if it has none, its answer at once."""
        now = time.time()
        chunk = JobChunk(
            job_id=job.job_id,
            index=progress.chunk,
            first_line=progress.line + 1,
            last_line=last_line,
            errors=progress.pending_errors,
        )
        request_id = chunk_request_id(job.job_id, progress.chunk)
        if not progress.pending:
            record = ResultRecord(
                request_id=request_id,
                tenant=job.tenant,
                model=job.model,
                version=job.version,
                status="done",
                lane="batch",
                outputs=[],
                created_at=now,
                completed_at=now,
                expires_at=int(now + self.result_ttl_seconds),
                job=chunk,
            )
            self.results.complete(record, also=self.jobs.count_chunk(record))
            return
        message = QueueMessage(
            request_id=request_id,
            tenant=job.tenant,
            model=job.model,
            version=job.version,
            lane="batch",
            inputs=progress.pending,
            n_inputs=len(progress.pending),
            enqueued_at=now,
            expires_at=now + self.max_age_seconds,  # the batch lane's maximum age
            job=chunk,
        )
        self.queues[job.model].send(
            encode_message(message, self.payloads, self.claim_check_bytes), job.tenant
        )

    def _record(self, job: Job, progress: Progress, done: bool = False) -> None:
        self.jobs.record_split(
            job,
            offset=progress.offset,
            line=progress.line,
            chunk=progress.chunk,
            inputs=progress.inputs,
            rejected=progress.rejected,
            errors=progress.errors,
            done=done,
        )


def splitter_of(adapters: Adapters) -> Splitter:
    settings = adapters.settings
    sqs = adapters.client("sqs")

    # One queue takes both: continuations of long splits, and ended jobs' callbacks.
    events = JobEvents.on_queue(sqs, settings.drop_queue_url)

    def continue_to(tenant: str, job_id: str) -> None:
        events.send(json.dumps({CONTINUE: {"tenant": tenant, "job_id": job_id}}), 0)

    return Splitter(
        s3=adapters.client("s3"),
        jobs=JobStore(adapters.client("dynamodb"), settings.jobs_table),
        results=adapters.results,
        registry=adapters.registry,
        queues={model: lanes.batch for model, lanes in adapters.queues.items()},
        payloads=adapters.payloads,
        claim_check_bytes=settings.claim_check_bytes,
        result_ttl_seconds=settings.result_ttl_seconds,
        max_age_seconds=settings.max_age_seconds["batch"],
        slice_bytes=settings.split_slice_bytes,
        max_slices=settings.split_max_slices,
        continue_to=continue_to,
        events=events,
        secret_of=secrets_reader(adapters.client("secretsmanager"), settings.webhook_secret_prefix)
        if settings.webhook_secret_prefix
        else None,
        callbacks_to_private_addresses=settings.callbacks_to_private_addresses,
        routing=routing_for(settings),
        budgets=Budgets(
            DynamoDBBudgetStore(adapters.client("dynamodb"), settings.results_table),
            settings.tenant_budgets,
        )
        if settings.tenant_budgets
        else None,
    )


def handle_message(body: dict[str, Any], splitter: Splitter, remaining_ms: Any) -> list[Job]:
    """One message of the batch-drop queue: an S3 notification (every file it names),
    a continuation, or an ended job's callback (one delivery try). A rejected file
    is logged and skipped."""
    if JOB_ENDED in body:
        splitter.call_back(body[JOB_ENDED])
        return []
    if CONTINUE in body:
        ref = body[CONTINUE]
        job = splitter.jobs.get(ref["tenant"], ref["job_id"])
        if job is None:
            log.warning("continuation of an unknown job", extra=ref)
            return []
        return [splitter.split(job, remaining_ms)]
    jobs = []
    for record in body.get("Records", []):
        bucket = record["s3"]["bucket"]["name"]
        key = unquote_plus(record["s3"]["object"]["key"])
        try:
            job, new = splitter.job_for_drop(bucket, key)
        except JobRejected as exc:
            log.warning("job rejected", extra={"key": key, "error": str(exc)})
            continue
        if not new and job.split_done:
            log.info("same file dropped again: no new job", extra={"job_id": job.job_id})
            splitter.split(job, remaining_ms)  # only finishes its output, if that is due
            continue
        jobs.append(splitter.split(job, remaining_ms))
    return jobs


def handle_sqs_event(event: dict[str, Any], context: Any, adapters: Adapters) -> dict[str, Any]:
    """The function's event: a batch of SQS messages, each an S3 notification (S3's
    test event, sent when the notification is set up, names no object) or a
    continuation. A message whose files cannot be split for a passing reason is
    reported back as failed, so SQS delivers it again (and, after the queue's
    maxReceiveCount, to its DLQ); the rest of the batch is done."""
    processor = BatchProcessor(event_type=EventType.SQS)
    splitter = splitter_of(adapters)

    def remaining_ms() -> int:
        return context.get_remaining_time_in_millis() if context else 900_000

    def split_message(record: SQSRecord) -> None:
        for job in handle_message(json.loads(record.body), splitter, remaining_ms):
            log.info("job split" if job.split_done else "job splitting", extra=summary(job))

    return process_partial_response(event, split_message, processor, context)


def summary(job: Job) -> dict[str, Any]:
    """A job's id and counts, as logged."""
    return {
        "job_id": job.job_id,
        "model": job.model,
        "inputs": job.inputs,
        "rejected": job.rejected,
        "chunks": job.chunks,
        "line": job.split_line,
    }
