"""SQS per model: realtime and batch queues with DLQs, encryption, SSL only,
visibility above the longest batch, and standard (fair) queues."""

from __future__ import annotations

from aws_cdk.assertions import Match, Template

from switchyard.manifest import Manifest
from switchyard.schemas import LANES

from .helpers import logical_id


def test_each_lane_has_a_dlq_after_max_receive_count(
    serving_template: Template, manifest: Manifest
) -> None:
    names = manifest.names("dev")
    platform = manifest.platform
    for model in manifest.models:
        for lane in LANES:
            dlq = logical_id(
                serving_template, "AWS::SQS::Queue", {"QueueName": names.dlq(model, lane)}
            )
            serving_template.has_resource_properties(
                "AWS::SQS::Queue",
                {
                    "QueueName": names.queue(model, lane),
                    "RedrivePolicy": {
                        "deadLetterTargetArn": {"Fn::GetAtt": [dlq, "Arn"]},
                        "maxReceiveCount": platform.max_receive_count,
                    },
                    "MessageRetentionPeriod": platform.message_retention_seconds,
                },
            )


def test_queues_are_encrypted(serving_template: Template) -> None:
    queues = serving_template.find_resources("AWS::SQS::Queue")
    assert queues
    assert all(q["Properties"].get("SqsManagedSseEnabled") is True for q in queues.values())


def test_queues_refuse_requests_without_ssl(serving_template: Template) -> None:
    policies = serving_template.find_resources(
        "AWS::SQS::QueuePolicy",
        {
            "Properties": {
                "PolicyDocument": {
                    "Statement": Match.array_with(
                        [
                            Match.object_like(
                                {
                                    "Effect": "Deny",
                                    "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                                }
                            )
                        ]
                    )
                }
            }
        },
    )
    assert len(policies) == len(serving_template.find_resources("AWS::SQS::Queue"))


def test_visibility_timeout_outlasts_the_longest_batch(
    serving_template: Template, manifest: Manifest
) -> None:
    names = manifest.names("dev")
    for model, spec in manifest.models.items():
        queue = serving_template.find_resources(
            "AWS::SQS::Queue", {"Properties": {"QueueName": names.queue(model, "realtime")}}
        )
        (props,) = (q["Properties"] for q in queue.values())
        assert props["VisibilityTimeout"] == manifest.platform.visibility_timeout_seconds
        assert props["VisibilityTimeout"] * 1000 > spec.max_wait_ms + spec.default_deadline_ms


def test_queues_are_standard_so_message_groups_make_them_fair(
    serving_template: Template,
) -> None:
    # SQS fair queues are standard queues whose messages carry a MessageGroupId
    # (the tenant); a FIFO queue would serialise each tenant instead.
    queues = serving_template.find_resources("AWS::SQS::Queue")
    assert not any(q["Properties"].get("FifoQueue") for q in queues.values())
    serving_template.has_resource_properties(
        "AWS::SQS::Queue", {"ReceiveMessageWaitTimeSeconds": 20}
    )
