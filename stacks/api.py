"""The tenants' door: one REST API, an API key per tenant, a usage plan per tier,
and a key authorizer that takes the key from ``x-api-key`` or a Bearer token."""

from __future__ import annotations

import json
import re
from typing import Any

from aws_cdk import Duration, Tags
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from stacks.cloud import (
    API_INTEGRATION_TIMEOUT,
    AUTHORIZER_MEMORY_MB,
    AUTHORIZER_TIMEOUT,
    LOG_RETENTION,
    STREAM_INTEGRATION_TIMEOUT,
    Deployment,
)
from stacks.functions import PlatformFunction
from stacks.nag import acknowledge, skip_checkov
from switchyard.auth import TENANT_TAG
from switchyard.bodies import draft4, predict_body_for, request_schema
from switchyard.manifest import ModelSpec
from switchyard.schemas import (
    FORBIDDEN,
    PAYLOAD_TOO_LARGE,
    QUOTA_EXCEEDED,
    THROTTLED,
    UNAUTHORIZED,
)

# One access-log line per request, with the key (tenant) that made it.
_ACCESS_LOG = {
    "requestId": "$context.requestId",
    "apiKeyId": "$context.identity.apiKeyId",
    "sourceIp": "$context.identity.sourceIp",
    "requestTime": "$context.requestTime",
    "httpMethod": "$context.httpMethod",
    "resourcePath": "$context.resourcePath",
    "status": "$context.status",
    "responseLength": "$context.responseLength",
    "responseLatency": "$context.responseLatency",
    "integrationLatency": "$context.integrationLatency",
    "errorMessage": "$context.error.message",
}

# Errors the gateway answers itself, shaped like the router's (message, code).
# The one media type API Gateway passes as bytes: binary tensors (the Open Inference
# Protocol's ``Inference-Header-Content-Length`` bodies).
BINARY_MEDIA_TYPE = "application/octet-stream"
_ERROR_BODY = '{"message": "%s", "code": "%s"}'
_VALIDATION_MESSAGE = (
    '$util.escapeJavaScript($context.error.validationErrorString).replaceAll("\\\\\'","\'")'
)


