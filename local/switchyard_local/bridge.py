"""The emulator bridge: every gap between moto and AWS is closed here, in one place.

- AppConfig: moto keeps applications, profiles and hosted configuration versions,
  but has no environments, deployments or appconfigdata (and its
  ListApplications and ListHostedConfigurationVersions fail). Locally the newest
  hosted version of a profile is the deployed one. The cloud router reads its
  document from the AppConfig Lambda extension's HTTP API on localhost:2772; the
  local platform serves the same API from the emulator (:class:`ExtensionStandIn`),
  and the router's settings point it there, so the router runs the same code.
- Lambda and ECS are not executed by moto: the supervisor (``supervisor.py``) serves
  the router app with uvicorn and runs worker processes.
- API Gateway does not proxy requests in moto: the router checks each ``x-api-key``
  against the emulator's API keys itself (``switchyard.auth``).
"""

from __future__ import annotations

import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from switchyard.routing import RoutingDocument
from switchyard_local.routing_changes import Change, describe, parse_description


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


_EXTENSION_PATH = re.compile(r"^/applications/([^/]+)/environments/([^/]+)/configurations/([^/?]+)")


class ExtensionStandIn:
    """The AppConfig Lambda extension's HTTP API on loopback:
    ``GET /applications/{app}/environments/{env}/configurations/{profile}`` answers
    the profile's newest hosted version on the emulator (moto has no environments,
    so every environment sees it), or 404 as the extension does for an unknown one."""

    def __init__(self, appconfig: Any, application_id: str) -> None:
        versions = HostedVersions(appconfig, application_id)

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                match = _EXTENSION_PATH.match(self.path)
                try:
                    latest = versions.latest(match.group(3)) if match else None
                except LookupError:
                    latest = None
                if latest is None:
                    self.send_error(404, "no such configuration")
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(latest[1])))
                self.end_headers()
                self.wfile.write(latest[1])

            def log_message(self, *_: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(
            target=self._server.serve_forever, name="appconfig-extension", daemon=True
        ).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


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
