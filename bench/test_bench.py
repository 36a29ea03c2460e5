"""Tests of the suite's own logic: the maths and the bookkeeping, never a timing."""

from __future__ import annotations

import json
import math
import threading
import tomllib
from collections import Counter

import pytest

from bench import emulator_calls, loadgen
from bench import generation as gen
from bench.aws_calls import Call, item_size, read_units, summarise, write_units
from bench.common import ROOT, digit_images, percentile, ratio, sentences
from bench.end_to_end import breakdown
from bench.loadgen import (
    Outcome,
    StepResult,
    check_loopback,
    is_sustained,
    poisson_schedule,
    run_ladder,
    sustainable_rate,
)
from bench.report import clean, compare_peer, markdown
from bench.soak import (
    BAD_INPUTS,
    Planned,
    WorkerLog,
    account,
    canary_shares,
    latency_summary,
    memory_summary,
    plan,
    read_worker_log,
    request_body,
    slope_per_hour,
    timeline,
)
from harness.local_platform import edit_manifest, json_lines
from harness.worker_log import delivery_events


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


def ladder_against(monkeypatch, limit: float, slow_once: set[float]) -> tuple[list, list]:
    """The ladder against a target that answers within 100 ms up to ``limit`` req/s
    and in 900 ms past it, and in 900 ms on the first try of each rate in
    ``slow_once``: the steps, and what was asked of it in order."""
    asked: list[tuple[str, float]] = []

    def step(url, send, rate, seconds, seed=1):
        asked.append(("step", rate))
        slow = rate > limit or (rate in slow_once and asked.count(("step", rate)) == 1)
        return StepResult(rate, 10, 1.0, [Outcome("ok", 900.0 if slow else 100.0)] * 10)

    monkeypatch.setattr(loadgen, "run_step", step)
    monkeypatch.setattr(
        loadgen, "run_sequential", lambda url, send, count: asked.append(("one at a time", count))
    )
    steps = run_ladder(
        "http://127.0.0.1:1", None, [10, 20, 40, 80, 160], 1.0, lambda _: None, pause_s=0,
        settle=lambda: asked.append(("settle", 0)),
    )  # fmt: skip
    return steps, asked


def test_the_ladder_confirms_a_rung_not_sustained_then_halves_the_gap_past_it(monkeypatch):
    # GIVEN a target that sustains up to 55 req/s, run up coarse rungs
    steps, asked = ladder_against(monkeypatch, limit=55, slow_once=set())
    # THEN the first rung not sustained is tried once more, then the gap past it is
    # halved twice (a step not sustained there tried once more too), each step once
    # the backlog has drained and a few requests went through one at a time
    recovered = [("settle", 0), ("one at a time", 16)]
    assert asked == [
        ("step", 10), ("step", 20), ("step", 40), ("step", 80),
        *recovered, ("step", 80), *recovered, ("step", 60), *recovered, ("step", 60),
        *recovered, ("step", 50),
    ]  # fmt: skip
    assert [s["rate"] for s in steps] == [10, 20, 40, 50, 60, 80]
    assert sustainable_rate(steps) == 50


def test_a_rung_slow_once_does_not_end_the_ladder(monkeypatch):
    # GIVEN a target that sustains up to 55 req/s, but was slow once at 20
    steps, _ = ladder_against(monkeypatch, limit=55, slow_once={20})
    # THEN the second try at 20 stands, and the ladder goes on
    assert [(s["rate"], s["attempt"]) for s in steps][:3] == [(10, 1), (20, 2), (40, 1)]
    assert sustainable_rate(steps) == 50


def test_a_refining_step_slow_once_does_not_lower_the_rate(monkeypatch):
    # GIVEN a target that sustains up to 55 req/s, but was slow once at 50, a rate
    # the ladder reaches only by halving the gap past 40
    steps, _ = ladder_against(monkeypatch, limit=55, slow_once={50})
    # THEN the second try at 50 stands
    assert [(s["rate"], s["attempt"]) for s in steps if s["rate"] == 50] == [(50, 2)]
    assert sustainable_rate(steps) == 50


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
    # a kept model keeps its sub-tables (its own scaling)
    original_model = tomllib.loads(text)["models"]["minilm-embed"]
    assert edited["models"]["minilm-embed"]["scaling"] == original_model["scaling"]
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


def test_each_step_reports_the_batches_formed_and_the_waits_as_the_load_rises():
    from bench.end_to_end import batching_by_rate

    # GIVEN a ladder of two rates (the second kept once, though tried twice), and the
    # timings of each step's answers
    def answer(batch: int, queue: float, wait: float) -> dict:
        return {"batch_size": batch, "queue_wait_ms": queue, "batch_wait_ms": wait,
                "compute_ms": 20.0, "total_ms": 40.0}  # fmt: skip

    low = [answer(1, 2.0, 3.0), answer(2, 4.0, 5.0)]
    high = [answer(8, 30.0, 10.0), answer(16, 50.0, 30.0), answer(12, 40.0, 20.0)]
    per_rate = {
        "2": breakdown(low, [50.0, 50.0], None),
        "40": breakdown(high, [90.0] * 3, None),
    }
    steps = [{"rate": 2}, {"rate": 40}, {"rate": 40}]
    # WHEN they are summed up per step
    rows = batching_by_rate(steps, per_rate)
    # THEN each rate has its mean batch, and its queue and batch waits, once
    formed = [(r["rate"], r["answers"], r["mean_batch_size"]) for r in rows]
    assert formed == [(2, 2, 1.5), (40, 3, 12)]
    assert rows[1]["queue_wait_ms"] == {"mean": 40.0, "p50": 40.0}
    assert rows[1]["batch_wait_ms"]["mean"] == 20.0
    # AND a step with no answer says so rather than failing
    assert batching_by_rate([{"rate": 80}], {})[0]["mean_batch_size"] is None
    # AND the page shows the table under the platform's ladder
    results = _full_results()
    on = results["sections"]["end_to_end"]["batching_on"]
    on["batching_by_rate"] = rows
    text = markdown(results, [])
    assert "How the worker batched as the load rose" in text
    assert "| 40 | 3 | 12.0 | 40.0 / 40.0 | 20.0 / 20.0 | 20.0 / 20.0 |" in text


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


def _page(sections: dict, **results) -> str:
    """The page for a run that had only ``sections``."""
    return markdown(_report(sections, **results), [])


def _report(sections: dict, **results) -> dict:
    """The report of a run that had only ``sections``."""
    machine = {
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
    }
    run = {"quick": True, "wall_seconds": 1.0, "machine": machine, "timing": {}}
    return clean({**run, **results, "sections": sections})


def _full_results() -> dict:
    return json.loads((ROOT / "docs" / "benchmarks.json").read_text())


def _section_headings() -> list[str]:
    templates = ROOT / "bench" / "templates" / "sections"
    return [
        line
        for path in sorted(templates.glob("*.md.j2"))
        for line in path.read_text().splitlines()
        if line.startswith("## ")
    ]


def test_markdown_renders_a_partial_run():
    sections = {
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
    }
    timing = {"model_limit": {"seconds": 1.0, "load_before": 0.1, "load_after": 0.2}}
    text = _page(sections, timing=timing)
    assert "## 1. Model limit" in text
    assert "| 1 | 10.0 |" in text
    assert "## 2. Worker efficiency" not in text
    assert clean({"x": float("nan"), "y": [1.0, float("nan")]}) == {"x": None, "y": [1.0, None]}


def test_the_template_renders_every_section_of_a_full_run():
    # GIVEN the published results, every section run
    results = _full_results()
    # WHEN the page is written from them
    text = markdown(results, [])
    # THEN every section the templates hold is on it, each once, and no figure is missing
    for heading in _section_headings():
        assert text.count(f"\n{heading}\n") == 1, heading
    assert "None" not in text


def test_closed_loop_runs_render_with_where_an_answers_time_went():
    from bench.end_to_end import breakdown

    # GIVEN a backlog section whose closed loop ran twice (the median run on top)
    results = _full_results()

    def run(rate: float, share: float, pickup: float) -> dict:
        return {
            "callers": 16,
            "seconds": 30.0,
            "answered_per_s": rate,
            "p50_ms": 180.0,
            "p99_ms": 290.0,
            "model_limit_before": 290.0,
            "model_limit_after": 300.0,
            "share_of_model_limit": share,
            "breakdown": breakdown(
                [
                    {
                        "router_ms": 0.5,
                        "enqueue_ms": 4.5,
                        "queue_wait_ms": 29.0,
                        "batch_wait_ms": 33.0,
                        "compute_ms": 66.0,
                        "pickup_ms": pickup,
                        "total_ms": 170.0,
                        "batch_size": 7.0,
                    },
                    {"compute_ms": 66.0, "pickup_ms": pickup, "total_ms": 100.0, "batch_size": 9.0},
                ],
                [180.0, 110.0],
                None,
            ),
            "cpu_ms_per_answer": {
                "worker minilm-embed": 11.5,
                "emulator": 2.2,
                "router": 4.0,
                "load generator": 0.5,
            },
        }

    first, second = run(83.0, 0.282, 31.9), run(91.5, 0.31, 28.0)
    results["sections"]["backlog"]["closed_loop"] = first | {"runs": [first, second]}
    # WHEN the page is written
    text = markdown(results, [])
    # THEN each run is a row with its stages and CPU, and the median share is in bold
    # (means over the answers: a stamp an answer lacks counts as 0)
    stages = "router 0.2; enqueue 2.2; queue wait 14.5; batch wait 16.5; compute 66.0; "
    row = "| 1 | 83.0 | 180.0 / 290.0 ms | 290.0 / 300.0 | 0.28× | " + stages
    assert row + "result pick-up 31.9; other in router 3.6; HTTP, server and client 10.0 |" in text
    assert "| 2 | 91.5 |" in text and "| 8.0 | 11.5 / 2.2 / 4.0 / 0.5 |" in text
    assert "Median share of the model's limit: **0.28×** (83.0 answers/s)." in text


