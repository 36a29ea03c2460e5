"""The performance goals the benchmarks are held to, as data: where each figure is in
``benchmarks.json``, the target, and the goal's reason: what the run measured about
it, in at most three sentences worked out from the run's own figures, so that a fresh
run states its own. The report renders them as one table.

What earlier runs measured, and what was tried against a goal not met, is kept on
``docs/benchmarks-history.md``, not here."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from bench.common import cpu_step, fmt, keyed

Results = dict[str, Any]
Reason = Callable[[Results], str | None]

# The processes a reason names by their CPU, largest first; the others are summed.
PROCESSES_NAMED = 3


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


# -- the reasons' wording --------------------------------------------------------------


def _sentences(*parts: str | None) -> str | None:
    """The parts given as sentences, each begun with a capital and ended with a full
    stop; None when there is none."""
    kept = [p for p in parts if p]
    return " ".join(f"{p[:1].upper()}{p[1:]}." for p in kept) or None


def _spread(values: list[float] | None, digits: int = 2) -> str:
    """``0.84 to 0.99`` over the values given (one value: itself)."""
    if not values:
        return "–"
    low, high = min(values), max(values)
    return fmt(low, digits) if low == high else f"{fmt(low, digits)} to {fmt(high, digits)}"


def _cpu_by_process(cpu: Mapping[str, float]) -> str:
    """``worker minilm-embed 30.4, emulator 8.4, router 8.0, the rest 1.2``: the
    processes' CPU, largest first, the smaller ones summed."""
    named = sorted(((v, k) for k, v in cpu.items() if v), reverse=True)
    out = [f"{k} {fmt(v)}" for v, k in named[:PROCESSES_NAMED]]
    rest = sum(v for v, _ in named[PROCESSES_NAMED:])
    return ", ".join(out + ([f"the rest {fmt(rest)}"] if rest else []))


def _rates(rates: list[Any]) -> str:
    """``45 req/s``, or ``3 rates from 42 to 50 req/s``."""
    if len(rates) == 1:
        return f"{rates[0]} req/s"
    return f"{len(rates)} rates from {min(rates)} to {max(rates)} req/s"


# -- each goal's reason ----------------------------------------------------------------


def _efficiency(model: str) -> Reason:
    def reason(results: Results) -> str | None:
        w = _path("sections", "worker_efficiency", model)(results)
        if not w or w.get("inputs_per_s") is None:
            return None
        rounds = w.get("rounds_efficiency_vs_model") or []
        alone = w.get("rounds_loop_alone_vs_model") or []
        loop_alone = None
        if w.get("loop_alone_vs_model") is not None and w["loop_alone_vs_model"] < 1:
            loop_alone = (
                f"the loop alone, the model's outputs replayed so that the model takes no "
                f"time: {fmt(w['loop_alone_inputs_per_s'])} inputs/s, "
                f"{fmt(w['loop_alone_vs_model'], 2)}× of the model's limit "
                f"({_spread(alone)}× over {len(alone)} rounds)"
            )
        return _sentences(
            f"{fmt(w['inputs_per_s'])} inputs/s against the model's "
            f"{fmt(w['model_inputs_per_s_at_formed_sizes'])} at the batch sizes it formed "
            f"({_spread(rounds)}× over {len(rounds)} rounds)",
            loop_alone,
        )

    return reason


# The worker's own CPU per input, the model's outputs replayed (one input a message).
WORKER_CPU_US_PER_INPUT = 25.0
# The router's CPU per sync request at 16 callers.
ROUTER_SYNC_CPU_MS = 2.0


def _loop_alone(model: str) -> Reason:
    def reason(results: Results) -> str | None:
        w = _path("sections", "worker_efficiency", model)(results)
        if not w or w.get("loop_alone_inputs_per_s") is None:
            return None
        alone = w.get("rounds_loop_alone_vs_model") or []
        cpu = w.get("rounds_loop_alone_cpu_us_per_input") or []
        limit = w.get("loop_alone_model_limit") or w.get("model_inputs_per_s_at_formed_sizes")
        threads = w.get("loop_alone_cpu_us_by_thread") or {}
        top = sorted(threads.items(), key=lambda t: -t[1])[:2]
        busiest = " and ".join(f"{_THREADS.get(k, k)} {fmt(v, 1)} µs" for k, v in top if v)
        return _sentences(
            f"the loop alone, the model's outputs replayed: "
            f"{fmt(w['loop_alone_inputs_per_s'])} inputs/s against the model's "
            f"{fmt(limit)} ({_spread(alone)}× over {len(alone)} rounds)",
            f"at its {fmt(min(cpu), 1)} µs of CPU an input (its least over those rounds) one "
            f"core serves {fmt(1e6 / min(cpu), 0)} inputs/s, and the second adds little: the "
            "worker's threads take turns under one lock, so the loop is bound by "
            "its CPU an input" + (f" ({busiest} the most of it)" if busiest else "")
            + _one_core(w, "inputs_per_s")
            if cpu and min(cpu)
            else None,
            _pricing(w),
        )

    return reason


