"""The key authorizer as Lambda runs it: its code asset alone at ``/var/task`` (no
layer), built by the CDK app's bundling code, its handler invoked with the REQUEST
authorizer events API Gateway sends (``events/rest_api_request_authorizer.json``:
the official ``openai`` client's chat completion, key as a Bearer token)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import lambda_events
from switchyard_local.deployed import (
    LambdaInvokeError,
    LambdaProcess,
    Launcher,
)
from switchyard_local.supervisor import base_environment

KEY = "sy-0123456789abcdefghijklmnopqrstuv"
METHOD_ARN = (
    "arn:aws:execute-api:us-east-1:123456789012:abcdef1234/dev/POST/openai/v1/chat/completions"
)


@pytest.fixture(scope="module")
def log_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("key-authorizer") / "function-key-authorizer.log"


@pytest.fixture(scope="module")
def authorizer(launcher: Launcher, log_path: Path) -> Iterator[LambdaProcess]:
    """A cold start of the authorizer's asset: only it (at /var/task) and the SDK
    the Lambda runtime provides are on the path; the core layer is not attached."""
    command = launcher.lambda_handler("key_authorizer")
    function = LambdaProcess(command, base_environment(), log_path)
    yield function
    function.close()


def request(headers: dict[str, str] | None) -> dict[str, Any]:
    """API Gateway's REQUEST authorizer event for the fixture's call, with
    ``headers`` in place of its credentials (None: an event with no headers)."""
    event = lambda_events.event("rest_api_request_authorizer")
    if headers is None:
        event["headers"] = event["multiValueHeaders"] = None
        return event
    for name in ("Authorization", "x-api-key"):
        event["headers"].pop(name, None)
        event["multiValueHeaders"].pop(name, None)
    event["headers"].update(headers)
    event["multiValueHeaders"].update({k: [v] for k, v in headers.items()})
    return event


def allowed_key(answer: dict[str, Any]) -> str:
    """The key an Allow answer hands to the usage plans (after checking its shape)."""
    (statement,) = answer["policyDocument"]["Statement"]
    assert answer["policyDocument"]["Version"] == "2012-10-17"
    assert statement == {"Action": "execute-api:Invoke", "Effect": "Allow", "Resource": METHOD_ARN}
    assert KEY not in answer["principalId"], "the key must not become the principal"
    return str(answer["usageIdentifierKey"])


def test_the_cold_start_imports_the_standard_library_only(
    authorizer: LambdaProcess, launcher: Launcher
) -> None:
    # GIVEN the authorizer's cold start
    # THEN nothing of the platform and no third-party package was imported
    assert authorizer.modules == {}
    third_party = set(authorizer.top_level) - set(sys.stdlib_module_names) - {"__main__"}
    assert third_party == {"handler"}


def test_the_openai_clients_bearer_key_goes_to_the_usage_plans(
    authorizer: LambdaProcess,
) -> None:
    # GIVEN the openai client's request: Authorization: Bearer <key>
    event = request({"Authorization": f"Bearer {KEY}"})
    # WHEN API Gateway asks the authorizer
    answer = authorizer.invoke(event)
    # THEN the method is allowed and the key is named for API Gateway to check
    assert allowed_key(answer) == KEY


def test_an_x_api_key_header_goes_to_the_usage_plans(authorizer: LambdaProcess) -> None:
    answer = authorizer.invoke(request({"x-api-key": KEY}))
    assert allowed_key(answer) == KEY


@pytest.mark.parametrize(
    "headers",
    [
        {"authorization": f"bearer {KEY}"},  # HTTP/2 clients send lower-case names
        {"AUTHORIZATION": f"BEARER   {KEY} "},
        {"X-API-Key": KEY},
        {"x-api-key": "", "Authorization": f"Bearer {KEY}"},
    ],
)
def test_names_and_schemes_match_whatever_their_case(
    authorizer: LambdaProcess, headers: dict[str, str]
) -> None:
    assert allowed_key(authorizer.invoke(request(headers))) == KEY


def test_with_both_headers_the_key_is_the_one_its_routes_cache_answers_by() -> None:
    # API Gateway caches the answer keyed on Authorization under /openai/v1 and on
    # x-api-key elsewhere (stacks/api.py, KeyAuthorizer): that header's key comes first
    source = Path(__file__).resolve().parents[2] / "functions" / "key_authorizer" / "handler.py"
    spec = importlib.util.spec_from_file_location("key_authorizer_handler", source)
    assert spec is not None and spec.loader is not None
    key_authorizer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(key_authorizer)
    both = {"X-Api-Key": "the-header-key", "Authorization": "Bearer the-bearer-key"}
    openai = request(both)  # /openai/v1/{proxy+}
    assert key_authorizer.handler(openai, None)["usageIdentifierKey"] == "the-bearer-key"
    platform = {**request(both), "resource": "/v1/models/{model}/predict"}
    platform["path"] = "/v1/models/digits-cnn/predict"
    assert key_authorizer.handler(platform, None)["usageIdentifierKey"] == "the-header-key"


@pytest.mark.parametrize(
    "headers",
    [
        {},
        None,
        {"Authorization": "Bearer "},
        {"Authorization": f"Basic {KEY}"},
        {"Authorization": KEY},
        {"x-api-key": "   "},
    ],
)
def test_a_request_without_a_key_is_unauthorized(
    authorizer: LambdaProcess, headers: dict[str, str] | None
) -> None:
    # API Gateway answers 401 for exactly this error message
    with pytest.raises(LambdaInvokeError, match=r"^Exception: Unauthorized$"):
        authorizer.invoke(request(headers))


def test_no_key_value_reaches_the_log(authorizer: LambdaProcess, log_path: Path) -> None:
    authorizer.invoke(request({"Authorization": f"Bearer {KEY}"}))
    with pytest.raises(LambdaInvokeError):
        authorizer.invoke(request({"Authorization": f"Basic {KEY}"}))
    assert KEY not in log_path.read_text()
