"""The batch drop bucket queues a notification of every file dropped, and the
splitter consumes the queue."""

from __future__ import annotations

import json

from aws_cdk.assertions import Match, Template

from stacks.cloud import APPCONFIG_EXTENSION_LAYER
from switchyard.manifest import Manifest

from .helpers import actions_of, logical_id, statements
from .helpers import granted as granted_on
from .helpers import named as named_arn


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


def test_jsonl_created_in_the_drop_bucket_is_queued_for_the_splitter(
    serving_template: Template, manifest: Manifest
) -> None:
    names = manifest.names("dev")
    queue = logical_id(serving_template, "AWS::SQS::Queue", {"QueueName": names.batch_drop_queue})
    serving_template.has_resource_properties(
        "Custom::S3BucketNotifications",
        {
            "BucketName": Match.any_value(),
            "NotificationConfiguration": {
                "QueueConfigurations": [
                    {
                        "Events": ["s3:ObjectCreated:*"],
                        "QueueArn": {"Fn::GetAtt": [queue, "Arn"]},
                        "Filter": {"Key": {"FilterRules": [{"Name": "suffix", "Value": ".jsonl"}]}},
                    }
                ]
            },
        },
    )


def test_the_splitter_reads_the_drop_queue_and_hands_back_what_failed(
    serving_template: Template, manifest: Manifest
) -> None:
    names = manifest.names("dev")
    queue = logical_id(serving_template, "AWS::SQS::Queue", {"QueueName": names.batch_drop_queue})
    dlq = logical_id(serving_template, "AWS::SQS::Queue", {"QueueName": names.batch_drop_dlq})
    serving_template.has_resource_properties(
        "AWS::Lambda::EventSourceMapping",
        {
            "EventSourceArn": {"Fn::GetAtt": [queue, "Arn"]},
            "FunctionName": {"Ref": _splitter(serving_template)},
            "BatchSize": 10,
            "FunctionResponseTypes": ["ReportBatchItemFailures"],
        },
    )
    platform = manifest.platform
    serving_template.has_resource_properties(
        "AWS::SQS::Queue",
        {
            "QueueName": names.batch_drop_queue,
            "VisibilityTimeout": 6 * platform.splitter_timeout_seconds,
            "RedrivePolicy": {
                "deadLetterTargetArn": {"Fn::GetAtt": [dlq, "Arn"]},
                "maxReceiveCount": platform.max_receive_count,
            },
        },
    )
    fn = serving_template.find_resources("AWS::Lambda::Function")[_splitter(serving_template)]
    assert fn["Properties"]["Timeout"] == platform.splitter_timeout_seconds


def test_splitter_sends_to_every_batch_queue_and_no_realtime_queue(
    serving_template: Template, manifest: Manifest
) -> None:
    names = manifest.names("dev")
    fn = serving_template.find_resources("AWS::Lambda::Function")[_splitter(serving_template)]
    granted = statements(serving_template, fn["Properties"]["Role"]["Fn::GetAtt"][0])
    sent_to = json.dumps([s["Resource"] for s in granted if "sqs:SendMessage" in actions_of([s])])
    for model in manifest.models:  # the models stack's queues, named by their ARNs
        batch = json.dumps(named_arn("sqs", names.queue(model, "batch")))
        realtime = json.dumps(named_arn("sqs", names.queue(model, "realtime")))
        assert batch in sent_to and realtime not in sent_to
    assert "dynamodb:PutItem" in actions_of(granted)
    assert fn["Properties"]["Environment"]["Variables"]["SWITCHYARD_JOBS_TABLE"]


def test_a_long_split_continues_through_the_splitters_own_queue(
    serving_template: Template, manifest: Manifest
) -> None:
    # A split that outlasts one invocation sends its continuation to the drop queue,
    # whose URL the function gets from the settings contract.
    names = manifest.names("dev")
    fn = serving_template.find_resources("AWS::Lambda::Function")[_splitter(serving_template)]
    drop = logical_id(serving_template, "AWS::SQS::Queue", {"QueueName": names.batch_drop_queue})
    variables = fn["Properties"]["Environment"]["Variables"]
    assert variables["SWITCHYARD_DROP_QUEUE_URL"] == {"Ref": drop}
    granted = statements(serving_template, fn["Properties"]["Role"]["Fn::GetAtt"][0])
    sent_to = json.dumps([s["Resource"] for s in granted if "sqs:SendMessage" in actions_of([s])])
    assert drop in sent_to
    assert "dynamodb:UpdateItem" in actions_of(granted)