def _one_core(w: dict[str, Any], figure: str) -> str:
    """What a reason adds of the loop alone on one core beside all of them, in turns
    (``figure``: its rate, or its CPU an input); nothing where it was not run."""
    one = w.get(f"loop_alone_one_core_{figure}")
    every = w.get(f"loop_alone_every_core_{figure}")
    if one is None or every is None:
        return ""
    if figure == "inputs_per_s":
        return f"; on one core it did {fmt(one)} inputs/s against {fmt(every)} on all, in turns"
    return f"; {fmt(one, 1)} on one core against {fmt(every, 1)} on all, in turns"


def _pricing(w: dict[str, Any]) -> str | None:
    """What a reason says of the finisher's CPU pricing the answers, in the loop alone."""
    pricing = w.get("loop_alone_pricing_cpu_us_per_input")
    if not pricing:
        return None
    return (
        f"of the finisher's, {fmt(pricing, 1)} µs an input went to pricing the answers "
        "(each one's item sized, its path's AWS requests, its cost)"
    )


# The worker's threads as a reason names them.
_THREADS = {
    "MainThread": "the model's thread",
    "intake": "intake",
    "result-finisher": "finisher",
    "result-writer": "writers",
}


def _worker_cpu(model: str) -> Reason:
    def reason(results: Results) -> str | None:
        w = _path("sections", "worker_efficiency", model)(results)
        if not w or w.get("loop_alone_cpu_us_per_input") is None:
            return None
        rounds = w.get("rounds_loop_alone_cpu_us_per_input") or []
        threads = w.get("loop_alone_cpu_us_by_thread") or {}
        named = ", ".join(
            f"{_THREADS.get(k, k)} {fmt(v, 1)}"
            for k, v in sorted(threads.items(), key=lambda t: -t[1])[:4]
            if v
        )
        return _sentences(
            f"the worker's process spent {fmt(w['loop_alone_cpu_us_per_input'], 1)} µs of CPU "
            f"an input with the model's outputs replayed ({_spread(rounds, 1)} over "
            f"{len(rounds)} rounds{_one_core(w, 'cpu_us_per_input')})",
            f"by thread, until the last result was stored: {named}" if named else None,
            _pricing(w),
        )

    return reason


def _router_sync_cpu(results: Results) -> str | None:
    paths = _path("sections", "aws_calls", "paths")(results) or {}
    load, one = paths.get("sync_at_load") or {}, paths.get("sync") or {}
    cpu = load.get("router_cpu_ms_per_request")
    if cpu is None:
        return None
    calls = (load.get("per_inference") or {}).get("router") or {}
    count = sum(calls.values())
    by_op = ", ".join(
        f"{op.split(':')[-1]} {fmt(n, 2)}" for op, n in sorted(calls.items(), key=lambda c: -c[1])
    )
    return _sentences(
        f"{fmt(cpu, 2)} ms of the router's threads' CPU a request at "
        f"{load.get('callers', 16)} callers, the driver's own taken out"
        + (f" ({fmt(one['router_cpu_ms_per_request'], 2)} at one caller)" if one else ""),
        f"it made {fmt(count, 2)} AWS calls a request ({by_op}): "
        f"{fmt(cpu / count, 2)} ms of the router's CPU for each call it made"
        if count
        else None,
    )