def test_a_loops_cpu_splits_into_what_each_input_and_each_batch_cost():
    from bench.worker_efficiency import per_input_and_batch

    # GIVEN a loop whose inputs cost 20 µs each and whose batches 480 µs each, read at
    # three batch sizes (and the same with a reading off by a little)
    exact = {size: 20 + 480 / size for size in (16, 32, 64)}
    # WHEN its CPU an input at those sizes is split
    # THEN the two costs come back, and a noisy reading moves them a little only
    assert per_input_and_batch(exact) == pytest.approx((20.0, 480.0))
    a, b = per_input_and_batch(exact | {32: exact[32] + 0.5})
    assert a == pytest.approx(20, abs=0.5) and b == pytest.approx(480, abs=15)


def test_the_loop_alones_split_by_batch_renders_for_each_model_measured():
    # GIVEN a worker-efficiency section where digits-cnn's loop alone was run at three
    # batch sizes (as the JSON page stores them: sizes as text) and minilm-embed's not
    results = _full_results()
    we = results["sections"]["worker_efficiency"]
    we["digits-cnn"] |= {
        "loop_alone_cpu_us_by_batch_size": {"16": 48.6, "32": 37.1, "64": 28.7},
        "loop_alone_cpu_us_apart_from_batches": 20.4,
        "loop_alone_cpu_us_per_batch": 480.0,
        "max_batch_size": 64,
    }
    for key in ("loop_alone_cpu_us_by_batch_size", "loop_alone_cpu_us_per_batch"):
        we["minilm-embed"].pop(key, None)
    # WHEN the page is written
    text = markdown(results, [])
    # THEN digits-cnn has its row of the split, and minilm-embed none
    row = "| digits-cnn | 48.6 at 16, 37.1 at 32, 28.7 at 64 | 20.4 µs | 480 µs | 7.5 µs an input |"
    assert row in text
    split = text.split("cpu = a + b / size")[1].split("\n## ")[0]
    assert "| digits-cnn | " in split and "| minilm-embed | " not in split


@pytest.mark.parametrize("section", sorted(_full_results()["sections"]))
def test_a_failed_section_leaves_the_rest_of_the_page(section: str):
    # GIVEN a full run in which one section failed (a failed section has no results)
    results = _full_results()
    del results["sections"][section]
    results["timing"][section] = {
        "seconds": 1.0,
        "load_before": 0.5,
        "load_after": 0.6,
        "error": "RuntimeError: it broke",
    }
    # WHEN the page is written
    text = markdown(results, [])
    # THEN the failure is in the run's table and the other sections are still there
    assert f"| {section} | 1.0 | 0.5 | 0.6 | RuntimeError: it broke |" in text
    assert "## Goals" in text and "## How this run went" in text


def test_batch_jobs_memory_is_read_per_process_inside_each_jobs_window():
    from types import SimpleNamespace

    from bench.batch_jobs import memory_by_process

    sampler = SimpleNamespace(
        processes={
            1: {"process": "splitter", "pid": 1, "samples": [[0, 50], [5, 60], [9, 90], [20, 40]]},
            2: {"process": "worker digits-cnn", "pid": 2, "samples": [[11, 70], [12, 80]]},
            3: {"process": "worker digits-cnn", "pid": 3, "samples": [[6, 75], [8, 74]]},
        }
    )
    # A job from 4 s to 10 s: the splitter's RSS at the drop and its peak inside;
    # a worker that ran only after it is left out; a second of a kind is told apart.
    assert memory_by_process(sampler, 4, 10) == {
        "splitter": {"at_drop_mib": 50, "peak_mib": 90},
        "worker digits-cnn": {"at_drop_mib": 75, "peak_mib": 75},
    }
    assert "worker digits-cnn (3)" in memory_by_process(sampler, 6, 12)


def test_batch_jobs_section_renders_goals_beside_the_figures():
    section = {
        "memory": {
            "model": "digits-cnn",
            "sample_every_s": 0.5,
            "jobs": [
                {
                    "lines_in_file": 10_000,
                    "file_mib": 1.6,
                    "status": "succeeded",
                    "seconds": 4.0,
                    "lines_per_s": 2500.0,
                    "memory": {"splitter": {"at_drop_mib": 100.0, "peak_mib": 120.0}},
                }
            ],
        },
        "realtime": {
            "model": "minilm-embed",
            "rate": 4.0,
            "seconds": 15.0,
            "job_lines": 3000,
            "repeats": 3,
            "runs": [
                realtime_run(1.25, 0.909, 200.0),
                realtime_run(1.7, 0.82, 180.0),
                realtime_run(1.1, 0.95, 190.0, ran_throughout=False),
            ],
            "median_p99_beside_over_alone": 1.25,
            "median_job_share_of_model_limit": 0.909,
        },
    }
    text = _page({"batch_memory": section["memory"], "batch_realtime": section["realtime"]})
    assert "| 10,000 | 1.6 MiB | succeeded | 4.0 s | 2,500.0 | 100 → 120 |" in text
    # every run has its row; the medians are the figures set beside the goals
    assert "| 2 | 30.0 / 80.0 ms (10 / 10) | 30.0 / 136.0 ms (10 / 10) | 0 | 1.70× |" in text
    assert "| 190.0 (15.0 s), ended before realtime did | 210.0 / 230.0 | 0.95× |" in text
    assert "**1.25×** of p99 alone (goal: within 1.5×)" in text
    assert "at **0.91×** of the model's own limit (goal ≥ 0.85×)" in text


def realtime_run(
    p99_ratio: float, share: float, lines_per_s: float, ran_throughout: bool = True
) -> dict:
    """One run of the realtime-beside-a-job section, as ``bench.batch_jobs`` records it."""
    step = {"ok": 10, "sent": 10, "miss_202": 0, "p50_ms": 30.0, "p99_ms": 80.0}
    return {
        "alone": step,
        "beside_job": {**step, "p99_ms": round(80.0 * p99_ratio, 1)},
        "job_ran_throughout": ran_throughout,
        "p99_beside_over_alone": p99_ratio,
        "job": {"lines": 3000, "seconds": 15.0, "lines_per_s": lines_per_s},
        "model_limit_before": 210.0,
        "model_limit_after": 230.0,
        "job_share_of_model_limit": share,
    }


# -- generation ----------------------------------------------------------------------


def _native(*events) -> list[tuple[float, str]]:
    """SSE lines as the router writes them, each with its arrival time."""
    out = []
    for at, event in events:
        out += [(at, f"data: {json.dumps(event)}"), (at, "")]
    return out


def test_native_stream_gives_ttft_from_the_first_token_and_tokens_from_usage():
    # GIVEN a stream sent at 10.0 s whose first token comes 80 ms later; one event
    # carries two tokens, as a chunk read at once may
    lines = [(10.05, ": keep-alive")] + _native(
        (10.08, {"token": "Return"}),
        (10.09, {"token": " the value"}),
        (10.20, {"done": True, "finish_reason": "length", "usage": {"completion_tokens": 3}}),
    )
    # WHEN it is read
    out = gen.read_stream(lines, started=10.0)
    # THEN TTFT is to the first token event, and the count is the answer's own
    assert out.ttft_ms == pytest.approx(80)
    assert out.tokens == 3
    assert out.finish_reason == "length"
    assert out.seconds == pytest.approx(0.2)
    assert out.ok


def test_openai_stream_skips_the_finish_chunk_and_stops_at_done():
    chunk = {"object": "text_completion", "usage": None}
    lines = _native(
        (1.03, {**chunk, "choices": [{"index": 0, "text": "a", "finish_reason": None}]}),
        (1.04, {**chunk, "choices": [{"index": 0, "text": "b", "finish_reason": None}]}),
        (1.05, {**chunk, "choices": [{"index": 0, "text": "", "finish_reason": "length"}]}),
    ) + [(1.06, "data: [DONE]"), (1.07, "data: {not json after the end")]
    out = gen.read_stream(lines, started=1.0)
    # without usage, the token events are counted: the finish chunk is none
    assert out.ttft_ms == pytest.approx(30)
    assert (out.tokens, out.finish_reason) == (2, "length")
    with_usage = lines[:6] + _native(
        (1.055, {**chunk, "choices": [], "usage": {"completion_tokens": 5}})
    )
    assert gen.read_stream(with_usage, started=1.0).tokens == 5


