"""A worker pool in the cloud: one ECS service whose workers serve every model that
names the pool, scaled on the sum of those models' work, and the meter that makes
that sum a metric an alarm can read.

Why a meter: the pool's scaling alarms need the visible and in-flight messages of
every queue of its models (two per model), and a CloudWatch alarm on metric math
reads at most 10 metrics. A Metrics Insights query would read them all, but the
documented operators of its WHERE clause compare whole label values (``=``,
``!=``), no pattern: a pool's queues share no name a query could select them by (a
queue is named for its model), and a pool of 50 models' 100 queue names, each
spelled out, is over the 2,048 characters of an alarm's query. So the meter, a
Step Functions Express state machine that
EventBridge starts every minute, reads each queue's counts (GetQueueAttributes)
and publishes them with one PutMetricData per 150 queues: two metrics under the
pool's dimension, each queue one value of the minute. The Average of a metric,
times the pool's queue count, is the sum (and stays the sum if the meter runs
twice in a minute). The oldest message needs no meter: the rule's oldest is the
oldest of all, so one age alarm per model, each on its model's two queues, asks
for one more worker when any of them is over the target.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aws_cdk import Aws, Stack
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from stacks.cloud import (
    LOG_RETENTION,
    METRICS_NAMESPACE,
    POOL_DIMENSION,
    POOL_IN_FLIGHT_METRIC,
    POOL_METER_VALUES_PER_DATUM,
    POOL_QUEUED_METRIC,
    SCALING_PERIOD,
    Deployment,
)
from stacks.compute import ServiceWork, WorkerService
from stacks.endpoint import SharedServing, grant_worker, worker_environment
from stacks.nag import acknowledge, ignore_cfn_lint
from stacks.observability import PoolView
from stacks.queues import ModelQueues
from switchyard.manifest import POOL_TAG, PoolSpec

# The counts the meter reads of each queue, and the metric each one becomes.
_METER_COUNTS = {
    "queued": ("ApproximateNumberOfMessages", POOL_QUEUED_METRIC),
    "inFlight": ("ApproximateNumberOfMessagesNotVisible", POOL_IN_FLIGHT_METRIC),
}
_RETRY = [{"ErrorEquals": ["States.ALL"], "IntervalSeconds": 1, "MaxAttempts": 2}]


def meter_definition(pool: str, chunks: list[list[str]]) -> dict[str, Any]:
    """The meter's state machine (Amazon States Language): for each chunk of queue
    URLs, read every queue's counts, then publish them, one value per queue."""
    aws_sdk = f"arn:{Aws.PARTITION}:states:::aws-sdk"
    states: dict[str, Any] = {}
    for i, urls in enumerate(chunks, start=1):
        last = i == len(chunks)
        states[f"Queues{i}"] = {"Type": "Pass", "Result": urls, "Next": f"Count{i}"}
        states[f"Count{i}"] = {
            "Type": "Map",
            "MaxConcurrency": 20,
            "ItemProcessor": {
                "ProcessorConfig": {"Mode": "INLINE"},
                "StartAt": "Attributes",
                "States": {
                    "Attributes": {
                        "Type": "Task",
                        "Resource": f"{aws_sdk}:sqs:getQueueAttributes",
                        "Parameters": {
                            "QueueUrl.$": "$",
                            "AttributeNames": [sqs_name for sqs_name, _ in _METER_COUNTS.values()],
                        },
                        # SQS answers counts as strings; PutMetricData takes numbers.
                        "ResultSelector": {
                            f"{key}.$": f"States.StringToJson($.Attributes.{sqs_name})"
                            for key, (sqs_name, _) in _METER_COUNTS.items()
                        },
                        "Retry": _RETRY,
                        "End": True,
                    }
                },
            },
            "Next": f"Publish{i}",
        }
        states[f"Publish{i}"] = {
            "Type": "Task",
            "Resource": f"{aws_sdk}:cloudwatch:putMetricData",
            "Parameters": {
                "Namespace": METRICS_NAMESPACE,
                "MetricData": [
                    {
                        "MetricName": metric,
                        "Dimensions": [{"Name": POOL_DIMENSION, "Value": pool}],
                        "Unit": "Count",
                        "Values.$": f"$[*].{key}",
                    }
                    for key, (_, metric) in _METER_COUNTS.items()
                ],
            },
            "ResultPath": None,
            "Retry": _RETRY,
            **({"End": True} if last else {"Next": f"Queues{i + 1}"}),
        }
    return {
        "Comment": f"Switchyard pool {pool}: every queue's visible and in-flight messages",
        "StartAt": "Queues1",
        "States": states,
    }


