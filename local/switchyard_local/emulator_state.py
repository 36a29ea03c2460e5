"""The emulator's state, kept from one run of the local platform to the next.

moto holds every resource in the server's memory. The emulator writes the state of
the services that hold the platform's data to one file when it stops (SIGTERM or
Ctrl-C, after the supervisor has drained the workers) and reads it back when it
starts: the registry, results, jobs and payloads (DynamoDB and S3), the routing
documents and their history (AppConfig's hosted versions), the messages still queued
and in the dead-letter queues (SQS), the tenants' API keys and usage plans (API
Gateway), the webhook secrets and the prediction log's stream.

IAM is not kept: its users and policies are made again at each start from the CDK
app's synthesized roles, so a changed role is never shadowed by an old one.

The file is written beside a temporary name and renamed over the old one, so a stop
that is cut short leaves the previous state, never half of one. A file that cannot
be read (another moto, a damaged file) is set aside as ``<name>.unreadable`` and the
emulator starts empty, saying so.
"""

from __future__ import annotations

import copyreg
import io
import os
import pickle
import threading
import weakref
from pathlib import Path
from typing import Any

# The services whose state is the platform's data (IAM is made at each start).
SERVICES = ("s3", "dynamodb", "sqs", "appconfig", "apigateway", "secretsmanager", "firehose")
FORMAT = 1  # raised when what is written changes shape


def _nothing() -> None:
    return None


class _Pickler(pickle.Pickler):
    """A lock is written as a new lock (none is held once the server has stopped);
    a weak reference as nothing (the SQS fix's index is rebuilt on first use)."""

    dispatch_table = copyreg.dispatch_table.copy()
    dispatch_table[type(threading.RLock())] = lambda lock: (threading.RLock, ())
    dispatch_table[type(threading.Lock())] = lambda lock: (threading.Lock, ())
    dispatch_table[weakref.ReferenceType] = lambda ref: (_nothing, ())


def _backends(service: str) -> Any:
    from moto.backends import get_backend

    return get_backend(service)  # type: ignore[call-overload]


def snapshot() -> dict[str, Any]:
    """Every kept service's backends: account -> region -> backend."""
    return {
        service: {account: dict(regions) for account, regions in _backends(service).items()}
        for service in SERVICES
    }


def save(path: Path) -> int:
    """Write the kept services' state to ``path``; the bytes written."""
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(
        {"format": FORMAT, "moto": _moto_version(), "services": snapshot()}
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    with open(partial, "wb") as out:
        out.write(buffer.getbuffer())
        out.flush()
        os.fsync(out.fileno())
    partial.replace(path)
    return buffer.getbuffer().nbytes


def load(path: Path) -> str:
    """Put the state saved in ``path`` into this process's moto; what was restored,
    in words (or why nothing was)."""
    if not path.exists():
        return "no saved state: starting empty"
    try:
        with open(path, "rb") as saved:
            state = pickle.load(saved)  # noqa: S301 - the emulator's own file, in its run dir
        if state.get("format") != FORMAT or state.get("moto") != _moto_version():
            raise ValueError(
                f"written by format {state.get('format')} and moto {state.get('moto')}"
            )
        services = state["services"]
    except Exception as error:  # noqa: BLE001 - any unreadable file is set aside
        aside = path.with_name(path.name + ".unreadable")
        path.replace(aside)
        return f"saved state unreadable ({error}); set aside as {aside.name}: starting empty"
    for service, accounts in services.items():
        live = _backends(service)
        for account, regions in accounts.items():
            for region, backend in regions.items():
                live[account][region] = backend
    _after_restore(services)
    return f"state restored from {path.name}"


def _after_restore(services: dict[str, dict[str, dict[str, Any]]]) -> None:
    """What moto keeps beside the backends, made again from them: the SQS fix's
    indexes, and S3's map of every bucket to its account (without it, the
    provisioner's CreateBucket would find no bucket and put an empty one in place)."""
    from switchyard_local import moto_sqs

    for regions in services.get("sqs", {}).values():
        for backend in regions.values():
            for queue in backend.queues.values():
                moto_sqs.reindex(queue)
    owners = _backends("s3").bucket_accounts
    for account, partitions in services.get("s3", {}).items():
        for backend in partitions.values():
            for name, bucket in backend.buckets.items():
                owners[name] = (bucket.partition, account)


def _moto_version() -> str:
    from importlib.metadata import version

    return version("moto")