def test_a_stream_that_errors_or_brings_no_token_is_not_ok():
    failed = gen.read_stream(
        _native((2.1, {"token": "x"}), (2.2, {"error": {"code": "expired"}})), started=2.0
    )
    assert not failed.ok and "expired" in failed.error
    empty = gen.read_stream(_native((2.1, {"done": True, "usage": {"completion_tokens": 0}})), 2.0)
    assert not empty.ok and empty.error == "the stream ended without a token"
    garbled = gen.read_stream(_native((2.1, {"token": "x"})) + [(2.2, "data: <html>")], 2.0)
    assert not garbled.ok and garbled.error == "not an event: <html>"


def test_a_level_summary_counts_only_streams_that_streamed():
    outcomes = [
        gen.StreamOutcome(ttft_ms=10.0, tokens=64, seconds=0.65),
        gen.StreamOutcome(ttft_ms=30.0, tokens=64, seconds=1.03),
        gen.StreamOutcome(error="HTTP 503: busy"),
    ]
    out = gen.summarise(2, outcomes, wall_s=1.6)
    assert (out["requests"], out["ok"], out["errors"]) == (3, 2, 1)
    assert out["first_error"] == "HTTP 503: busy"
    assert out["ttft_p50_ms"] == 20.0
    assert out["ttft_p99_ms"] == pytest.approx(29.8)
    assert out["tokens_per_s"] == 80.0  # 128 tokens over 1.6 s, the failed one adds none
    # after its first token, each stream ran 63 tokens in 0.64 s and 1.0 s
    assert out["stream_tokens_per_s_p50"] == pytest.approx((63 / 0.64 + 63 / 1.0) / 2, abs=0.1)
    assert math.isnan(gen.summarise(1, [gen.StreamOutcome(error="x")], 1.0)["ttft_p50_ms"])


def test_goals_read_ttft_overhead_at_one_stream_and_gain_at_the_most_streams():
    def level(n, p50, rate):
        return {"concurrency": n, "ttft_p50_ms": p50, "tokens_per_s": rate}

    targets = {
        "bare": {"levels": [level(1, 6.0, 450.0), level(8, 60.0, 220.0)]},
        "platform": {
            "levels": [level(1, 96.0, 200.0), level(4, 120.0, 500.0), level(8, 150.0, 390.0)]
        },
    }
    out = gen.verdicts(targets)
    assert out["ttft_overhead_p50_ms"] == {"1": 90.0, "8": 90.0}
    assert out["ttft_overhead_met"] is True
    assert out["batching_gain_streams"] == 8
    assert out["batching_gain"] == 1.95 and out["batching_gain_met"] is False
    targets["platform"]["levels"][0]["ttft_p50_ms"] = 107.0
    assert gen.verdicts(targets)["ttft_overhead_met"] is False
    assert gen.verdicts({})["batching_gain"] is None


def test_closed_loop_runs_each_request_once_never_more_than_n_at_a_time():
    import asyncio

    running, most, seen = 0, 0, []

    async def one(i: int) -> gen.StreamOutcome:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.001 * (i % 3))
        seen.append(i)
        running -= 1
        return gen.StreamOutcome(ttft_ms=1.0, tokens=i)

    outcomes, wall = asyncio.run(gen.closed_loop(one, 3, 10))
    assert sorted(seen) == list(range(10)) and most == 3
    assert [o.tokens for o in outcomes] == list(range(10))  # in request order
    assert wall > 0


def test_requests_are_the_same_for_every_target_and_levels_are_bounded():
    assert (
        gen.request_body(3) == gen.request_body(3)
        and gen.request_body(3)["seed"] != gen.request_body(4)["seed"]
    )
    assert gen.request_body(0)["max_tokens"] == 64 and gen.request_body(0)["temperature"] == 0.8
    assert [gen.requests_per_level(n, quick=False) for n in (1, 2, 4, 8)] == [24, 24, 24, 48]
    assert [gen.requests_per_level(n, quick=True) for n in (1, 8)] == [8, 16]


def test_the_token_queue_skips_the_prompt_and_ends():
    import torch

    streamer = gen.TokenQueue()
    streamer.put(torch.tensor([[5, 6, 7]]))  # the prompt
    assert streamer.first_at is None
    streamer.put(torch.tensor([11]))
    streamer.put(torch.tensor([12]))
    streamer.end()
    assert list(streamer) == [11, 12] and streamer.count == 2 and streamer.first_at


def test_cpu_per_token_divides_by_the_tokens_and_others_by_the_capacity():
    out = gen.cpu_summary({"emulator": 1.5, "worker pydoc-gpt": 0.5}, 1.0, 500, capacity_s=10.0)
    assert out == {
        "cpu_ms_per_token": {"emulator": 3.0, "worker pydoc-gpt": 1.0},
        "others_busy_share": 0.1,
    }
    assert gen.cpu_summary({"x": 1.0}, 0.0, 0, 0.0)["cpu_ms_per_token"] == {"x": None}


def test_generation_section_renders_the_table_and_the_goals():
    lv = {
        "ttft_p50_ms": 5.8,
        "ttft_p99_ms": 8.0,
        "tokens_per_s": 452.8,
        "stream_tokens_per_s_p50": 460.0,
        "ok": 24,
        "requests": 24,
        "errors": 0,
        "first_error": None,
    }
    section = {
        "model": "pydoc-gpt v1",
        "max_tokens": 64,
        "temperature": 0.8,
        "concurrency": [1, 8],
        "requests_per_level": {"1": 24, "8": 48},
        "targets": {
            "bare": {"how": "threads", "levels": [{**lv, "concurrency": 1}]},
            "platform": {
                "how": "queues",
                "levels": [
                    {
                        **lv,
                        "concurrency": 1,
                        "ttft_p50_ms": 90.0,
                        "cpu_ms_per_token": {"emulator": 1.8, "worker": 2.75},
                        "others_busy_share": 0.05,
                        "results_table_items": 1200,
                    },
                    {
                        **lv,
                        "concurrency": 8,
                        "errors": 2,
                        "ok": 46,
                        "first_error": "HTTP 500",
                        "cpu_ms_per_token": {"emulator": 19.3, "worker": 1.5},
                        "others_busy_share": 0.0,
                    },
                ],
            },
        },
        "ttft_overhead_p50_ms": {"1": 84.2},
        "ttft_overhead_goal_ms": 100.0,
        "ttft_overhead_met": True,
        "batching_gain_streams": 8,
        "batching_gain": 1.5,
        "batching_gain_goal": 2.0,
        "batching_gain_met": False,
    }
    text = _page({"generation": section})
    assert "| 1 | bare transformers | 5.8 ms | 8.0 ms | **452.8** | 460.0 | 24 / 24 |" in text
    assert (
        "| 8 | platform on transformers | 5.8 ms | 8.0 ms | **452.8** | 460.0 | 46 / 24 |" in text
    )
    assert "1 stream(s) 84.2 ms; at one stream met (goal ≤ 100 ms)" in text
    assert "**1.50×**, **not met** (goal ≥ 2×" in text
    assert "| streams | target | emulator | worker | other work | table items |" in text
    assert "| 1 | platform on transformers | 1.80 | 2.75 | 5 % | 1,200 |" in text
    assert (
        "At 8 streams the largest CPU cost per token of the platform on transformers is the "
        "emulator (19.30 ms;" in text
    )
    assert "the worker 1.50 ms). Locally the emulator carries the token streams" in text
    assert (
        "Failed at 8 stream(s) on platform on transformers: 2 request(s), the first with "
        "`HTTP 500`" in text
    )
    assert "The platform on vLLM against bare vLLM" not in text  # no vLLM in this run


def _vllm_section() -> dict:
    """A generation section with both vLLM targets beside transformers', its goals
    worked out by ``verdicts``."""

    def level(n, p50, rate, cpu):
        return {
            "concurrency": n,
            "ttft_p50_ms": p50,
            "ttft_p99_ms": p50 * 2,
            "tokens_per_s": rate,
            "stream_tokens_per_s_p50": rate / n,
            "ok": 8 * n,
            "requests": 8 * n,
            "errors": 0,
            "first_error": None,
            "cpu_ms_per_token": cpu,
            "others_busy_share": 0.01,
        }

    platform_cpu = {"worker pydoc-gpt": 2.0, "emulator": 1.5, "router": 0.5, "load generator": 0.1}
    targets = {
        "bare": {"how": "threads", "levels": [level(1, 8.0, 270.0, {"load generator": 3.7})]},
        "bare_vllm": {
            "how": "one LLM",
            "levels": [
                level(1, 20.0, 150.0, {"vllm": 6.0, "load generator": 0.2}),
                level(8, 40.0, 900.0, {"vllm": 2.0, "load generator": 0.2}),
            ],
        },
        "platform": {"how": "queues", "levels": [level(1, 60.0, 170.0, platform_cpu)]},
        "platform_vllm": {
            "how": "queues, vLLM",
            "levels": [
                level(1, 135.0, 120.0, platform_cpu),
                level(8, 160.0, 684.0, platform_cpu),
            ],
        },
    }
    return {
        "model": "pydoc-gpt v1",
        "max_tokens": 64,
        "temperature": 0.8,
        "concurrency": [1, 2, 4, 8],
        "vllm_concurrency": [1, 8],
        "requests_per_level": {"1": 8, "8": 64},
        "targets": targets,
        **gen.verdicts(targets),
    }


