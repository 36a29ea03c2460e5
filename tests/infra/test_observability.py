"""CloudWatch: a dashboard per model (with a row for its pool, if it has one) and
its alarms (in the models stack)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk.assertions import Match, Template

from stacks.cloud import POOL_IN_FLIGHT_METRIC, POOL_QUEUED_METRIC
from switchyard.canary import VersionStats, judge
from switchyard.manifest import POOL_TAG, Manifest
from switchyard.routing import RoutingDocument

from .conftest import POOL, Synthesized
from .helpers import evaluate, only


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


def test_a_pooled_models_dashboard_has_a_row_for_its_pool(
    pooled_dev: Synthesized, pooled: Manifest
) -> None:
    # GIVEN a model served by a pool, and one with a service of its own
    template = pooled_dev.serving
    base = pooled.names("dev").base
    pool_service = next(
        name
        for name, s in template.find_resources("AWS::ECS::Service").items()
        if {"Key": POOL_TAG, "Value": POOL} in s["Properties"].get("Tags", [])
    )
    for model in pooled.models:
        dashboard = only(
            template, "AWS::CloudWatch::Dashboard", {"DashboardName": f"{base}-{model}"}
        )
        body = json.dumps(dashboard["Properties"]["DashboardBody"])
        pool = pooled.models[model].pool
        pooled_model = pool is not None
        # THEN only a pooled one has its pool's row: its workers (the pool's
        # service), its queues summed over its models, its cache's loads, evictions
        # and load times, and the model's own cold loads
        for signal in (
            f"Pool {pool}: workers",
            POOL_QUEUED_METRIC,
            POOL_IN_FLIGHT_METRIC,
            "ModelEvictions",
            "ModelLoadTime",
            "PoolResidentMemory",
            f"Cold loads of {model}",
        ):
            assert (signal in body) == pooled_model, f"{model}'s dashboard: {signal}"
        # and its tasks are the pool's
        assert (pool_service in body) == (pool == POOL)


def test_alarm_when_a_dlq_is_not_empty(models_template: Template, manifest: Manifest) -> None:
    names = manifest.names("dev")
    for model in manifest.models:
        for lane in ("realtime", "batch"):
            models_template.has_resource_properties(
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


def test_alarm_when_p99_is_over_the_slo(models_template: Template, manifest: Manifest) -> None:
    base = manifest.names("dev").base
    for model, spec in manifest.models.items():
        models_template.has_resource_properties(
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


def test_alarm_on_error_rate(models_template: Template, manifest: Manifest) -> None:
    base = manifest.names("dev").base
    for model in manifest.models:
        alarm = only(
            models_template, "AWS::CloudWatch::Alarm", {"AlarmName": f"{base}-{model}-error-rate"}
        )
        metrics = json.dumps(alarm["Properties"]["Metrics"])
        assert "100 * FILL(errors, 0) / requests" in metrics
        assert '"MetricName": "Errors"' in metrics and '"MetricName": "Requests"' in metrics


def test_alarm_on_age_of_oldest_message(models_template: Template, manifest: Manifest) -> None:
    base = manifest.names("dev").base
    for model in manifest.models:
        for lane in ("realtime", "batch"):
            models_template.has_resource_properties(
                "AWS::CloudWatch::Alarm",
                {
                    "AlarmName": f"{base}-{model}-{lane}-oldest-message",
                    "MetricName": "ApproximateAgeOfOldestMessage",
                    "Threshold": Match.any_value(),
                },
            )


CANARY_ALARMS = (
    "canary-error-rate",
    "canary-error-rate-over-stable",
    "canary-latency-p99",
    "canary-latency-over-stable",
)


# (canary requests, errors, p99 ms, requests over the SLO), (stable's), rolled back?
# digits-cnn: SLO 500 ms; [rollout]: 20 requests, 5 %, 2 points, twice the p99, z = 4, 5 hits.
SCENARIOS = [
    ((100, 0, 80, 0), (900, 0, 75, 0), False),  # healthy
    # errors
    ((100, 10, 80, 0), (900, 9, 75, 0), True),  # 10 % against 1 %: the canary fails
    ((100, 10, 80, 0), (900, 90, 75, 0), False),  # identical: 10 % on both, the model fails
    ((100, 10, 80, 0), (900, 180, 75, 0), False),  # stable fails more
    ((100, 4, 80, 0), (900, 0, 75, 0), False),  # worse than stable, but within the 5 % limit
    ((30, 3, 80, 0), (270, 6, 75, 0), False),  # 10 % against 2 %: within a small sample's noise
    ((30, 3, 80, 0), (270, 0, 75, 0), False),  # 10 % against none: three errors tell nothing
    ((300, 30, 80, 0), (2700, 54, 75, 0), True),  # the same rates, ten times the requests
    ((10, 10, 80, 0), (900, 0, 75, 0), False),  # every request failed, but too few to judge
    # p99
    ((100, 0, 9000, 100), (900, 0, 75, 0), True),  # over the SLO, stable far under it
    ((100, 0, 1404, 100), (900, 0, 1380, 900), False),  # saturated both: over the SLO alike
    ((30, 2, 1500, 30), (270, 15, 1450, 270), False),  # identical at saturation, errors and all
    ((100, 0, 900, 100), (900, 0, 600, 900), False),  # both over the SLO, within twice stable's
    ((100, 0, 1300, 30), (900, 0, 600, 20), True),  # over the SLO and over twice stable's
    ((100, 0, 300, 0), (900, 0, 100, 0), False),  # three times stable's, but within the SLO
    ((50, 0, 1162, 1), (450, 0, 162, 0), False),  # one slow request is its p99: noise
    ((50, 0, 1162, 6), (450, 0, 162, 0), True),  # six are not
    ((47, 0, 1162, 5), (423, 0, 162, 0), True),  # five, the least that counts
    ((47, 0, 1162, 4), (423, 0, 162, 0), False),  # four, within noise
    # too few stable requests to compare with: the canary is judged alone
    ((100, 0, 900, 100), (10, 0, 80, 0), True),  # over the SLO
    ((100, 0, 300, 0), (0, 0, None, 0), False),  # within the SLO
    ((100, 10, 80, 0), (5, 0, 75, 0), True),  # over the error limit
    ((100, 3, 300, 0), (0, 0, None, 0), False),  # within it
]


@pytest.mark.parametrize(("canary", "stable", "rolled_back"), SCENARIOS)
def test_canary_alarms_apply_the_local_controllers_rule(
    models_template: Template,
    manifest: Manifest,
    canary: tuple,
    stable: tuple,
    rolled_back: bool,
) -> None:
    """The cloud's canary alarms and the local rollback controller decide alike."""
    base = manifest.names("dev").base
    model = "digits-cnn"
    spec = manifest.models[model]
    slo = spec.slo_p99_ms
    values: dict[tuple[str, str, str], float | None] = {}
    stats: dict[str, VersionStats] = {}
    for role, version, (requests, errors, p99, slow) in (
        ("canary", "v2", canary),
        ("stable", "v1", stable),
    ):
        values[(role, "Requests", "Sum")] = requests or None
        values[(role, "Errors", "Sum")] = errors if requests else None
        values[(role, "Latency", "p99")] = p99
        values[(role, "Latency", f"PR(:{slo})")] = (
            100 * (requests - slow) / requests if requests else None
        )
        # the slow requests at the p99, the others at it or at the SLO if faster
        latencies = [p99] * slow + [min(p99, slo)] * (requests - slow) if p99 else []
        stats[version] = VersionStats(requests, errors, latencies)
        assert stats[version].p99_ms == p99 and stats[version].slower_than(slo) == slow
    alarms = [
        only(models_template, "AWS::CloudWatch::Alarm", {"AlarmName": f"{base}-{model}-{name}"})
        for name in CANARY_ALARMS
    ]

    def metric_value(stat: dict[str, Any]) -> float | None:
        role = {d["Name"]: d["Value"] for d in stat["Metric"]["Dimensions"]}["role"]
        return values[(role, stat["Metric"]["MetricName"], stat["Stat"])]

    assert {alarm["Properties"]["ComparisonOperator"] for alarm in alarms} == {
        "GreaterThanThreshold"
    }
    cloud = any(evaluate(alarm, metric_value) for alarm in alarms)
    document = RoutingDocument.model_validate({"weights": {"v1": 90, "v2": 10}})
    local = bool(judge(document, stats, manifest.rollout, spec.slo_p99_ms))
    assert cloud == local == rolled_back
    for alarm in alarms:
        (expression,) = [
            m["Expression"] for m in alarm["Properties"]["Metrics"] if "Expression" in m
        ]
        assert len(expression) <= 1024  # CloudWatch's limit on one expression
    for alarm in alarms:
        period = {
            m["MetricStat"]["Period"] for m in alarm["Properties"]["Metrics"] if "MetricStat" in m
        }
        assert period == {manifest.rollout.window_seconds}  # the same window as the controller