class KeyAuthorizer(Construct):
    """The REQUEST authorizer in front of every method (functions/key_authorizer):
    it names the caller's key, from ``x-api-key`` or ``Authorization: Bearer``, and
    API Gateway checks that key against the usage plans as it would a header key.

    API Gateway caches its answer per key for the stage's
    ``authorizer_cache_seconds``, so a burst of requests (garbage keys included)
    invokes it once per key, not once per request. The cache is keyed on the
    authorizer's identity source, and API Gateway answers 401 without calling it
    when that header is missing; one identity source naming both headers would
    refuse every caller that sends one of them. So there are two authorizers over
    one function: ``platform`` (keyed on ``x-api-key``) for the platform's own
    routes, and ``openai`` (keyed on ``Authorization``, the ``openai`` client's
    Bearer token) for ``/openai/v1``. The function reads the key from that same
    header first, so a cached answer is always that key's. With a cache of 0 both
    take their key from either header, uncached, as before.
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, deployment: Deployment, code: lambda_.Code
    ) -> None:
        super().__init__(scope, construct_id)
        budget = deployment.settings.concurrency
        self.function = PlatformFunction(
            self,
            "Function",
            deployment=deployment,
            code=code,
            description="Switchyard API key authorizer: x-api-key or Authorization: Bearer",
            environment={},
            layers=[],
            timeout=AUTHORIZER_TIMEOUT,
            memory_size=AUTHORIZER_MEMORY_MB,
            tracing=False,
            reserved_concurrency=budget.authorizer,
        )
        self.cache_seconds = budget.authorizer_cache_seconds
        self.authorizer = self._authorizer("Authorizer", "x-api-key")
        self.openai_authorizer = self._authorizer("OpenAIAuthorizer", "Authorization")

    def _authorizer(self, construct_id: str, header: str) -> apigw.RequestAuthorizer:
        cached = self.cache_seconds > 0
        authorizer = apigw.RequestAuthorizer(
            self,
            construct_id,
            handler=self.function.function,
            identity_sources=[apigw.IdentitySource.header(header)] if cached else [],
            results_cache_ttl=Duration.seconds(self.cache_seconds),
        )
        if not cached:
            # Optional without a cache; CDK would write an empty string for none.
            cfn = authorizer.node.default_child
            assert isinstance(cfn, apigw.CfnAuthorizer)
            cfn.add_property_deletion_override("IdentitySource")
        return authorizer


class Api(Construct):
    """REST API Gateway: every method needs an API key; each key belongs to one
    tenant (tag ``switchyard:tenant``) and to its tier's usage plan. The key source
    is the key authorizer, so a tenant may send its key as ``x-api-key`` or as a
    Bearer token (the ``openai`` client's way)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        deployment: Deployment,
        authorizer_code: lambda_.Code,
    ) -> None:
        super().__init__(scope, construct_id)
        names = deployment.names
        manifest = deployment.manifest
        self.access_logs = logs.LogGroup(
            self, "AccessLogs", retention=LOG_RETENTION, removal_policy=deployment.removal_policy
        )
        self.key_authorizer = KeyAuthorizer(
            self, "KeyAuthorizer", deployment=deployment, code=authorizer_code
        )
        self.rest_api = apigw.RestApi(
            self,
            "RestApi",
            rest_api_name=names.rest_api,
            description="Switchyard: function-per-model inference",
            endpoint_types=[apigw.EndpointType.REGIONAL],
            # Passed to the functions as bytes (base64 in the event, which Mangum
            # decodes) rather than as text: the Open Inference Protocol's binary
            # tensors. A JSON body is text as before; a binary answer is bytes where
            # the caller accepts this type.
            binary_media_types=[BINARY_MEDIA_TYPE],
            api_key_source_type=apigw.ApiKeySourceType.AUTHORIZER,
            # The usage plans still apply: the authorizer only names the key.
            default_method_options=apigw.MethodOptions(
                api_key_required=True,
                authorization_type=apigw.AuthorizationType.CUSTOM,
                authorizer=self.key_authorizer.authorizer,
            ),
            # AWS::ApiGateway::Account is one per account and region: setting it
            # replaces the role already there, so only where the manifest asks.
            cloud_watch_role=deployment.settings.api_gateway_cloudwatch_role,
            deploy_options=apigw.StageOptions(
                stage_name=deployment.stage,
                access_log_destination=apigw.LogGroupLogDestination(self.access_logs),
                access_log_format=apigw.AccessLogFormat.custom(json.dumps(_ACCESS_LOG)),
                metrics_enabled=True,
                logging_level=apigw.MethodLoggingLevel.ERROR,
                data_trace_enabled=False,
                tracing_enabled=True,
                # Every tenant together (each tenant's own is its tier's usage plan).
                throttling_rate_limit=deployment.settings.concurrency.throttle_rate,
                throttling_burst_limit=deployment.settings.concurrency.throttle_burst,
            ),
        )
        if deployment.settings.api_gateway_cloudwatch_role:
            acknowledge(
                self.rest_api,
                "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
                "AmazonAPIGatewayPushToCloudWatchLogs]",
                "API Gateway's account-level logging role; AWS's managed policy is the "
                "documented grant for the stage's execution logs.",
            )
        skip_checkov(
            self.rest_api.deployment_stage,
            "CKV_AWS_120",
            "Every answer is one tenant's prediction for one request (POST bodies, "
            "request IDs); a response cache could only serve stale or another "
            "tenant's answers.",
        )
        acknowledge(
            self.rest_api,
            "AwsSolutions-COG4",
            "Tenants are machine clients identified by API keys bound to usage plans "
            "(through the key authorizer on every method); the router resolves each key "
            "to its tenant and scopes every result to it. There are no end users to put "
            "in a Cognito pool.",
        )
        acknowledge(
            self.rest_api,
            "AwsSolutions-APIG3",
            "Per-key usage plans (rate, burst, daily quota) bound every tenant; a WAF "
            "web ACL is an account-level choice left to the operator.",
        )
        self.validator = self.rest_api.add_request_validator(
            "Validator", validate_request_body=True, validate_request_parameters=True
        )
        self._gateway_responses()

        v1 = self.rest_api.root.add_resource("v1")
        self._models = v1.add_resource("models")
        self._model_resources: dict[str, apigw.Resource] = {}
        self._request = v1.add_resource("requests").add_resource("{request_id}")
        self._jobs = v1.add_resource("jobs")
        self._job = self._jobs.add_resource("{job_id}")

        self.usage_plans: dict[str, apigw.UsagePlan] = {}
        for tier_name, tier in manifest.tiers.items():
            plan = self.rest_api.add_usage_plan(
                f"Plan-{tier_name}",
                name=names.usage_plan(tier_name),
                description=f"Tenants of the {tier_name} tier",
                throttle=apigw.ThrottleSettings(rate_limit=tier.rate, burst_limit=tier.burst),
                quota=apigw.QuotaSettings(limit=tier.quota_per_day, period=apigw.Period.DAY),
            )
            plan.add_api_stage(stage=self.rest_api.deployment_stage)
            self.usage_plans[tier_name] = plan
        self.api_keys: dict[str, apigw.ApiKey] = {}
        for tenant_name, tenant in manifest.tenants.items():
            key = apigw.ApiKey(
                self,
                f"Key-{tenant_name}",
                api_key_name=names.api_key(tenant_name),
                description=f"Tenant {tenant_name} ({tenant.tier})",
                enabled=True,
            )
            Tags.of(key).add(TENANT_TAG, tenant_name)
            self.usage_plans[tenant.tier].add_api_key(key)
            self.api_keys[tenant_name] = key

    @property
    def tenant_keys(self) -> dict[str, str]:
        """Tenant -> its API key's id: the routers' ``tenant_keys`` setting. API
        Gateway names the verified key's id in each request, so no router needs (or
        may) read a key's value."""
        return {tenant: key.key_id for tenant, key in self.api_keys.items()}

    def _gateway_responses(self) -> None:
        def respond(
            name: str, kind: apigw.ResponseType, status: str, message: str, code: str
        ) -> None:
            self.rest_api.add_gateway_response(
                name,
                type=kind,
                status_code=status,
                templates={"application/json": _ERROR_BODY % (message, code)},
            )

        # A body that fails the model's request schema: 422, as the router answers.
        respond(
            "InvalidBody",
            apigw.ResponseType.BAD_REQUEST_BODY,
            "422",
            _VALIDATION_MESSAGE,
            "invalid_input",
        )
        for name, kind, answer in (
            ("NoKey", apigw.ResponseType.UNAUTHORIZED, UNAUTHORIZED),
            ("BadKey", apigw.ResponseType.INVALID_API_KEY, FORBIDDEN),
            ("Throttled", apigw.ResponseType.THROTTLED, THROTTLED),
            ("Quota", apigw.ResponseType.QUOTA_EXCEEDED, QUOTA_EXCEEDED),
            ("TooLarge", apigw.ResponseType.REQUEST_TOO_LARGE, PAYLOAD_TOO_LARGE),
        ):
            respond(name, kind, str(answer.status), answer.message, answer.code)

    def _integration(
        self, function: lambda_.IFunction, *, stream: bool = False
    ) -> apigw.LambdaIntegration:
        """A Lambda proxy integration. Streamed: API Gateway invokes the function with
        InvokeWithResponseStream (the ``response-streaming-invocations`` URI) and
        passes its response on as it comes, for up to the stream timeout."""
        if not stream:
            return apigw.LambdaIntegration(
                function, proxy=True, timeout=API_INTEGRATION_TIMEOUT, allow_test_invoke=False
            )
        return apigw.LambdaIntegration(
            function,
            proxy=True,
            timeout=STREAM_INTEGRATION_TIMEOUT,
            allow_test_invoke=False,
            response_transfer_mode=apigw.ResponseTransferMode.STREAM,
        )

    def _model(self, model: str) -> apigw.Resource:
        """/v1/models/<model>"""
        if model not in self._model_resources:
            self._model_resources[model] = self._models.add_resource(model)
        return self._model_resources[model]

    def add_predict_route(
        self, model: str, spec: ModelSpec, function: lambda_.IFunction, *, stream: bool = False
    ) -> None:
        """POST /v1/models/<model>/predict → that model's router function (streamed
        when that function runs under the Lambda Web Adapter).

        The gateway checks the body against the model's own predict request
        (``switchyard.bodies.predict_body_for``: its inputs as its signature says,
        and a version pin), the schema the router's API document states, before a
        function runs; the router checks the signature again, naming each input.
        """
        schema = request_schema(
            predict_body_for(model, (spec.signature,), spec.max_inputs_per_request)
        )
        body = self.rest_api.add_model(
            f"PredictBody-{model}",
            content_type="application/json",
            description=f"Predict request for {model}",
            schema=gateway_schema(schema),
        )
        self._model(model).add_resource("predict").add_method(
            "POST",
            self._integration(function, stream=stream),
            request_validator=self.validator,
            request_models={"application/json": body},
        )

    def add_generate_route(self, model: str, function: lambda_.IFunction) -> None:
        """POST /v1/models/<model>/generate → a generation model's router function,
        streamed (server-sent events when the body asks for a stream). The router
        checks the body against the model's signature; the gateway only the key."""
        self._model(model).add_resource("generate").add_method(
            "POST", self._integration(function, stream=True)
        )

    def add_openai_routes(self, function: lambda_.IFunction) -> None:
        """GET and POST /openai/v1/{proxy+} → the OpenAI-compatible function, streamed:
        models, chat/completions, completions, embeddings. The model is named in the
        body, so these are not per-model routes, and the router answers the paths
        it does not serve."""
        proxy = (
            self.rest_api.root.add_resource("openai").add_resource("v1").add_resource("{proxy+}")
        )
        integration = self._integration(function, stream=True)
        for method in ("GET", "POST"):
            # Keyed on the Bearer token (KeyAuthorizer), the openai client's way.
            proxy.add_method(method, integration, authorizer=self.key_authorizer.openai_authorizer)

    def add_protocol_routes(self, function: lambda_.IFunction) -> None:
        """GET /v2 and GET and POST /v2/{proxy+} → the function that serves every
        model (the OpenAI-compatible API's): the Open Inference Protocol v2's health,
        metadata and infer paths. A path of its own per model would take about 20
        of the stack's 500 resources each (resources, methods, permissions); the
        router answers the paths it does not serve. Keyed on x-api-key, as
        tritonclient and KServe's SDK send it (``headers=``)."""
        root = self.rest_api.root.add_resource("v2")
        integration = self._integration(function, stream=True)
        root.add_method("GET", integration)
        proxy = root.add_resource("{proxy+}")
        for method in ("GET", "POST"):
            proxy.add_method(method, integration)

    def add_platform_routes(self, function: lambda_.IFunction) -> None:
        """GET /v1/models, GET and DELETE (cancel) /v1/requests/{request_id}, and the
        batch jobs (POST and GET /v1/jobs, GET and DELETE /v1/jobs/{job_id}): not tied
        to one model."""
        integration = self._integration(function)
        self._models.add_method("GET", integration)
        for method in ("GET", "DELETE"):
            self._request.add_method(
                method,
                integration,
                request_validator=self.validator,
                request_parameters={"method.request.path.request_id": True},
            )
        for method in ("GET", "POST"):
            self._jobs.add_method(method, integration)
        for method in ("GET", "DELETE"):
            self._job.add_method(
                method,
                integration,
                request_validator=self.validator,
                request_parameters={"method.request.path.job_id": True},
            )


