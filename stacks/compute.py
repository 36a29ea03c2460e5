"""Where workers run: an ECS cluster whose GPU and CPU capacity starts at zero
instances, and a worker service per model that has one of its own and per pool,
each scaled by the queues it serves."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

import jsii
from aws_cdk import AspectPriority, Aspects, Duration, IAspect, IgnoreMode, Stack, Tags
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from constructs import Construct, IConstruct

from stacks.assets import REPO_ROOT, WORKER_DOCKERFILE
from stacks.cloud import (
    LOG_RETENTION,
    POOL_IN_FLIGHT_METRIC,
    POOL_QUEUED_METRIC,
    ROOT_VOLUME_GIB,
    SCALING_PERIOD,
    TASK_SIZE,
    WORKER_READY_FILE,
    WORKER_START_PERIOD,
    WORKER_STOP_TIMEOUT,
    Deployment,
)
from stacks.nag import acknowledge, skip_checkov
from stacks.observability import model_metric, pool_metric, service_metric
from stacks.queues import ModelQueues
from switchyard.scaling import ScalingPolicy

# The build context is the repository root; only what the image needs is sent.
_IMAGE_CONTEXT_EXCLUDES = [
    "*",
    "!gpu_workers",
    "!layers/core",
    "**/__pycache__",
    "**/*.pyc",
]


class Compute(Construct):
    """VPC, cluster, one capacity provider per compute class of the models that have
    a service of their own, and one per pool (with the pool's instance types).

    Each is an Auto Scaling group on the ECS-optimized AMI (the GPU variant for
    ``gpu``), with the manifest's instance types, minimum 0 and ECS managed
    scaling: instances exist only while worker tasks need them.
    """

    def __init__(self, scope: Construct, construct_id: str, *, deployment: Deployment) -> None:
        super().__init__(scope, construct_id)
        nat = deployment.nat_gateways
        flow_logs = logs.LogGroup(
            self, "FlowLogs", retention=LOG_RETENTION, removal_policy=deployment.removal_policy
        )
        subnets = [ec2.SubnetConfiguration(name="public", subnet_type=ec2.SubnetType.PUBLIC)]
        if nat:
            subnets.append(
                ec2.SubnetConfiguration(
                    name="workers", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, cidr_mask=20
                )
            )
        self.vpc = ec2.Vpc(
            self,
            "Vpc",
            max_azs=2,
            nat_gateways=nat,
            subnet_configuration=subnets,
            gateway_endpoints={
                "S3": ec2.GatewayVpcEndpointOptions(service=ec2.GatewayVpcEndpointAwsService.S3),
                "DynamoDB": ec2.GatewayVpcEndpointOptions(
                    service=ec2.GatewayVpcEndpointAwsService.DYNAMODB
                ),
            },
            flow_logs={
                "All": ec2.FlowLogOptions(
                    destination=ec2.FlowLogDestination.to_cloud_watch_logs(flow_logs),
                    traffic_type=ec2.FlowLogTrafficType.ALL,
                )
            },
        )
        self.worker_subnets = ec2.SubnetSelection(
            subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS if nat else ec2.SubnetType.PUBLIC
        )
        self.cluster = ecs.Cluster(
            self,
            "Cluster",
            vpc=self.vpc,
            container_insights_v2=ecs.ContainerInsights.ENABLED,
        )
        # Workers only call AWS APIs; nothing may connect to them.
        self.security_group = ec2.SecurityGroup(
            self,
            "WorkerHosts",
            vpc=self.vpc,
            description="Worker instances: outbound to AWS APIs only, no inbound",
            allow_all_outbound=True,
        )
        # By compute class, for the models with a service of their own; by pool.
        self.capacity: dict[str, ecs.AsgCapacityProvider] = {}
        self.pool_capacity: dict[str, ecs.AsgCapacityProvider] = {}
        own = {m: spec for m, spec in deployment.manifest.models.items() if spec.pool is None}
        for compute in ("gpu", "cpu"):
            specs = {m: spec for m, spec in own.items() if spec.compute == compute}
            if specs:
                # One task per instance: the hosts follow the sum of the models' maximums.
                self.capacity[compute] = self._capacity_provider(
                    compute.title(),
                    compute,
                    list(dict.fromkeys(t for spec in specs.values() for t in spec.instance_types)),
                    sum(deployment.scaling_policy(m).max_tasks for m in specs),
                    f"the {compute} capacity provider",
                )
        for pool, pool_spec in deployment.manifest.pools.items():
            self.pool_capacity[pool] = self._capacity_provider(
                f"Pool-{pool}-",
                pool_spec.compute,
                list(pool_spec.instance_types),
                deployment.pool_scaling_policy(pool).max_tasks,
                f"pool {pool}",
            )
        self.worker_image = ecs.ContainerImage.from_docker_image_asset(
            ecr_assets.DockerImageAsset(
                self,
                "WorkerImage",
                directory=str(REPO_ROOT),
                file=WORKER_DOCKERFILE,
                exclude=_IMAGE_CONTEXT_EXCLUDES,
                ignore_mode=IgnoreMode.DOCKER,
                platform=ecr_assets.Platform.LINUX_AMD64,
            )
        )

    def _capacity_provider(
        self, prefix: str, compute: str, instance_types: list[str], max_hosts: int, of: str
    ) -> ecs.AsgCapacityProvider:
        """Hosts of ``instance_types`` for ``compute`` workers, at most ``max_hosts``;
        construct ids start with ``prefix``, descriptions say whose they are (``of``)."""
        hardware = ecs.AmiHardwareType.GPU if compute == "gpu" else ecs.AmiHardwareType.STANDARD
        user_data = ec2.UserData.for_linux()
        if compute == "gpu":
            user_data.add_commands("echo ECS_ENABLE_GPU_SUPPORT=true >> /etc/ecs/ecs.config")
        role = iam.Role(
            self,
            f"{prefix}InstanceRole",
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            description=f"ECS container instances of {of}",
        )
        template = ec2.LaunchTemplate(
            self,
            f"{prefix}Template",
            machine_image=ecs.EcsOptimizedImage.amazon_linux2023(hardware),
            instance_type=ec2.InstanceType(instance_types[0]),
            user_data=user_data,
            role=role,
            security_group=self.security_group,
            require_imdsv2=True,
            # Containers (bridge network) are one hop further: they cannot reach the
            # instance role through IMDS and use their task role instead.
            http_put_response_hop_limit=1,
            block_devices=[
                ec2.BlockDevice(
                    device_name="/dev/xvda",
                    volume=ec2.BlockDeviceVolume.ebs(
                        ROOT_VOLUME_GIB, encrypted=True, volume_type=ec2.EbsDeviceVolumeType.GP3
                    ),
                )
            ],
        )
        group = autoscaling.AutoScalingGroup(
            self,
            f"{prefix}Hosts",
            vpc=self.vpc,
            vpc_subnets=self.worker_subnets,
            mixed_instances_policy=autoscaling.MixedInstancesPolicy(
                launch_template=template,
                launch_template_overrides=[
                    autoscaling.LaunchTemplateOverrides(instance_type=ec2.InstanceType(t))
                    for t in instance_types
                ],
                instances_distribution=autoscaling.InstancesDistribution(
                    on_demand_percentage_above_base_capacity=100,
                    on_demand_allocation_strategy=autoscaling.OnDemandAllocationStrategy.PRIORITIZED,
                ),
            ),
            min_capacity=0,
            # One GPU task per GPU instance; CPU tasks are sized to one per host too.
            max_capacity=max_hosts,
        )
        acknowledge(
            group,
            "AwsSolutions-EC26",
            "The root volume is encrypted in the launch template (BlockDeviceMappings, "
            "Encrypted: true); the rule cannot follow the mixed-instances reference to it.",
        )
        acknowledge(
            group,
            "AwsSolutions-AS3",
            "Instances come and go with ECS managed scaling as worker tasks need them; "
            "operators follow it on the per-model task-count graphs, not per event.",
        )
        provider = ecs.AsgCapacityProvider(
            self,
            f"{prefix}Capacity",
            auto_scaling_group=group,
            enable_managed_scaling=True,
            enable_managed_termination_protection=True,
            enable_managed_draining=True,
            target_capacity_percent=100,
        )
        self.cluster.add_asg_capacity_provider(provider)
        skip_checkov(
            role.node.find_child("DefaultPolicy"),
            "CKV_AWS_111",
            "aws-cdk-lib's ECS instance policy: the agent's log writes and "
            "ecr:GetAuthorizationToken take no narrower resource; its ECS writes are "
            "limited to this cluster.",
        )
        acknowledge(
            role,
            "AwsSolutions-IAM5[Resource::*]",
            "The ECS agent's discovery, polling and telemetry calls (ecs:DiscoverPollEndpoint, "
            "ecs:Poll and ecs:StartTelemetrySession, conditioned on this cluster) and "
            "ecr:GetAuthorizationToken take no resource ARN; CDK's ECS instance policy.",
        )
        acknowledge(
            role,
            "AwsSolutions-IAM5[Action::ecs:Submit*]",
            "The ECS agent reports task and container state changes of this cluster "
            "(ecs:SubmitTaskStateChange and kin); CDK's instance policy scopes it to the cluster.",
        )
        return provider


@jsii.implements(IAspect)
class _AfterCapacityAssociation:
    """Makes a service wait for its cluster's capacity-provider association (ECS
    refuses a capacity provider the cluster does not list yet). aws-cdk-lib adds the
    association to the cluster in an aspect of its own, so it can only be named once
    that has run: hence a later aspect, not a dependency on the whole cluster (whose
    Ref the service already holds)."""

    def __init__(self, cluster: ecs.Cluster) -> None:
        self._cluster = cluster

    def visit(self, node: IConstruct) -> None:
        if isinstance(node, ecs.CfnService):
            association = self._cluster.node.find_child(self._cluster.node.id)
            node.node.add_dependency(association)


@dataclass(frozen=True)
class AgeSource:
    """A model's queues, whose oldest message the age rule reads (``name`` is what
    its alarm's name adds to the service's: nothing for a model's own service)."""

    model: str
    queues: ModelQueues
    name: str = ""


