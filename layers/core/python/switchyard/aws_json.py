"""A lighter way to make the calls the platform makes most: DynamoDB's and SQS's
reads, writes, sends, receives and deletes, all POSTs of a JSON body to ``/``.

botocore builds each call from the service's model: it serialises the parameters by
walking the model's shapes, resolves the endpoint by its rules, signs through its
request objects, and parses the answer by the model again, emitting a dozen events
on the way. Measured against the local emulator, a DynamoDB GetItem cost the caller
413 to 423 µs of CPU that way (over ``switchyard.http_transport``), and 90 this way;
a router makes three to four such calls a request, a worker a few per batch.

This way (:class:`LeanCaller`): the parameters as JSON (bytes as base64, as
botocore sends blobs), signed with Signature Version 4 (``switchyard.sigv4``) with
the client's own credentials, sent to the client's endpoint over its kept-alive
transport; the answer's JSON read as botocore gives it: DynamoDB's binary attribute
values and SQS's binary message attributes as bytes, and ``ResponseMetadata``. The
events botocore emits for a call that watchers use are emitted as botocore emits
them (``before-parameter-build``, ``before-call``, ``after-call``, each with what
botocore passes), so a check of a call's parameters, a count of calls, or botocore's
own handlers see these calls too.

What it leaves to botocore, by making the same call through it: any answer but a
success or one of DynamoDB's final client errors (a throttle, a server error, an
expired token, a connection that failed, a checksum that does not match: botocore
retries those, with its backoff and its retry quota), every SQS error (whose codes
are the query protocol's), a call that a ``before-call`` handler answers itself, the
operations not in :data:`OPERATIONS`, and every call of a client whose parts are not
as expected (no credentials, an endpoint with a path, a proxy). DynamoDB's final
errors are raised here as botocore raises them: the client's modeled exception,
carrying the error's code, message and fields (a failed condition's item).
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import time
import zlib
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from botocore.awsrequest import AWSResponse

from switchyard.http_transport import Answer, KeepAliveSession, host_header, host_key
from switchyard.sigv4 import ALGORITHM, signature

log = logging.getLogger(__name__)

# The operations called this way, by service.
OPERATIONS = {
    "dynamodb": frozenset(
        {
            "GetItem",
            "BatchGetItem",
            "PutItem",
            "UpdateItem",
            "DeleteItem",
            "Query",
            "BatchWriteItem",
            "BatchExecuteStatement",
        }
    ),
    "sqs": frozenset(
        {
            "SendMessage",
            "SendMessageBatch",
            "ReceiveMessage",
            "DeleteMessage",
            "DeleteMessageBatch",
            "ChangeMessageVisibility",
            "ChangeMessageVisibilityBatch",
        }
    ),
}
# DynamoDB's errors raised here: final (botocore retries none of them), and the ones
# the platform meets in its work (a condition that failed, above all).
FINAL_DYNAMODB_ERRORS = frozenset(
    {
        "ConditionalCheckFailedException",
        "TransactionCanceledException",
        "ResourceNotFoundException",
        "ValidationException",
        "ItemCollectionSizeLimitExceededException",
        "DuplicateItemException",
    }
)
# Where DynamoDB's answers hold items, whose binary values come as base64.
_ITEM_HOLDERS = (
    "Item",
    "Items",
    "Attributes",
    "Responses",
    "LastEvaluatedKey",
    "UnprocessedKeys",
    "UnprocessedItems",
    "Error",
)


class _LeftToBotocore(Exception):
    """This call is made through botocore instead."""


def _blob(value: Any) -> str:
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode()
    raise _LeftToBotocore(f"a {type(value).__name__} in the parameters")


class LeanCaller:
    """Makes a client's calls of :data:`OPERATIONS` the lighter way (the module's
    docstring); :func:`lean` gives the client's calls through it."""

    def __init__(self, client: Any) -> None:
        meta = client.meta
        model = meta.service_model
        self._client = client
        self._service_id = model.service_id.hyphenize()
        self._operations = OPERATIONS.get(model.service_name, frozenset())
        self._models = {name: model.operation_model(name) for name in self._operations}
        self._target = model.metadata["targetPrefix"]
        self._content_type = f"application/x-amz-json-{model.metadata['jsonVersion']}"
        # SQS answers in JSON with the query protocol's error codes when asked so.
        self._query_mode = bool(model.metadata.get("awsQueryCompatible"))
        self._dynamodb = model.service_name == "dynamodb"
        self._scope_tail = f"/{meta.region_name}/{model.signing_name}/aws4_request"
        self._url = meta.endpoint_url
        url = urlsplit(self._url)
        self._key = host_key(url)
        self._host = host_header(url)
        self._events = meta.events
        self._context = {"client_region": meta.region_name, "client_config": meta.config}
        # botocore's parts this needs: the client's credentials and transport.
        self._credentials = client._request_signer._credentials  # noqa: SLF001
        self._session = client._endpoint.http_session  # noqa: SLF001
        usable = (
            self._credentials is not None
            and isinstance(self._session, KeepAliveSession)
            and self._session.takes(self._url)
            and url.path in ("", "/")
            and not url.query
        )
        if not usable:
            self._operations = frozenset()

    def takes(self, operation: str) -> bool:
        return operation in self._operations

    def call(
        self, operation: str, botocore_call: Callable[..., Any], params: dict[str, Any]
    ) -> Any:
        """``operation`` with ``params``, this way or (``botocore_call``) botocore's."""
        prepared = self._prepared(operation, params)
        if prepared is None:
            return botocore_call(**params)
        try:
            exchanged: Answer | Exception = self._session.exchange(
                self._key, self._url, prepared[2]
            )
        except Exception as exc:  # noqa: BLE001 - botocore retries what failed on the way
            exchanged = exc
        return self._finished(operation, botocore_call, params, prepared, exchanged)

    def call_all(
        self, operation: str, botocore_call: Callable[..., Any], many: list[dict[str, Any]]
    ) -> list[Any]:
        """``operation`` with each of ``many``, as :meth:`call` makes it, the calls
        this way sent together (``KeepAliveSession.exchange_all``): they wait on the
        service at once, on this thread. Each one's answer, or the exception it
        raised, in order."""
        prepared = [self._prepared(operation, params) for params in many]
        payloads = [p[2] for p in prepared if p is not None]
        try:
            answered = self._session.exchange_all(self._key, self._url, payloads)
        except Exception as exc:  # noqa: BLE001 - botocore makes each of them
            answered = [exc] * len(payloads)
        exchanged = iter(answered)
        answers: list[Any] = []
        for params, ready in zip(many, prepared, strict=True):
            try:
                if ready is None:  # left to botocore
                    answers.append(botocore_call(**params))
                    continue
                done = self._finished(operation, botocore_call, params, ready, next(exchanged))
                answers.append(done)
            except Exception as exc:  # noqa: BLE001 - each call's own, handed back
                answers.append(exc)
        return answers

    def _prepared(
        self, operation: str, params: dict[str, Any]
    ) -> tuple[Any, dict[str, Any], bytes] | None:
        """The call's model, context and signed request, its events emitted as botocore
        emits them before a call; None if botocore is to make it."""
        model = self._models[operation]
        context = dict(self._context)
        event = f"{self._service_id}.{operation}"
        self._events.emit(
            f"before-parameter-build.{event}", params=params, model=model, context=context
        )
        try:
            body = json.dumps(params, separators=(",", ":"), default=_blob).encode()
        except _LeftToBotocore:
            return None
        headers = {"X-Amz-Target": f"{self._target}.{operation}"}
        request = {
            "url_path": "/",
            "query_string": "",
            "method": "POST",
            "headers": headers,
            "body": body,
            "url": self._url,
            "context": context,
        }
        _, answered = self._events.emit_until_response(
            f"before-call.{event}",
            model=model,
            params=request,
            request_signer=None,
            context=context,
        )
        if answered is not None:
            return None  # a handler answers it: botocore's way
        return model, context, self._payload(request["headers"], body)

    def _finished(
        self,
        operation: str,
        botocore_call: Callable[..., Any],
        params: dict[str, Any],
        prepared: tuple[Any, dict[str, Any], bytes],
        exchanged: Answer | Exception,
    ) -> Any:
        """The call's answer from what its request got back (botocore's call where that
        failed on the way or is not for this way to read); its error raised as botocore
        raises it."""
        if isinstance(exchanged, Exception):  # botocore retries what failed on the way
            log.debug("a lean call failed on the way; botocore makes it", exc_info=exchanged)
            return botocore_call(**params)
        model, context, _ = prepared
        status, answer_headers, data = exchanged
        parsed = self._answer(status, answer_headers, data)
        if parsed is None:
            return botocore_call(**params)
        response = AWSResponse(self._url, status, answer_headers, None)
        self._events.emit(
            f"after-call.{self._service_id}.{operation}",
            http_response=response,
            parsed=parsed,
            model=model,
            context=context,
        )
        if status >= 300:
            code = parsed["Error"]["Code"]
            raise self._client.exceptions.from_code(code)(parsed, operation)
        return parsed

    def _payload(self, extra: dict[str, str], body: bytes) -> bytes:
        """The request's head and ``body``, signed."""
        now = time.gmtime()
        stamp = time.strftime("%Y%m%dT%H%M%SZ", now)
        credentials = self._credentials.get_frozen_credentials()
        signed = [
            ("content-type", self._content_type),
            ("host", self._host),
            ("x-amz-date", stamp),
        ]
        if credentials.token:
            signed.append(("x-amz-security-token", credentials.token))
        signed.append(("x-amz-target", extra["X-Amz-Target"]))
        if self._query_mode:
            signed.append(("x-amzn-query-mode", "true"))
        scope = stamp[:8] + self._scope_tail
        body_hash = hashlib.sha256(body).hexdigest()
        proof = signature(credentials.secret_key, stamp, scope, signed, body_hash)
        authorization = (
            f"{ALGORITHM} Credential={credentials.access_key}/{scope}, "
            f"SignedHeaders={';'.join(name for name, _ in signed)}, Signature={proof}"
        )
        lines = ["POST / HTTP/1.1", *(f"{name}: {value}" for name, value in signed)]
        # What a before-call handler added (a Lambda's trace id), unsigned as botocore
        # leaves it.
        lines += [f"{k}: {v}" for k, v in extra.items() if k.lower() not in _SIGNED_HERE]
        lines += [f"Authorization: {authorization}", f"Content-Length: {len(body)}"]
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + body

    def _answer(self, status: int, headers: dict[str, str], data: bytes) -> dict[str, Any] | None:
        """The answer as botocore parses it; None: botocore makes the call instead."""
        if status >= 500 or (status >= 300 and not self._dynamodb):
            return None
        crc = headers.get("x-amz-crc32")
        if crc is not None and zlib.crc32(data) != int(crc):
            return None  # damaged on the way
        try:
            body = json.loads(data) if data else {}
        except ValueError:
            return None
        if not isinstance(body, dict):
            return None
        metadata = {
            "RequestId": headers.get("x-amzn-requestid", ""),
            "HTTPStatusCode": status,
            "HTTPHeaders": headers,
            "RetryAttempts": 0,
        }
        if status >= 300:
            code = str(body.pop("__type", "")).rpartition("#")[2]
            if code not in FINAL_DYNAMODB_ERRORS:
                return None
            message = body.get("message", body.get("Message", ""))
            parsed = {"Error": {"Message": message, "Code": code}, "ResponseMetadata": metadata}
        else:
            parsed = {"ResponseMetadata": metadata}
        if self._dynamodb:
            if b'"B' in data:  # a binary value ("B" or "BS") somewhere
                for holder in _ITEM_HOLDERS:
                    if holder in body:
                        body[holder] = _binary_decoded(body[holder])
        elif b'"Binary' in data:  # SQS's binary message attributes
            for message in body.get("Messages", ()):
                for attribute in (message.get("MessageAttributes") or {}).values():
                    _sqs_binary_decoded(attribute)
        body.update(parsed)
        return body


