"""The performance goals the benchmarks are held to, as data: where each figure is in
``benchmarks.json``, the target, and why a goal the last run did not meet is not met
(what stands in the way, as measured). The report renders them as one table."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Results = dict[str, Any]


def _path(*keys: str | int) -> Callable[[Results], Any]:
    def get(results: Results) -> Any:
        value: Any = results
        for key in keys:
            if not isinstance(value, dict | list):
                return None
            try:
                value = value[key]  # type: ignore[index]
            except (KeyError, IndexError, TypeError):
                return None
        return value

    return get


def _burst(inputs_per_request: int) -> Callable[[Results], Any]:
    def get(results: Results) -> Any:
        for burst in _path("sections", "backlog", "bursts")(results) or []:
            if burst.get("inputs_per_request") == inputs_per_request:
                return burst.get("median_share_of_model_limit")
        return None

    return get


def sync_calls_of_its_own(path: dict[str, Any]) -> float | None:
    """AWS calls a sync request makes on its own (the router's, and the worker's
    result write); the worker's per-batch calls are shared by a batch at load."""
    calls = path.get("per_inference")
    if not calls:
        return None
    router = sum(calls.get("router", {}).values())
    return round(router + calls.get("worker", {}).get("dynamodb:PutItem", 0.0), 2)


def _sync_calls_at_load(results: Results) -> Any:
    path = _path("sections", "aws_calls", "paths", "sync_at_load")(results)
    return sync_calls_of_its_own(path) if path else None


@dataclass(frozen=True)
class Goal:
    what: str
    measured: Callable[[Results], Any]
    target: float
    at_most: bool  # True: the figure must not exceed the target
    unit: str
    unmet_because: str  # what stands in the way, from the measurements
    unmeasured_because: str = ""

    def met(self, value: Any) -> bool | None:
        if not isinstance(value, int | float):
            return None
        return value <= self.target if self.at_most else value >= self.target


GOALS = (
    Goal(
        "worker at saturation vs the model's limit at the batch sizes it formed, minilm-embed",
        _path("sections", "worker_efficiency", "minilm-embed", "efficiency_vs_model"),
        0.95,
        False,
        "×",
        "the machine: the same section measured 1.01× in the run before and 1.00× in a run "
        "minutes after this one; on two shared cores the model's limit, measured beside the "
        "worker, moves between runs by as much",
    ),
    Goal(
        "worker at saturation vs the model's limit at the batch sizes it formed, digits-cnn",
        _path("sections", "worker_efficiency", "digits-cnn", "efficiency_vs_model"),
        0.5,
        False,
        "×",
        "the model takes ~1.3 ms for 64 inputs and the worker's Python costs ~70 µs per "
        "message (decode and validate the message, build its result, store, log): on two "
        "cores under one interpreter lock the intake and finisher threads overlap the model "
        "only in part",
    ),
    Goal(
        "AWS calls of a sync request of its own (router, and its result write), 16 callers",
        _sync_calls_at_load,
        3,
        True,
        "",
        "the router's looks for the result: enqueue, result write and one look make 3, and "
        "at load the router looks ~3.7 times, since an answer's time varies with the batch "
        "it joins (about 0.6 s in this in-process harness on two cores) and the looks come "
        "from 0.8x the usual time, then a quarter of it apart; one at a time a request makes "
        "3.2 (1.2 looks), and the result cache costs "
        "inputs seen once nothing",
    ),
    Goal(
        "AWS request cost per million sync inferences (SQS, DynamoDB, S3, Firehose), 16 callers",
        _path(
            "sections", "aws_calls", "paths", "sync_at_load", "usd_per_million_inferences", "total"
        ),
        2.5,
        True,
        "$",
        "DynamoDB writes: the result record of a 384-float embedding is two write units "
        "(1.5 KB packed); one at a time, the worker's per-batch calls are per request "
        "($3.14 per million)",
    ),
    Goal(
        "empty receives per inference, async burst",
        _path("sections", "aws_calls", "paths", "async_burst", "sqs_empty_receives_per_inference"),
        0.1,
        True,
        "",
        "",
    ),
    Goal(
        "router cold start, import to first answer (deployed layout)",
        _path("sections", "cold_start", "cold_start", "to_first_answer_ms"),
        500,
        True,
        " ms",
        "importing FastAPI (~270 ms) and botocore (~370 ms, its client module pulls in its "
        "documentation helpers) in CPython on this machine; boto3's transfer layer and S3's "
        "client are no longer on the path",
    ),
    Goal(
        "router CPU per warm request",
        _path("sections", "cold_start", "warm", "router_cpu_ms_per_request"),
        1.0,
        True,
        " ms",
        "FastAPI's request handling and the JSON encoding of 384 floats; the figure moves "
        "with the machine (0.95 ms in the run before, 1.06 ms in a run minutes after this "
        "one)",
    ),
    Goal(
        "sustainable rate (p99 < 500 ms), platform vs LitServe",
        _path("comparison", "rate_ratio"),
        0.5,
        False,
        "×",
        "CPU: every request also pays the emulator (a Python process doing SQS and "
        "DynamoDB), the router and the AWS calls around the model, on the same two cores",
    ),
    Goal(
        "micro-batching gain in sustainable rate",
        _path("sections", "end_to_end", "batching_gain"),
        2.5,
        False,
        "×",
        "model time is the smaller part of a request's CPU here, and batching saves model "
        "time only",
    ),
    Goal(
        "200 async predicts of 16 sentences, submitted at once, vs the model's limit",
        _burst(16),
        0.85,
        False,
        "×",
        "the worker process spends ~1.3 s of CPU per 1 s of model time (decoding, result "
        "writes of 1.5 KB each, the emulator's calls), and the router and emulator share the "
        "two cores while the burst is submitted; the runs spread widely (0.72, 0.58, 0.53 "
        "here; 0.73 to 0.76 in earlier runs) as the model's own limit moved from 189 to 241 "
        "inputs/s between measurements",
    ),
    Goal(
        "1,000 async one-sentence predicts, submitted at once, vs the model's limit",
        _burst(1),
        0.4,
        False,
        "×",
        "submission: each request is a router call, a queued-record write and an enqueue "
        "through the emulator; the 1,000 submissions take most of the run",
    ),
    Goal(
        "16 closed-loop sync callers of one sentence, answered vs the model's limit",
        _path("sections", "backlog", "closed_loop", "share_of_model_limit"),
        0.35,
        False,
        "×",
        "each answer waits for its batch, its result write and the router's next look at "
        "the results table; with one sentence a request, every input pays a message's "
        "receive, delete and result write through the emulator on the same two cores",
    ),
    Goal(
        "sustainable rate, platform vs Ray Serve (@serve.batch)",
        _path("comparison_rayserve", "rate_ratio"),
        0.5,
        False,
        "×",
        "as against LitServe: the emulator, the router and the AWS calls around the model "
        "share the two cores with it",
    ),
)


def evaluate(results: Results) -> list[dict[str, Any]]:
    """Each goal with its measured value and whether it is met (None: not measured)."""
    out = []
    for goal in GOALS:
        value = goal.measured(results)
        met = goal.met(value)
        out.append(
            {
                "goal": goal.what,
                "target": f"{'≤' if goal.at_most else '≥'} "
                + (f"${goal.target:g}" if goal.unit == "$" else f"{goal.target:g}{goal.unit}"),
                "measured": value,
                "met": met,
                "why_not": (goal.unmeasured_because or "its section did not run")
                if met is None
                else ("" if met else goal.unmet_because),
            }
        )
    return out
