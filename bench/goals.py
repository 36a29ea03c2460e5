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
        "looks are at the median, 80th and 95th percentile of the model's recent answer "
        "times (the last 64 of the last 5 s; the first at the last 8's median where that "
        "is earlier), then further apart. At 16 closed-loop callers those times spread "
        "from ~90 to ~300 ms (median ~165), so a request takes about two looks and the "
        "goal sits inside the spread of single runs: 1.80 looks in this page's run (2.80 "
        "calls), 2.09 and 2.19 in the two runs before it, 1.84 to 2.21 (mean 1.98) over "
        "five in-process runs of 128 requests on 2026-11-26 and 1.88 to 2.11 over three "
        "of 512. Looking first at a later percentile saves looks and answers later: "
        "replayed on recorded answer times (6 runs of 160 requests), the 60th first "
        "takes 1.86 looks a request against 1.95 and picks answers up 42 ms after they "
        "are ready against 37, the 65th 1.75 looks and 44 ms. The first look at the last "
        "8's median keeps the platform's sustainable rate: without it, p99 at 65 and 70 "
        "req/s read 464 to 799 ms (fresh platform, steps of 10 s), with it 353 to 575",
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
        "in this page's run the platform sustains 75 req/s with batching (p99 352 ms at "
        "70, 490 at 75) and 32 without it (2.34×; 35 and 40 failed twice); 60 against 30 "
        "in the run an hour before it (the look schedule's window of 64 alone). Over the "
        "last 16 answers: 30 without, 70 with (2.33×: 75 req/s failed twice, p99 556 and "
        "799 ms), 60 in the run an hour before that (2.0×, a refining step at 65 req/s "
        "failed once and was not tried again), 70 in the run before that (2.33×) and 75 "
        "in one before (2.50×, the goal's edge; the ladder's rungs are 5 req/s "
        "apart there); 60 against 30 before the worker looked at the queue once more "
        "before a running batch's end, so that what arrives while the model runs joins "
        "the next batch, and before the ladder halved the gap past its first rung not "
        "sustained). Batching saves model time only: the emulator's, the router's and "
        "the load generator's share of a request (~11 of 22 ms of CPU at 75 req/s) is "
        "the same with it or without it",
    ),
    Goal(
        "200 async predicts of 16 sentences, submitted at once, vs the model's limit",
        _burst(16),
        0.85,
        False,
        "×",
        "the model inside the worker: the worker took 21.5 to 22.8 CPU-s for the "
        "burst's 3,200 sentences, against the emulator's 2.1 to 2.3 and the router's "
        "0.6; the model ran one batch after another through the drain, and the burst lost "
        "what its batches took beyond the model's own limit while those processes shared "
        "the two cores with it (132 ms a batch of 32 against ~119 alone). The runs gave "
        "0.76, 0.82 and 0.80; "
        "the model's own limit, measured before and after each, moved between 240 and "
        "286 inputs/s. The intake now reads which requests of a full forming batch are "
        "answered already while the model runs the batch before: the model's idle time "
        "between batches fell from 0.7 s a burst to 0.03 s (in-process: 14.5 to 15.0 s "
        "to the last result before, 14.2 after). In the run of 2026-11-25 22:45 the drains ran at "
        "228, 232 and 208 inputs/s (the worker 21.2 to 23.3 CPU-s, the emulator 2.1 to "
        "2.3), as fast as the runs before (213 to 228), and gave 0.76 each against a "
        "limit that read 264 to 318. With OMP_WAIT_POLICY=PASSIVE (torch's threads sleep "
        "at once instead of spinning) they ran at 222, 226 and 213 inputs/s, the "
        "same, and gave 0.82, 0.84 and 0.77 only because the limit then read 272 to "
        "279: not kept, as it moves the yardstick, not the platform. The run of "
        "2026-11-26 00:33 gave 0.80, 0.80 and 0.90 (210, 213 and 235 inputs/s; the worker 21 to 23 "
        "CPU-s), after the emulator stopped running moto's update_item for each async "
        "result (its CPU per burst 2.1-2.3 s before, 1.5-1.7 s now): the worker takes "
        "about 22 of the 28 CPU-seconds two cores give a 14 s drain, the emulator, the "
        "router, the load generator and the supervisor 3, and the goal needs the model "
        "to run within 15 % of its limit alone while they share the cores. This page's run: "
        "0.72, 0.80 and 0.86 (182, 223 and 242 inputs/s, against a limit that read 248 to "
        "288)",
    ),
    Goal(
        "1,000 async one-sentence predicts, submitted at once, vs the model's limit",
        _burst(1),
        0.4,
        False,
        "×",
        "0.39, 0.42 and 0.39 in this page's run (97, 106 and 102 inputs/s; drains of 9.4 "
        "to 10.3 s), while the machine was slower: the router took 3.9 to 4.4 CPU-s and "
        "the emulator 3.4 to 3.6 per burst, against 2.5-2.9 and 2.3-2.6 an hour before on "
        "the same code path (an async request makes no looks). Met in the run before: "
        "0.48, 0.44 and 0.49 (132, 128 and 130 inputs/s), once the "
        "emulator applied the worker's UPDATEs of queued records as a read and a put "
        "(0.08 ms a statement against moto's update_item's 1.6) and answered its "
        "BatchGetItem of a batch's statuses from the table (0.5 ms for 25 keys against "
        "9.5): the emulator's CPU per burst fell from 5.0-5.5 s to 2.5-2.6. Before: "
        "submission: each request is a router call, a queued-record write and an "
        "enqueue through the emulator (the worker writes results 25 to a call): per "
        "burst the emulator took 4.9 to 5.1 s of CPU and the router 2.5 to 2.6 s, on the "
        "two cores the model needs ~8 CPU-s of; the runs gave 0.49, 0.47 and 0.47 (0.40, "
        "0.39 and 0.39 in a run whose model limit read 300 to 315 inputs/s: the drains "
        "took 8.1 to 8.6 s in both). This page's run gave 0.43, 0.39 and 0.36: 118, "
        "115 and 108 inputs/s (drains of 8.5 to 9.3 s; the emulator 5.0 to 5.5 CPU-s, "
        "the router 2.5 to 2.8) against a limit that read 264 to 301; the run before "
        "gave 0.38, 0.41 and 0.38 at 110 to 120 inputs/s",
    ),
    Goal(
        "16 closed-loop sync callers of one sentence, answered vs the model's limit",
        _path("sections", "backlog", "closed_loop", "share_of_model_limit"),
        0.35,
        False,
        "×",
        "78.9 answers/s at p50 194 ms in this page's run, against a model limit that read "
        "248 to 249 inputs/s (0.32×); 80.7 at p50 187 ms an hour before it (0.31×), both "
        "with the router's looks timed by its last 64 answers; over the last 16: 76.5 at "
        "p50 203 ms (limit 277 to 294, 0.27×) and 74 at p50 209 ms (0.25×); "
        "before those 82 at p50 189 ms (limit "
        "288 to 297, 0.28×) and 82 at p50 188 ms (limit 250 to 264, 0.32×; 78 at "
        "200 ms before the worker looked at the queue once more before a running batch's "
        "end; 67 at 230 ms before the emulator's direct PutItem and SendMessage). Of an "
        "answer's time (a 20 s run, p50 of the results' own timings), ~30 ms is the "
        "queue, ~41 the wait for the batch before, ~72 its batch of ~7 (~39 alone: "
        "every process shares the two cores) and ~60 the router's pick-up of the stored "
        "result and the HTTP round trip: the callers fall into two or three groups whose "
        "batches take turns, and the model waits while a group's answers travel; each "
        "one-sentence request pays a message's send, receive and delete, its share of a "
        "batch's result write and its router's looks through the emulator on the same "
        "two cores as the model",
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
