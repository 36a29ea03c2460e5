"""ECS: a cluster with GPU and CPU capacity that starts at zero, a worker service
that drains on stop per model with a service of its own, and one per pool, on the
pool's capacity, serving the pool's models (their scaling: ``test_scaling.py``)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk.assertions import Match, Template

from stacks.cloud import TASK_SIZE, WORKER_STOP_TIMEOUT
from switchyard.manifest import MODEL_TAG, POOL_TAG, Manifest

from .conftest import POOL, Synthesized
from .helpers import actions_of, granted, logical_id, named, statements

GPU_AMI = "/aws/service/ecs/optimized-ami/amazon-linux-2023/gpu/recommended/image_id"
CPU_AMI = "/aws/service/ecs/optimized-ami/amazon-linux-2023/recommended/image_id"


def _instance_types(manifest: Manifest, compute: str) -> list[str]:
    """Of the models with a service of their own (a pool has its own hosts)."""
    types = [
        t
        for s in manifest.models.values()
        if s.compute == compute and s.pool is None
        for t in s.instance_types
    ]
    return list(dict.fromkeys(types))


def _own(manifest: Manifest) -> list[str]:
    """The models with a worker service of their own."""
    return [model for model, spec in manifest.models.items() if spec.pool is None]


def _launch_template_for(template: Template, ami: str) -> str:
    parameter = next(
        name for name, p in template.to_json()["Parameters"].items() if p.get("Default") == ami
    )
    return next(
        name
        for name, lt in template.find_resources("AWS::EC2::LaunchTemplate").items()
        if lt["Properties"]["LaunchTemplateData"]["ImageId"] == {"Ref": parameter}
    )


def _service_of(
    template: Template, model: str, variable: str = "SWITCHYARD_WORKER_MODEL"
) -> tuple[str, dict[str, Any]]:
    """The worker task definition of a model's own service (or, with ``variable``
    ``SWITCHYARD_WORKER_POOL``, of a pool's)."""
    for name, task in template.find_resources("AWS::ECS::TaskDefinition").items():
        env = task["Properties"]["ContainerDefinitions"][0]["Environment"]
        if {"Name": variable, "Value": model} in env:
            return name, task
    raise AssertionError(f"no worker task for {model}")


def env_of(task: dict[str, Any]) -> dict[str, Any]:
    """A worker task's container environment."""
    return {
        e["Name"]: e["Value"] for e in task["Properties"]["ContainerDefinitions"][0]["Environment"]
    }


def test_cluster_reports_container_insights(serving_template: Template) -> None:
    serving_template.has_resource_properties(
        "AWS::ECS::Cluster",
        {"ClusterSettings": [{"Name": "containerInsights", "Value": "enabled"}]},
    )


def test_gpu_capacity_is_the_gpu_ami_with_manifest_instance_types_from_zero(
    serving_template: Template, manifest: Manifest
) -> None:
    launch_template = _launch_template_for(serving_template, GPU_AMI)
    serving_template.has_resource_properties(
        "AWS::AutoScaling::AutoScalingGroup",
        {
            "MinSize": "0",
            "MixedInstancesPolicy": {
                "LaunchTemplate": {
                    "LaunchTemplateSpecification": {
                        "LaunchTemplateId": {"Ref": launch_template},
                        "Version": Match.any_value(),
                    },
                    "Overrides": [{"InstanceType": t} for t in _instance_types(manifest, "gpu")],
                },
                "InstancesDistribution": Match.any_value(),
            },
        },
    )
    serving_template.has_resource_properties(
        "AWS::ECS::CapacityProvider",
        {
            "AutoScalingGroupProvider": Match.object_like(
                {"ManagedScaling": Match.object_like({"Status": "ENABLED", "TargetCapacity": 100})}
            )
        },
    )


def test_cpu_capacity_serves_small_models(serving_template: Template, manifest: Manifest) -> None:
    launch_template = _launch_template_for(serving_template, CPU_AMI)
    serving_template.has_resource_properties(
        "AWS::AutoScaling::AutoScalingGroup",
        {
            "MinSize": "0",
            "MixedInstancesPolicy": Match.object_like(
                {
                    "LaunchTemplate": {
                        "LaunchTemplateSpecification": Match.object_like(
                            {"LaunchTemplateId": {"Ref": launch_template}}
                        ),
                        "Overrides": [
                            {"InstanceType": t} for t in _instance_types(manifest, "cpu")
                        ],
                    }
                }
            ),
        },
    )


def test_instances_encrypt_root_volumes_and_hide_their_role_from_tasks(
    serving_template: Template,
) -> None:
    for lt in serving_template.find_resources("AWS::EC2::LaunchTemplate").values():
        data = lt["Properties"]["LaunchTemplateData"]
        assert data["BlockDeviceMappings"][0]["Ebs"]["Encrypted"] is True
        assert data["MetadataOptions"] == {"HttpTokens": "required", "HttpPutResponseHopLimit": 1}


