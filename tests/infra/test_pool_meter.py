"""A pool's meter, run: its state machine (``stacks.pools.meter_definition``, what
the serving stack deploys) executed by moto's Step Functions interpreter against
moto's SQS and CloudWatch. Each queue's counts become one value of the pool's two
metrics, so a minute's Average times the queue count is the pool's sum, as its
scaling alarms read it (``test_scaling.py``)."""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime, timedelta

import boto3
from moto import mock_aws

from stacks.cloud import POOL_IN_FLIGHT_METRIC, POOL_QUEUED_METRIC
from stacks.pools import meter_definition

REGION = "us-east-1"


def _run(definition: dict) -> dict:
    """Execute ``definition`` once and wait for it to end."""
    text = re.sub(r"arn:\$\{Token\[[^\]]*\]\}:", "arn:aws:", json.dumps(definition))
    sfn = boto3.client("stepfunctions", region_name=REGION)
    role = boto3.client("iam", region_name=REGION).create_role(
        RoleName="meter", AssumeRolePolicyDocument="{}"
    )["Role"]["Arn"]
    machine = sfn.create_state_machine(name="meter", definition=text, roleArn=role)
    execution = sfn.start_execution(stateMachineArn=machine["stateMachineArn"])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        described = sfn.describe_execution(executionArn=execution["executionArn"])
        if described["status"] != "RUNNING":
            return described
        time.sleep(0.05)
    raise AssertionError("the meter did not end")


def _minute(metric: str) -> dict:
    now = datetime.now(UTC)
    (point,) = boto3.client("cloudwatch", region_name=REGION).get_metric_statistics(
        Namespace="Switchyard",
        MetricName=metric,
        Dimensions=[{"Name": "pool", "Value": "long-tail"}],
        StartTime=now - timedelta(minutes=5),
        EndTime=now + timedelta(minutes=5),
        Period=60,
        Statistics=["Average", "SampleCount"],
    )["Datapoints"]
    return point


@mock_aws(config={"stepfunctions": {"execute_state_machine": True}})
def test_the_meter_publishes_each_queues_counts_so_that_they_sum() -> None:
    # GIVEN five queues (two models' lanes and one more), 0, 3, 6, 9 and 12 messages,
    # two of the last received and in flight
    sqs = boto3.client("sqs", region_name=REGION)
    urls = [sqs.create_queue(QueueName=f"queue-{i}")["QueueUrl"] for i in range(5)]
    for i, url in enumerate(urls):
        for n in range(3 * i):
            sqs.send_message(QueueUrl=url, MessageBody=json.dumps({"n": n}))
    sqs.receive_message(QueueUrl=urls[4], MaxNumberOfMessages=2, VisibilityTimeout=300)

    # WHEN the meter runs, reading them three and two at a time
    done = _run(meter_definition("long-tail", [urls[:3], urls[3:]]))

    # THEN it read each queue, and published one value per queue per count
    assert done["status"] == "SUCCEEDED", done
    queued, in_flight = _minute(POOL_QUEUED_METRIC), _minute(POOL_IN_FLIGHT_METRIC)
    assert queued["SampleCount"] == in_flight["SampleCount"] == len(urls)
    # so that the Average times the queue count is the pool's sum
    assert round(queued["Average"] * len(urls)) == 0 + 3 + 6 + 9 + 10
    assert round(in_flight["Average"] * len(urls)) == 2