def _sync_calls(results: Results) -> str | None:
    path = _path("sections", "aws_calls", "paths", "sync_at_load")(results)
    if not path or path.get("result_polls_per_request") is None:
        return None
    calls = path.get("per_inference") or {}
    router = calls.get("router") or {}
    put = (calls.get("worker") or {}).get("dynamodb:PutItem")
    return _sentences(
        f"{fmt(path['result_polls_per_request'], 2)} looks for the result a request over "
        f"{path['requests']} requests of {path.get('callers', '?')} callers",
        "the router's calls a request: "
        + ", ".join(f"{k} {fmt(v, 2)}" for k, v in sorted(router.items()))
        + (f"; the worker's result writes of its own: {fmt(put, 2)}" if put else ""),
        _shared_slot_writes(path),
    )


def _shared_slot_writes(path: dict[str, Any]) -> str | None:
    """What a reason says where the router's UpdateItems of admission at load came to
    fewer than two a request (a slot taken and given back, each its own write)."""
    router = (path.get("per_inference") or {}).get("router") or {}
    if not 0 < router.get("dynamodb:UpdateItem", 0) < 2:
        return None
    return (
        "one router process serves the callers here, and takes and gives back the slots "
        "of requests that arrive or end together in one UpdateItem each; a Lambda "
        "instance serves one request at a time and makes two a request"
    )


def _cost(results: Results) -> str | None:
    path = _path("sections", "aws_calls", "paths", "sync_at_load")(results) or {}
    usd = path.get("usd_per_million_inferences")
    if not usd:
        return None
    parts = {k: v for k, v in usd.items() if k != "total" and not k.endswith("_part") and v}
    units = None
    if path.get("dynamodb_wru_per_inference") is not None:
        units = (
            f"an inference wrote {fmt(path['dynamodb_wru_per_inference'], 2)} DynamoDB write "
            f"units and read {fmt(path.get('dynamodb_rru_per_inference'), 2)}"
        )
        updates = ((path.get("per_inference") or {}).get("router") or {}).get("dynamodb:UpdateItem")
        if updates:
            units += (
                f", {fmt(updates, 2)} of the units the router's UpdateItems of admission "
                "(the tenant's sync slot taken and given back, under its tier's cap)"
            )
    return _sentences(
        "per million: "
        + ", ".join(
            f"{k.replace('_', ' ')} ${fmt(v, 2)}"
            for k, v in sorted(parts.items(), key=lambda kv: -kv[1])
        ),
        units,
        _shared_slot_writes(path),
    )


def _empty_receives(results: Results) -> str | None:
    path = _path("sections", "aws_calls", "paths", "async_burst")(results)
    if not path or path.get("sqs_empty_receives_per_inference") is None:
        return None
    worker = (path.get("per_inference") or {}).get("worker") or {}
    return _sentences(
        f"{fmt(path['sqs_empty_receives_per_inference'], 3)} empty receives an inference "
        f"against {fmt(worker.get('sqs:ReceiveMessage'), 3)} receives that returned "
        f"messages, over {path['inferences']} inferences submitted at once"
    )


def _cold_start(results: Results) -> str | None:
    cold = _path("sections", "cold_start", "cold_start")(results)
    if not cold:
        return None
    return _sentences(
        f"the interpreter {fmt(cold['interpreter_ms'])} ms, the handler's import and init "
        f"{fmt(cold['import_ms'])} ms, the first request {fmt(cold['first_request_ms'])} ms",
        f"a warm request after it took {fmt(cold['second_request_ms'])} ms"
        if cold.get("second_request_ms") is not None
        else None,
    )


def _router_warm_cpu(results: Results) -> str | None:
    warm = _path("sections", "cold_start", "warm")(results)
    if not warm or warm.get("router_cpu_ms_per_request") is None:
        return None
    return _sentences(
        f"{fmt(warm['router_cpu_ms_per_request'], 3)} ms of the router's CPU a request over "
        f"{fmt(warm['requests'], 0)} warm requests in one process, the stand-in worker's "
        f"{fmt(warm['stand_in_cpu_ms_per_request'], 3)} ms and the driver's "
        f"{fmt(warm['driver_cpu_ms_per_request'], 3)} taken out",
        f"{fmt(warm['wall_ms_per_request'], 3)} ms of wall time a request",
    )