_SIGNED_HERE = frozenset({"x-amz-target", "content-type", "host", "x-amz-date"})


def _binary_decoded(value: Any) -> Any:
    """``value`` with every DynamoDB attribute value of type B or BS in it (at any
    depth: in items, lists of items, maps of them) holding bytes rather than base64."""
    if isinstance(value, list):
        return [_binary_decoded(v) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        ((kind, inner),) = value.items()
        if kind == "B" and isinstance(inner, str):
            return {"B": base64.b64decode(inner)}
        if kind == "BS" and isinstance(inner, list) and all(isinstance(v, str) for v in inner):
            return {"BS": [base64.b64decode(v) for v in inner]}
    return {k: _binary_decoded(v) for k, v in value.items()}


def _sqs_binary_decoded(attribute: dict[str, Any]) -> None:
    if isinstance(attribute.get("BinaryValue"), str):
        attribute["BinaryValue"] = base64.b64decode(attribute["BinaryValue"])
    if isinstance(attribute.get("BinaryListValues"), list):
        attribute["BinaryListValues"] = [base64.b64decode(v) for v in attribute["BinaryListValues"]]


class LeanClient:
    """A botocore client whose calls of :data:`OPERATIONS` go :class:`LeanCaller`'s
    way; everything else (its other calls, ``meta``, ``exceptions``, paginators) is
    the client's own."""

    def __init__(self, client: Any, caller: LeanCaller) -> None:
        self._client = client
        self._caller = caller

    def __getattr__(self, name: str) -> Any:
        if name in ("_client", "_caller"):  # not set yet (a copy being made)
            raise AttributeError(name)
        attr = getattr(self._client, name)
        operation = self._client.meta.method_to_api_mapping.get(name)
        if operation is None or not self._caller.takes(operation):
            return attr
        caller = self._caller

        def call(**params: Any) -> Any:
            return caller.call(operation, attr, params)

        call.__name__ = name
        self.__dict__[name] = call  # made once
        return call

    def call_all(self, name: str, many: list[dict[str, Any]]) -> list[Any]:
        """The client's ``name`` call with each of ``many``: see :func:`calls_at_once`."""
        operation = self._client.meta.method_to_api_mapping.get(name)
        if operation is None or not self._caller.takes(operation):
            return _in_turn(getattr(self._client, name), many)
        return self._caller.call_all(operation, getattr(self._client, name), many)

    def __repr__(self) -> str:
        return f"LeanClient({self._client!r})"


def calls_at_once(client: Any, name: str, many: list[dict[str, Any]]) -> list[Any]:
    """``client.<name>(**params)`` for each of ``many``: made this way, the calls are
    sent together and wait on the service at once, on the caller's thread (a worker's
    batch: its result writes of 25 each, its deletes of 10); any other client makes
    them in turn. Each one's answer, or the exception it raised, in order."""
    if len(many) > 1 and isinstance(client, LeanClient):
        return client.call_all(name, many)
    return _in_turn(getattr(client, name), many)


def all_answered(answers: list[Any]) -> list[Any]:
    """:func:`calls_at_once`'s answers, once each call has answered: the first
    exception among them raised."""
    for answer in answers:
        if isinstance(answer, Exception):
            raise answer
    return answers


def _in_turn(call: Callable[..., Any], many: list[dict[str, Any]]) -> list[Any]:
    answers: list[Any] = []
    for params in many:
        try:
            answers.append(call(**params))
        except Exception as exc:  # noqa: BLE001 - each call's own, handed back
            answers.append(exc)
    return answers


def lean(client: Any) -> Any:
    """``client`` (a DynamoDB or SQS client sending through ``switchyard.http_transport``)
    making its calls of :data:`OPERATIONS` the lighter way; any other client, or one
    whose botocore parts are not as expected, is returned as it is."""
    if client.meta.service_model.service_name not in OPERATIONS:
        return client
    try:
        caller = LeanCaller(client)
    except (AttributeError, KeyError, TypeError, ValueError):
        log.warning("botocore's client is not as expected: its calls are all botocore's")
        return client
    return LeanClient(client, caller)
