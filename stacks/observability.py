"""What operators watch per model: alarms (two of them also guard routing
rollouts) and one dashboard, built from the EMF metrics the code emits; a pooled
model's dashboard has a row for its pool."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from aws_cdk import ArnFormat, Duration, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_ecs as ecs
from constructs import Construct

from stacks.cloud import (
    ALARM_PERIOD,
    BATCH_AGE_ALARM,
    METRICS_NAMESPACE,
    POOL_DIMENSION,
    POOL_IN_FLIGHT_METRIC,
    POOL_QUEUED_METRIC,
    REALTIME_AGE_ALARM,
    Deployment,
)
from stacks.queues import ModelQueues
from switchyard.budgets import WARN_FRACTION
from switchyard.manifest import ModelSpec, RolloutLimits


def model_metric(
    model: str,
    name: str,
    statistic: str,
    period: Duration = ALARM_PERIOD,
    *,
    role: str | None = None,
) -> cloudwatch.Metric:
    """A metric the router or worker emits, summed over the model's versions, or over
    those holding one ``role`` ("canary" or "stable") in the routing document in
    force when each request was routed."""
    return cloudwatch.Metric(
        namespace=METRICS_NAMESPACE,
        metric_name=name,
        dimensions_map={"model": model, **({"role": role} if role else {})},
        statistic=statistic,
        period=period,
    )


def pool_metric(
    pool: str,
    name: str,
    statistic: str,
    period: Duration = ALARM_PERIOD,
    *,
    model: str | None = None,
) -> cloudwatch.Metric:
    """A metric of a pool: its meter's counts (``POOL_QUEUED_METRIC``...: each of
    its queues one value a minute) or its workers' model cache (``ModelLoads``,
    ``ModelEvictions``, ``ModelLoadTime``...), over the pool or one of its models."""
    return cloudwatch.Metric(
        namespace=METRICS_NAMESPACE,
        metric_name=name,
        dimensions_map={POOL_DIMENSION: pool, **({"model": model} if model else {})},
        statistic=statistic,
        period=period,
    )


def pool_total(pool: str, name: str, queue_count: int, label: str) -> cloudwatch.MathExpression:
    """One of a pool's meter counts summed over its queues: each queue is one value
    of the minute, so the Average times the number of queues, in whole messages."""
    each = name[0].lower() + name[1:]  # its id in the graph, one per count
    return cloudwatch.MathExpression(
        expression=f"FLOOR({each} * {queue_count} + 0.5)",
        using_metrics={each: pool_metric(pool, name, "Average")},
        label=label,
        period=ALARM_PERIOD,
    )


@dataclass(frozen=True)
class PoolView:
    """What a pooled model's dashboard shows of its pool: the pool's service and
    how many queues its meter reads."""

    pool: str
    service: ecs.BaseService
    queue_count: int


def service_metric(service: ecs.BaseService, name: str) -> cloudwatch.Metric:
    """Container Insights' per-service task counts (DesiredTaskCount, RunningTaskCount…)."""
    return cloudwatch.Metric(
        namespace="ECS/ContainerInsights",
        metric_name=name,
        dimensions_map={
            "ClusterName": service.cluster.cluster_name,
            "ServiceName": service.service_name,
        },
        statistic="Maximum",
        period=ALARM_PERIOD,
    )


