"""Workers die; requests do not. Every accepted request gets exactly one result."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable

from harness.waiting import wait_for
from tests.e2e.accounting import stored_per_request, submit_async, wait_all_done


def signal_worker_under_load(platform, requests: int, after: int, sig: int) -> tuple[list, int]:
    """Submit ``requests``; once ``after`` results are stored, signal the worker while
    the rest still arrive. Returns the request ids and the signalled worker's pid."""
    submitted = submit_until_stored(platform, requests, after)
    victim = platform.worker_pid("minilm-embed")
    os.kill(victim, sig)
    return submitted(), victim


def submit_until_stored(platform, requests: int, after: int) -> Callable[[], list[str]]:
    """Submit ``requests`` on a thread and return once ``after`` results more are
    stored, while they still arrive (a worker faster than the senders would otherwise
    have answered them all by then), with a function that waits for the rest to be
    sent and gives their ids."""
    before = sum(stored_per_request(platform).values())
    ids: list[str] = []
    sender = threading.Thread(target=lambda: ids.extend(submit_async(platform, requests)))
    sender.start()
    wait_for(
        lambda: sum(stored_per_request(platform).values()) - before >= after,
        timeout_s=60,
        every_s=0.05,
        what=f"fewer than {after} results stored",
    )

    def submitted() -> list[str]:
        sender.join(120)
        assert len(ids) == requests, "not every request was accepted"
        return ids

    return submitted


def in_flight(platform, model: str) -> int:
    url = platform.info["queues"][model]["realtime"]
    attrs = platform.client("sqs").get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    return int(attrs["ApproximateNumberOfMessagesNotVisible"])


def kill_worker_holding_messages(platform, requests: int, after: int) -> tuple[list, int]:
    """Submit ``requests``; once ``after`` results are stored, freeze the worker, and
    kill it only if it holds received, undeleted messages (otherwise let it run on
    and look again), so the kill always lands on work in flight."""
    submitted = submit_until_stored(platform, requests, after)
    victim = platform.worker_pid("minilm-embed")
    deadline = time.monotonic() + 60
    while True:
        os.kill(victim, signal.SIGSTOP)
        if in_flight(platform, "minilm-embed") > 0:
            os.kill(victim, signal.SIGKILL)
            return submitted(), victim
        os.kill(victim, signal.SIGCONT)
        assert time.monotonic() < deadline, "the worker never held a message to kill it with"
        time.sleep(0.02)


def test_sigkill_mid_batch_under_load_loses_nothing_and_duplicates_nothing(platform):
    ids, victim = kill_worker_holding_messages(platform, 120, after=10)

    results = wait_all_done(platform, ids, timeout=120)

    assert all(r["status"] == "done" for r in results.values())
    assert all(len(r["outputs"]) == 4 + i % 8 for i, r in enumerate(results[rid] for rid in ids))
    # A worker stores a batch's results, logs them, then deletes their messages: a
    # result can be read a moment before its log line is written, but not once its
    # message is gone.
    platform.wait_until_idle("minilm-embed", timeout_s=30)
    # Each result was written once. The killed worker may have written a result and
    # died before saying so; then the redelivery found it stored ("duplicate
    # suppressed").
    stored = stored_per_request(platform)
    events = platform.worker_log_events()
    suppressed = {e["request_id"] for e in events if e.get("message") == "duplicate suppressed"}
    assert all(stored[rid] <= 1 for rid in ids), "a result was written twice"
    assert [rid for rid in ids if stored[rid] == 0 and rid not in suppressed] == []
    # The kill caught messages in flight: some were delivered again, and either
    # answered then or found already answered (killed between write and delete).
    redelivered = [
        e
        for e in events
        if e.get("message") in ("result stored", "duplicate suppressed")
        and e.get("request_id") in ids
        and e.get("receive_count", 1) > 1
    ]
    assert redelivered, "the kill did not interrupt any message in flight"
    assert platform.queue_depth("minilm-embed", dlq=True) == 0
    assert platform.worker_pid("minilm-embed") != victim  # replaced, as ECS would


def test_sigterm_drains_the_worker_and_releases_what_it_has_not_started(platform):
    ids, victim = signal_worker_under_load(platform, 60, after=5, sig=signal.SIGTERM)

    results = wait_all_done(platform, ids, timeout=120)

    assert all(r["status"] == "done" for r in results.values())
    # (The worker may log its stop, and end, a moment after the last result is stored.)
    replaced = "worker-minilm-embed-0 exited with 0; starting a new one"
    wait_for(
        lambda: replaced in platform.output,
        timeout_s=60,
        every_s=0.1,
        what="the drained worker was not replaced",
    )
    stopped = [
        e
        for e in platform.worker_log_events()
        if e.get("message") == "stopped" and e.get("worker", "").endswith(f"-{victim}")
    ]
    assert len(stopped) == 1, "the worker did not log a clean stop"
    platform.wait_until_idle("minilm-embed", timeout_s=30)  # every answer logged
    stored = stored_per_request(platform)
    assert {rid: stored[rid] for rid in ids} == {rid: 1 for rid in ids}
    assert platform.queue_depth("minilm-embed", dlq=True) == 0
