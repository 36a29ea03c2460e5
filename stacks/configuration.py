"""Routing documents in AppConfig: one application, a rollout strategy per stage,
and per model an environment watched by that model's canary alarms."""

from __future__ import annotations

import json
from collections.abc import Iterable

from aws_cdk import Aws, Duration
from aws_cdk import aws_appconfig as appconfig
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_iam as iam
from constructs import Construct

from stacks.cloud import (
    APPCONFIG_POLL_SECONDS,
    CONFIG_LINEAR_DURATION,
    CONFIG_LINEAR_STEP_PERCENT,
    ROUTING_SCHEMA_FILE,
    Deployment,
)
from switchyard.manifest import ModelSpec

STICKY_KEY = "x-user-id"  # the header the router hashes into buckets


class RoutingConfiguration(Construct):
    """The AppConfig application and how a new routing document rolls out.

    Dev deploys all at once; prod grows linearly and bakes, and any monitor
    (the model's canary alarms) in ALARM during either rolls the document back.
    """

    def __init__(self, scope: Construct, construct_id: str, *, deployment: Deployment) -> None:
        super().__init__(scope, construct_id)
        names = deployment.names
        stage = deployment.settings
        self.application = appconfig.Application(
            self,
            "Application",
            application_name=names.appconfig_application,
            description="Routing documents: weights per version, sticky key, shadow, fallback",
        )
        bake = Duration.minutes(stage.config_bake_minutes)
        if stage.config_deployment == "AllAtOnce":
            rollout = appconfig.RolloutStrategy.linear(
                growth_factor=100, deployment_duration=Duration.minutes(0), final_bake_time=bake
            )
        else:
            rollout = appconfig.RolloutStrategy.linear(
                growth_factor=CONFIG_LINEAR_STEP_PERCENT,
                deployment_duration=CONFIG_LINEAR_DURATION,
                final_bake_time=bake,
            )
        self.strategy = appconfig.DeploymentStrategy(
            self,
            "Strategy",
            deployment_strategy_name=names.deployment_strategy(stage.config_deployment),
            description=f"{stage.config_deployment} rollout of routing documents",
            rollout_strategy=rollout,
        )
        self.schema = ROUTING_SCHEMA_FILE.read_text()


class ModelRouting(Construct):
    """One model's routing document: environment, profile (schema-validated) and
    its first hosted version, deployed with the stage's strategy."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        deployment: Deployment,
        configuration: RoutingConfiguration,
        model: str,
        spec: ModelSpec,
        canary_alarms: list[cloudwatch.IAlarm],
    ) -> None:
        super().__init__(scope, construct_id)
        names = deployment.names
        application = configuration.application
        # One environment per model, so a model's alarms roll back only its document.
        self.environment_name = model
        self.profile_name = names.routing_profile(model)
        # AppConfig reads these alarms' state, and only theirs, during a rollout.
        alarm_reader = iam.Role(
            self,
            "AlarmReader",
            assumed_by=iam.ServicePrincipal("appconfig.amazonaws.com"),
            description=f"AppConfig reads {model}'s canary alarms to roll back its routing",
        )
        alarm_reader.add_to_policy(
            iam.PolicyStatement(
                actions=["cloudwatch:DescribeAlarms"],
                resources=[alarm.alarm_arn for alarm in canary_alarms],
            )
        )
        self.environment = appconfig.Environment(
            self,
            "Environment",
            application=application,
            environment_name=self.environment_name,
            description=f"Routing of {model}; rolled back by its canary alarms",
            monitors=[
                appconfig.Monitor.from_cloud_watch_alarm(alarm, alarm_reader)
                for alarm in canary_alarms
            ],
        )
        self.profile = appconfig.HostedConfiguration(
            self,
            "Profile",
            application=application,
            name=self.profile_name,
            description=f"Routing document of {model}",
            content=appconfig.ConfigurationContent.from_inline_json(
                json.dumps(initial_routing(spec), sort_keys=True)
            ),
            validators=[appconfig.JsonSchemaValidator.from_inline(configuration.schema)],
            deployment_strategy=configuration.strategy,
            deploy_to=[self.environment],
        )
        # What the AppConfig extension reads, by name: /applications/…/configurations/…
        self.extension_path = (
            f"/applications/{names.appconfig_application}"
            f"/environments/{self.environment_name}/configurations/{self.profile_name}"
        )

    def grant_read(self, grantee: iam.IGrantable) -> None:
        """Read this model's document, and no other, through the extension."""
        grantee.grant_principal.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["appconfig:StartConfigurationSession", "appconfig:GetLatestConfiguration"],
                resources=[
                    f"arn:{Aws.PARTITION}:appconfig:{Aws.REGION}:{Aws.ACCOUNT_ID}"
                    f":application/{self.profile.application.application_id}"
                    f"/environment/{self.environment.environment_id}"
                    f"/configuration/{self.profile.configuration_profile_id}"
                ],
            )
        )


class EveryModelRouting:
    """What a function needs to read every model's routing document through the
    AppConfig extension (its layer besides): the settings that point it there (no
    one environment: each model's is named after the model), the extension's
    prefetch list and poll interval, and the right to read each document. The
    OpenAI-compatible router picks versions with them; the jobs API and the
    splitter run each job on its model's stable version."""

    def __init__(self, deployment: Deployment, routings: Iterable[ModelRouting]) -> None:
        self._routings = list(routings)
        self.settings = {
            "routing_source": "appconfig-extension",
            "appconfig_application": deployment.names.appconfig_application,
        }
        self.environment = {
            "AWS_APPCONFIG_EXTENSION_PREFETCH_LIST": ",".join(
                routing.extension_path for routing in self._routings
            ),
            "AWS_APPCONFIG_EXTENSION_POLL_INTERVAL_SECONDS": str(APPCONFIG_POLL_SECONDS),
        }

    def grant_read(self, grantee: iam.IGrantable) -> None:
        for routing in self._routings:
            routing.grant_read(grantee)


def initial_routing(spec: ModelSpec) -> dict[str, object]:
    """All traffic to the model's first version; operators shift it with AppConfig."""
    return {
        "schema_version": 1,
        "weights": {spec.first_version: 100},
        "sticky_key": STICKY_KEY,
        "shadow": None,
        "fallback": None,
    }
