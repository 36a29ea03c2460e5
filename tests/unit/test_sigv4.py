"""Signature Version 4 of a JSON-protocol request (``switchyard.sigv4``): the same
signature botocore's own signer gives the same request at the same moment."""

from __future__ import annotations

import datetime as dt
import hashlib
from unittest import mock

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from switchyard.sigv4 import ALGORITHM, signature

BODY = b'{"TableName":"results","Key":{"tenant":{"S":"acme"}}}'


def botocores(credentials: Credentials, headers: dict[str, str], when: dt.datetime) -> str:
    """The Authorization header botocore's SigV4 signer writes for a POST to ``/``."""
    request = AWSRequest(method="POST", url="https://dynamodb.eu-west-1.amazonaws.com/",
                         data=BODY, headers=headers)  # fmt: skip
    with mock.patch("botocore.auth.get_current_datetime", return_value=when):
        SigV4Auth(credentials, "dynamodb", "eu-west-1").add_auth(request)
    assert request.headers["X-Amz-Date"] == when.strftime("%Y%m%dT%H%M%SZ")
    return request.headers["Authorization"]


@pytest.mark.parametrize("token", [None, "a-session-token"])
def test_a_signature_is_the_one_botocore_gives(token):
    # GIVEN a DynamoDB call's headers, with a session's token or without
    credentials = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", token)
    when = dt.datetime(2026, 11, 28, 21, 5, 9, tzinfo=dt.UTC)
    headers = {"Content-Type": "application/x-amz-json-1.0",
               "X-Amz-Target": "DynamoDB_20120810.GetItem"}  # fmt: skip
    theirs = botocores(credentials, headers, when)
    # WHEN this module signs it, its headers as botocore signs them
    stamp = "20261128T210509Z"
    host = "dynamodb.eu-west-1.amazonaws.com"
    signed = [("content-type", headers["Content-Type"]), ("host", host), ("x-amz-date", stamp)]
    if token:
        signed.append(("x-amz-security-token", token))
    signed.append(("x-amz-target", headers["X-Amz-Target"]))
    scope = "20261128/eu-west-1/dynamodb/aws4_request"
    ours = signature(credentials.secret_key, stamp, scope, signed, hashlib.sha256(BODY).hexdigest())
    # THEN botocore's header names the same headers and carries the same signature
    names = ";".join(name for name, _ in signed)
    assert theirs == (
        f"{ALGORITHM} Credential=AKIDEXAMPLE/{scope}, SignedHeaders={names}, Signature={ours}"
    )
    # AND another secret, or another body, signs differently
    assert signature("another", stamp, scope, signed, hashlib.sha256(BODY).hexdigest()) != ours
    assert (
        signature(credentials.secret_key, stamp, scope, signed, hashlib.sha256(b"{}").hexdigest())
        != ours
    )
