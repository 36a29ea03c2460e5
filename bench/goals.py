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
    """AWS calls a sync request makes on its own (the router's, and a result write
    of its own where the worker makes one: a PutItem); the worker's per-batch calls,
    among them the one insert of a batch's sync results, are shared by a batch at
    load."""
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
        "the machine: on two shared cores the model's limit, measured beside the worker, "
        "moves between runs by as much as the goal's margin (1.16× in the run this page "
        "shows, where it read 191 inputs/s; 0.77 to 0.91× in four in-process runs an "
        "hour before it, where it read 215 to 296; 1.03× and 0.87× in earlier runs)",
    ),
    Goal(
        "worker at saturation vs the model's limit at the batch sizes it formed, digits-cnn",
        _path("sections", "worker_efficiency", "digits-cnn", "efficiency_vs_model"),
        0.5,
        False,
        "×",
        "the worker's own Python, which one interpreter lock serialises. Each thread's CPU "
        "time, 3 runs of 6,400 messages: the intake's receive, decode and check 17 to 18 µs "
        "a message, the model's thread outside the model 7 to 22 (triage, the result record "
        "7, the timings), the finisher 9 to 10 (the prediction log's record 3.5 of it), the "
        "model call's own Python (its tensor in, its outputs out) 7: ~50 µs a message, "
        "against the model's 14 (0.87 ms a batch of 64 alone). In the worker that call takes "
        "3.6 to 4.1 ms: the model lets go of the lock while it computes and waits to take it "
        "back behind the intake's and the finisher's Python (with one compute thread, beside "
        "a thread spinning in Python, 1.6 ms became 12.4 ms). A switch interval of 0.1 or "
        "0.02 ms instead of 5 cut the model call's share of the worker's time from 0.63-0.83 "
        "to 0.33-0.55 and left the rate where it was (7,700 to 11,400 inputs/s either way): "
        "what the call saved went to waiting for the lock elsewhere. The rate is bounded by "
        "the Python all three threads run under one lock; 0.5× needs it under ~35 µs a "
        "message, or the model in a process of its own. Keeping the forming batch's input "
        "counts as messages come and go, instead of summing the batch at each question "
        "(a profiler put a sixth of the Python there), left the rate where it was (three "
        "alternating runs of three: 7,200-10,500 inputs/s with it, 7,900-10,800 without): "
        "not kept. With OMP_WAIT_POLICY=PASSIVE the worker's CPU a message fell from ~160 "
        "to ~100 µs and its rate rose 15-25 %, but the bare model's limit halved (0.87 to "
        "1.7 ms a batch of 64): 0.27× against 0.15× only by moving the yardstick",
    ),
    Goal(
        "AWS calls of a sync request of its own (router, and a result write of its own), "
        "16 callers",
        _sync_calls_at_load,
        3,
        True,
        "",
        "the router's looks for the result: a request's own calls are its enqueue and its "
        "looks (its result is inserted with its batch's others, one call per batch). The "
        "looks are at the median and the 90th percentile of the model's recent answer "
        "times (the last 64 of the last 5 s; the first at the last 8's median where that "
        "is earlier), then a quarter of the wait apart. At 16 closed-loop callers those "
        "times spread from ~90 to ~300 ms, so a request takes about two looks: 1.84 in "
        "this page's run (2.84 calls). With a third look at the 80th percentile, as "
        "before 2026-11-26 10:20: 2.05 on the page before, 1.80, 2.09 and 2.19 in the "
        "runs before that, 1.84 to 2.21 over five in-process runs of 128. Replayed on "
        "recorded answer times (6 runs of 160 requests) two looks take 1.84 a request "
        "against 1.95 and pick answers up 38 ms after they are ready against 37; six "
        "in-process runs of 128 each gave 1.73 to 2.13 (mean 1.92) against 1.63 to 2.67 "
        "(mean 2.20). The goal stays inside the spread of single runs",
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
        "($3.12 per million in the run this page shows)",
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
        "the handler's import and init, with nothing of the request path left to defer: "
        "FastAPI with pydantic ~180 ms (its OpenAPI models ~45 of it; it also imports "
        "pydantic.v1 while it builds the routes, ~16), botocore ~60 ms (its documentation "
        "helpers among it), the settings and schemas ~30 ms, then the two clients (~57 "
        "ms: the first lists botocore's ~400 service folders twice, ~23 ms) and the app's "
        "routes (~25 ms); the first request adds ~30 ms. The init runs with the cyclic "
        "collector held off and freezes what it made (~40 ms less: three alternating "
        "rounds of three starts, 412 to 422 ms against 451 to 473). The figure moves "
        "with the machine: 445 and 447 ms in this page's runs (2026-11-26 06:08 and "
        "06:39), 659 ms on the page before while the machine was slower, 456 to 561 ms "
        "in runs before those without the collector held off",
    ),
    Goal(
        "router CPU per warm request",
        _path("sections", "cold_start", "warm", "router_cpu_ms_per_request"),
        1.0,
        True,
        " ms",
        "FastAPI's request handling and a sync endpoint's hop to a thread; the figure "
        "moves with the machine (0.84 ms in the run this page shows, 0.67 ms in the one "
        "before)",
    ),
    Goal(
        "sustainable rate (p99 < 500 ms), platform vs LitServe",
        _path("comparison", "rate_ratio"),
        0.5,
        False,
        "×",
        "75 req/s against LitServe's 140 in this page's end-to-end and peer sections "
        "(2026-11-26 04:22-04:40, 0.54×), 60 against 140 in the run an hour before it "
        "(the look schedule's window of 64 alone; see the sync-calls goal); 70 against "
        "140 at 01:29-01:53; 60 against 140 an hour before that "
        "(its ladder then took a refining step that failed once, at 65 req/s, as the "
        "rate: such a step is now tried twice, as a rung is); 70 against 120 at "
        "2026-11-25 22:53-23:19; 75 against 140 at 16:17-16:36; 60 against 120 "
        "before the ladder confirmed a rung that "
        "failed and halved the gap past it, and before the worker looked at the queue "
        "once more before a running batch's end; 30 against 80, 20 against 80, 20 "
        "against 120 and 30 against 100 before the emulator wrote plain PutItems and "
        "queued plain SendMessages directly). CPU is the bound: at 75 req/s every "
        "answered request costs 22 ms of CPU across the platform's processes (worker 10, "
        "router 5, emulator 4, load generator 2) against LitServe's 14 at 140 req/s "
        "(this page's run: 21.8 ms at 75 req/s, the worker 10.3, the router 4.6, the "
        "emulator 4.2, the load generator 2.3; 23.7 ms at 70 req/s in the run of "
        "01:29-01:53)",
    ),
    Goal(
        "micro-batching gain in sustainable rate",
        _path("sections", "end_to_end", "batching_gain"),
        2.5,
        False,
        "×",
        "the share of a request's CPU that batching does not touch: it saves model time "
        "only, and the emulator's, the router's and the load generator's share (~11 of "
        "22 ms of CPU at 75 req/s) is the same with it or without it. This page's run: "
        "75 req/s sustained with batching (p99 455 ms at 70, 429 at 75 on its second try; "
        "80 failed twice, 600 and 698 ms) and 35 without it (p99 418 ms; 38 and 40 failed "
        "twice): 2.14×. The page before: 75 against 32 (2.34×); earlier runs 2.0 to 2.5× "
        "(60 to 75 with, 30 to 32 without). The ladder's rungs are 5 req/s apart there: "
        "80 sustained with batching would be the goal against 32",
    ),
    Goal(
        "200 async predicts of 16 sentences, submitted at once, vs the model's limit",
        _burst(16),
        0.85,
        False,
        "×",
        "the model inside the worker, on cores it shares: a drain runs one batch of 32 "
        "after another, and the worker takes ~21-23 of the ~28 CPU-seconds two cores give "
        "a 14 s drain, the emulator, the router, the load generator and the supervisor "
        "~3; a batch took ~132 ms against ~119 alone. This page's run (a batch's large "
        "results in one S3 object per tenant): 0.93, 0.88 and 0.86 (242, 236 and 233 "
        "inputs/s, the emulator 1.31 to 1.37 CPU-s) against a limit that read 257 to "
        "279; an hour before, one object per result: 0.83, 0.85 and 0.90 (the emulator "
        "1.5); the page before: 0.84, 0.83 and 0.77; earlier runs 0.72 to 0.90. The limit, "
        "measured before and after each burst, moves by as much as the goal's margin. "
        "The intake reads which requests of a full forming batch are answered already "
        "while the model runs the batch before (the model's idle time between batches "
        "0.7 s a burst before, 0.03 s after). OMP_WAIT_POLICY=PASSIVE in the yardstick's "
        "process too gave 0.82, 0.84 and 0.77 at the same drain rates, only by moving "
        "the limit: not kept",
    ),
    Goal(
        "1,000 async one-sentence predicts, submitted at once, vs the model's limit",
        _burst(1),
        0.4,
        False,
        "×",
        "submission through the emulator on the model's two cores: each request is a "
        "router call, a queued-record write and an enqueue (the worker writes results 25 "
        "to a call). This page's run: 0.53, 0.53 and 0.54 (148, 139 and 147 inputs/s; "
        "drains of 6.7 to 7.2 s; the router 2.3 to 2.6 CPU-s, the emulator 2.2 to 2.3, "
        "the worker 7.3 to 7.8). The page before: 0.39, 0.42 and 0.39 while the machine "
        "was slower (the router 3.9 to 4.4 CPU-s, the emulator 3.4 to 3.6 on the same "
        "path); the runs before it 0.44 to 0.52, once the emulator applied the worker's "
        "UPDATEs of queued records as a read and a put (0.08 ms a statement against "
        "moto's update_item's 1.6) and answered a batch's status reads from the table "
        "(its CPU per burst 5.0-5.5 s before, 2.5-2.6 after)",
    ),
    Goal(
        "16 closed-loop sync callers of one sentence, answered vs the model's limit",
        _path("sections", "backlog", "closed_loop", "share_of_model_limit"),
        0.35,
        False,
        "×",
        "a one-sentence request's round trip beside the model on two cores: 81.7 answers/s "
        "at p50 192 ms in this page's run against a model limit that read 272 to 280 "
        "inputs/s (0.30×); 82.5 at p50 193 ms an hour before against 256 to 266 (0.32×), "
        "79.5 on the page before against 275 to 278 (0.29×), 74 to 82 answers/s (0.25 to "
        "0.32×) in the runs before those, as the "
        "limit read 248 to 297. The model is busy ~89 % of such a run (two 20 s runs: "
        "batches of 5.5 on average, ~62 ms each against ~30 alone), so what it lacks is "
        "CPU, not work: every process shares the two cores. Of an answer's time (a 20 s "
        "run, p50 of the results' own timings), ~30 ms is the queue, ~41 the wait for "
        "the batch before, ~72 its batch of ~7 (~39 alone) and ~60 the router's "
        "pick-up of the stored result and the HTTP round trip (the looks pick an answer "
        "up ~37 ms after it is stored, replayed on recorded answer times): the callers "
        "fall into two or three groups whose batches take turns, and the model waits "
        "while a group's answers travel. Each request pays a message's send, receive and "
        "delete, its share of a batch's result write and its router's looks through the "
        "emulator on the same cores. One torch thread in the worker instead of two "
        "(three alternating pairs of 20 s runs): 80.5, 76.6 and 73.4 answers/s against "
        "73.9, 74.8 and 75.8, within the noise",
    ),
    Goal(
        "sustainable rate, platform vs Ray Serve (@serve.batch)",
        _path("comparison_rayserve", "rate_ratio"),
        0.5,
        False,
        "×",
        "as against LitServe: the emulator, the router and the AWS calls around the "
        "model share the two cores with it. Runs so far: 75 req/s against Ray Serve's 100 "
        "(0.75×, 2026-11-26 04:22-04:45), 60 against 85 (0.71×, an hour before), 70 "
        "against 85 (0.82×, 01:29-01:53), 60 against 85 (0.71×, an hour before that), 70 "
        "against 85 (0.82×, 2026-11-25 22:53-23:19), 75 against 80 (0.94×, 16:17-16:36), 60 "
        "against 80, 20 against 40, 20 against 60, 30 against 60",
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