def test_the_platform_on_vllm_is_judged_against_bare_vllm():
    # GIVEN levels of bare vLLM and the platform on vLLM at 1 and 8 streams
    section = _vllm_section()
    # THEN TTFT is the platform's p50 over bare vLLM's, at each number of streams
    assert section["vllm_ttft_overhead_p50_ms"] == {"1": 115.0, "8": 120.0}
    assert section["vllm_ttft_overhead_met"] is False  # 115 ms at one stream > 100 ms
    # AND tokens/s at the most streams both ran is a share of bare vLLM's
    assert section["vllm_throughput_streams"] == 8
    assert section["vllm_throughput_share"] == 0.76 and section["vllm_throughput_met"] is False
    # AND the transformers goals still read the transformers targets only
    assert section["ttft_overhead_p50_ms"] == {"1": 52.0}
    targets = section["targets"]
    targets["platform_vllm"]["levels"][0]["ttft_p50_ms"] = 119.0
    targets["platform_vllm"]["levels"][1]["tokens_per_s"] = 720.0
    again = gen.verdicts(targets)
    assert again["vllm_ttft_overhead_met"] is True and again["vllm_throughput_met"] is True
    # AND without bare vLLM there is nothing to judge
    del targets["bare_vllm"]
    alone = gen.verdicts(targets)
    assert alone["vllm_throughput_share"] is None and alone["vllm_ttft_overhead_met"] is None


def test_the_vllm_figures_render_beside_bare_vllm_with_their_goals():
    from bench.goals import evaluate

    # GIVEN a generation section with both vLLM targets
    section = _vllm_section()
    # WHEN the page is written and the goals judged
    text = _page({"generation": section})
    judged = {g["goal"]: g for g in evaluate(_report({"generation": section}))}
    # THEN each vLLM target has its rows at 1 and 8 streams, beside the others
    assert "| 1 | bare vLLM | 20.0 ms | 40.0 ms | **150.0** | 150.0 | 8 / 8 |" in text
    assert "| 8 | platform on vLLM | 160.0 ms | 320.0 ms | **684.0** | 85.5 | 64 / 64 |" in text
    assert "| 8 | bare vLLM | 2.00 | 0.20 | 1 % | – |" not in text  # roles are columns
    # AND the goals are stated with the figures
    assert (
        "The platform on vLLM against bare vLLM: TTFT p50 over bare vLLM's 1 stream(s) 115.0 ms,"
        " 8 stream(s) 120.0 ms; at one stream **not met** (goal ≤ 100 ms). Tokens/s at 8 "
        "streams: **0.76×** bare vLLM's, **not met** (goal ≥ 0.8×)." in text
    )
    assert "largest CPU cost per token of the platform on vLLM is the worker pydoc-gpt" in text
    # AND the goals table judges both, with where the platform's CPU went
    share = judged["generation at 8 streams: the platform on vLLM's tokens/s vs bare vLLM's"]
    assert (share["measured"], share["met"]) == (0.76, False)
    assert share["reason"].startswith(
        "At 8 streams the platform on vLLM streamed 684.0 tokens/s, bare vLLM 900.0. A token "
        "cost 4.10 ms of CPU over the platform's processes (worker pydoc-gpt 2.0, emulator 1.5,"
    )
    assert "against bare vLLM's 2.20, so 2 cores stream at most 488 tokens/s" in share["reason"]
    ttft = judged["generation at one stream: TTFT p50, the platform on vLLM over bare vLLM"]
    assert (ttft["measured"], ttft["met"]) == (115.0, False)
    assert "came at p50 135.0 ms (p99 270.0), bare vLLM's at 20.0 ms" in ttft["reason"]


def test_bare_vllms_loop_joins_requests_as_they_come_and_streams_each_step():
    import queue
    from types import SimpleNamespace

    from bench.bare_vllm import serve

    class Engine:
        """vLLM's LLMEngine as the loop drives it: a step gives each request in
        flight one token (a delta) until it has its max_tokens."""

        def __init__(self) -> None:
            self.left: dict[str, int] = {}
            self.most = 0

        def add_request(self, request_id, prompt, params):
            self.left[request_id] = params
            return f"{request_id}-internal"  # its outputs carry the id it was given

        def has_unfinished_requests(self) -> bool:
            return bool(self.left)

        def step(self):
            self.most = max(self.most, len(self.left))
            out = []
            for rid in list(self.left):
                self.left[rid] -= 1
                finished = self.left[rid] == 0
                if finished:
                    del self.left[rid]
                reason = "length" if finished else None
                completion = SimpleNamespace(token_ids=[7], text="x", finish_reason=reason)
                out.append(SimpleNamespace(request_id=rid, finished=finished, outputs=[completion]))
            return out

    # GIVEN two requests waiting, and a third that arrives after the first step
    inbox: queue.SimpleQueue = queue.SimpleQueue()
    inbox.put({"id": 1, "prompt": "Return the", "max_tokens": 3})
    inbox.put({"id": 2, "prompt": "Open the", "max_tokens": 2})
    written: list[list[dict]] = []

    def write(events: list[dict]) -> None:
        if not written:
            inbox.put({"id": 3, "prompt": "Read", "max_tokens": 2})
            inbox.put(None)  # then stdin ends
        written.append(events)

    engine = Engine()
    # WHEN the loop serves them
    served = serve(engine, inbox, lambda body: body["max_tokens"], write)
    # THEN all three ran, the third joining the two in flight
    assert served == 3 and engine.most == 3
    # AND each step's tokens went out at once, each request's ending with its count
    assert [len(step) for step in written] == [2, 4, 4]
    by_id: dict[int, list[dict]] = {}
    for step in written:
        for e in step:
            by_id.setdefault(e["id"], []).append(e["event"])
    for key, tokens in ((1, 3), (2, 2), (3, 2)):
        events = by_id[key]
        assert events[:-1] == [{"token": "x"}] * tokens
        assert events[-1] == {
            "done": True,
            "finish_reason": "length",
            "usage": {"completion_tokens": tokens},
        }


def test_bare_vllms_caller_reads_each_requests_events_from_the_shared_stdout():
    import asyncio

    async def main() -> list[gen.StreamOutcome]:
        stdout = asyncio.StreamReader()

        class Stdin:
            """The process's stdin: each request is answered on stdout, after a
            line of another request's and a line that is not an event."""

            def write(self, data: bytes) -> None:
                key = json.loads(data)["id"]
                lines = [
                    {"id": 99, "event": {"token": "?"}},
                    {"id": key, "event": {"token": "a"}},
                    {"id": key, "event": {"token": "b"}},
                    {"id": key, "event": {"done": True, "usage": {"completion_tokens": 2}}},
                ]
                text = "INFO vllm said something\n" + "".join(json.dumps(x) + "\n" for x in lines)
                asyncio.get_running_loop().call_soon(stdout.feed_data, text.encode())

            async def drain(self) -> None:
                return None

        bare = gen.BareVllm(Stdin(), stdout)
        reader = asyncio.create_task(bare.read())
        outcomes = await asyncio.gather(*(bare.call(gen.request_body(i)) for i in range(3)))
        # a request whose process ends before its answer ends with an error
        stdout.feed_eof()
        await reader
        return [*outcomes, await bare.call(gen.request_body(3))]

    *answered, cut = asyncio.run(main())
    assert [(o.ok, o.tokens) for o in answered] == [(True, 2)] * 3
    assert all(o.ttft_ms is not None and o.ttft_ms >= 0 for o in answered)
    assert not cut.ok


# -- the soak's analysis ---------------------------------------------------------------


def _sent(index: int, kind: str = "async", **fields) -> dict:
    record = {
        "index": index,
        "label": "bad input" if kind == "bad" else f"{kind} minilm-embed",
        "kind": kind,
        "model": "minilm-embed",
        "pinned_version": None,
        "sent_at": 0.0,
        "http": [202],
        "request_id": f"r{index}",
        "version": "v1",
        "answers": ["done"],
        "cancel": None,
        "latency_ms": 10.0,
        "swept": "done",
        "error": None,
    }
    return {**record, **fields}


def test_rss_slope_is_least_squares_in_mib_per_hour():
    # 1 MiB per minute, with noise that cancels out: 60 MiB/h.
    points = [(t * 60.0, 100.0 + t + (0.5 if t % 2 else -0.5)) for t in range(10)]
    assert slope_per_hour(points) == pytest.approx(60.0, abs=2.0)
    assert slope_per_hour([(0, 5.0), (10, 5.0), (20, 5.0)]) == 0.0
    assert slope_per_hour([(0, 1.0), (10, 2.0)]) is None
    assert slope_per_hour([(5, 1.0), (5, 2.0), (5, 3.0)]) is None


def test_memory_summary_skips_each_process_warm_up_and_judges_growth():
    flat = [[t, 300.0 + (5.0 if t < 60 else 0.0)] for t in range(0, 600, 10)]
    growing = [[t, 100.0 + t / 10] for t in range(0, 600, 10)]  # 360 MiB/h
    restarted = [[t, 250.0] for t in range(400, 600, 10)]
    rows = memory_summary(
        [
            {"process": "router", "pid": 1, "samples": flat},
            {"process": "emulator", "pid": 2, "samples": growing},
            {"process": "worker digits-cnn", "pid": 3, "samples": restarted},
        ],
        warmup_s=120,
        load_end_s=590,
        predicts_per_hour=3600,
    )
    by_pid = {r["pid"]: r for r in rows}
    assert by_pid[1]["verdict"] == "flat" and by_pid[1]["slope_mib_per_hour"] == 0.0
    assert by_pid[1]["start_mib"] == 305.0 and by_pid[1]["peak_mib"] == 305.0
    assert by_pid[2]["verdict"] == "grows"
    assert by_pid[2]["slope_mib_per_hour"] == pytest.approx(360.0)
    assert by_pid[2]["kib_per_request"] == pytest.approx(102.4)
    # fitted from 120 s after its own first sample (400 s): 520-590 s.
    assert by_pid[3]["fitted_samples"] == 8 and by_pid[3]["verdict"] == "flat"
    short = memory_summary([{"process": "router", "pid": 4, "samples": flat[:5]}], 120, 590, 3600)
    assert short[0]["verdict"] == "too short to fit"


