"""The local platform as real processes, started as a person starts it and stopped
as Ctrl-C stops it: the one harness of the e2e tier (``tests/e2e/conftest.py``) and
the benchmarks (``bench/platform_proc.py``).

The platform runs in its own session, in a run dir the caller owns, with PORT,
SWITCHYARD_RUN_DIR and SWITCHYARD_MANIFEST (the caller's copy of the manifest, in
the run dir) in its environment. It is ready when it prints its READY line; then
``platform.json`` in the run dir says where everything is. Its output is collected
line by line while it runs (``RunningPlatform.output``), so that a test can wait for
a notice and a failure can show the last lines. It is stopped with SIGINT to its
process group, as Ctrl-C in the terminal, and the group is killed only if it does
not stop in time.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.waiting import wait_for
from harness.worker_log import delivery_events
from switchyard_local.emulator import free_port
from switchyard_local.lifetime import terminate_with_parent
from switchyard_local.role_policies import act_as_operator

ROOT = Path(__file__).resolve().parents[1]
READY = re.compile(r"^READY (http://127\.0\.0\.1:(\d+)) api_key=(\S+)$")
READY_TIMEOUT_S = 300.0
STOP_TIMEOUT_S = 90.0  # the workers drain first
WORKER_READY_TIMEOUT_S = 120.0
_HEADER = re.compile(r"^\[([^\]]+)\]\s*$")
# The emulator takes any credentials; boto3 wants some.
LOCAL_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local"}


def use_local_credentials() -> None:
    """Credentials for this process's clients of a local emulator, unless set."""
    for name, value in LOCAL_CREDENTIALS.items():
        os.environ.setdefault(name, value)


