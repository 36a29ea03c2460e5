"""AWS calls per inference, counted where they are made: botocore event hooks on
the platform's own (cached) clients, while the real router app, worker and batch
splitter run in this process against a private emulator.

Every completed call is recorded with the part of the platform that made it
(router, worker, splitter: told apart by thread), its operation, its latency, and
for DynamoDB the capacity units it would consume (from the item sizes, by
DynamoDB's rounding rules). The sync paths also measure the router's CPU per
request: the CPU of its threads (the event loop that serves the callers, the
threads its routes run on, its result readers), less what the in-process ASGI
driver costs by itself. Paths measured: sync predict one at a time; async
predict plus one GET poll, one at a time and as a burst; a batch file through the
splitter and the worker; and an idle worker. Cache refreshes (API keys, registry
versions, routing documents) are per router instance and per minute, not per
inference, and are listed apart. Costs use public list prices, stated below.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.asgi import NoopApp, call, predict_body
from bench.common import TEXT_MODEL, median, sentences
from bench.emulator import REGION, Emulator
from bench.proc_cpu import thread_cpu
from switchyard.costs import ROUTER_MEMORY_MB, firehose_billed_bytes
from switchyard.prices import PRICE_SOURCES, PriceTable, first_price
from switchyard_local.moto_statements import parse_insert, parse_update

# us-east-1 list prices, USD: the first tiers of the core's price table (what the
# platform prices each request with, switchyard.costs), under the names used here.
_TABLE = PriceTable()
PRICES = {
    "sqs_per_million_requests": first_price(_TABLE.sqs_per_million_requests),
    "dynamodb_per_million_wru": first_price(_TABLE.dynamodb_per_million_wru),
    "dynamodb_per_million_rru": first_price(_TABLE.dynamodb_per_million_rru),
    "s3_put_per_thousand": first_price(_TABLE.s3_put_per_thousand),
    "s3_get_per_thousand": first_price(_TABLE.s3_get_per_thousand),
    "lambda_per_million_requests": first_price(_TABLE.lambda_per_million_requests),
    "lambda_per_gb_second_x86": first_price(_TABLE.lambda_per_gb_second),
    "apigateway_rest_per_million": first_price(_TABLE.apigateway_rest_per_million),
    "firehose_per_gb_ingested": first_price(_TABLE.firehose_per_gb),
}
REFRESH_OPS = {"Query", "Scan"}
REFRESH_SERVICES = {"appconfig"}
WORKER_THREADS = (
    "bench-worker",
    "intake",
    "visibility",
    "result-writer",
    "result-finisher",
    "metrics",
    "job-output",
    "stream-writer",
)


def actor_of(thread_name: str) -> str:
    if thread_name.startswith(WORKER_THREADS):
        return "worker"
    if thread_name.startswith("bench-splitter"):
        return "splitter"
    return "router"


def attribute_size(value: dict[str, Any]) -> int:
    """Bytes of one DynamoDB attribute value, by DynamoDB's item-size rules."""
    ((kind, v),) = value.items()
    if kind == "S":
        return len(v.encode())
    if kind == "N":
        return math.ceil(len(v.lstrip("-").replace(".", "").lstrip("0") or "0") / 2) + 1
    if kind == "B":
        return len(v)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "M":
        return 3 + sum(len(k.encode()) + attribute_size(x) for k, x in v.items())
    if kind == "L":
        return 3 + sum(1 + attribute_size(x) for x in v)
    if kind in ("SS", "NS"):
        return sum(len(x.encode()) for x in v)
    return 0


def item_size(item: dict[str, Any]) -> int:
    return sum(len(name.encode()) + attribute_size(value) for name, value in item.items())


def statement_item(statement: Any) -> dict[str, Any]:
    """The item a statement of a worker's BatchExecuteStatement writes (empty for a
    statement of another form)."""
    insert = parse_insert(statement)
    if insert is not None:
        return insert[1]
    update = parse_update(statement)
    return {**update.key, **update.sets} if update is not None else {}


def write_units(size: int) -> int:
    return max(1, math.ceil(size / 1024))


def read_units(size: int, consistent: bool) -> float:
    units = max(1, math.ceil(size / 4096))
    return float(units) if consistent else units / 2


