"""What a test of the shared platform that fails carries in its report: every thread's
stack of the router and of each ready worker (``RunningPlatform.stacks``), read from
the processes as they run. A request that never ends shows where it waits."""

from __future__ import annotations

import re

import httpx


def test_the_router_and_workers_print_their_stacks_and_go_on_serving(platform):
    # GIVEN the shared platform, serving
    # WHEN its stacks are asked for, as a failing test's report does
    text = platform.stacks()
    parts = dict(
        part.partition("\n")[::2] for part in re.split(r"^== ", text, flags=re.MULTILINE) if part
    )
    # THEN the router's threads are there, its server's loop among them
    (router,) = [stacks for name, stacks in parts.items() if name.startswith("router.log")]
    assert "uvicorn" in router and "Thread 0x" in router
    # AND each ready worker's, in its own log's part
    workers = [stacks for name, stacks in parts.items() if name.startswith("worker-")]
    assert workers and all("switchyard_worker" in stacks for stacks in workers)
    # AND none of them stopped for it: the router still answers
    assert httpx.get(f"{platform.url}/healthz", timeout=10).status_code == 200