class ModelAlarms(Construct):
    """DLQ not empty, p99 over the SLO, error rate, age of the oldest message, and
    the canary alarms that AppConfig watches while a routing document rolls out.

    The canary alarms apply the local rollback controller's rule (see
    ``switchyard.canary``) to the router's per-role metrics over the
    rollout window: a canary is judged against the stable version, so an absolute
    limit (error rate, SLO) counts only where the canary is also worse than stable
    by the margin; against itself alone only when stable has too few requests to
    compare with. The model-wide error rate is watched too, so that a document that
    moves all traffic at once is also rolled back.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        deployment: Deployment,
        model: str,
        spec: ModelSpec,
        queues: ModelQueues,
    ) -> None:
        super().__init__(scope, construct_id)
        prefix = f"{deployment.names.base}-{model}"
        limits = deployment.manifest.rollout
        error_rate_percent = 100 * limits.max_error_rate
        self.error_rate = cloudwatch.MathExpression(
            expression="100 * FILL(errors, 0) / requests",
            using_metrics={
                "errors": model_metric(model, "Errors", "Sum"),
                "requests": model_metric(model, "Requests", "Sum"),
            },
            label="Error rate (%)",
            period=ALARM_PERIOD,
        ).create_alarm(
            self,
            "ErrorRate",
            alarm_name=f"{prefix}-error-rate",
            alarm_description=f"More than {error_rate_percent:g}% of {model}'s requests failed",
            threshold=error_rate_percent,
            evaluation_periods=3,
            datapoints_to_alarm=2,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        self.latency_p99 = model_metric(model, "Latency", "p99").create_alarm(
            self,
            "LatencyP99",
            alarm_name=f"{prefix}-latency-p99",
            alarm_description=f"{model}'s p99 latency is over its {spec.slo_p99_ms} ms SLO",
            threshold=spec.slo_p99_ms,
            evaluation_periods=3,
            datapoints_to_alarm=2,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        self.canary: list[cloudwatch.IAlarm] = [
            *self._canary_alarms(prefix, model, spec, limits),
            self.error_rate,
        ]

        self.dlq_not_empty: dict[str, cloudwatch.Alarm] = {}
        self.oldest_message: dict[str, cloudwatch.Alarm] = {}
        ages = {"realtime": REALTIME_AGE_ALARM, "batch": BATCH_AGE_ALARM}
        for lane, dlq in queues.dlqs.items():
            self.dlq_not_empty[lane] = dlq.metric_approximate_number_of_messages_visible(
                period=ALARM_PERIOD, statistic="Maximum"
            ).create_alarm(
                self,
                f"{lane.title()}DlqNotEmpty",
                alarm_name=f"{prefix}-{lane}-dlq-not-empty",
                alarm_description=f"A {model} {lane} message failed "
                f"{deployment.manifest.platform.max_receive_count} times and sits in the DLQ",
                threshold=0,
                evaluation_periods=1,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            )
            self.oldest_message[lane] = (
                queues.queues[lane]
                .metric_approximate_age_of_oldest_message(period=ALARM_PERIOD, statistic="Maximum")
                .create_alarm(
                    self,
                    f"{lane.title()}OldestMessage",
                    alarm_name=f"{prefix}-{lane}-oldest-message",
                    alarm_description=f"{model}'s oldest {lane} message has waited longer "
                    f"than {ages[lane].to_human_string()}",
                    threshold=ages[lane].to_seconds(),
                    evaluation_periods=2,
                    comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
                    treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
                )
            )

    def _canary_alarms(
        self, prefix: str, model: str, spec: ModelSpec, limits: RolloutLimits
    ) -> list[cloudwatch.Alarm]:
        """``judge``'s rule, one alarm per limit and per case: a canary judged alone
        (stable has too few requests) or against stable. Each alarm's value is the
        canary's error rate (%) or p99 (ms) where the rest of its case holds, else 0,
        so that its threshold is the absolute limit. A role's requests over the SLO
        are its requests times the share of its latencies above the SLO
        (``100 - PR(:SLO)``, CloudWatch's percentile rank)."""
        window = Duration.seconds(limits.window_seconds)
        slo = spec.slo_p99_ms
        metrics = {
            f"{role[0]}{short}": model_metric(model, name, statistic, window, role=role)
            for role in ("canary", "stable")
            for short, name, statistic in (
                ("r", "Requests", "Sum"),
                ("e", "Errors", "Sum"),
                ("p", "Latency", "p99"),
                ("u", "Latency", f"PR(:{slo})"),
            )
        }
        n = limits.min_requests
        judged = f"FILL(cr, 0) >= {n}"
        alone = f"{judged} AND FILL(sr, 0) < {n}"
        compared = f"{judged} AND FILL(sr, 0) >= {n}"

        def beyond_noise(canary_hits: str, stable_hits: str, margin: float) -> str:
            """``traffic._beyond_noise`` over each role's hits and requests."""
            excess = f"({canary_hits} / FILL(cr, 1) - {stable_hits} / FILL(sr, 1) - {margin:g})"
            pooled = f"(({canary_hits} + {stable_hits}) / (FILL(cr, 1) + FILL(sr, 0)))"
            noise = (
                f"{limits.noise_z**2:g} * ({pooled} * (1 - {pooled}) "
                "* (1 / FILL(cr, 1) + 1 / FILL(sr, 1)))"
            )
            # Hits are whole requests; a count from a percentile rank may be off by a
            # rounding error, so the least count is compared half a request lower.
            return (
                f"{canary_hits} > {limits.noise_min_count - 0.5:g} AND {excess} > 0 "
                f"AND {excess} * {excess} > {noise}"
            )

        rate = "FILL(ce, 0) / FILL(cr, 1)"
        errors_beyond_noise = beyond_noise(
            "FILL(ce, 0)", "FILL(se, 0)", limits.max_error_rate_over_stable
        )
        slow = "((100 - FILL({}, 100)) / 100 * FILL({}, 0))"
        slow_beyond_noise = beyond_noise(slow.format("cu", "cr"), slow.format("su", "sr"), 0)
        p99 = "FILL(cp, 0)"
        error_limit = f"{limits.max_error_rate:.0%} of its requests"
        rules = [
            (
                "CanaryErrorRate",
                "error-rate",
                f"IF({alone}, 100 * {rate}, 0)",
                100 * limits.max_error_rate,
                f"A canary of {model} failed more than {error_limit}, and the stable "
                "version had too few requests to compare with",
            ),
            (
                "CanaryErrorRateOverStable",
                "error-rate-over-stable",
                f"IF({compared} AND {errors_beyond_noise}, 100 * {rate}, 0)",
                100 * limits.max_error_rate,
                f"A canary of {model} failed more than {error_limit}, and more than "
                f"{limits.max_error_rate_over_stable:.0%} above the stable version's "
                "error rate beyond noise",
            ),
            (
                "CanaryLatencyP99",
                "latency-p99",
                f"IF({alone}, {p99}, 0)",
                spec.slo_p99_ms,
                f"A canary of {model} has a p99 latency over the {spec.slo_p99_ms} ms SLO, "
                "and the stable version had too few requests to compare with",
            ),
            (
                "CanaryLatencyOverStable",
                "latency-over-stable",
                f"IF({compared} AND {p99} > {limits.max_p99_ratio:g} * FILL(sp, 0) "
                f"AND {slow_beyond_noise}, {p99}, 0)",
                spec.slo_p99_ms,
                f"A canary of {model} has a p99 latency over the {spec.slo_p99_ms} ms SLO "
                f"and over {limits.max_p99_ratio:g} times the stable version's, and more of "
                "its requests over the SLO than the stable version beyond noise",
            ),
        ]
        return [
            cloudwatch.MathExpression(
                expression=expression,
                # Only the metrics an expression reads: each one is billed with the alarm.
                using_metrics={
                    k: m for k, m in metrics.items() if re.search(rf"\b{k}\b", expression)
                },
                period=window,
            ).create_alarm(
                self,
                construct_id,
                alarm_name=f"{prefix}-canary-{name}",
                alarm_description=description,
                threshold=threshold,
                evaluation_periods=1,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            )
            for construct_id, name, expression, threshold, description in rules
        ]

    @property
    def all(self) -> list[cloudwatch.IAlarm]:
        return [
            *self.canary,
            self.latency_p99,
            *self.dlq_not_empty.values(),
            *self.oldest_message.values(),
        ]


class BudgetAlarms(Construct):
    """One alarm per tenant with a monthly budget: its month's spend has reached 80 %
    of it (``TenantBudgetUsed``, in percent, which the routers file as they read a
    tenant's budget: switchyard.budgets). At 100 % the routers refuse the tenant's new
    work, or move it to the batch lane, by themselves."""

    def __init__(self, scope: Construct, construct_id: str, *, deployment: Deployment) -> None:
        super().__init__(scope, construct_id)
        names = deployment.names
        self.alarms: dict[str, cloudwatch.Alarm] = {}
        for tenant in deployment.manifest.budgeted_tenants():
            budget = deployment.manifest.tenants[tenant].monthly_budget_usd
            self.alarms[tenant] = cloudwatch.Metric(
                namespace=METRICS_NAMESPACE,
                metric_name="TenantBudgetUsed",
                dimensions_map={"tenant": tenant},
                period=Duration.minutes(5),
                statistic="Maximum",
            ).create_alarm(
                self,
                f"Budget-{tenant}",
                alarm_name=f"{names.base}-{tenant}-budget-80pct",
                alarm_description=f"Tenant {tenant} has spent {WARN_FRACTION:.0%} or more of its "
                f"monthly budget (${budget:,.2f} in the manifest, unless raised since with "
                "`switchyard budget set`); at 100 % its new work is refused or batched",
                threshold=100 * WARN_FRACTION,
                evaluation_periods=1,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            )


class NamedAlarms(Construct):
    """A model's alarms made in another stack (``stacks.models``), referred to by
    their names, which are fixed: the canary alarms that AppConfig watches, and all
    of them for the dashboard. No CloudFormation export ties the two stacks."""

    def __init__(self, scope: Construct, construct_id: str, *, alarms: ModelAlarms) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        named: dict[str, cloudwatch.IAlarm] = {}

        def by_name(alarm: cloudwatch.IAlarm) -> cloudwatch.IAlarm:
            name = cast(cloudwatch.CfnAlarm, alarm.node.default_child).alarm_name
            assert name is not None, f"{alarm.node.path} has no name to be found by"
            if name not in named:
                arn = stack.format_arn(
                    service="cloudwatch",
                    resource="alarm",
                    resource_name=name,
                    arn_format=ArnFormat.COLON_RESOURCE_NAME,
                )
                named[name] = cloudwatch.Alarm.from_alarm_arn(self, name, arn)
            return named[name]

        self.canary = [by_name(alarm) for alarm in alarms.canary]
        self.all = [by_name(alarm) for alarm in alarms.all]


class ModelDashboard(Construct):
    """One page per model: traffic, latency, queues, tasks, batching, errors. A
    model served by a pool (``pool``) shows its pool's tasks, and a row for the
    pool: its workers, its queues summed over its models, its model cache's loads
    and evictions (this model's cold loads beside them) and load times."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        deployment: Deployment,
        model: str,
        spec: ModelSpec,
        queues: ModelQueues,
        service: ecs.BaseService,
        alarms: ModelAlarms | NamedAlarms,
        pool: PoolView | None = None,
    ) -> None:
        super().__init__(scope, construct_id)

        def graph(
            title: str, left: list[cloudwatch.IMetric], **kwargs: object
        ) -> cloudwatch.GraphWidget:
            return cloudwatch.GraphWidget(title=title, left=left, width=8, height=6, **kwargs)  # type: ignore[arg-type]

        def lanes(metric: str, *, with_dlqs: bool = False) -> list[cloudwatch.IMetric]:
            groups = [("", queues.queues), *([(" DLQ", queues.dlqs)] if with_dlqs else [])]
            return [
                queue.metric(metric, statistic="Maximum", period=ALARM_PERIOD, label=lane + suffix)
                for suffix, group in groups
                for lane, queue in group.items()
            ]

        per_version = cloudwatch.MathExpression(
            expression=(
                f'SEARCH(\'{{{METRICS_NAMESPACE},model,version}} MetricName="Requests" '
                f"model=\"{model}\"', 'Sum', 60)"
            ),
            label="",
            period=ALARM_PERIOD,
        )
        self.dashboard = cloudwatch.Dashboard(
            self,
            "Dashboard",
            dashboard_name=f"{deployment.names.base}-{model}",
            default_interval=Duration.hours(3),
            widgets=[
                [
                    graph("Requests", [model_metric(model, "Requests", "Sum")]),
                    graph(
                        "Latency (end to end, ms)",
                        [
                            model_metric(model, "Latency", "p50"),
                            model_metric(model, "Latency", "p99"),
                        ],
                        left_annotations=[
                            cloudwatch.HorizontalAnnotation(value=spec.slo_p99_ms, label="p99 SLO")
                        ],
                    ),
                    graph("Traffic per version", [per_version]),
                ],
                [
                    graph(
                        "Queue depth",
                        lanes("ApproximateNumberOfMessagesVisible", with_dlqs=True),
                    ),
                    graph(
                        "Age of oldest message (s)",
                        lanes("ApproximateAgeOfOldestMessage"),
                    ),
                    graph(
                        "Worker tasks",
                        [
                            service_metric(service, "DesiredTaskCount"),
                            service_metric(service, "RunningTaskCount"),
                            service_metric(service, "PendingTaskCount"),
                        ],
                    ),
                ],
                [
                    graph(
                        "Batch size",
                        [
                            model_metric(model, "BatchSize", "Average"),
                            model_metric(model, "BatchSize", "Maximum"),
                        ],
                        left_annotations=[
                            cloudwatch.HorizontalAnnotation(
                                value=spec.max_batch_size, label="max_batch_size"
                            )
                        ],
                    ),
                    graph(
                        "Queue wait and compute (ms)",
                        [
                            model_metric(model, "QueueWait", "p50"),
                            model_metric(model, "QueueWait", "p99"),
                            model_metric(model, "Compute", "p50"),
                            model_metric(model, "Compute", "p99"),
                        ],
                    ),
                    graph(
                        "Errors",
                        [
                            model_metric(model, "Errors", "Sum"),
                            model_metric(model, "ItemErrors", "Sum"),
                            model_metric(model, "Fallbacks", "Sum"),
                        ],
                    ),
                ],
                *([self._pool_row(model, pool)] if pool else []),
                [cloudwatch.AlarmStatusWidget(title="Alarms", alarms=alarms.all, width=24)],
            ],
        )

    @staticmethod
    def _pool_row(model: str, pool: PoolView) -> list[cloudwatch.IWidget]:
        name = pool.pool

        def graph(
            title: str, left: list[cloudwatch.IMetric], right: Sequence[cloudwatch.IMetric] = ()
        ) -> cloudwatch.GraphWidget:
            return cloudwatch.GraphWidget(
                title=f"Pool {name}: {title}", left=left, right=list(right), width=6, height=6
            )

        return [
            graph(
                "workers",
                [
                    service_metric(pool.service, "DesiredTaskCount"),
                    service_metric(pool.service, "RunningTaskCount"),
                    service_metric(pool.service, "PendingTaskCount"),
                ],
            ),
            graph(
                "queue depth, all its models",
                [
                    pool_total(name, POOL_QUEUED_METRIC, pool.queue_count, "Visible"),
                    pool_total(name, POOL_IN_FLIGHT_METRIC, pool.queue_count, "In flight"),
                ],
            ),
            graph(
                "model loads and evictions",
                [
                    pool_metric(name, "ModelLoads", "Sum").with_(label="Loads"),
                    pool_metric(name, "ModelEvictions", "Sum").with_(label="Evictions"),
                    pool_metric(name, "ModelLoads", "Sum", model=model).with_(
                        label=f"Cold loads of {model}"
                    ),
                ],
            ),
            graph(
                "load time (ms); resident versions and their memory (MiB, right)",
                [
                    pool_metric(name, "ModelLoadTime", "p50").with_(label="Load p50"),
                    pool_metric(name, "ModelLoadTime", "p99").with_(label="Load p99"),
                    pool_metric(name, "PoolResidentVersions", "Maximum").with_(
                        label="Resident versions"
                    ),
                ],
                right=[
                    pool_metric(name, "PoolResidentMemory", "Maximum").with_(
                        label="Resident memory (MiB)"
                    )
                ],
            ),
        ]
