"""A request's cost and the platform's spend (``switchyard.costs``, the worker's
``CostKeeper``): the rates from the manifest's prices, the AWS requests of each
path counted by hand, a batch's worker time shared by inputs, and the identity
that the requests' worker shares plus the idle time are the workers' running time.
The ledger here is an in-memory fake; tests/e2e/test_costs.py runs the real one."""

from __future__ import annotations

import dataclasses
import math
import random
import time
from typing import Any

import pytest
from pydantic import ValidationError

from harness.fakes import EchoRuntime, FakeCostLedger, FakeQueue, FakeResults, worker_over_fakes
from switchyard.costs import (
    CostRates,
    PathFacts,
    cost_report,
    log_billed_bytes,
    path_usage,
    price_answers,
    read_units,
    request_cost,
    spend_by_group,
    usage_key,
    write_units,
)
from switchyard.manifest import Manifest
from switchyard.prices import PriceTable
from switchyard.results import AsStored, as_stored
from switchyard.schemas import JobChunk, QueueMessage, ResultRecord
from switchyard_worker.costing import CostKeeper
from tests.unit.test_worker import run_until_idle, send

RATES = CostRates.of(PriceTable(), "c7i.xlarge")


def message(request_id: str, tenant: str = "acme", n: int = 1, **more: Any) -> QueueMessage:
    now = time.time()
    return QueueMessage(
        request_id=request_id,
        tenant=tenant,
        model="m",
        version="v1",
        inputs=["x"] * n,
        n_inputs=n,
        enqueued_at=now - 0.2,
        expires_at=now + 60,
        **more,
    )


def answer(m: QueueMessage, worker_ms: float, outputs: list[Any] | None = None) -> ResultRecord:
    return ResultRecord(
        request_id=m.request_id,
        tenant=m.tenant,
        model=m.model,
        version=m.version,
        status="done",
        outputs=outputs if outputs is not None else [[0.5] * 4] * m.n_inputs,
        timings={"worker_ms": worker_ms},
        created_at=m.enqueued_at,
        completed_at=m.enqueued_at + 0.2,
        expires_at=int(time.time()) + 60,
    )


def test_rates_are_the_price_tables_first_tiers() -> None:
    # GIVEN the default price table WHEN a service's rates are read
    # THEN each is one unit at the first tier's price
    assert RATES.instance_per_hour == 0.1785
    assert RATES.apigateway_per_call == pytest.approx(3.50 / 1e6)
    assert RATES.sqs_per_call == pytest.approx(0.40 / 1e6)
    assert RATES.lambda_per_gb_second == pytest.approx(0.0000166667)
    assert RATES.s3_put_per_call == pytest.approx(0.005 / 1000)
    assert RATES.worker_usd(3600) == pytest.approx(0.1785)


def test_an_instance_type_without_a_price_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"no price for 'x9.huge'"):
        CostRates.of(PriceTable(), "x9.huge")


def test_the_manifest_prices_override_and_add(manifest: Manifest) -> None:
    # GIVEN the shipped manifest with a [prices] table that sets one instance type's
    # price and adds an AWS price
    data = manifest.model_dump()
    data["prices"] = {"instances_per_hour": {"c7i.xlarge": 0.5}, "sqs_per_million_requests": 1.0}
    changed = Manifest.model_validate(data)
    # THEN a model's own service and a pool are priced at the first instance type
    # of the model or the pool, from the manifest's table
    own = next(m for m, spec in changed.models.items() if spec.pool is None)
    rates = changed.cost_rates(own)
    assert rates.instance_type == changed.models[own].instance_types[0]
    pool = next(iter(changed.pools))
    assert changed.cost_rates(pool).instance_type == changed.pools[pool].instance_types[0]
    cpu = [s for s in changed.services() if changed.cost_rates(s).instance_type == "c7i.xlarge"]
    assert cpu and all(changed.cost_rates(s).instance_per_hour == 0.5 for s in cpu)
    assert rates.sqs_per_call == pytest.approx(1.0 / 1e6)


def test_a_manifest_whose_service_has_no_price_fails_naming_it(manifest: Manifest) -> None:
    data = manifest.model_dump()
    pool = next(iter(data["pools"]))
    data["pools"][pool]["instance_types"] = ["x9.huge"]
    with pytest.raises(ValueError, match=rf"{pool}: prices.instances_per_hour: no price"):
        Manifest.model_validate(data)


