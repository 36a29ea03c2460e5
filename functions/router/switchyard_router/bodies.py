"""A request's body, read within the router's limit and validated by its model
(``switchyard.bodies``): every route that takes a body reads it here, so an
oversized one, one that is not JSON and one its model refuses are answered the same
way on each."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from fastapi import Request
from pydantic import BaseModel, ValidationError

from switchyard.bodies import field_errors
from switchyard.fields import FieldError
from switchyard.jsontext import parse_json
from switchyard_router.logic import RequestRejected

B = TypeVar("B", bound=BaseModel)


@dataclass(frozen=True)
class Refusal:
    """How a route answers a body its model refuses."""

    status: int
    code: str
    message: str


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


async def read_model(request: Request, limit: int, model: type[B], refusal: Refusal) -> B:
    """The body as ``model``; a body that is not JSON is refused (400,
    ``malformed_json``), one the model refuses as ``refusal`` says, naming the fields."""
    return validated(model, json_body(await read_body(request, limit)), refusal)


def validated(model: type[B], document: object, refusal: Refusal) -> B:
    """``document`` (a body's JSON) as ``model``, or refused as ``refusal`` says."""
    try:
        return model.model_validate(document)
    except ValidationError as exc:
        errors = field_errors(exc)
        raise RequestRejected(refusal.status, refusal.code, refusal.message, errors) from None


def json_body(body: bytes) -> object:
    """The body's JSON; a body that is not JSON is refused (400, ``malformed_json``)."""
    try:
        return parse_json(body)
    except ValueError as exc:
        raise RequestRejected(
            400,
            "malformed_json",
            f"the body is not valid JSON: {exc}",
            [FieldError("body", str(exc))],
        ) from None


def json_object(body: bytes) -> dict[str, object]:
    """The body's JSON object; anything else is refused (422, ``invalid_input``)."""
    document = json_body(body)
    if not isinstance(document, dict):
        raise RequestRejected(
            422,
            "invalid_input",
            "the body must be a JSON object",
            [FieldError("body", "not an object")],
        )
    return document


def _too_large(size: int, limit: int) -> RequestRejected:
    return RequestRejected(
        400,
        "body_too_large",
        f"the request body is {size} bytes or more; the limit is {limit}",
        [FieldError("body", f"at most {limit} bytes")],
    )
