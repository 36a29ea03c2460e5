"""Starts deployed code from its deployed layout, never from the source tree.

The local platform and the deploy test tier launch the router, the workers and
Lambda handlers through :class:`Launcher`, from the layouts ``stacks.assets``
builds with the CDK app's own bundling code:

- a Lambda function runs from its code asset (``/var/task``) with the core layer
  (``/opt/python``) beside it;
- a worker runs ``python -m switchyard_worker`` from the image's ``/app``.

Each is a fresh interpreter started with ``-S -P``: site-packages are not processed,
so the editable install of the source tree is invisible, and the current directory
is not on the path. Its ``PYTHONPATH`` holds the layout first, then the third-party
packages the real environment would provide. With ``exact_paths`` (Linux, as root:
the deploy test tier) the process gets its own mount namespace in which the
layouts sit exactly at ``/opt/python``, ``/var/task`` and ``/app``, as in AWS.
"""

from __future__ import annotations

import functools
import json
import os
import select
import shlex
import subprocess
import sys
import sysconfig
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from stacks.assets import Layouts
from switchyard_local.lifetime import signals_held, terminate_with_parent

Function = Literal["router", "splitter", "key_authorizer"]

# Where AWS puts each layout.
LAYER_PATH = Path("/opt/python")
TASK_ROOT = Path("/var/task")
APP_ROOT = Path("/app")

# The local stand-ins that wrap deployed code (the API Gateway stand-in in front of
# the router, the Lambda runtime stand-in): this package's own directory.
LOCAL_SOURCE = Path(__file__).resolve().parent.parent
LAMBDA_RUNTIME_SCRIPT = Path(__file__).with_name("lambda_runtime.py")
# Third-party packages of this environment (uvicorn, torch, ...): the worker
# image's pip install, and what the local router's server needs.
THIRD_PARTY = tuple(dict.fromkeys(Path(sysconfig.get_paths()[k]) for k in ("purelib", "platlib")))


@functools.cache
def site_packages(python: Path) -> list[Path]:
    """Another environment's third-party packages (its purelib and platlib), asked
    of its interpreter once."""
    paths = subprocess.run(
        [str(python), "-c", "import sysconfig as s; print(s.get_paths()['purelib']); "
         "print(s.get_paths()['platlib'])"],
        check=True, capture_output=True, text=True, timeout=60,
    ).stdout.split()  # fmt: skip
    return [Path(p) for p in dict.fromkeys(paths)]


def can_mount() -> bool:
    """Whether this process may give a child its own mount namespace."""
    return sys.platform == "linux" and os.geteuid() == 0


@dataclass(frozen=True)
class Command:
    """A process to start: its argv and the environment variables it adds."""

    argv: list[str]
    env: dict[str, str]


