"""What a request cost, and what the platform spent: the arithmetic and its store.

An answered request is charged two things (:func:`request_cost`):

1. its share of the worker's time: the seconds its batch spent in the model x its
   inputs / the batch's inputs, priced per second of the worker service's instance
   type (its first ``instance_types``), the same on the local platform, which
   prices what the same work would cost in the cloud;
2. the AWS requests its path makes (:func:`path_usage`), counted from what the
   router and the worker do for it, priced at the first tier of the manifest's
   price table (``switchyard.prices``).

A worker adds each batch's spend per tenant, model and version to an hourly item
of the results table, and its running and busy seconds to an hourly item of its
own (:class:`CostLedger`); ``switchyard costs`` reads both. A worker's time that
no batch used is its idle time: the platform's overhead, billed to no tenant.
"""

from __future__ import annotations

import datetime as dt
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from switchyard.admission import queued_lease
from switchyard.prices import PriceTable, first_price
from switchyard.results import AsStored, as_stored
from switchyard.schemas import AWS_SERVICES, AwsService, QueueMessage, RequestCost, ResultRecord
from switchyard.tables import RESULTS
from switchyard.telemetry import LOG_LINES_PER_RECORD

Path = Literal["sync", "async", "job"]

# The router's GetItem looks for a sync request's result while it waits (it looks
# when the worker's answer is due, and again if it is late: 1.5 to 2 a request in
# the bench's aws_calls section).
SYNC_RESULT_LOOKS = 2
# The async path's reads of its result: the one GET /v1/requests/{id} that finds it
# done (a caller that polls more often pays for its own calls, not counted here).
ASYNC_POLLS = 1
FIREHOSE_RECORD_BYTES = 5 * 1024  # Firehose bills each record rounded up to 5 KB
# A sync request's slot in its tenant's sync requests, taken and given back: two
# UpdateItems of a counter item under 1 KB, a write unit each.
SYNC_SLOT_WRITES = 2
# A prediction-log line with its cost (switchyard.telemetry.prediction_records): 551
# bytes for a minilm-embed answer.
PREDICTION_LINE_BYTES = 550
SQS_MESSAGES_PER_CALL = 10  # a receive takes, and a delete batch deletes, up to 10
# The result item's attributes beyond its ``doc`` text and outputs (keys, status,
# model, version, TTL and their names) and the cost it is about to carry, bytes.
_ITEM_OVERHEAD_BYTES = 450
_LEDGER_TTL_SECONDS = 400 * 86_400  # a year of months, and a margin
# The router functions' memory (stacks.cloud renders it): Lambda bills GB-seconds.
ROUTER_MEMORY_MB = 1024  # CPU scales with memory: a faster cold start for every tenant
_SPEND = "cost#{tenant}#{model}"  # no tenant is named so: tenant names have no '#'
_TIME = "meter#{service}"


