"""Worker efficiency: the platform's worker loop (``switchyard_worker.Worker.run``)
fed through an in-memory queue at saturation, against the model limit.

The queue is filled before the worker starts, so the worker never waits for work:
what it achieves is its own ceiling. Queues, registry, results and payloads are
the in-memory fakes of the core's stores (``harness/fakes.py``), so the figure isolates the
worker's code (decode, validate, assemble, run, record, price, store, log, delete) from
the AWS round trips, which the end-to-end section measures. The worker prices each
answer and logs each prediction as the deployed one does (its cost keeper, with the
manifest's rates for the model, keeps its ledger in memory; the prediction log's lines
are written and dropped). Every call into the model is
timed, so the time per batch splits into the bare model, the runtime's output
conversion, and the rest of the loop. A full run repeats the run and the limit beside
it (``ROUNDS``) and keeps the median round.

Each round also runs the loop alone: the same worker over messages of the same kind,
with the model's outputs replayed (``ReplayedRuntime``), so that no time goes to the
model. What the loop then reaches, against the model's limit, is the most the worker
could do with a model that cost nothing. It is run ``ALONE_RUNS`` times a round, and
the median run is the round's. Last, the loop alone runs at a quarter, a half and all
of the version's most a batch, to split its CPU into what each input costs and what
each batch costs (:func:`by_batch_size`), and on one core beside all of them in turns
(:func:`on_one_core`): its threads take turns under one interpreter lock, and what it
costs them to move between the cores as they do is the difference.
"""

from __future__ import annotations

import gc
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from bench.common import accepted_kwargs, quiet_output
from bench.model_limit import LoadedModel, throughput
from bench.proc_cpu import thread_cpu
from harness.fakes import (
    DroppedPredictionLog,
    FakeCostLedger,
    FakePayloads,
    FakeQueue,
    FakeRegistry,
    FakeResults,
    version_record,
)

_WATCH_S = 0.005  # how often the watcher looks at the results stored


