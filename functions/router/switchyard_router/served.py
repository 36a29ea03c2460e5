"""The router app served over HTTP by the AWS Lambda Web Adapter (``run.sh``), for
the functions whose responses stream.

Mangum hands the app the API Gateway event in the ``aws.event`` scope entry; the
adapter instead forwards the event's request context as the
``x-amzn-request-context`` header. This middleware puts it where the app reads
the verified API key's id (``switchyard.auth.verified_key_id``), and drops the
header: the adapter sets it from the event, never from the caller.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from switchyard.init_phase import init_phase
from switchyard.settings import RouterSettings, get_settings

Scope = dict[str, Any]
ASGIApp = Callable[[Scope, Any, Any], Awaitable[None]]
CONTEXT_HEADER = b"x-amzn-request-context"


class RequestContextFromHeader:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = scope.get("headers", [])
            context = next((v for k, v in headers if k.lower() == CONTEXT_HEADER), None)
            scope = {
                **scope,
                "headers": [(k, v) for k, v in headers if k.lower() != CONTEXT_HEADER],
                "aws.event": {"requestContext": _parse(context)},
            }
        await self.app(scope, receive, send)


def _parse(raw: bytes | None) -> dict[str, Any]:
    try:
        context = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return context if isinstance(context, dict) else {}


def create_served_app() -> ASGIApp:
    """The app wired from its settings (at the adapter's start, like a cold start, with
    the collector held off as there: ``init_phase``)."""
    with init_phase():
        from switchyard_router.app import create_app
        from switchyard_router.wiring import build_deps

        return RequestContextFromHeader(create_app(build_deps(get_settings(RouterSettings))))
