"""Small readers of synthesized templates, shared by the infra tests."""

from __future__ import annotations

import json
import math
import operator
import re
from collections.abc import Callable
from typing import Any

from aws_cdk.assertions import Template


def only(template: Template, resource_type: str, props: Any | None = None) -> dict[str, Any]:
    """The one resource of a type (matching ``props``), as its template dict."""
    found = template.find_resources(resource_type, {"Properties": props} if props else None)
    assert len(found) == 1, f"expected one {resource_type}, found {sorted(found)}"
    return next(iter(found.values()))


def logical_id(template: Template, resource_type: str, props: Any) -> str:
    found = template.find_resources(resource_type, {"Properties": props})
    assert len(found) == 1, f"expected one {resource_type}, found {sorted(found)}"
    return next(iter(found))


def statements(template: Template, role_logical_id: str) -> list[dict[str, Any]]:
    """Every policy statement attached to a role (inline DefaultPolicy included)."""
    out: list[dict[str, Any]] = []
    for policy in template.find_resources("AWS::IAM::Policy").values():
        if {"Ref": role_logical_id} in policy["Properties"].get("Roles", []):
            out.extend(policy["Properties"]["PolicyDocument"]["Statement"])
    return out


def actions_of(statements_: list[dict[str, Any]]) -> set[str]:
    actions: set[str] = set()
    for statement in statements_:
        value = statement["Action"]
        actions.update([value] if isinstance(value, str) else value)
    return actions


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def granted(statements_: list[dict[str, Any]], action: str) -> list[str]:
    """The resources (as JSON text) that ``action`` is allowed on."""
    return [
        json.dumps(resource)
        for statement in statements_
        if statement.get("Effect") == "Allow" and action in actions_of([statement])
        for resource in as_list(statement["Resource"])
    ]


def router_function(template: Template, model: str) -> tuple[str, dict[str, Any]]:
    """``model``'s own router function (logical id, resource)."""
    for name, fn in template.find_resources("AWS::Lambda::Function").items():
        env = fn["Properties"].get("Environment", {}).get("Variables", {})
        if env.get("SWITCHYARD_APPCONFIG_ENVIRONMENT") == model:
            return name, fn
    raise AssertionError(f"no router function for {model}")


def resource_paths(template: Template) -> dict[str, str]:
    """API resource logical id -> its full path (``/v1/models/{model}``...)."""
    resources = template.find_resources("AWS::ApiGateway::Resource")

    def path(name: str) -> str:
        props = resources[name]["Properties"]
        parent = props["ParentId"]
        above = path(parent["Ref"]) if "Ref" in parent else ""
        return f"{above}/{props['PathPart']}"

    return {name: path(name) for name in resources}


def methods_at(template: Template, path: str) -> dict[str, dict[str, Any]]:
    """The methods on the API resource at ``path``, by HTTP method."""
    paths = resource_paths(template)
    return {
        m["Properties"]["HttpMethod"]: m
        for m in template.find_resources("AWS::ApiGateway::Method").values()
        if paths.get(m["Properties"]["ResourceId"].get("Ref", "")) == path
    }


def integrated_function(resource: dict[str, Any]) -> str:
    """The logical id of the one Lambda function a proxy method (or an authorizer)
    invokes."""
    found = re.findall(r'"Fn::GetAtt": \["([A-Za-z0-9]+)", "Arn"\]', json.dumps(resource))
    assert len(set(found)) == 1, f"not one function: {found}"
    return found[0]


def named(service: str, name: str, region: str = "us-east-1") -> dict[str, Any]:
    """The ARN by which the serving stack names a resource of the models stack:
    ``service``'s resource ``name`` (a queue's name; ``alarm:<name>`` for an alarm)
    in the stack's account and region (``stacks.queues.NamedQueues``)."""
    return {
        "Fn::Join": ["", [f"arn:aws:{service}:{region}:", {"Ref": "AWS::AccountId"}, f":{name}"]]
    }


def queue_name_of(value: Any, template: Template | None = None) -> str:
    """The name of the queue a template value refers to: a queue resource of
    ``template`` (``Ref``, ``Fn::GetAtt``), or a queue named by its ARN or its name."""
    if isinstance(value, str):
        return value.rsplit(":", 1)[-1].rsplit("/", 1)[-1]
    if isinstance(value, dict) and "Fn::Join" in value:
        return queue_name_of(joined(value))
    assert template is not None, f"a queue reference with no template to look in: {value}"
    logical = value["Ref"] if "Ref" in value else value["Fn::GetAtt"][0]
    queue = template.to_json()["Resources"][logical]
    assert queue["Type"] == "AWS::SQS::Queue", f"{logical} is not a queue"
    return str(queue["Properties"]["QueueName"])


