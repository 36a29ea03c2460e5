"""IAM in the local emulator, evaluated as AWS evaluates the platform's calls.

moto 5.2.5 enforces IAM once ``INITIAL_NO_AUTH_ACTION_COUNT`` calls have passed (the
local platform turns it on after provisioning, with ``POST /moto-api/reset-auth``):
every call then needs an access key moto issued (any other is refused
InvalidAccessKeyId) and is evaluated against that principal's policies. Six
answers of moto's differ from AWS's for the platform's calls, and :func:`apply`
fixes them in the emulator's process:

- **S3, a missing key.** AWS answers a GET or HEAD of a missing key with 403
  AccessDenied to a principal without ``s3:ListBucket`` on the bucket (it does not
  say whether a key it would not list exists); moto answers 404 NoSuchKey to anyone.
  Patched: 403 unless the principal may list the bucket.
- **DynamoDB, the resource.** moto evaluates every DynamoDB call against the
  resource ``*``, so a policy that names its tables (all of the platform's) allows
  nothing. Patched: each call is evaluated as AWS does, action by action on the
  table (or index) it touches: a BatchGetItem on each table it reads, a
  TransactWriteItems's puts, updates, deletes and condition checks on theirs, a
  PartiQL statement as ``PartiQLInsert``/``Update``/``Select``/``Delete`` on its
  table (:func:`dynamodb_checks`).
- **Services whose resource moto does not name** (Secrets Manager, Firehose,
  CloudWatch; moto evaluates them against ``*`` as well). A statement allows such a
  call when its action matches, whatever resources it names: the action is
  checked, the resource is not.
- **A request with no body** (a REST GET such as API Gateway's GetUsagePlans): moto
  checked its signature over the parsed query instead of the empty payload the
  client signed, and refused it SignatureDoesNotMatch.
- **SQS's batch calls** (SendMessageBatch, DeleteMessageBatch,
  ChangeMessageVisibilityBatch) are authorized by their single call's action, as
  AWS authorizes them; moto asked for actions no policy grants.
- **CloudWatch's actions** are ``cloudwatch:...`` in IAM; moto named them by the
  name CloudWatch signs with (``monitoring:GetMetricData``), which no policy grants,
  so a CPU pool's worker could not read its models' queue ages.

The direct answers of ``moto_reads`` (GetItem, BatchGetItem, PutItem, the worker's
statements, SendMessage, SendMessageBatch) go around moto's handlers, so under IAM
each is first evaluated here (:func:`permits`), with the same checks; one that is
not allowed goes to moto, which refuses it with its own error.

Like the other ``moto_*`` fixes, this reads moto's internals and refuses any moto
but the pinned one. ``tests/integration/test_iam_enforced.py`` checks each answer
against the pinned moto's emulator, IAM on.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from switchyard.sigv4 import ALGORITHM, signature
from switchyard_local.moto_sqs import require_pinned_moto

DEFAULT_REGION = "us-east-1"
_PARTIQL = re.compile(
    r"^\s*(?P<verb>SELECT|INSERT|UPDATE|DELETE)\b(?:.*?\b(?:FROM|INTO)\b)?\s*"
    r"(?:\"(?P<quoted>[^\"]+)\"|(?P<plain>[\w.-]+))",
    re.IGNORECASE | re.DOTALL,
)
_TRANSACT_WRITES = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
}
Check = tuple[str, str]  # (action, resource ARN)


def enforced() -> bool:
    """Whether moto evaluates IAM now (its unchecked calls are spent)."""
    from moto import settings
    from moto.core.authorization import ActionAuthenticatorMixin

    return ActionAuthenticatorMixin.request_count >= settings.INITIAL_NO_AUTH_ACTION_COUNT


def table_arn(region: str, account: str, name: str) -> str:
    return name if name.startswith("arn:") else f"arn:aws:dynamodb:{region}:{account}:table/{name}"


def dynamodb_checks(action: str, request: dict[str, Any], region: str, account: str) -> list[Check]:
    """What AWS evaluates for DynamoDB's ``action`` with this request body: each
    (IAM action, resource) pair."""

    def table(name: str) -> str:
        return table_arn(region, account, name)

    if action in ("BatchGetItem", "BatchWriteItem"):
        return [(f"dynamodb:{action}", table(name)) for name in request.get("RequestItems", {})]
    if action in ("TransactWriteItems", "TransactGetItems"):
        checks = []
        for item in request.get("TransactItems", []):
            for kind, body in item.items():
                verb = "GetItem" if kind == "Get" else _TRANSACT_WRITES.get(kind, kind)
                checks.append((f"dynamodb:{verb}", table(body.get("TableName", ""))))
        return checks
    if action in ("ExecuteStatement", "BatchExecuteStatement", "ExecuteTransaction"):
        statements = request.get("Statements") or request.get("TransactStatements") or [request]
        checks = []
        for statement in statements:
            found = _PARTIQL.match(statement.get("Statement", ""))
            if found is None:
                checks.append((f"dynamodb:{action}", "*"))  # not a form we read
                continue
            name = (found["quoted"] or found["plain"]).split(".")[0]
            checks.append((f"dynamodb:PartiQL{found['verb'].capitalize()}", table(name)))
        return checks
    name = request.get("TableName")
    if not isinstance(name, str):
        return [(f"dynamodb:{action}", "*")]  # ListTables and the like
    resource = table(name)
    index = request.get("IndexName")
    if isinstance(index, str):
        resource += f"/index/{index}"
    return [(f"dynamodb:{action}", resource)]


def _request_factory(checks: list[Check]) -> Callable[..., Any]:
    """What makes moto's IAMRequest, made to evaluate each of ``checks`` in turn."""
    made = _checked_request()

    def factory(*args: Any, **kwargs: Any) -> Any:
        request = made(*args, **kwargs)
        request.checks = checks
        return request

    return factory


