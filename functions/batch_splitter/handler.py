"""Lambda entry point: S3 ObjectCreated events on the batch drop bucket.

Settings are read and the adapters built at init, so a missing or malformed
``SWITCHYARD_*`` variable fails the cold start with its name.
"""

from typing import Any

from switchyard.settings import SplitterSettings, get_settings
from switchyard.wiring import build_adapters
from switchyard_batch.splitter import handle_event, summary

SETTINGS = get_settings(SplitterSettings)
ADAPTERS = build_adapters(SETTINGS)


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return summary(handle_event(event, ADAPTERS, SETTINGS.jobs_table))
