"""A pool's worker on in-memory queues and stores: many models, the oldest waiting
work first, versions loaded on first use within the budget, a load beside the
batches of the versions already loaded."""

from __future__ import annotations

import json
import threading
import time

import pytest

from harness.fakes import EchoRuntime, FakePayloads, FakeQueue, FakeRegistry, FakeResults
from harness.waiting import wait_for
from switchyard.queues import ModelLanes
from switchyard.schemas import QueueMessage
from switchyard_worker.model_cache import Footprint
from switchyard_worker.pool import NOT_IN_POOLS, OVER_BUDGET, PoolWorker
from switchyard_worker.worker import Wiring

MODELS = ("digits-a", "digits-b", "digits-c")
# Each version's footprint, MiB; the budget holds two of them, not three.
FOOTPRINTS = {"digits-a": 40, "digits-b": 40, "digits-c": 40, "big": 500}
BUDGET = 100


class SizedEcho(EchoRuntime):
    def __init__(self, mib: float) -> None:
        super().__init__()
        self.mib = mib


class TensorMeter:
    """Each runtime's footprint is its ``mib`` (the floor: its tensors' bytes)."""

    def sample(self) -> Footprint:
        return Footprint()

    def floor(self, runtime) -> Footprint:
        return Footprint(runtime.mib)

    def release(self) -> None:
        pass


