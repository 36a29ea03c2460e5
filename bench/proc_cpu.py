"""CPU time per process, from /proc: which part of a running system pays for each
request. On two cores the sum of every process's CPU per request bounds the rate
the whole system can reach, whichever part is the slowest link."""

from __future__ import annotations

import os
import resource
import threading
import time
from pathlib import Path

from harness.local_platform import descendants, stat_fields

_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of one live process (0 if it is gone)."""
    try:
        fields = stat_fields(Path(f"/proc/{pid}/stat").read_text())
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


def role(pid: int) -> str:
    """A short name for a platform process, from its command line and environment."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return "gone"
    if "switchyard_local.emulator" in cmd or "moto.server" in cmd:
        return "emulator"
    if "uvicorn" in cmd and ("switchyard_router" in cmd or "switchyard_local.gateway" in cmd):
        return "router"  # the local platform serves it behind its usage-plan gate
    if "bench.bare_vllm" in cmd:
        return "vllm"
    if "switchyard_worker" in cmd:
        model = ""
        try:
            for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                if item.startswith(b"SWITCHYARD_WORKER_MODEL="):
                    model = item.split(b"=", 1)[1].decode()
        except OSError:
            pass
        return f"worker {model}".strip()
    if "switchyard_local" in cmd or "switchyard_cli" in cmd or "switchyard up" in cmd:
        return "supervisor"
    # The peers' servers, and LitServe's spawned workers (multiprocessing).
    if any(
        n in cmd for n in ("peer_server", "peer_generation_server", "litserve", "multiprocessing")
    ):
        return "litserve"
    return "other"


def machine_busy_seconds() -> float:
    """CPU seconds every process on the machine has spent busy, from /proc/stat."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / _TICK


def self_cpu() -> float:
    """This process's CPU (the load generator runs here)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class CpuMeter:
    """CPU by role across a process tree, between ``start()`` and ``stop()``; the
    tree is listed at start, so processes must already be running. With no root,
    only this process (the load generator, or a model run in it) and the rest of
    the machine are metered."""

    def __init__(self, root_pid: int | None) -> None:
        self.root_pid = root_pid
        self._pids: dict[int, str] = {}
        self._start: dict[int, float] = {}
        self._self = 0.0
        self._machine = 0.0

    def start(self) -> None:
        tree = descendants(self.root_pid) if self.root_pid is not None else []
        self._pids = {p: role(p) for p in tree}
        self._start = {p: cpu_seconds(p) for p in self._pids}
        self._self = self_cpu()
        self._machine = machine_busy_seconds()

    def stop(self) -> tuple[dict[str, float], float]:
        """CPU seconds by role since ``start()``, plus the load generator's; and the
        CPU seconds that other work on the machine spent meanwhile."""
        out: dict[str, float] = {}
        for pid, name in self._pids.items():
            used = max(cpu_seconds(pid) - self._start[pid], 0.0)
            out[name] = out.get(name, 0.0) + used
        out["load generator"] = self_cpu() - self._self
        others = max(machine_busy_seconds() - self._machine - sum(out.values()), 0.0)
        return out, others


def thread_cpu() -> dict[int, tuple[str, float]]:
    """The CPU seconds of every live thread of this process, with its name, by its id."""
    out: dict[int, tuple[str, float]] = {}
    for thread in threading.enumerate():
        if thread.ident is None:
            continue
        try:
            clock = time.pthread_getcpuclockid(thread.ident)
            out[thread.ident] = (thread.name, time.clock_gettime(clock))
        except (OSError, ProcessLookupError):
            continue  # ended meanwhile
    return out