@dataclass(frozen=True)
class ServiceWork:
    """What a worker service's scaling alarms read of the work it serves: metrics by
    id, and metric-math text over them (see :meth:`WorkerService._scale_on_queues`).

    ``backlog`` is the visible messages of both lanes of every model served;
    ``work`` adds those in flight (it may name ``backlog``); ``wake`` is what wakes
    the service at zero (it may name ``work``); the idle alarm reads ``quiet``
    (``work`` where None), below 1 when there is nothing to do, and counts a minute
    without data as ``quiet_missing`` says. ``ages``: one age alarm each.
    """

    label: str  # who the alarms' descriptions speak of
    metrics: Mapping[str, cloudwatch.IMetric]
    backlog: str
    work: str
    wake: str
    quiet: str | None
    quiet_missing: cloudwatch.TreatMissingData
    ages: tuple[AgeSource, ...]

    @staticmethod
    def of_model(model: str, queues: ModelQueues) -> ServiceWork:
        """A model's own service: its two queues, read as SQS publishes them (an idle
        queue goes silent), and its router's requests (which wake it too)."""

        def queue_metric(lane: str, name: str) -> cloudwatch.Metric:
            return queues.queues[lane].metric(name, statistic="Maximum", period=SCALING_PERIOD)

        return ServiceWork(
            label=model,
            metrics={
                "rt": queue_metric("realtime", "ApproximateNumberOfMessagesVisible"),
                "bt": queue_metric("batch", "ApproximateNumberOfMessagesVisible"),
                "rtflight": queue_metric("realtime", "ApproximateNumberOfMessagesNotVisible"),
                "btflight": queue_metric("batch", "ApproximateNumberOfMessagesNotVisible"),
                "requests": model_metric(model, "Requests", "Sum", SCALING_PERIOD),
            },
            backlog="FILL(rt, 0) + FILL(bt, 0)",
            work="backlog + FILL(rtflight, 0) + FILL(btflight, 0)",
            wake="work + FILL(requests, 0)",
            quiet=None,
            # SQS stops publishing for queues idle for hours: silence is idleness.
            quiet_missing=cloudwatch.TreatMissingData.BREACHING,
            ages=(AgeSource(model, queues),),
        )

    @staticmethod
    def of_pool(pool: str, models: Mapping[str, ModelQueues], queue_count: int) -> ServiceWork:
        """A pool's service: the sums over every queue of its models, as the pool's
        meter publishes them (``stacks.pools.PoolMeter``: each queue one value of
        the minute, so Average times ``queue_count`` is the sum, rounded off to whole
        messages), and each model's oldest message (one age alarm per model: the
        rule's "oldest" is the oldest of all, so any one of them over the target
        asks for one more)."""
        n = queue_count

        def total(metric: str, missing: int) -> str:
            return f"FLOOR(FILL({metric}, {missing}) * {n} + 0.5)"

        return ServiceWork(
            label=f"pool {pool}",
            metrics={
                "queued": pool_metric(pool, POOL_QUEUED_METRIC, "Average", SCALING_PERIOD),
                "inflight": pool_metric(pool, POOL_IN_FLIGHT_METRIC, "Average", SCALING_PERIOD),
            },
            backlog=total("queued", 0),
            work=f"backlog + {total('inflight', 0)}",
            wake="work",
            # The meter publishes every minute, idle or not: a minute without its
            # figures is no sign of idleness, and never scales the pool in.
            quiet=f"{total('queued', 1)} + {total('inflight', 1)}",
            quiet_missing=cloudwatch.TreatMissingData.NOT_BREACHING,
            ages=tuple(AgeSource(model, queues, f"-{model}") for model, queues in models.items()),
        )


