"""API Gateway REQUEST authorizer: hands the caller's API key to the usage plans.

The API's key source is AUTHORIZER, so API Gateway takes the key to check against
its usage plans from this function's answer (``usageIdentifierKey``), not from the
``x-api-key`` header. That lets a tenant send its key either way:

- ``x-api-key: <key>``, as the platform's own clients do, or
- ``Authorization: Bearer <key>``, as the official ``openai`` client does.

This function does not judge the key: it allows the method and names the key, and
API Gateway then checks it (unknown or disabled: 403), applies its plan's rate,
burst and quota, and puts its id in ``requestContext.identity.apiKeyId`` for the
router, exactly as with header keys. A request with no key gets 401 ("Unauthorized"
is the one error message API Gateway answers with 401).

Standard library only, no layer, nothing logged: a key value must never reach logs.
"""

from __future__ import annotations

from typing import Any

BEARER = "bearer"


# The OpenAI-compatible API's routes: API Gateway caches this function's answer
# keyed on the Authorization header there, and on x-api-key everywhere else, so a
# request's key is read from that header first (a cached answer is then always the
# answer for the key that keyed it).
OPENAI_RESOURCES = "/openai/"


def api_key(headers: dict[str, str] | None, bearer_first: bool = False) -> str | None:
    """The key the request carries: ``x-api-key`` first, else a Bearer token (the
    other way round with ``bearer_first``). Header names are matched without regard
    to case (clients differ)."""
    by_name = {name.lower(): value for name, value in (headers or {}).items() if value}
    header_key = by_name.get("x-api-key", "").strip() or None
    scheme, _, token = by_name.get("authorization", "").strip().partition(" ")
    bearer_key = token.strip() if scheme.lower() == BEARER and token.strip() else None
    if bearer_first:
        return bearer_key or header_key
    return header_key or bearer_key


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    resource = str(event.get("resource") or event.get("path") or "")
    key = api_key(event.get("headers"), bearer_first=resource.startswith(OPENAI_RESOURCES))
    if key is None:
        raise Exception("Unauthorized")  # noqa: TRY002 - API Gateway's 401, by its message
    return {
        # Not the key: principalId lands in API Gateway's logs and request context.
        "principalId": "api-key",
        "policyDocument": {
            "Version": "2012-10-17",
            "Statement": [
                {"Action": "execute-api:Invoke", "Effect": "Allow", "Resource": event["methodArn"]}
            ],
        },
        "usageIdentifierKey": key,
    }