@dataclass
class Call:
    actor: str
    service: str
    op: str
    ms: float
    table: str | None = None
    empty: bool = False
    wru: float = 0.0
    rru: float = 0.0
    records: int = 0
    billed_bytes: int = 0  # a PutRecordBatch's records, each rounded up to 5 KB
    consistent: bool = False  # a strongly consistent DynamoDB read
    keys: int = 1  # the items a BatchGetItem asked for

    @property
    def key(self) -> str:
        return f"{self.service}:{self.op}"


@dataclass
class CallLog:
    """Collects the calls of every hooked client."""

    calls: list[Call] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    local: threading.local = field(default_factory=threading.local)

    def attach(self, client: Any) -> None:
        client.meta.events.register("before-parameter-build", self._params)
        client.meta.events.register("before-call", self._before)
        client.meta.events.register("after-call", self._after)

    def _params(self, params: dict[str, Any], **_: Any) -> None:
        # The API parameters (TableName, Item, ...), before they are serialised.
        self.local.params = params

    def _before(self, **_: Any) -> None:
        self.local.started = time.perf_counter()

    def _after(self, model: Any, parsed: dict[str, Any], **_: Any) -> None:
        ms = (time.perf_counter() - getattr(self.local, "started", time.perf_counter())) * 1000
        params = getattr(self.local, "params", {}) or {}
        service = model.service_model.service_name
        entry = Call(actor_of(threading.current_thread().name), service, model.name, ms)
        if service == "dynamodb":
            entry.table = params.get("TableName")
            consistent = bool(params.get("ConsistentRead"))
            entry.consistent = consistent
            if model.name == "PutItem":
                entry.wru = write_units(item_size(params.get("Item", {})))
            elif model.name == "BatchWriteItem":
                entry.wru = sum(
                    write_units(item_size(r["PutRequest"]["Item"]))
                    for requests in params.get("RequestItems", {}).values()
                    for r in requests
                    if "PutRequest" in r
                )
            elif model.name == "BatchExecuteStatement":
                # INSERTs of whole items, their values as parameters, named in order
                # in the statement; one that finds its key taken is billed as well.
                # An UPDATE over a queued record is billed by the larger item, the
                # result it leaves (what it sets, and the key).
                entry.wru = sum(
                    write_units(item_size(statement_item(st)))
                    for st in params.get("Statements", [])
                )
            elif model.name in ("UpdateItem", "DeleteItem"):
                # The platform's are counters and marks on small items (a tenant's
                # slots and queued work, a job's chunks, a failed attempt): DynamoDB
                # bills the larger of the item before and after, under 1 KB here.
                entry.wru = 1.0
            elif model.name == "GetItem":
                entry.rru = read_units(item_size(parsed.get("Item", {}) or {}), consistent)
            elif model.name == "BatchGetItem":
                entry.keys = sum(
                    len(request.get("Keys", ()))
                    for request in params.get("RequestItems", {}).values()
                )
                entry.consistent = all(
                    r.get("ConsistentRead") for r in params.get("RequestItems", {}).values()
                )
                entry.rru = sum(
                    read_units(item_size(item), True)
                    for items in parsed.get("Responses", {}).values()
                    for item in items
                )
            elif model.name in ("Query", "Scan"):
                size = sum(item_size(i) for i in parsed.get("Items", []))
                entry.rru = read_units(size, consistent)
        if model.name == "ReceiveMessage":
            entry.empty = not parsed.get("Messages")
        if model.name == "PutRecordBatch":
            sent = params.get("Records", [])
            entry.records = len(sent)
            entry.billed_bytes = sum(firehose_billed_bytes(len(r["Data"])) for r in sent)
        with self.lock:
            self.calls.append(entry)

    def take(self) -> list[Call]:
        with self.lock:
            out, self.calls = self.calls, []
        return out


def is_refresh(c: Call) -> bool:
    """Cache refreshes: made per router instance every few seconds, not per request."""
    return c.op in REFRESH_OPS or c.service in REFRESH_SERVICES


