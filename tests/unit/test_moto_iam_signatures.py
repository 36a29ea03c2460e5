"""The emulator's own check of a direct answer's SigV4 signature
(``switchyard_local.moto_iam._signed``) agrees with botocore's signer: a request
botocore signed passes; one changed after it was signed, or signed with another
secret, does not (and is left to moto's check, which refuses it)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from switchyard_local.moto_iam import _signed

SECRET = "a-secret"
BODY = json.dumps({"TableName": "t", "Key": {"pk": {"S": "one"}}}).encode()


def signed_request(
    body: bytes = BODY, secret: str = SECRET, token: str | None = None, url: str = "/"
) -> AWSRequest:
    request = AWSRequest(
        method="POST",
        url=f"http://localhost:4566{url}",
        data=body,
        headers={
            "Content-Type": "application/x-amz-json-1.0",
            "X-Amz-Target": "DynamoDB_20120810.GetItem",
        },
    )
    SigV4Auth(Credentials("AKIAEXAMPLE", secret, token), "dynamodb", "us-east-1").add_auth(request)
    return request


def environ_of(request: AWSRequest, **changed: str) -> dict[str, Any]:
    """The WSGI environ a server makes of ``request`` (a header changed on the way)."""
    path, _, query = request.url.partition("localhost:4566")[2].partition("?")
    environ = {"REQUEST_METHOD": "POST", "PATH_INFO": path, "QUERY_STRING": query}
    environ["HTTP_HOST"] = "localhost:4566"
    for name, value in request.headers.items():
        key = name.upper().replace("-", "_")
        environ[key if key == "CONTENT_TYPE" else "HTTP_" + key] = value
    environ["CONTENT_LENGTH"] = str(len(request.body))
    return {**environ, **changed}


def check(request: AWSRequest, body: bytes = BODY, secret: str = SECRET, **changed: str) -> bool:
    environ = environ_of(request, **changed)
    return _signed(environ, body, environ["HTTP_AUTHORIZATION"], secret)


def test_a_request_botocore_signed_passes():
    assert check(signed_request())
    assert check(signed_request(token="a-session-token"))  # its token header signed too
    assert check(signed_request(), HTTP_X_AMZ_TARGET="DynamoDB_20120810.GetItem  ")


@pytest.mark.parametrize(
    ("what", "outcome"),
    [
        ("its body changed", lambda r: check(r, body=BODY.replace(b"one", b"two"))),
        ("a signed header changed", lambda r: check(r, HTTP_X_AMZ_TARGET="x.PutItem")),
        ("its date changed", lambda r: check(r, HTTP_X_AMZ_DATE="20200101T000000Z")),
        ("signed with another secret", lambda r: check(r, secret="another")),
        ("a query it was not signed with", lambda r: check(r, QUERY_STRING="a=1")),
        ("a malformed authorization", lambda r: check(r, HTTP_AUTHORIZATION="AWS4-HMAC-SHA256 x")),
    ],
)
def test_a_request_changed_or_signed_otherwise_is_left_to_moto(what, outcome):
    assert outcome(signed_request()) is False, what