def _peer(peer_name: str, section: str, comparison: str) -> Reason:
    def reason(results: Results) -> str | None:
        sections = results.get("sections") or {}
        on = (sections.get("end_to_end") or {}).get("batching_on") or {}
        peer = sections.get(section) or {}
        rates = results.get(comparison) or {}
        if not on or not peer or rates.get("platform_sustainable_rate") is None:
            return None
        ours, theirs = rates["platform_sustainable_rate"], rates["peer_sustainable_rate"]
        sustained = f"the platform sustained {ours} req/s"
        failed = sorted({s["rate"] for s in on.get("steps", []) if not s["sustained"]})
        if failed:
            p99 = [s["p99_ms"] for s in on["steps"] if s["rate"] in failed]
            sustained += f" ({_rates(failed)} failed, p99 {_spread(p99, 0)} ms)"
        sustained += f", {peer_name} {theirs}"
        cpu = None
        here, there = cpu_step(on, ours), cpu_step(peer, ours)
        if here and here["rate"] == ours:
            cpu = (
                f"at {ours} req/s an answered request cost "
                f"{fmt(here['cpu_ms_per_request_total'])} ms of CPU across the processes "
                f"({_cpu_by_process(here['cpu_ms_per_request'])})"
            )
            if there and there["rate"] == ours:
                cpu += f" against {peer_name}'s {fmt(there['cpu_ms_per_request_total'])}"
            at_theirs = cpu_step(peer)
            if at_theirs and at_theirs["rate"] == theirs:
                cpu += (
                    f"; {peer_name} at its {theirs}: "
                    f"{fmt(at_theirs['cpu_ms_per_request_total'])} ms a request"
                )
        stages = keyed((on.get("one_request") or {}).get("stages"), "stage")
        alone = stages.get("compute", {}).get("mean_ms")
        compute = (
            f"one sentence's compute in the worker, one request at a time: {fmt(alone)} ms"
            if alone is not None
            else None
        )
        return _sentences(sustained, cpu, compute)

    return reason


def _batching(results: Results) -> str | None:
    e2e = _path("sections", "end_to_end")(results) or {}
    on, off = e2e.get("batching_on") or {}, e2e.get("batching_off") or {}
    if on.get("sustainable_rate") is None or off.get("sustainable_rate") is None:
        return None
    rate_on, rate_off = on["sustainable_rate"], off["sustainable_rate"]
    rates = f"{rate_on} req/s with batching, {rate_off} without"
    batches = {
        r: b["mean_batch_size"] for r, b in keyed(on.get("batching_by_rate"), "rate").items()
    }
    if rate_on in batches:
        rates += (
            f"; at {rate_on} req/s the worker ran batches of {fmt(batches[rate_on])} on average"
        )
        past = [batches[r] for r in sorted(batches) if r > rate_on]
        if past:
            rates += f", past it {_spread(past, 1)} while the p99 went over 500 ms"
    cpu = None
    worker_on, worker_off = cpu_step(on, rate_on), cpu_step(off, rate_off)
    if worker_on and worker_off:
        key = next((k for k in worker_on["cpu_ms_per_request"] if "minilm" in k), None)
        if key and key in worker_off["cpu_ms_per_request"]:
            cpu = (
                f"the worker's CPU a request {fmt(worker_on['cpu_ms_per_request'][key])} ms "
                f"with batching at {rate_on} req/s, {fmt(worker_off['cpu_ms_per_request'][key])}"
                f" without at {rate_off}, against "
                f"{fmt(worker_on['cpu_ms_per_request_total'])} and "
                f"{fmt(worker_off['cpu_ms_per_request_total'])} over all the processes"
            )
    return _sentences(rates, cpu)


def _burst_drain(inputs_per_request: int) -> Reason:
    def reason(results: Results) -> str | None:
        for burst in _path("sections", "backlog", "bursts")(results) or []:
            if burst.get("inputs_per_request") != inputs_per_request:
                continue
            runs = burst.get("runs") or []
            limits = [r[k] for r in runs for k in ("model_limit_before", "model_limit_after")]
            cpu = [r.get("cpu_seconds") or {} for r in runs]
            roles = sorted(
                {k for c in cpu for k in c}, key=lambda k: -sum(c.get(k, 0) for c in cpu)
            )
            return _sentences(
                f"{', '.join(fmt(r['share_of_model_limit'], 2) for r in runs)} "
                f"({', '.join(fmt(r['inputs_per_s'], 0) for r in runs)} inputs/s) against a "
                f"limit at batch {_path('sections', 'backlog', 'batch_size')(results)}, "
                f"measured before and after each burst, of {_spread(limits, 0)} inputs/s",
                "CPU-s a drain: "
                + ", ".join(
                    f"{k} {_spread([c.get(k, 0) for c in cpu], 1)}" for k in roles[:PROCESSES_NAMED]
                ),
            )
        return None

    return reason


