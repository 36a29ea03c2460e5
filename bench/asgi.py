"""Calls an ASGI app directly, with no server and no socket: how the router is
driven in-process (as Mangum drives it in Lambda) when a section wants the router's
own cost without HTTP in the way."""

from __future__ import annotations

import asyncio
import json
from typing import Any


async def call(
    app: Any,
    method: str,
    path: str,
    headers: dict[str, str] | None = None,
    body: bytes = b"",
    query: str = "",
    api_key_id: str | None = None,
    response_headers: dict[str, str] | None = None,
) -> tuple[int, bytes]:
    """One request through ``app``; returns (status, body). ``api_key_id`` is the key
    API Gateway verified, passed as Mangum passes the request context; the answer's
    headers go into ``response_headers`` (by lower-case name) when it is given."""
    raw_headers = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    if body:
        raw_headers.append((b"content-length", str(len(body)).encode()))
        raw_headers.append((b"content-type", b"application/json"))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": raw_headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 80),
    }
    if api_key_id is not None:
        scope["aws.event"] = {"requestContext": {"identity": {"apiKeyId": api_key_id}}}
    delivered = False
    status = 0
    chunks: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # the client never disconnects
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
            if response_headers is not None:
                for k, v in message.get("headers", []):
                    response_headers[k.decode().lower()] = v.decode()
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    return status, b"".join(chunks)


class NoopApp:
    """A trivial ASGI app: what the in-process driver costs by itself."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})


def predict_body(inputs: list[Any]) -> bytes:
    return json.dumps({"inputs": inputs}).encode()
