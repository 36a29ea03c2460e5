"""Lambda entry point: the batch-drop queue's messages (S3 ObjectCreated
notifications of the drop bucket), through its SQS event source mapping.

Settings are read and the adapters built at init, so a missing or malformed
``SWITCHYARD_*`` variable fails the cold start with its name.
"""

from typing import Any

from switchyard.init_phase import init_phase

with init_phase():  # the collector held off while the init runs
    from switchyard.settings import SplitterSettings, get_settings
    from switchyard.wiring import build_adapters
    from switchyard_batch.splitter import handle_sqs_event

    SETTINGS = get_settings(SplitterSettings)
    ADAPTERS = build_adapters(SETTINGS)


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Returns ``batchItemFailures``: the messages SQS should deliver again."""
    return handle_sqs_event(event, context, ADAPTERS)