def test_a_sync_paths_aws_requests_counted() -> None:
    # GIVEN a sync request answered in a batch of 16 messages, its result 1.5 KB
    facts = PathFacts(
        path="sync", batch_messages=16, result_item_bytes=1500, router_wait_seconds=0.5
    )
    u = path_usage(facts, router_memory_mb=1024, router_seconds=0.03)
    # THEN one API call and invocation, billed for the wait; a send, and its share
    # of two receives and two delete batches; two result looks and a status read;
    # one result write of 2 KB; a sixteenth of the Firehose record that logs the
    # batch (16 lines of 550 bytes, billed as two 5 KB units)
    assert u.apigateway_calls == u.lambda_calls == 1
    assert u.lambda_gb_seconds == pytest.approx(0.53)
    assert u.sqs_calls == pytest.approx(1 + 2 * 2 / 16)
    assert u.dynamodb_rru == 1 + 2
    assert u.dynamodb_wru == 2
    assert u.s3_puts == u.s3_gets == 0
    assert u.firehose_bytes == 2 * 5 * 1024 / 16


def test_a_batch_logged_in_one_record_is_billed_by_its_bytes_not_per_line() -> None:
    # A request alone: one record, billed as 5 KB
    assert log_billed_bytes(1) == 5 * 1024
    # 64 lines of 550 bytes (35,200): seven 5 KB units in one record
    assert log_billed_bytes(64) == 7 * 5 * 1024
    # 501 lines of 100 bytes: two records (500 lines at most each), each rounded up
    # on its own: 50,000 bytes in ten units, and one line in one
    assert log_billed_bytes(501, line_bytes=100) == (10 + 1) * 5 * 1024


def test_an_async_path_adds_its_queued_record_and_one_poll() -> None:
    u = path_usage(PathFacts(path="async"), router_memory_mb=2048, router_seconds=0.03)
    assert u.apigateway_calls == u.lambda_calls == 2
    assert u.lambda_gb_seconds == pytest.approx(2 * 2 * 0.03)
    assert u.dynamodb_wru == 1 + 1
    assert u.dynamodb_rru == 1 + 1


def test_a_job_chunk_has_no_api_call_and_a_transaction_write() -> None:
    u = path_usage(PathFacts(path="job", claim_checked=True), 1024, 0.03)
    assert u.apigateway_calls == u.lambda_calls == u.lambda_gb_seconds == 0
    assert u.dynamodb_wru == 2 * 1 + 2
    assert u.s3_puts == u.s3_gets == 1  # the claim check: written, read


def test_a_request_cost_is_its_worker_share_and_its_aws_requests() -> None:
    cost = request_cost(2.0, PathFacts(path="sync"), RATES)
    assert cost.worker_usd == pytest.approx(2.0 * 0.1785 / 3600)
    assert cost.aws_usd == pytest.approx(sum(cost.aws.values()))
    assert cost.usd == pytest.approx(cost.worker_usd + cost.aws_usd)
    assert set(cost.aws) == {"apigateway", "lambda", "sqs", "dynamodb", "s3", "firehose"}
    assert cost.aws["apigateway"] == pytest.approx(3.5e-6)


def test_a_batchs_answers_are_priced_by_their_shares() -> None:
    # GIVEN a batch of three messages (1, 2 and 1 inputs) that ran 40 ms in the
    # model, each with its share by inputs, one of them sync
    ms = [message("a"), message("b", n=2, respond_by=time.time() + 5), message("c", "globex")]
    answers = [(m, answer(m, 40 * m.n_inputs / 4)) for m in ms]
    # WHEN they are priced
    price_answers(answers, RATES, inline_bytes=400_000)
    costs = [r.cost for _, r in answers]
    assert all(c is not None for c in costs)
    # THEN their worker seconds add up to the batch's, and only the sync one waited
    assert sum(c.worker_seconds for c in costs if c) == pytest.approx(0.040)
    assert costs[1] and costs[0] and costs[1].aws["lambda"] > costs[0].aws["lambda"] / 2
    assert costs[0] and costs[0].aws["s3"] == 0


