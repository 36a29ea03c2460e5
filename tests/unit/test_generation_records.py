"""A generation worker reads its running requests' records off its decode loop and
stops those that ended elsewhere (cancelled, or their caller left the stream)."""

from __future__ import annotations

import time

from harness.waiting import wait_for
from switchyard.schemas import ResultRecord
from switchyard_worker import generation_loop

# test_worker's generative worker (its fixture), and how it sends
from tests.unit.test_worker import ask, generating  # noqa: F401


def test_a_stream_cancelled_while_it_runs_stops_and_its_record_keeps_the_cancel(
    generating,  # noqa: F811
    monkeypatch,
):
    worker, realtime, results, stream, decoder, _ = generating
    monkeypatch.setattr(generation_loop, "_LOOK_AT_RECORDS_S", 0.0)  # a look every step
    # GIVEN a long streamed generation whose caller has its first tokens (its record
    # is written, as the router writes it then)
    ask(realtime, "a", max_tokens=200, stream=True)
    for pending in worker.intake.keep(realtime.receive(10, 0)):
        worker.loop.arrivals.put(pending)
    for _ in range(3):
        worker.step()
    results.put_queued(
        ResultRecord(
            request_id="a", tenant="acme", model="pydoc-gpt", version="v1", status="queued",
            created_at=time.time(), expires_at=int(time.time()) + 60,
        )
    )  # fmt: skip
    # WHEN it is cancelled, and the worker steps on
    results.cancel("acme", "a", time.time())

    def stopped() -> bool:
        worker.step()
        return realtime.depth == 0 and not realtime.in_flight

    wait_for(stopped, 10, what="the cancelled generation to stop")
    # THEN it left the running batch long before its end, its message is deleted, and
    # its record is still the cancel
    steps = len(decoder.steps)
    for _ in range(5):
        worker.step()
    assert len(decoder.steps) == steps < 200
    assert results.get("acme", "a").status == "cancelled"
    worker.loop.stream_writer.submit(lambda: None).result()
    chunks = stream.after("acme", "a", 0)
    assert chunks and chunks[-1].finish_reason is None  # its stream was not ended here