@lru_cache(maxsize=1)
def _checked_request() -> type:
    """moto's IAMRequest, evaluating each of its ``checks`` in turn (one class, made
    once: a class made per call cost each call tens of microseconds)."""
    from moto.iam.access_control import IAMRequest

    class CheckedRequest(IAMRequest):
        checks: list[Check] = []

        def check_action_permitted(self, resource: str) -> None:
            for action, arn in self.checks:
                self._action = action
                super().check_action_permitted(arn)

    return CheckedRequest


# The checks of the direct answers found allowed, by the caller's access key, and
# each such key's secret: moto's evaluation looks the key up, collects its
# principal's policies and walks their statements on every call, a fifth of the
# emulator's CPU in a burst of async requests. A key or a policy changes only by a
# call to IAM (or a reset of the emulator's state), and every such call forgets what
# was found (:func:`forget_if_iam_may_change`); a signature is still checked on every
# call.
_ALLOWED: set[tuple[str, tuple[Check, ...]]] = set()
_ALLOWED_MOST = 4096
_SECRETS: dict[str, str] = {}


def forget_if_iam_may_change(environ: dict[str, Any]) -> None:
    """Forget what was found allowed if this request may change what is (a call to
    IAM or STS, or to the emulator's own API: a reset, IAM turned on)."""
    authorization = environ.get("HTTP_AUTHORIZATION", "")
    if (
        environ.get("PATH_INFO", "").startswith("/moto-api")
        or "/iam/aws4_request" in authorization
        or "/sts/aws4_request" in authorization
        or "X-Amz-Credential" in environ.get("QUERY_STRING", "")
    ):
        _ALLOWED.clear()
        _SECRETS.clear()


def _region_of(authorization: str) -> str:
    # Credential=<key>/<date>/<region>/<service>/aws4_request
    found = re.search(r"Credential=[^/]+/[^/]+/([^/]+)/", authorization)
    return found.group(1) if found else DEFAULT_REGION


def _patch_dynamodb() -> None:
    from moto.dynamodb.responses import DynamoHandler

    def _authenticate_and_authorize_normal_action(self: Any, resource: str = "*") -> None:
        if not enforced():
            return original(self, resource)  # counts the unchecked call
        try:
            request = json.loads(self.raw_body or b"{}")
        except ValueError:
            request = {}
        region = _region_of(self.headers.get("Authorization", ""))
        checks = dynamodb_checks(self._get_action(), request, region, self.current_account)
        self._authenticate_and_authorize_action(_request_factory(checks), resource)

    original = DynamoHandler._authenticate_and_authorize_normal_action
    DynamoHandler._authenticate_and_authorize_normal_action = (  # type: ignore[method-assign]
        _authenticate_and_authorize_normal_action
    )


