"""One place that makes AWS clients, so the emulator is only a setting.

Clients come from botocore directly, not boto3: importing boto3 also imports its
managed-transfer and resource layers (s3transfer among them), about 0.4 s of every
router cold start for features the request path never uses. Large-file transfers
(model artifacts, a job's file from the CLI) take :func:`transfer`, which imports
them on first use.
"""

from __future__ import annotations

import threading
from functools import lru_cache
from typing import Any

import botocore.session
from botocore.config import Config

from switchyard.aws_json import lean
from switchyard.http_transport import install

_CONFIG = Config(
    retries={"mode": "standard", "max_attempts": 4},
    connect_timeout=3,
    read_timeout=25,
    max_pool_connections=50,
    # botocore's check of a call's parameters against the service's model walks
    # every value before it is sent: a third of the worker's CPU for a batch's
    # result write (a BatchExecuteStatement of 25 results: 62 µs a result with it,
    # 41 without). The service checks every request itself; the integration tier
    # checks each call the platform makes against the model
    # (tests/integration/conftest.py).
    parameter_validation=False,
)
_session_lock = threading.Lock()  # a botocore session's create_client is not thread-safe


@lru_cache(maxsize=1)
def _session() -> Any:
    return botocore.session.get_session()


@lru_cache(maxsize=32)
def client(service: str, region: str, endpoint_url: str | None = None) -> Any:
    """A cached, thread-safe client; ``endpoint_url`` points at the emulator locally.
    DynamoDB's and SQS's send their calls through ``switchyard.http_transport``, and
    make the ones they make most the lighter way of ``switchyard.aws_json``."""
    with _session_lock:
        made = _session().create_client(
            service, region_name=region, endpoint_url=endpoint_url, config=_CONFIG
        )
    return lean(install(made))


def reset_clients() -> None:
    """Forget the cached clients and their session: the next ones read the
    credentials anew (a process whose credentials changed)."""
    with _session_lock:
        client.cache_clear()
        _session.cache_clear()


def transfer(s3: Any) -> Any:
    """Managed S3 transfers (multipart, parallel ranges) over the client ``s3``:
    ``upload_file(path, bucket, key, extra_args=...)``, ``download_file(bucket, key,
    path)``."""
    from boto3.s3.transfer import S3Transfer  # heavy: imported when a file moves

    return S3Transfer(client=s3)


class LazyClient:
    """A client made on first use: a cold start pays only for the services its first
    request needs (a predict reaches SQS and DynamoDB; S3 only for a claim check)."""

    def __init__(self, service: str, region: str, endpoint_url: str | None = None) -> None:
        self._args = (service, region, endpoint_url)

    def __getattr__(self, name: str) -> Any:
        return getattr(client(*self._args), name)
