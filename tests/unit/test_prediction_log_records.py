"""How a batch's prediction-log lines are packed into Firehose records and calls."""

from __future__ import annotations

import json

from switchyard.telemetry import _calls, log_records


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
