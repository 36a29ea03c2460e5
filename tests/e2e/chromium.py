"""Headless Chromium, driven over its DevTools protocol on a pipe.

``chromium --remote-debugging-pipe`` reads protocol commands from its file
descriptor 3 and writes answers and events to 4, each a JSON document ended by a NUL
byte: no driver binary and no websocket client are needed, only Debian's
``chromium`` (installed with apt-get when missing: :func:`ensure_chromium`).
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def ensure_chromium() -> str:
    """The ``chromium`` binary, installed from Debian's archive if it is missing."""
    found = shutil.which("chromium")
    if found:
        return found
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    quiet = {"check": True, "env": env, "stdout": subprocess.DEVNULL}
    subprocess.run([*sudo, "apt-get", "update", "-qq"], **quiet)  # type: ignore[call-overload]
    subprocess.run(  # type: ignore[call-overload]
        [*sudo, "apt-get", "install", "-y", "-qq", "--no-install-recommends", "chromium"],
        **quiet,
    )
    found = shutil.which("chromium")
    assert found, "apt-get installed chromium, but it is not on PATH"
    return found


class Browser:
    """One headless Chromium process; :meth:`open` gives a page to script."""

    def __init__(self, binary: str, profile: Path, log: Path) -> None:
        commands_in, self._commands = _high(os.pipe())
        self._answers, answers_out = _high(os.pipe())
        argv = [
            binary,
            "--headless",
            "--remote-debugging-pipe",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            f"--user-data-dir={profile}",
            *(["--no-sandbox"] if os.geteuid() == 0 else []),  # root has no user namespace
            "about:blank",
        ]
        # The protocol's descriptors are 3 and 4 in the browser: a Python trampoline
        # moves the pipe's ends there, then becomes the browser.
        self._log = open(log, "wb")  # noqa: SIM115 - closed in close()
        self._process = subprocess.Popen(
            [sys.executable, "-c", _TRAMPOLINE, str(commands_in), str(answers_out), *argv],
            pass_fds=(commands_in, answers_out),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        os.close(commands_in)
        os.close(answers_out)
        self._buffer = b""
        self._ids = itertools.count(1)
        self.events: list[dict[str, Any]] = []

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def send(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        session: str | None = None,
        timeout: float = 30,
    ) -> dict[str, Any]:
        """One command's result (events that arrive meanwhile go to ``events``)."""
        command_id = next(self._ids)
        message: dict[str, Any] = {"id": command_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            answer = self._next(deadline)
            if answer.get("id") != command_id:
                self.events.append(answer)
                continue
            if "error" in answer:
                raise RuntimeError(f"{method}: {answer['error']}")
            return dict(answer.get("result", {}))

    def _next(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("chromium did not answer in time")
            readable, _, _ = select.select([self._answers], [], [], left)
            if readable:
                chunk = os.read(self._answers, 1 << 16)
                if not chunk:
                    raise RuntimeError(f"chromium exited ({self._process.poll()})")
                self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return dict(json.loads(raw))

    def open(self, url: str) -> Page:
        target = self.send("Target.createTarget", {"url": url})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})
        return Page(self, session["sessionId"])

    def close(self) -> None:
        if self._process.poll() is None:
            try:
                self.send("Browser.close", timeout=5)
                self._process.wait(10)
            except (RuntimeError, TimeoutError, subprocess.TimeoutExpired, OSError):
                self._process.kill()
                self._process.wait()
        for fd in (self._commands, self._answers):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._log.close()


_TRAMPOLINE = """
import os, sys
commands, answers = int(sys.argv[1]), int(sys.argv[2])
os.dup2(commands, 3)
os.dup2(answers, 4)
for fd in {commands, answers} - {3, 4}:
    os.close(fd)
os.execv(sys.argv[3], sys.argv[3:])
"""


def _high(fds: tuple[int, int]) -> tuple[int, int]:
    """A pipe's descriptors moved to 10 or above, clear of the 3 and 4 the browser
    gets them as (so that moving one there never overwrites the other)."""
    moved = []
    for fd in fds:
        moved.append(fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10))
        os.close(fd)
    return moved[0], moved[1]


class Page:
    """A tab, attached in flat mode: its commands carry the session id."""

    def __init__(self, browser: Browser, session: str) -> None:
        self._browser = browser
        self._session = session

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited)."""
        result = self._browser.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            session=self._session,
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"the page's script failed: {result['exceptionDetails']}")
        return result["result"].get("value")