class WorkerService(Construct):
    """One worker service: a model's own, or a pool's. An ECS service whose desired
    count follows the queues it serves, by the rule of ``switchyard.scaling.decide``
    with the numbers of ``Manifest.scaling_policy(model, stage)`` or
    ``Manifest.pool_scaling_policy(pool, stage)`` (see :meth:`_scale_on_queues`)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        deployment: Deployment,
        compute: Compute,
        service: str,
        compute_class: str,
        capacity: ecs.AsgCapacityProvider,
        policy: ScalingPolicy,
        work: ServiceWork,
        environment: Mapping[str, str],
        tag: tuple[str, str],
    ) -> None:
        super().__init__(scope, construct_id)
        size = TASK_SIZE[compute_class]
        self.task_definition = ecs.Ec2TaskDefinition(self, "Task")
        self.log_group = logs.LogGroup(
            self, "Logs", retention=LOG_RETENTION, removal_policy=deployment.removal_policy
        )
        self.container = self.task_definition.add_container(
            "worker",
            image=compute.worker_image,
            cpu=size.cpu,
            memory_reservation_mib=size.memory_mib,
            gpu_count=size.gpus or None,
            environment=dict(environment),
            logging=ecs.LogDrivers.aws_logs(stream_prefix=service, log_group=self.log_group),
            stop_timeout=WORKER_STOP_TIMEOUT,
            health_check=ecs.HealthCheck(
                command=["CMD-SHELL", f"test -f {WORKER_READY_FILE}"],
                start_period=WORKER_START_PERIOD,
                interval=Duration.seconds(30),
                retries=3,
            ),
        )
        min_tasks = policy.min_tasks
        self.service = ecs.Ec2Service(
            self,
            "Service",
            cluster=compute.cluster,
            task_definition=self.task_definition,
            desired_count=min_tasks,
            min_healthy_percent=100 if min_tasks else 0,
            max_healthy_percent=200,
            capacity_provider_strategies=[
                ecs.CapacityProviderStrategy(
                    capacity_provider=capacity.capacity_provider_name, weight=1
                )
            ],
            circuit_breaker=ecs.DeploymentCircuitBreaker(rollback=True),
            enable_ecs_managed_tags=True,
            propagate_tags=ecs.PropagatedTagSource.SERVICE,
        )
        Aspects.of(self.service).add(
            _AfterCapacityAssociation(compute.cluster),
            priority=AspectPriority.DEFAULT,
        )
        Tags.of(self.service).add(*tag)
        acknowledge(
            self.task_definition,
            "AwsSolutions-ECS2",
            "Workers read only resource names and limits from their environment "
            "(the switchyard.settings contract); no secret is passed this way.",
        )
        acknowledge(
            self.task_definition,
            "AwsSolutions-IAM5[Resource::*]",
            "The execution role's ecr:GetAuthorizationToken takes no resource ARN; "
            "image pulls themselves are limited to the asset repository.",
        )
        self._scale_on_queues(deployment, service, policy, work)

    def _scale_on_queues(
        self,
        deployment: Deployment,
        service: str,
        policy: ScalingPolicy,
        work: ServiceWork,
    ) -> None:
        """Render :func:`switchyard.scaling.decide` as alarms whose step policies set
        the service's desired count, between the policy's minimum and maximum (the
        scalable target's bounds: the rule's "bounds" step):

        - **scale-from-zero** (wake): work and no task → the tasks the backlog asks
          for, at least one, at once: a step policy of its own, with no cool-down,
          so that it starts none (a backlog that arrives just after a wake is the
          scale-out's, whose policy has not acted);
        - **scale-out**: tasks, and a backlog that asks for more → that many;
        - **scale-out-on-age**: the oldest message over the target age, though every
          task has run throughout the last ``target_age_seconds`` → one more (a
          pool: one alarm per model, each on the model's oldest message);
        - **idle**: nothing visible or in flight for the idle time → the minimum.

        Each alarm's expression evaluates to the count ``decide`` lands on (0 where
        its rule does not apply), and each step policy sets exactly that count, one
        step per count, so the two cannot drift apart by rounding. The scale-out
        alarms share one policy, hence one cool-down; the wake's has none.

        Where the cloud necessarily differs: it decides on one-minute metric
        periods and counts the idle time and the settled time in whole one-minute
        evaluation periods, where the supervisor ticks every few seconds; "workers"
        is ECS's desired count and "running" the fewest tasks running during the
        minute (a task runs once its container does, before its models are
        loaded); a model's router's request count also wakes its service, because
        SQS stops publishing metrics for a queue idle for hours (a pool's meter
        publishes every minute). The infra tests check the decisions on the same
        scenarios, not the timings.
        """
        prefix = f"{deployment.names.base}-{service}"
        who = work.label
        stack = Stack.of(self)
        target = appscaling.ScalableTarget(
            self,
            "TaskCount",
            service_namespace=appscaling.ServiceNamespace.ECS,
            resource_id=f"service/{self.service.cluster.cluster_name}/{self.service.service_name}",
            scalable_dimension="ecs:service:DesiredCount",
            min_capacity=policy.min_tasks,
            max_capacity=policy.max_tasks,
            role=iam.Role.from_role_arn(
                self,
                "ScalingRole",
                stack.format_arn(
                    service="iam",
                    region="",
                    resource="role/aws-service-role/ecs.application-autoscaling.amazonaws.com",
                    resource_name="AWSServiceRoleForApplicationAutoScaling_ECSService",
                ),
            ),
        )

        metrics: dict[str, cloudwatch.IMetric] = {
            **work.metrics,
            "tasks": service_metric(self.service, "DesiredTaskCount"),
            # The fewest tasks running at any time in the period: all of them ran throughout.
            "running": service_metric(self.service, "RunningTaskCount").with_(statistic="Minimum"),
        }

        def expression(
            scope: dict[str, cloudwatch.IMetric], name: str, text: str, label: str
        ) -> cloudwatch.MathExpression:
            """A named step of the rule; ``text`` may use ``scope``'s metrics and steps."""
            used = {i: m for i, m in scope.items() if re.search(rf"\b{i}\b", text)}
            step = cloudwatch.MathExpression(
                expression=text, using_metrics=used, label=label, period=SCALING_PERIOD
            )
            scope[name] = step
            return step

        cap, per_task = policy.max_tasks, policy.backlog_per_task
        target_age = f"{policy.target_age_seconds:g}"
        expression(metrics, "backlog", work.backlog, "Visible messages")
        work_step = expression(metrics, "work", work.work, "Visible and in flight")
        expression(metrics, "workers", "FILL(tasks, 0)", "Tasks wanted (running and starting)")
        expression(
            metrics,
            "forbacklog",
            f"IF(CEIL(backlog / {per_task}) > {cap}, {cap}, CEIL(backlog / {per_task}))",
            "Tasks the backlog asks for",
        )
        wake = expression(
            metrics,
            "wake",
            f"IF((workers == 0) AND ({work.wake} > 0), IF(forbacklog > 1, forbacklog, 1), 0)",
            "Tasks to start from zero",
        )
        for_backlog = expression(
            metrics,
            "scaleout",
            "IF((workers > 0) AND (forbacklog > workers), forbacklog, 0)",
            "Tasks the backlog asks for, above those wanted",
        )

        def exactly(
            construct_id: str,
            cooldown_seconds: float,
            steps: list[tuple[float | None, float | None, int]],
        ) -> appscaling.StepScalingAction:
            action = appscaling.StepScalingAction(
                self,
                construct_id,
                scaling_target=target,
                adjustment_type=appscaling.AdjustmentType.EXACT_CAPACITY,
                cooldown=Duration.seconds(cooldown_seconds),
                metric_aggregation_type=appscaling.MetricAggregationType.MAXIMUM,
            )
            for lower, upper, count in steps:
                action.add_adjustment(adjustment=count, lower_bound=lower, upper_bound=upper)
            return action

        # An expression whose value is the desired count n (>= 1) breaches a threshold
        # of 1 by n - 1: one step per count, the last open-ended at the maximum.
        to_value: list[tuple[float | None, float | None, int]] = [
            (float(n - 1), float(n) if n < cap else None, n) for n in range(1, cap + 1)
        ]

        def alarm(
            construct_id: str,
            metric: cloudwatch.MathExpression,
            name: str,
            description: str,
            action: appscaling.StepScalingAction,
            evaluation_periods: int = 1,
        ) -> cloudwatch.Alarm:
            created = metric.create_alarm(
                self,
                construct_id,
                alarm_name=f"{prefix}-{name}",
                alarm_description=description,
                threshold=1,
                evaluation_periods=evaluation_periods,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            )
            created.add_alarm_action(cw_actions.ApplicationScalingAction(action))
            return created

        # 1. Wake: a policy of its own with no cool-down. A request at zero waits for
        # this task; the backlog that follows is the scale-out's, not held by the wake.
        self.wake_alarm = alarm(
            "WakeAlarm",
            wake,
            "scale-from-zero",
            f"{who} has work waiting and no worker task",
            exactly("WakeUp", 0, to_value),
        )

        # 3. Scale out, at most once per cool-down: on the backlog at once; on the age
        # of the oldest message once every task has run for the target age.
        scale_out = exactly("ScaleOut", policy.scale_out_cooldown_seconds, to_value)
        self.scale_out_alarm = alarm(
            "ScaleOutAlarm",
            for_backlog,
            "scale-out",
            f"{who}'s backlog asks for more tasks ({per_task} messages per task)",
            scale_out,
        )
        self.age_alarms: dict[str, cloudwatch.Alarm] = {}
        for source in work.ages:
            scope = {
                **metrics,
                "rtage": self._oldest(source.queues, "realtime"),
                "btage": self._oldest(source.queues, "batch"),
            }
            expression(scope, "age", "FILL(MAX([rtage, btage]), 0)", "Age of the oldest message")
            for_age = expression(
                scope,
                "scaleoutage",
                f"IF((workers > 0) AND (workers < {cap}) AND (backlog > 0) "
                f"AND (age > {target_age}) AND (FILL(running, 0) >= workers) "
                "AND (forbacklog <= workers), workers + 1, 0)",
                "One more task: the oldest message is over the target age with every task running",
            )
            self.age_alarms[source.model] = alarm(
                f"AgeAlarm{source.name}",
                for_age,
                f"scale-out-on-age{source.name}",
                f"{source.model}'s oldest message is over {target_age} s with every task "
                + ("running" if who == source.model else f"of {who} running"),
                scale_out,
                evaluation_periods=math.ceil(
                    policy.target_age_seconds / SCALING_PERIOD.to_seconds()
                ),
            )

        # 4. Scale in: nothing queued or in flight for the idle time → the minimum.
        idle_minutes = math.ceil(policy.idle_seconds / SCALING_PERIOD.to_seconds())
        quiet = (
            work_step
            if work.quiet is None
            else expression(metrics, "quiet", work.quiet, "Visible and in flight (idle check)")
        )
        self.idle_alarm = quiet.create_alarm(
            self,
            "IdleAlarm",
            alarm_name=f"{prefix}-idle",
            alarm_description=f"{who} has had no work for {idle_minutes} minutes",
            threshold=1,
            evaluation_periods=idle_minutes,
            comparison_operator=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
            treat_missing_data=work.quiet_missing,
        )
        self.idle_alarm.add_alarm_action(
            cw_actions.ApplicationScalingAction(
                exactly(
                    "ScaleIn", policy.scale_in_cooldown_seconds, [(None, 0.0, policy.min_tasks)]
                )
            )
        )

    @staticmethod
    def _oldest(queues: ModelQueues, lane: str) -> cloudwatch.Metric:
        return queues.queues[lane].metric(
            "ApproximateAgeOfOldestMessage", statistic="Maximum", period=SCALING_PERIOD
        )