@dataclass(frozen=True)
class Launcher:
    layouts: Layouts
    exact_paths: bool = False

    def lambda_handler(self, function: Function, handler: str = "handler.handler") -> Command:
        """The Lambda runtime stand-in serving ``function``'s handler: events on
        stdin, answers on stdout. Only the layout and the runtime's own SDK (boto3)
        are on its path, as in Lambda."""
        return self._python(
            self._function_mounts(function),
            [self.layouts.lambda_runtime],
            [str(LAMBDA_RUNTIME_SCRIPT), handler],
        )

    def router_server(self, server_args: list[str]) -> Command:
        """The router's ASGI app served by uvicorn behind the local API Gateway
        stand-in (``switchyard_local.gateway``), where AWS runs it through Mangum."""
        return self._python(
            self._function_mounts("router"),
            [LOCAL_SOURCE, *THIRD_PARTY],
            ["-m", "uvicorn", *server_args],
        )

    def worker(self, python: Path | None = None) -> Command:
        """A worker process, from the image's ``/app``; on ``python`` (another
        environment's interpreter, with its own packages: the generation
        environment's vLLM) where given."""
        if python is None:
            return self._python(
                {APP_ROOT: self.layouts.worker}, list(THIRD_PARTY), ["-m", "switchyard_worker"]
            )
        return self._python(
            {APP_ROOT: self.layouts.worker},
            site_packages(python),
            ["-m", "switchyard_worker"],
            python,
        )

    def worker_check(self) -> Command:
        """The image's build-time check (``python -m switchyard_worker.check``)."""
        return self._python(
            {APP_ROOT: self.layouts.worker}, list(THIRD_PARTY), ["-m", "switchyard_worker.check"]
        )

    def streaming_router(self, bin_dir: Path) -> Command:
        """The router function as it runs under the Lambda Web Adapter: its
        ``run.sh``, which serves the app over HTTP on ``$PORT`` for the adapter to
        stream. ``python`` on its path is this interpreter, isolated as in Lambda
        (no site-packages: only the layouts and the runtime's SDK); ``bin_dir`` is
        where that command is written."""
        bin_dir.mkdir(parents=True, exist_ok=True)
        python = bin_dir / "python"
        python.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -S -P "$@"\n')
        python.chmod(0o755)
        mounts = self._function_mounts("router")
        task = TASK_ROOT if self.exact_paths else self.layouts.router
        command = self._python(mounts, [self.layouts.lambda_runtime], [])
        argv = ["sh", str(task / "run.sh")]
        if self.exact_paths:
            argv = _in_mount_namespace(mounts, argv)
        env = {
            **command.env,
            "LAMBDA_TASK_ROOT": str(task),
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        return Command(argv, env)

    def _function_mounts(self, function: Function) -> dict[Path, Path]:
        if function == "key_authorizer":  # standard library only: no layer
            return {TASK_ROOT: self.layouts.key_authorizer}
        task = self.layouts.router if function == "router" else self.layouts.splitter
        return {TASK_ROOT: task, LAYER_PATH: self.layouts.layer_python}

    def _python(
        self,
        mounts: dict[Path, Path],
        extra: list[Path],
        args: list[str],
        python: Path | None = None,
    ) -> Command:
        """``mounts``: where AWS puts each layout -> where it is built; they come
        first on the path, in order, then ``extra``."""
        layout = list(mounts) if self.exact_paths else list(mounts.values())
        env = {
            "PYTHONPATH": os.pathsep.join(str(p) for p in [*layout, *extra]),
            "PYTHONNOUSERSITE": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        argv = [str(python or sys.executable), "-S", "-P", *args]
        if self.exact_paths:
            argv = _in_mount_namespace(mounts, argv)
        return Command(argv, env)


def _in_mount_namespace(mounts: dict[Path, Path], argv: list[str]) -> list[str]:
    """``argv`` in a private mount namespace where each source is bind-mounted,
    read-only as Lambda's code and the image's (non-root) /app are, at its place
    (the empty mount points are made once, if missing)."""
    steps = ["set -e"]
    for place, source in mounts.items():
        at = shlex.quote(str(place))
        steps.append(f"mkdir -p {at}")
        steps.append(f"mount --bind {shlex.quote(str(source))} {at}")
        steps.append(f"mount -o remount,bind,ro {at}")
    steps.append('exec "$@"')
    return [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        "; ".join(steps),
        "sh",
    ] + argv


class LambdaProcess:
    """A function's handler served by the Lambda runtime stand-in in its own process
    (``Launcher.lambda_handler``): initialised once, then invoked event by event."""

    def __init__(self, command: Command, env: dict[str, str], log_path: Path) -> None:
        self._log = open(log_path, "ab")  # noqa: SIM115 - held for the process's life
        with signals_held():
            self.process = subprocess.Popen(
                command.argv,
                env={**env, **command.env},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._log,
                text=True,
                preexec_fn=terminate_with_parent,
            )
        self._lock = threading.Lock()
        try:
            first = self._read(timeout_s=120)
        except BaseException:  # a Ctrl-C during the cold start: nobody holds it yet
            self.kill()
            raise
        if "init_error" in first:
            self.close()
            error = first["init_error"]
            raise LambdaInitError(f"{error['type']}: {error['message']} (log: {log_path})")
        # What the cold start imported: the platform's modules with their files, and
        # every top-level package.
        self.modules: dict[str, str] = first.get("modules", {})
        self.top_level: list[str] = first.get("top_level", [])
        # Modules it compiled from source, having no bytecode to load.
        self.compiled_at_start: list[str] = first.get("compiled_at_start", [])
        # The cyclic collector after the init: on, and how many objects it froze.
        self.gc: dict[str, Any] = first.get("gc", {})

    def invoke(self, event: dict[str, Any], timeout_s: float = 60) -> Any:
        """The handler's return value; raises :class:`LambdaInvokeError` if it raised."""
        with self._lock:
            assert self.process.stdin is not None
            self.process.stdin.write(json.dumps({"event": event, "timeout_s": timeout_s}) + "\n")
            self.process.stdin.flush()
            answer = self._read(timeout_s + 5)
        if "error" in answer:
            raise LambdaInvokeError(f"{answer['error']['type']}: {answer['error']['message']}")
        return answer["result"]

    def _read(self, timeout_s: float) -> dict[str, Any]:
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], timeout_s)
        line = self.process.stdout.readline() if ready else ""
        if not line:
            code = self.process.poll()
            raise LambdaInvokeError(f"the function process gave no answer (exit code {code})")
        return dict(json.loads(line))

    def close(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()

    def kill(self) -> None:
        """Stop it now (no invocation to finish)."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._log.close()


class LocalFunction:
    """A function as Lambda keeps it: one warm instance (a :class:`LambdaProcess`)
    that serves invocations one at a time, and a new cold start in its place if it
    died."""

    def __init__(self, command: Command, env: dict[str, str], log_path: Path) -> None:
        self._command, self._env, self._log_path = command, env, log_path
        self._instance: LambdaProcess | None = None
        self._lock = threading.Lock()
        self.cold_starts = 0

    def warm(self) -> LambdaProcess:
        """The warm instance, cold-started first if there is none (or it died)."""
        with self._lock:
            return self._warm()

    def invoke(self, event: dict[str, Any], timeout_s: float = 900) -> Any:
        with self._lock:
            return self._warm().invoke(event, timeout_s)

    def _warm(self) -> LambdaProcess:
        if self._instance is None or self._instance.process.poll() is not None:
            self.cold_starts += 1
            self._instance = LambdaProcess(self._command, self._env, self._log_path)
        return self._instance

    def close(self) -> None:
        with self._lock:
            if self._instance is not None:
                self._instance.close()
                self._instance = None


class LambdaInitError(RuntimeError):
    """The function failed its cold start (its module raised on import)."""


class LambdaInvokeError(RuntimeError):
    """The handler raised, or its process died."""
