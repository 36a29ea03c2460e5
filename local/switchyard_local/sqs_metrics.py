"""SQS's CloudWatch metrics, live, in the local emulator.

The scaling policy reads the age of each queue's oldest message. SQS has no queue
attribute for it: AWS publishes it as the CloudWatch metric
``AWS/SQS ApproximateAgeOfOldestMessage`` (dimension ``QueueName``), once a minute.
moto 5.2 stores only the metrics that are put into it, and no SQS metric is.

What :func:`apply` changes, where the local platform starts the emulator
(``switchyard_local.emulator``): CloudWatch ``GetMetricData`` answers a metric-stat
query for one of the SQS metrics below, for a queue of the same account and region,
from the emulator's own SQS backend at the moment it is asked: one datapoint,
stamped now, whatever the period. Every other query goes to moto's own code
unchanged. Nothing is stored, so a long run's memory does not grow with it.

- ``ApproximateAgeOfOldestMessage``: seconds since the oldest message still in the
  queue (visible, in flight or delayed) was sent. As AWS defines it, a message
  received three times or more no longer counts (the metric moves to the next one),
  so a message that keeps failing does not hold the age up until it reaches the DLQ.
- ``ApproximateNumberOfMessagesVisible`` and ``ApproximateNumberOfMessagesNotVisible``:
  the counts GetQueueAttributes gives, under their CloudWatch names.

So a client reads these metrics locally with the calls it makes in AWS. Locally the
value is current to the second; in AWS it is up to a minute or more behind.

Limits: a metric-math expression in the same request sees only moto's stored
metrics, not these live ones; ``GetMetricStatistics`` is moto's own (no SQS metrics).
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

NAMESPACE = "AWS/SQS"
AGE_OF_OLDEST = "ApproximateAgeOfOldestMessage"
VISIBLE = "ApproximateNumberOfMessagesVisible"
NOT_VISIBLE = "ApproximateNumberOfMessagesNotVisible"
LIVE_METRICS = (AGE_OF_OLDEST, VISIBLE, NOT_VISIBLE)
# AWS: "After a message is received three times (or more) and not processed, ... the
# ApproximateAgeOfOldestMessage metric points at the second-oldest message".
_RECEIVES_BEFORE_SKIPPED = 3

_original: dict[str, Any] = {}


def apply() -> None:
    """Answer the SQS metrics live in this process's CloudWatch (idempotent)."""
    if _original:
        return
    from moto.cloudwatch.models import CloudWatchBackend

    _original["get_metric_data"] = CloudWatchBackend.get_metric_data
    CloudWatchBackend.get_metric_data = _get_metric_data  # type: ignore[method-assign]


def undo() -> None:
    """moto's own GetMetricData again (for tests)."""
    if not _original:
        return
    from moto.cloudwatch.models import CloudWatchBackend

    CloudWatchBackend.get_metric_data = _original.pop("get_metric_data")  # type: ignore[method-assign]


def oldest_age_seconds(messages: list[Any], now_ms: float) -> float:
    """Seconds since the oldest of ``messages`` (moto ``Message`` objects, in queue
    order) was sent, skipping those received three times or more; 0 with none."""
    # Messages are appended as they are sent, so the first one that counts is the
    # oldest; a copy, so that a delete in another thread does not move the walk.
    for message in list(messages):
        if message.approximate_receive_count >= _RECEIVES_BEFORE_SKIPPED:
            continue
        if message.sent_timestamp is not None:
            return max(0.0, (now_ms - message.sent_timestamp) / 1000)
    return 0.0


def _live_value(queue: Any, metric: str, now_ms: float) -> float:
    if metric == AGE_OF_OLDEST:
        return round(oldest_age_seconds(queue._messages, now_ms), 3)
    if metric == VISIBLE:
        return float(queue.approximate_number_of_messages)
    return float(queue.approximate_number_of_messages_not_visible)


def _live_queue(backend: Any, query: dict[str, Any]) -> tuple[Any, str] | None:
    """The SQS queue and metric a query asks about, if it is one answered live."""
    stat = query.get("MetricStat")
    if not stat:
        return None
    metric = stat.get("Metric", {})
    if metric.get("Namespace") != NAMESPACE or metric.get("MetricName") not in LIVE_METRICS:
        return None
    dimensions = {d["Name"]: d["Value"] for d in metric.get("Dimensions", [])}
    if set(dimensions) != {"QueueName"}:
        return None
    from moto.sqs.models import sqs_backends

    sqs = sqs_backends[backend.account_id][backend.region_name]
    queue = sqs.queues.get(dimensions["QueueName"])
    return None if queue is None else (queue, metric["MetricName"])


def _get_metric_data(
    self: Any,
    queries: list[dict[str, Any]],
    start_time: dt.datetime,
    end_time: dt.datetime,
    scan_by: str = "TimestampAscending",
) -> list[dict[str, Any]]:
    live = {id(q): found for q in queries if (found := _live_queue(self, q)) is not None}
    rest = [q for q in queries if id(q) not in live]
    answered = (
        _original["get_metric_data"](self, rest, start_time, end_time, scan_by) if rest else []
    )
    by_id = {a["id"]: a for a in answered}
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    if start_time.tzinfo is None:  # moto parses the request's times without a zone
        now = now.replace(tzinfo=None)
    now_ms = time.time() * 1000
    results = []
    for query in queries:
        if id(query) not in live:
            if query["Id"] in by_id:
                results.append(by_id[query["Id"]])
            continue
        if not query.get("ReturnData", True):
            continue
        queue, metric = live[id(query)]
        in_window = start_time <= now <= end_time + dt.timedelta(seconds=60)
        stat = query["MetricStat"]["Stat"]
        value = 1.0 if stat == "SampleCount" else _live_value(queue, metric, now_ms)
        results.append(
            {
                "id": query["Id"],
                "label": query.get("Label") or f"{metric} {stat}",
                "values": [value] if in_window else [],
                "timestamps": [now] if in_window else [],
                "status_code": "Complete",
            }
        )
    return results
