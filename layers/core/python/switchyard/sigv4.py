"""AWS Signature Version 4 of a request to a JSON protocol's endpoint (its path ``/``,
no query string), worked out as botocore works it out: what the platform's lighter
calls are signed with (``switchyard.aws_json``) and what the local emulator checks a
caller's signature by (``switchyard_local.moto_iam``).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from functools import lru_cache

ALGORITHM = "AWS4-HMAC-SHA256"


def signature(
    secret: str,
    stamp: str,
    scope: str,
    headers: Sequence[tuple[str, str]],
    body_hash: str,
    method: str = "POST",
) -> str:
    """The signature of a request to ``/`` signed at ``stamp`` (``X-Amz-Date``) for
    ``scope`` (day/region/service/aws4_request), over ``headers`` (the signed ones:
    their names in lower case, sorted, each value's runs of spaces collapsed as the
    canonical request has them) and its body's SHA-256 (hex)."""
    lines = "".join(f"{name}:{' '.join(value.split())}\n" for name, value in headers)
    names = ";".join(name for name, _ in headers)
    canonical = f"{method}\n/\n\n{lines}\n{names}\n{body_hash}"
    digest = hashlib.sha256(canonical.encode()).hexdigest()
    to_sign = f"{ALGORITHM}\n{stamp}\n{scope}\n{digest}"
    day, region, service, _ = scope.split("/")
    key = signing_key(secret, day, region, service)
    return hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()


@lru_cache(maxsize=64)
def signing_key(secret: str, day: str, region: str, service: str) -> bytes:
    """The key a day's requests to a service in a region are signed with (kept: it
    changes once a day)."""
    key = ("AWS4" + secret).encode()
    for part in (day, region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key
