"""The local platform's supervisor: the parts of AWS the emulator cannot run.

It builds the deployed layouts (``stacks.assets``: the core layer, the function
assets and the worker image's ``/app``, with the CDK app's own bundling code; cached
by content), starts the emulator (moto in server mode, loopback only), provisions it
from the manifest, serves the router app from its built layout with uvicorn (where
the cloud runs it in Lambda through Mangum) behind a stand-in for API Gateway
(``gateway``), and runs worker processes from the image's layout (where the cloud
runs ECS tasks), replacing a worker that dies as ECS replaces a stopped task. It
never runs deployed code from the source tree (``deployed``). Ctrl-C or SIGTERM stops
every process it started: workers first, so they can drain.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from stacks.assets import MANIFEST_FILE, Layouts, build_layouts
from switchyard import aws
from switchyard.manifest import DROP_BATCH_SIZE, Manifest, load_manifest
from switchyard.settings import RouterSettings, SplitterSettings, WorkerSettings, to_environment
from switchyard_local.bridge import ExtensionStandIn, LocalTrafficStore
from switchyard_local.controller import MetricsWindow, RollbackController
from switchyard_local.deployed import Launcher, LocalFunction
from switchyard_local.emulator import emulator_argv, free_port, wait_http
from switchyard_local.event_source import SqsEventSource
from switchyard_local.provision import Provisioned, provision, register_demo_models
from switchyard_local.traffic import Change

LOCAL_STAGE = "dev"
LOCAL_REGION = "us-east-1"


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

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

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
    manifest_path: Path = MANIFEST_FILE
    port: int = 8080
    emulator_port: int | None = None
    run_dir: Path = Path(".run")
    models_dir: Path = Path("build/models")
    workers_per_model: int = 1
    # Run deployed code exactly at /opt/python, /var/task and /app (a mount namespace
    # per process; Linux, as root), as the deploy test tier does.
    exact_paths: bool = False
    manifest: Manifest = field(init=False)
    layouts: Layouts | None = None
    provisioned: Provisioned | None = None
    # The AppConfig Lambda extension's HTTP API, served from the emulator.
    extension: ExtensionStandIn | None = None
    # The splitter function and the event source mapping of the batch-drop queue.
    splitter: LocalFunction | None = None
    drop_events: SqsEventSource | None = None
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

    @property
    def launcher(self) -> Launcher:
        assert self.layouts is not None, "start() builds the layouts first"
        return Launcher(self.layouts, self.exact_paths)

    def _base_env(self) -> dict[str, str]:
        return base_environment()

    def start(self) -> None:
        started = time.monotonic()
        self.layouts = self._build_layouts()
        emulator = Child(
            "emulator",
            emulator_argv(self.emulator_port or 0),
            self._base_env(),
            self.run_dir / "logs" / "emulator.log",
        )
        self._launch(emulator)
        _wait_http(f"{self.emulator_url}/moto-api/", 30, "the AWS emulator", emulator)
        env = self._base_env()
        os.environ.update({k: env[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")})

        provisioned = provision(self.manifest, LOCAL_STAGE, self.emulator_url, LOCAL_REGION)
        self.provisioned = provisioned
        register_demo_models(provisioned, self.models_dir.resolve())
        appconfig = aws.client("appconfig", LOCAL_REGION, self.emulator_url)
        self.extension = ExtensionStandIn(appconfig, provisioned.appconfig_application_id)
        router = self.router_child()
        self._launch(router)
        for model in self.manifest.models:
            for index in range(self.workers_per_model):
                self._launch(self.worker_child(model, index))
        _wait_http(f"{self.url}/healthz", 60, "the router", router)
        self._wait_workers_ready(300)
        self._start_splitter()
        tenant, key = next(iter(provisioned.api_keys.items()))
        names = provisioned.names
        self.info = {
            "url": self.url,
            "emulator_url": self.emulator_url,
            "region": LOCAL_REGION,
            "stage": LOCAL_STAGE,
            "api_keys": provisioned.api_keys,
            "default_tenant": tenant,
            "queues": provisioned.queues,
            "dlqs": provisioned.dlqs,
            "drop_queue": provisioned.drop_queue,
            # Settings every process shares; the CLI builds its adapters from them.
            "settings": provisioned.settings_values(),
            "names": {
                "artifacts_bucket": names.artifacts_bucket,
                "batch_drop_bucket": names.batch_drop_bucket,
                "prediction_logs_bucket": names.prediction_logs_bucket,
                "jobs_table": names.jobs_table,
                "appconfig_application_id": provisioned.appconfig_application_id,
            },
            "layouts": {k: str(v) for k, v in vars(self.layouts).items()},
            "exact_paths": self.exact_paths,
            "startup_seconds": round(time.monotonic() - started, 2),
        }
        (self.run_dir / "platform.json").write_text(json.dumps(self.info, indent=2) + "\n")
        self._start_controller(appconfig, provisioned.appconfig_application_id)
        print(f"READY {self.url} api_key={key}", flush=True)

    def _start_splitter(self) -> None:
        """The splitter function from its asset, fed by the batch-drop queue as
        Lambda's event source mapping feeds it (``event_source``)."""
        assert self.provisioned is not None
        command = self.launcher.lambda_handler("splitter")
        env = {
            **self._base_env(),
            **to_environment(SplitterSettings, self.provisioned.splitter_values()),
        }
        self.splitter = LocalFunction(command, env, self.run_dir / "logs" / "splitter.log")
        self.splitter.warm()  # its cold start now, not under the first drop's load
        self.drop_events = SqsEventSource(
            aws.client("sqs", LOCAL_REGION, self.emulator_url),
            self.provisioned.drop_queue,
            self.splitter.invoke,
            region=LOCAL_REGION,
            batch_size=DROP_BATCH_SIZE,
        )
        self.drop_events.start()

    def _build_layouts(self) -> Layouts:
        began = time.monotonic()
        layouts = build_layouts()
        took = time.monotonic() - began
        if took > 2:
            print(f"built the deployed layouts in {took:.0f}s (cached in build/)", flush=True)
        return layouts

    def _start_controller(self, appconfig: Any, application_id: str) -> None:
        store = LocalTrafficStore(appconfig, application_id)
        window = MetricsWindow(
            self.run_dir / "logs" / "router.log", self.manifest.rollout.window_seconds
        )

        def announce(model: str, change: Change) -> None:
            print(f"ROLLBACK {model}: {change.why}", flush=True)

        self.controller = RollbackController(store, window, self.manifest, announce)
        threading.Thread(target=self.controller.run, name="rollback", daemon=True).start()

    def router_child(self) -> Child:
        """The router's app from its function asset, behind the API Gateway stand-in."""
        assert self.provisioned is not None and self.extension is not None
        command = self.launcher.router_server(
            [
                "--factory",
                "switchyard_local.gateway:create_local_app",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--no-access-log",
                "--timeout-graceful-shutdown",
                "5",
            ]
        )
        settings = to_environment(
            RouterSettings, self.provisioned.router_values(self.extension.url)
        )
        return Child(
            "router",
            command.argv,
            {**self._base_env(), **command.env, **settings},
            self.run_dir / "logs" / "router.log",
        )

    def worker_child(self, model: str, index: int) -> Child:
        """A worker of ``model`` from the image's layout, as an ECS task runs it."""
        assert self.provisioned is not None
        name = f"worker-{model}-{index}"
        command = self.launcher.worker()
        settings = to_environment(
            WorkerSettings,
            {
                **self.provisioned.worker_values(model),
                "artifacts_cache": str(self.run_dir / "artifacts"),
                "ready_file": str(self.run_dir / f"{name}.ready"),
            },
        )
        # On one machine the model's threads share the cores with the emulator and
        # the router: threads that sleep at a barrier, rather than spin, leave them
        # the CPU (an ECS task has its cores to itself and keeps the default).
        sharing = {"OMP_WAIT_POLICY": "PASSIVE"}
        return Child(
            name,
            command.argv,
            {**self._base_env(), **sharing, **command.env, **settings},
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
                    raise RuntimeError(f"{worker.name} exited:\n{worker.log_tail()}")
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
        if self.drop_events is not None:
            self.drop_events.stop()
        if self.splitter is not None:
            self.splitter.close()
        for worker in self.workers:
            if worker.process and worker.process.poll() is None:
                worker.process.send_signal(signal.SIGTERM)
        for worker in self.workers:
            worker.stop(timeout=60)
        for child in reversed(self.children):
            if child not in self.workers:
                child.stop(timeout=10)
        if self.extension is not None:
            self.extension.close()


def base_environment() -> dict[str, str]:
    """What every process of the local platform starts from: this environment with
    the emulator's credentials, offline model hubs, and none of the caller's
    ``SWITCHYARD_*`` or Python path settings (each child gets its own)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("SWITCHYARD_") and k not in ("AWS_PROFILE", "PYTHONPATH", "PYTHONHOME")
    }
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
    return env


def _terminate_with_parent() -> None:
    """In the child, before exec: SIGTERM when the supervisor dies (Linux)."""
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


_PR_SET_PDEATHSIG = 1


def _wait_http(url: str, timeout: float, what: str, child: Child) -> None:
    """Wait until ``url`` answers; fail at once, with its log's end, if ``child`` exits."""

    def exited() -> str | None:
        return None if child.alive() else "\n" + child.log_tail()

    wait_http(url, timeout, what, exited)
