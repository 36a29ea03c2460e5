"""Worker scaling in the cloud: the synthesized alarms and step policies land where
``switchyard.scaling.decide`` lands, on the same scenarios, for every worker service
in dev and in prod (a model's own, and a pool of thirty models on the sum of their
work); and they carry the manifest's numbers.

The cloud decides on one-minute periods where the local supervisor ticks every few
seconds. A scenario is a moment whose conditions have held steadily as long as its
signals say (idle for ``idle_seconds``, every worker running for
``since_ready_seconds``); an alarm of N evaluation periods breaches when its
expression breaches now and its condition held through the periods before. A
scenario with an earlier decision (``Scenario.before``) is also replayed: the alarm
that fired on the earlier signals drove a step policy, whose cool-down Application
Auto Scaling counts from then; here a scale-out waits while any policy's cool-down
runs (stricter than AWS, which keeps a cool-down to the policy that started it).
That is the whole model of time here: the decisions are compared, not the timings.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

import pytest
from aws_cdk.assertions import Template

from harness.scaling_scenarios import SCENARIOS, Scenario, fits
from stacks.cloud import POOL_IN_FLIGHT_METRIC, POOL_QUEUED_METRIC
from switchyard.manifest import Manifest
from switchyard.scaling import ScalingPolicy, ScalingSignals, decide

from .conftest import POOL, POOL_SIZE
from .helpers import (
    alarm_value,
    breaches,
    joined,
    logical_id,
    only,
    queue_name_of,
    step_adjustment,
)

PERIOD = 60
ALARMS = ("scale-from-zero", "scale-out", "scale-out-on-age", "idle")
SCALE_OUTS = ("scale-from-zero", "scale-out", "scale-out-on-age")
STAGES = ("dev", "prod")


@pytest.fixture(scope="module")
def templates(serving_template: Template, prod_serving_template: Template) -> dict[str, Template]:
    return {"dev": serving_template, "prod": prod_serving_template}


@dataclass(frozen=True)
class CloudScaling:
    """One worker service's scaling, as one stage's template has it. ``alarms`` by
    name; a pool has one ``scale-out-on-age`` alarm per model (``age_alarms``).

    A scenario's queues are one model's (``busy``): its lanes' figures are that
    model's queues', every other queue is idle. A pool's meter reads ``meter``
    (queue names, in its state machine's order) and publishes each queue's counts,
    so the pool's sums come from the scenario only through the queues the meter
    reads. Queues are known by their names: they are the models stack's.
    """

    service: str
    target: dict[str, Any]
    alarms: dict[str, dict[str, Any]]
    age_alarms: dict[str, dict[str, Any]]
    policies: dict[str, dict[str, Any]]  # alarm name -> the step policy it drives
    lanes: dict[str, str]  # the busy model's queue names -> lane
    ecs_service: str
    meter: tuple[str, ...] = ()

    def _lane(self, queue_id: str, given: ScalingSignals) -> Any:
        lane = self.lanes.get(queue_id)
        return given.lanes[lane] if lane else None

    def metric_value(self, stat: dict[str, Any], given: ScalingSignals) -> float | None:
        """One period's value of a metric, given a scenario's signals."""
        metric, name = stat["Metric"], stat["Metric"]["MetricName"]
        dims = {d["Name"]: d["Value"] for d in metric.get("Dimensions", [])}
        assert stat["Period"] == PERIOD
        if metric["Namespace"] == "AWS/SQS":
            lane = self._lane(queue_name_of(dims["QueueName"]), given)
            if lane is None or not (lane.visible or lane.in_flight):
                return None  # an idle queue publishes nothing: the expressions must FILL
            return {
                "ApproximateNumberOfMessagesVisible": lane.visible,
                "ApproximateNumberOfMessagesNotVisible": lane.in_flight,
                "ApproximateAgeOfOldestMessage": lane.oldest_age_seconds,
            }[name]
        if metric["Namespace"] == "ECS/ContainerInsights":
            assert self.ecs_service in json.dumps(dims["ServiceName"])
            if name == "DesiredTaskCount":
                assert stat["Stat"] == "Maximum"
                return given.workers
            assert (name, stat["Stat"]) == ("RunningTaskCount", "Minimum")
            # A task that became running during the period was not running all of it.
            return given.running - (given.since_ready_seconds < PERIOD)
        if metric["Namespace"] == "Switchyard" and "pool" in dims:
            # The meter's minute: one value per queue it reads; the alarm's Average.
            assert dims == {"pool": self.service} and stat["Stat"] == "Average"
            field = {POOL_QUEUED_METRIC: "visible", POOL_IN_FLIGHT_METRIC: "in_flight"}[name]
            values = [getattr(self._lane(q, given), field, 0) for q in self.meter]
            return sum(values) / len(values)
        if metric["Namespace"] == "Switchyard":
            assert name == "Requests" and dims == {"model": self.service}
            return given.visible or None  # requests the router just queued
        raise AssertionError(f"unexpected metric {metric}")

    def fired(self, given: ScalingSignals) -> list[tuple[str, float]]:
        """The scaling alarms in alarm on ``given``, with their values."""
        # This period's values are the scenario's; an alarm of N periods also needs the
        # earlier ones, which breached as long as the scenario's condition held: all N
        # minutes for idle (a minute's queue maximum is 0 only if all of it was idle),
        # the N - 1 before this one for the age (this one's RunningTaskCount minimum
        # already says whether every task ran throughout it).
        held = {
            "idle": (given.idle_seconds, 0),
            "scale-out-on-age": (given.since_ready_seconds, 1),
        }
        named = [*self.alarms.items(), *(("scale-out-on-age", a) for a in self.age_alarms.values())]
        fired: list[tuple[str, float]] = []
        for name, alarm in named:
            value = alarm_value(alarm, lambda stat: self.metric_value(stat, given))
            seconds, this_one = held.get(name, (math.inf, 0))
            needed = (alarm["Properties"]["EvaluationPeriods"] - this_one) * PERIOD
            if breaches(alarm, value) and seconds >= needed:
                fired.append((name, value))
        return fired

    def cooldown(self, name: str) -> float:
        return self.policies[name]["Properties"]["StepScalingPolicyConfiguration"]["Cooldown"]

    def decide(self, given: ScalingSignals, earlier: tuple[ScalingSignals, float] | None) -> int:
        """The desired count the alarms and their step policies set, ``earlier``
        (signals, seconds ago) being what they acted on before."""
        fired = self.fired(given)
        # Several alarms at once only where they drive one policy to one count (a
        # pool's age alarms, each on one model's oldest message).
        assert len({(self._policy_of(n), v) for n, v in fired}) <= 1, fired
        cooling = 0.0
        if earlier is not None:
            signals, seconds_ago = earlier
            before = self.fired(signals)
            if before and before[0][0] in SCALE_OUTS:
                cooling = max(0.0, self.cooldown(before[0][0]) - seconds_ago)
        desired = given.workers
        for name, value in fired[:1]:
            if name in SCALE_OUTS and name != "scale-from-zero" and cooling > 0:
                continue  # in cool-down: the policy does not act
            desired = step_adjustment(self.policies[name], self._alarm(name), value)
        bounds = self.target["Properties"]
        return min(max(desired, bounds["MinCapacity"]), bounds["MaxCapacity"])

    def _alarm(self, name: str) -> dict[str, Any]:
        return self.alarms.get(name) or next(iter(self.age_alarms.values()))

    def _policy_of(self, name: str) -> str:
        return json.dumps(self._alarm(name)["Properties"]["AlarmActions"])

    @property
    def every_alarm(self) -> list[dict[str, Any]]:
        return [*self.alarms.values(), *self.age_alarms.values()]


def _scaling_parts(
    template: Template, base: str, ecs_service: str, ages: dict[str, str]
) -> tuple[dict[str, Any], dict[str, dict], dict[str, dict], dict[str, dict]]:
    """The scalable target, the alarms by name, the age alarms by key and the step
    policy each alarm drives, of the service whose alarms are named ``base-...``."""
    alarms = {
        name: only(template, "AWS::CloudWatch::Alarm", {"AlarmName": f"{base}-{name}"})
        for name in ALARMS
        if name != "scale-out-on-age"
    }
    age_alarms = {
        key: only(template, "AWS::CloudWatch::Alarm", {"AlarmName": f"{base}-{suffix}"})
        for key, suffix in ages.items()
    }
    scaling_policies = template.find_resources("AWS::ApplicationAutoScaling::ScalingPolicy")
    policies = {}
    for name, alarm in [*alarms.items(), *(("scale-out-on-age", a) for a in age_alarms.values())]:
        (action,) = alarm["Properties"]["AlarmActions"]
        policies[name] = scaling_policies[action["Ref"]]
    (target,) = [
        t
        for t in template.find_resources("AWS::ApplicationAutoScaling::ScalableTarget").values()
        if ecs_service in json.dumps(t["Properties"]["ResourceId"])
    ]
    return target, alarms, age_alarms, policies


def _queue_ids(manifest: Manifest, stage: str, model: str) -> dict[str, str]:
    """A model's queues (their names) and their lanes."""
    names = manifest.names(stage)
    return {names.queue(model, lane): lane for lane in ("realtime", "batch")}


def cloud_scaling(template: Template, manifest: Manifest, stage: str, model: str) -> CloudScaling:
    """A model's own service."""
    base = f"{manifest.names(stage).base}-{model}"
    ecs_service = _service_of(template, "SWITCHYARD_WORKER_MODEL", model)
    target, alarms, ages, policies = _scaling_parts(
        template, base, ecs_service, {model: "scale-out-on-age"}
    )
    lanes = _queue_ids(manifest, stage, model)
    return CloudScaling(model, target, alarms, ages, policies, lanes, ecs_service)


def pool_scaling(
    template: Template, manifest: Manifest, stage: str, pool: str, busy: str
) -> CloudScaling:
    """A pool's service, the scenario's work in model ``busy``'s queues."""
    base = f"{manifest.names(stage).base}-{pool}"
    ecs_service = _service_of(template, "SWITCHYARD_WORKER_POOL", pool)
    models = manifest.pool_models(pool)
    target, alarms, ages, policies = _scaling_parts(
        template, base, ecs_service, {m: f"scale-out-on-age-{m}" for m in models}
    )
    lanes = _queue_ids(manifest, stage, busy)
    return CloudScaling(
        pool, target, alarms, ages, policies, lanes, ecs_service, meter_queues(template, pool)
    )


def meter_queues(template: Template, pool: str) -> tuple[str, ...]:
    """The queues (names) a pool's meter reads, in the order it reads them."""
    (machine,) = [
        m
        for m in template.find_resources("AWS::StepFunctions::StateMachine").values()
        if f"pool {pool}:" in json.dumps(m["Properties"]["DefinitionString"])
    ]
    definition = joined(machine["Properties"]["DefinitionString"])
    return tuple(re.findall(r'"https://sqs\.[^"]*/([a-z0-9-]+)"', definition))


def _service_of(template: Template, variable: str, value: str) -> str:
    for task_id, task in template.find_resources("AWS::ECS::TaskDefinition").items():
        env = task["Properties"]["ContainerDefinitions"][0]["Environment"]
        if {"Name": variable, "Value": value} in env:
            return logical_id(template, "AWS::ECS::Service", {"TaskDefinition": {"Ref": task_id}})
    raise AssertionError(f"no worker task with {variable}={value}")


def own_services(manifest: Manifest) -> list[str]:
    """The models with a worker service of their own."""
    return [model for model, spec in manifest.models.items() if spec.pool is None]


def _earlier(scenario: Scenario, policy: ScalingPolicy) -> tuple[ScalingSignals, float] | None:
    before = scenario.before
    return None if before is None else (before.signals(policy), before.seconds_ago)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
@pytest.mark.parametrize("stage", STAGES)
def test_cloud_alarms_and_steps_decide_like_the_policy(
    templates: dict[str, Template], manifest: Manifest, stage: str, scenario: Scenario
) -> None:
    for model in own_services(manifest):
        # GIVEN the model's policy in this stage and the scenario's signals
        policy = manifest.scaling_policy(model, stage)
        assert fits(policy)
        given = scenario.given(policy)
        cloud = cloud_scaling(templates[stage], manifest, stage, model)

        # WHEN the pure function and the synthesized alarms and steps decide
        local = decide(policy, given)
        remote = cloud.decide(given, _earlier(scenario, policy))

        # THEN they land on the same count, the one the scenario expects
        assert (local.desired, local.action) == scenario.expected(policy), local.reason
        assert remote == local.desired, f"{model} in {stage}: cloud {remote}, {local.reason}"


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
@pytest.mark.parametrize("stage", STAGES)
def test_a_pool_decides_like_the_policy_on_the_sum_of_its_models_work(
    pool_of_30_templates: dict[str, Template],
    pool_of_30: Manifest,
    stage: str,
    scenario: Scenario,
) -> None:
    # GIVEN the pool's policy, and the scenario's work in one of its thirty models'
    # queues: the first, the fifteenth and the last in turn
    policy = pool_of_30.pool_scaling_policy(POOL, stage)
    assert fits(policy)
    given = scenario.given(policy)
    models = pool_of_30.pool_models(POOL)
    local = decide(policy, given)
    assert (local.desired, local.action) == scenario.expected(policy), local.reason
    for busy in (models[0], models[14], models[-1]):
        cloud = pool_scaling(pool_of_30_templates[stage], pool_of_30, stage, POOL, busy)
        # WHEN the pool's alarms and steps decide
        remote = cloud.decide(given, _earlier(scenario, policy))
        # THEN they land where decide does on the pool's signals
        assert remote == local.desired, f"work in {busy}, {stage}: cloud {remote}, {local.reason}"


def test_the_pool_reads_every_queue_of_its_thirty_models(
    pool_of_30_templates: dict[str, Template], pool_of_30: Manifest
) -> None:
    for stage, template in pool_of_30_templates.items():
        models = pool_of_30.pool_models(POOL)
        assert len(models) == POOL_SIZE
        queues = {q for m in models for q in _queue_ids(pool_of_30, stage, m)}
        # its meter reads each of the sixty queues once, and nothing else
        read = meter_queues(template, POOL)
        assert sorted(read) == sorted(queues) and len(queues) == 2 * POOL_SIZE
        # the sums are the meter's Average times those sixty queues
        cloud = pool_scaling(template, pool_of_30, stage, POOL, models[-1])
        texts = json.dumps([a["Properties"]["Metrics"] for a in cloud.every_alarm])
        assert set(re.findall(r"\* (\d+) \+ 0\.5", texts)) == {str(len(queues))}
        # each model's oldest message has an age alarm, on that model's two queues
        assert set(cloud.age_alarms) == set(models)
        for model, alarm in cloud.age_alarms.items():
            read_ages = {
                queue_name_of(m["MetricStat"]["Metric"]["Dimensions"][0]["Value"])
                for m in alarm["Properties"]["Metrics"]
                if "MetricStat" in m
                and m["MetricStat"]["Metric"]["MetricName"] == "ApproximateAgeOfOldestMessage"
            }
            assert read_ages == set(_queue_ids(pool_of_30, stage, model))


def test_the_pools_meter_may_read_its_queues_counts_and_publish_them(
    pool_of_30_templates: dict[str, Template], pool_of_30: Manifest
) -> None:
    template = pool_of_30_templates["dev"]
    (machine_id,) = [
        k
        for k, m in template.find_resources("AWS::StepFunctions::StateMachine").items()
        if f"pool {POOL}:" in json.dumps(m["Properties"]["DefinitionString"])
    ]
    machine = template.find_resources("AWS::StepFunctions::StateMachine")[machine_id]
    assert machine["Properties"]["StateMachineType"] == "EXPRESS"
    role = machine["Properties"]["RoleArn"]["Fn::GetAtt"][0]
    statements = [
        s
        for p in template.find_resources("AWS::IAM::Policy").values()
        if {"Ref": role} in p["Properties"]["Roles"]
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]
    read = [s for s in statements if s["Action"] == "sqs:GetQueueAttributes"]
    (read_statement,) = read
    arns = {queue_name_of(r) for r in read_statement["Resource"]}
    assert arns == set(meter_queues(template, POOL))
    (publish,) = [s for s in statements if s["Action"] == "cloudwatch:PutMetricData"]
    assert publish["Condition"] == {"StringEquals": {"cloudwatch:namespace": "Switchyard"}}
    # EventBridge starts it every minute, the period the alarms read
    rules = template.find_resources("AWS::Events::Rule")
    (rule,) = [r for r in rules.values() if machine_id in json.dumps(r["Properties"]["Targets"])]
    assert rule["Properties"]["ScheduleExpression"] == "rate(1 minute)"


@pytest.mark.parametrize("stage", STAGES)
def test_task_count_bounds_are_the_policys(
    templates: dict[str, Template],
    pool_of_30_templates: dict[str, Template],
    manifest: Manifest,
    pool_of_30: Manifest,
    stage: str,
) -> None:
    services = [
        (cloud_scaling(templates[stage], manifest, stage, m), manifest.scaling_policy(m, stage))
        for m in own_services(manifest)
    ]
    services.append(
        (
            pool_scaling(
                pool_of_30_templates[stage],
                pool_of_30,
                stage,
                POOL,
                pool_of_30.pool_models(POOL)[0],
            ),
            pool_of_30.pool_scaling_policy(POOL, stage),
        )
    )
    for cloud, policy in services:
        bounds = cloud.target["Properties"]
        assert (bounds["MinCapacity"], bounds["MaxCapacity"]) == (
            policy.min_tasks,
            policy.max_tasks,
        )
        assert bounds["ScalableDimension"] == "ecs:service:DesiredCount"


def _config(cloud: CloudScaling, alarm: str) -> dict[str, Any]:
    return cloud.policies[alarm]["Properties"]["StepScalingPolicyConfiguration"]


def _every_service(
    templates: dict[str, Template],
    pool_of_30_templates: dict[str, Template],
    manifest: Manifest,
    pool_of_30: Manifest,
    stage: str,
) -> list[tuple[CloudScaling, ScalingPolicy]]:
    out = [
        (cloud_scaling(templates[stage], manifest, stage, m), manifest.scaling_policy(m, stage))
        for m in own_services(manifest)
    ]
    pool = pool_scaling(
        pool_of_30_templates[stage], pool_of_30, stage, POOL, pool_of_30.pool_models(POOL)[0]
    )
    return [*out, (pool, pool_of_30.pool_scaling_policy(POOL, stage))]


@pytest.mark.parametrize("stage", STAGES)
def test_cool_downs_are_the_policys_and_waking_has_none(
    templates: dict[str, Template],
    pool_of_30_templates: dict[str, Template],
    manifest: Manifest,
    pool_of_30: Manifest,
    stage: str,
) -> None:
    for cloud, policy in _every_service(
        templates, pool_of_30_templates, manifest, pool_of_30, stage
    ):
        cooldowns = {name: _config(cloud, name)["Cooldown"] for name in ALARMS}
        assert cooldowns == {
            "scale-from-zero": 0,
            "scale-out": policy.scale_out_cooldown_seconds,
            "scale-out-on-age": policy.scale_out_cooldown_seconds,
            "idle": policy.scale_in_cooldown_seconds,
        }
        # the scale-out alarms drive one policy: one cool-down between them; the
        # wake drives one of its own, so that it starts no cool-down for them
        actions = {
            json.dumps(alarm["Properties"]["AlarmActions"])
            for alarm in [cloud.alarms["scale-out"], *cloud.age_alarms.values()]
        }
        assert len(actions) == 1
        assert json.dumps(cloud.alarms["scale-from-zero"]["Properties"]["AlarmActions"]) not in (
            actions
        )
        assert {_config(cloud, name)["AdjustmentType"] for name in ALARMS} == {"ExactCapacity"}


@pytest.mark.parametrize("stage", STAGES)
def test_each_count_up_to_the_maximum_has_its_step(
    templates: dict[str, Template],
    pool_of_30_templates: dict[str, Template],
    manifest: Manifest,
    pool_of_30: Manifest,
    stage: str,
) -> None:
    for cloud, policy in _every_service(
        templates, pool_of_30_templates, manifest, pool_of_30, stage
    ):
        for name in ("scale-from-zero", "scale-out"):
            counts = [
                step_adjustment(cloud.policies[name], cloud.alarms[name], n)
                for n in range(1, policy.max_tasks + 3)
            ]
            assert counts == [*range(1, policy.max_tasks + 1), policy.max_tasks, policy.max_tasks]


@pytest.mark.parametrize("stage", STAGES)
def test_idle_time_and_settled_time_are_whole_minutes_of_the_policy(
    templates: dict[str, Template],
    pool_of_30_templates: dict[str, Template],
    manifest: Manifest,
    pool_of_30: Manifest,
    stage: str,
) -> None:
    for cloud, policy in _every_service(
        templates, pool_of_30_templates, manifest, pool_of_30, stage
    ):
        idle = cloud.alarms["idle"]["Properties"]
        assert idle["EvaluationPeriods"] * PERIOD == policy.idle_seconds
        # A model's queues go silent when idle for hours: silence is idleness. A
        # pool's meter publishes every minute: a minute without it is not idleness.
        silence = "notBreaching" if cloud.meter else "breaching"
        assert idle["TreatMissingData"] == silence
        for age in cloud.age_alarms.values():
            assert age["Properties"]["EvaluationPeriods"] == math.ceil(
                policy.target_age_seconds / PERIOD
            )
        for name in ("scale-from-zero", "scale-out"):
            assert cloud.alarms[name]["Properties"]["EvaluationPeriods"] == 1


def test_expressions_fit_cloudwatch(
    templates: dict[str, Template],
    pool_of_30_templates: dict[str, Template],
    manifest: Manifest,
    pool_of_30: Manifest,
) -> None:
    for stage in STAGES:
        for cloud, _ in _every_service(
            templates, pool_of_30_templates, manifest, pool_of_30, stage
        ):
            for alarm in cloud.every_alarm:
                entries = alarm["Properties"]["Metrics"]
                assert sum("MetricStat" in m for m in entries) <= 10  # metrics per alarm
                assert sum("Expression" in m for m in entries) <= 10  # expressions too
                for entry in entries:
                    assert len(entry.get("Expression", "")) <= 1024


def test_hosts_follow_the_sum_of_the_services_maximums(
    templates: dict[str, Template], manifest: Manifest, pooled_dev: Any, pooled: Manifest
) -> None:
    cases = [(templates[s], manifest, s) for s in STAGES] + [(pooled_dev.serving, pooled, "dev")]
    for template, m, stage in cases:
        groups = template.find_resources("AWS::AutoScaling::AutoScalingGroup")
        own = {name: spec for name, spec in m.models.items() if spec.pool is None}
        expected = [
            str(sum(m.scaling_policy(n, stage).max_tasks for n, s in own.items() if s.compute == c))
            for c in {spec.compute for spec in own.values()}
        ]
        expected += [str(m.pool_scaling_policy(pool, stage).max_tasks) for pool in m.pools]
        assert sorted(g["Properties"]["MaxSize"] for g in groups.values()) == sorted(expected)