def summarise(calls: list[Call], inferences: int, requests: int) -> dict[str, Any]:
    """Calls per inference by actor and operation, and what they cost per million."""
    per_path = [c for c in calls if not is_refresh(c)]
    by_actor: dict[str, Counter[str]] = defaultdict(Counter)
    for c in per_path:
        name = c.key + ("(empty)" if c.empty else "")
        by_actor[c.actor][name] += 1
    n = max(inferences, 1)
    sqs = sum(1 for c in per_path if c.service == "sqs")
    empty = sum(1 for c in per_path if c.empty)
    s3_put = sum(1 for c in per_path if c.service == "s3" and c.op in ("PutObject", "CopyObject"))
    s3_get = sum(1 for c in per_path if c.service == "s3" and c.op not in ("PutObject",))
    wru = sum(c.wru for c in per_path)
    rru = sum(c.rru for c in per_path)
    other = Counter(c.key for c in per_path if c.service not in ("sqs", "dynamodb", "s3"))
    firehose_records = sum(c.records for c in per_path)
    firehose_billed = sum(c.billed_bytes for c in per_path)
    p = PRICES
    cost = {
        "sqs": sqs / n * p["sqs_per_million_requests"],
        "sqs_empty_receives_part": empty / n * p["sqs_per_million_requests"],
        "dynamodb_writes": wru / n * p["dynamodb_per_million_wru"],
        "dynamodb_reads": rru / n * p["dynamodb_per_million_rru"],
        "s3": s3_put / n * p["s3_put_per_thousand"] * 1000
        + s3_get / n * p["s3_get_per_thousand"] * 1000,
    }
    cost["firehose_prediction_log"] = (
        firehose_billed / n / 2**30 * p["firehose_per_gb_ingested"] * 1e6
    )
    cost["total"] = (
        cost["sqs"]
        + cost["dynamodb_writes"]
        + cost["dynamodb_reads"]
        + cost["s3"]
        + cost["firehose_prediction_log"]
    )
    return {
        "requests": requests,
        "inferences": inferences,
        "per_inference": {
            actor: {op: round(count / n, 4) for op, count in sorted(ops.items())}
            for actor, ops in sorted(by_actor.items())
        },
        "sqs_requests_per_inference": round(sqs / n, 4),
        "sqs_empty_receives_per_inference": round(empty / n, 4),
        "dynamodb_wru_per_inference": round(wru / n, 4),
        "dynamodb_rru_per_inference": round(rru / n, 4),
        "s3_requests_per_inference": round((s3_put + s3_get) / n, 4),
        "other_services_per_inference": {k: round(v / n, 4) for k, v in other.items()},
        "firehose_records_per_inference": round(firehose_records / n, 4),
        "refresh_calls_seen": dict(Counter(c.key for c in calls if is_refresh(c))),
        "usd_per_million_inferences": {k: round(v, 4) for k, v in cost.items()},
    }


def router_memory_mb() -> int:
    """The router function's memory, as the CDK app deploys it."""
    return ROUTER_MEMORY_MB


