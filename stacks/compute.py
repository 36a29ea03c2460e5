"""Where workers run: an ECS cluster whose GPU and CPU capacity starts at zero
instances, and per model a worker service scaled by its queues."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

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
    ROOT_VOLUME_GIB,
    SCALING_PERIOD,
    TASK_SIZE,
    WORKER_READY_FILE,
    WORKER_START_PERIOD,
    WORKER_STOP_TIMEOUT,
    Deployment,
)
from stacks.nag import acknowledge, skip_checkov
from stacks.observability import model_metric, service_metric
from stacks.queues import ModelQueues
from switchyard.manifest import MODEL_TAG, ModelSpec
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
    """VPC, cluster, and one capacity provider per compute class in the manifest.

    Each class is an Auto Scaling group on the ECS-optimized AMI (the GPU variant
    for ``gpu``), with the manifest's instance types, minimum 0 and ECS managed
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
        self.capacity: dict[str, ecs.AsgCapacityProvider] = {}
        models = deployment.manifest.models
        for compute in ("gpu", "cpu"):
            specs = [spec for spec in models.values() if spec.compute == compute]
            if specs:
                # One task per instance: the hosts follow the sum of the models' maximums.
                max_hosts = sum(
                    deployment.scaling_policy(model).max_tasks
                    for model, spec in models.items()
                    if spec.compute == compute
                )
                self.capacity[compute] = self._capacity_provider(compute, specs, max_hosts)
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
        self, compute: str, specs: list[ModelSpec], max_hosts: int
    ) -> ecs.AsgCapacityProvider:
        hardware = ecs.AmiHardwareType.GPU if compute == "gpu" else ecs.AmiHardwareType.STANDARD
        instance_types = list(dict.fromkeys(t for spec in specs for t in spec.instance_types))
        user_data = ec2.UserData.for_linux()
        if compute == "gpu":
            user_data.add_commands("echo ECS_ENABLE_GPU_SUPPORT=true >> /etc/ecs/ecs.config")
        role = iam.Role(
            self,
            f"{compute.title()}InstanceRole",
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            description=f"ECS container instances of the {compute} capacity provider",
        )
        template = ec2.LaunchTemplate(
            self,
            f"{compute.title()}Template",
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
            f"{compute.title()}Hosts",
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
            f"{compute.title()}Capacity",
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


class WorkerService(Construct):
    """One model's workers: an ECS service whose desired count follows its queues,
    by the rule of ``switchyard.scaling.decide`` with the numbers of
    ``Manifest.scaling_policy(model, stage)`` (see :meth:`_scale_on_queues`)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        deployment: Deployment,
        compute: Compute,
        model: str,
        spec: ModelSpec,
        queues: ModelQueues,
        environment: Mapping[str, str],
    ) -> None:
        super().__init__(scope, construct_id)
        size = TASK_SIZE[spec.compute]
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
            logging=ecs.LogDrivers.aws_logs(stream_prefix=model, log_group=self.log_group),
            stop_timeout=WORKER_STOP_TIMEOUT,
            health_check=ecs.HealthCheck(
                command=["CMD-SHELL", f"test -f {WORKER_READY_FILE}"],
                start_period=WORKER_START_PERIOD,
                interval=Duration.seconds(30),
                retries=3,
            ),
        )
        policy = deployment.scaling_policy(model)
        min_tasks = policy.min_tasks
        provider = compute.capacity[spec.compute]
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
                    capacity_provider=provider.capacity_provider_name, weight=1
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
        Tags.of(self.service).add(MODEL_TAG, model)
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
        self._scale_on_queues(deployment, model, policy, queues)

    def _scale_on_queues(
        self,
        deployment: Deployment,
        model: str,
        policy: ScalingPolicy,
        queues: ModelQueues,
    ) -> None:
        """Render :func:`switchyard.scaling.decide` as alarms whose step policies set
        the service's desired count, between the policy's minimum and maximum (the
        scalable target's bounds: the rule's "bounds" step):

        - **scale-from-zero** (wake): work and no task → the tasks the backlog asks
          for, at least one, at once (no cool-down);
        - **scale-out**: tasks, and a backlog that asks for more → that many;
        - **scale-out-on-age**: the oldest message over the target age, though every
          task has run throughout the last ``target_age_seconds`` → one more;
        - **idle**: nothing visible or in flight for the idle time → the minimum.

        Each alarm's expression evaluates to the count ``decide`` lands on (0 where
        its rule does not apply), and each step policy sets exactly that count, one
        step per count, so the two cannot drift apart by rounding. The scale-out
        alarms share one policy, hence one cool-down.

        Where the cloud necessarily differs: it decides on one-minute metric
        periods and counts the idle time and the settled time in whole one-minute
        evaluation periods, where the supervisor ticks every few seconds; "workers"
        is ECS's desired count and "running" the fewest tasks running during the
        minute (a task runs once its container does, before its models are
        loaded); the router's request count also wakes the service, because SQS
        stops publishing metrics for a queue idle for hours. The infra tests check
        the decisions on the same scenarios, not the timings.
        """
        prefix = f"{deployment.names.base}-{model}"
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

        def queue_metric(lane: str, name: str) -> cloudwatch.Metric:
            return queues.queues[lane].metric(name, statistic="Maximum", period=SCALING_PERIOD)

        metrics: dict[str, cloudwatch.IMetric] = {
            "rt": queue_metric("realtime", "ApproximateNumberOfMessagesVisible"),
            "bt": queue_metric("batch", "ApproximateNumberOfMessagesVisible"),
            "rtflight": queue_metric("realtime", "ApproximateNumberOfMessagesNotVisible"),
            "btflight": queue_metric("batch", "ApproximateNumberOfMessagesNotVisible"),
            "rtage": queue_metric("realtime", "ApproximateAgeOfOldestMessage"),
            "btage": queue_metric("batch", "ApproximateAgeOfOldestMessage"),
            "requests": model_metric(model, "Requests", "Sum", SCALING_PERIOD),
            "tasks": service_metric(self.service, "DesiredTaskCount"),
            # The fewest tasks running at any time in the period: all of them ran throughout.
            "running": service_metric(self.service, "RunningTaskCount").with_(statistic="Minimum"),
        }

        def expression(name: str, text: str, label: str) -> cloudwatch.MathExpression:
            """A named step of the rule; ``text`` may use the metrics and earlier steps."""
            used = {i: m for i, m in metrics.items() if re.search(rf"\b{i}\b", text)}
            step = cloudwatch.MathExpression(
                expression=text, using_metrics=used, label=label, period=SCALING_PERIOD
            )
            metrics[name] = step
            return step

        cap, per_task = policy.max_tasks, policy.backlog_per_task
        target_age = f"{policy.target_age_seconds:g}"
        expression("backlog", "FILL(rt, 0) + FILL(bt, 0)", "Visible messages")
        work = expression(
            "work", "backlog + FILL(rtflight, 0) + FILL(btflight, 0)", "Visible and in flight"
        )
        expression("workers", "FILL(tasks, 0)", "Tasks wanted (running and starting)")
        expression("age", "FILL(MAX([rtage, btage]), 0)", "Age of the oldest message")
        expression(
            "forbacklog",
            f"IF(CEIL(backlog / {per_task}) > {cap}, {cap}, CEIL(backlog / {per_task}))",
            "Tasks the backlog asks for",
        )
        wake = expression(
            "wake",
            "IF((workers == 0) AND (work + FILL(requests, 0) > 0), "
            "IF(forbacklog > 1, forbacklog, 1), 0)",
            "Tasks to start from zero",
        )
        for_backlog = expression(
            "scaleout",
            "IF((workers > 0) AND (forbacklog > workers), forbacklog, 0)",
            "Tasks the backlog asks for, above those wanted",
        )
        for_age = expression(
            "scaleoutage",
            f"IF((workers > 0) AND (workers < {cap}) AND (backlog > 0) AND (age > {target_age}) "
            "AND (FILL(running, 0) >= workers) AND (forbacklog <= workers), workers + 1, 0)",
            "One more task: the oldest message is over the target age with every task running",
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

        # 1. Wake: no cool-down, a request at zero waits for this task.
        self.wake_alarm = alarm(
            "WakeAlarm",
            wake,
            "scale-from-zero",
            f"{model} has work waiting and no worker task",
            exactly("WakeUp", 0, to_value),
        )

        # 3. Scale out, at most once per cool-down: on the backlog at once; on the age
        # of the oldest message once every task has run for the target age.
        scale_out = exactly("ScaleOut", policy.scale_out_cooldown_seconds, to_value)
        self.scale_out_alarm = alarm(
            "ScaleOutAlarm",
            for_backlog,
            "scale-out",
            f"{model}'s backlog asks for more tasks ({per_task} messages per task)",
            scale_out,
        )
        self.age_alarm = alarm(
            "AgeAlarm",
            for_age,
            "scale-out-on-age",
            f"{model}'s oldest message is over {target_age} s with every task running",
            scale_out,
            evaluation_periods=math.ceil(policy.target_age_seconds / SCALING_PERIOD.to_seconds()),
        )

        # 4. Scale in: nothing queued or in flight for the idle time → the minimum.
        idle_minutes = math.ceil(policy.idle_seconds / SCALING_PERIOD.to_seconds())
        self.idle_alarm = work.create_alarm(
            self,
            "IdleAlarm",
            alarm_name=f"{prefix}-idle",
            alarm_description=f"{model} has had no work for {idle_minutes} minutes",
            threshold=1,
            evaluation_periods=idle_minutes,
            comparison_operator=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
            # SQS stops publishing for queues idle for hours: silence is idleness.
            treat_missing_data=cloudwatch.TreatMissingData.BREACHING,
        )
        self.idle_alarm.add_alarm_action(
            cw_actions.ApplicationScalingAction(
                exactly(
                    "ScaleIn", policy.scale_in_cooldown_seconds, [(None, 0.0, policy.min_tasks)]
                )
            )
        )
