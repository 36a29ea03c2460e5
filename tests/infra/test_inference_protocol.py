"""The Open Inference Protocol v2 on API Gateway: /v2 and /v2/{proxy+} reach the
function that serves every model (the OpenAI-compatible API's), and each method
needs a key from x-api-key (tritonclient's ``headers=``), through the key
authorizer, under the usage plans."""

from __future__ import annotations

from aws_cdk.assertions import Template

from .helpers import integrated_function, methods_at

OPENAI_PATH = "/openai/v1/{proxy+}"


def test_the_protocols_paths_reach_the_every_model_function_with_a_key(
    serving_template: Template,
) -> None:
    # GIVEN the function behind the OpenAI-compatible API, which knows every model
    (every_model,) = {
        integrated_function(m) for m in methods_at(serving_template, OPENAI_PATH).values()
    }
    authorizers = serving_template.find_resources("AWS::ApiGateway::Authorizer")
    for path, wanted in (("/v2", {"GET"}), ("/v2/{proxy+}", {"GET", "POST"})):
        # WHEN the methods at each /v2 path are read
        methods = methods_at(serving_template, path)
        # THEN they are the protocol's, each a proxy integration with that function
        assert set(methods) == wanted, path
        for method in methods.values():
            props = method["Properties"]
            assert integrated_function(method) == every_model, path
            assert props["Integration"]["Type"] == "AWS_PROXY"
            # AND each needs a key, named by the authorizer keyed on x-api-key
            assert props["ApiKeyRequired"] is True
            assert props["AuthorizationType"] == "CUSTOM"
            authorizer = authorizers[props["AuthorizerId"]["Ref"]]["Properties"]
            assert "Authorization" not in str(authorizer.get("IdentitySource", "")), path


def test_binary_tensors_pass_the_gateway_as_bytes(serving_template: Template) -> None:
    # GIVEN the REST API
    (api,) = serving_template.find_resources("AWS::ApiGateway::RestApi").values()
    # THEN octet-stream bodies (binary tensors) reach the function base64-encoded,
    # and nothing else is binary: JSON bodies stay text for the request validators
    assert api["Properties"]["BinaryMediaTypes"] == ["application/octet-stream"]