class Harness:
    """The router app, a worker thread and the splitter, in-process, on the emulator."""

    def __init__(self, emu: Emulator, runtime: Any) -> None:
        from switchyard import aws
        from switchyard.settings import RouterSettings, SplitterSettings, WorkerSettings
        from switchyard.wiring import build_adapters
        from switchyard_router.app import create_app
        from switchyard_router.wiring import build_deps

        self.emu = emu
        provisioned = emu.provisioned
        # Routing documents come from the AppConfig extension in Lambda, which polls
        # AppConfig on its own; here there is none, and the newest version answers.
        self.settings = RouterSettings(**provisioned.router_values(None))
        self.splitter = build_adapters(SplitterSettings(**provisioned.splitter_values(None)))
        self.worker_settings = WorkerSettings(**provisioned.worker_values(TEXT_MODEL))
        self.tenant, self.api_key = next(iter(emu.api_keys.items()))
        self.api_key_id = provisioned.api_key_ids[self.tenant]
        self._register()
        self.app = create_app(build_deps(self.settings))
        self.worker = self._worker(runtime)
        self.log = CallLog()
        for service in ("sqs", "dynamodb", "s3", "apigateway", "appconfig", "firehose"):
            self.log.attach(aws.client(service, REGION, emu.url))
        self.worker.preload()
        self.thread = threading.Thread(target=self.worker.run, name="bench-worker", daemon=True)
        self.thread.start()
        self.ddb = emu.client("dynamodb")

    def _register(self) -> None:
        from harness.fakes import version_record

        self.splitter.registry.register(version_record(TEXT_MODEL))

    def _worker(self, runtime: Any) -> Any:
        from switchyard.wiring import build_adapters
        from switchyard_worker.worker import Worker

        s = self.worker_settings
        adapters = build_adapters(s)
        lanes = adapters.queues[TEXT_MODEL]
        return Worker(
            model=TEXT_MODEL,
            worker_id="bench-worker",
            realtime=lanes.realtime,
            batch=lanes.batch,
            registry=adapters.registry,
            results=adapters.results,
            cache=adapters.cache,
            payloads=adapters.payloads,
            load_runtime=lambda _record: runtime,
            visibility_timeout=s.visibility_timeout_seconds,
            poll_wait_seconds=s.poll_wait_seconds,
            prediction_log=adapters.prediction_log(s.prediction_log_stream),
        )

    def close(self) -> None:
        self.worker.stop()
        self.thread.join(15)

    # -- requests ------------------------------------------------------------------

    def predict(
        self, text: str, is_async: bool = False, answer_headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, Any]]:
        """One predict; the answer's headers go into ``answer_headers`` if given."""
        return asyncio_run(self.send(text, is_async, answer_headers))

    async def send(
        self, text: str, is_async: bool = False, answer_headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, Any]]:
        """One predict, on the running event loop (as a server's loop serves many)."""
        status, body = await call(
            self.app,
            "POST",
            f"/v1/models/{TEXT_MODEL}/predict",
            {"x-api-key": self.api_key, "x-deadline-ms": "10000"},
            predict_body([text]),
            "async=true" if is_async else "",
            self.api_key_id,
            response_headers=answer_headers,
        )
        return status, json.loads(body)

    def poll(self, request_id: str) -> tuple[int, dict[str, Any]]:
        status, body = asyncio_run(
            call(
                self.app,
                "GET",
                f"/v1/requests/{request_id}",
                {"x-api-key": self.api_key},
                api_key_id=self.api_key_id,
            )
        )
        return status, json.loads(body)

    def wait_done(self, request_ids: list[str], tenant: str, limit_s: float = 120) -> None:
        """Waits (with the bench's own, uncounted client) until every result is final."""
        from switchyard.tables import RESULTS

        pending = set(request_ids)
        deadline = time.monotonic() + limit_s
        while pending and time.monotonic() < deadline:
            for rid in list(pending):
                item = self.ddb.get_item(
                    TableName=self.settings.results_table,
                    Key={RESULTS.partition: {"S": tenant}, RESULTS.sort: {"S": rid}},
                    ConsistentRead=True,
                ).get("Item")
                if item and item.get("status", {}).get("S") in ("done", "error"):
                    pending.discard(rid)
            if pending:
                time.sleep(0.05)
        if pending:
            raise TimeoutError(f"{len(pending)} results not done")


def asyncio_run(coro: Any) -> Any:
    return asyncio.run(coro)


def result_polls_per_request(calls: list[Call], n: int) -> float:
    """The router's looks for results per request: the keys of its consistent reads
    of the results table (the result cache's lookup is not one), one per GetItem and
    as many as a BatchGetItem asked for."""
    return round(sum(c.keys for c in _result_reads(calls)) / n, 2)


def _result_reads(calls: list[Call]) -> list[Call]:
    return [
        c
        for c in calls
        if c.actor == "router" and c.op in ("GetItem", "BatchGetItem") and c.consistent
    ]


def router_cpu(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]) -> float:
    """The CPU the router's threads spent between two readings; a thread started
    between them counts from zero. The threads must outlive the second reading: the
    callers are served by one event loop, whose worker threads live as long as it."""
    return sum(
        cpu - before.get(ident, (name, 0.0))[1]
        for ident, (name, cpu) in after.items()
        if actor_of(name) == "router"
    )


@dataclass
class LoadRun:
    """What a closed-loop run measured, after its warm-up."""

    walls_ms: list[float]
    calls: list[Call]
    rising: list[Call]  # the warm-up's calls
    router_cpu_s: float  # less the driver's


