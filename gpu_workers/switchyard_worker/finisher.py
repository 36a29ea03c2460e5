"""The finisher: a batch's results stored, logged and cached, then its messages
deleted, on a thread of its own while the model runs the next batch.

Delivery is at-least-once, so the order is what keeps it exact: every result is
written conditionally (only over ``queued``, or where there is no record) before its
message is deleted; a crash between the two causes a redelivery that writes nothing.
Batches are finished in the order they ran (``InOrder``), at most two waiting, so a
slow store slows the worker instead of growing its memory.

It also builds each request's result record, and settles a failed batch: each
attempt counted and its message released for retry, or, on the message's last
allowed receive, the request's final error written first.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

from switchyard.admission import QueuedLease, QueuedWork, queued_lease
from switchyard.jobs import Job, JobStore, finish_if_answered
from switchyard.result_cache import CacheEntry, ResultCache
from switchyard.results import AsStored, ResultStore, Stored
from switchyard.schemas import RETRIES_EXHAUSTED, ErrorInfo, ResultRecord, assembled_record
from switchyard.telemetry import PredictionLog, prediction_records
from switchyard_worker.batching import Pending
from switchyard_worker.costing import CostKeeper
from switchyard_worker.in_hand import MessagesInHand
from switchyard_worker.stages import InOrder, log, log_batch
from switchyard_worker.versions import ServedVersions

_WRITERS = 8  # jobs' chunks stored at once

Answered = list[tuple[Pending, ResultRecord]]


class BatchRun(NamedTuple):
    """A batch's run in the model, from which each of its requests' timings are
    worked out as its record is built."""

    started: float  # epoch seconds
    compute_ms: float  # in the model
    size: int  # inputs


class Finisher:
    """Stores results and deletes their messages, batch after batch, in order."""

    def __init__(
        self,
        *,
        worker_id: str,
        results: ResultStore,
        in_hand: MessagesInHand,
        versions: ServedVersions,
        cache: ResultCache | None = None,
        prediction_log: PredictionLog | None = None,
        result_ttl_seconds: int = 86_400,
        max_receive_count: int = 5,
        jobs: JobStore | None = None,
        job_output_s3: Any = None,
        job_ended: Callable[[Job], None] | None = None,
        served_by: str | None = None,
        queued: QueuedWork | None = None,
        costs: CostKeeper | None = None,
    ) -> None:
        self._worker_id = worker_id
        self._queued = queued  # where the stored requests' places are given back
        self._served_by = served_by  # the worker service, named in each answer
        self._results = results
        self._in_hand = in_hand
        self._versions = versions
        self._cache = cache
        self._prediction_log = prediction_log
        self._result_ttl = result_ttl_seconds
        self._max_receives = max_receive_count
        # Batch jobs: each chunk's result is counted on its job as it is stored; the
        # worker that stores a job's last chunk assembles its output (on its own
        # thread, waited for before the worker exits).
        self._jobs = jobs
        self._job_output_s3 = job_output_s3
        self._job_ended = job_ended  # asks for an ended job's callback
        self._job_outputs = ThreadPoolExecutor(max_workers=1, thread_name_prefix="job-output")
        # Jobs' chunks, stored one by one, each with its count on its job (a
        # transaction): a batch's are shared among the writers, while the finisher's
        # own thread writes the batch's other results (``_written``).
        self._writers = ThreadPoolExecutor(max_workers=_WRITERS, thread_name_prefix="result-writer")
        self._in_order = InOrder(self._finish, name="result-finisher")
        self._costs = costs  # prices each answer, adds up what the stored ones cost

    def worked(self, seconds: float) -> None:
        """The model ran a batch of this model's for ``seconds`` (the worker's busy
        time, against which its requests' worker shares are billed)."""
        if self._costs is not None:
            self._costs.ran(seconds)

    # -- hand-off from the model's thread ----------------------------------------

    def submit(self, answered: Answered) -> None:
        """Finish these results after those submitted before."""
        self._in_order.submit(answered)

    def flush(self) -> None:
        """Return once every submitted batch is stored and its messages deleted."""
        self._in_order.flush()

    def close(self) -> None:
        """Finish what was submitted, then stop: no thread of its own is left."""
        self._in_order.close()
        self._writers.shutdown(wait=True)
        self._job_outputs.shutdown(wait=True)

    # -- results -----------------------------------------------------------------

    def record(
        self,
        p: Pending,
        status: str,
        *,
        outputs: list[Any] | None = None,
        error: ErrorInfo | None = None,
        timing: dict[str, float] | None = None,
    ) -> ResultRecord:
        """The request's final result."""
        return self.records(
            [p],
            status,
            outputs=None if outputs is None else [outputs],
            error=error,
            timings=None if timing is None else [timing],
        )[0]

    def records(
        self,
        batch: list[Pending],
        status: str,
        *,
        outputs: list[list[Any]] | None = None,
        error: ErrorInfo | None = None,
        timings: list[dict[str, float]] | None = None,
        ran: BatchRun | None = None,
    ) -> list[ResultRecord]:
        """The final results of ``batch``'s requests, each with its own outputs and
        timings where given (``ran``: worked out here from the batch's run, each
        request's timings one dict, built once). Each record is assembled from its
        message, which was validated as it was read, and values of the worker's own
        making, and is not validated again (``assembled_record``)."""
        completed = time.time()
        final = status if status in ("done", "expired", "cancelled") else "error"
        # What every record of the batch holds alike, in the fields' declared order;
        # each record is a copy with its own fields set (a copy and ten stores cost
        # half of what a literal of all 21 fields did).
        common = {
            "request_id": None,
            "tenant": None,
            "model": None,
            "version": None,
            "status": final,
            "lane": None,
            "outputs": None,
            "error": error,
            "timings": None,
            "created_at": None,
            "completed_at": completed,
            "expires_at": int(completed + self._result_ttl),
            "work_expires_at": None,
            "worker": self._worker_id,
            "served_by": self._served_by,
            "shadow_of": None,
            "failures": 0,
            "last_failure": None,
            "job": None,
            "cost": None,
            "queued_counted": False,
        }
        if ran is not None:
            started, compute_ms, size = ran
            per_input_ms = compute_ms / size if size else 0.0
            ran_timing = {
                "received_at": None,
                "batch_started_at": started,
                "batch_wait_ms": None,
                "compute_ms": compute_ms,
                "batch_size": float(size),
                # Its share of the batch's time in the model, by its inputs: what the
                # worker's time is billed to it by (switchyard.costs).
                "worker_ms": None,
                "queue_wait_ms": None,
                "completed_at": completed,
            }
        records = []
        for i, p in enumerate(batch):
            m = p.message
            assert m is not None
            received = p.received_at
            if ran is not None:
                timing = ran_timing.copy()
                timing["received_at"] = received
                timing["batch_wait_ms"] = (started - received) * 1000
                timing["worker_ms"] = per_input_ms * p.size
                timing["queue_wait_ms"] = (received - m.enqueued_at) * 1000
            elif timings is not None:
                timing = {**timings[i], "completed_at": completed}
            else:
                timing = {"received_at": received, "completed_at": completed}
            fields = common.copy()
            fields["request_id"] = m.request_id
            fields["tenant"] = m.tenant
            fields["model"] = m.model
            fields["version"] = m.version
            fields["lane"] = m.lane
            if outputs is not None:
                fields["outputs"] = outputs[i]
            fields["timings"] = timing
            fields["created_at"] = m.enqueued_at
            fields["work_expires_at"] = m.expires_at
            fields["shadow_of"] = m.shadow_of
            fields["job"] = m.job
            records.append(assembled_record(fields))
        return records

    def failed(self, runnable: list[Pending], reason: str) -> None:
        """A failed batch: each request's attempt is counted and its message released
        for retry; on its last allowed receive the request's final error is written
        first (its message goes to the DLQ on the next receive)."""
        last = [p for p in runnable if p.received.receive_count >= self._max_receives]
        for p in runnable:
            m = p.message
            assert m is not None
            if p in last:
                error = ErrorInfo(
                    code=RETRIES_EXHAUSTED,
                    message=f"failed after {p.received.receive_count} attempts: {reason}",
                )
                stored = self.complete(self.record(p, "error", error=error))
                if stored:
                    self._give_back_queued([(p, stored)])
                log.warning(
                    "retries exhausted; the message goes to the DLQ",
                    extra={"request_id": m.request_id, "attempts": p.received.receive_count},
                )
            else:
                queued = ResultRecord.queued_for(m, int(time.time() + self._result_ttl))
                self._results.mark_failed(queued, reason)
        retry = [p for p in runnable if p not in last]
        if retry:
            self._in_hand.release([p.received for p in retry], _backoff(retry))
        if last:
            self._in_hand.release([p.received for p in last], 0)

    def complete(self, record: ResultRecord) -> Stored:
        """Store a final result; a job's chunk is counted on its job in the same
        write, and if it was the job's last, the job's output is assembled. The
        record is completed as its write leaves (``completed_at``, not when it was
        built): the router times its looks for results by it. How it was stored
        (``Stored``): whether it replaced a counted queued record too."""
        _stamp([record])
        if record.job is None or self._jobs is None:
            return self._results.complete(record)
        count = self._jobs.count_chunk(record)
        fresh = self._results.complete(record, also=count)
        if fresh:
            self._job_outputs.submit(self._finish_job, record.tenant, record.job.job_id)
        return fresh

    # -- the finisher's thread -----------------------------------------------------

    def _finish(self, answered: Answered) -> None:
        """Store, log, then delete. If the store fails, the messages are released at
        once for another try rather than held."""
        try:
            self._store_and_delete(answered)
        except Exception:  # noqa: BLE001 - the messages go back; the worker goes on
            log.exception("storing results failed; messages released", extra={"n": len(answered)})
            try:
                self._in_hand.release([p.received for p, _ in answered], 0)
            except Exception:  # noqa: BLE001 - they come back after their visibility timeout
                log.exception("release failed")
                self._in_hand.forget([p.received for p, _ in answered])

    def _store_and_delete(self, answered: Answered) -> None:
        if not answered:
            return
        # Completed now, as the batch's writes leave (the router times its looks for
        # results by it), before their docs are written: by the pricing, which the
        # store's writes then use, or by the store.
        _stamp([r for _, r in answered])
        outputs = None  # the results' outputs and docs as their items hold them
        if self._costs is not None:
            priced = [(p.message, r) for p, r in answered if p.message is not None]
            as_stored = self._costs.price(priced)
            if len(priced) == len(answered):
                outputs = as_stored
        # Sync requests' results (no record yet, unless handed off at the deadline)
        # are inserted, and the other requests' results (over their queued records)
        # updated, the batch's writes sent together from this thread
        # (``complete_batch``); a job's chunk is a conditional put with its count on
        # the job, made by the writers meanwhile, up to _WRITERS at once, each storing
        # its share in turn.
        batch, new, chunks = [], [], []
        for i, (p, r) in enumerate(answered):
            m = p.message
            if r.job is not None and self._jobs is not None:
                chunks.append(i)
                continue
            batch.append(i)
            # A sync request's result, with no record yet unless it was handed off at
            # its deadline. A fallback's copy too: where it finds a record (its
            # request handed off, or an attempt failed), its INSERT fails and the
            # conditional put stores it, which says whether the record was counted in
            # its tenant's queued work (an UPDATE over the record could not: a PartiQL
            # statement returns no old item).
            new.append(m is not None and m.respond_by is not None and r.job is None)
        writers = min(_WRITERS, len(chunks))
        shares = [chunks[k::writers] for k in range(writers)]
        stored = [Stored.REFUSED] * len(answered)
        for indexes, done in self._written(answered, batch, new, outputs, shares):
            for i, fresh in zip(indexes, done, strict=True):
                stored[i] = fresh
        # One line per batch, not per request: at a light model's rate a log line per
        # request costs more CPU than the model.
        log_batch("results stored", {"worker": self._worker_id, **_outcomes(answered, stored)})
        fresh = [(p, r) for (p, r), s in zip(answered, stored, strict=True) if s]
        self._give_back_queued((p, s) for (p, _), s in zip(answered, stored, strict=True) if s)
        self._log_predictions([r for _, r in fresh])
        self._fill_cache(fresh)
        self._in_hand.delete([p.received for p, _ in answered])
        if self._costs is not None:
            self._costs.spent([r for _, r in fresh])

    def _written(
        self,
        answered: Answered,
        batch: list[int],
        new: list[bool],
        outputs: AsStored | None,
        shares: list[list[int]],
    ) -> list[tuple[list[int], list[Stored]]]:
        """The results at ``batch``'s places written on this thread (``new``: each
        one's way, ``outputs``: every answer's as stored, or None), while the writers
        store each of ``shares`` (jobs' chunks) one by one; each written place's
        answer. If a write fails, the shares not started are not started."""
        others = [self._writers.submit(self._each_completed, answered, s) for s in shares]
        try:
            done = []
            if batch:
                records = [answered[i][1] for i in batch]
                if outputs is not None and len(batch) < len(answered):
                    outputs = outputs.part(batch)
                done.append((batch, self._results.complete_batch(records, new, outputs)))
            return done + [(s, f.result()) for s, f in zip(shares, others, strict=True)]
        except BaseException:
            for f in others:
                f.cancel()
            raise

    def _each_completed(self, answered: Answered, share: list[int]) -> list[Stored]:
        return [self.complete(answered[i][1]) for i in share]

    def _fill_cache(self, stored: Answered) -> None:
        """Cache the outputs of the requests that asked for it (the router set their
        ``cache_key``), for their version's cache time: one write per batch. A cache
        outage loses entries, never results."""
        if self._cache is None:
            return
        now = time.time()
        entries = []
        for p, record in stored:
            m = p.message
            if m is None or m.cache_key is None or record.status != "done" or not record.outputs:
                continue
            version = self._versions.get(m.version)
            if version is None or version.result_cache_seconds <= 0:
                continue
            expires = int(now + version.result_cache_seconds)
            entries.append(
                CacheEntry(m.tenant, m.model, m.version, m.cache_key, record.outputs, expires)
            )
        if not entries:
            return
        try:
            self._cache.put(entries)
        except Exception:  # noqa: BLE001 - the next repeat is run by the model instead
            log.exception("result cache write failed", extra={"entries": len(entries)})

    def _give_back_queued(self, ended: Iterable[tuple[Pending, Stored]]) -> None:
        """The places of requests whose final result this worker stored, given back
        to their tenants' queued work: one write per tenant, model and lease end
        (``ended`` is not read where there is no queued work)."""
        if self._queued is not None:
            self._queued.give_back(_lease(p, stored) for p, stored in ended)

    def _log_predictions(self, records: list[ResultRecord]) -> None:
        if self._prediction_log is None or not records:
            return
        try:
            self._prediction_log.write(prediction_records(records))
        except Exception:  # noqa: BLE001 - a log outage must not hold up results
            log.exception("prediction log write failed", extra={"records": len(records)})

    def _finish_job(self, tenant: str, job_id: str) -> None:
        assert self._jobs is not None
        try:
            job = finish_if_answered(
                self._jobs, tenant, job_id, self._results.get, self._job_output_s3, self._job_ended
            )
        except Exception:  # noqa: BLE001 - the claim's lease lets another try later
            log.exception("job output failed", extra={"job_id": job_id})
            return
        if job is not None:
            log.info(
                "job finished",
                extra={"job_id": job_id, "output_uri": job.output_uri, "lines_ok": job.lines_ok,
                       "lines_failed": job.lines_failed},
            )  # fmt: skip


