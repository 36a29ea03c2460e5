"""A model added to the manifest gets its whole endpoint."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from aws_cdk.assertions import Match

from stacks.assets import MANIFEST_FILE
from switchyard.manifest import Manifest, load_manifest

from .conftest import Synthesized

EXTRA_MODEL = """
[models.tiny-scorer]
runtime = "torchscript-classifier"
compute = "cpu"
instance_types = ["c7i.large"]
signature = { kind = "tensor", shape = [8] }
max_inputs_per_request = 16
max_batch_size = 16
max_wait_ms = 5
default_deadline_ms = 2000
slo_p99_ms = 1000
scaling = { backlog_per_task = 100, max_tasks = 2 }
demo_versions = ["v1"]
"""


def test_adding_a_model_to_the_manifest_adds_its_endpoint(
    tmp_path: Path, synth: Callable[[Manifest, str], Synthesized]
) -> None:
    # GIVEN the manifest with one more model
    path = tmp_path / "manifest.toml"
    path.write_text(MANIFEST_FILE.read_text() + EXTRA_MODEL)
    manifest = load_manifest(path)
    names = manifest.names("dev")

    # WHEN the app is synthesized from it
    stage = synth(manifest, "dev")
    models, serving = stage.models, stage.serving

    # THEN the model has queues and alarms (in the models stack), a router behind the
    # API, routing, workers and a dashboard
    for lane in ("realtime", "batch"):
        models.has_resource_properties(
            "AWS::SQS::Queue", {"QueueName": names.queue("tiny-scorer", lane)}
        )
        models.has_resource_properties(
            "AWS::SQS::Queue", {"QueueName": names.dlq("tiny-scorer", lane)}
        )
    models.has_resource_properties(
        "AWS::CloudWatch::Alarm", {"AlarmName": f"{names.base}-tiny-scorer-error-rate"}
    )
    serving.has_resource_properties(
        "AWS::Lambda::Function",
        {
            "Environment": {
                "Variables": Match.object_like({"SWITCHYARD_APPCONFIG_ENVIRONMENT": "tiny-scorer"})
            }
        },
    )
    serving.has_resource_properties("AWS::ApiGateway::Resource", {"PathPart": "tiny-scorer"})
    serving.has_resource_properties("AWS::AppConfig::Environment", {"Name": "tiny-scorer"})
    serving.has_resource_properties("AWS::AppConfig::ConfigurationProfile", {"Name": "tiny-scorer"})
    serving.has_resource_properties(
        "AWS::ECS::TaskDefinition",
        {
            "ContainerDefinitions": [
                Match.object_like(
                    {
                        "Environment": Match.array_with(
                            [{"Name": "SWITCHYARD_WORKER_MODEL", "Value": "tiny-scorer"}]
                        )
                    }
                )
            ]
        },
    )
    serving.has_resource_properties(
        "AWS::CloudWatch::Dashboard", {"DashboardName": f"{names.base}-tiny-scorer"}
    )
    # its instance type joins the CPU capacity provider
    serving.has_resource_properties(
        "AWS::AutoScaling::AutoScalingGroup",
        {
            "MixedInstancesPolicy": Match.object_like(
                {
                    "LaunchTemplate": Match.object_like(
                        {"Overrides": Match.array_with([{"InstanceType": "c7i.large"}])}
                    )
                }
            )
        },
    )
    serving.resource_count_is("AWS::ECS::Service", len(manifest.services()))