def closed_loop(h: Harness, texts: list[str], callers: int, each: int, warm: int) -> LoadRun:
    """Sync predicts from ``callers`` closed-loop callers on one event loop, as a
    server's loop serves its connections: each sends ``warm`` requests (all finish
    them before any goes on), then ``each`` measured ones, one text each. The
    router's CPU is its threads' less what the same loop and driver cost by
    themselves with an app that does nothing (``NoopApp``)."""

    async def phase(app_send: Any, first: int, count: int) -> list[float]:
        async def caller(c: int) -> list[float]:
            walls = []
            for i in range(first, first + count):
                start = time.perf_counter()
                status, _ = await app_send(texts[c * (warm + each) + i])
                walls.append((time.perf_counter() - start) * 1000)
                assert status == 200, status
            return walls

        done = await asyncio.gather(*(caller(c) for c in range(callers)))
        return [w for walls in done for w in walls]

    async def run() -> LoadRun:
        await phase(h.send, 0, warm)
        rising = h.log.take()
        before = thread_cpu()
        walls = await phase(h.send, warm, each)
        after = thread_cpu()  # the loop's worker threads still alive
        calls = h.log.take()
        driver = time.thread_time()
        await phase(_noop_send, warm, each)
        driver = time.thread_time() - driver
        return LoadRun(walls, calls, rising, max(router_cpu(before, after) - driver, 0.0))

    return asyncio_run(run())


async def _noop_send(text: str) -> tuple[int, dict[str, Any]]:
    status, _ = await call(NoopApp(), "POST", "/", {}, predict_body([text]))
    return status, {}


def sync_figures(run: LoadRun, n: int) -> dict[str, Any]:
    """What every sync path reports: calls and their cost, wall time, the router's
    looks, reads and calls, and its CPU, per request."""
    out = summarise(run.calls, n, n)
    out["router_wall_ms_mean"] = round(sum(run.walls_ms) / len(run.walls_ms), 2)
    out["result_polls_per_request"] = result_polls_per_request(run.calls, n)
    out["result_reads_per_request"] = round(len(_result_reads(run.calls)) / n, 2)
    out["router_calls_per_request"] = round(sum(out["per_inference"].get("router", {}).values()), 2)
    out["router_cpu_ms_per_request"] = round(1000 * run.router_cpu_s / n, 3)
    return out


def scenario_sync(h: Harness, texts: list[str], n: int) -> dict[str, Any]:
    """Sync predicts one at a time (one caller)."""
    texts = [f"{texts[k % len(texts)]} (one caller, {k})" for k in range(n + 2)]
    run = closed_loop(h, texts, 1, n, 2)
    out = sync_figures(run, n)
    writes = [c.ms for c in run.calls if c.actor == "worker" and c.op == "PutItem"]
    out["result_write_ms_p50"] = round(median(writes), 2) if writes else None
    return out


def scenario_sync_at_load(
    h: Harness, texts: list[str], callers: int, each: int, warm: int = 2
) -> dict[str, Any]:
    """Sync predicts of one sentence from ``callers`` closed-loop callers at once, each
    sending ``each`` in turn: the calls a request costs when batches form, so that the
    worker's per-batch calls (receive, status read, results insert, delete, prediction log) are
    shared, as they are at load. Each caller first sends ``warm`` requests, counted
    apart: while load rises from one request at a time, answers come later than the
    router has seen them come, and it looks for them more often."""
    n_sent = callers * (warm + each)  # each text once: a repeat would be a cache hit
    texts = [f"{texts[k % len(texts)]} (at load, {k})" for k in range(n_sent)]
    run = closed_loop(h, texts, callers, each, warm)
    n = callers * each
    out = sync_figures(run, n)
    out["callers"] = callers
    out["rising_load_polls_per_request"] = result_polls_per_request(run.rising, callers * warm)
    receives = [
        c for c in run.calls if c.actor == "worker" and c.op == "ReceiveMessage" and not c.empty
    ]
    out["messages_per_receive"] = round(n / len(receives), 2) if receives else None
    return out


