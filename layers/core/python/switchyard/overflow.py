"""CPU overflow: a GPU pool's ``cpu_capable`` models, also served by a CPU pool
when their work would otherwise wait.

The CPU pool's workers take a model's work on overflow only while its gate is open
(:func:`overflow_open`), and it is open when either

- its GPU pool has no worker running: no worker of that pool has said so within
  :data:`BEAT_STALE_SECONDS` (:class:`PoolBeats`: each running worker of a pool that
  overflows writes one item to the results table every :data:`BEAT_SECONDS`, and
  takes it back when it stops); or
- the oldest message of either of the model's queues is older than the pool's
  ``cpu_overflow_after_ms`` (SQS's ``ApproximateAgeOfOldestMessage``, read from
  CloudWatch with :func:`oldest_ages`, as the local autoscaler reads it: a minute
  or so behind in AWS, current to the second on the local emulator).

While the gate is shut, the CPU pool's workers do not receive from those queues at
all, so a message's receive count is never spent on a look.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict

from switchyard.tables import RESULTS

BEAT_SECONDS = 5.0  # a running worker of a pool that overflows says so this often
BEAT_STALE_SECONDS = 3 * BEAT_SECONDS  # older than this: that worker is gone
_BEAT_TTL_SECONDS = 3600  # DynamoDB's TTL removes the beat of a worker killed unasked
_BEAT_PARTITION = "pool#{pool}"  # no tenant is named so: tenant names have no '#'
_AGE_METRIC = "ApproximateAgeOfOldestMessage"
_QUERIES_PER_CALL = 500  # GetMetricData's most queries per call


class OverflowSource(BaseModel):
    """A model a CPU pool takes on overflow: its GPU pool, and how old its oldest
    message must be (ms) before the CPU pool takes its work while that pool has a
    worker running."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pool: str
    after_ms: int


def overflow_open(*, running_workers: int, oldest_age_seconds: float, after_ms: int) -> bool:
    """Whether a CPU pool takes a ``cpu_capable`` model's work now: its GPU pool has
    no worker running, or its oldest message has waited longer than ``after_ms``."""
    return running_workers == 0 or oldest_age_seconds * 1000 > after_ms


class PoolBeats:
    """Which workers of a pool are running, in the results table: one item per
    worker (partition ``pool#<pool>``, sort key the worker's id), written by the
    worker while it runs and set to 0 when it stops."""

    def __init__(self, dynamodb: Any, table: str) -> None:
        self._dynamodb = dynamodb
        self._table = table

    def beat(self, pool: str, worker_id: str, at: float | None = None) -> None:
        now = time.time() if at is None else at
        kept = int(max(now, time.time()))  # a word taken back (at 0) expires from now too
        self._dynamodb.put_item(
            TableName=self._table,
            Item={
                RESULTS.partition: {"S": _BEAT_PARTITION.format(pool=pool)},
                RESULTS.sort: {"S": worker_id},
                "beat_at": {"N": repr(round(now, 3))},
                "expires_at": {"N": str(kept + _BEAT_TTL_SECONDS)},
            },
        )

    def end(self, pool: str, worker_id: str) -> None:
        """The worker stops: its word taken back (a beat at 0, which no reader counts;
        a put, so the worker needs no right to delete items)."""
        self.beat(pool, worker_id, at=0.0)

    def running(self, pool: str, at: float | None = None) -> int:
        """How many of ``pool``'s workers said they were running within
        :data:`BEAT_STALE_SECONDS`."""
        now = time.time() if at is None else at
        answer = self._dynamodb.query(
            TableName=self._table,
            KeyConditionExpression="#p = :p",
            ExpressionAttributeNames={"#p": RESULTS.partition},
            ExpressionAttributeValues={":p": {"S": _BEAT_PARTITION.format(pool=pool)}},
            ConsistentRead=True,
        )
        return sum(
            1
            for item in answer.get("Items", [])
            if now - float(item["beat_at"]["N"]) <= BEAT_STALE_SECONDS
        )


def queue_name(url: str) -> str:
    """An SQS queue URL's queue name (its last path segment)."""
    return url.rstrip("/").rsplit("/", 1)[-1]


def oldest_ages(cloudwatch: Any, names: Iterable[str]) -> dict[str, float]:
    """Queue name -> seconds since its oldest message was sent: SQS's
    ``ApproximateAgeOfOldestMessage``, the newest datapoint of the last five minutes
    (0 where there is none). SQS has no queue attribute for it."""
    names = list(names)
    end = dt.datetime.now(dt.UTC)
    ages: dict[str, float] = {}
    for first in range(0, len(names), _QUERIES_PER_CALL):
        chunk = names[first : first + _QUERIES_PER_CALL]
        queries = [
            {
                "Id": f"q{i}",
                "MetricStat": {
                    "Metric": {
                        "Namespace": "AWS/SQS",
                        "MetricName": _AGE_METRIC,
                        "Dimensions": [{"Name": "QueueName", "Value": name}],
                    },
                    "Period": 60,
                    "Stat": "Maximum",
                },
            }
            for i, name in enumerate(chunk)
        ]
        answer = cloudwatch.get_metric_data(
            MetricDataQueries=queries,
            StartTime=end - dt.timedelta(minutes=5),
            EndTime=end,
            ScanBy="TimestampDescending",
        )
        for result in answer.get("MetricDataResults", []):
            values = result.get("Values") or []
            if values:
                ages[chunk[int(result["Id"][1:])]] = float(values[0])
    return ages