@dataclass
class RunningPlatform:
    """A started platform: its process (the session's leader), where it answers, its
    run dir and ``platform.json`` (``info``), and every line it has printed so far."""

    process: subprocess.Popen[str]
    url: str
    api_key: str
    ready_line: str
    run_dir: Path
    info: dict[str, Any]
    output: list[str]

    @property
    def keys(self) -> dict[str, str]:
        return self.info["api_keys"]

    def client(self, service: str) -> Any:
        """A boto3 client of the platform's emulator, as its operator (the emulator
        enforces IAM: ``admin_credentials`` in ``platform.json``)."""
        return self.client_as(service, self.info["admin_credentials"])

    def act_as_operator(self) -> None:
        """This process's clients (``switchyard.aws``, adapters built here) call the
        platform's emulator as its operator from now on."""
        act_as_operator(self.info)

    def client_as(self, service: str, keys: dict[str, str]) -> Any:
        """A boto3 client of the platform's emulator with the access key ``keys``
        (``aws_access_key_id``, ``aws_secret_access_key``)."""
        import boto3

        return boto3.client(
            service,
            region_name=self.info["region"],
            endpoint_url=self.info["emulator_url"],
            **keys,
        )

    def scaling(self) -> dict[str, Any]:
        """The autoscaler's state as it last wrote it (``scaling.json``): each
        model's workers (running, starting, draining, desired) and its figures."""
        return json.loads((self.run_dir / "scaling.json").read_text())

    def service_of(self, model: str) -> str:
        """The worker service that serves ``model``: its own (named after it), or
        its pool."""
        for service, models in self.info.get("services", {}).items():
            if model in models:
                return str(service)
        return model

    def at_zero(self, model: str) -> bool:
        """No worker of ``model``'s service running, starting or draining, and none
        wanted."""
        w = self.scaling()["models"][model]["workers"]
        return w["running"] == w["starting"] == w.get("draining", 0) == w["desired"] == 0

    def worker_pid(self, model: str) -> int:
        """The pid of the first worker of ``model``'s service, once it is ready (its
        ready file names it: ``<worker>-<pid>``)."""
        ready = self.run_dir / f"worker-{self.service_of(model)}-0.ready"
        return wait_for(
            lambda: ready_pid(ready),
            WORKER_READY_TIMEOUT_S,
            every_s=0.1,
            what=f"{ready} never appeared",
        )

    def stacks(self) -> str:
        """Every thread's stack of the router and of each ready worker, now: each is
        sent SIGUSR1 (they print their stacks to their logs) and what their logs
        gained is returned. For a test that fails: what the platform was doing."""
        logs = self.run_dir / "logs"
        # Only the platform's own processes: a ready file may outlive its worker.
        ours = set(descendants(self.process.pid))
        targets = {pid: logs / "router.log" for pid in ours if b"create_local_app" in cmdline(pid)}
        for ready in self.run_dir.glob("worker-*.ready"):
            pid = ready_pid(ready)
            if pid in ours:
                targets[pid] = logs / f"{ready.name.removesuffix('.ready')}.log"
        sizes = {}
        for pid, log in targets.items():
            try:
                sizes[pid] = log.stat().st_size
                os.kill(pid, signal.SIGUSR1)
            except OSError:
                continue
        time.sleep(1)  # faulthandler writes from its signal handler: time to land
        parts = []
        for pid, size in sizes.items():
            with targets[pid].open("rb") as log:
                log.seek(size)
                gained = log.read().decode(errors="replace")
            stacks = [line for line in gained.splitlines() if line.startswith(_STACK_LINES)]
            parts.append("\n".join([f"== {targets[pid].name} (pid {pid})", *stacks]))
        return "\n".join(parts)

    def log_events(self, pattern: str) -> list[dict[str, Any]]:
        """The JSON lines of the run's logs named by ``pattern`` (a glob under
        ``logs/``); tracebacks and other lines are skipped."""
        return json_lines(
            line
            for path in sorted((self.run_dir / "logs").glob(pattern))
            for line in path.read_text(errors="replace").splitlines()
        )

    def worker_log_events(self) -> list[dict[str, Any]]:
        """Every worker's log events, a batch's stored results read as one event per
        request (``harness.worker_log``)."""
        return delivery_events(self.log_events("worker-*.log"))

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The operator's CLI (``switchyard ...``) against this platform, as an
        operator runs it; its exit status is the caller's to judge."""
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "switchyard_cli",
                "--run-dir",
                str(self.run_dir),
                "--manifest",
                str(self.run_dir / "manifest.toml"),
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, **LOCAL_CREDENTIALS},
            check=False,
        )

    def queue_depth(self, model: str, lane: str = "realtime", dlq: bool = False) -> int:
        """Messages on a lane's queue (or its DLQ), visible or in flight."""
        url = self.info["dlqs" if dlq else "queues"][model][lane]
        attrs = self.client("sqs").get_queue_attributes(
            QueueUrl=url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return int(attrs["ApproximateNumberOfMessages"]) + int(
            attrs["ApproximateNumberOfMessagesNotVisible"]
        )

    def wait_until_idle(self, model: str, timeout_s: float = 180) -> None:
        """Wait for both lanes of a model to empty, so that a test's async
        backlog does not sit in front of the next test's requests."""
        wait_for(
            lambda: not (self.queue_depth(model, "realtime") or self.queue_depth(model, "batch")),
            timeout_s,
            what=f"{model}'s queues to empty",
        )

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Ctrl-C, and wait for every process to stop; kill the group if it hangs."""
        stop(self.process, timeout)

    def kill(self) -> None:
        """SIGKILL the process group at once (a last resort: nothing drains)."""
        kill(self.process)


def json_lines(lines: Iterable[str]) -> list[dict[str, Any]]:
    """The JSON objects among a log's lines (tracebacks and other lines skipped)."""
    events = []
    for line in lines:
        if line.startswith("{"):
            try:
                events.append(json.loads(line))
            except ValueError:
                continue
    return events


def ready_pid(path: Path) -> int | None:
    """The pid a worker's ready file names (``<worker>-<pid>``), None before it is
    written."""
    try:
        return int(path.read_text().rsplit("-", 1)[1])
    except (OSError, ValueError, IndexError):
        return None


def stat_fields(stat: str) -> list[str]:
    """The fields of a ``/proc/<pid>/stat`` text after the command name (state,
    ppid, pgrp, session, ...): the name, in parentheses, may itself hold spaces and
    parentheses."""
    return stat.rsplit(")", 1)[1].split()


def processes() -> Iterator[tuple[int, list[str]]]:
    """Every process now, with its ``stat_fields``."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        yield int(entry.name), stat_fields(stat)


# What faulthandler prints of a thread's stack, among a log's other lines.
_STACK_LINES = ("Thread 0x", "Current thread 0x", "  File ")


def cmdline(pid: int) -> bytes:
    """A process's command line as /proc has it (NUL-separated); empty once it is
    gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it now (one scan of /proc)."""
    children: dict[int, list[int]] = {}
    for child, fields in processes():
        children.setdefault(int(fields[1]), []).append(child)
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo.extend(children.get(p, []))
    return found


def start(
    run_dir: Path,
    manifest_text: str,
    env: Mapping[str, str],
    command: Sequence[str],
    ready_timeout: float = READY_TIMEOUT_S,
) -> RunningPlatform:
    """Run ``command`` (``make up``, or ``switchyard up`` itself) from the repository
    with ``manifest_text`` and ``env`` (``SWITCHYARD_*`` settings of `switchyard up`,
    over this process's environment) in ``run_dir``; return once it has printed its
    READY line. A platform that exits or is not ready within ``ready_timeout`` is
    stopped, and the error shows its last lines."""
    manifest = run_dir / "manifest.toml"
    manifest.write_text(manifest_text)
    port = free_port()
    # A new session stands in for the terminal's foreground process group, so that
    # stop() can press Ctrl-C on all of it.
    process = subprocess.Popen(
        list(command),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={
            **os.environ,
            **env,
            "PORT": str(port),
            "SWITCHYARD_MANIFEST": str(manifest),
            "SWITCHYARD_RUN_DIR": str(run_dir),
        },
        start_new_session=True,
        # Stopped with this process even when it is killed outright (a bench run cut
        # short by `timeout`): the kernel sends SIGTERM, which stops it as Ctrl-C does.
        preexec_fn=terminate_with_parent,
    )
    output: list[str] = []
    ready: list[re.Match[str]] = []

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            output.append(line.rstrip("\n"))
            match = READY.match(line.strip())
            if match:
                ready.append(match)

    threading.Thread(target=pump, name="platform-output", daemon=True).start()
    deadline = time.monotonic() + ready_timeout
    while not ready:
        if process.poll() is not None or time.monotonic() > deadline:
            stop(process)
            raise RuntimeError("the platform did not become ready:\n" + "\n".join(output[-40:]))
        time.sleep(0.2)
    match = ready[0]
    if int(match.group(2)) != port:
        stop(process)
        raise RuntimeError(f"{match.group(0)!r}: not on PORT {port}")
    info = json.loads((run_dir / "platform.json").read_text())
    return RunningPlatform(
        process, match.group(1), match.group(3), match.group(0), run_dir, info, output
    )


def stop(process: subprocess.Popen[str], timeout: float = STOP_TIMEOUT_S) -> None:
    """SIGINT to the process group (Ctrl-C) and wait; kill the group if it hangs."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGINT)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        kill(process)


def kill(process: subprocess.Popen[str]) -> None:
    """SIGKILL the process group (the supervisor's children follow it: they are
    sent SIGTERM when it dies)."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)


def set_everywhere(text: str, values: Mapping[str, int]) -> str:
    """The manifest with each ``key = <number>`` line, in whichever table it stands,
    set to ``values[key]``; the rest of the line (its comment) is kept."""
    for key, value in values.items():
        text, found = re.subn(rf"(?m)^{re.escape(key)}\s*=\s*\d+", f"{key} = {value}", text)
        if not found:
            raise ValueError(f"the manifest has no setting {key!r}")
    return text


def edit_manifest(
    text: str,
    keep_models: set[str] | None = None,
    settings: Mapping[str, Mapping[str, Any]] | None = None,
) -> str:
    """The manifest with only ``keep_models`` (and the pools that still serve one of
    them) and with ``settings`` replaced per model (``{"minilm-embed":
    {"max_batch_size": 1}}``). Edits are made line by line in the model's own table,
    so comments and the rest of the file are kept as they are."""
    settings = settings or {}
    models = tomllib.loads(text).get("models", {})
    kept_pools = {
        spec.get("pool")
        for name, spec in models.items()
        if keep_models is None or name in keep_models
    }
    out: list[str] = []
    section = ""
    for line in text.splitlines():
        header = _HEADER.match(line)
        if header:
            section = header.group(1).strip()
        # A model's own table and its sub-tables ([models.<model>.scaling]); a pool's.
        model = section.split(".")[1] if section.startswith("models.") else None
        if model is not None and keep_models is not None and model not in keep_models:
            continue
        pool = section.split(".")[1] if section.startswith("pools.") else None
        if pool is not None and pool not in kept_pools:
            continue
        if model is not None and not header:
            for key, value in settings.get(model, {}).items():
                if re.match(rf"^{re.escape(key)}\s*=", line):
                    line = f"{key} = {json.dumps(value)}"
        out.append(line)
    edited = "\n".join(out) + "\n"
    tomllib.loads(edited)  # still a valid manifest file
    return edited


def pooled(
    text: str,
    pool: str,
    models: Iterable[str],
    *,
    memory_budget_mib: int,
    compute: str = "cpu",
    instance_types: Sequence[str] = ("c7i.xlarge",),
    scaling: Mapping[str, int] | None = None,
) -> str:
    """The manifest with ``models`` served by a new pool ``pool`` of ``compute``
    hosts, ``memory_budget_mib`` per worker (``scaling``: the pool's overrides of its
    stages' values): each model names the pool and gives up its instance types and
    its own scaling, as a pooled model must. The rest of the file is kept as it is."""
    models = set(models)
    out: list[str] = []
    section = ""
    for line in text.splitlines():
        header = _HEADER.match(line)
        if header:
            section = header.group(1).strip()
        parts = section.split(".")
        model = parts[1] if parts[0] == "models" and len(parts) > 1 else None
        if model in models:
            if len(parts) > 2:  # [models.<model>.scaling] and its settings, not its comments
                if not header and (not line.strip() or line.lstrip().startswith("#")):
                    out.append(line)
                continue
            if not header and re.match(r"^(instance_types|compute|pool)\s*=", line):
                continue
            out.append(line)
            if header:
                out += [f'pool = "{pool}"', f'compute = "{compute}"']
            continue
        out.append(line)
    out += [
        "",
        f"[pools.{pool}]",
        f'compute = "{compute}"',
        f"instance_types = {json.dumps(list(instance_types))}",
        f"memory_budget_mib = {memory_budget_mib}",
    ]
    if scaling:
        out.append(f"scaling = {{ {', '.join(f'{k} = {v}' for k, v in scaling.items())} }}")
    edited = "\n".join(out) + "\n"
    tomllib.loads(edited)  # still a valid manifest file
    return edited
