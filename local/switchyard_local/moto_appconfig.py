"""AppConfig's ListApplications in the emulator, which moto 5.2.5 does not answer.

The provisioner looks for the stage's application by name before it makes one, as a
deployment finds its stack's resources: over the state kept from the last run
(``switchyard_local.emulator_state``) the application, its profiles and their
routing documents are there already. The answer has AWS's shape (``Items``, each
with ``Id``, ``Name`` and ``Description``), all in one page.
"""

from __future__ import annotations

import json
from typing import Any

from switchyard_local.moto_sqs import require_pinned_moto


def _list_applications(self: Any) -> str:
    items = [app.to_json() for app in self.appconfig_backend.applications.values()]
    return json.dumps({"Items": items})


def apply() -> None:
    """Add the action to moto's AppConfig responses in this process (idempotent)."""
    from moto.appconfig.responses import AppConfigResponse

    require_pinned_moto("switchyard_local.moto_appconfig adds to {moto}'s AppConfig")
    AppConfigResponse.list_applications = _list_applications  # type: ignore[attr-defined]