def test_worker_log_reads_the_delivery_events():
    lines = [
        '{"message": "results stored", "stored": {"done": ["a"], "expired": ["b"]}, '
        '"suppressed": {}, "receive_counts": {}}',
        '{"message": "results stored", "stored": {"done": ["b"]}, '
        '"suppressed": {"done": ["a"]}, "receive_counts": {"a": 2, "b": 2}}',
        '{"message": "polling"}',
        '{"_aws": {}, "BatchSize": [1.0]}',
        "Traceback (most recent call last):",
        "{not json",
    ]
    log = read_worker_log(delivery_events(json_lines(lines)))
    assert log.stored == {"a": ["done"], "b": ["expired", "done"]}
    assert log.suppressed == {"a": 1}
    assert log.events == {"result stored": 3, "duplicate suppressed": 1}


def test_every_request_answered_once_passes():
    records = [
        _sent(0, "sync", http=[200]),
        _sent(1, "sync", http=[202], answers=["done"]),  # past its deadline, then polled
        _sent(2, cancel=200, http=[202, 200], answers=["cancelled"], swept="cancelled"),
        _sent(3, cancel=409, http=[202, 409], answers=["done"]),
        _sent(4, answers=[], swept="expired"),  # read as expired only at the end
        _sent(5, "bad", http=[422], request_id=None, answers=[], swept=None, version=None),
        _sent(6, pinned_version="v2", version="v2"),
    ]
    stored = {"r0": ["done"], "r1": ["done"], "r3": ["done"], "r6": ["done"]}
    # r2 was cancelled while it ran, r3 redelivered after its result was stored.
    out = account(records, WorkerLog(stored, {"r2": 1, "r3": 2}, {}))
    assert out["passed"], out
    assert out["problems"] == {"lost": 0, "answered_twice": 0, "http_5xx": 0, "unexpected": 0}
    assert out["results_stored"] == 4 and out["stored_for_unknown_ids"] == 0
    assert out["suppressed_by_final_status"] == {"cancelled": 1, "done": 2}
    assert out["by_kind"]["sync minilm-embed"] == {"done": 1, "done after 202": 1}
    assert out["by_kind"]["async minilm-embed"] == {
        "cancelled (DELETE 200)": 1,
        "done": 1,
        "done (DELETE 409)": 1,
        "expired": 1,
    }
    assert out["by_kind"]["bad input"] == {"refused 422": 1}


@pytest.mark.parametrize(
    ("record", "stored", "problem"),
    [
        (_sent(0, answers=[], swept="queued"), {}, "lost"),
        (
            _sent(0, http=[], request_id=None, answers=[], swept=None, error="ReadTimeout"),
            {},
            "lost",
        ),
        (
            _sent(0, answers=["cancelled"], swept="done", cancel=200),
            {"r0": ["done"]},
            "answered_twice",
        ),
        (_sent(0), {"r0": ["done", "done"]}, "answered_twice"),
        (_sent(0, answers=["cancelled"], swept="cancelled"), {"r0": ["done"]}, "answered_twice"),
        (_sent(0, "sync", http=[500], answers=["error"], swept="error"), {}, "http_5xx"),
        (_sent(0, "sync", http=[202, 502]), {"r0": ["done"]}, "http_5xx"),
        (_sent(0, "bad", http=[202], answers=[], swept=None), {}, "unexpected"),
        (_sent(0, "sync", http=[404], answers=[], swept=None, request_id=None), {}, "lost"),
        (_sent(0, pinned_version="v1", version="v2"), {"r0": ["done"]}, "unexpected"),
        (_sent(0, http=[202, 404]), {"r0": ["done"]}, "unexpected"),
    ],
)
def test_each_way_a_request_can_go_wrong_fails_the_soak(record, stored, problem):
    out = account([record], WorkerLog(stored, {}, {}))
    assert not out["passed"]
    assert out["problems"][problem] == 1
    assert out["examples"][problem][0]["index"] == 0


def test_soak_plan_is_reproducible_and_follows_the_mix():
    planned = plan(4000, seed=3)
    assert planned == plan(4000, seed=3)
    kinds = Counter(p.kind for p in planned)
    assert kinds["bad"] / 4000 == pytest.approx(0.05, abs=0.015)
    assert kinds["sync"] / 4000 == pytest.approx(0.57, abs=0.03)
    pinned = [p for p in planned if p.pin]
    assert {(p.pin, p.model, p.version) for p in pinned} == {
        ("header", "minilm-embed", "v1"),
        ("header", "digits-cnn", "v1"),
        ("body", "minilm-embed", "v1"),
        ("body", "digits-cnn", "v2"),
    }
    cancelled = [p for p in planned if p.cancel_after_s is not None]
    assert cancelled and all(p.kind == "async" for p in cancelled)
    assert {p.bad for p in planned if p.kind == "bad"} == set(BAD_INPUTS)


def test_soak_bodies_pin_by_body_and_break_bad_inputs():
    texts, images = sentences(4), digit_images(4)
    pinned = Planned("async", "digits-cnn", pin="body", version="v2", inputs=2)
    body = request_body(pinned, 1, texts, images)
    assert body == {"inputs": [images[1], images[2]], "params": {"version": "v2"}}
    header = Planned("sync", "minilm-embed", pin="header", version="v1")
    assert "params" not in request_body(header, 0, texts, images)
    short = request_body(Planned("bad", "digits-cnn", bad="image_too_short"), 0, texts, images)
    assert len(short["inputs"][0]) == 63
    high = request_body(Planned("bad", "digits-cnn", bad="pixel_out_of_range"), 0, texts, images)
    assert high["inputs"][0][0] == 17.0


def test_soak_timeline_cycles_the_canary_and_alternates_kills():
    events = timeline(1800, 300, 257)
    canary = [(at, w) for at, what, w in events if what == "canary"]
    kills = [(at, m) for at, what, m in events if what == "kill"]
    assert canary[:3] == [(300, "v1=50 v2=50"), (600, "v1=100 v2=0"), (900, "v1=90 v2=10")]
    assert len(canary) == 5 and len(kills) == 7
    assert [m for _, m in kills[:2]] == ["minilm-embed", "digits-cnn"]
    assert [at for at, _, _ in events] == sorted(at for at, _, _ in events)
    assert all(at < 1800 for at, _, _ in events)


def test_canary_shares_count_unpinned_requests_after_each_change_settles():
    records = [
        _sent(0, model="digits-cnn", sent_at=2.0, version="v2"),  # before the change settled
        _sent(1, model="digits-cnn", sent_at=10.0, version="v1"),
        _sent(2, model="digits-cnn", sent_at=11.0, version="v2"),
        _sent(3, model="digits-cnn", sent_at=12.0, version="v2", pinned_version="v2"),
        _sent(4, model="minilm-embed", sent_at=12.0, version="v1"),
        _sent(5, model="digits-cnn", sent_at=40.0, version="v1"),
    ]
    out = canary_shares(records, [(0.0, "v1=50 v2=50"), (30.0, "v1=100 v2=0")], 60.0)
    assert out[0]["requests"] == 2 and out[0]["shares"] == {"v1": 0.5, "v2": 0.5}
    assert out[1]["requests"] == 1 and out[1]["shares"] == {"v1": 1.0}


def test_soak_latency_groups_sync_answers_and_async_ends():
    records = [
        _sent(0, "sync", http=[200], latency_ms=10.0),
        _sent(1, "sync", http=[200], latency_ms=30.0),
        _sent(2, "sync", http=[202], latency_ms=6000.0),
        _sent(3, latency_ms=700.0),
        _sent(4, cancel=200, latency_ms=50.0),  # a cancel's answer is no latency of the model
        _sent(5, "bad", http=[422], latency_ms=5.0),
    ]
    rows = {r["requests"]: r for r in latency_summary(records)}
    assert set(rows) == {
        "sync minilm-embed (200)",
        "sync minilm-embed (202, then polled)",
        "async minilm-embed (polled to its end)",
    }
    assert rows["sync minilm-embed (200)"]["n"] == 2
    assert rows["sync minilm-embed (200)"]["p50_ms"] == 20.0


def test_every_call_the_emulator_section_measures_is_made_as_the_platform_makes_it():
    # WHEN the section's every operation is made twice, on a private emulator
    section = emulator_calls.run(quick=True, calls=2)
    # THEN each was measured, every call of it made (none raised), each with its note
    rows = section["operations"]
    assert {"ReceiveMessage of 10", "GetItem", "UpdateItem, conditional counter"} <= set(rows)
    for name, row in rows.items():
        assert row["calls"] >= 2, name
        assert row["note"], name