class CostRates(BaseModel):
    """What a worker prices its requests with (USD): its instance's price and one
    unit of each AWS request, from the manifest's price table (:meth:`of`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    instance_type: str = Field(description="The worker service's first instance type")
    instance_per_hour: float = Field(ge=0)
    apigateway_per_call: float = Field(ge=0)
    lambda_per_call: float = Field(ge=0)
    lambda_per_gb_second: float = Field(ge=0)
    router_memory_mb: int = Field(gt=0)
    # The router's own time per invocation, apart from a sync request's wait for its
    # result (the capacity plan's ``router_overhead_ms``: admission, enqueue, looks).
    router_seconds_per_call: float = Field(default=0.03, ge=0)
    sqs_per_call: float = Field(ge=0)
    dynamodb_per_wru: float = Field(ge=0)
    dynamodb_per_rru: float = Field(ge=0)
    s3_put_per_call: float = Field(ge=0)
    s3_get_per_call: float = Field(ge=0)
    firehose_per_gb: float = Field(ge=0)

    @classmethod
    def of(
        cls, prices: PriceTable, instance_type: str, router_memory_mb: int = ROUTER_MEMORY_MB
    ) -> CostRates:
        """The rates of a worker service on ``instance_type`` whose routers have
        ``router_memory_mb``; a type the table has no price for is refused."""
        if instance_type not in prices.instances_per_hour:
            raise ValueError(
                f"prices.instances_per_hour: no price for {instance_type!r} (add it to the "
                "manifest's [prices.instances_per_hour])"
            )
        return cls(
            instance_type=instance_type,
            instance_per_hour=prices.instances_per_hour[instance_type],
            apigateway_per_call=first_price(prices.apigateway_rest_per_million) / 1e6,
            lambda_per_call=first_price(prices.lambda_per_million_requests) / 1e6,
            lambda_per_gb_second=first_price(prices.lambda_per_gb_second),
            router_memory_mb=router_memory_mb,
            sqs_per_call=first_price(prices.sqs_per_million_requests) / 1e6,
            dynamodb_per_wru=first_price(prices.dynamodb_per_million_wru) / 1e6,
            dynamodb_per_rru=first_price(prices.dynamodb_per_million_rru) / 1e6,
            s3_put_per_call=first_price(prices.s3_put_per_thousand) / 1e3,
            s3_get_per_call=first_price(prices.s3_get_per_thousand) / 1e3,
            firehose_per_gb=first_price(prices.firehose_per_gb),
        )

    def worker_usd(self, seconds: float) -> float:
        return seconds * self.instance_per_hour / 3600


@dataclass(frozen=True)
class PathFacts:
    """What decides the AWS requests of one request's path."""

    path: Path  # a sync or async request of the API, or a batch job's chunk
    batch_messages: int = 1  # the messages answered with it (receives and deletes shared)
    claim_checked: bool = False  # its inputs went through S3 (router PUT, worker GET)
    result_item_bytes: int = 0  # its result item as stored in DynamoDB
    outputs_put_share: float = 0.0  # its share of an S3 PUT of outputs (0: held inline)
    router_wait_seconds: float = 0.0  # a sync request: enqueue to result
    # A sync caller's own (no shadow copy's): it holds a slot of its tenant's sync
    # requests while it waits (switchyard.admission.Admission).
    sync_slot: bool = False
    # Counted in its tenant's queued work (switchyard.admission.QueuedWork): the
    # router's write that took its place, and its share of the worker's write that
    # gives back the places of a batch's requests of one tenant, model and lease end.
    queued_counted: bool = False
    queued_give_back_share: float = 1.0


@dataclass
class AwsUsage:
    """The AWS requests (and units) of one request's path."""

    apigateway_calls: float = 0.0
    lambda_calls: float = 0.0
    lambda_gb_seconds: float = 0.0
    sqs_calls: float = 0.0
    dynamodb_wru: float = 0.0
    dynamodb_rru: float = 0.0
    s3_puts: float = 0.0
    s3_gets: float = 0.0
    firehose_bytes: float = 0.0


def write_units(size: int) -> int:
    """DynamoDB's write request units for an item of ``size`` bytes (1 KB each)."""
    return max(1, math.ceil(size / 1024))


def read_units(size: int) -> int:
    """Strongly consistent read request units for ``size`` bytes (4 KB each)."""
    return max(1, math.ceil(size / 4096))


