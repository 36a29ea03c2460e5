"""The batch drop bucket notifies the splitter of every object created."""

from __future__ import annotations

import json

from aws_cdk.assertions import Match, Template

from switchyard.manifest import Manifest

from .helpers import actions_of, logical_id, statements


def _splitter(template: Template) -> str:
    return logical_id(
        template,
        "AWS::Lambda::Function",
        {
            "Environment": {
                "Variables": Match.object_like({"POWERTOOLS_SERVICE_NAME": "batch-splitter"})
            }
        },
    )


def test_object_created_in_the_drop_bucket_invokes_the_splitter(
    serving_template: Template, manifest: Manifest
) -> None:
    splitter = _splitter(serving_template)
    serving_template.has_resource_properties(
        "Custom::S3BucketNotifications",
        {
            "BucketName": Match.any_value(),
            "NotificationConfiguration": {
                "LambdaFunctionConfigurations": [
                    {
                        "Events": ["s3:ObjectCreated:*"],
                        "LambdaFunctionArn": {"Fn::GetAtt": [splitter, "Arn"]},
                    }
                ]
            },
        },
    )
    serving_template.has_resource_properties(
        "AWS::Lambda::Permission",
        {
            "Action": "lambda:InvokeFunction",
            "FunctionName": {"Fn::GetAtt": [splitter, "Arn"]},
            "Principal": "s3.amazonaws.com",
        },
    )


def test_splitter_sends_to_every_batch_queue_and_no_realtime_queue(
    serving_template: Template, manifest: Manifest
) -> None:
    names = manifest.names("dev")
    fn = serving_template.find_resources("AWS::Lambda::Function")[_splitter(serving_template)]
    granted = statements(serving_template, fn["Properties"]["Role"]["Fn::GetAtt"][0])
    sent_to = json.dumps([s["Resource"] for s in granted if "sqs:SendMessage" in actions_of([s])])
    for model in manifest.models:
        batch = logical_id(
            serving_template, "AWS::SQS::Queue", {"QueueName": names.queue(model, "batch")}
        )
        realtime = logical_id(
            serving_template, "AWS::SQS::Queue", {"QueueName": names.queue(model, "realtime")}
        )
        assert batch in sent_to and realtime not in sent_to
    assert "dynamodb:PutItem" in actions_of(granted)
    assert fn["Properties"]["Environment"]["Variables"]["SWITCHYARD_JOBS_TABLE"]