def test_the_loop_alone_replays_the_models_outputs_at_no_cost_in_the_model():
    from bench.model_limit import LoadedModel
    from bench.worker_efficiency import ReplayedRuntime, loop_alone

    # GIVEN a model whose runtime counts its calls
    calls: list[int] = []

    class Runtime:
        def predict(self, inputs: list) -> list:
            calls.append(len(inputs))
            return [{"class": str(x)} for x in inputs]

    model = LoadedModel("m", [1, 2, 3], lambda batch: batch, Runtime())
    # WHEN its outputs are replayed for batches of every size
    replayed = ReplayedRuntime(model, 4)
    sizes = [len(replayed.predict(list(range(n)))) for n in (1, 4, 9)]
    # THEN each call gets one output an input, and the model ran once, for its max batch
    assert sizes == [1, 4, 9]
    assert calls == [4]
    assert replayed.predict([0, 0])[1] == {"class": "2"}
    # AND the loop's rate alone is read against the limit of the same round
    reading = {"model_inputs_per_s_at_formed_sizes": 200.0}
    alone = {
        "inputs_per_s": 50.0,
        "finished": True,
        "typical_batch_size": 64,
        "cpu_us_per_input": 31.5,
        "messages": 6400,
    }
    assert loop_alone(alone, reading)["loop_alone_vs_model"] == 0.25
    assert loop_alone(alone, reading)["loop_alone_messages"] == 6400
    # with the worker's CPU an input in that run, the model's replayed outputs costing none
    assert loop_alone(alone, reading)["loop_alone_cpu_us_per_input"] == 31.5
    assert loop_alone(alone | {"finished": False}, reading) == {}


def test_a_rounds_loop_alone_is_its_median_run_with_every_runs_figures():
    from bench.worker_efficiency import loop_alone, median_run

    # GIVEN a round's three runs of the loop alone, one slowed by a busy moment, and
    # one that did not finish in time
    def run(rate: float, cpu: float, finished: bool = True) -> dict:
        return {"inputs_per_s": rate, "cpu_us_per_input": cpu, "finished": finished,
                "typical_batch_size": 64, "messages": 6400}  # fmt: skip

    runs = [run(48_000.0, 22.0), run(30_000.0, 29.0), run(47_000.0, 22.5)]
    # WHEN the round takes its median run
    median = median_run(runs)
    # THEN it is the median by rate, every run's figures beside it, in their order
    assert (median["inputs_per_s"], median["cpu_us_per_input"]) == (47_000.0, 22.5)
    assert median["runs_inputs_per_s"] == [48_000.0, 30_000.0, 47_000.0]
    assert median["runs_cpu_us_per_input"] == [22.0, 29.0, 22.5]
    reading = {"model_inputs_per_s_at_formed_sizes": 94_000.0}
    assert loop_alone(median, reading)["loop_alone_vs_model"] == 0.5
    assert loop_alone(median, reading)["loop_alone_runs"] == 3
    # AND a run that did not finish is not taken while one did
    unfinished = [run(90_000.0, 10.0, finished=False), run(40_000.0, 24.0)]
    assert median_run(unfinished)["inputs_per_s"] == 40_000.0


def test_the_loop_alone_is_reported_from_its_own_median_round():
    from bench.worker_efficiency import median_rounds

    # GIVEN three rounds whose loop alone ranks otherwise than their model runs do
    def reading(efficiency: float, alone: float, cpu: float) -> dict:
        return {
            "efficiency_vs_model": efficiency,
            "inputs_per_s": 1000 * efficiency,
            "loop_alone_vs_model": alone,
            "loop_alone_cpu_us_per_input": cpu,
            "loop_alone_model_limit": 100.0 * efficiency,
        }

    readings = [reading(0.3, 0.5, 30.0), reading(0.2, 0.7, 23.0), reading(0.4, 0.6, 25.0)]
    # WHEN the median is taken
    median = median_rounds(readings)
    # THEN the model's run is the round of median efficiency, and the loop alone's
    # figures those of its own median round, each from one round, not mixed
    assert (median["efficiency_vs_model"], median["inputs_per_s"]) == (0.3, 300.0)
    assert median["loop_alone_vs_model"] == 0.6
    assert (median["loop_alone_cpu_us_per_input"], median["loop_alone_model_limit"]) == (25.0, 40.0)
    # AND every round's figures are beside it, in the order of their efficiency
    assert median["rounds_efficiency_vs_model"] == [0.2, 0.3, 0.4]
    assert median["rounds_loop_alone_cpu_us_per_input"] == [23.0, 30.0, 25.0]


def test_the_sections_that_run_the_platform_in_process_run_in_quick_mode():
    from bench import aws_calls, cold_start, worker_efficiency
    from bench.emulator import emulator
    from bench.model_limit import load_tensor_model, load_text_model

    # GIVEN the demo models loaded as the bench loads them, and the emulator
    text, tensor = load_text_model(), load_tensor_model()
    # WHEN the sections that build the router, the worker and the splitter from the
    # platform's own settings run, short (they are what a change to those breaks first)
    with emulator() as emu:
        calls = aws_calls.run(emu, text.runtime, True, lambda _line: None)
        cold = cold_start.run(emu, True, lambda _line: None)
    efficiency = worker_efficiency.run({tensor.name: tensor}, True)
    # THEN each measured its paths
    sync = calls["paths"]["sync_at_load"]
    assert sync["usd_per_million_inferences"]["total"] > 0
    assert cold["cold_start"]["to_first_answer_ms"] > 0
    digits = efficiency[tensor.name]
    assert digits["completed"] == digits["messages"]
    assert digits["loop_alone_vs_model"] > 0


# -- pools: one pool against a service per model ---------------------------------------


def test_the_long_tail_is_zipf_over_the_models_and_the_same_every_run():
    from bench import pools

    # GIVEN the section's workload of 2,000 requests, drawn twice
    first, again = pools.plan(2000), pools.plan(2000)
    weights = pools.zipf_weights(len(pools.MODELS))
    # THEN it is the same plan, every model is in it, and each rank is asked less than
    # the one before, near its Zipf share
    assert first == again
    assert sum(weights) == pytest.approx(1.0)
    assert weights == sorted(weights, reverse=True)
    assert weights[0] / weights[1] == pytest.approx(2.0)  # s = 1: rank 1 twice rank 2
    counts = Counter(first)
    assert set(counts) == set(pools.MODELS)
    for model, weight in zip(pools.MODELS, weights, strict=True):
        assert counts[model] / 2000 == pytest.approx(weight, abs=0.03)


def test_both_arms_run_the_same_models_in_one_pool_or_a_service_each():
    from bench import pools
    from switchyard.manifest import Manifest

    # GIVEN the manifest of each arm
    pooled_arm = Manifest.model_validate(tomllib.loads(pools.arm_manifest(pools.BUDGET_MIB)))
    dedicated = Manifest.model_validate(tomllib.loads(pools.arm_manifest(None)))
    # THEN both have exactly the section's models, the result cache off
    for manifest in (pooled_arm, dedicated):
        assert tuple(manifest.models) == pools.MODELS
        assert all(spec.result_cache_seconds == 0 for spec in manifest.models.values())
    # AND one pool of the section's budget serves them all, or each has a service
    assert list(pooled_arm.pools) == [pools.POOL]
    assert pooled_arm.pools[pools.POOL].memory_budget_mib == pools.BUDGET_MIB
    assert pooled_arm.services() == {pools.POOL: pools.MODELS}
    assert dedicated.pools == {}
    assert dedicated.services() == {m: (m,) for m in pools.MODELS}


def test_unpooled_gives_each_model_a_service_and_drops_the_pools_left_empty():
    from bench.pools import unpooled

    # GIVEN a manifest whose models a and b share pool p, and c is in pool q
    text = "\n".join(
        [
            "[pools.p]",
            'compute = "cpu"',
            "memory_budget_mib = 64",
            "",
            "[pools.q]",
            'compute = "cpu"',
            "",
            "[models.a]",
            'pool = "p"',
            'compute = "cpu"',
            "",
            "[models.b]",
            'pool = "p"',
            'instance_types = ["m7i.large"]',
            "",
            "[models.c]",
            'pool = "q"',
        ]
    )
    # WHEN a and b leave their pool
    out = tomllib.loads(unpooled(text, ["a", "b"]))
    # THEN each has a service of its own on its instance types, or the default
    assert out["models"]["a"] == {"compute": "cpu", "instance_types": ["c7i.xlarge"]}
    assert out["models"]["b"] == {"instance_types": ["m7i.large"]}
    # AND pool p, which serves no model now, is gone; q still serves c
    assert out["pools"] == {"q": {"compute": "cpu"}} and out["models"]["c"] == {"pool": "q"}