def path_usage(p: PathFacts, router_memory_mb: int, router_seconds: float) -> AwsUsage:
    """The AWS requests a request's path makes, as the code makes them:

    - the router (sync and async): one API Gateway call and one invocation for the
      request, billed for its own time and, if sync, its wait for the result; it
      sends the message (SQS), and writes the request's queued record (async: a
      PutItem); it reads the result (sync: :data:`SYNC_RESULT_LOOKS` GetItems while
      it waits; async: :data:`ASYNC_POLLS` GET, one more call and invocation);
    - admission (``switchyard.admission``, every tier caps its tenants): a sync
      request's slot, taken and given back by the router (two UpdateItems); a
      request counted in its tenant's queued work (an async one), the router's
      UpdateItem that counts it and its share of the worker's that gives it back;
    - a job's chunk: the splitter's send (its own invocations and reads of the file
      are the job's, not counted); its result is put with its count on the job, a
      transaction of two items (twice the write units each);
    - the worker: its share of the receive and the delete batch of its messages, one
      read of its status (BatchGetItem), its result write (by the item's size), an
      S3 GET of claim-checked inputs and its share of the PUT of outputs too large to
      hold inline (and the router's GET of them), and its share of the Firehose record
      that logs its batch (:func:`log_billed_bytes`).

    Left out, as the platform's overhead: empty receives, visibility extensions,
    cache refreshes, the ledger's own writes, and a retried batch's calls; and a
    sync request's place in queued work, counted only if it is handed off at its
    deadline (one UpdateItem more, and its share of the give-back).
    """
    u = AwsUsage()
    shared = math.ceil(p.batch_messages / SQS_MESSAGES_PER_CALL) / p.batch_messages
    u.sqs_calls = 1 + 2 * shared  # send; receive and delete, shared
    result_wru = write_units(p.result_item_bytes)
    result_rru = read_units(p.result_item_bytes)
    u.dynamodb_rru = 1  # the worker's status read
    gets = 0
    if p.path == "job":
        u.dynamodb_wru = 2 * result_wru + 2
    else:
        calls = 1 if p.path == "sync" else 1 + ASYNC_POLLS
        u.apigateway_calls = u.lambda_calls = calls
        seconds = calls * router_seconds + (p.router_wait_seconds if p.path == "sync" else 0)
        u.lambda_gb_seconds = router_memory_mb / 1024 * seconds
        looks = SYNC_RESULT_LOOKS if p.path == "sync" else ASYNC_POLLS
        u.dynamodb_rru += looks * result_rru
        u.dynamodb_wru = result_wru + (1 if p.path == "async" else 0)
        gets = 1 if p.outputs_put_share else 0  # the router reads S3-held outputs
        if p.sync_slot:
            u.dynamodb_wru += SYNC_SLOT_WRITES
    if p.queued_counted:
        u.dynamodb_wru += 1 + p.queued_give_back_share
    u.s3_puts = p.outputs_put_share + (1 if p.claim_checked else 0)
    u.s3_gets = gets + (1 if p.claim_checked else 0)
    u.firehose_bytes = log_billed_bytes(p.batch_messages) / p.batch_messages
    return u


def usage_key(p: PathFacts) -> tuple[Any, ...]:
    """What of ``p`` decides :func:`path_usage`'s answer: two paths with the same key
    make the same requests. Its item's size counts by the units it is billed in, and
    the router's wait only for a sync request, the one it is billed for."""
    return _usage_key(*(getattr(p, f.name) for f in fields(PathFacts)))


