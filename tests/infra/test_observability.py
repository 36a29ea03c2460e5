"""CloudWatch: a dashboard per model and its alarms."""

from __future__ import annotations

import json

from aws_cdk.assertions import Match, Template

from switchyard.manifest import Manifest

from .helpers import only


def test_each_model_has_a_dashboard_of_its_signals(
    serving_template: Template, manifest: Manifest
) -> None:
    base = manifest.names("dev").base
    for model in manifest.models:
        dashboard = only(
            serving_template, "AWS::CloudWatch::Dashboard", {"DashboardName": f"{base}-{model}"}
        )
        body = json.dumps(dashboard["Properties"]["DashboardBody"])
        for signal in (
            '\\"Requests\\"',
            '\\"stat\\":\\"p50\\"',
            '\\"stat\\":\\"p99\\"',
            "ApproximateNumberOfMessagesVisible",
            "ApproximateAgeOfOldestMessage",
            "RunningTaskCount",
            "BatchSize",
            "Errors",
            "SEARCH(",  # traffic per version
            f'model=\\\\\\"{model}\\\\\\"',
        ):
            assert signal in body, f"{model}'s dashboard lacks {signal}"


def test_alarm_when_a_dlq_is_not_empty(serving_template: Template, manifest: Manifest) -> None:
    names = manifest.names("dev")
    for model in manifest.models:
        for lane in ("realtime", "batch"):
            serving_template.has_resource_properties(
                "AWS::CloudWatch::Alarm",
                {
                    "AlarmName": f"{names.base}-{model}-{lane}-dlq-not-empty",
                    "MetricName": "ApproximateNumberOfMessagesVisible",
                    "Namespace": "AWS/SQS",
                    "Dimensions": [{"Name": "QueueName", "Value": Match.any_value()}],
                    "Threshold": 0,
                    "ComparisonOperator": "GreaterThanThreshold",
                },
            )


def test_alarm_when_p99_is_over_the_slo(serving_template: Template, manifest: Manifest) -> None:
    base = manifest.names("dev").base
    for model, spec in manifest.models.items():
        serving_template.has_resource_properties(
            "AWS::CloudWatch::Alarm",
            {
                "AlarmName": f"{base}-{model}-latency-p99",
                "Namespace": "Switchyard",
                "MetricName": "Latency",
                "ExtendedStatistic": "p99",
                "Dimensions": [{"Name": "model", "Value": model}],
                "Threshold": spec.slo_p99_ms,
            },
        )


def test_alarm_on_error_rate(serving_template: Template, manifest: Manifest) -> None:
    base = manifest.names("dev").base
    for model in manifest.models:
        alarm = only(
            serving_template, "AWS::CloudWatch::Alarm", {"AlarmName": f"{base}-{model}-error-rate"}
        )
        metrics = json.dumps(alarm["Properties"]["Metrics"])
        assert "100 * FILL(errors, 0) / requests" in metrics
        assert '"MetricName": "Errors"' in metrics and '"MetricName": "Requests"' in metrics


def test_alarm_on_age_of_oldest_message(serving_template: Template, manifest: Manifest) -> None:
    base = manifest.names("dev").base
    for model in manifest.models:
        for lane in ("realtime", "batch"):
            serving_template.has_resource_properties(
                "AWS::CloudWatch::Alarm",
                {
                    "AlarmName": f"{base}-{model}-{lane}-oldest-message",
                    "MetricName": "ApproximateAgeOfOldestMessage",
                    "Threshold": Match.any_value(),
                },
            )
