"""Worker scaling in the cloud: the synthesized alarms and step policies land where
``switchyard.scaling.decide`` lands, on the same scenarios, for every model in dev
and in prod; and they carry the manifest's numbers.

The cloud decides on one-minute periods where the local supervisor ticks every few
seconds. A scenario is a moment whose conditions have held steadily as long as its
signals say (idle for ``idle_seconds``, every worker running for
``since_ready_seconds``); an alarm of N evaluation periods breaches when its
expression breaches now and its condition held through the periods before. That is
the whole model of time here: the decisions are compared, not the timings.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import pytest
from aws_cdk.assertions import Template

from harness.scaling_scenarios import SCENARIOS, Scenario, fits
from switchyard.manifest import Manifest
from switchyard.scaling import ScalingSignals, decide

from .helpers import alarm_value, breaches, logical_id, only, step_adjustment

PERIOD = 60
ALARMS = ("scale-from-zero", "scale-out", "scale-out-on-age", "idle")
STAGES = ("dev", "prod")


@pytest.fixture(scope="module")
def templates(serving_template: Template, prod_serving_template: Template) -> dict[str, Template]:
    return {"dev": serving_template, "prod": prod_serving_template}


@dataclass(frozen=True)
class CloudScaling:
    """One model's scaling, as one stage's template has it."""

    model: str
    target: dict[str, Any]
    alarms: dict[str, dict[str, Any]]
    policies: dict[str, dict[str, Any]]
    lanes: dict[str, str]  # queue logical id -> lane
    service: str

    def metric_value(self, stat: dict[str, Any], given: ScalingSignals) -> float | None:
        """One period's value of a metric, given a scenario's signals."""
        metric, name = stat["Metric"], stat["Metric"]["MetricName"]
        dims = {d["Name"]: d["Value"] for d in metric.get("Dimensions", [])}
        assert stat["Period"] == PERIOD
        if metric["Namespace"] == "AWS/SQS":
            lane = given.lanes[self.lanes[dims["QueueName"]["Fn::GetAtt"][0]]]
            if not (lane.visible or lane.in_flight):
                return None  # an idle queue publishes nothing: the expressions must FILL
            return {
                "ApproximateNumberOfMessagesVisible": lane.visible,
                "ApproximateNumberOfMessagesNotVisible": lane.in_flight,
                "ApproximateAgeOfOldestMessage": lane.oldest_age_seconds,
            }[name]
        if metric["Namespace"] == "ECS/ContainerInsights":
            assert self.service in json.dumps(dims["ServiceName"])
            if name == "DesiredTaskCount":
                assert stat["Stat"] == "Maximum"
                return given.workers
            assert (name, stat["Stat"]) == ("RunningTaskCount", "Minimum")
            # A task that became running during the period was not running all of it.
            return given.running - (given.since_ready_seconds < PERIOD)
        if metric["Namespace"] == "Switchyard":
            assert name == "Requests" and dims == {"model": self.model}
            return given.visible or None  # requests the router just queued
        raise AssertionError(f"unexpected metric {metric}")

    def decide(self, given: ScalingSignals) -> int:
        """The desired count the alarms and their step policies set."""
        # This period's values are the scenario's; an alarm of N periods also needs the
        # earlier ones, which breached as long as the scenario's condition held: all N
        # minutes for idle (a minute's queue maximum is 0 only if all of it was idle),
        # the N - 1 before this one for the age (this one's RunningTaskCount minimum
        # already says whether every task ran throughout it).
        held = {
            "idle": (given.idle_seconds, 0),
            "scale-out-on-age": (given.since_ready_seconds, 1),
        }
        fired: list[tuple[str, float]] = []
        for name, alarm in self.alarms.items():
            value = alarm_value(alarm, lambda stat: self.metric_value(stat, given))
            seconds, this_one = held.get(name, (math.inf, 0))
            needed = (alarm["Properties"]["EvaluationPeriods"] - this_one) * PERIOD
            if breaches(alarm, value) and seconds >= needed:
                fired.append((name, value))
        assert len(fired) <= 1, f"more than one scaling alarm at once: {fired}"
        desired = given.workers
        for name, value in fired:
            desired = step_adjustment(self.policies[name], self.alarms[name], value)
        bounds = self.target["Properties"]
        return min(max(desired, bounds["MinCapacity"]), bounds["MaxCapacity"])


def cloud_scaling(template: Template, manifest: Manifest, stage: str, model: str) -> CloudScaling:
    names = manifest.names(stage)
    base = f"{names.base}-{model}"
    alarms = {
        name: only(template, "AWS::CloudWatch::Alarm", {"AlarmName": f"{base}-{name}"})
        for name in ALARMS
    }
    scaling_policies = template.find_resources("AWS::ApplicationAutoScaling::ScalingPolicy")
    policies = {}
    for name, alarm in alarms.items():
        (action,) = alarm["Properties"]["AlarmActions"]
        policies[name] = scaling_policies[action["Ref"]]
    service = _service_of(template, model)
    (target,) = [
        t
        for t in template.find_resources("AWS::ApplicationAutoScaling::ScalableTarget").values()
        if service in json.dumps(t["Properties"]["ResourceId"])
    ]
    lanes = {
        logical_id(template, "AWS::SQS::Queue", {"QueueName": names.queue(model, lane)}): lane
        for lane in ("realtime", "batch")
    }
    return CloudScaling(model, target, alarms, policies, lanes, service)


def _service_of(template: Template, model: str) -> str:
    for task_id, task in template.find_resources("AWS::ECS::TaskDefinition").items():
        env = task["Properties"]["ContainerDefinitions"][0]["Environment"]
        if {"Name": "SWITCHYARD_WORKER_MODEL", "Value": model} in env:
            return logical_id(template, "AWS::ECS::Service", {"TaskDefinition": {"Ref": task_id}})
    raise AssertionError(f"no worker task for {model}")


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
@pytest.mark.parametrize("stage", STAGES)
def test_cloud_alarms_and_steps_decide_like_the_policy(
    templates: dict[str, Template], manifest: Manifest, stage: str, scenario: Scenario
) -> None:
    for model in manifest.models:
        # GIVEN the model's policy in this stage and the scenario's signals
        policy = manifest.scaling_policy(model, stage)
        assert fits(policy)
        given = scenario.signals(policy)
        cloud = cloud_scaling(templates[stage], manifest, stage, model)

        # WHEN the pure function and the synthesized alarms and steps decide
        local = decide(policy, given)
        remote = cloud.decide(given)

        # THEN they land on the same count, the one the scenario expects
        assert (local.desired, local.action) == scenario.expected(policy), local.reason
        assert remote == local.desired, f"{model} in {stage}: cloud {remote}, {local.reason}"


@pytest.mark.parametrize("stage", STAGES)
def test_task_count_bounds_are_the_policys(
    templates: dict[str, Template], manifest: Manifest, stage: str
) -> None:
    for model in manifest.models:
        policy = manifest.scaling_policy(model, stage)
        bounds = cloud_scaling(templates[stage], manifest, stage, model).target["Properties"]
        assert (bounds["MinCapacity"], bounds["MaxCapacity"]) == (
            policy.min_tasks,
            policy.max_tasks,
        )
        assert bounds["ScalableDimension"] == "ecs:service:DesiredCount"


def _config(cloud: CloudScaling, alarm: str) -> dict[str, Any]:
    return cloud.policies[alarm]["Properties"]["StepScalingPolicyConfiguration"]


@pytest.mark.parametrize("stage", STAGES)
def test_cool_downs_are_the_policys_and_waking_has_none(
    templates: dict[str, Template], manifest: Manifest, stage: str
) -> None:
    for model in manifest.models:
        policy = manifest.scaling_policy(model, stage)
        cloud = cloud_scaling(templates[stage], manifest, stage, model)
        cooldowns = {name: _config(cloud, name)["Cooldown"] for name in ALARMS}
        assert cooldowns == {
            "scale-from-zero": 0,
            "scale-out": policy.scale_out_cooldown_seconds,
            "scale-out-on-age": policy.scale_out_cooldown_seconds,
            "idle": policy.scale_in_cooldown_seconds,
        }
        # both scale-out alarms drive one policy: one cool-down between them
        actions = {
            json.dumps(cloud.alarms[name]["Properties"]["AlarmActions"])
            for name in ("scale-out", "scale-out-on-age")
        }
        assert len(actions) == 1
        assert {_config(cloud, name)["AdjustmentType"] for name in ALARMS} == {"ExactCapacity"}


@pytest.mark.parametrize("stage", STAGES)
def test_each_count_up_to_the_maximum_has_its_step(
    templates: dict[str, Template], manifest: Manifest, stage: str
) -> None:
    for model in manifest.models:
        policy = manifest.scaling_policy(model, stage)
        cloud = cloud_scaling(templates[stage], manifest, stage, model)
        for name in ("scale-from-zero", "scale-out"):
            counts = [
                step_adjustment(cloud.policies[name], cloud.alarms[name], n)
                for n in range(1, policy.max_tasks + 3)
            ]
            assert counts == [*range(1, policy.max_tasks + 1), policy.max_tasks, policy.max_tasks]


@pytest.mark.parametrize("stage", STAGES)
def test_idle_time_and_settled_time_are_whole_minutes_of_the_policy(
    templates: dict[str, Template], manifest: Manifest, stage: str
) -> None:
    for model in manifest.models:
        policy = manifest.scaling_policy(model, stage)
        cloud = cloud_scaling(templates[stage], manifest, stage, model)
        idle = cloud.alarms["idle"]["Properties"]
        assert idle["EvaluationPeriods"] * PERIOD == policy.idle_seconds
        assert idle["TreatMissingData"] == "breaching"  # a queue idle for hours goes silent
        age = cloud.alarms["scale-out-on-age"]["Properties"]
        assert age["EvaluationPeriods"] == math.ceil(policy.target_age_seconds / PERIOD)
        for name in ("scale-from-zero", "scale-out"):
            assert cloud.alarms[name]["Properties"]["EvaluationPeriods"] == 1


def test_expressions_fit_cloudwatch(templates: dict[str, Template], manifest: Manifest) -> None:
    for stage in STAGES:
        for model in manifest.models:
            cloud = cloud_scaling(templates[stage], manifest, stage, model)
            for alarm in cloud.alarms.values():
                entries = alarm["Properties"]["Metrics"]
                assert sum("MetricStat" in m for m in entries) <= 10  # metrics per alarm
                for entry in entries:
                    assert len(entry.get("Expression", "")) <= 1024


def test_hosts_follow_the_sum_of_the_models_maximums(
    templates: dict[str, Template], manifest: Manifest
) -> None:
    for stage in STAGES:
        groups = templates[stage].find_resources("AWS::AutoScaling::AutoScalingGroup")
        expected = sorted(
            str(
                sum(
                    manifest.scaling_policy(m, stage).max_tasks
                    for m, spec in manifest.models.items()
                    if spec.compute == compute
                )
            )
            for compute in {spec.compute for spec in manifest.models.values()}
        )
        assert sorted(g["Properties"]["MaxSize"] for g in groups.values()) == expected
