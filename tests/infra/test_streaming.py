"""Generation and the OpenAI-compatible API in AWS: a token travels API Gateway (a
STREAM integration, InvokeWithResponseStream) → the Lambda Web Adapter → uvicorn and
the router app → server-sent events; and the streaming functions may reach what
they read (results with their chunks, tokenizers beside artifacts)."""

from __future__ import annotations

import json
from typing import Any

from aws_cdk.assertions import Template

from stacks.cloud import (
    LAMBDA_ARCHITECTURE,
    STREAM_INTEGRATION_TIMEOUT,
    WEB_ADAPTER_ENVIRONMENT,
    WEB_ADAPTER_HANDLER,
)
from stacks.endpoint import generates
from switchyard.manifest import Manifest

from .conftest import Synthesized
from .helpers import (
    granted,
    integrated_function,
    joined,
    logical_id,
    methods_at,
    named,
    resource_paths,
    router_function,
    statements,
)

OPENAI_PATH = "/openai/v1/{proxy+}"
WEB_ADAPTER_ARN = "arn:aws:lambda:{region}:753240598075:layer:LambdaAdapterLayerX86:25"


def _manifest(synthesized: Synthesized) -> Manifest:
    return synthesized.platform.deployment.manifest


def _function(template: Template, name: str) -> dict[str, Any]:
    return template.find_resources("AWS::Lambda::Function")[name]


def _openai_function(template: Template) -> str:
    (name,) = {integrated_function(m) for m in methods_at(template, OPENAI_PATH).values()}
    return name


def _streaming_functions(synthesized: Synthesized) -> set[str]:
    """The OpenAI-compatible function and every generation model's router."""
    template = synthesized.serving
    return {_openai_function(template)} | {
        router_function(template, model)[0]
        for model, spec in _manifest(synthesized).models.items()
        if generates(spec)
    }


def _role(fn: dict[str, Any]) -> str:
    return str(fn["Properties"]["Role"]["Fn::GetAtt"][0])


def test_the_openai_api_is_one_function_behind_openai_v1(generative: Synthesized) -> None:
    template = generative.serving
    # GIVEN the OpenAI-compatible paths (models, chat/completions, completions, embeddings)
    methods = methods_at(template, OPENAI_PATH)
    # THEN GET and POST on /openai/v1/{proxy+} reach one function
    assert set(methods) == {"GET", "POST"}
    name = _openai_function(template)
    env = _function(template, name)["Properties"]["Environment"]["Variables"]
    # a router that knows every model's queues (the model is named in the body)
    assert env["POWERTOOLS_SERVICE_NAME"] == "router"
    queues = json.dumps(env["SWITCHYARD_QUEUES"])
    for model in _manifest(generative).models:
        assert f'\\"{model}\\":{{\\"realtime\\"' in queues, model
    # and it is not one model's router
    assert "SWITCHYARD_APPCONFIG_ENVIRONMENT" not in env
    # its routing comes from every model's AppConfig document
    assert env["SWITCHYARD_ROUTING_SOURCE"] == "appconfig-extension"
    prefetch = env["AWS_APPCONFIG_EXTENSION_PREFETCH_LIST"].split(",")
    assert [p.split("/")[4] for p in prefetch] == list(_manifest(generative).models)


def test_generation_models_and_only_they_have_a_generate_route(generative: Synthesized) -> None:
    template = generative.serving
    paths = set(resource_paths(template).values())
    for model, spec in _manifest(generative).models.items():
        route = f"/v1/models/{model}/generate"
        if not generates(spec):
            assert route not in paths, f"{model} generates nothing"
            continue
        # POST only, to the model's own router, beside its predict route
        methods = methods_at(template, route)
        assert set(methods) == {"POST"}
        assert integrated_function(methods["POST"]) == router_function(template, model)[0]
        assert f"/v1/models/{model}/predict" in paths


def test_methods_of_streaming_functions_stream_through_invoke_with_response_stream(
    generative: Synthesized,
) -> None:
    template = generative.serving
    streaming = _streaming_functions(generative)
    methods = template.find_resources("AWS::ApiGateway::Method")
    for name, method in methods.items():
        integration = method["Properties"]["Integration"]
        uri = joined(integration["Uri"])
        if integrated_function(method) in streaming:
            # every route of a function under the adapter (its response is a stream,
            # not the JSON a buffered proxy integration expects)
            assert integration["Type"] == "AWS_PROXY"
            assert integration["ResponseTransferMode"] == "STREAM", name
            assert ":lambda:path/2021-11-15/functions/" in uri
            assert uri.endswith("/response-streaming-invocations"), uri
            assert integration["TimeoutInMillis"] == STREAM_INTEGRATION_TIMEOUT.to_milliseconds()
        else:
            assert integration.get("ResponseTransferMode", "BUFFERED") == "BUFFERED", name
            assert ":lambda:path/2015-03-31/functions/" in uri and uri.endswith("/invocations")