def test_paths_with_one_usage_key_make_the_same_requests() -> None:
    # GIVEN paths of every kind, and each again with what its key leaves out changed:
    # its item's size within the same billed units, and a wait it is not billed for
    draw = random.Random(11)
    for _ in range(500):
        path = draw.choice(["sync", "async", "job"])
        size = draw.choice([1, 700, 1024, 1025, 4096, 4097, 9000])
        facts = PathFacts(
            path=path,
            batch_messages=draw.randint(1, 64),
            claim_checked=draw.random() < 0.3,
            result_item_bytes=size,
            outputs_put_share=draw.choice([0.0, 0.5, 1.0]),
            router_wait_seconds=draw.uniform(0, 2),
            sync_slot=path == "sync" and draw.random() < 0.5,
            queued_counted=draw.random() < 0.5,
            queued_give_back_share=draw.choice([1.0, 1 / 3]),
        )
        units = math.ceil(size / 1024) * 1024
        same = dataclasses.replace(
            facts,
            result_item_bytes=draw.randint(units - 1023, units),
            router_wait_seconds=facts.router_wait_seconds + (0 if path == "sync" else 5),
        )
        # WHEN each is keyed and its requests counted
        # THEN the two keys are one, and so are the two paths' requests and prices
        assert usage_key(same) == usage_key(facts)
        # AND its units are those the item is billed in
        assert usage_key(facts)[3:5] == (write_units(size), read_units(size))
        assert path_usage(same, 1769, 0.03) == path_usage(facts, 1769, 0.03)
        assert request_cost(1.0, same, RATES) == request_cost(1.0, facts, RATES)
        # AND a sync request's wait is in its key: it is billed for it
        if path == "sync":
            longer = dataclasses.replace(facts, router_wait_seconds=facts.router_wait_seconds + 1)
            assert usage_key(longer) != usage_key(facts)


def test_a_batchs_answers_on_one_path_cost_what_each_costs_alone() -> None:
    # GIVEN a batch of four async answers of one tenant, two of them with one share
    # of the batch's time
    ms = [message(f"r{i}") for i in range(4)]
    shares = [10.0, 20.0, 30.0, 20.0]
    answers = [(m, answer(m, ms_)) for m, ms_ in zip(ms, shares, strict=True)]
    # WHEN they are priced
    price_answers(answers, RATES, inline_bytes=400_000)
    costs = [r.cost for _, r in answers]
    # THEN each costs what its path and worker share cost priced alone
    alone = PathFacts(path="async", batch_messages=4, result_item_bytes=1)
    assert costs == [request_cost(share / 1000, alone, RATES) for share in shares]
    # AND the two that cost the same hold one cost, which none can change
    assert costs[1] is costs[3] and costs[0] is not costs[1]
    with pytest.raises(ValidationError):
        costs[1].usd = 0.0  # type: ignore[union-attr]


def test_paths_kept_priced_between_batches_price_the_next_as_afresh() -> None:
    # GIVEN a worker's paths kept priced between batches, and two batches of answers
    # on paths of every kind: the first priced with them kept, each then priced again
    # afresh
    def batch(tag: str) -> list[tuple[Any, Any]]:
        ms = [
            message(f"{tag}-s", respond_by=time.time() + 5),
            message(f"{tag}-a", queued_counted=True),
            message(f"{tag}-g", "globex"),
            message(f"{tag}-j", lane="batch", job=JobChunk(job_id="j", index=0,
                                                          first_line=1, last_line=1)),
        ]  # fmt: skip
        return [(m, answer(m, 5.0 * (i + 1))) for i, m in enumerate(ms)]

    kept: dict = {}
    first, second = batch("one"), batch("two")
    price_answers(first, RATES, inline_bytes=400_000, priced=kept)
    paths = dict(kept)
    # WHEN the second batch is priced with the paths the first left
    price_answers(second, RATES, inline_bytes=400_000, priced=kept)
    # THEN it priced no path the first had not, and each answer costs what it costs
    # priced afresh
    assert kept == paths and len(paths) == 4
    with_kept = [r.cost for _, r in second]
    price_answers(second, RATES, inline_bytes=400_000)
    assert with_kept == [r.cost for _, r in second]


