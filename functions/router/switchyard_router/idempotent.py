"""The ``Idempotency-Key`` header as the routes that create work take it
(``switchyard.idempotency`` has the rule): checked by FastAPI like any parameter (a
bad key is refused naming the header), and turned, with what the request asks for,
into the :class:`Idempotent` that ``PredictService.submit`` and jobs honour."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Header
from pydantic import BaseModel

from switchyard.idempotency import HEADER, KEY_PATTERN, MAX_KEY_LENGTH, fingerprint
from switchyard_router.logic import Idempotent

IdempotencyHeader = Annotated[
    str | None,
    Header(
        alias=HEADER,
        min_length=1,
        max_length=MAX_KEY_LENGTH,
        pattern=KEY_PATTERN,
        description=(
            "Makes a retry safe: the same key and body from the same tenant, within "
            "the result's TTL, answer with the first request (its request_id and "
            "result; nothing runs or is charged again). The same key with another body "
            "is 422 (OpenAI's 400). 1 to 255 visible ASCII characters, such as a UUID."
        ),
    ),
]


def idempotent(key: str | None, scope: str, body: Any) -> Idempotent | None:
    """The request's key and fingerprint: ``scope`` names what it is sent to (the
    route and its model), ``body`` what it asks (a body model, or parsed JSON)."""
    if key is None:
        return None
    document = body.model_dump(mode="json") if isinstance(body, BaseModel) else body
    return Idempotent(key, fingerprint(scope, document))
