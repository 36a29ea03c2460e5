"""`make deploy-check` on the templates this tier synthesizes: what a deploy of
each stage creates, the quotas it needs, and nothing that would stop it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stacks.deploy_check import INSTANCE_VCPUS, prerequisites, stage_report
from switchyard.manifest import Manifest, load_manifest

from .conftest import Synthesized

# CloudFormation's limits on one stack.
STACK_RESOURCES = 500
STACK_OUTPUTS = 200
TEMPLATE_BYTES = 1_000_000


def templates(synthesized: Synthesized) -> dict[str, dict]:
    return {
        synthesized.platform.data.stack_name: synthesized.data.to_json(),
        synthesized.platform.models.stack_name: synthesized.models.to_json(),
        synthesized.platform.serving.stack_name: synthesized.serving.to_json(),
    }


@pytest.mark.parametrize("stage", ["dev", "prod"])
def test_every_stack_of_the_project_is_within_cloudformations_limits(
    request: pytest.FixtureRequest, stage: str
) -> None:
    # GIVEN a stage of the project
    synthesized: Synthesized = request.getfixturevalue(stage)
    for name, template in templates(synthesized).items():
        # THEN each of its stacks is within what CloudFormation takes, with room for
        # more models (each adds about 16 resources to serving, 18 to models)
        resources = len(template["Resources"])
        assert resources <= STACK_RESOURCES - 80, f"{name}: {resources} resources"
        assert len(template.get("Outputs", {})) <= STACK_OUTPUTS, name
        assert len(json.dumps(template)) < TEMPLATE_BYTES * 0.8, name
    # and the models stack has each model's queues, the serving stack none of them
    assert len(synthesized.models.find_resources("AWS::SQS::Queue")) == 4 * len(
        synthesized.platform.deployment.manifest.models
    )
    serving_queues = synthesized.serving.find_resources("AWS::SQS::Queue").values()
    assert {q["Properties"]["QueueName"] for q in serving_queues} <= {
        synthesized.platform.deployment.names.batch_drop_queue,
        synthesized.platform.deployment.names.batch_drop_dlq,
    }


@pytest.mark.parametrize(
    ("stage", "synthesized", "manifest_of"),
    [
        ("dev", "dev", "manifest"),
        ("prod", "prod", "manifest"),
        ("dev", "pooled_dev", "pooled"),
        ("prod", "pooled_prod", "pooled"),
    ],
    ids=["dev", "prod", "dev with a pool", "prod with a pool"],
)
def test_a_stage_has_nothing_that_would_stop_a_deploy(
    request: pytest.FixtureRequest, stage: str, synthesized: str, manifest_of: str
) -> None:
    manifest: Manifest = request.getfixturevalue(manifest_of)
    report = stage_report(manifest, stage, templates(request.getfixturevalue(synthesized)))
    assert report.problems == [], "\n".join(report.lines())
    assert all(findings == [] for findings in report.lint.values())


def test_a_pools_hosts_are_in_the_report(
    dev: Synthesized, manifest: Manifest, pooled_dev: Synthesized, pooled: Manifest
) -> None:
    # GIVEN the project's dev stage, and the same with a CPU pool (c7i.xlarge, 4 vCPUs)
    def standard_vcpus(m: Manifest, synthesized: Synthesized) -> int:
        report = stage_report(m, "dev", templates(synthesized))
        return next(q.needs for q in report.quotas if q.code == "L-1216C47A")

    # THEN the pool's hosts, at its maximum, count toward the standard instances' quota
    pool_vcpus = pooled.pool_scaling_policy("long-tail", "dev").max_tasks * 4
    assert standard_vcpus(pooled, pooled_dev) - standard_vcpus(manifest, dev) == pool_vcpus


def test_the_report_needs_the_concurrency_the_functions_reserve(
    dev: Synthesized, manifest: Manifest
) -> None:
    report = stage_report(manifest, "dev", templates(dev))
    lambda_quota = next(q for q in report.quotas if q.code == "L-B99A9384")
    # every family's reservation, and Lambda's 100 unreserved for the rest, which
    # the pooled models' routers share
    assert lambda_quota.needs == sum(manifest.reserved_concurrency("dev").values()) + 100
    pooled = sum(1 for spec in manifest.models.values() if spec.pool is not None)
    assert f"{pooled} of them pooled models' routers" in lambda_quota.why
    # one GPU host per GPU task at most: the GPU services' maximums, 4 vCPUs each
    gpu = next(q for q in report.quotas if q.code == "L-DB2E81BA")
    gpu_tasks = sum(
        manifest.pool_scaling_policy(service, "dev").max_tasks
        if service in manifest.pools
        else manifest.scaling_policy(service, "dev").max_tasks
        for service, models in manifest.services().items()
        if manifest.models[models[0]].compute == "gpu"
    )
    assert gpu.needs == gpu_tasks * 4
    assert "AWS::Lambda::Function" in report.resources[dev.platform.serving.stack_name]
    assert any("L-DB2E81BA" in line for line in report.lines())


def test_a_manifest_past_its_lambda_budget_would_stop_a_deploy(
    dev: Synthesized, manifest: Manifest
) -> None:
    # GIVEN the dev templates, and an account whose limit the manifest says is lower
    # than what they reserve (as an account that has not raised its quota)
    stage = manifest.stages["dev"]  # type: ignore[index]
    budget = stage.concurrency.model_copy(update={"account_limit": 400})
    stages = {**manifest.stages, "dev": stage.model_copy(update={"concurrency": budget})}
    low = manifest.model_copy(update={"stages": stages})
    # WHEN the check reads them
    report = stage_report(low, "dev", templates(dev))
    # THEN it says so
    assert any("account_limit 400" in problem for problem in report.problems)


def test_an_instance_type_of_unknown_size_is_reported(dev: Synthesized, manifest: Manifest):
    known = dict(INSTANCE_VCPUS)
    try:
        del INSTANCE_VCPUS["g5.xlarge"]
        report = stage_report(manifest, "dev", templates(dev))
    finally:
        INSTANCE_VCPUS.clear()
        INSTANCE_VCPUS.update(known)
    assert any("g5.xlarge" in problem for problem in report.problems)


def test_a_region_without_the_pinned_layers_is_a_prerequisite_missing(tmp_path: Path):
    from stacks.assets import MANIFEST_FILE

    text = MANIFEST_FILE.read_text()
    manifest = load_manifest(MANIFEST_FILE)
    moved = tmp_path / "manifest.toml"
    moved.write_text(
        text.replace(f'region = "{manifest.platform.region}"', 'region = "ap-south-2"', 1)
    )
    needed, missing = prerequisites(load_manifest(moved))
    assert any("Docker with buildx" in line for line in needed)
    assert missing and "appconfig_extension_arn" in missing[0]
    assert prerequisites(manifest)[1] == []
