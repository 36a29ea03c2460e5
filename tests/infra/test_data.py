"""DynamoDB tables, S3 buckets and the prediction-log Firehose stream."""

from __future__ import annotations

from aws_cdk.assertions import Match, Template

from switchyard import tables
from switchyard.manifest import Manifest

from .helpers import logical_id


def test_tables_have_point_in_time_recovery_encryption_and_shared_keys(
    data_template: Template, manifest: Manifest
) -> None:
    names = manifest.names("dev")
    for name, keys in (
        (names.registry_table, tables.REGISTRY),
        (names.results_table, tables.RESULTS),
        (names.jobs_table, tables.JOBS),
    ):
        data_template.has_resource_properties(
            "AWS::DynamoDB::Table",
            {
                "TableName": name,
                "KeySchema": [
                    {"AttributeName": keys.partition, "KeyType": "HASH"},
                    {"AttributeName": keys.sort, "KeyType": "RANGE"},
                ],
                "BillingMode": "PAY_PER_REQUEST",
                "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
                "SSESpecification": {"SSEEnabled": True},
            },
        )


def test_results_expire_by_ttl(data_template: Template, manifest: Manifest) -> None:
    data_template.has_resource_properties(
        "AWS::DynamoDB::Table",
        {
            "TableName": manifest.names("dev").results_table,
            "TimeToLiveSpecification": {
                "AttributeName": tables.RESULTS.ttl_attribute,
                "Enabled": True,
            },
        },
    )


def test_buckets_block_public_access_and_log_access(data_template: Template) -> None:
    buckets = data_template.find_resources("AWS::S3::Bucket")
    assert len(buckets) == 5  # artifacts, payloads, batch drop, prediction logs, access logs
    for bucket in buckets.values():
        props = bucket["Properties"]
        assert props["PublicAccessBlockConfiguration"] == {
            "BlockPublicAcls": True,
            "BlockPublicPolicy": True,
            "IgnorePublicAcls": True,
            "RestrictPublicBuckets": True,
        }
        assert props["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    logged = [b for b in buckets.values() if "LoggingConfiguration" in b["Properties"]]
    assert len(logged) == 4, "every bucket but the access-log bucket logs its access"


def test_buckets_enforce_ssl(data_template: Template) -> None:
    policies = data_template.find_resources(
        "AWS::S3::BucketPolicy",
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
    assert len(policies) == 5


def test_bucket_names_get_an_account_and_region_suffix(
    data_template: Template, manifest: Manifest
) -> None:
    data_template.has_resource_properties(
        "AWS::S3::Bucket",
        {
            "BucketName": {
                "Fn::Join": [
                    "",
                    [
                        f"{manifest.names('dev').payloads_bucket}-",
                        {"Ref": "AWS::AccountId"},
                        "-",
                        {"Ref": "AWS::Region"},
                    ],
                ]
            }
        },
    )


def test_prediction_logs_are_partitioned_by_model_and_date_and_compressed(
    data_template: Template, manifest: Manifest
) -> None:
    names = manifest.names("dev")
    bucket = logical_id(
        data_template,
        "AWS::S3::Bucket",
        {"BucketName": {"Fn::Join": ["", Match.array_with([f"{names.prediction_logs_bucket}-"])]}},
    )
    data_template.has_resource_properties(
        "AWS::KinesisFirehose::DeliveryStream",
        {
            "DeliveryStreamName": names.prediction_log_stream,
            "DeliveryStreamEncryptionConfigurationInput": {"KeyType": "AWS_OWNED_CMK"},
            "ExtendedS3DestinationConfiguration": Match.object_like(
                {
                    "BucketARN": {"Fn::GetAtt": [bucket, "Arn"]},
                    "Prefix": "model=!{partitionKeyFromQuery:model}/date=!{timestamp:yyyy-MM-dd}/",
                    "CompressionFormat": "GZIP",
                    "DynamicPartitioningConfiguration": Match.object_like({"Enabled": True}),
                    "ProcessingConfiguration": Match.object_like(
                        {
                            "Processors": Match.array_with(
                                [Match.object_like({"Type": "MetadataExtraction"})]
                            )
                        }
                    ),
                }
            ),
        },
    )


def test_prediction_log_records_are_split_into_lines_before_partitioning(
    data_template: Template,
) -> None:
    # GIVEN the prediction-log stream, to which a worker sends a batch's lines in one
    # record (switchyard.telemetry.FirehosePredictionLog)
    (stream,) = data_template.find_resources("AWS::KinesisFirehose::DeliveryStream").values()
    processing = stream["Properties"]["ExtendedS3DestinationConfiguration"][
        "ProcessingConfiguration"
    ]
    steps = [
        (p["Type"], {q["ParameterName"]: q["ParameterValue"] for q in p.get("Parameters", [])})
        for p in processing["Processors"]
    ]
    # THEN each record is split at its newlines first, each line is partitioned by
    # its model, and each line ends with a newline again in S3
    assert processing["Enabled"] is True
    assert steps == [
        ("RecordDeAggregation", {"SubRecordType": "DELIMITED", "Delimiter": "Cg=="}),
        ("MetadataExtraction", {"MetadataExtractionQuery": "{model: .model}",
                                "JsonParsingEngine": "JQ-1.6"}),
        ("AppendDelimiterToRecord", {}),
    ]  # fmt: skip
