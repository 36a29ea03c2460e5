"""How a batch's prediction-log lines are packed into Firehose records and calls."""

from __future__ import annotations

import json
import random
import time

from switchyard.schemas import ResultRecord
from switchyard.telemetry import _calls, log_records, prediction_records


def _lines(packed: bytes) -> list[dict]:
    assert packed.endswith(b"\n")
    return [json.loads(line) for line in packed.decode().splitlines()]


def test_a_batch_of_predictions_is_one_record_of_one_line_each_in_order():
    # GIVEN a batch of 64 predictions' log records
    records = [{"request_id": f"r-{i}", "model": "digits-cnn"} for i in range(64)]
    # WHEN they are packed
    packed = log_records(records, most_lines=500, most_bytes=1_000 * 1024)
    # THEN they are one record holding one JSON line per prediction, in order
    assert len(packed) == 1
    assert _lines(packed[0]) == records


def test_records_hold_at_most_their_lines_and_bytes_and_a_long_line_is_alone():
    # GIVEN seven short lines and one longer than a record may be
    short = [{"request_id": f"r-{i}"} for i in range(7)]
    long = {"request_id": "r-long", "pad": "x" * 200}
    records = [*short[:3], long, *short[3:]]
    # WHEN they are packed three lines or 100 bytes to a record
    packed = log_records(records, most_lines=3, most_bytes=100)
    # THEN no record has more than three lines, none but the long line's is over
    # 100 bytes, and every line is there once, in order
    assert [len(_lines(p)) for p in packed] == [3, 1, 3, 1]
    assert all(len(p) <= 100 for p in packed if b"r-long" not in p)
    assert [line for p in packed for line in _lines(p)] == records


def test_records_go_in_calls_of_at_most_500_records_and_4_mib():
    # GIVEN 1,200 small records, then three of 1.5 MiB
    small = [b"x\n"] * 1_200
    big = [b"y" * (3 * 2**19)] * 3
    # WHEN they are grouped into PutRecordBatch calls
    calls = _calls(small + big)
    # THEN the small ones take three calls (500, 500, 200 with the first big one) and
    # no call is over 4 MiB; nothing is lost or reordered
    assert [len(c) for c in calls] == [500, 500, 202, 1]
    assert all(sum(len(d) for d in c) <= 4 * 2**20 for c in calls)
    assert [d for c in calls for d in c] == small + big


def test_a_line_is_utf8_json_and_text_in_it_never_breaks_the_line():
    # GIVEN a prediction whose classes hold a newline and a non-ASCII letter
    records = [{"request_id": "r-1", "outputs": ["café", "two\nlines"]}]
    # WHEN packed
    [packed] = log_records(records, most_lines=500, most_bytes=1_000 * 1024)
    # THEN it is one line of UTF-8 JSON, the newline escaped within it
    assert packed.count(b"\n") == 1
    assert "café".encode() in packed
    assert _lines(packed) == records


def _record(i: int, timings: dict[str, float]) -> ResultRecord:
    now = time.time()
    return ResultRecord(
        request_id=f"r-{i}", tenant="acme", model="digits-cnn", version="v1", status="done",
        outputs=[{"class": i % 10}], created_at=now, expires_at=int(now) + 60, timings=timings,
    )  # fmt: skip


def test_a_batchs_durations_are_each_records_own_to_three_decimals():
    # GIVEN a batch's results with durations of many sizes, halves of a thousandth
    # among them, a run of records whose timings have other names (one with no
    # duration at all, one with one) in the middle, and epoch times
    draw = random.Random(7)
    names = ("batch_wait_ms", "compute_ms", "queue_wait_ms", "worker_ms")
    timings = [
        {
            "received_at": time.time(),
            **{n: draw.uniform(0, 10 ** draw.randint(-4, 4)) for n in names},
        }
        for _ in range(40)
    ]
    timings[3].update(compute_ms=2.0005, worker_ms=0.0015, queue_wait_ms=-0.0)
    timings[20:23] = [
        {"completed_at": 1.0},
        {"compute_ms": 7.12345},
        {"worker_ms": 1.0, "a_ms": 2.5},
    ]
    # WHEN they are logged together
    logged = prediction_records([_record(i, t) for i, t in enumerate(timings)])
    # THEN each line's durations are its own, each rounded as round(x * 1000) / 1000,
    # and its epoch times are left out
    [packed] = log_records(logged, most_lines=500, most_bytes=1_000 * 1024)
    logged = _lines(packed)
    assert [line["timings"] for line in logged] == [
        {k: round(v * 1000) / 1000 for k, v in t.items() if k.endswith("_ms")} for t in timings
    ]
    assert [line["request_id"] for line in logged] == [f"r-{i}" for i in range(40)]


def test_each_line_holds_its_own_records_cost_written_once_for_those_sharing_one():
    # GIVEN a batch's results: two holding one cost (as the pricing makes them), one a
    # cost of its own, one none
    from switchyard.schemas import RequestCost

    now = time.time()
    shared = RequestCost(usd=3e-6, worker_usd=1e-6, aws_usd=2e-6, worker_seconds=0.01,
                         aws={"sqs": 2e-6})  # fmt: skip
    own = RequestCost(usd=5e-6, worker_usd=5e-6, aws_usd=0.0, worker_seconds=0.05,
                      instance_type="g5.xlarge")  # fmt: skip
    costs = [shared, shared, own, None]
    records = [
        ResultRecord(
            request_id=f"r-{i}", tenant="acme", model="m", version="v1", status="done",
            outputs=[i], created_at=now, completed_at=now, expires_at=int(now) + 60,
            cost=cost,
        )  # fmt: skip
        for i, cost in enumerate(costs)
    ]
    # WHEN their lines are written
    [packed] = log_records(prediction_records(records), most_lines=500, most_bytes=1 << 20)
    # THEN each line holds its record's cost as the record dumps it, or null
    lines = _lines(packed)
    assert [line["request_id"] for line in lines] == ["r-0", "r-1", "r-2", "r-3"]
    assert [line["cost"] for line in lines] == [
        json.loads(c.model_dump_json()) if c is not None else None for c in costs
    ]