def test_admission_writes_are_priced_a_sync_slot_and_a_shared_give_back() -> None:
    # GIVEN one batch: a sync caller, its shadow copy, three async requests of acme
    # counted in its queued work (one lease end) and one of globex, and one uncounted
    ms = [
        message("s", respond_by=time.time() + 5),
        message("s-shadow", respond_by=time.time() + 5, shadow_of="s"),
        *(message(f"a{i}", queued_counted=True) for i in range(3)),
        message("g", "globex", queued_counted=True),
        message("u"),
    ]
    answers = [(m, answer(m, 1.0)) for m in ms]
    # WHEN they are priced
    price_answers(answers, RATES, inline_bytes=400_000)
    writes = [r.cost.aws["dynamodb"] for _, r in answers if r.cost]
    unit = RATES.dynamodb_per_wru
    # THEN the sync caller pays its slot taken and given back, its shadow copy does
    # not; a counted request pays the router's count and its share of the worker's
    # give-back (acme's three share one write, globex's is its own); the uncounted
    # request pays neither
    assert writes[0] - writes[1] == pytest.approx(2 * unit)
    assert writes[2] - writes[6] == pytest.approx((1 + 1 / 3) * unit)
    assert writes[5] - writes[6] == pytest.approx(2 * unit)


def test_outputs_too_large_to_hold_inline_share_one_put_per_tenant() -> None:
    big = [["y" * 300]]
    ms = [message("a"), message("b"), message("c", "globex")]
    answers = [(m, answer(m, 1.0, big)) for m in ms]
    price_answers(answers, RATES, inline_bytes=100)
    s3 = [r.cost.aws["s3"] for _, r in answers if r.cost]
    put, get = RATES.s3_put_per_call, RATES.s3_get_per_call
    assert s3 == pytest.approx([put / 2 + get, put / 2 + get, put + get])


def test_a_job_chunk_is_priced_as_a_job() -> None:
    chunk = JobChunk(job_id="j", index=0, first_line=1, last_line=1)
    m = message("j#0", lane="batch", job=chunk)
    answers = [(m, answer(m, 1.0))]
    price_answers(answers, RATES, inline_bytes=400_000)
    cost = answers[0][1].cost
    assert cost is not None and cost.aws["apigateway"] == 0


def test_spend_adds_up_per_group_and_the_report_groups_it() -> None:
    ms = [message("a"), message("b"), message("c", "globex")]
    records = [answer(m, 10.0) for m in ms]
    for r in records:
        r.cost = request_cost(0.01, PathFacts(path="async"), RATES)
    groups = spend_by_group(records)
    assert groups[("acme", "m", "v1")].requests == 2
    report = cost_report(groups, [], "tenant")
    assert set(report["groups"]) == {"acme", "globex"}
    assert report["groups"]["acme"]["usd"] == pytest.approx(2 * records[0].cost.usd)  # type: ignore[union-attr]
    by_version = cost_report(groups, [], "version")
    assert set(by_version["groups"]) == {"m/v1"}


def test_records_holding_one_cost_are_each_counted_in_their_groups_spend() -> None:
    # GIVEN a batch's records as the worker prices them: three of acme's and one of
    # globex's holding one cost, one of acme's another
    shared = request_cost(0.01, PathFacts(path="async"), RATES)
    other = request_cost(0.03, PathFacts(path="sync"), RATES)
    ms = [message("a"), message("b"), message("c"), message("g", "globex"), message("d")]
    records = [answer(m, 10.0) for m in ms]
    for r, cost in zip(records, [shared, shared, shared, shared, other], strict=True):
        r.cost = cost
    # WHEN their spend is added up
    groups = spend_by_group(records)
    # THEN each group counts each of its records once, whichever cost it holds
    acme, globex = groups[("acme", "m", "v1")], groups[("globex", "m", "v1")]
    assert (acme.requests, globex.requests) == (4, 1)
    assert acme.usd == pytest.approx(3 * shared.usd + other.usd)
    assert acme.worker_seconds == pytest.approx(0.06)
    assert acme.aws["lambda"] == pytest.approx(3 * shared.aws["lambda"] + other.aws["lambda"])
    assert globex.usd == pytest.approx(shared.usd)