def _patch_s3_missing_keys() -> None:
    from moto.s3.exceptions import MissingKey, S3AccessDeniedError, S3ClientError
    from moto.s3.responses import S3Response

    def may_list(self: Any, bucket: str) -> bool:
        if not enforced():
            return True
        saved = dict(self.data)
        try:
            self._set_action("BUCKET", "GET", {})  # s3:ListBucket
            self._authenticate_and_authorize_s3_action(bucket_name=bucket)
        except S3ClientError:
            return False
        finally:
            self.data = saved
        return True

    def _key_response(self: Any, request: Any, full_url: str) -> Any:
        try:
            answer = original(self, request, full_url)
        except MissingKey:
            if request.method == "GET" and not may_list(self, self.bucket_name):
                raise S3AccessDeniedError() from None
            raise
        if request.method == "HEAD" and answer[0] == 404 and not may_list(self, self.bucket_name):
            return 403, {}, ""
        return answer

    original = S3Response._key_response
    S3Response._key_response = _key_response  # type: ignore[method-assign]


def _patch_unnamed_resources() -> None:
    """A call moto evaluates against ``*`` (it names no resource) is allowed by a
    statement whose action matches, whatever resources the statement names."""
    from moto.iam.access_control import IAMPolicyStatement

    original = IAMPolicyStatement._check_element_matches

    def _check_element_matches(self: Any, element: str, value: str) -> bool:
        if element == "Resource" and value == "*" and element in self._statement:
            return True
        return bool(original(self, element, value))

    IAMPolicyStatement._check_element_matches = _check_element_matches  # type: ignore[method-assign]


def _patch_bodyless_signatures() -> None:
    """A request sent with no body (a REST GET, as API Gateway's GetUsagePlans) is
    signed over the empty payload; moto recomputed the signature over its parsed
    query parameters instead, and answered SignatureDoesNotMatch to every such call."""
    from moto.iam.access_control import IAMRequestBase

    original = IAMRequestBase._create_aws_request

    def _create_aws_request(self: Any) -> Any:
        request = original(self)
        if not self._body and self._method in ("GET", "HEAD", "DELETE"):
            request.data = b""
        return request

    IAMRequestBase._create_aws_request = _create_aws_request  # type: ignore[method-assign]


# SQS authorizes each batch call by the permission of its single call (the batch
# actions are not IAM actions); moto asked for ``sqs:DeleteMessageBatch`` and so on.
SQS_BATCH_ACTIONS = {
    "SendMessageBatch": "SendMessage",
    "DeleteMessageBatch": "DeleteMessage",
    "ChangeMessageVisibilityBatch": "ChangeMessageVisibility",
}


# Services whose IAM actions are named otherwise than the name they sign with.
IAM_PREFIXES = {"monitoring": "cloudwatch"}


def _patch_action_names() -> None:
    """A call is evaluated as AWS names its action: a batch call to SQS as its
    single call's action, and a call to a service that signs with another name
    under its IAM prefix (CloudWatch signs as ``monitoring``)."""
    from moto.iam.access_control import IAMRequestBase

    original = IAMRequestBase.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        service, _, name = self._action.partition(":")
        service = IAM_PREFIXES.get(service, service)
        if service == "sqs":
            name = SQS_BATCH_ACTIONS.get(name, name)
        self._action = f"{service}:{name}"

    IAMRequestBase.__init__ = __init__  # type: ignore[method-assign]


