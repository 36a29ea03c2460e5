"""Triage: which of a batch's requests run, and which are answered without running.

Undecodable messages go back (retries, then the DLQ: there is no request to answer);
requests that already have their final result (cancelled by the caller, answered by
a fallback, or stored just before a crash) are deleted; expired work, a cancelled
job's chunks and invalid inputs get their final result at once. Only the rest
reaches the model.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from switchyard.jobs import STOPPED, JobStore
from switchyard.schemas import ErrorInfo, QueueMessage, ResultRecord
from switchyard_worker.batching import Pending
from switchyard_worker.finisher import Answered, Finisher
from switchyard_worker.in_hand import MessagesInHand
from switchyard_worker.stages import log

_JOB_STATUS_SECONDS = 2.0  # how stale a job's cancelled-or-not may be


class Triage:
    """Splits a batch into the answered-without-running and the runnable."""

    def __init__(
        self,
        *,
        worker_id: str,
        in_hand: MessagesInHand,
        finisher: Finisher,
        read_statuses: Callable[[list[Pending]], None],
        jobs: JobStore | None = None,
    ) -> None:
        self._worker_id = worker_id
        self._in_hand = in_hand
        self._finisher = finisher
        self._read_statuses = read_statuses
        self._jobs = jobs
        self._job_status: dict[tuple[str, str], tuple[str, float]] = {}

    def __call__(self, batch: list[Pending]) -> tuple[Answered, list[Pending]]:
        """What to answer without running (expired, cancelled, invalid) and what to
        run; undecodable messages are released, those answered already deleted."""
        undecodable = [p for p in batch if p.message is None]
        if undecodable:
            self._in_hand.release([p.received for p in undecodable], 0)
        now = time.time()
        record = self._finisher.record
        answered: list[tuple[Pending, ResultRecord]] = []
        runnable: list[Pending] = []
        for p in self._skip_answered([p for p in batch if p.message is not None]):
            assert p.message is not None
            if p.error is None and now > p.message.expires_at:
                error = ErrorInfo(code="expired", message="the request expired before it ran")
                answered.append((p, record(p, "expired", error=error)))
            elif p.message.job is not None and self._job_cancelled(p.message):
                error = ErrorInfo(code="cancelled", message="the job was cancelled")
                answered.append((p, record(p, "cancelled", error=error)))
            elif p.error is not None:
                answered.append((p, record(p, "error", error=p.error)))
            else:
                runnable.append(p)
        return answered, runnable

    def _skip_answered(self, batch: list[Pending]) -> list[Pending]:
        """Requests that already have their final result are deleted without running;
        the rest are returned. Their statuses are read at most once per batch: on the
        intake thread while the batch before ran, when the batch was full by then,
        else here. A request answered after that read runs, and its result is not
        stored: every write is conditional on the request being unanswered."""
        # (each holds a message: ``unread`` inlined, a call a message saved)
        to_read = [p for p in batch if p.status is None]
        if to_read:
            self._read_statuses(to_read)
        answered = []
        for p in batch:
            assert p.message is not None
            status = p.status
            if status != "queued":
                answered.append(p)
                log.info(
                    "cancelled; deleted without running"
                    if status == "cancelled"
                    else "duplicate suppressed",
                    extra={
                        "request_id": p.message.request_id,
                        "status": status,
                        "worker": self._worker_id,
                        "receive_count": p.received.receive_count,
                    },
                )
        if answered:
            self._in_hand.delete([p.received for p in answered])
        return [p for p in batch if p not in answered]

    def _job_cancelled(self, message: QueueMessage) -> bool:
        """Whether the chunk's job was cancelled or failed (its status read at most every
        :data:`_JOB_STATUS_SECONDS` per job)."""
        if self._jobs is None or message.job is None:
            return False
        key = (message.tenant, message.job.job_id)
        now = time.monotonic()
        cached = self._job_status.get(key)
        if cached is None or now - cached[1] > _JOB_STATUS_SECONDS:
            job = self._jobs.get(*key)
            cached = (job.status if job else "queued", now)
            self._job_status[key] = cached
        return cached[0] in STOPPED