def test_worker_shares_plus_idle_time_are_the_running_time() -> None:
    # GIVEN a worker's keeper that meters batches as the loops and finisher do
    ledger = FakeCostLedger()
    keeper = CostKeeper(
        rates=RATES,
        ledger=ledger,  # type: ignore[arg-type]
        service="m",
        worker_id="w1",
        inline_bytes=400_000,
        meter_seconds=60,
        emit=False,
    )
    # WHEN it runs three batches (sleeping as a model would) with idle time between
    for n, seconds in ((1, 0.02), (3, 0.05), (2, 0.03)):
        time.sleep(0.02)
        began = time.perf_counter()
        time.sleep(seconds)
        ran = time.perf_counter() - began
        keeper.ran(ran)
        ms = [message(f"r{n}-{i}", "acme" if i % 2 else "globex") for i in range(n)]
        answers = [(m, answer(m, ran * 1000 / n)) for m in ms]
        keeper.price(answers)
        keeper.spent([r for _, r in answers])
    keeper.write()
    # THEN the requests' worker shares plus the idle time are the running time
    report = cost_report(ledger.spend, ledger.times, "tenant")
    w = report["workers"]
    assert w["billed_seconds"] + w["idle_seconds"] == pytest.approx(w["running_seconds"], rel=0.05)
    assert w["billed_seconds"] == pytest.approx(w["busy_seconds"], rel=1e-9)
    assert 0 < w["idle_seconds"] < w["running_seconds"]
    assert report["total"]["requests"] == 6
    assert math.isclose(
        report["total"]["worker_usd"], RATES.worker_usd(w["billed_seconds"]), rel_tol=1e-9
    )


def test_a_ledger_outage_keeps_the_spend_for_the_next_write() -> None:
    class Down(FakeCostLedger):
        fail = True

        def add_spend(self, groups: Any, at: float) -> None:
            if self.fail:
                raise OSError("unreachable")
            super().add_spend(groups, at)

    ledger = Down()
    keeper = CostKeeper(
        rates=RATES,
        ledger=ledger,  # type: ignore[arg-type]
        service="m",
        worker_id="w1",
        inline_bytes=400_000,
        emit=False,
    )
    m = message("a")
    r = answer(m, 5.0)
    keeper.price([(m, r)])
    keeper.spent([r])
    keeper.write()
    assert ledger.spend == {}
    ledger.fail = False
    keeper.write()
    assert ledger.spend[("acme", "m", "v1")].requests == 1


def test_the_store_is_handed_the_outputs_the_pricing_worked_out(digits_v1) -> None:
    # GIVEN a worker that prices its answers, over a store that keeps what it is
    # handed with each batch
    handed: list[tuple[list[str], AsStored | None]] = []

    class Keeping(FakeResults):
        def complete_batch(self, records: Any, new: Any, outputs: Any = None) -> Any:
            handed.append(([r.request_id for r in records], outputs))
            return super().complete_batch(records, new, outputs)

    keeper = CostKeeper(
        rates=RATES, ledger=FakeCostLedger(), service="digits-cnn",  # type: ignore[arg-type]
        worker_id="w1", inline_bytes=20, emit=False,
    )  # fmt: skip
    realtime = FakeQueue("realtime")
    worker = worker_over_fakes(
        digits_v1, EchoRuntime(), realtime=realtime, results=Keeping(), costs=keeper
    )
    # WHEN three requests are answered together, one with outputs too large to
    # hold inline (its JSON over 20 bytes)
    for rid, rows in (("a", 1), ("b", 2), ("large", 3)):
        send(realtime, rid, inputs=[[1] * 64] * rows)
    run_until_idle(worker)
    # THEN the store was handed each record's outputs as the pricing worked them out
    # for its limit: the large one's JSON text for S3, the others held inline
    [(ids, outputs)] = handed
    assert ids == ["a", "b", "large"] and outputs is not None and outputs.limit == 20
    records = [worker.finisher._results.items[("acme", rid)] for rid in ids]
    assert outputs == as_stored(records, 20)
    assert [isinstance(form, bytes) for form in outputs.each] == [False, False, True]
    assert all(r.cost is not None for r in records)
