"""Batch jobs over HTTP: submit, list, show and cancel a tenant's jobs.

A job runs the way a dropped file does (``switchyard_batch.splitter``): submitted
inputs are written to the drop bucket as a JSON Lines file under the tenant's prefix,
whose notification starts the split; a submitted ``input_uri`` names a file already
there. The job is recorded here first, so that it can be read at once. Every route
is scoped to the caller's tenant: another tenant's job is 404.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

from switchyard.bodies import JobSubmission
from switchyard.budgets import Budgets
from switchyard.callbacks import JobEvents, cancel
from switchyard.idempotency import IdempotencyKeys, KeyUse
from switchyard.jobs import TERMINAL, Job, JobRejected, JobStore, job_for_file
from switchyard.missing_objects import object_missing
from switchyard.registry import Registry
from switchyard.routing import RoutingSource
from switchyard_router.logic import Idempotent, RequestRejected, key_use

__all__ = ["JobSubmission", "JobsApi"]

MAX_KEY_BYTES = 1024  # an S3 object key's longest, in UTF-8


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
    budgets: Budgets | None = None  # a tenant over its budget submits no job
    keys: IdempotencyKeys | None = None  # callers' Idempotency-Keys

    def submit(
        self, tenant: str, submission: JobSubmission, keyed: Idempotent | None = None
    ) -> tuple[Job, bool, bool]:
        """The job (recorded), whether it is new (the same file again is the same
        job), and whether it is a replay: a submission with an Idempotency-Key used
        before with the same body is the first one's job again (the key holds its
        file's key; its inputs are not written again)."""
        if submission.model not in self.models:
            raise RequestRejected(404, "unknown_model", f"no model {submission.model!r}")
        now = time.time()
        if keyed is not None and self.keys is not None:
            earlier = key_use(self.keys.earlier, tenant, keyed.key, keyed.fingerprint, now)
            if earlier is not None:
                return self._replay(earlier, submission), submission.inputs is not None, True
        if self.budgets is not None:
            self.budgets.admit_job(tenant)
        if submission.inputs is not None:
            key = f"{tenant}/{submission.model}/api-{uuid.uuid4().hex}.jsonl"
        else:
            key = self._own_key(tenant, submission)
        use = None
        if keyed is not None and self.keys is not None:
            use = KeyUse(tenant, keyed.key, keyed.fingerprint, key, int(now) + self.ttl_seconds)
            first = key_use(self.keys.claim, use, now)
            if first is not None:  # another submission with this key won it meanwhile
                return self._replay(first, submission), submission.inputs is not None, True
        try:
            return (*self._record(tenant, submission, key), False)
        except Exception:
            if self.keys is not None:
                self.keys.release(use)  # no job: the caller's retry is a first
            raise

    def _replay(self, first: KeyUse, submission: JobSubmission) -> Job:
        """The job of the file the key's first submission named (the same file,
        the same job). Its file not there yet: that submission is still writing it."""
        try:
            job = self._job_of(first.request_id, submission)
        except RequestRejected as exc:
            if exc.code != "no_such_file":
                raise
            raise RequestRejected(
                409,
                "idempotency_key_in_use",
                "the first request with this Idempotency-Key is still being admitted; "
                "retry in a moment",
            ) from None
        recorded, _ = self.store.create(job)
        return recorded

    def _record(self, tenant: str, submission: JobSubmission, key: str) -> tuple[Job, bool]:
        if submission.inputs is not None:
            body = "\n".join(json.dumps(item, separators=(",", ":")) for item in submission.inputs)
            self.s3.put_object(Bucket=self.drop_bucket, Key=key, Body=body.encode())
        job = self._job_of(key, submission)
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

    def _job_of(self, key: str, submission: JobSubmission) -> Job:
        try:
            return job_for_file(
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
                where = submission.input_uri or f"s3://{self.drop_bucket}/{key}"
                raise RequestRejected(404, "no_such_file", f"{where} does not exist") from None
            raise

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