class Pool:
    def __init__(self, digits_v1, models=MODELS, gate: threading.Event | None = None, **over):
        self.queues = {m: (FakeQueue("realtime"), FakeQueue("batch")) for m in models}
        records = [digits_v1.model_copy(update={"model": m, **over.get(m, {})}) for m in models]
        self.results = FakeResults()
        self.loads: list[str] = []
        self.gate = gate

        def load(record):
            self.loads.append(record.model)
            if self.gate is not None and record.model == "digits-b":
                self.gate.wait(10)
            return SizedEcho(FOOTPRINTS.get(record.version) or FOOTPRINTS[record.model])

        self.worker = PoolWorker(
            pool="small",
            lanes={m: ModelLanes(*self.queues[m]) for m in models},
            wiring=Wiring(
                worker_id="w1",
                registry=FakeRegistry(*records),
                results=self.results,
                payloads=FakePayloads(),
                visibility_timeout=60,
                poll_wait_seconds=0,
                emit=False,
            ),
            load_runtime=load,
            memory_budget_mib=BUDGET,
            meter=TensorMeter(),
        )
        self.worker.preload()

    def send(self, model, rid, lane="realtime", sent_at=None, version="v1"):
        queue = self.queues[model][0 if lane == "realtime" else 1]
        message = QueueMessage(
            request_id=rid,
            tenant="acme",
            model=model,
            version=version,
            lane=lane,
            inputs=[[1] * 64],
            n_inputs=1,
            enqueued_at=sent_at or time.time(),
            expires_at=time.time() + 3600,
        )
        queue.send(message.model_dump_json(), "acme")

    def serve_until(self, rids, timeout=10.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.worker.step()
            self.worker.wait_for_results()
            if all(self.results.get("acme", rid) is not None for rid in rids):
                return
            time.sleep(0.001)
        raise TimeoutError(f"not answered: {[r for r in rids if not self.results.get('acme', r)]}")

    def answered_order(self):
        return [rid for kind, rid in self.results.log if kind == "result"]

    def close(self):
        self.worker.stop()
        self.worker.loop.close()


def test_a_pool_worker_answers_each_of_its_models_within_its_budget(digits_v1):
    # GIVEN a pool of three models whose budget holds two of their versions
    pool = Pool(digits_v1)
    # WHEN requests go round-robin across them
    rids = []
    for i in range(12):
        model = MODELS[i % 3]
        pool.send(model, f"{model}-{i}")
        rids.append(f"{model}-{i}")
        pool.serve_until([rids[-1]])
    # THEN every request is answered once, by its own model
    assert sorted(pool.answered_order()) == sorted(rids)
    for rid in rids:
        record = pool.results.get("acme", rid)
        assert record.status == "done" and rid.startswith(record.model)
    # AND the versions were loaded on first use and evicted to make room, the budget
    # never exceeded by what was held
    snapshot = pool.worker.cache.snapshot()
    assert snapshot["loads"] >= 3 and snapshot["evictions"] >= 1
    assert snapshot["held_mib"] <= BUDGET and len(snapshot["resident"]) == 2
    assert set(snapshot["loads_by_model"]) == set(MODELS)
    pool.close()


def test_a_load_does_not_hold_up_the_batches_of_loaded_versions(digits_v1):
    # GIVEN a pool whose digits-a is loaded, and whose digits-b loads slowly
    gate = threading.Event()
    pool = Pool(digits_v1, models=("digits-a", "digits-b"), gate=gate)
    pool.send("digits-a", "a-0")
    pool.serve_until(["a-0"])
    # WHEN digits-b's first request arrives, then digits-a's
    pool.send("digits-b", "b-0")
    wait_for(lambda: (pool.worker.step(), "digits-b" in pool.loads)[1], 5, 0.01, "b's load")
    pool.send("digits-a", "a-1")
    # THEN digits-a's is answered while digits-b's version is still loading
    pool.serve_until(["a-1"])
    assert pool.results.get("acme", "b-0") is None
    # AND digits-b's once its load ends
    gate.set()
    pool.serve_until(["b-0"])
    assert pool.answered_order() == ["a-0", "a-1", "b-0"]
    pool.close()


def test_the_longest_waiting_work_goes_first_realtime_before_batch(digits_v1):
    # GIVEN every model's version loaded
    pool = Pool(digits_v1, models=("digits-a", "digits-b"))
    for model in ("digits-a", "digits-b"):
        pool.send(model, f"warm-{model}")
    pool.serve_until(["warm-digits-a", "warm-digits-b"])
    now = time.time()
    # WHEN work waits in each: a job's chunk sent first, then realtime requests, the
    # older one to the other model
    pool.send("digits-a", "batch-old", lane="batch", sent_at=now - 30)
    pool.send("digits-a", "rt-new", sent_at=now - 1)
    pool.send("digits-b", "rt-old", sent_at=now - 5)
    for model, stages in pool.worker.by_model.items():
        for queue in pool.queues[model]:
            stages.intake.hold(queue.receive(10, 0))
    pool.serve_until(["batch-old", "rt-new", "rt-old"])
    # THEN the realtime work runs first, the longest waiting first, then the job's
    assert pool.answered_order()[-3:] == ["rt-old", "rt-new", "batch-old"]
    pool.close()


def test_a_version_over_the_budget_is_answered_so_and_not_retried(digits_v1):
    # GIVEN a pool whose digits-b version needs more than the whole budget
    pool = Pool(digits_v1, models=("digits-a", "digits-b"), **{"digits-b": {"version": "big"}})
    pool.send("digits-b", "too-big", version="big")
    pool.send("digits-a", "fits")
    # WHEN both are served
    pool.serve_until(["too-big", "fits"])
    # THEN the one too big gets its final error saying why; the other is answered
    refused = pool.results.get("acme", "too-big")
    assert refused.status == "error" and refused.error.code == OVER_BUDGET
    assert "digits-b big needs 500 MiB of memory (budget 100)" in refused.error.message
    assert pool.results.get("acme", "fits").status == "done"
    assert pool.queues["digits-b"][0].depth == 0  # deleted, not back for retry
    pool.close()


def test_a_generative_version_is_not_run_by_a_pool(digits_v1):
    pool = Pool(digits_v1, models=("digits-a",), **{"digits-a": {"runtime": "causal-lm"}})
    pool.send("digits-a", "gen")
    pool.serve_until(["gen"])
    answer = pool.results.get("acme", "gen")
    assert answer.status == "error" and answer.error.code == NOT_IN_POOLS
    assert pool.loads == []
    pool.close()


def test_a_pool_worker_writes_its_state_where_the_local_status_reads_it(digits_v1, tmp_path):
    pool = Pool(digits_v1, models=("digits-a",))
    state = tmp_path / "worker-small-0.pool.json"
    pool.worker.report._state_file = state  # noqa: SLF001 - as the settings would name it
    pool.send("digits-a", "one")
    pool.serve_until(["one"])
    # The loader thread writes the state after the load's log line, and the model's
    # thread may answer with the version already in the cache before that.
    wait_for(state.exists, 5, 0.01, "the pool's state written")
    written = json.loads(state.read_text())
    assert written["pool"] == "small" and written["budget_mib"] == BUDGET
    assert [(e["model"], e["footprint_mib"]) for e in written["resident"]] == [("digits-a", 40)]
    assert written["loads"] == 1 and written["recent"][0]["kind"] == "load"
    pool.close()


@pytest.mark.parametrize("lane", ["realtime", "batch"])
def test_stopping_releases_a_batch_waiting_for_its_load(digits_v1, lane):
    gate = threading.Event()
    pool = Pool(digits_v1, models=("digits-b",), gate=gate)
    pool.send("digits-b", "waits", lane=lane)
    wait_for(lambda: (pool.worker.step(), "digits-b" in pool.loads)[1], 5, 0.01, "the load")
    gate.set()
    pool.worker.stop()
    released = pool.worker.loop.close()
    assert released == 1
    queue = pool.queues["digits-b"][0 if lane == "realtime" else 1]
    assert len(queue.visible) == 1  # back on its queue for another worker