def permits(environ: dict[str, Any], body: bytes, target: str) -> bool:
    """Whether a direct answer of ``moto_reads`` may be given: IAM is off, or the
    caller's policies allow every check of the call (``target`` is its
    ``X-Amz-Target``). False sends the call to moto, which refuses it."""
    if not enforced():
        return True
    from moto.iam.models import get_account_id_from
    from werkzeug.datastructures import EnvironHeaders
    from werkzeug.exceptions import HTTPException

    headers = EnvironHeaders(environ)
    authorization = headers.get("Authorization", "")
    key = re.search(r"Credential=([^/]+)/", authorization)
    if key is None:
        return False
    account = get_account_id_from(key.group(1))
    region = _region_of(authorization)
    service, action = target.split(".", 1)
    try:
        request = json.loads(body or b"{}")
    except ValueError:
        return False
    if service == "AmazonSQS":
        url = str(request.get("QueueUrl", ""))
        queue = f"arn:aws:sqs:{region}:{account}:{url.split('/')[-1]}"
        checks = [(f"sqs:{SQS_BATCH_ACTIONS.get(action, action)}", queue)]
    else:
        checks = dynamodb_checks(action, request, region, account)
    decision = (key.group(1), tuple(checks))
    secret = _SECRETS.get(key.group(1))
    if (
        secret is not None
        and decision in _ALLOWED
        and _signed(environ, body, authorization, secret)
    ):
        return True  # allowed before, and signed with the key's secret
    path = environ.get("PATH_INFO", "/")
    if environ.get("QUERY_STRING"):
        path += "?" + environ["QUERY_STRING"]
    try:
        checked = _request_factory(checks)(
            account_id=account,
            method=environ.get("REQUEST_METHOD", "POST"),
            path=path,
            data={},
            body=body,
            headers=headers,
            action=action,
        )
        secret = checked._access_key.create_credentials().secret_key
        if not _signed(environ, body, authorization, secret):
            checked.check_signature()  # moto's own check decides: it refuses a bad one
        if decision not in _ALLOWED:
            checked.check_action_permitted("*")
            if len(_ALLOWED) >= _ALLOWED_MOST:
                _ALLOWED.clear()
            _ALLOWED.add(decision)
        _SECRETS[key.group(1)] = secret
    except HTTPException:
        return False
    return True


def _signed(environ: dict[str, Any], body: bytes, authorization: str, secret: str) -> bool:
    """Whether a direct answer's request (a POST to ``/``, no query) carries the
    SigV4 signature its caller's secret gives, worked out as botocore signs it: the
    signed headers' values with their spaces collapsed, the body's SHA-256, the key
    derived for the day, region and service (kept). moto rebuilds the request as
    botocore's and signs that, a quarter of the emulator's CPU in a burst of async
    requests. False where this cannot tell (another form; or a signature that does
    not match): moto's check then decides."""
    if environ.get("PATH_INFO") != "/" or environ.get("QUERY_STRING"):
        return False
    parts = [part.strip().partition("=") for part in authorization.partition(" ")[2].split(",")]
    fields = {name: value for name, _, value in parts}
    if not authorization.startswith(ALGORITHM + " ") or set(fields) != _AUTH_FIELDS:
        return False
    scope = fields["Credential"].partition("/")[2]
    scoped = scope.split("/")  # day, region, service, aws4_request
    stamp = environ.get("HTTP_X_AMZ_DATE")
    names = fields["SignedHeaders"].split(";")
    if len(scoped) != 4 or scoped[3] != "aws4_request" or not stamp:
        return False
    if "x-amz-content-sha256" in names:
        return False
    headers = []
    for name in names:
        value = environ.get(_ENVIRON_NAMES.get(name) or "HTTP_" + name.upper().replace("-", "_"))
        if value is None:
            return False
        headers.append((name, value))
    method = environ.get("REQUEST_METHOD", "POST")
    expected = signature(secret, stamp, scope, headers, hashlib.sha256(body).hexdigest(), method)
    return hmac.compare_digest(expected.encode(), fields["Signature"].encode())


_AUTH_FIELDS = {"Credential", "SignedHeaders", "Signature"}
_ENVIRON_NAMES = {"content-type": "CONTENT_TYPE", "content-length": "CONTENT_LENGTH"}


def apply() -> None:
    """The six fixes, in the emulator's process (before it serves)."""
    require_pinned_moto("switchyard_local.moto_iam patches {moto}'s IAM evaluation")
    _patch_dynamodb()
    _patch_s3_missing_keys()
    _patch_unnamed_resources()
    _patch_bodyless_signatures()
    _patch_action_names()
