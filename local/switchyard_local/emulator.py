"""The local AWS emulator, started in one place.

moto's application, on loopback only, with the fix that lets its SQS hold a
production-size backlog (``moto_sqs``) and SQS's CloudWatch metrics answered live
(``sqs_metrics``: the age of a queue's oldest message, which the scaling policy
reads) applied in the server's process, DynamoDB's conditional writes made
one step each, as in DynamoDB (``moto_dynamodb``), and IAM, when it is turned on,
evaluated as AWS evaluates the platform's calls (``moto_iam``). The local
platform's supervisor, the integration tier and the benchmarks all start it from
here: ``python -m switchyard_local.emulator -H 127.0.0.1 -p PORT``.

Settings of the server itself, measured under a backlog:

- it is served by ``switchyard_local.wsgi_server``: a client's connection stays
  open from one call to the next, and each call is answered on its connection's
  thread. moto's own server (werkzeug's) closes every connection after one call, so
  every AWS call of the router and the workers paid a TCP connection and a thread
  (with 1,000 async predicts in a burst: the emulator's CPU 9.0 → 7.0 s, the
  router's 4.6 → 4.0 s, the worker's 10.6 → 9.6 s, served by waitress then);
  waitress kept connections open but handed each call between threads three times
  and polled every open connection before each hand-off (at 40 sync requests a
  second: the emulator's CPU a request 7.8-7.9 → 5.1-5.2 ms without it);
- moto picks the service of every request by trying each service's URL patterns in
  turn, under one lock; the answer depends only on the host it infers, so it is
  remembered per host; likewise the list of a response class's methods;
- no per-request access log line is written (errors still are);
- the calls the platform makes most, in their plain forms, are answered from moto's
  backends without moto's request machinery (``moto_reads``, and the modules it
  dispatches to: GetItem, BatchGetItem, PutItem, BatchExecuteStatement, SendMessage,
  ReceiveMessage, DeleteMessageBatch, ChangeMessageVisibilityBatch);
  ``bench/emulator_calls.py`` measures the CPU each costs.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import os
import random
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from switchyard_local.lifetime import terminate_with_parent

LOOPBACK = "127.0.0.1"


# Where free_port looks first: below the kernel's ephemeral ports, which outgoing
# connections take. A port picked there could be taken by one of them (the emulator's
# clients open many) between the pick and its server's bind: "address already in use".
_LISTEN_PORTS_FROM = 10_000


def ephemeral_ports() -> tuple[int, int]:
    """The range the kernel gives outgoing connections their local ports from."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32_768, 60_999  # Linux's default