# JSON Schema's keywords as aws_apigateway.JsonSchema names them, where not in snake case.
_RENAMED = {"not": "not_", "$ref": "ref", "$schema": "schema", "$id": "id"}
_NESTED = {"items", "additionalProperties", "additionalItems", "not", "contains", "propertyNames"}
_LISTS = {"anyOf", "oneOf", "allOf"}
_MAPS = {"properties", "patternProperties", "definitions"}


def gateway_schema(schema: dict[str, Any]) -> apigw.JsonSchema:
    """A body's JSON Schema (``switchyard.bodies.request_schema``) as API Gateway's
    model: draft 4, in CDK's types."""
    return _json_schema({**draft4(schema), "$schema": apigw.JsonSchemaVersion.DRAFT4})


def _json_schema(schema: dict[str, Any]) -> apigw.JsonSchema:
    kwargs: dict[str, Any] = {}
    for key, value in schema.items():
        name = _RENAMED.get(key) or re.sub(r"(?<!^)([A-Z])", r"_\1", key).lower()
        if key == "type":
            value = (
                apigw.JsonSchemaType[value.upper()]
                if isinstance(value, str)
                else [apigw.JsonSchemaType[v.upper()] for v in value]
            )
        elif key in _NESTED and isinstance(value, dict):
            value = _json_schema(value)
        elif key in _LISTS or (key == "items" and isinstance(value, list)):
            value = [_json_schema(v) for v in value]
        elif key in _MAPS:
            value = {k: _json_schema(v) for k, v in value.items()}
        kwargs[name] = value
    return apigw.JsonSchema(**kwargs)