def joined(value: Any, token: str = "<token>") -> str:
    """A template string with each deploy-time reference replaced by ``token``."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join(joined(p, token) for p in parts)
    return token


# What CloudWatch metric math the alarms use, as Python: arithmetic, comparisons,
# AND, IF, FILL, CEIL, FLOOR and MAX([...]) (a missing point is None; MAX skips it).
_METRIC_MATH: dict[str, Callable[..., Any]] = {
    "IF": lambda condition, yes, no: yes if condition else no,
    "FILL": lambda value, default: default if value is None else value,
    "CEIL": math.ceil,
    "FLOOR": math.floor,
    "MAX": lambda values: max((v for v in values if v is not None), default=None),
}
_COMPARISONS: dict[str, Callable[[float, float], bool]] = {
    "GreaterThanThreshold": operator.gt,
    "GreaterThanOrEqualToThreshold": operator.ge,
    "LessThanThreshold": operator.lt,
    "LessThanOrEqualToThreshold": operator.le,
}

MetricValues = Callable[[dict[str, Any]], float | None]


class _Ids(dict[str, Any]):
    """The alarm's metric and expression ids, each evaluated when first named."""

    def __init__(self, entries: dict[str, dict[str, Any]], metric_value: MetricValues) -> None:
        super().__init__()
        self.entries, self.metric_value = entries, metric_value

    def __missing__(self, name: str) -> Any:
        if name in _METRIC_MATH:
            return _METRIC_MATH[name]
        entry = self.entries[name]
        if "MetricStat" in entry:
            self[name] = self.metric_value(entry["MetricStat"])
        else:
            self[name] = _evaluate(entry["Expression"], self)
        return self[name]


def _evaluate(expression: str, ids: _Ids) -> Any:
    functions = set(re.findall(r"\b[A-Z][A-Z0-9]*\b", expression))
    assert functions <= {*_METRIC_MATH, "AND"}, f"not modelled here: {functions - {*_METRIC_MATH}}"
    python = re.sub(r"\bAND\b", " and ", expression)
    return eval(python, {"__builtins__": {}}, ids)  # noqa: S307 - our own template's text


def alarm_value(alarm: dict[str, Any], metric_value: MetricValues) -> Any:
    """The value of a metric-math alarm's expression in one period in which each of
    its metrics had ``metric_value(MetricStat)`` (None: no data point)."""
    metrics = alarm["Properties"]["Metrics"]
    (returned,) = [m for m in metrics if m.get("ReturnData", True)]
    ids = _Ids({m["Id"]: m for m in metrics}, metric_value)
    return ids[returned["Id"]]


def breaches(alarm: dict[str, Any], value: float | None) -> bool:
    """Whether ``value`` breaches the alarm's threshold (missing data as the alarm treats it)."""
    props = alarm["Properties"]
    if value is None:
        return props.get("TreatMissingData", "missing") == "breaching"
    return _COMPARISONS[props["ComparisonOperator"]](value, props["Threshold"])


def evaluate(alarm: dict[str, Any], metric_value: MetricValues) -> bool:
    """Whether a metric-math alarm breaches for one period of ``metric_value``."""
    return breaches(alarm, alarm_value(alarm, metric_value))


def step_adjustment(policy: dict[str, Any], alarm: dict[str, Any], value: float) -> int:
    """The adjustment a step scaling policy makes for an alarm that reads ``value``."""
    config = policy["Properties"]["StepScalingPolicyConfiguration"]
    above = value - alarm["Properties"]["Threshold"]
    for step in config["StepAdjustments"]:
        lower = step.get("MetricIntervalLowerBound", -math.inf)
        upper = step.get("MetricIntervalUpperBound", math.inf)
        # Above the threshold an interval includes its lower bound, below it its upper.
        if (lower <= above < upper) if above >= 0 else (lower < above <= upper):
            return int(step["ScalingAdjustment"])
    raise AssertionError(f"no step for {value} in {config['StepAdjustments']}")


def queue_readers(template: Template, queue_name: str) -> set[str]:
    """The ECS services (logical ids) whose workers are given the queue
    ``queue_name`` to read (their task's ``SWITCHYARD_QUEUES``)."""
    tasks = template.find_resources("AWS::ECS::TaskDefinition")
    readers = set()
    for name, service in template.find_resources("AWS::ECS::Service").items():
        task = tasks[service["Properties"]["TaskDefinition"]["Ref"]]
        env = task["Properties"]["ContainerDefinitions"][0]["Environment"]
        queues = [e["Value"] for e in env if e["Name"] == "SWITCHYARD_QUEUES"]
        if queues and f"/{queue_name}" in json.dumps(queues[0]):
            readers.add(name)
    return readers


def assert_workers_update_first(template: Template, manifest: Any, stage: str = "dev") -> None:
    """Each model's router, and the function of every model's protocols, are updated
    after every worker service that reads the model's queues: each depends on them."""
    resources = template.to_json()["Resources"]
    (every_model,) = {
        integrated_function(m) for m in methods_at(template, "/openai/v1/{proxy+}").values()
    }
    for model in manifest.models:
        readers = queue_readers(template, manifest.names(stage).queue(model, "realtime"))
        assert readers, model
        router, _ = router_function(template, model)
        for sender in (router, every_model):
            assert readers <= set(as_list(resources[sender].get("DependsOn", []))), (model, sender)