def test_ended_jobs_are_called_back_by_the_splitter_with_each_tenants_secret(
    serving_template: Template, data_template: Template, manifest: Manifest
) -> None:
    # One webhook secret per tenant, named under the stage's prefix ...
    names = manifest.names("dev")
    secrets = data_template.find_resources("AWS::SecretsManager::Secret")
    named = {s["Properties"]["Name"] for s in secrets.values()}
    assert named == {f"{names.webhook_secret_prefix}{t}" for t in manifest.tenants}
    # ... read by the splitter, which delivers the callbacks ...
    fn = serving_template.find_resources("AWS::Lambda::Function")[_splitter(serving_template)]
    variables = fn["Properties"]["Environment"]["Variables"]
    assert variables["SWITCHYARD_WEBHOOK_SECRET_PREFIX"] == names.webhook_secret_prefix
    granted = statements(serving_template, fn["Properties"]["Role"]["Fn::GetAtt"][0])
    assert "secretsmanager:GetSecretValue" in actions_of(granted)
    # ... asked for through its queue by the jobs API, which cancels jobs
    drop = logical_id(serving_template, "AWS::SQS::Queue", {"QueueName": names.batch_drop_queue})
    requests = logical_id(
        serving_template,
        "AWS::Lambda::Function",
        {"Description": Match.string_like_regexp("/v1/requests")},
    )
    router = serving_template.find_resources("AWS::Lambda::Function")[requests]
    assert router["Properties"]["Environment"]["Variables"]["SWITCHYARD_DROP_QUEUE_URL"] == {
        "Ref": drop
    }
    granted = statements(serving_template, router["Properties"]["Role"]["Fn::GetAtt"][0])
    assert "secretsmanager:GetSecretValue" not in actions_of(granted)
    sent_to = [s["Resource"] for s in granted if "sqs:SendMessage" in actions_of([s])]
    assert sent_to == [{"Fn::GetAtt": [drop, "Arn"]}]


def test_whatever_records_a_job_reads_every_models_routing_document(
    serving_template: Template, manifest: Manifest
) -> None:
    """A job runs on its model's stable version: the splitter (a dropped file) and
    the jobs API (a submission) read each model's document through the extension."""
    names = manifest.names("dev")
    functions = serving_template.find_resources("AWS::Lambda::Function")
    jobs_api = [
        name
        for name, fn in functions.items()
        if "SWITCHYARD_BATCH_DROP_BUCKET"
        in fn["Properties"].get("Environment", {}).get("Variables", {})
    ]
    assert len(jobs_api) == 1
    for name in (_splitter(serving_template), *jobs_api):
        fn = functions[name]
        env = fn["Properties"]["Environment"]["Variables"]
        assert env["SWITCHYARD_ROUTING_SOURCE"] == "appconfig-extension"
        assert env["SWITCHYARD_APPCONFIG_APPLICATION"] == names.appconfig_application
        assert "SWITCHYARD_APPCONFIG_ENVIRONMENT" not in env  # each model's is its own
        assert env["AWS_APPCONFIG_EXTENSION_PREFETCH_LIST"].split(",") == [
            f"/applications/{names.appconfig_application}/environments/{model}"
            f"/configurations/{names.routing_profile(model)}"
            for model in manifest.models
        ]
        assert json.dumps(APPCONFIG_EXTENSION_LAYER[manifest.platform.region]) in {
            json.dumps(layer) for layer in fn["Properties"]["Layers"]
        }
        granted = statements(serving_template, fn["Properties"]["Role"]["Fn::GetAtt"][0])
        read = granted_on(granted, "appconfig:GetLatestConfiguration")
        assert len(read) == len(manifest.models) and all("/configuration/" in r for r in read)
        assert "*" not in json.dumps(read)