def test_worker_seconds_are_each_process_within_the_window():
    from bench.pools import most_at_once, worker_intervals, worker_seconds

    # GIVEN the autoscaler's records: a started at 0 (its log says it stopped at 50), b
    # started at 20 and still running, c started at 30, died and was replaced at 40,
    # the new process stopped by the autoscaler at 70; and d, started after the window
    def decision(at, started):
        return {"message": "scaling decision", "at": at, "started": started}

    autoscaler = [
        decision(0.0, ["worker-s-a"]),
        decision(20.0, ["worker-s-b"]),
        decision(30.0, ["worker-s-c"]),
        {"message": "worker replaced", "worker": "worker-s-c", "timestamp": _iso(40.0)},
        {"message": "worker stopped", "worker": "worker-s-c", "timestamp": _iso(70.0)},
        decision(200.0, ["worker-s-d"]),
    ]
    logs = {
        "worker-s-a": [
            {"message": "worker starting", "at": 1.0},
            {"message": "stopped", "at": 50.0},
        ],
        "worker-s-b": [{"message": "worker starting", "at": 21.0}],
        "worker-s-c": [{"message": "worker starting", "at": 31.0}],
    }
    intervals = worker_intervals(logs, autoscaler)
    # WHEN they are counted within the window from 10 to 100
    seconds = worker_seconds(intervals, 10.0, 100.0)
    # THEN each process counts the seconds it ran within it, and d none
    assert seconds == pytest.approx({"worker-s-a": 40.0, "worker-s-b": 80.0, "worker-s-c": 40.0})
    assert most_at_once(intervals, 10.0, 100.0) == 3


def _iso(at: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(at, dt.UTC).isoformat(timespec="milliseconds")


def test_a_miss_is_an_answer_whose_version_loaded_while_it_waited():
    from bench.pools import Answer, split_hits

    # GIVEN answers of two models, and loads of m1's v1 at 10 s and m2's v1 at 30 s
    def answer(model, sent, answered):
        return Answer(model, "v1", sent, answered, (answered - sent) * 1000)

    answers = [
        answer("m1", 9.0, 10.5),  # waited for m1's load
        answer("m1", 11.0, 11.1),  # after it
        answer("m2", 9.5, 10.2),  # another model's load
        answer("m2", 29.0, 30.4),  # waited for m2's
    ]
    loads = [
        {"message": "model cached", "model": "m1", "version": "v1", "at": 10.0},
        {"message": "model cached", "model": "m2", "version": "v1", "at": 30.0},
    ]
    # WHEN they are split
    hits, misses = split_hits(answers, loads)
    # THEN the misses are those that waited for their own version's load
    assert [a.sent for a in misses] == [9.0, 29.0]
    assert [a.sent for a in hits] == [11.0, 9.5]


def _arm(name: str, latencies: list[float], worker_logs: dict, waited: tuple[int, ...] = ()):
    """An arm summarised as the section summarises one, from a made-up run: a request
    a second, those of ``waited`` each waiting for a load of its model."""
    from bench.pools import MODELS, summarize

    outcomes = []
    for i, ms in enumerate(latencies):
        sent = 100.0 + i
        body = {
            "model": MODELS[i % len(MODELS)],
            "version": "v1",
            "sent": sent,
            "answered": sent + ms / 1000,
            "timings": {"queue_wait_ms": 5.0, "batch_wait_ms": 5.0 + ms / 10, "pickup_ms": 20.0},
        }
        outcomes.append(Outcome("ok", ms, 200, body))
    result = StepResult(10.0, len(outcomes), float(len(outcomes)), outcomes)
    for n, i in enumerate(waited):  # a load of request i's model, finished while it waited
        event = {"message": "model cached", "model": MODELS[i % len(MODELS)], "version": "v1"}
        worker_logs[next(iter(worker_logs))].append(
            event | {"at": 100.0 + i + 0.01, "load_seconds": 0.05 * (n + 1), "footprint_mib": 30.0}
        )
    autoscaler = [
        {"message": "scaling decision", "at": 0.0, "started": list(worker_logs)},
    ]
    counts = {"loads": len(waited), "evictions": 1, "cold_loads": dict.fromkeys(MODELS, 1)}
    return summarize(
        name,
        result,
        list(MODELS) * 10,
        worker_logs,
        autoscaler,
        counts,
        policies={"longtail": {"idle_seconds": 900}},
        cpu={"worker": 2.0, "router": 1.0, "load generator": 0.5},
        others_cpu=4.0,
    )


def _pools_section():
    from bench.pools import section

    n = 20
    pool = _arm("pool", [40.0] * (n - 2) + [300.0, 320.0], {"worker-longtail-0": []}, (18, 19))
    services = {f"worker-m{i}-0": [] for i in range(8)}
    dedicated = _arm("dedicated", [50.0] * (n - 1) + [200.0], services)
    return section(pool, dedicated, 30.0)


def test_an_arm_counts_its_answers_workers_loads_and_cost():
    # GIVEN made-up arms: one pool worker whose two loads two requests waited for,
    # and eight workers of their own, over the same 20 requests a second apart
    s = _pools_section()
    pool, dedicated = s["pool"], s["dedicated"]
    # THEN each counts its workers' seconds within its window, per 1,000 answers
    assert pool["window_seconds"] == pytest.approx(19.3)
    assert pool["worker_seconds"] == pytest.approx(19.3)
    assert dedicated["worker_seconds"] == pytest.approx(8 * 19.2)
    assert pool["worker_seconds_per_1000_answers"] == pytest.approx(966.0)
    assert dedicated["worker_seconds_per_1000_answers"] == pytest.approx(7680.0)
    assert (pool["most_workers_at_once"], dedicated["most_workers_at_once"]) == (1, 8)
    # AND the pool's misses are the requests that waited for a load
    assert pool["misses"] == {
        "count": 2,
        "p50_ms": 310.0,
        "p99_ms": 319.8,
        "stages_ms": {
            "enqueue_ms": None,
            "queue_wait_ms": 5.0,
            "batch_wait_ms": 36.0,
            "compute_ms": None,
            "pickup_ms": 20.0,
        },
    }
    assert pool["hits"]["count"] == 18 and pool["hits"]["p99_ms"] == 40.0
    assert pool["load_seconds"] == {"count": 2, "p50_seconds": 0.075, "p99_seconds": 0.1}
    assert pool["per_model"]["iris-logreg"]["footprints_mib"] == [30.0, 30.0]
    assert dedicated["misses"]["count"] == 0 and dedicated["hits"]["count"] == 20
    # AND the workers' CPU an answer leaves the load generator out
    assert pool["worker_cpu_ms_per_answer"] == 100.0
    assert pool["platform_cpu_ms_per_answer"] == 150.0
    # AND the comparison is the pool over the services
    cmp = s["comparison"]
    assert cmp["worker_seconds_ratio"] == pytest.approx(0.126)
    assert cmp["hit_p50_ratio"] == pytest.approx(0.8)
    assert cmp["p99_ratio"] == pytest.approx(316.2 / 171.5, abs=0.001)


def test_the_pools_section_renders_its_figures_and_goals():
    from bench.goals import evaluate

    # GIVEN a run with the pools section alone
    results = {"sections": {"pools": _pools_section()}}
    # WHEN the page is written and the goals judged
    text = _page(results["sections"])
    judged = {g["goal"]: g for g in evaluate(results) if g["goal"].startswith("pools")}
    # THEN the section is on the page with both arms and their ratios
    assert "## Pools: a long tail on one pool, against a service per model" in text
    assert "| worker-seconds per 1,000 answers | **966.0** | **7,680.0** | **0.13×** |" in text
    assert "| misses: p50 / p99 | 310.0 / 319.8 ms (2) | – | |" in text
    assert "| pool, misses | 5.0 ms | 36.0 ms | – | 20.0 ms |\n" in text
    assert (
        "| iris-logreg | 12 % | 10 | 40.0 / 294.8 ms | 50.0 / 50.0 ms | 1 | 30.0 / 30.0 |" in text
    )
    assert "| wine-mlp | 5 % | 10 | 40.0 / 40.0 ms | 50.0 / 50.0 ms | 1 | – |" in text
    assert "None" not in text
    # AND its three goals are judged from those figures, each with its reason
    cost, p99, hit = judged.values()
    assert (cost["met"], p99["met"], hit["met"]) == (True, True, True)
    assert cost["reason"].startswith("The pool spent 966.0 worker-seconds per 1,000 answers")
    assert "2 of the pool's 20 answers (10 %) waited for a load (p50 310 ms" in p99["reason"]
    assert hit["reason"].startswith("A hit's p50 40 ms (p99 40) over 18 hits")
    # AND a pool that cost the services' worker-seconds does not meet the first
    slow = _pools_section()
    slow["comparison"]["worker_seconds_ratio"] = 0.5
    assert not next(
        g for g in evaluate({"sections": {"pools": slow}}) if g["goal"] == cost["goal"]
    )["met"]


# -- noisy neighbour: one tenant's sync calls while another floods the model ----------


def _noisy_step(p50: float, p99: float, miss_202: int = 0, stages: dict | None = None) -> dict:
    return {
        "sent": 20,
        "ok": 20 - miss_202,
        "miss_202": miss_202,
        "errors": 0,
        "timeouts": 0,
        "p50_ms": p50,
        "p99_ms": p99,
        "max_ms": p99,
        "stages_p50": stages or {"queue_wait_ms": 5.0, "batch_size": 1.0},
    }


def _noisy_record(completed_at: float, compute_ms: float, size: float = 64.0):
    from types import SimpleNamespace

    return SimpleNamespace(
        status="done",
        completed_at=completed_at,
        outputs=[[0.0]],
        timings={"compute_ms": compute_ms, "batch_size": size},
    )


def _noisy_section(under_p99: float = 400.0, miss_202: int = 0) -> dict:
    from bench.noisy_neighbour import a_figures, section

    # A's ten requests: submitted at 100, answered 101 to 110; B's window 103.5 to 106.5,
    # within which A's batches are an eighth of its whole ones
    records = [
        _noisy_record(101.0 + i, 50.0, 8.0) if 3 <= i <= 5 else _noisy_record(101.0 + i, 200.0)
        for i in range(10)
    ]
    a_async = a_figures(records, 100.0, (103.5, 106.5))
    return section(
        _noisy_step(50.0, 100.0),
        _noisy_step(150.0, under_p99, miss_202, {"queue_wait_ms": 40.0, "batch_size": 64.0}),
        a_async | {"submission_failures": 0, "submit_seconds": 2.0},
        {"status": "succeeded", "lines": 30, "lines_per_s": 10.0},
        {"at_start": {"realtime": 900, "batch": 3}, "at_end": {"realtime": 400, "batch": 3}},
        {"a": "acme", "b": "globex", "seconds": 10.0, "job_lines": 30},
    )


def test_a_floods_drain_and_one_batchs_time_are_read_from_its_results():
    # GIVEN A's results, three of them answered within B's window
    s = _noisy_section()
    a = s["a_async"]
    # THEN A's drain runs from its first submission to its last result
    assert a["done"] == 10 and a["drain_seconds"] == 10.0 and a["inputs_per_s"] == 1.0
    # AND one batch's time is the median model time of A's whole batches (a sync call
    # may find one running), and those within B's window are reported apart
    assert a["answered_in_b_window"] == 3 and a["answered_after_b_window"] == 4
    assert a["batch_ms"] == 200.0 and a["batch_size"] == 64.0
    assert a["in_window_batch_ms"] == 50.0 and a["in_window_batch_size"] == 8.0
    # AND the bound is 1.5x B's p99 alone plus that batch
    assert s["p99_bound_ms"] == 350.0
    assert s["p99_over_bound"] == pytest.approx(400 / 350, abs=0.001)


def test_the_noisy_neighbour_section_renders_and_its_goal_judges_202s_and_the_p99():
    from bench.goals import evaluate

    # GIVEN a run with the section alone, B's p99 under the flood within its bound
    results = {"sections": {"noisy_neighbour": _noisy_section(under_p99=300.0)}}
    # WHEN the page is written and the goals judged
    text = _page(results["sections"])
    judged = [g for g in evaluate(results) if g["goal"].startswith("noisy neighbour")]
    # THEN the section is on the page with both of B's steps and the bound
    assert "## Noisy neighbour: one tenant's sync calls while another floods the model" in text
    assert "| p99 | 100.0 ms | **300.0 ms** |" in text
    assert "= **350.0 ms**; B's p99 under the flood is **0.86×** of it." in text
    assert "None" not in text
    # AND both goals are met, each with its reason
    [goal] = judged
    assert goal["met"] and goal["measured"] == pytest.approx(300 / 350, abs=0.001)
    assert goal["reason"].startswith("Globex: 20 of 20 answered (0 202s, 0 errors), p99 300 ms")
    assert "bound 1.5 × 100 + a whole batch of 200 ms = 350 ms" in goal["reason"]

    # AND a p99 over the bound is not met, nor is one 202 within it
    def judge(section: dict) -> dict:
        results = {"sections": {"noisy_neighbour": section}}
        return next(g for g in evaluate(results) if g["goal"].startswith("noisy"))

    assert not judge(_noisy_section(under_p99=500.0))["met"]
    refused = judge(_noisy_section(under_p99=300.0, miss_202=1))
    assert not refused["met"] and refused["measured"] == math.inf


def test_a_merged_rerun_of_the_platform_is_compared_with_the_peers_last_figures(tmp_path):
    import json

    from bench.__main__ import merged

    def steps(rates: dict[float, bool]) -> list[dict]:
        return [{"rate": r, "p99_ms": 100.0, "sustained": ok} for r, ok in rates.items()]

    def end_to_end(rate: float) -> dict:
        on = {"sustainable_rate": rate, "steps": steps({40.0: True, 80.0: rate >= 80})}
        return {"end_to_end": {"batching_on": on}}

    litserve = {"sustainable_rate": 80.0, "steps": steps({40.0: True, 80.0: True})}
    # GIVEN a run of the platform at 40 req/s beside LitServe's at 80
    first = {"sections": {**end_to_end(40.0), "peer_litserve": litserve}, "timing": {}}
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(first))
    # WHEN the platform alone is rerun, and sustains 80
    fresh = {
        "sections": end_to_end(80.0),
        "timing": {"end_to_end": 1.0},
        "machine": "m1",
        "failed_sections": [],
    }
    report = merged(path, fresh)
    # THEN the comparison is its new figure against LitServe's last
    assert report["comparison"]["platform_sustainable_rate"] == 80.0
    assert report["comparison"]["rate_ratio"] == 1.0
    assert report["comparison"]["headline_rate"] == 80.0


