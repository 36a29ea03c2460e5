"""Tests of the Ray Serve peer's own logic: naming Ray's processes, finding a peer's
leftover processes, the shared peer run, and keeping its comparison on a merged
rerun. Ray is never imported: ``make test`` does not install the bench's packages."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from bench import __main__ as bench_main
from bench import peer_litserve
from bench.common import ROOT
from bench.peer_litserve import run_peer, session_members, stat_session
from bench.peer_rayserve import RayCpuMeter, ray_role
from harness.local_platform import stat_fields

SITE = "/work/.venv/lib/python3.11/site-packages/ray"


@pytest.mark.parametrize(
    ("cmdline", "expected"),
    [
        ("ray::ServeReplica:default:MiniLMDeployment", "ray replica"),
        ("ray::ProxyActor", "ray proxy"),
        ("ray::ServeController", "ray controller"),
        (f"{SITE}/core/src/ray/gcs/gcs_server --log_dir=/tmp/ray-x/logs", "ray gcs"),
        (f"{SITE}/core/src/ray/raylet/raylet --raylet_socket_name=/tmp/ray-x/raylet", "raylet"),
        ("/work/.venv/bin/python -m bench.peer_rayserve_server --port 4100", "ray driver"),
        ("ray::DashboardAgent", "ray other"),
        ("ray::RuntimeEnvAgent", "ray other"),
        (f"/work/.venv/bin/python -u {SITE}/_private/log_monitor.py", "ray other"),
        ("ray::IDLE", "ray other"),
    ],
)
def test_ray_role_names_each_process_by_what_it_does(cmdline: str, expected: str) -> None:
    assert ray_role(cmdline) == expected


def test_ray_role_names_the_raylet_by_its_binary_not_its_arguments() -> None:
    # GIVEN the GCS, whose arguments name the raylet's socket directory too
    cmdline = f"{SITE}/core/src/ray/gcs/gcs_server --raylet_socket=/tmp/ray-x/raylet/raylet"
    # WHEN it is named  THEN it is the GCS
    assert ray_role(cmdline) == "ray gcs"


def test_ray_cpu_meter_names_the_tree_with_ray_roles(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a meter over this process, which Ray's naming reads as the replica
    monkeypatch.setattr(
        "bench.peer_rayserve._cmdline", lambda pid: "ray::ServeReplica:default:MiniLMDeployment"
    )
    meter = RayCpuMeter(os.getpid())
    # WHEN it meters a step
    meter.start()
    used, _others = meter.stop()
    # THEN the process is counted under its Ray role, beside the load generator
    assert set(used) == {"ray replica", "load generator"}


@pytest.mark.parametrize(
    ("stat", "session"),
    [
        ("4242 (raylet) S 4200 4200 4200 0 -1 4194560 2771", 4200),
        ("77 (ray::ServeRepli) R 70 70 69 0 -1 4194560 10", 69),
        ("9 (a) b (c) S 1 9 8 0 -1 0 0", 8),  # a command name with spaces and parentheses
    ],
)
def test_stat_session_reads_the_session_field(stat: str, session: int) -> None:
    assert stat_session(stat_fields(stat)) == session


def test_session_members_lists_a_session_s_live_processes() -> None:
    # GIVEN a process in a session of its own
    sleeper = [sys.executable, "-c", "import time; time.sleep(30)"]
    child = subprocess.Popen(sleeper, start_new_session=True)
    try:
        # WHEN its session is listed  THEN it is there, and this process is not
        members = session_members(child.pid)
        assert members == [child.pid]
        assert os.getpid() not in members
    finally:
        child.kill()
        child.wait()
    # AND once it is gone, the session is empty
    assert session_members(child.pid) == []


def test_the_orchestrator_does_not_import_ray() -> None:
    code = "import sys, bench.peer_rayserve; sys.exit('ray' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=False).returncode == 0


def _step(rate: float, sustained: bool) -> dict[str, Any]:
    return {"rate": rate, "sustained": sustained, "p99_ms": 100.0 if sustained else 900.0}


def test_run_peer_measures_the_started_server_with_its_own_meter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN a fake server, a fake ladder and a meter factory that records its pid
    seen: dict[str, Any] = {}

    @contextmanager
    def server() -> Iterator[tuple[str, int]]:
        seen["started"] = True
        yield "http://127.0.0.1:9", 4321
        seen["stopped"] = True

    def ladder(url: str, send: Any, rates: Any, seconds: float, log: Any, **kw: Any) -> list:
        seen["meter"] = kw["meter"]
        return [_step(5, True), _step(10, True), _step(20, False)]

    monkeypatch.setattr(peer_litserve, "run_sequential", lambda url, send, n: [])
    monkeypatch.setattr(peer_litserve, "run_ladder", ladder)
    # WHEN the peer's section runs
    out = run_peer(server(), "Fake", {"max_batch_size": 32}, True, lambda m: None, lambda p: p)
    # THEN the settings lead, the meter was made for the server's pid, and the
    # sustainable rate is the highest sustained step
    assert list(out)[0] == "max_batch_size"
    assert seen == {"started": True, "stopped": True, "meter": 4321}
    assert out["sustainable_rate"] == 10
    assert out["one_request_mean_ms"] is None


def test_peer_rayserve_runs_after_peer_litserve() -> None:
    sections = list(bench_main.SECTIONS)
    assert sections.index("peer_rayserve") == sections.index("peer_litserve") + 1
    assert bench_main.PEER_COMPARISONS["comparison_rayserve"] == "peer_rayserve"


def _results(**extra: Any) -> dict[str, Any]:
    return {
        "sections": {},
        "timing": {},
        "machine": {"cores": 2},
        "failed_sections": [],
        **extra,
    }


def test_merged_rerun_keeps_the_ray_serve_comparison_it_made(tmp_path: Path) -> None:
    # GIVEN a report with both comparisons, and a rerun that made a new Ray Serve one
    previous = tmp_path / "benchmarks.json"
    previous.write_text(
        json.dumps(_results(comparison={"run": "old"}, comparison_rayserve={"run": "old"}))
    )
    fresh = _results(comparison_rayserve={"run": "new"})
    # WHEN merged
    report = bench_main.merged(previous, fresh)
    # THEN the new comparison replaces the old one, and the other is kept
    assert report["comparison_rayserve"] == {"run": "new"}
    assert report["comparison"] == {"run": "old"}