def _usage_key(
    path: Path,
    batch_messages: int,
    claim_checked: bool,
    result_item_bytes: int,
    outputs_put_share: float,
    router_wait_seconds: float,
    sync_slot: bool,
    queued_counted: bool,
    queued_give_back_share: float,
) -> tuple[Any, ...]:
    """:func:`usage_key` of the path these are the facts of (``PathFacts``' fields, in
    order), without making it. Its units are :func:`write_units` and
    :func:`read_units` of a size, worked out here (a call for every answer priced)."""
    return (
        path,
        batch_messages,
        claim_checked,
        -(-result_item_bytes // 1024) or 1,
        -(-result_item_bytes // 4096) or 1,
        outputs_put_share,
        router_wait_seconds if path == "sync" else 0.0,
        sync_slot,
        queued_counted,
        queued_give_back_share,
    )


def log_billed_bytes(lines: float, line_bytes: int = PREDICTION_LINE_BYTES) -> int:
    """The bytes Firehose bills for a batch's ``lines`` prediction-log lines, sent
    together (:class:`switchyard.telemetry.FirehosePredictionLog`): records of up to
    500 lines, each rounded up to 5 KB. A batch of 16 lines of 550 bytes is one
    record billed as 10 KB, 640 bytes a line, against 5 KB a line logged alone."""
    full, rest = divmod(lines, LOG_LINES_PER_RECORD)
    whole = int(full) * firehose_billed_bytes(LOG_LINES_PER_RECORD * line_bytes)
    return whole + (firehose_billed_bytes(rest * line_bytes) if rest or not full else 0)


def firehose_billed_bytes(size: float) -> int:
    """The bytes Firehose bills for one record of ``size`` bytes: rounded up to 5 KB."""
    return max(1, math.ceil(size / FIREHOSE_RECORD_BYTES)) * FIREHOSE_RECORD_BYTES


def price_usage(u: AwsUsage, rates: CostRates) -> dict[AwsService, float]:
    """USD by service for ``u``."""
    return {
        "apigateway": u.apigateway_calls * rates.apigateway_per_call,
        "lambda": u.lambda_calls * rates.lambda_per_call
        + u.lambda_gb_seconds * rates.lambda_per_gb_second,
        "sqs": u.sqs_calls * rates.sqs_per_call,
        "dynamodb": u.dynamodb_wru * rates.dynamodb_per_wru
        + u.dynamodb_rru * rates.dynamodb_per_rru,
        "s3": u.s3_puts * rates.s3_put_per_call + u.s3_gets * rates.s3_get_per_call,
        "firehose": u.firehose_bytes / 2**30 * rates.firehose_per_gb,
    }


def request_cost(worker_seconds: float, path: PathFacts, rates: CostRates) -> RequestCost:
    """What one answered request cost: its worker share and its path's AWS requests."""
    return _cost(worker_seconds, _path_price(path, rates), rates)


def _path_price(path: PathFacts, rates: CostRates) -> tuple[dict[AwsService, float], float]:
    """USD by service of ``path``'s AWS requests, and their sum."""
    aws = price_usage(
        path_usage(path, rates.router_memory_mb, rates.router_seconds_per_call), rates
    )
    return aws, sum(aws.values())


def _cost(
    worker_seconds: float, priced: tuple[dict[AwsService, float], float], rates: CostRates
) -> RequestCost:
    """A request's cost: its worker share, and its path's AWS requests (``priced``:
    :func:`_path_price`'s answer)."""
    aws, aws_usd = priced
    worker = rates.worker_usd(worker_seconds)
    return RequestCost(
        usd=worker + aws_usd,
        worker_usd=worker,
        aws_usd=aws_usd,
        worker_seconds=worker_seconds,
        instance_type=rates.instance_type,
        aws=aws,
    )


# The most paths a worker keeps priced between batches (``PathPrices``).
_PATHS_KEPT = 1024

PathPrices = dict[tuple[Any, ...], tuple[dict[AwsService, float], float]]
"""Each path's price at its rates, by its :func:`usage_key`: a worker's batches
mostly take a few paths, priced once and kept for the batches after."""


def price_answers(
    answers: list[tuple[QueueMessage, ResultRecord]],
    rates: CostRates,
    inline_bytes: int,
    priced: PathPrices | None = None,
) -> AsStored:
    """Set the cost of each final record of one batch's answers (``answers``: each
    message and its result, as the worker stores them together): its worker share
    (its timings' ``worker_ms``: the batch's seconds in the model x its inputs / the
    batch's inputs; 0 for one answered without running) and its path's AWS requests.
    ``inline_bytes``: outputs stored as larger go to S3, a tenant's in one object.
    Returns the records' outputs and docs as their items hold them, worked out to
    size them, for the store to write as they are. ``priced``: the paths priced
    before at ``rates`` (kept by the caller between batches), added to here."""
    records = [record for _, record in answers]
    n = len(answers)
    # Each record's outputs as its item holds them, sized (-1: too large to hold
    # inline, put in S3), the batch's packed or written together.
    outputs = as_stored(records, inline_bytes)
    sizes = [0] * n
    to_s3: dict[str, int] = {}
    for i, stored in enumerate(outputs.each):
        if stored is None:
            continue
        if isinstance(stored, bytes):
            tenant = records[i].tenant
            to_s3[tenant] = to_s3.get(tenant, 0) + 1
            sizes[i] = -1
        else:
            sizes[i] = len(next(iter(stored[1].values())))
    # The worker gives back a batch's places in queued work one write per tenant,
    # model and lease end (Finisher._give_back_queued): shared by their requests.
    leases: list[Any] = [None] * n
    for i, (m, _) in enumerate(answers):
        if m.queued_counted:
            leases[i] = queued_lease(m.tenant, m.model, m.expires_at)
    places = Counter(lease for lease in leases if lease is not None)
    # Each record's doc (its JSON but what its item holds apart: its keys, outputs and
    # cost), the batch's written in one pass, as the store writes them.
    docs = map(len, outputs.docs)
    # A batch's answers mostly make the same requests (``usage_key``) and have the
    # same share of its time: each path is priced once (kept for the batches after,
    # where the caller keeps ``priced``), and each cost made once, the answers that
    # cost the same holding one (a cost is frozen).
    if priced is None:
        priced = {}
    elif len(priced) > _PATHS_KEPT:
        priced.clear()
    made: dict[tuple[tuple[Any, ...], float], RequestCost] = {}
    for (message, record), outputs_bytes, lease, doc in zip(
        answers, sizes, leases, docs, strict=True
    ):
        if message.job is not None:
            path: Path = "job"
        elif message.respond_by is not None:
            path = "sync"
        else:
            path = "async"
        facts = (  # PathFacts' fields, in order: the path is made only where it is priced
            path,
            n,
            message.inputs_ref is not None,
            _ITEM_OVERHEAD_BYTES + doc + (outputs_bytes if outputs_bytes > 0 else 0),
            1 / to_s3[record.tenant] if outputs_bytes < 0 else 0.0,
            max((record.completed_at or 0) - record.created_at, 0.0) if path == "sync" else 0.0,
            path == "sync" and message.shadow_of is None,
            lease is not None,
            1 / places[lease] if lease is not None else 1.0,
        )
        usage = _usage_key(*facts)
        worker_ms = record.timings.get("worker_ms", 0.0)
        cost = made.get((usage, worker_ms))
        if cost is None:
            price = priced.get(usage)
            if price is None:
                priced[usage] = price = _path_price(PathFacts(*facts), rates)
            made[usage, worker_ms] = cost = _cost(worker_ms / 1000, price, rates)
        # Set in the record's own dict, as pydantic's assignment does for a model that
        # validates none: the finisher's records are assembled with every field set.
        record.__dict__["cost"] = cost
    return outputs


# -- spend, added up -----------------------------------------------------------------

Group = tuple[str, str, str]  # tenant, model, version


@dataclass
class Spend:
    """Requests and what they cost, added up."""

    requests: int = 0
    usd: float = 0.0
    worker_usd: float = 0.0
    aws_usd: float = 0.0
    worker_seconds: float = 0.0
    aws: dict[str, float] = field(default_factory=dict)

    def add(self, cost: RequestCost, requests: int = 1) -> None:
        """``requests`` requests that each cost ``cost``."""
        self.requests += requests
        self.usd += cost.usd * requests
        self.worker_usd += cost.worker_usd * requests
        self.aws_usd += cost.aws_usd * requests
        self.worker_seconds += cost.worker_seconds * requests
        for service, usd in cost.aws.items():
            self.aws[service] = self.aws.get(service, 0.0) + usd * requests

    def merge(self, other: Spend) -> None:
        self.requests += other.requests
        self.usd += other.usd
        self.worker_usd += other.worker_usd
        self.aws_usd += other.aws_usd
        self.worker_seconds += other.worker_seconds
        for service, usd in other.aws.items():
            self.aws[service] = self.aws.get(service, 0.0) + usd

    def as_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "usd": self.usd,
            "worker_usd": self.worker_usd,
            "aws_usd": self.aws_usd,
            "worker_seconds": self.worker_seconds,
            "aws": {s: self.aws.get(s, 0.0) for s in AWS_SERVICES},
        }


def spend_by_group(records: Iterable[ResultRecord]) -> dict[Group, Spend]:
    """The costed records' spend per tenant, model and version. A batch's records
    that cost the same hold one cost (:func:`price_answers`): each group adds each of
    its costs once, times the records that hold it."""
    costs: dict[int, RequestCost] = {}
    counts: Counter[tuple[str, str, str, int]] = Counter()
    for r in records:
        cost = r.cost
        if cost is not None:
            costs[id(cost)] = cost
            counts[r.tenant, r.model, r.version, id(cost)] += 1
    groups: dict[Group, Spend] = {}
    for (tenant, model, version, held), n in counts.items():
        group = (tenant, model, version)
        spend = groups.get(group)
        if spend is None:
            groups[group] = spend = Spend()
        spend.add(costs[held], n)
    return groups


@dataclass(frozen=True)
class WorkerTime:
    """A worker's seconds in one hour: running, and busy running batches."""

    service: str
    worker: str
    hour: str
    running_seconds: float
    busy_seconds: float
    usd_per_hour: float


# -- the store -------------------------------------------------------------------------


def hour_of(at: float) -> str:
    """The UTC hour an epoch second falls in, as the ledger keys it (``2026-11-27T13``)."""
    return dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%dT%H")


class CostLedger:
    """Spend and worker time in the results table, by the hour (UTC):

    - spend: partition ``cost#<tenant>#<model>``, sort key ``<hour>#<version>``, the
      sums of :class:`Spend` (added to with each batch);
    - worker time: partition ``meter#<service>``, sort key ``<hour>#<worker>``, its
      running and busy seconds in that hour (added to every few seconds) and the
      price of its instance.

    Both are reached by a Query per partition from an hour on: the same calls on
    the emulator and in AWS."""

    def __init__(self, dynamodb: Any, table: str) -> None:
        self._ddb = dynamodb
        self._table = table

    def add_spend(self, groups: Mapping[Group, Spend], at: float) -> None:
        hour = hour_of(at)
        for (tenant, model, version), s in groups.items():
            sums = {
                "requests": float(s.requests),
                "usd": s.usd,
                "worker_usd": s.worker_usd,
                "aws_usd": s.aws_usd,
                "worker_seconds": s.worker_seconds,
                **{f"aws_{k}": v for k, v in s.aws.items()},
            }
            self._add(_SPEND.format(tenant=tenant, model=model), f"{hour}#{version}", sums, at)

    def add_time(
        self,
        service: str,
        worker: str,
        *,
        running_seconds: float,
        busy_seconds: float,
        usd_per_hour: float,
        at: float,
    ) -> None:
        self._add(
            _TIME.format(service=service),
            f"{hour_of(at)}#{worker}",
            {"running_seconds": running_seconds, "busy_seconds": busy_seconds},
            at,
            also={"usd_per_hour": {"N": _number(usd_per_hour)}},
        )

    def _add(
        self,
        partition: str,
        sort: str,
        sums: Mapping[str, float],
        at: float,
        also: Mapping[str, Any] | None = None,
    ) -> None:
        names = {f"#a{i}": name for i, name in enumerate(sums)}
        values = {f":a{i}": {"N": _number(v)} for i, v in enumerate(sums.values())}
        sets = {"#ttl": ":ttl", **{f"#s{i}": f":s{i}" for i in range(len(also or {}))}}
        names.update({"#ttl": RESULTS.ttl_attribute or "expires_at"})
        names.update({f"#s{i}": name for i, name in enumerate(also or {})})
        values[":ttl"] = {"N": str(int(at) + _LEDGER_TTL_SECONDS)}
        values.update({f":s{i}": value for i, value in enumerate((also or {}).values())})
        self._ddb.update_item(
            TableName=self._table,
            Key={RESULTS.partition: {"S": partition}, RESULTS.sort: {"S": sort}},
            UpdateExpression="ADD "
            + ", ".join(f"#a{i} :a{i}" for i in range(len(sums)))
            + " SET "
            + ", ".join(f"{n} = {v}" for n, v in sets.items()),
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
        )

    def spend(
        self, tenants: Iterable[str], models: Iterable[str], since: float
    ) -> dict[Group, Spend]:
        """Spend per tenant, model and version from the hour ``since`` falls in."""
        out: dict[Group, Spend] = {}
        models = list(models)
        for tenant in tenants:
            for model in models:
                for item in self._query(_SPEND.format(tenant=tenant, model=model), since):
                    version = item[RESULTS.sort]["S"].split("#", 1)[1]
                    number = {k: float(v["N"]) for k, v in item.items() if "N" in v}
                    s = Spend(
                        requests=int(number.get("requests", 0)),
                        usd=number.get("usd", 0.0),
                        worker_usd=number.get("worker_usd", 0.0),
                        aws_usd=number.get("aws_usd", 0.0),
                        worker_seconds=number.get("worker_seconds", 0.0),
                        aws={s: number.get(f"aws_{s}", 0.0) for s in AWS_SERVICES},
                    )
                    out.setdefault((tenant, model, version), Spend()).merge(s)
        return out

    def worker_time(self, services: Iterable[str], since: float) -> list[WorkerTime]:
        """Each worker's time per hour from the hour ``since`` falls in."""
        out = []
        for service in services:
            for item in self._query(_TIME.format(service=service), since):
                hour, worker = item[RESULTS.sort]["S"].split("#", 1)
                out.append(
                    WorkerTime(
                        service=service,
                        worker=worker,
                        hour=hour,
                        running_seconds=float(item.get("running_seconds", {"N": "0"})["N"]),
                        busy_seconds=float(item.get("busy_seconds", {"N": "0"})["N"]),
                        usd_per_hour=float(item.get("usd_per_hour", {"N": "0"})["N"]),
                    )
                )
        return out

    def _query(self, partition: str, since: float) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        request: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "#p = :p AND #s >= :s",
            "ExpressionAttributeNames": {"#p": RESULTS.partition, "#s": RESULTS.sort},
            "ExpressionAttributeValues": {":p": {"S": partition}, ":s": {"S": hour_of(since)}},
            "ConsistentRead": True,
        }
        while True:
            answer = self._ddb.query(**request)
            items.extend(answer.get("Items", []))
            if not answer.get("LastEvaluatedKey"):
                return items
            request["ExclusiveStartKey"] = answer["LastEvaluatedKey"]