def scenario_repeats(h: Harness, texts: list[str], n: int, distinct: int) -> dict[str, Any]:
    """Sync predicts of one sentence drawn from ``distinct`` sentences with a Zipf law
    (s = 1.1, seeded), one at a time, against the result cache: the hit rate, the
    router's wall time of a hit and of a miss, the router's AWS calls per hit, and the
    calls and cost per request over the whole mix."""
    import random

    pool = [f"{t} (repeated workload)" for t in texts[:distinct]]  # not cached before
    weights = [1 / (rank + 1) ** 1.1 for rank in range(distinct)]
    draw = random.Random(13).choices(pool, weights=weights, k=n)
    h.log.take()
    walls: dict[bool, list[float]] = {True: [], False: []}
    calls: list[Call] = []
    hit_router_calls: list[Call] = []
    for text in draw:
        headers: dict[str, str] = {}
        start = time.perf_counter()
        status, _ = h.predict(text, answer_headers=headers)
        wall = (time.perf_counter() - start) * 1000
        assert status == 200, status
        hit = headers.get("x-cache") == "hit"
        walls[hit].append(wall)
        mine = h.log.take()
        calls.extend(mine)
        if hit:
            hit_router_calls.extend(c for c in mine if c.actor == "router")
    hits = len(walls[True])
    out = summarise(calls, n, n)
    per_hit = summarise(hit_router_calls, max(hits, 1), max(hits, 1))
    out.update(
        {
            "distinct_inputs": distinct,
            "hit_rate": round(hits / n, 3),
            # The router caches inputs from their second sight: the first two of each
            # sentence are answered by the worker.
            "best_possible_hit_rate": round(
                1 - sum(min(draw.count(t), 2) for t in set(draw)) / n, 3
            ),
            "hit_router_ms_p50": round(median(walls[True]), 2) if hits else None,
            "miss_router_ms_p50": round(median(walls[False]), 2) if walls[False] else None,
            "router_calls_per_hit": per_hit["per_inference"].get("router", {}),
            "usd_per_million_hits": per_hit["usd_per_million_inferences"]["total"],
        }
    )
    return out


def scenario_async(h: Harness, texts: list[str], n: int, burst: bool) -> dict[str, Any]:
    # Sentences no other path sent: no answer comes from the result cache here.
    texts = [f"{t} (async{' burst' if burst else ''})" for t in texts]
    h.log.take()
    ids: list[str] = []
    walls = []
    for i in range(n):
        start = time.perf_counter()
        status, body = h.predict(texts[i % len(texts)], is_async=True)
        walls.append((time.perf_counter() - start) * 1000)
        assert status == 202, status
        ids.append(body["request_id"])
        if not burst:
            h.wait_done([body["request_id"]], h.tenant)
            _poll_once(h, body["request_id"])
    if burst:
        h.wait_done(ids, h.tenant)
        for rid in ids:
            _poll_once(h, rid)
    out = summarise(h.log.take(), n, n)
    out["router_wall_ms_mean"] = round(sum(walls) / len(walls), 2)
    return out


def _poll_once(h: Harness, request_id: str) -> None:
    status, body = h.poll(request_id)
    assert status == 200 and body["status"] == "done", (status, body.get("status"))


def scenario_batch(h: Harness, texts: list[str], lines: int) -> dict[str, Any]:
    from switchyard.jobs import chunk_request_id
    from switchyard_batch.splitter import handle_message, splitter_of

    bucket = h.emu.provisioned.names.batch_drop_bucket
    key = f"{h.tenant}/{TEXT_MODEL}/bench-{int(time.time())}.jsonl"
    body = "\n".join(json.dumps(texts[i % len(texts)]) for i in range(lines)).encode()
    h.emu.client("s3").put_object(Bucket=bucket, Key=key, Body=body)  # the tenant's upload
    h.log.take()
    event = {"Records": [{"s3": {"bucket": {"name": bucket}, "object": {"key": key}}}]}
    jobs: list[Any] = []
    started = time.perf_counter()
    splitter = threading.Thread(
        target=lambda: jobs.extend(handle_message(event, splitter_of(h.splitter), lambda: 900_000)),
        name="bench-splitter",
    )
    splitter.start()
    splitter.join(120)
    split_ms = (time.perf_counter() - started) * 1000
    request_ids = (
        [chunk_request_id(jobs[0].job_id, i) for i in range(jobs[0].chunks or 0)] if jobs else []
    )
    h.wait_done(request_ids, h.tenant, limit_s=300)
    out = summarise(h.log.take(), lines, len(request_ids))
    out["splitter_ms"] = round(split_ms, 1)
    out["chunks"] = len(request_ids)
    return out


