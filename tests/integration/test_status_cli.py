"""`switchyard status --aws` against the emulator answering as AWS: the queues' and
the router's metrics from CloudWatch, the worker services found in ECS under the
names CloudFormation gives them, their running, pending and desired counts."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from switchyard import aws
from switchyard_cli.main import main
from switchyard_cli.status import cluster_name_prefix, service_name_marker

STAGE = "dev"


@pytest.fixture
def cli(capsys):
    def run(*args: str) -> tuple[int, str]:
        capsys.readouterr()
        code = main(list(args))
        return code, capsys.readouterr().out

    return run


@pytest.fixture
def as_aws(emulator_url, monkeypatch):
    """boto3 pointed at the emulator through its own setting, as `--aws` runs."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", emulator_url)
    aws.client.cache_clear()
    yield
    aws.client.cache_clear()


def deployed_services(ecs, manifest) -> None:
    """What the CDK app leaves in ECS: a cluster and per model a service, named by
    CloudFormation (stack name, logical id and hash, random suffix), beside another
    stack's cluster; digits-cnn's service carries the model tag instead."""
    names = manifest.names(STAGE)
    cluster = f"{cluster_name_prefix(names)}EB0386A7-k3Jd8s0PqLmN"
    ecs.create_cluster(clusterName=cluster)
    ecs.create_cluster(clusterName="another-stack-ClusterEB0386A7-aaaa")
    ecs.register_task_definition(
        family="worker", containerDefinitions=[{"name": "w", "image": "w", "memory": 128}]
    )
    ecs.create_service(
        cluster=cluster,
        serviceName=f"{names.base}-serving{service_name_marker('minilm-embed')}1A2B3C4D-XyZ12",
        taskDefinition="worker",
        desiredCount=2,
    )
    ecs.create_service(
        cluster=cluster,
        serviceName="renamed-by-hand",
        taskDefinition="worker",
        desiredCount=1,
        tags=[{"key": "switchyard:model", "value": "digits-cnn"}],
    )
    ecs.create_service(
        cluster="another-stack-ClusterEB0386A7-aaaa",
        serviceName=f"x{service_name_marker('minilm-embed')}FFFF-1",
        taskDefinition="worker",
        desiredCount=7,
    )


def metrics(cloudwatch, manifest) -> None:
    """A backlog on minilm-embed's realtime queue, and 120 requests at the router."""
    names = manifest.names(STAGE)
    now = dt.datetime.now(dt.UTC)
    queue = names.queue("minilm-embed", "realtime")
    for metric, value in (
        ("ApproximateNumberOfMessagesVisible", 40),
        ("ApproximateNumberOfMessagesNotVisible", 5),
        ("ApproximateAgeOfOldestMessage", 12),
    ):
        cloudwatch.put_metric_data(
            Namespace="AWS/SQS",
            MetricData=[
                {
                    "MetricName": metric,
                    "Dimensions": [{"Name": "QueueName", "Value": queue}],
                    "Value": value,
                    "Timestamp": now,
                }
            ],
        )
    cloudwatch.put_metric_data(
        Namespace="Switchyard",
        MetricData=[
            {
                "MetricName": "Requests",
                "Dimensions": [{"Name": "model", "Value": "minilm-embed"}],
                "Values": [1.0],
                "Counts": [120.0],
                "Timestamp": now - dt.timedelta(seconds=30),
            },
            {
                "MetricName": "Latency",
                "Dimensions": [{"Name": "model", "Value": "minilm-embed"}],
                "Values": [35.0, 80.0],
                "Counts": [100.0, 20.0],
                "Unit": "Milliseconds",
                "Timestamp": now - dt.timedelta(seconds=30),
            },
        ],
    )


def test_status_aws_reads_cloudwatch_and_the_worker_services(cli, clients, manifest, as_aws):
    # GIVEN the dev stage's worker services and metrics as a deployment leaves them
    deployed_services(clients("ecs"), manifest)
    metrics(clients("cloudwatch"), manifest)

    # WHEN an operator asks for the status of the deployed stage
    code, out = cli("--aws", "--stage", STAGE, "--region", "us-east-1", "status", "--json")

    # THEN each model's workers are its own service's, its queue figures and requests
    # CloudWatch's
    assert code == 0
    status = json.loads(out)
    assert status["substrate"] == "aws"
    embed = status["models"]["minilm-embed"]
    assert embed["workers"]["desired"] == 2  # not the other stack's 7
    assert embed["workers"]["running"] + embed["workers"]["starting"] == 2
    assert embed["lanes"]["realtime"] == {
        "visible": 40,
        "in_flight": 5,
        "oldest_age_seconds": 12.0,
        "depth": 45,
    }
    assert embed["lanes"]["batch"]["visible"] is None  # no datapoint: not known
    assert embed["requests"]["count"] == 120
    assert embed["requests"]["per_second"] == round(120 / 300, 3)
    assert status["models"]["digits-cnn"]["workers"]["desired"] == 1  # found by its tag
    # The emulator has no scaling activities (nor percentiles): none shown, no failure.
    assert embed["last_decision"] is None
    # AND the deployed stack's options read the same after the command, as one writes
    # them (`switchyard status --aws`: "unrecognized arguments" before)
    after = cli("status", "--json", "--aws", "--stage", STAGE, "--region", "us-east-1")
    assert after[0] == 0 and json.loads(after[1])["models"] == status["models"]


def test_status_aws_as_text_names_a_model_without_a_service(cli, clients, manifest, as_aws):
    # GIVEN a stage whose cluster has no service of digits-cnn
    deployed_services(clients("ecs"), manifest)
    ecs = clients("ecs")
    cluster = next(
        arn for arn in ecs.list_clusters()["clusterArns"] if "serving-ComputeCluster" in arn
    )
    ecs.delete_service(cluster=cluster, service="renamed-by-hand", force=True)

    # WHEN the status is printed as text
    code, out = cli("--aws", "--stage", STAGE, "--region", "us-east-1", "status")

    # THEN both models have a row, digits-cnn's workers unknown
    assert code == 0
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line[:1].isalpha()}
    assert rows["minilm-embed"][3] == "2"  # desired
    assert rows["digits-cnn"][1:4] == ["-", "-", "-"]
