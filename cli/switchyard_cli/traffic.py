"""Traffic operations of the operator: checking routing documents, and publishing
and rolling them back in a deployed stage.

``switchyard traffic`` builds a document from an operator's arguments
(:func:`document_from_args`), checks it against the schema and the registry
(:func:`check_document`) and publishes it to the target's store: the emulator's
(``switchyard_local.bridge.LocalTrafficStore``) or AWS AppConfig's
(:class:`AppConfigTrafficStore`). The router only reads documents. Every change is
recorded with who made it, when and why: on the emulator in the hosted
configuration version's description, in AWS in AppConfig's own deployment history.
"""

from __future__ import annotations

from typing import Any

import jsonschema
from botocore.exceptions import ClientError
from pydantic import ValidationError

from switchyard.registry import ModelVersion
from switchyard.routing import RoutingDocument, load_schema
from switchyard_local.routing_changes import NOT_IN_FORCE, Change, describe, parse_description

# AppConfig deployment states still rolling out (watched by the canary alarms).
IN_FLIGHT = {"VALIDATING", "DEPLOYING", "BAKING"}


class TrafficError(Exception):
    """A refused change: the message says what is wrong; nothing was changed."""


class AppConfigTrafficStore:
    """Routing documents in AWS AppConfig, as a ``TrafficStore``
    (``switchyard_local.routing_changes``): a change is a hosted configuration
    version deployed to the model's environment with the stage's strategy; the
    model's canary alarms are the environment's monitors, so AppConfig itself rolls
    a bad deployment back, and its deployment history is the audit trail."""

    def __init__(self, appconfig: Any, application: str, strategy: str) -> None:
        self._api = appconfig
        self._app_id = _find(appconfig.list_applications()["Items"], application, "application")
        self._strategy_id = _find(
            appconfig.list_deployment_strategies()["Items"], strategy, "deployment strategy"
        )

    def _ids(self, model: str) -> tuple[str, str]:
        envs = self._api.list_environments(ApplicationId=self._app_id)["Items"]
        profiles = self._api.list_configuration_profiles(ApplicationId=self._app_id)["Items"]
        return _find(envs, model, "environment"), _find(profiles, model, "configuration profile")

    def history(self, model: str, limit: int = 10) -> list[Change]:
        env_id, profile_id = self._ids(model)
        items = self._api.list_deployments(
            ApplicationId=self._app_id, EnvironmentId=env_id, MaxResults=limit
        )["Items"]
        changes = []
        for item in sorted(items, key=lambda d: d["DeploymentNumber"], reverse=True)[:limit]:
            # Deployment summaries carry no description: the audit line travels on
            # the hosted configuration version that the deployment rolled out.
            version = self._api.get_hosted_configuration_version(
                ApplicationId=self._app_id,
                ConfigurationProfileId=profile_id,
                VersionNumber=int(item["ConfigurationVersion"]),
            )
            content = version["Content"].read()
            by, at, why = parse_description(version.get("Description"))
            state = item["State"]
            if state == "ROLLED_BACK":
                by, why = "AppConfig", self._rollback_reason(env_id, item["DeploymentNumber"])
            changes.append(
                Change(
                    item["DeploymentNumber"],
                    RoutingDocument.model_validate_json(content),
                    by,
                    at,
                    why,
                    state.lower(),
                )
            )
        return changes

    def _in_flight(self, env_id: str) -> dict[str, Any] | None:
        items = self._api.list_deployments(
            ApplicationId=self._app_id, EnvironmentId=env_id, MaxResults=5
        )["Items"]
        return next((d for d in items if d["State"] in IN_FLIGHT), None)

    def _rollback_reason(self, env_id: str, number: int) -> str:
        deployment = self._api.get_deployment(
            ApplicationId=self._app_id, EnvironmentId=env_id, DeploymentNumber=number
        )
        for event in deployment.get("EventLog", []):
            if event.get("EventType") == "ROLLBACK_COMPLETED" or "ROLLBACK" in event.get(
                "EventType", ""
            ):
                return event.get("Description", "rolled back")
        return "rolled back"

    def deployed(self, model: str) -> Change | None:
        for change in self.history(model, limit=20):
            if change.state not in NOT_IN_FORCE:
                return change
        return None

    def publish(self, model: str, document: RoutingDocument, by: str, why: str) -> Change:
        """Deploy ``document``. AppConfig runs one deployment per environment at a
        time (its bake time included), so a change while another is in flight is
        refused before anything is written."""
        env_id, profile_id = self._ids(model)
        flight = self._in_flight(env_id)
        if flight is not None:
            raise TrafficError(
                f"change #{flight['DeploymentNumber']} of {model}'s routing is still "
                f"{flight['State'].lower()}; AppConfig deploys one change at a time: wait "
                f"until `traffic show` says it is complete, or stop it with `traffic rollback`"
            )
        audit = describe(by, why)
        version = self._api.create_hosted_configuration_version(
            ApplicationId=self._app_id,
            ConfigurationProfileId=profile_id,
            Content=document.model_dump_json().encode(),
            ContentType="application/json",
            Description=audit,
        )["VersionNumber"]
        try:
            started = self._api.start_deployment(
                ApplicationId=self._app_id,
                EnvironmentId=env_id,
                DeploymentStrategyId=self._strategy_id,
                ConfigurationProfileId=profile_id,
                ConfigurationVersion=str(version),
                Description=audit,
            )
        except ClientError as exc:
            # Leave no undeployed version behind: history lists deployments only.
            self._api.delete_hosted_configuration_version(
                ApplicationId=self._app_id, ConfigurationProfileId=profile_id, VersionNumber=version
            )
            if exc.response["Error"]["Code"] == "ConflictException":
                raise TrafficError(
                    f"another change of {model}'s routing started meanwhile; nothing was changed"
                ) from exc
            raise
        who, at, reason = parse_description(audit)
        return Change(
            started["DeploymentNumber"], document, who, at, reason, started["State"].lower()
        )

    def stop_rollout(self, model: str) -> int | None:
        env_id, _ = self._ids(model)
        flight = self._in_flight(env_id)
        if flight is None:
            return None
        # AllowRevert also stops a deployment that is baking; either way AppConfig
        # marks it ROLLED_BACK and serves the document before it again.
        self._api.stop_deployment(
            ApplicationId=self._app_id,
            EnvironmentId=env_id,
            DeploymentNumber=flight["DeploymentNumber"],
            AllowRevert=True,
        )
        return int(flight["DeploymentNumber"])