# The share of the model's limit that 16 closed-loop callers are to get answered.
CLOSED_LOOP_SHARE = 0.3


def _closed_loop(results: Results) -> str | None:
    loop = _path("sections", "backlog", "closed_loop")(results)
    if not loop or not loop.get("cpu_ms_per_answer"):
        return None
    runs = loop.get("runs") or [loop]
    cpu = loop["cpu_ms_per_answer"]
    total = sum(cpu.values())
    limit = _path("sections", "backlog", "model_limit_inputs_per_s")(results) or (
        (loop["model_limit_before"] + loop["model_limit_after"]) / 2
    )
    needed = CLOSED_LOOP_SHARE * limit * total / 1000  # cores busy all the time
    return _sentences(
        f"{', '.join(fmt(r['answered_per_s']) for r in runs)} answers/s at p50 "
        f"{', '.join(fmt(r['p50_ms'], 0) for r in runs)} ms "
        f"({', '.join(fmt(r['share_of_model_limit'], 2) for r in runs)}×)",
        f"in the median run an answer cost {fmt(total)} ms of CPU over the processes "
        f"({_cpu_by_process(cpu)}), so {CLOSED_LOOP_SHARE}× (~{fmt(CLOSED_LOOP_SHARE * limit, 0)}"
        f" answers/s against a limit of ~{fmt(limit, 0)}) needs {fmt(needed, 2)} cores busy "
        "all the time"
        + (", more than the machine's 2" if needed > 2 else " of the machine's 2")
        + f"; the run used {fmt(loop['answered_per_s'] * total / 1000, 2)}",
    )


def _pools(results: Results) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]] | None:
    """The pools section: the whole, the pool's arm and the services' arm."""
    section = _path("sections", "pools")(results)
    if not section or not section.get("pool") or not section.get("dedicated"):
        return None
    return section, section["pool"], section["dedicated"]


def _pool_cost(results: Results) -> str | None:
    found = _pools(results)
    if not found:
        return None
    section, pool, ded = found
    return _sentences(
        f"the pool spent {fmt(pool['worker_seconds_per_1000_answers'])} worker-seconds per "
        f"1,000 answers, the services {fmt(ded['worker_seconds_per_1000_answers'])}: at most "
        f"{pool['most_workers_at_once']} worker against {ded['most_workers_at_once']} over "
        f"{fmt(pool['window_seconds'], 0)} s of {section['rate']:g} req/s spread over "
        f"{len(section['models'])} models",
        f"{fmt(pool['answers_per_s'])} answers/s against {fmt(ded['answers_per_s'])}",
    )


def _pool_p99(results: Results) -> str | None:
    found = _pools(results)
    if not found:
        return None
    _, pool, ded = found
    misses, loads = pool["misses"], pool["load_seconds"]
    share = misses["count"] / pool["ok"] if pool.get("ok") else None
    waited = (
        f"{fmt(misses['count'], 0)} of the pool's {fmt(pool['ok'], 0)} answers "
        f"({fmt(100 * share, 0)} %) waited "
        f"for a load (p50 {fmt(misses['p50_ms'], 0)} ms, p99 {fmt(misses['p99_ms'], 0)}); "
        f"its {fmt(loads['count'], 0)} loads took p50 {fmt(loads['p50_seconds'], 3)} s, p99 "
        f"{fmt(loads['p99_seconds'], 3)}"
        if share is not None
        else None
    )
    others = [a.get("others_busy_share") for a in (pool, ded)]
    neighbours = (
        f"other work took {fmt(100 * others[0], 0)} % and {fmt(100 * others[1], 0)} % of the "
        "machine during the two windows"
        if None not in others
        else None
    )
    return _sentences(
        f"the pool's p99 {fmt(pool['p99_ms'], 0)} ms against the services' "
        f"{fmt(ded['p99_ms'], 0)}, p50 {fmt(pool['p50_ms'], 0)} against {fmt(ded['p50_ms'], 0)}",
        waited,
        neighbours,
    )