def free_port() -> int:
    """A loopback port nothing listens on now, outside the ephemeral range where one
    is there to pick (else any the kernel gives)."""
    below = range(_LISTEN_PORTS_FROM, ephemeral_ports()[0])
    for port in random.sample(below, min(100, len(below))):
        with socket.socket() as s, contextlib.suppress(OSError):
            s.bind((LOOPBACK, port))
            return port
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def port_taken(port: int) -> bool:
    """Whether something listens on the loopback ``port`` (a server's own restart,
    with its socket in TIME_WAIT, does not count: servers bind with SO_REUSEADDR)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((LOOPBACK, port))
        except OSError:
            return True
    return False


def process_alive(pid: int) -> bool:
    """Whether the process ``pid`` exists (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def emulator_argv(port: int, state: Path | None = None) -> list[str]:
    """The command line of an emulator listening on ``127.0.0.1:port`` (keeping its
    data in ``state`` from one run to the next, if given)."""
    argv = [sys.executable, "-m", "switchyard_local.emulator", "-H", LOOPBACK, "-p", str(port)]
    return argv if state is None else [*argv, "--state", str(state)]


def wait_http(
    url: str, timeout_s: float, what: str, exited: Callable[[], str | None] | None = None
) -> None:
    """Wait until ``url`` answers. ``exited`` says why the process behind it has
    already ended (None while it runs): then fail at once, with that."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2):  # noqa: S310 - loopback
                return
        except OSError:
            ended = exited() if exited else None
            if ended is not None:
                raise RuntimeError(f"{what} exited before it answered: {ended}") from None
            time.sleep(0.1)
    raise TimeoutError(f"{what} did not answer at {url} within {timeout_s:.0f}s")


@dataclass
class RunningEmulator:
    """An emulator process of a test run or a benchmark; ``stop()`` ends it."""

    url: str
    process: subprocess.Popen[bytes]
    log: IO[bytes]

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(60)  # it may be writing its state
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.log.close()


def start_emulator(
    log_path: Path, port: int | None = None, timeout_s: float = 30, state: Path | None = None
) -> RunningEmulator:
    """Start an emulator on ``127.0.0.1:port`` (a free port if None), its output
    into ``log_path`` (appended to), and wait until it answers."""
    port = port or free_port()
    log = open(log_path, "ab")  # noqa: SIM115 - held for the emulator's life
    process = subprocess.Popen(
        emulator_argv(port, state),
        stdout=log,
        stderr=subprocess.STDOUT,
        preexec_fn=terminate_with_parent,  # a killed test run leaves no emulator
    )
    emulator = RunningEmulator(f"http://{LOOPBACK}:{port}", process, log)

    def exited() -> str | None:
        code = process.poll()
        return None if code is None else f"exit code {code}; see {log_path}"

    try:
        wait_http(f"{emulator.url}/moto-api/", timeout_s, "the AWS emulator", exited)
    except BaseException:
        emulator.stop()
        raise
    return emulator


def _remember_backend_per_host() -> None:
    """moto's service lookup by host, remembered (its answer depends on the host only)."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication

    find = DomainDispatcherApplication.get_backend_for_host
    found: dict[str | None, Any] = {}

    def get_backend_for_host(self: Any, host: str | None) -> Any:
        if host not in found:
            found[host] = find(self, host)
        return found[host]

    DomainDispatcherApplication.get_backend_for_host = get_backend_for_host  # type: ignore[method-assign]


def _remember_method_names() -> None:
    """moto lists a response class's methods (``inspect.getmembers``) on every call to
    find the action's handler; the list depends on the class only."""
    import moto.core.responses as responses

    responses.method_names_from_class = functools.cache(responses.method_names_from_class)


def _loopback_only(host: str) -> None:
    """The emulator takes any credentials: it must not listen beyond this machine."""
    if host not in (LOOPBACK, "localhost", "::1"):
        raise SystemExit(f"the local AWS emulator listens on loopback only, not on {host}")


def _serve(host: str, port: int, state: Path | None = None) -> None:
    """moto's application behind a server that keeps connections open."""
    import os
    import signal

    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    from switchyard_local import moto_reads
    from switchyard_local.wsgi_server import Server

    os.environ.setdefault("MOTO_PORT", str(port))  # as moto's own server sets it
    app = moto_reads.wrap(DomainDispatcherApplication(create_backend_app))
    server = Server(app, host, port)

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
        if state is not None:
            from switchyard_local import emulator_state

            started = time.monotonic()
            written = emulator_state.save(state)
            took = time.monotonic() - started
            print(f"state saved to {state} ({written:,} bytes, {took:.1f}s)", flush=True)


def main(argv: list[str] | None = None) -> None:
    """The emulator with the SQS fixes, on loopback only."""
    from switchyard_local import moto_appconfig, moto_dynamodb, moto_iam, moto_sqs, sqs_metrics

    parser = argparse.ArgumentParser(prog="switchyard_local.emulator")
    parser.add_argument("-H", "--host", default=LOOPBACK)
    parser.add_argument("-p", "--port", type=int, default=5000)
    parser.add_argument(
        "--state",
        type=Path,
        help="keep the platform's data in this file: read at start, written at stop",
    )
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    _loopback_only(args.host)
    moto_sqs.apply()
    sqs_metrics.apply()
    moto_dynamodb.apply()
    moto_iam.apply()
    moto_appconfig.apply()
    _remember_backend_per_host()
    _remember_method_names()
    logging.basicConfig(level=logging.WARNING)
    if args.state is not None:
        from switchyard_local import emulator_state

        print(emulator_state.load(args.state), flush=True)
    _serve(args.host, args.port, args.state)


if __name__ == "__main__":
    main()