def test_streaming_functions_run_the_router_app_under_the_web_adapter(
    generative: Synthesized,
) -> None:
    template = generative.serving
    adapter = WEB_ADAPTER_ARN.format(region=_manifest(generative).platform.region)
    streaming = _streaming_functions(generative)
    assert len(streaming) >= 2, "the OpenAI function and a generation model's router"
    for name, fn in template.find_resources("AWS::Lambda::Function").items():
        props = fn["Properties"]
        layers = props.get("Layers", [])
        if name not in streaming:
            assert adapter not in layers, f"{name} is not a streaming function"
            continue
        # the adapter's layer, for the functions' architecture
        assert adapter in layers
        assert props["Architectures"] == [LAMBDA_ARCHITECTURE.name] == ["x86_64"]
        # the adapter wraps the runtime, starts run.sh (uvicorn on the router app)
        # and streams the app's response once /healthz answers
        assert props["Handler"] == WEB_ADAPTER_HANDLER == "run.sh"
        env = props["Environment"]["Variables"]
        assert {k: env[k] for k in WEB_ADAPTER_ENVIRONMENT} == {
            "AWS_LAMBDA_EXEC_WRAPPER": "/opt/bootstrap",
            "AWS_LWA_INVOKE_MODE": "response_stream",
            "PORT": "8080",
            "AWS_LWA_READINESS_CHECK_PATH": "/healthz",
        }
        # it ends its stream before API Gateway would cut it
        assert props["Timeout"] * 1000 < STREAM_INTEGRATION_TIMEOUT.to_milliseconds()


def test_the_openai_function_reaches_every_realtime_queue_and_what_streaming_reads(
    generative: Synthesized,
) -> None:
    template, data = generative.serving, generative.data
    manifest = _manifest(generative)
    names = manifest.names("dev")
    granted_ = statements(template, _role(_function(template, _openai_function(template))))
    # sends to every model's realtime queue (the models stack's, named by their ARNs),
    # and to no batch queue
    realtime = {json.dumps(named("sqs", names.queue(m, "realtime"))) for m in manifest.models}
    assert set(granted(granted_, "sqs:SendMessage")) == realtime
    # records requests, reads results and a generation's chunks (Query), in the results table
    results = logical_id(data, "AWS::DynamoDB::Table", {"TableName": names.results_table})
    for action in ("GetItem", "PutItem", "UpdateItem", "Query", "BatchGetItem"):
        assert any(results in r for r in granted(granted_, f"dynamodb:{action}")), action
    registry = logical_id(data, "AWS::DynamoDB::Table", {"TableName": names.registry_table})
    assert any(registry in r for r in granted(granted_, "dynamodb:Query"))
    # reads tokenizers beside artifacts; claim-checks payloads
    assert _objects_of(granted_, "s3:GetObject") == {
        names.artifacts_bucket,
        names.payloads_bucket,
    }
    assert _objects_of(granted_, "s3:PutObject") == {names.payloads_bucket}
    # reads every model's routing document
    assert len(granted(granted_, "appconfig:GetLatestConfiguration")) == len(manifest.models)


def test_generation_routers_query_results_and_read_tokenizers(generative: Synthesized) -> None:
    template, data = generative.serving, generative.data
    manifest = _manifest(generative)
    names = manifest.names("dev")
    results = logical_id(data, "AWS::DynamoDB::Table", {"TableName": names.results_table})
    for model, spec in manifest.models.items():
        _, fn = router_function(template, model)
        granted_ = statements(template, _role(fn))
        queries_results = any(results in r for r in granted(granted_, "dynamodb:Query"))
        reads_artifacts = names.artifacts_bucket in _objects_of(granted_, "s3:GetObject")
        # only a generation model's router reads chunks and tokenizers
        assert queries_results is reads_artifacts is generates(spec), model


def _objects_of(statements_: list[dict[str, Any]], action: str) -> set[str]:
    """The manifest names of the buckets whose objects ``action`` is allowed on."""
    out = set()
    for resource in granted(statements_, action):
        text = joined(json.loads(resource))
        assert text.endswith("/*"), text
        out.add(text.removeprefix("arn:<token>:s3:::").split("-<token>-")[0])
    return out
