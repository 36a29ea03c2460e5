"""The local platform's supervisor: the parts of AWS the emulator cannot run.

It starts the emulator (moto in server mode, loopback only), provisions it from the
manifest, serves the router app with uvicorn (where the cloud runs it in Lambda
through Mangum) behind the usage-plan limits API Gateway would apply (``gateway``),
and runs worker processes (where the cloud runs ECS tasks),
replacing a worker that dies as ECS replaces a stopped task. Ctrl-C or SIGTERM
stops every process it started: workers first, so they can drain.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from switchyard import aws
from switchyard.manifest import Manifest, load_manifest
from switchyard_local.bridge import LocalTrafficStore
from switchyard_local.controller import MetricsWindow, RollbackController
from switchyard_local.provision import Provisioned, provision, register_demo_models
from switchyard_local.traffic import Change

LOCAL_STAGE = "dev"
LOCAL_REGION = "us-east-1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Child:
    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    log: IO[bytes] | None = None
    restarts: int = 0

    def start(self) -> None:
        self.log = open(self.log_path, "ab")  # noqa: SIM115 - held for the child's life
        # Each child gets its own process group, so a Ctrl-C in the terminal reaches
        # the supervisor alone, which then stops the children in order (workers
        # drain while the emulator still answers). If the supervisor itself dies,
        # the kernel sends the child SIGTERM.
        self.process = subprocess.Popen(
            self.argv,
            env=self.env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            process_group=0,
            preexec_fn=_terminate_with_parent,
        )

    def restart(self) -> None:
        """A fresh process in place of one that exited (its log is appended to)."""
        if self.log:
            self.log.close()
        self.restarts += 1
        self.start()

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                print(f"{self.name} did not stop within {timeout:.0f}s; killing it", flush=True)
                if self.name.startswith("worker-"):
                    self.process.send_signal(signal.SIGUSR1)  # its stacks, into its log
                    time.sleep(1)
                self.process.kill()
                self.process.wait()
        if self.log:
            self.log.close()


@dataclass
class LocalPlatform:
    manifest_path: Path | None = None
    port: int = 8080
    emulator_port: int | None = None
    run_dir: Path = Path(".run")
    models_dir: Path = Path("build/models")
    workers_per_model: int = 1
    manifest: Manifest = field(init=False)
    children: list[Child] = field(default_factory=list)
    controller: RollbackController | None = None
    workers: list[Child] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.manifest = load_manifest(self.manifest_path)
        self.emulator_port = self.emulator_port or free_port()
        self.run_dir = self.run_dir.resolve()
        (self.run_dir / "logs").mkdir(parents=True, exist_ok=True)
        for stale in self.run_dir.glob("*.ready"):
            stale.unlink()

    @property
    def emulator_url(self) -> str:
        return f"http://127.0.0.1:{self.emulator_port}"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _base_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            AWS_ACCESS_KEY_ID="local",
            AWS_SECRET_ACCESS_KEY="local",  # noqa: S105 - the emulator takes any
            AWS_DEFAULT_REGION=LOCAL_REGION,
            HF_HUB_OFFLINE="1",
            TOKENIZERS_PARALLELISM="false",
            HF_HUB_DISABLE_PROGRESS_BARS="1",
            TRANSFORMERS_VERBOSITY="error",
            PYTHONUNBUFFERED="1",
        )
        env.pop("AWS_PROFILE", None)
        return env

    def start(self) -> None:
        started = time.monotonic()
        emulator = Child(
            "emulator",
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.emulator_port)],
            self._base_env(),
            self.run_dir / "logs" / "emulator.log",
        )
        self._launch(emulator)
        _wait_http(f"{self.emulator_url}/moto-api/", 30, "the AWS emulator")
        env = self._base_env()
        os.environ.update({k: env[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")})

        def clients(service: str) -> Any:
            return aws.client(service, LOCAL_REGION, self.emulator_url)

        provisioned = provision(self.manifest, LOCAL_STAGE, clients)
        register_demo_models(self.manifest, LOCAL_STAGE, clients, self.models_dir.resolve())
        platform_env = self.platform_env(provisioned)
        self._launch(
            Child(
                "router",
                [
                    sys.executable,
                    "-m",
                    "uvicorn",
                    "--factory",
                    "switchyard_local.gateway:create_local_app",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--no-access-log",
                    "--timeout-graceful-shutdown",
                    "5",
                ],
                {**env, **platform_env},
                self.run_dir / "logs" / "router.log",
            )
        )
        for model in self.manifest.models:
            for index in range(self.workers_per_model):
                self._launch(self.worker_child(model, index, {**env, **platform_env}))
        _wait_http(f"{self.url}/healthz", 60, "the router")
        self._wait_workers_ready(300)
        tenant, key = next(iter(provisioned.api_keys.items()))
        self.info = {
            "url": self.url,
            "emulator_url": self.emulator_url,
            "region": LOCAL_REGION,
            "stage": LOCAL_STAGE,
            "api_keys": provisioned.api_keys,
            "default_tenant": tenant,
            "queues": provisioned.queues,
            "dlqs": provisioned.dlqs,
            "env": platform_env,
            "startup_seconds": round(time.monotonic() - started, 2),
        }
        (self.run_dir / "platform.json").write_text(json.dumps(self.info, indent=2) + "\n")
        self._start_controller(clients("appconfig"), provisioned.appconfig_application_id)
        print(f"READY {self.url} api_key={key}", flush=True)

    def _start_controller(self, appconfig: Any, application_id: str) -> None:
        store = LocalTrafficStore(appconfig, application_id)
        window = MetricsWindow(
            self.run_dir / "logs" / "router.log", self.manifest.rollout.window_seconds
        )

        def announce(model: str, change: Change) -> None:
            print(f"ROLLBACK {model}: {change.why}", flush=True)

        self.controller = RollbackController(store, window, self.manifest, announce)
        threading.Thread(target=self.controller.run, name="rollback", daemon=True).start()

    def platform_env(self, provisioned: Provisioned) -> dict[str, str]:
        names, p = provisioned.names, self.manifest.platform
        return {
            "SWITCHYARD_STAGE": LOCAL_STAGE,
            "SWITCHYARD_REGION": LOCAL_REGION,
            "SWITCHYARD_AWS_ENDPOINT_URL": self.emulator_url,
            "SWITCHYARD_REGISTRY_TABLE": names.registry_table,
            "SWITCHYARD_RESULTS_TABLE": names.results_table,
            "SWITCHYARD_JOBS_TABLE": names.jobs_table,
            "SWITCHYARD_PAYLOADS_BUCKET": names.payloads_bucket,
            "SWITCHYARD_ARTIFACTS_BUCKET": names.artifacts_bucket,
            "SWITCHYARD_QUEUES": json.dumps(provisioned.queues),
            "SWITCHYARD_RESULT_TTL_SECONDS": str(p.result_ttl_seconds),
            "SWITCHYARD_CLAIM_CHECK_BYTES": str(p.claim_check_bytes),
            "SWITCHYARD_RESULT_INLINE_BYTES": str(p.result_inline_bytes),
            "SWITCHYARD_MAX_BODY_BYTES": str(p.max_body_bytes),
            "SWITCHYARD_VISIBILITY_TIMEOUT_SECONDS": str(p.visibility_timeout_seconds),
            "SWITCHYARD_ROUTING_SOURCE": "hosted-versions",
            "SWITCHYARD_APPCONFIG_APPLICATION": provisioned.appconfig_application_id,
            "SWITCHYARD_APPCONFIG_ENVIRONMENT": LOCAL_STAGE,
            "SWITCHYARD_ARTIFACTS_CACHE": str(self.run_dir / "artifacts"),
            "SWITCHYARD_PREDICTION_LOG_STREAM": names.prediction_log_stream,
            "SWITCHYARD_PREDICTION_LOGS_BUCKET": names.prediction_logs_bucket,
        }

    def worker_child(self, model: str, index: int, env: dict[str, str]) -> Child:
        name = f"worker-{model}-{index}"
        return Child(
            name,
            [sys.executable, "-m", "switchyard_worker"],
            {
                **env,
                "SWITCHYARD_WORKER_MODEL": model,
                "SWITCHYARD_READY_FILE": str(self.run_dir / f"{name}.ready"),
            },
            self.run_dir / "logs" / f"{name}.log",
        )

    def _launch(self, child: Child) -> None:
        child.start()
        self.children.append(child)
        if child.name.startswith("worker-"):
            self.workers.append(child)

    def _wait_workers_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for worker in self.workers:
            ready = self.run_dir / f"{worker.name}.ready"
            while not ready.exists():
                if not worker.alive():
                    raise RuntimeError(f"{worker.name} exited; see {worker.log_path}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{worker.name} not ready after {timeout:.0f}s")
                time.sleep(0.1)

    def supervise(self) -> None:
        """Replace dead workers until asked to stop (as ECS replaces stopped tasks)."""
        stop = {"now": False}

        def on_signal(*_: Any) -> None:
            stop["now"] = True

        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
        while not stop["now"]:
            for worker in self.workers:
                if not worker.alive() and worker.process is not None:
                    code = worker.process.returncode
                    print(f"{worker.name} exited with {code}; starting a new one", flush=True)
                    (self.run_dir / f"{worker.name}.ready").unlink(missing_ok=True)
                    worker.restart()
            for child in self.children:
                if child.name == "router" and not child.alive() and child.process is not None:
                    # A new router process, as Lambda starts a new instance.
                    code = child.process.returncode
                    print(f"router exited with {code}; starting a new one", flush=True)
                    child.restart()
                if child.name == "emulator" and not child.alive():
                    print("the emulator exited; stopping the platform", flush=True)
                    stop["now"] = True
            time.sleep(0.2)

    def stop(self) -> None:
        if self.controller is not None:
            self.controller.stop()
        for worker in self.workers:
            if worker.process and worker.process.poll() is None:
                worker.process.send_signal(signal.SIGTERM)
        for worker in self.workers:
            worker.stop(timeout=60)
        for child in reversed(self.children):
            if child not in self.workers:
                child.stop(timeout=10)


def _terminate_with_parent() -> None:
    """In the child, before exec: SIGTERM when the supervisor dies (Linux)."""
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


_PR_SET_PDEATHSIG = 1


def _wait_http(url: str, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2):  # noqa: S310 - loopback
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"{what} did not answer at {url} within {timeout:.0f}s")