def _number(value: float) -> str:
    """A DynamoDB number in plain decimals (to 1e-15: a request's cost is far above)."""
    text = f"{value:.15f}".rstrip("0").rstrip(".")
    return text if text not in ("", "-0") else "0"


# -- the report ------------------------------------------------------------------------

By = Literal["tenant", "model", "version"]


def cost_report(
    spend: Mapping[Group, Spend], times: Iterable[WorkerTime], by: By
) -> dict[str, Any]:
    """Spend per group (``by`` tenant, model, or model and version), and the workers'
    time: running, busy, billed to requests, and idle (running less busy: the
    platform's overhead, billed to no tenant), with what each cost."""
    groups: dict[str, Spend] = {}
    for (tenant, model, version), s in spend.items():
        key = {"tenant": tenant, "model": model, "version": f"{model}/{version}"}[by]
        groups.setdefault(key, Spend()).merge(s)
    total = Spend()
    for s in groups.values():
        total.merge(s)
    per_service: dict[str, dict[str, float]] = {}
    for t in times:
        row = per_service.setdefault(
            t.service, {"running_seconds": 0.0, "busy_seconds": 0.0, "running_usd": 0.0}
        )
        row["running_seconds"] += t.running_seconds
        row["busy_seconds"] += t.busy_seconds
        row["running_usd"] += t.running_seconds * t.usd_per_hour / 3600
    for row in per_service.values():
        row["idle_seconds"] = max(row["running_seconds"] - row["busy_seconds"], 0.0)
        share = row["idle_seconds"] / row["running_seconds"] if row["running_seconds"] else 0.0
        row["idle_usd"] = row["running_usd"] * share
    running = sum(r["running_seconds"] for r in per_service.values())
    busy = sum(r["busy_seconds"] for r in per_service.values())
    idle = sum(r["idle_seconds"] for r in per_service.values())
    return {
        "by": by,
        "groups": {k: groups[k].as_dict() for k in sorted(groups)},
        "total": total.as_dict(),
        "workers": {
            "running_seconds": running,
            "busy_seconds": busy,
            "billed_seconds": total.worker_seconds,
            "idle_seconds": idle,
            "running_usd": sum(r["running_usd"] for r in per_service.values()),
            "idle_usd": sum(r["idle_usd"] for r in per_service.values()),
            "services": {k: per_service[k] for k in sorted(per_service)},
        },
    }
