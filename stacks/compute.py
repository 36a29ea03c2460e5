"""Where workers run: an ECS cluster whose GPU and CPU capacity starts at zero
instances, and per model a worker service scaled by its queues."""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Duration, IgnoreMode, Stack
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from constructs import Construct

from stacks.assets import REPO_ROOT, WORKER_DOCKERFILE
from stacks.cloud import (
    LOG_RETENTION,
    ROOT_VOLUME_GIB,
    SCALE_OUT_COOLDOWN,
    SCALE_OUT_EVALUATION_PERIODS,
    SCALE_OUT_STEPS,
    SCALING_PERIOD,
    TASK_SIZE,
    WORKER_READY_FILE,
    WORKER_START_PERIOD,
    WORKER_STOP_TIMEOUT,
    Deployment,
)
from stacks.nag import acknowledge
from stacks.observability import model_metric, service_metric
from stacks.queues import ModelQueues
from switchyard.manifest import ModelSpec

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
                self.capacity[compute] = self._capacity_provider(compute, specs)
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

    def _capacity_provider(self, compute: str, specs: list[ModelSpec]) -> ecs.AsgCapacityProvider:
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
            max_capacity=sum(spec.max_tasks for spec in specs),
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


class WorkerService(Construct):
    """One model's workers: an ECS service whose desired count follows its queues.

    Scaling, on one-minute queue metrics with hysteresis:
    any backlog (or request) with no task → 1; backlog per task above the model's
    ``backlog_per_task`` → add tasks in steps; nothing queued or in flight for the
    stage's idle period → the minimum (0 in dev, ``min_tasks_prod`` in prod).
    """

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
        min_tasks = deployment.min_tasks(spec)
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
        self.service.node.add_dependency(compute.cluster)
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
        self._scale_on_queues(deployment, model, spec, queues, min_tasks)

    def _scale_on_queues(
        self,
        deployment: Deployment,
        model: str,
        spec: ModelSpec,
        queues: ModelQueues,
        min_tasks: int,
    ) -> None:
        prefix = f"{deployment.names.base}-{model}"
        stack = Stack.of(self)
        target = appscaling.ScalableTarget(
            self,
            "TaskCount",
            service_namespace=appscaling.ServiceNamespace.ECS,
            resource_id=f"service/{self.service.cluster.cluster_name}/{self.service.service_name}",
            scalable_dimension="ecs:service:DesiredCount",
            min_capacity=min_tasks,
            max_capacity=spec.max_tasks,
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

        metrics = {
            "rt": queue_metric("realtime", "ApproximateNumberOfMessagesVisible"),
            "bt": queue_metric("batch", "ApproximateNumberOfMessagesVisible"),
            "rtflight": queue_metric("realtime", "ApproximateNumberOfMessagesNotVisible"),
            "btflight": queue_metric("batch", "ApproximateNumberOfMessagesNotVisible"),
            "requests": model_metric(model, "Requests", "Sum", SCALING_PERIOD),
            "desired": service_metric(self.service, "DesiredTaskCount"),
        }
        backlog = "(FILL(rt, 0) + FILL(bt, 0))"
        desired = "FILL(desired, 0)"

        def expression(text: str, label: str, *ids: str) -> cloudwatch.MathExpression:
            return cloudwatch.MathExpression(
                expression=text,
                using_metrics={i: metrics[i] for i in ids},
                label=label,
                period=SCALING_PERIOD,
            )

        def step_action(
            construct_id: str,
            kind: appscaling.AdjustmentType,
            steps: list[tuple[float, float | None, int]],
        ) -> cw_actions.ApplicationScalingAction:
            action = appscaling.StepScalingAction(
                self,
                construct_id,
                scaling_target=target,
                adjustment_type=kind,
                cooldown=SCALE_OUT_COOLDOWN,
                metric_aggregation_type=appscaling.MetricAggregationType.MAXIMUM,
            )
            for lower, upper, change in steps:
                action.add_adjustment(adjustment=change, lower_bound=lower, upper_bound=upper)
            return cw_actions.ApplicationScalingAction(action)

        # 0 → 1: work (or a request the router just took) and no task wanted.
        self.wake_alarm = expression(
            f"IF({desired} == 0 AND ({backlog} + FILL(requests, 0)) > 0, 1, 0)",
            "Work waiting and no worker",
            "rt",
            "bt",
            "requests",
            "desired",
        ).create_alarm(
            self,
            "WakeAlarm",
            alarm_name=f"{prefix}-scale-from-zero",
            alarm_description=f"{model} has queued work and no worker task",
            threshold=1,
            evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        self.wake_alarm.add_alarm_action(
            step_action("WakeUp", appscaling.AdjustmentType.EXACT_CAPACITY, [(0, None, 1)])
        )

        # Backlog per task above target → add tasks, more the further above.
        per_task = spec.backlog_per_task
        bounds = [multiple * per_task for multiple, _ in SCALE_OUT_STEPS]
        steps: list[tuple[float, float | None, int]] = [
            (bounds[i] - per_task, bounds[i + 1] - per_task if i + 1 < len(bounds) else None, add)
            for i, (_, add) in enumerate(SCALE_OUT_STEPS)
        ]
        self.backlog_alarm = expression(
            f"{backlog} / IF({desired} > 0, {desired}, 1)",
            "Backlog per task",
            "rt",
            "bt",
            "desired",
        ).create_alarm(
            self,
            "BacklogAlarm",
            alarm_name=f"{prefix}-backlog-per-task",
            alarm_description=f"{model} has more than {per_task} queued messages per task",
            threshold=per_task,
            evaluation_periods=SCALE_OUT_EVALUATION_PERIODS,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        self.backlog_alarm.add_alarm_action(
            step_action("ScaleOut", appscaling.AdjustmentType.CHANGE_IN_CAPACITY, steps)
        )

        # Nothing queued or in flight for the idle period → the stage's minimum.
        idle_minutes = deployment.settings.idle_minutes_before_scale_in
        self.idle_alarm = expression(
            f"{backlog} + FILL(rtflight, 0) + FILL(btflight, 0)",
            "Queued and in-flight messages",
            "rt",
            "bt",
            "rtflight",
            "btflight",
        ).create_alarm(
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
            step_action("ScaleIn", appscaling.AdjustmentType.EXACT_CAPACITY, [(None, 0, min_tasks)])  # type: ignore[list-item]
        )
