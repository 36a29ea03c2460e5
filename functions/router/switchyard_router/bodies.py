"""A request's body, read within the router's limit: every route that takes a body
reads it here, so an oversized one is refused the same way on each."""

from __future__ import annotations

from fastapi import Request

from switchyard.fields import FieldError
from switchyard_router.logic import RequestRejected


async def read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    # isdigit alone also takes "²", which int() refuses
    if declared and declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise _too_large(int(declared), limit)
    body = bytearray()
    async for chunk in request.stream():
        body.extend(chunk)
        if len(body) > limit:
            raise _too_large(len(body), limit)
    return bytes(body)


def _too_large(size: int, limit: int) -> RequestRejected:
    return RequestRejected(
        400,
        "body_too_large",
        f"the request body is {size} bytes or more; the limit is {limit}",
        [FieldError("body", f"at most {limit} bytes")],
    )