def test_each_model_has_a_worker_service_that_drains_on_stop(
    serving_template: Template, manifest: Manifest
) -> None:
    for model in _own(manifest):
        spec = manifest.models[model]
        task_id, task = _service_of(serving_template, model)
        container = task["Properties"]["ContainerDefinitions"][0]
        assert container["StopTimeout"] == WORKER_STOP_TIMEOUT.to_seconds() == 120
        assert container["StopTimeout"] > manifest.platform.visibility_timeout_seconds
        size = TASK_SIZE[spec.compute]
        assert container["MemoryReservation"] == size.memory_mib
        gpus = [r for r in container.get("ResourceRequirements", []) if r["Type"] == "GPU"]
        assert gpus == ([{"Type": "GPU", "Value": str(size.gpus)}] if size.gpus else [])
        serving_template.has_resource_properties(
            "AWS::ECS::Service",
            {
                "TaskDefinition": {"Ref": task_id},
                "CapacityProviderStrategy": [Match.object_like({"Weight": 1})],
                "DeploymentConfiguration": Match.object_like(
                    {"DeploymentCircuitBreaker": {"Enable": True, "Rollback": True}}
                ),
            },
        )


def test_worker_environment_names_its_model_and_log_stream(
    serving_template: Template, manifest: Manifest
) -> None:
    for model in _own(manifest):
        _, task = _service_of(serving_template, model)
        env = env_of(task)
        assert env["SWITCHYARD_WORKER_MODEL"] == model
        assert (
            env["SWITCHYARD_PREDICTION_LOG_STREAM"] == manifest.names("dev").prediction_log_stream
        )
        assert "AWS_ENDPOINT_URL" not in env


def test_worker_role_may_make_the_batch_calls_it_makes_on_the_results_table(
    serving_template: Template, data_template: Template, manifest: Manifest
) -> None:
    """A batch's statuses in one BatchGetItem, its new results in one
    BatchExecuteStatement of INSERTs and its others in one of UPDATEs, its cache
    entries in one BatchWriteItem: each is an IAM action of its own, not implied by
    GetItem, PutItem or UpdateItem."""
    results = logical_id(
        data_template, "AWS::DynamoDB::Table", {"TableName": manifest.names("dev").results_table}
    )
    for model in _own(manifest):
        _, task = _service_of(serving_template, model)
        granted_ = statements(serving_template, task["Properties"]["TaskRoleArn"]["Fn::GetAtt"][0])
        for action in ("BatchGetItem", "PartiQLInsert", "PartiQLUpdate", "BatchWriteItem"):
            assert any(results in r for r in granted(granted_, f"dynamodb:{action}")), action
        assert not granted(granted_, "dynamodb:PartiQLDelete")
        assert not granted(granted_, "dynamodb:PartiQLSelect")


def test_worker_role_reaches_its_queues_tables_buckets_and_log_stream(
    serving_template: Template, manifest: Manifest
) -> None:
    names = manifest.names("dev")
    for model in _own(manifest):
        _, task = _service_of(serving_template, model)
        granted = statements(serving_template, task["Properties"]["TaskRoleArn"]["Fn::GetAtt"][0])
        actions = actions_of(granted)
        assert {
            "sqs:ReceiveMessage",
            "sqs:DeleteMessage",
            "sqs:ChangeMessageVisibility",
            "dynamodb:GetItem",
            "dynamodb:PutItem",
            "s3:GetObject",
            "s3:PutObject",
            "firehose:PutRecordBatch",
        } <= actions
        # It sends to no work queue: only the batch-drop queue, where the worker that
        # ends a job asks for its callback.
        sent_to = [s["Resource"] for s in granted if "sqs:SendMessage" in s["Action"]]
        drop_queue = logical_id(
            serving_template, "AWS::SQS::Queue", {"QueueName": names.batch_drop_queue}
        )
        assert sent_to == [{"Fn::GetAtt": [drop_queue, "Arn"]}]
        assert env_of(task)["SWITCHYARD_DROP_QUEUE_URL"] == {"Ref": drop_queue}
        assert not {"dynamodb:DeleteItem", "dynamodb:Scan"} & actions
        consumed = json.dumps(
            [s["Resource"] for s in granted if "sqs:ReceiveMessage" in s["Action"]]
        )
        others = [m for m in manifest.models if m != model]
        for other in others:  # the models stack's queues, named by their ARNs
            other_queue = json.dumps(named("sqs", names.queue(other, "realtime")))
            assert other_queue not in consumed, f"{model}'s worker may read {other}'s queue"
        own_queue = json.dumps(named("sqs", names.queue(model, "realtime")))
        assert own_queue in consumed


