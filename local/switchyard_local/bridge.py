"""The emulator bridge: every gap between moto and AWS is closed here, in one place.

- AppConfig: moto keeps applications, profiles and hosted configuration versions,
  but has no environments, deployments or appconfigdata (and its
  ListApplications and ListHostedConfigurationVersions fail). Locally the newest hosted version of a
  profile is the deployed one; the router reads it through ``hosted_version_fetcher``
  where the cloud router reads the AppConfig Lambda extension.
- Lambda and ECS are not executed by moto: the supervisor (``supervisor.py``) serves
  the router app with uvicorn and runs worker processes.
- API Gateway does not proxy requests in moto: the router checks each ``x-api-key``
  against the emulator's API keys itself (``switchyard.auth``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from switchyard.routing import RoutingDocument
from switchyard_local.traffic import Change, describe, parse_description


class HostedVersions:
    """Finds each profile's newest hosted configuration version by probing forward
    from the last one seen (moto cannot list them)."""

    def __init__(self, appconfig: Any, application_id: str) -> None:
        # moto cannot list applications either: the provisioner hands over the id
        # (AppConfig accepts an id wherever it takes a name).
        self._api = appconfig
        self._app_id = application_id
        self._profiles: dict[str, str] = {}
        self._latest: dict[str, int] = {}
        self._lock = threading.Lock()

    def ids(self, profile: str) -> tuple[str, str]:
        with self._lock:
            if profile not in self._profiles:
                items = self._api.list_configuration_profiles(ApplicationId=self._app_id)
                for item in items.get("Items", []):
                    self._profiles[item["Name"]] = item["Id"]
            if profile not in self._profiles:
                raise LookupError(f"no AppConfig profile {profile!r}")
            return self._app_id, self._profiles[profile]

    def latest(self, profile: str) -> tuple[int, bytes] | None:
        app_id, profile_id = self.ids(profile)
        number = self._latest.get(profile, 0)
        content: bytes | None = None
        while True:
            try:
                found = self._api.get_hosted_configuration_version(
                    ApplicationId=app_id,
                    ConfigurationProfileId=profile_id,
                    VersionNumber=number + 1,
                )
            except self._api.exceptions.ResourceNotFoundException:
                break
            number += 1
            content = found["Content"].read()
        if number == 0:
            return None
        if content is None:
            found = self._api.get_hosted_configuration_version(
                ApplicationId=app_id, ConfigurationProfileId=profile_id, VersionNumber=number
            )
            content = found["Content"].read()
        self._latest[profile] = number
        return number, content

    def publish(self, profile: str, content: bytes) -> int:
        app_id, profile_id = self.ids(profile)
        created = self._api.create_hosted_configuration_version(
            ApplicationId=app_id,
            ConfigurationProfileId=profile_id,
            Content=content,
            ContentType="application/json",
        )
        return int(created["VersionNumber"])


def hosted_version_fetcher(appconfig: Any, application_id: str) -> Callable[[str], bytes | None]:
    versions = HostedVersions(appconfig, application_id)

    def fetch(model: str) -> bytes | None:
        latest = versions.latest(model)
        return latest[1] if latest else None

    return fetch


class LocalTrafficStore:
    """Routing documents on the emulator: each change is a new hosted version
    (the newest is the deployed one), its description the audit line."""

    def __init__(self, appconfig: Any, application_id: str) -> None:
        self._api = appconfig
        self._versions = HostedVersions(appconfig, application_id)

    def stop_rollout(self, model: str) -> int | None:
        return None  # a local change is in force as soon as it is published

    def history(self, model: str, limit: int = 10) -> list[Change]:
        latest = self._versions.latest(model)
        if latest is None:
            return []
        app_id, profile_id = self._versions.ids(model)
        changes = []
        for number in range(latest[0], max(latest[0] - limit, 0), -1):
            found = self._api.get_hosted_configuration_version(
                ApplicationId=app_id, ConfigurationProfileId=profile_id, VersionNumber=number
            )
            by, at, why = parse_description(found.get("Description"))
            document = RoutingDocument.model_validate_json(found["Content"].read())
            changes.append(Change(number, document, by, at, why))
        return changes

    def deployed(self, model: str) -> Change | None:
        changes = self.history(model, limit=1)
        return changes[0] if changes else None

    def publish(self, model: str, document: RoutingDocument, by: str, why: str) -> Change:
        app_id, profile_id = self._versions.ids(model)
        created = self._api.create_hosted_configuration_version(
            ApplicationId=app_id,
            ConfigurationProfileId=profile_id,
            Content=document.model_dump_json().encode(),
            ContentType="application/json",
            Description=describe(by, why),
        )
        by_, at, why_ = parse_description(created.get("Description"))
        return Change(int(created["VersionNumber"]), document, by_, at, why_)
