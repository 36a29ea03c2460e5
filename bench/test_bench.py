"""Tests of the suite's own logic: the maths and the bookkeeping, never a timing."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

import pytest

from bench.aws_calls import Call, item_size, read_units, summarise, write_units
from bench.common import ROOT, percentile, ratio, sentences
from bench.end_to_end import breakdown
from bench.loadgen import check_loopback, is_sustained, poisson_schedule, sustainable_rate
from bench.platform_proc import edit_manifest
from bench.report import clean, compare_peer, markdown


def test_percentile_interpolates_between_ranks():
    values = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert percentile(values, 0) == 1.0
    assert percentile(values, 50) == 3.0
    assert percentile(values, 100) == 5.0
    assert percentile(values, 25) == 2.0
    assert percentile([10.0, 20.0], 99) == pytest.approx(19.9)
    assert percentile([7.0], 99) == 7.0
    assert math.isnan(percentile([], 50))


def test_percentile_ignores_order():
    assert percentile([5.0, 1.0, 3.0], 50) == 3.0


def test_ratio_guards_missing_and_zero():
    assert ratio(6, 3) == 2
    assert ratio(None, 3) is None
    assert ratio(3, 0) is None
    assert ratio(float("nan"), 1) is None


def test_poisson_schedule_is_reproducible_increasing_and_near_its_rate():
    a = poisson_schedule(50, 5000, seed=3)
    assert a == poisson_schedule(50, 5000, seed=3)
    assert a != poisson_schedule(50, 5000, seed=4)
    assert len(a) == 5000
    assert all(later > earlier for earlier, later in zip(a, a[1:], strict=False))
    # 5000 exponential gaps of mean 1/50 s: the span is 100 s within a few per cent.
    assert a[-1] == pytest.approx(100, rel=0.05)
    assert poisson_schedule(0, 10, 1) == []


def test_sustained_needs_every_answer_and_p99_under_the_limit():
    fast = [100.0] * 99 + [450.0]
    assert is_sustained(fast, failures=0)
    assert not is_sustained(fast, failures=1)
    assert not is_sustained([100.0] * 90 + [600.0] * 10, failures=0)
    assert not is_sustained([], failures=0)


def test_sustainable_rate_is_the_highest_sustained_step():
    steps = [
        {"rate": 5, "sustained": True},
        {"rate": 10, "sustained": True},
        {"rate": 20, "sustained": False},
    ]
    assert sustainable_rate(steps) == 10
    assert sustainable_rate([{"rate": 5, "sustained": False}]) is None


def test_load_only_targets_loopback():
    check_loopback("http://127.0.0.1:8080")
    check_loopback("http://localhost:1")
    with pytest.raises(ValueError):
        check_loopback("http://10.0.0.1:8080")
    with pytest.raises(ValueError):
        check_loopback("http://example.com")


def test_edit_manifest_sets_batch_size_and_drops_models():
    text = (ROOT / "manifest.toml").read_text()
    edited = tomllib.loads(
        edit_manifest(text, {"minilm-embed"}, {"minilm-embed": {"max_batch_size": 1}})
    )
    assert set(edited["models"]) == {"minilm-embed"}
    assert edited["models"]["minilm-embed"]["max_batch_size"] == 1
    original = tomllib.loads(text)
    assert edited["platform"] == original["platform"]
    assert edited["tenants"] == original["tenants"]
    kept = tomllib.loads(edit_manifest(text))
    assert kept == original


def test_dynamodb_item_size_and_capacity_units():
    item = {"tenant": {"S": "acme"}, "n": {"N": "12345"}, "doc": {"S": "x" * 1000}}
    # names 6 + 1 + 3, values 4 + 4 (5 digits: 3 bytes + 1) + 1000
    assert item_size(item) == 6 + 4 + 1 + 4 + 3 + 1000
    assert write_units(1) == 1
    assert write_units(1024) == 1
    assert write_units(1025) == 2
    assert read_units(0, consistent=True) == 1
    assert read_units(4097, consistent=True) == 2
    assert read_units(100, consistent=False) == 0.5


def test_summarise_counts_per_inference_and_prices_them():
    calls = [
        Call("router", "sqs", "SendMessage", 1),
        Call("router", "dynamodb", "PutItem", 1, wru=1),
        Call("router", "dynamodb", "GetItem", 1, rru=1),
        Call("router", "dynamodb", "GetItem", 1, rru=2),
        Call("worker", "sqs", "ReceiveMessage", 1),
        Call("worker", "sqs", "ReceiveMessage", 1, empty=True),
        Call("worker", "dynamodb", "PutItem", 1, wru=5),
        Call("worker", "sqs", "DeleteMessageBatch", 1),
        Call("router", "dynamodb", "Query", 1, rru=1),  # a cache refresh: not per inference
    ]
    out = summarise(calls * 2, inferences=2, requests=2)
    assert out["per_inference"]["router"]["dynamodb:GetItem"] == 2
    assert out["per_inference"]["worker"]["sqs:ReceiveMessage(empty)"] == 1
    assert out["sqs_requests_per_inference"] == 4
    assert out["sqs_empty_receives_per_inference"] == 1
    assert out["dynamodb_wru_per_inference"] == 6
    assert out["dynamodb_rru_per_inference"] == 3
    assert out["refresh_calls_seen"] == {"dynamodb:Query": 2}
    cost = out["usd_per_million_inferences"]
    assert cost["sqs"] == pytest.approx(4 * 0.40)
    assert cost["dynamodb_writes"] == pytest.approx(6 * 0.625)
    assert cost["dynamodb_reads"] == pytest.approx(3 * 0.125)
    assert cost["total"] == pytest.approx(1.6 + 3.75 + 0.375, abs=1e-3)


def test_breakdown_stages_add_up_to_the_client_latency():
    timings = [
        {
            "router_ms": 2,
            "enqueue_ms": 3,
            "queue_wait_ms": 10,
            "batch_wait_ms": 10,
            "compute_ms": 20,
            "pickup_ms": 15,
            "total_ms": 62,
        },
        {
            "router_ms": 4,
            "enqueue_ms": 5,
            "queue_wait_ms": 20,
            "batch_wait_ms": 10,
            "compute_ms": 30,
            "pickup_ms": 25,
            "total_ms": 96,
        },
    ]
    out = breakdown(timings, [70.0, 100.0], result_write_ms=4.0)
    stages = {s["stage"]: s["mean_ms"] for s in out["stages"]}
    assert stages["compute"] == 25
    assert stages["result write (est.)"] == 4
    assert stages["result pick-up"] == 16
    assert stages["other in router"] == pytest.approx(79 - 77)
    assert sum(stages.values()) == pytest.approx(85)
    assert out["largest_stage"] == "compute"
    assert breakdown([], [], None) == {}


def test_compare_peer_uses_rates_both_tested():
    step = {"p50_ms": 1, "p95_ms": 1, "max_ms": 1}
    ours = {
        "sustainable_rate": 10,
        "steps": [
            {**step, "rate": 5, "p99_ms": 100, "sustained": True},
            {**step, "rate": 10, "p99_ms": 200, "sustained": True},
            {**step, "rate": 20, "p99_ms": 900, "sustained": False},
        ],
    }
    theirs = {
        "sustainable_rate": 20,
        "steps": [
            {**step, "rate": 5, "p99_ms": 50, "sustained": True},
            {**step, "rate": 10, "p99_ms": 50, "sustained": True},
            {**step, "rate": 20, "p99_ms": 100, "sustained": True},
            {**step, "rate": 40, "p99_ms": 900, "sustained": False},
        ],
    }
    out = compare_peer(ours, theirs)
    assert out["rate_ratio"] == 0.5
    assert [r["rate"] for r in out["common_rates"]] == [5, 10, 20]
    assert out["headline_rate"] == 10
    assert out["headline"]["p99_ratio"] == 4


def test_sentences_are_deterministic_and_varied():
    a = sentences(50)
    assert a == sentences(50)
    assert len(set(a)) == 50
    assert all(8 <= len(s.split()) <= 20 for s in a)


def test_markdown_renders_a_partial_run(tmp_path: Path):
    results = {
        "quick": True,
        "wall_seconds": 1.0,
        "machine": {
            "date": "d",
            "cpu": "c",
            "cores": 2,
            "torch_threads": 2,
            "memory_gib": 1,
            "os": "o",
            "python": "3",
            "commit": None,
            "packages": {"torch": "x"},
            "load_average_at_start": 0.1,
        },
        "sections": {
            "model_limit": {
                "rounds": 1,
                "window_seconds": 0.1,
                "models": {
                    "minilm-embed": [
                        {
                            "batch_size": 1,
                            "model_inputs_per_s": 10.0,
                            "model_ms_per_batch": 100.0,
                            "runtime_inputs_per_s": 9.0,
                            "runtime_share_of_model": 0.9,
                            "rounds": 1,
                        }
                    ]
                },
            }
        },
        "timing": {"model_limit": {"seconds": 1.0, "load_before": 0.1, "load_after": 0.2}},
    }
    text = markdown(clean(results), [])
    assert "## 1. Model limit" in text
    assert "| 1 | 10.0 |" in text
    assert clean({"x": float("nan"), "y": [1.0, float("nan")]}) == {"x": None, "y": [1.0, None]}