class PoolMeter(Construct):
    """Every minute, the visible and in-flight messages of each queue of a pool's
    models, published under the pool's dimension (see the module's docstring)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        deployment: Deployment,
        pool: str,
        queues: Mapping[str, ModelQueues],
    ) -> None:
        super().__init__(scope, construct_id)
        read: list[sqs.IQueue] = [
            queue for model_queues in queues.values() for queue in model_queues.queues.values()
        ]
        self.queue_count = len(read)
        step = POOL_METER_VALUES_PER_DATUM
        chunks = [[q.queue_url for q in read[i : i + step]] for i in range(0, len(read), step)]
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("states.amazonaws.com"),
            description=f"The meter of pool {pool}: reads its queues' counts, publishes them",
        )
        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["sqs:GetQueueAttributes"], resources=[q.queue_arn for q in read]
            )
        )
        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["cloudwatch:PutMetricData"],
                resources=["*"],
                conditions={"StringEquals": {"cloudwatch:namespace": METRICS_NAMESPACE}},
            )
        )
        self.log_group = logs.LogGroup(
            self, "Logs", retention=LOG_RETENTION, removal_policy=deployment.removal_policy
        )
        self.state_machine = sfn.StateMachine(
            self,
            "StateMachine",
            state_machine_type=sfn.StateMachineType.EXPRESS,
            definition_body=sfn.DefinitionBody.from_string(
                Stack.of(self).to_json_string(meter_definition(pool, chunks))
            ),
            role=self.role,
            logs=sfn.LogOptions(destination=self.log_group, level=sfn.LogLevel.ERROR),
            tracing_enabled=True,
            comment=f"Switchyard pool {pool}: its queues' counts, every minute",
        )
        self.schedule = events.Rule(
            self,
            "EveryMinute",
            description=f"Starts the meter of pool {pool}, which its scaling alarms read",
            schedule=events.Schedule.rate(SCALING_PERIOD),
            targets=[targets.SfnStateMachine(self.state_machine)],
        )
        ignore_cfn_lint(
            self.state_machine,
            "W3005",
            "aws-cdk-lib makes the state machine depend on its role and the role's policy, "
            "so the policy exists before the first run; the role's GetAtt alone would not "
            "wait for it.",
        )
        acknowledge(
            self.state_machine,
            "AwsSolutions-SF1",
            "The meter runs every minute and reads every queue of the pool: logging ALL "
            "events would write each queue's counts each minute, which its metrics "
            "already hold; failures are logged (ERROR).",
        )
        acknowledge(
            self.role,
            "AwsSolutions-IAM5[Resource::*]",
            "cloudwatch:PutMetricData takes no resource ARN (it is limited to the "
            "Switchyard namespace by condition); X-Ray's trace writes and Step Functions' "
            "log delivery calls take none either.",
        )


class PoolWorkers(Construct):
    """A pool's worker service and its meter: the workers serve every model that
    names the pool (their environment lists them, their role reaches the queues of
    those models and no other), on the pool's capacity provider and task size, and
    scale by ``Manifest.pool_scaling_policy`` on the sum of those models' work."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        deployment: Deployment,
        pool: str,
        spec: PoolSpec,
        shared: SharedServing,
        queues: Mapping[str, ModelQueues],
        overflow_queues: Mapping[str, ModelQueues] | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        # It scales on its own models' work; it also takes the work of the models it
        # serves on overflow (a CPU pool), while their gates are open.
        served = {**queues, **(overflow_queues or {})}
        self.meter = PoolMeter(self, "Meter", deployment=deployment, pool=pool, queues=queues)
        self.worker = WorkerService(
            self,
            "Worker",
            deployment=deployment,
            compute=shared.compute,
            service=pool,
            compute_class=spec.compute,
            capacity=shared.compute.pool_capacity[pool],
            policy=deployment.pool_scaling_policy(pool),
            work=ServiceWork.of_pool(pool, queues, self.meter.queue_count),
            environment=worker_environment(
                self,
                deployment=deployment,
                shared=shared,
                queues=served,
                **deployment.manifest.pool_worker_values(pool),
            ),
            tag=(POOL_TAG, pool),
        )
        role = self.worker.task_definition.task_role
        grant_worker(
            role,
            deployment=deployment,
            shared=shared,
            queues=served,
            generates=any(deployment.manifest.models[m].generates for m in queues),
        )
        if overflow_queues:
            # The gates: which workers of the GPU pools run (their items in the
            # results table, one Query) and the age of the models' oldest messages.
            shared.storage.results_table.grant(role, "dynamodb:Query")
            role.add_to_principal_policy(
                iam.PolicyStatement(actions=["cloudwatch:GetMetricData"], resources=["*"])
            )
            acknowledge(
                role,
                "AwsSolutions-IAM5[Resource::*]",
                "cloudwatch:GetMetricData takes no resource ARN; the CPU pool reads SQS's "
                "age of the oldest message of the models it takes on overflow.",
            )
        self.view = PoolView(
            pool=pool, service=self.worker.service, queue_count=self.meter.queue_count
        )
