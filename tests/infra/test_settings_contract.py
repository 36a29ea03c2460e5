"""What the CDK app hands deployed code is exactly what that code reads at cold start,
and no deployed role can read a tenant's API key."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk.assertions import Template

from switchyard.manifest import Manifest
from switchyard.settings import (
    RouterSettings,
    Settings,
    SettingsError,
    SplitterSettings,
    WorkerSettings,
)
from tests.environment import read_settings

from .helpers import logical_id

TOKEN = "deploy-time-value"


def resolved(value: Any, token: str = TOKEN) -> str:
    """A template value with each deploy-time reference replaced by ``token``
    (``Fn::Join`` keeps its literal parts): the string the process would read."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join(resolved(p, token) for p in parts)
    return token


def lambda_environments(template: Template) -> dict[str, dict[str, str]]:
    return {
        name: {k: resolved(v) for k, v in fn["Properties"]["Environment"]["Variables"].items()}
        for name, fn in template.find_resources("AWS::Lambda::Function").items()
        if "SWITCHYARD_QUEUES" in fn["Properties"].get("Environment", {}).get("Variables", {})
    }


def worker_environments(template: Template) -> dict[str, dict[str, str]]:
    out = {}
    for name, task in template.find_resources("AWS::ECS::TaskDefinition").items():
        (container,) = task["Properties"]["ContainerDefinitions"]
        out[name] = {e["Name"]: resolved(e["Value"]) for e in container["Environment"]}
    return out


def kind_of(env: dict[str, str]) -> type[Settings]:
    return {"router": RouterSettings, "batch-splitter": SplitterSettings}[
        env["POWERTOOLS_SERVICE_NAME"]
    ]


def test_every_function_reads_a_complete_valid_environment(
    serving_template: Template, manifest: Manifest, monkeypatch: pytest.MonkeyPatch
) -> None:
    environments = lambda_environments(serving_template)
    # GIVEN a router per model, the requests router, the OpenAI-compatible router and
    # the splitter
    assert len(environments) == len(manifest.models) + 3
    for env in environments.values():
        # WHEN each reads its settings as its handler does at init
        settings = read_settings(kind_of(env), env, monkeypatch)
        # THEN they parse, with the manifest's numbers
        assert settings.result_ttl_seconds == manifest.platform.result_ttl_seconds
        assert settings.visibility_timeout_seconds == manifest.platform.visibility_timeout_seconds
        assert settings.aws_endpoint_url is None
        # AND a router knows each tenant's caps, its queued work per model included
        if isinstance(settings, RouterSettings):
            assert {tenant: limits.queued for tenant, limits in settings.tenant_limits.items()} == {
                name: manifest.tiers[t.tier].max_queued for name, t in manifest.tenants.items()
            }


@pytest.mark.parametrize(
    ("synthesized", "manifest_of"),
    [("dev", "manifest"), ("pooled_dev", "pooled")],
    ids=["project", "with a pool"],
)
def test_every_worker_reads_a_complete_valid_environment(
    request: pytest.FixtureRequest,
    synthesized: str,
    manifest_of: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN each worker service's environment: a model's own, or a pool's
    manifest: Manifest = request.getfixturevalue(manifest_of)
    environments = worker_environments(request.getfixturevalue(synthesized).serving)
    assert len(environments) == len(manifest.services())
    services = {}
    for env in environments.values():
        # WHEN a worker reads its settings as it does at start
        settings = read_settings(WorkerSettings, env, monkeypatch)
        assert isinstance(settings, WorkerSettings)
        # THEN it knows the queues of exactly the models it serves
        assert set(settings.queues) == set(settings.served_models)
        assert settings.ready_file and settings.prediction_log_stream
        # AND each tenant's weight in its batches
        assert settings.tenant_weights == {
            name: manifest.tiers[tenant.tier].weight for name, tenant in manifest.tenants.items()
        }
        services[settings.service] = tuple(settings.served_models)
        if settings.worker_pool:
            pool = manifest.pools[settings.worker_pool]
            assert settings.memory_budget_mib == pool.memory_budget_mib
            assert settings.device_memory_budget_mib == pool.device_memory_budget_mib
    # (a CPU pool also serves the models it takes on overflow)
    assert services == {
        service: manifest.service_models(service) for service in manifest.services()
    }


def test_a_missing_variable_stops_the_cold_start_with_its_name(
    serving_template: Template, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = next(iter(lambda_environments(serving_template).values()))
    del env["SWITCHYARD_RESULTS_TABLE"]
    with pytest.raises(SettingsError, match="SWITCHYARD_RESULTS_TABLE"):
        read_settings(kind_of(env), env, monkeypatch)


def test_routers_know_tenants_by_api_key_id(serving_template: Template, manifest: Manifest) -> None:
    keys = {
        tenant: logical_id(serving_template, "AWS::ApiGateway::ApiKey", {"Name": name})
        for tenant in manifest.tenants
        for name in [manifest.names("dev").api_key(tenant)]
    }
    for fn in serving_template.find_resources("AWS::Lambda::Function").values():
        variables = fn["Properties"].get("Environment", {}).get("Variables", {})
        if variables.get("POWERTOOLS_SERVICE_NAME") != "router":
            continue
        tenant_keys = json.dumps(variables["SWITCHYARD_TENANT_KEYS"])
        for tenant, key in keys.items():
            assert f'\\"{tenant}\\":\\"' in tenant_keys
            assert json.dumps({"Ref": key}) in tenant_keys


def _allowed_actions(template: Template) -> list[tuple[str, str]]:
    """(policy, action) for every Allow statement of every policy in a template."""
    found = []
    documents = [
        (name, p["Properties"]["PolicyDocument"])
        for kind in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy")
        for name, p in template.find_resources(kind).items()
    ]
    for name, role in template.find_resources("AWS::IAM::Role").items():
        documents += [(name, p["PolicyDocument"]) for p in role["Properties"].get("Policies", [])]
    for name, document in documents:
        for statement in document["Statement"]:
            if statement.get("Effect") != "Allow":
                continue
            actions = statement["Action"]
            for action in [actions] if isinstance(actions, str) else actions:
                found.append((name, action.lower()))
    return found


@pytest.mark.parametrize("stage", ["dev", "prod"])
def test_no_role_can_read_an_api_key(stage: str, request: pytest.FixtureRequest) -> None:
    prefix = "" if stage == "dev" else "prod_"
    for fixture in ("serving_template", "data_template"):
        template: Template = request.getfixturevalue(prefix + fixture)
        allowed = _allowed_actions(template)
        assert allowed, "the template has policies to check"
        readers = [(p, a) for p, a in allowed if a in {"*", "apigateway:*", "apigateway:get"}]
        assert readers == [], f"these may read API keys (and their values): {readers}"


def test_every_function_environment_fits_lambdas_limit(serving_template: Template) -> None:
    # Lambda refuses more than 4 KB of environment variables. Deploy-time values are
    # at most a queue URL long (about 90 characters); tenant key ids are 10.
    for name, fn in serving_template.find_resources("AWS::Lambda::Function").items():
        variables = fn["Properties"].get("Environment", {}).get("Variables", {})
        size = sum(len(k) + len(resolved(v, "q" * 90)) for k, v in variables.items())
        assert size < 4096, f"{name}: about {size} bytes of environment"