def scenario_idle(h: Harness, seconds: float) -> dict[str, Any]:
    h.log.take()
    time.sleep(seconds)
    calls = h.log.take()
    per_s = Counter(c.key + ("(empty)" if c.empty else "") for c in calls)
    sqs_per_hour = sum(1 for c in calls if c.service == "sqs") / seconds * 3600
    return {
        "seconds": seconds,
        "calls_per_second": {k: round(v / seconds, 3) for k, v in per_s.items()},
        "sqs_requests_per_worker_hour": round(sqs_per_hour),
        "usd_per_worker_month": round(
            sqs_per_hour * 24 * 30 / 1e6 * PRICES["sqs_per_million_requests"], 4
        ),
    }


def lambda_and_gateway(results: dict[str, Any], memory_mb: int) -> dict[str, Any]:
    """The router function and API Gateway per million inferences: priced apart,
    since they are billed per invocation and per second of the function, which for a
    sync request includes the time it waits for the worker."""
    gb = memory_mb / 1024
    p = PRICES
    out = {}
    for name, invocations, seconds in (
        ("sync", 1, results["sync"]["router_wall_ms_mean"] / 1000),
        (
            "async_one_at_a_time",
            2,
            2 * results["async_one_at_a_time"]["router_wall_ms_mean"] / 1000,
        ),
    ):
        out[name] = {
            "lambda_invocations_per_inference": invocations,
            "lambda_gb_seconds_per_inference": round(gb * seconds, 5),
            "usd_lambda": round(
                invocations * p["lambda_per_million_requests"]
                + gb * seconds * p["lambda_per_gb_second_x86"] * 1e6,
                3,
            ),
            "usd_api_gateway": round(invocations * p["apigateway_rest_per_million"], 3),
        }
    batch = results["batch"]
    out["batch"] = {
        "lambda_invocations_per_inference": round(1 / batch["inferences"], 5),
        "usd_lambda": round(
            (
                p["lambda_per_million_requests"]
                + gb * batch["splitter_ms"] / 1000 * p["lambda_per_gb_second_x86"] * 1e6
            )
            / batch["inferences"],
            4,
        ),
        "usd_api_gateway": 0.0,
    }
    return {"router_memory_mb": memory_mb, "paths": out}


def run(emu: Emulator, runtime: Any, quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
    from bench.common import quiet_output

    texts = sentences()
    n_sync, n_burst, lines = (8, 32, 128) if quick else (30, 64, 512)
    with quiet_output():
        h = Harness(emu, runtime)
        try:
            for i in range(3):  # warm-up: caches, connections, the model (texts the
                h.predict(texts[-1 - i])  # paths below do not send: no cache hits there)
            log("  sync")
            results = {"sync": scenario_sync(h, texts, n_sync)}
            log("  sync, 16 callers at once")
            results["sync_at_load"] = scenario_sync_at_load(h, texts, 16, 2 if quick else 24)
            log("  async, one at a time")
            results["async_one_at_a_time"] = scenario_async(h, texts, n_sync, burst=False)
            log("  async, burst")
            results["async_burst"] = scenario_async(h, texts, n_burst, burst=True)
            log("  batch file")
            results["batch"] = scenario_batch(h, texts, lines)
            log("  repeated inputs, result cache")
            results["repeats"] = scenario_repeats(h, texts, 80 if quick else 300, 40)
            log("  idle worker")
            results["idle_worker"] = scenario_idle(h, 3.0 if quick else 6.0)
        finally:
            h.close()
    return {
        "prices_usd": PRICES,
        "price_sources": PRICE_SOURCES,
        "region": REGION,
        "paths": results,
        "lambda_api_gateway": lambda_and_gateway(results, router_memory_mb()),
        "cache_refresh": {
            "routing_seconds": h.settings.routing_cache_seconds,
            "registry_versions_seconds": 10.0,
        },
        "result_write_ms": results["sync"]["result_write_ms_p50"],
    }
