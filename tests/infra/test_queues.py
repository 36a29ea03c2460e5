"""SQS per model (in the models stack): realtime and batch queues with DLQs,
encryption, SSL only, visibility above the longest batch, and standard (fair)
queues; the serving stack's own queues (the drop queue's) encrypted and SSL only too."""

from __future__ import annotations

import pytest
from aws_cdk.assertions import Match, Template

from switchyard.manifest import Manifest
from switchyard.schemas import LANES

from .helpers import logical_id


def test_each_lane_has_a_dlq_after_max_receive_count(
    models_template: Template, manifest: Manifest
) -> None:
    names = manifest.names("dev")
    platform = manifest.platform
    for model in manifest.models:
        for lane in LANES:
            dlq = logical_id(
                models_template, "AWS::SQS::Queue", {"QueueName": names.dlq(model, lane)}
            )
            models_template.has_resource_properties(
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


@pytest.mark.parametrize("stack", ["models_template", "serving_template"])
def test_queues_are_encrypted(request: pytest.FixtureRequest, stack: str) -> None:
    template: Template = request.getfixturevalue(stack)
    queues = template.find_resources("AWS::SQS::Queue")
    assert queues
    assert all(q["Properties"].get("SqsManagedSseEnabled") is True for q in queues.values())


@pytest.mark.parametrize("stack", ["models_template", "serving_template"])
def test_queues_refuse_requests_without_ssl(request: pytest.FixtureRequest, stack: str) -> None:
    template: Template = request.getfixturevalue(stack)
    policies = template.find_resources(
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
    assert len(policies) == len(template.find_resources("AWS::SQS::Queue"))


def test_visibility_timeout_outlasts_the_longest_batch(
    models_template: Template, manifest: Manifest
) -> None:
    names = manifest.names("dev")
    for model, spec in manifest.models.items():
        queue = models_template.find_resources(
            "AWS::SQS::Queue", {"Properties": {"QueueName": names.queue(model, "realtime")}}
        )
        (props,) = (q["Properties"] for q in queue.values())
        assert props["VisibilityTimeout"] == manifest.platform.visibility_timeout_seconds
        assert props["VisibilityTimeout"] * 1000 > spec.max_wait_ms + spec.default_deadline_ms


def test_queues_are_standard_so_message_groups_make_them_fair(
    models_template: Template,
) -> None:
    # SQS fair queues are standard queues whose messages carry a MessageGroupId
    # (the tenant); a FIFO queue would serialise each tenant instead.
    queues = models_template.find_resources("AWS::SQS::Queue")
    assert not any(q["Properties"].get("FifoQueue") for q in queues.values())
    models_template.has_resource_properties(
        "AWS::SQS::Queue", {"ReceiveMessageWaitTimeSeconds": 20}
    )