def _pool_hit(results: Results) -> str | None:
    found = _pools(results)
    if not found:
        return None
    _, pool, ded = found
    hits = pool["hits"]
    cpu = None
    if pool.get("worker_cpu_ms_per_answer") is not None:
        cpu = (
            f"an answer cost the workers {fmt(pool['worker_cpu_ms_per_answer'], 2)} ms of CPU "
            f"in the pool, {fmt(ded.get('worker_cpu_ms_per_answer'), 2)} in the services "
            f"({fmt(pool.get('platform_cpu_ms_per_answer'))} and "
            f"{fmt(ded.get('platform_cpu_ms_per_answer'))} across the platform)"
        )
    return _sentences(
        f"a hit's p50 {fmt(hits['p50_ms'], 0)} ms (p99 {fmt(hits['p99_ms'], 0)}) over "
        f"{fmt(hits['count'], 0)} hits, against a dedicated worker's answer's "
        f"{fmt(ded['p50_ms'], 0)} ms (p99 {fmt(ded['p99_ms'], 0)})",
        cpu,
    )


def _noisy(results: Results) -> dict[str, Any] | None:
    """The noisy-neighbour section, where it has both of B's steps."""
    section = _path("sections", "noisy_neighbour")(results)
    if not section or not section.get("b_alone") or not section.get("b_under_flood"):
        return None
    return dict(section)


def _noisy_figure(results: Results) -> Any:
    """B's p99 under the flood over its bound; infinite where B got a 202 or an error."""
    s = _noisy(results)
    if s is None:
        return None
    return math.inf if s["b_refused"] else s["p99_over_bound"]


def _noisy_reason(results: Results) -> str | None:
    s = _noisy(results)
    if s is None:
        return None
    alone, under, a = s["b_alone"], s["b_under_flood"], s["a_async"]
    stages = under.get("stages_p50") or {}
    return _sentences(
        f"{s['tenant_b']}: {fmt(under['ok'], 0)} of {fmt(under['sent'], 0)} answered "
        f"({under['miss_202']} 202s, {under['errors'] + under['timeouts']} errors), p99 "
        f"{fmt(under['p99_ms'], 0)} ms against {fmt(alone['p99_ms'], 0)} alone; bound "
        f"{s['p99_factor']:g} × {fmt(alone['p99_ms'], 0)} + a whole batch of "
        f"{fmt(a['batch_ms'], 0)} ms = {fmt(s['p99_bound_ms'], 0)} ms",
        f"median queue wait {fmt(stages.get('queue_wait_ms'), 0)} ms, batch wait "
        f"{fmt(stages.get('batch_wait_ms'), 0)}, compute {fmt(stages.get('compute_ms'), 0)} in a "
        f"batch of {fmt(stages.get('batch_size'), 0)}",
    )


# The platform on vLLM against bare vLLM: its share of bare vLLM's tokens/s at 8
# streams, and its TTFT over bare vLLM's at one stream (p50).
VLLM_THROUGHPUT_SHARE = 0.8
VLLM_TTFT_OVERHEAD_MS = 100.0


def _generation_levels(results: Results, target: str) -> dict[int, dict[str, Any]]:
    levels = _path("sections", "generation", "targets", target, "levels")(results) or []
    return keyed(levels, "concurrency")


def _vllm_throughput(results: Results) -> str | None:
    n = _path("sections", "generation", "vllm_throughput_streams")(results)
    ours, bare = (
        _generation_levels(results, "platform_vllm"),
        _generation_levels(results, "bare_vllm"),
    )
    if n not in ours or n not in bare:
        return None
    transformers = _generation_levels(results, "platform").get(n, {})
    rates = (
        f"at {n} streams the platform on vLLM streamed {fmt(ours[n]['tokens_per_s'])} tokens/s, "
        f"bare vLLM {fmt(bare[n]['tokens_per_s'])}"
    )
    if transformers:
        rates += f", the platform on transformers {fmt(transformers['tokens_per_s'])}"
    cpu = ours[n].get("cpu_ms_per_token") or {}
    bare_cpu = bare[n].get("cpu_ms_per_token") or {}
    total = sum(v for v in cpu.values() if v)
    bare_total = sum(v for v in bare_cpu.values() if v)
    cores = _path("machine", "cores")(results)
    where = None
    if total:
        where = (
            f"a token cost {fmt(total, 2)} ms of CPU over the platform's processes "
            f"({_cpu_by_process(cpu)}) against bare vLLM's {fmt(bare_total, 2)}"
        )
        if cores:
            where += f", so {cores} cores stream at most {fmt(1000 * cores / total, 0)} tokens/s"
    bound = None
    used = ours[n]["tokens_per_s"] * total / 1000 if total else None
    if cores and used is not None and used < 0.8 * cores:
        # Not the CPU: each stream's request, one after another, takes longer.
        bound = (
            f"the run kept {fmt(used, 2)} of the {cores} cores busy, so each request's own "
            f"time bounds it: its first token at p50 {fmt(ours[n].get('ttft_p50_ms'))} ms "
            f"against bare vLLM's {fmt(bare[n].get('ttft_p50_ms'))} (the queue, the "
            "worker's receive, the first chunk's write and the router's look)"
        )
    return _sentences(rates, where, bound)