def _find(items: list[dict[str, Any]], name: str, what: str) -> str:
    for item in items:
        if item.get("Name") == name:
            return str(item["Id"])
    raise TrafficError(f"no AppConfig {what} named {name!r}: is the stack deployed?")


def check_document(raw: dict[str, Any], versions: dict[str, ModelVersion]) -> RoutingDocument:
    """The document if it passes the JSON schema, the sum rule and names only
    registered, active versions; weights come out ordered oldest version first,
    so that a growing canary (the newest) only takes keys, never gives them."""
    try:
        jsonschema.validate(raw, load_schema())
    except jsonschema.ValidationError as exc:
        where = ".".join(str(p) for p in exc.absolute_path) or "document"
        raise TrafficError(f"{where}: {exc.message}") from None
    try:
        document = RoutingDocument.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise TrafficError(first["msg"].removeprefix("Value error, ")) from None
    named = set(document.weights)
    named |= {document.shadow.version} if document.shadow else set()
    named |= {document.fallback} if document.fallback else set()
    for version in sorted(named):
        record = versions.get(version)
        if record is None:
            known = ", ".join(sorted(versions)) or "none"
            raise TrafficError(f"unknown version {version!r} (registered: {known})")
        if record.status != "active":
            raise TrafficError(f"version {version!r} is {record.status}")
    order = sorted(document.weights, key=lambda v: (versions[v].created_at, v))
    return document.model_copy(update={"weights": {v: document.weights[v] for v in order}})


def document_from_args(
    weights: list[str],
    *,
    sticky: str | None,
    shadow: str | None,
    fallback: str | None,
    previous: RoutingDocument | None,
) -> dict[str, Any]:
    """``v1=90 v2=10 --shadow v3:5 --fallback v1`` as a raw document."""
    parsed: dict[str, int] = {}
    for item in weights:
        version, sep, value = item.partition("=")
        if not sep or not version:
            raise TrafficError(f"{item!r}: expected VERSION=PERCENT")
        if version in parsed:
            raise TrafficError(f"{item!r}: {version} is given a weight twice")
        try:
            parsed[version] = int(value)
        except ValueError:
            raise TrafficError(f"{item!r}: the percent must be a whole number") from None
    if sticky is not None and not sticky.strip():
        raise TrafficError("--sticky: a header's name, not nothing")
    if fallback is not None and parsed.get(fallback) == 100:
        # A request never falls back to the version that failed it.
        raise TrafficError(
            f"--fallback {fallback}: {fallback} takes all the traffic, so it would never "
            "answer for another; name a version that takes less"
        )
    raw: dict[str, Any] = {
        "schema_version": 1,
        "weights": parsed,
        "sticky_key": sticky or (previous.sticky_key if previous else "x-user-id"),
        "shadow": None,
        "fallback": fallback,
    }
    if shadow:
        version, sep, percent = shadow.partition(":")
        if not sep or not percent.isdigit():
            raise TrafficError(f"--shadow {shadow!r}: expected VERSION:PERCENT")
        if parsed.get(version) == 100:
            # A request is never copied to the version it is routed to.
            raise TrafficError(
                f"--shadow {shadow!r}: {version} takes all the traffic, so nothing would be "
                "copied to it; shadow a version that takes less"
            )
        raw["shadow"] = {"version": version, "percent": int(percent)}
    return raw
