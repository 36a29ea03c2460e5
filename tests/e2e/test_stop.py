"""Ctrl-C stops every process the platform started. Runs last in this tier."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from harness.local_platform import ROOT, cmdline, descendants, stat_fields
from switchyard_local.emulator import free_port


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat_fields(stat.read_text())[0] != "Z"


def test_ctrl_c_stops_every_process_it_started(platform):
    started = descendants(platform.process.pid)[1:]  # make's children and below
    # Serving workers (those that logged polling, under their pid) drain and log
    # their stop; a standby (imports done, no model yet) has nothing to drain and is
    # stopped all the same.
    serving = {
        int(str(e["worker"]).rsplit("-", 1)[1])
        for e in platform.worker_log_events()
        if e.get("message") == "polling"
    }
    workers = [p for p in started if b"switchyard_worker" in cmdline(p) and p in serving]
    standbys = [p for p in started if b"switchyard_worker" in cmdline(p) and p not in serving]
    stops_before = stops(platform)
    assert len(started) >= 5  # the supervisor, emulator, router, at least a worker per model
    assert len(workers) >= 2
    os.killpg(platform.process.pid, signal.SIGINT)  # Ctrl-C in the terminal
    platform.process.wait(timeout=90)
    deadline = time.monotonic() + 60  # make may exit before the supervisor has drained
    while any(alive(p) for p in started) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert survivors(started) == {}
    assert not any(alive(p) for p in standbys)
    # and the CLI finds no platform to talk to (it tried the stopped one's emulator)
    assert not (platform.run_dir / "platform.json").exists()
    # The workers drained rather than died: each logged a clean stop. (One that does
    # not stop in time is killed, after its stacks go to its log.)
    assert stops(platform) - stops_before == len(workers), "\n".join(
        [line for line in platform.output if "did not stop" in line]
        + [
            tail
            for path in sorted((platform.run_dir / "logs").glob("worker-*.log"))
            for tail in [f"== {path.name}", *path.read_text(errors="replace").splitlines()[-40:]]
        ]
    )


def survivors(pids: list[int]) -> dict[int, str]:
    """Those of ``pids`` still alive, each with its command line."""
    return {p: cmdline(p).replace(b"\0", b" ").decode(errors="replace") for p in pids if alive(p)}


def stops(platform) -> int:
    return sum(1 for e in platform.worker_log_events() if e.get("message") == "stopped")


def test_ctrl_c_while_it_starts_stops_what_has_started(tmp_path):
    # Started as a shell's background job is (`make up &`): SIGINT ignored. Ctrl-C
    # before READY was lost, and the platform came up and served until a second one.
    run = tmp_path / "run"
    process = subprocess.Popen(
        [sys.executable, "-m", "switchyard_cli", "--run-dir", str(run), "up",
         "--port", str(free_port())],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        # its emulator is starting or up: the start is under way, READY is seconds off
        while not (run / "logs" / "emulator.log").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        started = descendants(process.pid)
        os.killpg(process.pid, signal.SIGINT)
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 0, output
    assert "READY" not in output
    assert survivors(started) == {}, output
    assert not (run / "platform.json").exists()


STARTER = """
import sys, time
from pathlib import Path
from tests.e2e.conftest import e2e_manifest, start_platform
from harness.local_platform import edit_manifest
platform = start_platform(
    Path(sys.argv[1]),
    edit_manifest(e2e_manifest(), keep_models={"digits-cnn"}),
    {"SWITCHYARD_MIN_WORKERS": "0", "SWITCHYARD_STANDBY_WORKERS": "0"},
)
print("platform pid", platform.process.pid, flush=True)
time.sleep(600)
"""


def test_a_platform_stops_when_the_process_that_started_it_is_killed(tmp_path):
    # GIVEN a platform started by the harness from another process (as a bench run
    # starts one), in a session of its own
    run = tmp_path / "run"
    run.mkdir()
    started: list[int] = []
    starter = subprocess.Popen(
        [sys.executable, "-c", STARTER, str(run)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert starter.stdout is not None
        said = next((line for line in starter.stdout if line.startswith("platform pid ")), "")
        assert said, "the starter exited before its platform was ready"
        platform_pid = int(said.split()[-1])
        started = descendants(platform_pid)
        assert (run / "platform.json").exists()
        # WHEN that process is killed outright (as `timeout` or the OOM killer does)
        starter.kill()
        starter.wait(10)
        # THEN the platform stops as after Ctrl-C: every process it started ends, and
        # it removes its record
        deadline = time.monotonic() + 90
        while survivors(started) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert survivors(started) == {}
        assert not (run / "platform.json").exists()
    finally:
        if starter.poll() is None:
            starter.kill()
        for pid in survivors(started):  # a failed run leaves nothing behind either
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