def _vllm_ttft(results: Results) -> str | None:
    ours, bare = (
        _generation_levels(results, "platform_vllm"),
        _generation_levels(results, "bare_vllm"),
    )
    if 1 not in ours or 1 not in bare:
        return None
    on_tf, bare_tf = _generation_levels(results, "platform"), _generation_levels(results, "bare")
    transformers = None
    if 1 in on_tf and 1 in bare_tf:
        transformers = (
            f"on transformers the platform's p50 was {fmt(on_tf[1]['ttft_p50_ms'])} ms against "
            f"bare transformers' {fmt(bare_tf[1]['ttft_p50_ms'])}"
        )
    return _sentences(
        f"at one stream the platform on vLLM's first token came at p50 "
        f"{fmt(ours[1]['ttft_p50_ms'])} ms (p99 {fmt(ours[1]['ttft_p99_ms'])}), bare vLLM's at "
        f"{fmt(bare[1]['ttft_p50_ms'])} ms (p99 {fmt(bare[1]['ttft_p99_ms'])})",
        transformers,
    )


# -- the goals -------------------------------------------------------------------------

# The worker-seconds a pool may spend on a long tail, against a service per model.
POOL_COST_SHARE = 0.333


@dataclass(frozen=True)
class Goal:
    """A figure of the run held to a target, and how the run's figures explain it."""

    what: str
    measured: Callable[[Results], Any]
    target: float
    at_most: bool  # True: the figure must not exceed the target
    unit: str
    # What the run measured about it, from its own figures (at most three sentences).
    reason: Reason | None = None
    unmeasured_because: str = ""

    def reason_in(self, results: Results) -> str:
        try:
            return (self.reason(results) if self.reason else None) or ""
        except KeyError:  # a report of an older format lacks a figure the reason reads
            return ""

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
        _efficiency("minilm-embed"),
    ),
    Goal(
        "worker at saturation vs the model's limit at the batch sizes it formed, digits-cnn",
        _path("sections", "worker_efficiency", "digits-cnn", "efficiency_vs_model"),
        0.5,
        False,
        "×",
        _efficiency("digits-cnn"),
    ),
    Goal(
        "worker loop alone (the model's outputs replayed) vs the model's limit, digits-cnn",
        _path("sections", "worker_efficiency", "digits-cnn", "loop_alone_vs_model"),
        0.7,
        False,
        "×",
        _loop_alone("digits-cnn"),
    ),
    Goal(
        "worker CPU per input besides the model (the loop alone), digits-cnn",
        _path("sections", "worker_efficiency", "digits-cnn", "loop_alone_cpu_us_per_input"),
        WORKER_CPU_US_PER_INPUT,
        True,
        " µs",
        _worker_cpu("digits-cnn"),
    ),
    Goal(
        "worker CPU per input besides the model (the loop alone), minilm-embed",
        _path("sections", "worker_efficiency", "minilm-embed", "loop_alone_cpu_us_per_input"),
        WORKER_CPU_US_PER_INPUT,
        True,
        " µs",
        _worker_cpu("minilm-embed"),
    ),
    Goal(
        "router CPU per sync request, 16 callers",
        _path("sections", "aws_calls", "paths", "sync_at_load", "router_cpu_ms_per_request"),
        ROUTER_SYNC_CPU_MS,
        True,
        " ms",
        _router_sync_cpu,
    ),
    Goal(
        "AWS calls of a sync request of its own (router, and a result write of its own), "
        "16 callers",
        _sync_calls_at_load,
        3,
        True,
        "",
        _sync_calls,
    ),
    Goal(
        "AWS request cost per million sync inferences (SQS, DynamoDB, S3, Firehose), 16 callers",
        _path(
            "sections", "aws_calls", "paths", "sync_at_load", "usd_per_million_inferences", "total"
        ),
        2.5,
        True,
        "$",
        _cost,
    ),
    Goal(
        "empty receives per inference, async burst",
        _path("sections", "aws_calls", "paths", "async_burst", "sqs_empty_receives_per_inference"),
        0.1,
        True,
        "",
        _empty_receives,
    ),
    Goal(
        "router cold start, import to first answer (deployed layout)",
        _path("sections", "cold_start", "cold_start", "to_first_answer_ms"),
        500,
        True,
        " ms",
        _cold_start,
    ),
    Goal(
        "router CPU per warm request",
        _path("sections", "cold_start", "warm", "router_cpu_ms_per_request"),
        1.0,
        True,
        " ms",
        _router_warm_cpu,
    ),
    Goal(
        "sustainable rate (p99 < 500 ms), platform vs LitServe",
        _path("comparison", "rate_ratio"),
        0.5,
        False,
        "×",
        _peer("LitServe", "peer_litserve", "comparison"),
    ),
    Goal(
        "micro-batching gain in sustainable rate",
        _path("sections", "end_to_end", "batching_gain"),
        2.5,
        False,
        "×",
        _batching,
    ),
    Goal(
        "200 async predicts of 16 short sentences, submitted at once, vs the model's limit",
        _burst(16),
        0.7,
        False,
        "×",
        _burst_drain(16),
    ),
    Goal(
        "1,000 async predicts of one short sentence, submitted at once, vs the model's limit",
        _burst(1),
        0.4,
        False,
        "×",
        _burst_drain(1),
    ),
    Goal(
        "16 closed-loop sync callers of one short sentence, answered vs the model's limit",
        _path("sections", "backlog", "closed_loop", "share_of_model_limit"),
        CLOSED_LOOP_SHARE,
        False,
        "×",
        _closed_loop,
    ),
    Goal(
        "sustainable rate, platform vs Ray Serve (@serve.batch)",
        _path("comparison_rayserve", "rate_ratio"),
        0.5,
        False,
        "×",
        _peer("Ray Serve", "peer_rayserve", "comparison_rayserve"),
    ),
    Goal(
        "pools, a long tail (Zipf): worker-seconds per 1,000 answers, one pool vs a service "
        "per model",
        _path("sections", "pools", "comparison", "worker_seconds_ratio"),
        POOL_COST_SHARE,
        True,
        "×",
        _pool_cost,
    ),
    Goal(
        "pools, the same load: p99, one pool vs a service per model",
        _path("sections", "pools", "comparison", "p99_ratio"),
        2.0,
        True,
        "×",
        _pool_p99,
    ),
    Goal(
        "pools: a hit's p50 vs a dedicated worker's answer's",
        _path("sections", "pools", "comparison", "hit_p50_ratio"),
        1.0,
        True,
        "×",
        _pool_hit,
    ),
    Goal(
        "noisy neighbour: a tenant's sync p99 while another floods the model, over 1.5× "
        "its p99 alone plus one batch (any 202 or error: ∞)",
        _noisy_figure,
        1.0,
        True,
        "×",
        _noisy_reason,
    ),
    Goal(
        "generation at 8 streams: the platform on vLLM's tokens/s vs bare vLLM's",
        _path("sections", "generation", "vllm_throughput_share"),
        VLLM_THROUGHPUT_SHARE,
        False,
        "×",
        _vllm_throughput,
    ),
    Goal(
        "generation at one stream: TTFT p50, the platform on vLLM over bare vLLM",
        _path("sections", "generation", "vllm_ttft_overhead_p50_ms", "1"),
        VLLM_TTFT_OVERHEAD_MS,
        True,
        " ms",
        _vllm_ttft,
    ),
)


def evaluate(results: Results) -> list[dict[str, Any]]:
    """Each goal with its measured value, whether it is met (None: not measured) and
    its reason: what the run measured about it, or why it was not measured."""
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
                "reason": (goal.unmeasured_because or "its section did not run")
                if met is None
                else goal.reason_in(results),
            }
        )
    return out
