"""Job callbacks: when a job ends, its summary is POSTed to the URL it was given,
signed so that the receiver can tell it came from the platform.

Whoever ends a job (the worker or splitter that writes its output, the router or
CLI that cancels it) sends one *job ended* message to the batch-drop queue
(:class:`JobEvents`); the splitter, which consumes that queue, makes each delivery
try (:func:`call_back`). A try that fails (no answer, or not a 2xx) sends the
message again with SQS's own delay, :data:`RETRY_DELAYS_S` in turn, so nothing
sleeps in a Lambda or a worker while a receiver is down, and a crash between tries
loses nothing (the message is deleted only once its try is recorded). What each
try got is kept on the job (``callback``).

The body is the job's view (``switchyard.jobs.job_view``) as compact JSON. The
header ``X-Switchyard-Signature: sha256=<hex>`` is HMAC-SHA256 of those exact bytes
with the tenant's webhook secret (Secrets Manager, ``<webhook prefix><tenant>``,
one per tenant, made at deploy time; ``switchyard jobs secret`` shows it to the
operator who hands it over). ``X-Switchyard-Job`` names the job and
``X-Switchyard-Attempt`` the try, so a receiver can drop a repeat.

In AWS a callback goes to public addresses only (``public_only``): the URL is the
tenant's, and must not reach what sits beside the function (Lambda's runtime API on
loopback, a VPC's private hosts, link-local metadata). The address is checked once
connected, so a name that resolves, or a redirect that leads, to such an address is
refused as well. The local platform's receivers are on loopback, so it allows them.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import ipaddress
import json
import socket
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from switchyard.jobs import TERMINAL, Job, JobStore, job_view

SIGNATURE_HEADER = "X-Switchyard-Signature"
JOB_HEADER = "X-Switchyard-Job"
ATTEMPT_HEADER = "X-Switchyard-Attempt"
# Waits before the second, third and fourth tries (SQS delays: at most 900 s).
RETRY_DELAYS_S: tuple[int, ...] = (10, 30, 90)
TIMEOUT_S = 10.0
# The batch-drop queue's message that asks for a callback try.
JOB_ENDED = "job_ended"


def signature(secret: str, body: bytes) -> str:
    """What the header carries for ``body``: ``sha256=`` and the hex HMAC."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify(secret: str, body: bytes, header: str | None) -> bool:
    """The receiver's check (constant time)."""
    return header is not None and hmac.compare_digest(signature(secret, body), header)


def summary_body(job: Job) -> bytes:
    """The bytes POSTed (and signed) for an ended job: its view, the same on every
    try (without the record of the tries)."""
    view = {k: v for k, v in job_view(job).items() if k != "callback"}
    return json.dumps(view, separators=(",", ":"), sort_keys=True).encode()


class NotPublic(OSError):
    """A callback's connection reached an address that is not a public one."""


def _require_public(sock: socket.socket) -> None:
    address = ipaddress.ip_address(sock.getpeername()[0].split("%", 1)[0])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if not address.is_global:
        sock.close()
        raise NotPublic(f"{address} is not a public address")


class _PublicHTTP(http.client.HTTPConnection):
    def connect(self) -> None:
        super().connect()
        _require_public(self.sock)


class _PublicHTTPS(http.client.HTTPSConnection):
    def connect(self) -> None:
        super().connect()
        _require_public(self.sock)


class _PublicHTTPHandler(urllib.request.HTTPHandler):
    def http_open(self, req: urllib.request.Request) -> Any:
        return self.do_open(_PublicHTTP, req)


class _PublicHTTPSHandler(urllib.request.HTTPSHandler):
    def https_open(self, req: urllib.request.Request) -> Any:
        return self.do_open(_PublicHTTPS, req, context=self._context)  # type: ignore[attr-defined]


_ANY_ADDRESS = urllib.request.build_opener()
_PUBLIC_ONLY = urllib.request.build_opener(_PublicHTTPHandler, _PublicHTTPSHandler)


def deliver_once(
    url: str, body: bytes, secret: str, job_id: str, attempt: int, public_only: bool = False
) -> str:
    """One signed POST of ``body``: what it got (``"200"``, ``"503"``,
    ``"URLError: ..."``); with ``public_only``, a connection that reaches an address
    that is not public is a failed try (``"URLError: <urlopen error 10.0.0.7 is not
    a public address>"``)."""
    headers = {
        "Content-Type": "application/json",
        SIGNATURE_HEADER: signature(secret, body),
        JOB_HEADER: job_id,
        ATTEMPT_HEADER: str(attempt),
        "User-Agent": "switchyard-callback/1",
    }
    try:
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        opener = _PUBLIC_ONLY if public_only else _ANY_ADDRESS
        with opener.open(request, timeout=TIMEOUT_S) as response:
            return str(response.status)
    except urllib.error.HTTPError as exc:
        return str(exc.code)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        # ValueError: a URL urllib cannot post to (http.client.InvalidURL, an IDNA
        # UnicodeError), stored before submissions were checked for it; an attempt
        # that failed, not an error that stops the job's callbacks.
        return f"{type(exc).__name__}: {exc}"[:200]


def taken(outcome: str) -> bool:
    return outcome.isdigit() and 200 <= int(outcome) < 300


@dataclass
class JobEvents:
    """Sends the batch-drop queue's *job ended* messages (``send(body, delay_s)``)."""

    send: Callable[[str, int], None]

    @classmethod
    def on_queue(cls, sqs: Any, queue_url: str) -> JobEvents:
        def send(body: str, delay_s: int) -> None:
            sqs.send_message(QueueUrl=queue_url, MessageBody=body, DelaySeconds=delay_s)

        return cls(send)

    def ended(self, job: Job, attempt: int = 1, delay_s: int = 0) -> None:
        """``job`` has ended: its callback (if it has one) is due."""
        if job.callback_url:
            ref = {"tenant": job.tenant, "job_id": job.job_id, "attempt": attempt}
            self.send(json.dumps({JOB_ENDED: ref}), delay_s)


def cancel(jobs: JobStore, tenant: str, job_id: str, events: JobEvents | None) -> Job | None:
    """Cancel a job (``JobStore.cancel``) and, if this call ended it, ask for its
    callback: the job after, None if there is none."""
    job, ended = jobs.cancel(tenant, job_id)
    if job is not None and ended and events is not None:
        events.ended(job)
    return job


def call_back(
    ref: dict[str, Any],
    jobs: JobStore,
    secret_of: Callable[[str], str],
    events: JobEvents,
    delays: Sequence[int] = RETRY_DELAYS_S,
    deliver: Callable[[str, bytes, str, str, int], str] = deliver_once,
) -> str | None:
    """One try of an ended job's callback (a *job ended* message's ``ref``),
    recorded on the job; the next try is sent, delayed, if this one was not taken
    and tries remain. What the try got (None: nothing to deliver)."""
    job = jobs.get(ref["tenant"], ref["job_id"])
    if job is None or not job.callback_url or job.status not in TERMINAL:
        return None
    attempt = int(ref.get("attempt", 1))
    outcome = deliver(
        job.callback_url, summary_body(job), secret_of(job.tenant), job.job_id, attempt
    )
    jobs.record_callback(job, outcome)
    if not taken(outcome) and attempt <= len(delays):
        events.ended(job, attempt + 1, delays[attempt - 1])
    return outcome


def secrets_reader(secrets: Any, prefix: str) -> Callable[[str], str]:
    """A tenant's webhook secret from Secrets Manager."""

    def secret_of(tenant: str) -> str:
        return str(secrets.get_secret_value(SecretId=f"{prefix}{tenant}")["SecretString"])

    return secret_of