class TimedRuntime:
    """Wraps a runtime and records (start, end, batch size) of every call."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.calls: list[tuple[float, float, int]] = []

    def predict(self, inputs: list[Any]) -> list[Any]:
        start = time.perf_counter()
        out = self._inner.predict(inputs)
        self.calls.append((start, time.perf_counter(), len(inputs)))
        return out


class ReplayedRuntime:
    """Answers every call with the outputs the model gave once for its largest batch
    (repeated past it): the runtime's outputs, at no cost in the model."""

    def __init__(self, model: LoadedModel, max_batch_size: int) -> None:
        batch = [model.inputs[i % len(model.inputs)] for i in range(max_batch_size)]
        self._outputs = model.runtime.predict(batch)

    def predict(self, inputs: list[Any]) -> list[Any]:
        n, have = len(inputs), len(self._outputs)
        return (self._outputs * (n // have + 1))[:n] if n > have else self._outputs[:n]


def _fill(queue: FakeQueue, model: LoadedModel, record: Any, count: int) -> None:
    from switchyard.queues import encode_message
    from switchyard.schemas import QueueMessage, TensorSignature

    now = time.time()
    payloads = FakePayloads()
    rows = isinstance(record.signature, TensorSignature)  # sent as the router sends them
    for i in range(count):
        tenant = ("acme", "globex")[i % 2]
        message = QueueMessage(
            request_id=f"bench-{i:06d}",
            tenant=tenant,
            model=record.model,
            version=record.version,
            inputs=[model.inputs[i % len(model.inputs)]],
            n_inputs=1,
            enqueued_at=now,
            expires_at=now + 3600,
        )
        queue.send(encode_message(message, payloads, 200_000, rows=rows), tenant)


def saturate(
    model: LoadedModel,
    messages: int,
    time_limit: float,
    runtime: Any = None,
    max_batch_size: int | None = None,
) -> dict[str, Any]:
    """Run the worker over ``messages`` one-input requests already queued, through
    the model's runtime or the ``runtime`` given (``max_batch_size``: the version's
    own, or this)."""
    from switchyard.init_phase import init_phase
    from switchyard_worker.stages import collect_less
    from switchyard_worker.worker import Worker

    record = version_record(model.name)
    if max_batch_size is not None:
        record = record.model_copy(update={"max_batch_size": max_batch_size})
    realtime = FakeQueue("realtime", long_poll=True)
    batch = FakeQueue("batch", long_poll=True)
    results = FakeResults()
    timed = TimedRuntime(runtime or model.runtime)
    costs = _cost_keeper(model.name)
    pricing = _timed_pricing(costs)
    worker = Worker(
        **accepted_kwargs(
            Worker.__init__,
            model=model.name,
            worker_id="bench-worker",
            realtime=realtime,
            batch=batch,
            registry=FakeRegistry(record),
            results=results,
            payloads=FakePayloads(),
            load_runtime=lambda _record: timed,
            visibility_timeout=60,
            poll_wait_seconds=1,
            metrics=None,
            prediction_log=DroppedPredictionLog(),
            costs=costs,
        )
    )
    # As the deployed worker starts (``switchyard_worker.__main__``): what its start
    # made (the model loaded, here also the queue filled) frozen out of the cyclic
    # collector's way, so that no collection during the run traverses it, and the
    # collector's young collections made as rare as the worker makes them.
    with init_phase():
        worker.preload()
        _fill(realtime, model, record, messages)
    thresholds = collect_less()
    # The model runs on the main thread, as in the deployed worker (on a thread of its
    # own, minilm-embed ran at 0.87x with the allocator as it comes, 0.97x tuned); a
    # watcher stops the worker once every result is stored, or at the time limit. It
    # looks every few milliseconds rather than wait on the store, which would wake it
    # at every result stored and bill the worker for the bench's own thread switches.
    outcome: dict[str, bool] = {}
    threads: dict[str, dict[int, tuple[str, float]]] = {"before": thread_cpu()}

    def stop_when_done() -> None:
        ends = time.monotonic() + time_limit
        while results.done < messages and time.monotonic() < ends:
            time.sleep(_WATCH_S)
        outcome["finished"] = results.done >= messages
        threads["after"] = thread_cpu()  # while the worker's threads are alive
        worker.stop()

    watcher = threading.Thread(target=stop_when_done, name="bench-watcher", daemon=True)
    start = time.perf_counter()
    cpu_start = time.process_time()
    watcher.start()
    worker.run()
    watcher.join()
    cpu = time.process_time() - cpu_start
    gc.set_threshold(*thresholds)  # the bench's other sections as they were
    finished = outcome["finished"]
    end = results.completed_at[-1] if results.completed_at else time.perf_counter()
    wall = end - start
    done = results.done
    sizes = Counter(n for _, _, n in timed.calls)
    formed = sizes.most_common(1)[0][0] if sizes else 0
    in_runtime = [(e - s) * 1000 for s, e, _ in timed.calls]
    return {
        "messages": messages,
        "completed": done,
        "finished": finished,
        "max_batch_size": record.max_batch_size,
        "max_wait_ms": record.max_wait_ms,
        "wall_s": round(wall, 3),
        "inputs_per_s": round(done / wall, 1) if wall > 0 else None,
        "batches": len(timed.calls),
        "batch_sizes": dict(sorted(sizes.items())),
        "typical_batch_size": formed,
        "mean_batch_size": round(sum(n for *_, n in timed.calls) / len(timed.calls), 1)
        if timed.calls
        else None,
        "runtime_share_of_wall": round(sum(in_runtime) / 1000 / wall, 3) if wall > 0 else None,
        # The process's CPU (every thread's) per input stored, the model's included.
        "cpu_us_per_input": round(cpu * 1e6 / done, 1) if done else None,
        "cpu_us_per_input_by_thread": by_thread(threads, done),
        # The finisher's CPU pricing the answers (``CostKeeper.price``), per input.
        "pricing_cpu_us_per_input": round(pricing[0] * 1e6 / done, 1) if done else None,
    }


def _timed_pricing(keeper: Any) -> list[float]:
    """The thread CPU the keeper spends pricing answers, added up as it prices
    (``[seconds]``)."""
    spent = [0.0]
    price = keeper.price

    def timed(answers: Any) -> None:
        began = time.thread_time()
        price(answers)
        spent[0] += time.thread_time() - began

    keeper.price = timed
    return spent


def _cost_keeper(model: str) -> Any:
    """The deployed worker's cost keeper for ``model``'s own service (its manifest's
    rates), its ledger and its tenants' budgets in memory."""
    from stacks.assets import MANIFEST_FILE
    from switchyard.budgets import InMemoryBudgetStore
    from switchyard.manifest import load_manifest
    from switchyard.settings import WorkerSettings
    from switchyard_worker.costing import CostKeeper

    return CostKeeper(
        rates=load_manifest(MANIFEST_FILE).cost_rates(model),
        ledger=FakeCostLedger(),  # type: ignore[arg-type]
        service=model,
        worker_id="bench-worker",
        inline_bytes=WorkerSettings.model_fields["result_inline_bytes"].default,
        budgets=InMemoryBudgetStore(),
    )


def by_thread(threads: dict[str, dict[int, tuple[str, float]]], done: int) -> dict[str, float]:
    """The worker's CPU per input stored, by its threads' part (``MainThread``: the
    model's, which runs each batch; ``intake``; ``result-finisher``; the
    ``result-writer`` pool's, summed), read when the last result was stored; the
    bench's own watcher left out."""
    before, after = threads["before"], threads.get("after") or {}
    out: Counter[str] = Counter()
    for ident, (name, seconds) in after.items():
        if name == "bench-watcher":
            continue
        out[name.split("_")[0]] += seconds - before.get(ident, (name, 0.0))[1]
    return {k: round(v * 1e6 / done, 1) for k, v in out.most_common()} if done else {}


ROUNDS = 5  # a full run's rounds per model: the run, then the model's limit beside it
# The loop alone's runs in a round, of which the median by rate is the round's. With no
# time in the model it goes through its messages tens of times faster than the run
# beside it (6,400 digits-cnn messages in ~0.13 s), and a busy moment of a neighbour
# on this shared machine moved one such run's CPU an input by a quarter. More messages
# a run would not do: the in-memory stores keep every result, and a worker holding
# tens of thousands of them is slower by its memory, not by its loop.
ALONE_RUNS = 3


def run(models: dict[str, LoadedModel], quick: bool) -> dict[str, Any]:
    """Per model, the median round by efficiency (a busy neighbour on this shared
    machine slows one round's run or its limit, not the figure), and the loop alone's
    own median round, with every round's figures beside them."""
    counts = {"minilm-embed": 256 if quick else 1024, "digits-cnn": 1280 if quick else 6400}
    # The loop alone goes through minilm-embed's 1,024 messages in ~25 ms, where its
    # start and its last batch weigh as much as its loop: it runs over as many as
    # digits-cnn's.
    alone_counts = counts if quick else counts | {"minilm-embed": 6400}
    seconds = 0.3 if quick else 1.5
    rounds = 1 if quick else ROUNDS
    alone_runs = 1 if quick else ALONE_RUNS
    out: dict[str, Any] = {}
    time_limit = 60 if quick else 180
    for name, model in models.items():
        count = counts.get(name, 512)
        readings = []
        for _ in range(rounds):
            with quiet_output():
                result = saturate(model, count, time_limit)
                replayed = ReplayedRuntime(model, result["max_batch_size"])
                alone = median_run(
                    [
                        saturate(model, alone_counts.get(name, count), time_limit, replayed)
                        for _ in range(alone_runs)
                    ]
                )
            reading = result | against_model(model, result, seconds)
            readings.append(reading | loop_alone(alone, reading))
        out[name] = median_rounds(readings)
        top = out[name]["max_batch_size"]
        out[name] |= by_batch_size(
            model, alone_counts.get(name, count), time_limit, (top // 4, top // 2, top), alone_runs
        )
        messages, replayed = alone_counts.get(name, count), ReplayedRuntime(model, top)
        with quiet_output():
            out[name] |= on_one_core(
                lambda m=model, n=messages, r=replayed: saturate(m, n, time_limit, r), alone_runs
            )
    return out


def on_one_core(measure: Callable[[], dict[str, Any]], runs: int) -> dict[str, Any]:
    """The loop alone (``measure``: one run of it) on every core this process may use
    and on one of them, in turns, ``runs`` times each, and each's median run: its CPU
    an input and its rate. The worker's threads are started by the run, so they take
    the one core from the thread that starts them (Linux sets a thread's cores, and a
    new thread has its starter's). None on a machine of one core."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return {}
    every: list[dict[str, Any]] = []
    one: list[dict[str, Any]] = []
    for _ in range(runs):
        every.append(measure())
        os.sched_setaffinity(0, {cores[0]})
        try:
            one.append(measure())
        finally:
            os.sched_setaffinity(0, cores)
    on_every, on_one = median_run(every), median_run(one)
    return {
        "loop_alone_cores": len(cores),
        "loop_alone_every_core_cpu_us_per_input": on_every["cpu_us_per_input"],
        "loop_alone_every_core_inputs_per_s": on_every["inputs_per_s"],
        "loop_alone_one_core_cpu_us_per_input": on_one["cpu_us_per_input"],
        "loop_alone_one_core_inputs_per_s": on_one["inputs_per_s"],
        "loop_alone_every_core_runs_cpu_us_per_input": on_every["runs_cpu_us_per_input"],
        "loop_alone_one_core_runs_cpu_us_per_input": on_one["runs_cpu_us_per_input"],
    }


def by_batch_size(
    model: LoadedModel, messages: int, time_limit: float, sizes: tuple[int, ...], runs: int
) -> dict[str, Any]:
    """The loop alone's CPU an input at each of ``sizes`` as its most a batch (the same
    messages, the model's outputs replayed; the sizes taken in turn, ``runs`` times,
    each size's median run as :func:`median_run` takes it), and what it splits into: a
    cost for each input and one for each batch (:func:`per_input_and_batch`)."""
    done: dict[int, list[dict[str, Any]]] = {size: [] for size in sizes}
    with quiet_output():
        for _ in range(runs):
            for size in sizes:
                done[size].append(
                    saturate(model, messages, time_limit, ReplayedRuntime(model, size), size)
                )
    medians = {
        size: cpu
        for size, runs_of_size in done.items()
        if (cpu := median_run(runs_of_size)["cpu_us_per_input"])
    }
    if len(medians) < 2:
        return {}
    per_input, per_batch = per_input_and_batch(medians)
    return {
        "loop_alone_cpu_us_by_batch_size": medians,
        "loop_alone_cpu_us_apart_from_batches": round(per_input, 1),
        "loop_alone_cpu_us_per_batch": round(per_batch, 0),
    }


def per_input_and_batch(cpu_by_size: dict[int, float]) -> tuple[float, float]:
    """``a`` and ``b`` of ``cpu = a + b / size`` fitted to the CPU an input at each
    batch size (least squares): what each input costs, and what each batch costs
    whatever its size."""
    xs = [1 / size for size in cpu_by_size]
    ys = list(cpu_by_size.values())
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    b = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread
    return mean_y - b * mean_x, b


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Of runs over the same messages, the one whose rate is the median (of those that
    finished, if any did), with every run's rate and CPU an input."""
    finished = [r for r in runs if r["finished"]] or runs
    ordered = sorted(finished, key=lambda r: r["inputs_per_s"] or 0.0)
    return ordered[len(ordered) // 2] | {
        "runs_inputs_per_s": [r["inputs_per_s"] for r in runs],
        "runs_cpu_us_per_input": [r["cpu_us_per_input"] for r in runs],
    }


def median_rounds(readings: list[dict[str, Any]]) -> dict[str, Any]:
    """The round with the median efficiency; its loop-alone figures (``loop_alone_*``)
    those of the round where the loop alone's rate was the median of its own rounds,
    not of whichever round the model's run put in the middle; every round's
    efficiency, loop alone's rate and CPU an input beside them."""
    by_efficiency = sorted(readings, key=lambda r: r.get("efficiency_vs_model") or 0.0)
    median = dict(by_efficiency[len(by_efficiency) // 2])
    alone = sorted(
        (r for r in readings if r.get("loop_alone_vs_model") is not None),
        key=lambda r: r["loop_alone_vs_model"],
    )
    if alone:
        median = {k: v for k, v in median.items() if not k.startswith("loop_alone_")}
        median |= {k: v for k, v in alone[len(alone) // 2].items() if k.startswith("loop_alone_")}
    return median | {
        "rounds_efficiency_vs_model": [r.get("efficiency_vs_model") for r in by_efficiency],
        "rounds_loop_alone_vs_model": [r.get("loop_alone_vs_model") for r in by_efficiency],
        "rounds_loop_alone_cpu_us_per_input": [
            r.get("loop_alone_cpu_us_per_input") for r in by_efficiency
        ],
    }


def loop_alone(alone: dict[str, Any], reading: dict[str, Any]) -> dict[str, Any]:
    """The loop's own ceiling (its run with the model's outputs replayed) against the
    model's limit measured in the same round."""
    rate, limit = alone["inputs_per_s"], reading.get("model_inputs_per_s_at_formed_sizes")
    if not alone["finished"] or not rate:
        return {}
    return {
        "loop_alone_runs": len(alone.get("runs_inputs_per_s") or [rate]),
        "loop_alone_messages": alone["messages"],
        "loop_alone_inputs_per_s": rate,
        "loop_alone_typical_batch_size": alone["typical_batch_size"],
        "loop_alone_vs_model": round(rate / limit, 3) if limit else None,
        "loop_alone_model_limit": limit,  # the same round's
        # The worker's CPU per input besides the model (whose outputs are replayed).
        "loop_alone_cpu_us_per_input": alone["cpu_us_per_input"],
        "loop_alone_cpu_us_by_thread": alone.get("cpu_us_per_input_by_thread") or {},
        "loop_alone_pricing_cpu_us_per_input": alone.get("pricing_cpu_us_per_input"),
    }


def against_model(model: LoadedModel, result: dict[str, Any], seconds: float) -> dict[str, Any]:
    """The worker's throughput as a share of the model limit, measured now, beside
    the worker run, at the batch sizes the worker formed (weighted by how many
    inputs went through each) and at its maximum batch size."""
    sizes: dict[int, int] = result["batch_sizes"]
    if not sizes or not result["inputs_per_s"]:
        return {}
    measured = sorted(sizes, key=lambda b: -b * sizes[b])[:4]
    calls = 1 if seconds < 1 else 3
    bare = {b: throughput(model.bare, model.inputs, b, seconds, calls) for b in measured}
    wrapped = {
        b: throughput(model.runtime.predict, model.inputs, b, seconds, calls) for b in measured
    }
    counted = {b: n for b, n in sizes.items() if b in bare}
    inputs = sum(b * n for b, n in counted.items())
    model_s = sum(n * b / bare[b] for b, n in counted.items())
    runtime_s = sum(n * b / wrapped[b] for b, n in counted.items())
    batches = sum(counted.values())
    mix_limit = inputs / model_s
    top = result["max_batch_size"]
    full_limit = bare.get(top) or throughput(model.bare, model.inputs, top, seconds, calls)
    cycle_ms = 1000 * result["wall_s"] / result["batches"]
    model_ms = 1000 * model_s / batches
    conversion_ms = max(1000 * (runtime_s - model_s) / batches, 0.0)
    return {
        "model_inputs_per_s_at_formed_sizes": round(mix_limit, 1),
        "model_inputs_per_s_at_max_batch": round(full_limit, 1),
        "efficiency_vs_model": round(result["inputs_per_s"] / mix_limit, 3),
        "efficiency_vs_model_at_max_batch": round(result["inputs_per_s"] / full_limit, 3),
        "per_batch_ms": {
            "model": round(model_ms, 2),
            "output_conversion": round(conversion_ms, 2),
            "worker_loop": round(max(cycle_ms - model_ms - conversion_ms, 0.0), 2),
            "cycle": round(cycle_ms, 2),
        },
        "share_outside_model": round(max(1 - model_ms / cycle_ms, 0.0), 3),
    }