def _outcomes(answered: Answered, stored: list[Stored]) -> dict[str, Any]:
    """What a batch's ``results stored`` line says of its requests, as lists rather
    than an object per request: the ids whose results were ``stored`` and those
    ``suppressed`` (ended already: a redelivery's copy), each by the status the
    worker gave them, and the ``receive_counts`` of those received more than once
    (``harness.worker_log`` reads them back as one event per request)."""
    written: dict[str, list[str]] = {}
    refused: dict[str, list[str]] = {}
    retries: dict[str, int] = {}
    for (p, record), fresh in zip(answered, stored, strict=True):
        (written if fresh else refused).setdefault(record.status, []).append(record.request_id)
        if p.received.receive_count > 1:
            retries[record.request_id] = p.received.receive_count
    return {"stored": written, "suppressed": refused, "receive_counts": retries}


def _backoff(runnable: list[Pending]) -> int:
    tries = max(p.received.receive_count for p in runnable)
    return min(2 ** (tries - 1), 30)


def _lease(p: Pending, stored: Stored) -> QueuedLease | None:
    """The place ``p``'s request held in its tenant's queued work, given back by
    the worker that stored its result (``stored``): counted at its enqueue (its
    message says so) or at its hand-off (the queued record its result replaced
    said so). One place either way, never two. None: none."""
    m = p.message
    if m is None or not (m.queued_counted or stored.over_counted):
        return None
    return queued_lease(m.tenant, m.model, m.expires_at)


def _stamp(records: list[ResultRecord]) -> None:
    """Completed now, as their writes leave. The field is set in the record's own
    dict, as pydantic's assignment does for a model that validates none (0.09 µs a
    record against its 0.29): the finisher's records are assembled with every field
    set (``assembled_record``), so there is no field to mark as set."""
    now = time.time()
    for record in records:
        record.__dict__["completed_at"] = record.timings["completed_at"] = now