def test_a_merged_rerun_replaces_its_sections_and_lists_each_once(tmp_path):
    import json

    from bench.__main__ import merged

    def run(sections: dict, machine: str) -> dict:
        return {
            "sections": sections,
            "timing": dict.fromkeys(sections, 1.0),
            "machine": machine,
            "failed_sections": [],
        }

    # GIVEN a full run of two sections
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(run({"pools": {"x": 1}, "noisy_neighbour": {"x": 1}}, "m0")))
    # WHEN one section is rerun, then it and the other
    path.write_text(json.dumps(merged(path, run({"noisy_neighbour": {"x": 2}}, "m1"))))
    both = run({"noisy_neighbour": {"x": 3}, "pools": {"x": 3}}, "m2")
    report = merged(path, both)
    # THEN each section holds its last figures, and is listed once, at its last rerun
    assert report["sections"] == {"pools": {"x": 3}, "noisy_neighbour": {"x": 3}}
    assert [(r["sections"], r["machine"]) for r in report["reruns"]] == [
        (["noisy_neighbour", "pools"], "m2")
    ]
    # AND an earlier rerun of other sections stays listed
    path.write_text(json.dumps(report))
    again = merged(path, run({"pools": {"x": 4}}, "m3"))
    assert [(r["sections"], r["machine"]) for r in again["reruns"]] == [
        (["noisy_neighbour"], "m2"),
        (["pools"], "m3"),
    ]


def test_the_loop_alone_runs_on_one_core_and_on_all_in_turns_and_gives_the_cores_back():
    import os

    from bench.worker_efficiency import on_one_core

    # GIVEN a process that may use every core it has, and a run that says on how many
    # cores it ran (and those the threads it starts would have)
    cores = sorted(os.sched_getaffinity(0))
    seen: list[tuple[set[int], set[int]]] = []

    def measure() -> dict:
        started: list[set[int]] = []
        thread = threading.Thread(target=lambda: started.append(os.sched_getaffinity(0)))
        thread.start()
        thread.join()
        seen.append((os.sched_getaffinity(0), started[0]))
        on = len(seen[-1][0])
        return {"finished": True, "inputs_per_s": 1000.0 / on, "cpu_us_per_input": 10.0 * on}

    # WHEN the loop is measured on one core beside all of them, three times each
    out = on_one_core(measure, 3)
    # THEN the runs took turns, the threads a run started had its cores, and the
    # process has every core back; each's figures are its own runs'
    if len(cores) < 2:
        assert out == {} and len(seen) == 0
        return
    assert [len(mine) for mine, _ in seen] == [len(cores), 1] * 3
    assert all(mine == started for mine, started in seen)
    assert sorted(os.sched_getaffinity(0)) == cores
    assert out["loop_alone_cores"] == len(cores)
    assert out["loop_alone_one_core_cpu_us_per_input"] == 10.0
    assert out["loop_alone_every_core_cpu_us_per_input"] == 10.0 * len(cores)
    assert out["loop_alone_one_core_inputs_per_s"] == 1000.0
    assert out["loop_alone_one_core_runs_cpu_us_per_input"] == [10.0] * 3


def test_the_loop_alone_on_one_core_renders_for_each_model_that_ran_so():
    # GIVEN a worker-efficiency section where digits-cnn's loop alone also ran on one
    # core beside both, and minilm-embed's not
    results = _full_results()
    we = results["sections"]["worker_efficiency"]
    we["digits-cnn"] |= {
        "loop_alone_cores": 2,
        "loop_alone_one_core_cpu_us_per_input": 24.3,
        "loop_alone_every_core_cpu_us_per_input": 27.6,
        "loop_alone_one_core_inputs_per_s": 43_567.0,
        "loop_alone_every_core_inputs_per_s": 39_043.0,
    }
    for key in list(we["minilm-embed"]):
        if "_one_core_" in key or "_every_core_" in key:
            del we["minilm-embed"][key]
    # WHEN the page is written
    text = markdown(results, [])
    # THEN the paragraph gives digits-cnn's figures on one core and on both, and
    # nothing of minilm-embed's
    said = text.split("On one core: ")[1].split("\n\n")[0]
    assert "on one of the machine's 2 cores and on all of them in turns" in said
    assert (
        "digits-cnn: 24.3 µs of CPU an input on one core against 27.6 on all "
        "(43,567.0 inputs/s against 39,043.0)." in said
    )
    assert "minilm-embed" not in said