def test_each_worker_service_is_tagged_with_its_model(
    serving_template: Template, manifest: Manifest
) -> None:
    services = serving_template.find_resources("AWS::ECS::Service")
    tagged = sorted(
        tag["Value"]
        for service in services.values()
        for tag in service["Properties"].get("Tags", [])
        if tag["Key"] == MODEL_TAG
    )
    assert tagged == sorted(_own(manifest))


# --- A pool (the project's manifest plus a CPU pool of three models) ---------------


def test_a_pool_is_one_service_and_its_models_have_none_of_their_own(
    pooled_dev: Synthesized, pooled: Manifest
) -> None:
    template = pooled_dev.serving
    # one service per model with a service of its own, and one per pool
    template.resource_count_is("AWS::ECS::Service", len(pooled.services()))
    for model in pooled.pool_models(POOL):
        with pytest.raises(AssertionError, match="no worker task"):
            _service_of(template, model)
    services = template.find_resources("AWS::ECS::Service")
    tags = [
        (tag["Key"], tag["Value"])
        for service in services.values()
        for tag in service["Properties"].get("Tags", [])
    ]
    assert (POOL_TAG, POOL) in tags


def test_a_pool_worker_serves_its_models_within_its_budget(
    pooled_dev: Synthesized, pooled: Manifest
) -> None:
    template = pooled_dev.serving
    spec = pooled.pools[POOL]
    _, task = _service_of(template, POOL, "SWITCHYARD_WORKER_POOL")
    env = env_of(task)
    assert json.loads(env["SWITCHYARD_WORKER_MODELS"]) == list(pooled.pool_models(POOL))
    assert env["SWITCHYARD_MEMORY_BUDGET_MIB"] == str(spec.memory_budget_mib)
    assert "SWITCHYARD_DEVICE_MEMORY_BUDGET_MIB" not in env  # a CPU pool
    assert "SWITCHYARD_WORKER_MODEL" not in env
    # the queues of every model it serves (each model's two URLs)
    names = pooled.names("dev")
    queues = json.dumps(env["SWITCHYARD_QUEUES"])
    for model in pooled.pool_models(POOL):
        assert f'\\"{model}\\":' in queues, model
        for lane in ("realtime", "batch"):
            assert f"/{names.queue(model, lane)}" in queues
    container = task["Properties"]["ContainerDefinitions"][0]
    assert container["MemoryReservation"] == TASK_SIZE[spec.compute].memory_mib
    assert not [r for r in container.get("ResourceRequirements", []) if r["Type"] == "GPU"]


def test_a_pool_runs_on_its_own_hosts_of_its_instance_types(
    pooled_dev: Synthesized, pooled: Manifest
) -> None:
    template = pooled_dev.serving
    spec = pooled.pools[POOL]
    task_id, _ = _service_of(template, POOL, "SWITCHYARD_WORKER_POOL")
    (service,) = [
        s
        for s in template.find_resources("AWS::ECS::Service").values()
        if s["Properties"]["TaskDefinition"] == {"Ref": task_id}
    ]
    (strategy,) = service["Properties"]["CapacityProviderStrategy"]
    provider_id = strategy["CapacityProvider"]["Ref"]
    provider = template.find_resources("AWS::ECS::CapacityProvider")[provider_id]
    group_arn = provider["Properties"]["AutoScalingGroupProvider"]["AutoScalingGroupArn"]
    group = template.find_resources("AWS::AutoScaling::AutoScalingGroup")[group_arn["Ref"]]
    overrides = group["Properties"]["MixedInstancesPolicy"]["LaunchTemplate"]["Overrides"]
    assert [o["InstanceType"] for o in overrides] == list(spec.instance_types)
    assert group["Properties"]["MaxSize"] == str(pooled.pool_scaling_policy(POOL, "dev").max_tasks)


def test_a_pool_worker_takes_the_work_of_its_models_and_no_other(
    pooled_dev: Synthesized, pooled: Manifest
) -> None:
    template = pooled_dev.serving
    names = pooled.names("dev")
    _, task = _service_of(template, POOL, "SWITCHYARD_WORKER_POOL")
    granted_ = statements(template, task["Properties"]["TaskRoleArn"]["Fn::GetAtt"][0])
    consumed = json.dumps([s["Resource"] for s in granted_ if "sqs:ReceiveMessage" in s["Action"]])
    for model in pooled.models:
        queue = json.dumps(named("sqs", names.queue(model, "realtime")))
        served = pooled.models[model].pool == POOL
        assert (queue in consumed) == served, f"{model}: served {served}"
    actions = actions_of(granted_)
    assert {"sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "dynamodb:PutItem"} <= actions
    assert not {"dynamodb:DeleteItem", "dynamodb:Scan"} & actions
