"""The signals the local autoscaler reads, from the emulator as the local platform
starts it: counts from the queues' attributes, the age of the oldest message from
CloudWatch's ``AWS/SQS`` metric, which the emulator answers live
(``switchyard_local.sqs_metrics``)."""

from __future__ import annotations

import datetime as dt
import time

from switchyard.scaling import LaneSignals
from switchyard_local.autoscaler import SqsQueueSignals, queue_name

MODEL = "minilm-embed"


def send(sqs, url: str, count: int) -> None:
    for i in range(count):
        sqs.send_message(QueueUrl=url, MessageBody=f"m{i}", MessageGroupId="acme")


def test_visible_in_flight_and_the_oldest_messages_age_per_lane(clients, provisioned):
    # GIVEN three messages on a model's realtime queue, one of them received
    sqs = clients("sqs")
    queues = provisioned.queues
    realtime = queues[MODEL]["realtime"]
    send(sqs, realtime, 3)
    sqs.receive_message(QueueUrl=realtime, MaxNumberOfMessages=1, VisibilityTimeout=60)
    time.sleep(1.2)

    # WHEN the autoscaler reads every model's lanes
    signals = SqsQueueSignals(sqs, clients("cloudwatch"), queues).read()

    # THEN it sees two visible, one in flight, the oldest sent over a second ago
    lane = signals[MODEL]["realtime"]
    assert (lane.visible, lane.in_flight) == (2, 1)
    assert 1.0 <= lane.oldest_age_seconds < 30
    # AND an empty lane, and every other model, at nothing
    assert signals[MODEL]["batch"] == LaneSignals(0, 0, 0.0)
    assert set(signals) == set(queues)
    assert all(
        lanes == {"realtime": LaneSignals(), "batch": LaneSignals()}
        for model, lanes in signals.items()
        if model != MODEL
    )


def test_a_message_received_three_times_no_longer_holds_the_age_up(clients, provisioned):
    # GIVEN a message that failed three receives, then a fresh one behind it
    sqs = clients("sqs")
    url = provisioned.queues[MODEL]["batch"]
    send(sqs, url, 1)
    for _ in range(3):
        got = sqs.receive_message(QueueUrl=url, VisibilityTimeout=0, WaitTimeSeconds=1)
        assert got.get("Messages")
    time.sleep(1.2)
    reader = SqsQueueSignals(sqs, clients("cloudwatch"), provisioned.queues)
    assert reader.oldest_ages()[queue_name(url)] == 0.0
    send(sqs, url, 1)

    # WHEN the age is read, THEN it is the fresh message's, as AWS's metric counts it
    assert reader.oldest_ages()[queue_name(url)] < 1.0


def test_other_cloudwatch_metrics_are_answered_as_before(clients):
    # GIVEN a metric put into the emulator's CloudWatch
    cloudwatch = clients("cloudwatch")
    now = dt.datetime.now(dt.UTC)
    cloudwatch.put_metric_data(
        Namespace="Switchyard",
        MetricData=[
            {
                "MetricName": "Requests",
                "Dimensions": [{"Name": "model", "Value": MODEL}],
                "Value": 7,
                "Timestamp": now,
            }
        ],
    )

    # WHEN it is read beside a live SQS metric of a queue that does not exist
    answer = cloudwatch.get_metric_data(
        MetricDataQueries=[
            {
                "Id": "stored",
                "MetricStat": {
                    "Metric": {
                        "Namespace": "Switchyard",
                        "MetricName": "Requests",
                        "Dimensions": [{"Name": "model", "Value": MODEL}],
                    },
                    "Period": 60,
                    "Stat": "Sum",
                },
            },
            {
                "Id": "missing",
                "MetricStat": {
                    "Metric": {
                        "Namespace": "AWS/SQS",
                        "MetricName": "ApproximateAgeOfOldestMessage",
                        "Dimensions": [{"Name": "QueueName", "Value": "no-such-queue"}],
                    },
                    "Period": 60,
                    "Stat": "Maximum",
                },
            },
        ],
        StartTime=now - dt.timedelta(minutes=5),
        EndTime=now + dt.timedelta(minutes=1),
    )

    # THEN moto answers the stored one as it always has, and nothing for the other
    results = {r["Id"]: r["Values"] for r in answer["MetricDataResults"]}
    assert results == {"stored": [7.0], "missing": []}
