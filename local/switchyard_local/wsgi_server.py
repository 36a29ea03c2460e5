"""The AWS emulator's HTTP server: a thread per client connection, kept open from one
call to the next, each call answered on its connection's thread.

Why not a general-purpose server. The emulator's clients are the platform's own
(boto3 over loopback, a few dozen pooled connections at once), and on one machine
every millisecond the emulator spends is taken from the model. waitress, which
served it before, reads every request on one thread and hands it to a pool thread,
which hands the connection back for the next read: three thread hand-offs a call,
and before each wake-up its loop asks every open connection whether it is readable
and writable. Under 40 sync requests a second (about 45 open connections, ~39 turns
of that loop per request) the loop alone cost 2.4-2.9 ms of the emulator's CPU a
request, a third of all it spent (``docs/local-platform.md``). Here a connection's
thread reads a call, runs the application and writes the answer; it waits in
``recv`` for the next one, and a long poll holds only its own connection's thread.

What it speaks: HTTP/1.1 with persistent connections (closed when the client asks,
or after an HTTP/1.0 call without keep-alive), request bodies by ``Content-Length``
or chunked, ``Expect: 100-continue``, and answers of known length (the application's
body is collected and its length set when it gives none; none for ``HEAD``, 1xx,
204 and 304). A malformed request gets 400 and the connection is closed; an
application error gets 500. It listens on loopback only (``emulator._loopback_only``).
"""

from __future__ import annotations

import contextlib
import io
import logging
import socket
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote_to_bytes

log = logging.getLogger("switchyard.emulator")

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

_MAX_LINE = 65536  # a request line or a header line
_MAX_HEADERS = 200
_RECV_BUFFER = 65536
# No body is sent with these (RFC 9110 6.4.1); HEAD's is left out too.
_NO_BODY = {204, 304}


class BadRequest(Exception):
    """The request cannot be read: answered with 400, and the connection closed."""


class Server:
    """``app`` served on ``host``:``port`` until :meth:`close` (or the process ends)."""

    def __init__(self, app: WsgiApp, host: str, port: int, backlog: int = 1024) -> None:
        self.app = app
        self.host = host
        self.port = port
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((host, port))
        self._listener.listen(backlog)
        self._closed = threading.Event()

    def serve_forever(self) -> None:
        """Accept connections on this thread; each is served on a thread of its own."""
        while not self._closed.is_set():
            try:
                conn, address = self._listener.accept()
            except OSError:
                if self._closed.is_set():
                    return
                raise
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(
                target=self._serve_connection, args=(conn, address), daemon=True
            ).start()

    def close(self) -> None:
        """Stop accepting (a thread blocked in accept is woken); connections being
        served finish their call."""
        self._closed.set()
        with contextlib.suppress(OSError):  # not listening any more
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()

    def _serve_connection(self, conn: socket.socket, address: tuple[str, int]) -> None:
        rfile = conn.makefile("rb", buffering=_RECV_BUFFER)
        try:
            while True:
                try:
                    request = read_request(rfile, conn)
                except BadRequest as exc:
                    conn.sendall(_bad_request(str(exc)))
                    return
                if request is None:  # the client closed the connection
                    return
                environ, keep_alive = self._environ(request, address)
                answer = self._call(environ, request.method)
                conn.sendall(answer.encode(keep_alive))
                if not keep_alive:
                    return
        except OSError:
            return  # the client went away mid-call: nothing to answer
        finally:
            rfile.close()
            conn.close()

    def _environ(self, request: Request, address: tuple[str, int]) -> tuple[dict, bool]:
        path, _, query = request.target.partition("?")
        environ: dict[str, Any] = {
            "REQUEST_METHOD": request.method,
            "SCRIPT_NAME": "",
            "PATH_INFO": unquote_to_bytes(path).decode("latin-1"),
            # The target as it arrived, still percent-encoded (werkzeug's and
            # gunicorn's servers set it too): moto checks a request's signature over
            # it, and an S3 key with a space or a '+' differs once decoded.
            "RAW_URI": request.target,
            "QUERY_STRING": query,
            "SERVER_NAME": self.host,
            "SERVER_PORT": str(self.port),
            "SERVER_PROTOCOL": request.version,
            "REMOTE_ADDR": address[0],
            "REMOTE_PORT": str(address[1]),
            "CONTENT_LENGTH": str(len(request.body)),
            "wsgi.version": (1, 0),
            "wsgi.url_scheme": "http",
            "wsgi.input": io.BytesIO(request.body),
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": True,
            "wsgi.multiprocess": False,
            "wsgi.run_once": False,
        }
        for name, value in request.headers:
            key = name.upper().replace("-", "_")
            if key in ("CONTENT_LENGTH", "TRANSFER_ENCODING"):
                continue  # the body is read whole: its length is set above
            if key != "CONTENT_TYPE":
                key = "HTTP_" + key
            environ[key] = f"{environ[key]},{value}" if key in environ else value
        connection = environ.get("HTTP_CONNECTION", "").lower()
        if request.version == "HTTP/1.1":
            keep_alive = "close" not in connection
        else:
            keep_alive = "keep-alive" in connection
        return environ, keep_alive

    def _call(self, environ: dict[str, Any], method: str) -> Answer:
        answer = Answer(head=method == "HEAD")

        def start_response(status: str, headers: list, exc_info: Any = None) -> Callable:
            # Nothing is sent before the application returns, so a second call (with
            # exc_info, after an error) always just replaces the status and headers.
            answer.status, answer.headers = status, list(headers)
            return answer.body.append

        try:
            result = self.app(environ, start_response)
            try:
                answer.body.extend(result)
            finally:
                close = getattr(result, "close", None)
                if close is not None:
                    close()
        except Exception:  # noqa: BLE001 - the client gets a 500, the server goes on
            log.exception("the emulator's application failed")
            return Answer(status="500 Internal Server Error", body=[b"internal error"])
        return answer


@dataclass(slots=True)
class Request:
    method: str
    target: str
    version: str
    headers: list[tuple[str, str]]
    body: bytes


class Answer:
    """The application's answer, collected whole."""

    def __init__(
        self, status: str = "200 OK", body: list[bytes] | None = None, head: bool = False
    ) -> None:
        self.status = status
        self.headers: list[tuple[str, str]] = []
        self.body: list[bytes] = body if body is not None else []
        self.head = head

    def encode(self, keep_alive: bool) -> bytes:
        code = int(self.status.split(" ", 1)[0])
        body = b"".join(self.body)
        send_body = not self.head and code not in _NO_BODY and code >= 200
        lines = [f"HTTP/1.1 {self.status}"]
        has_length = False
        for name, value in self.headers:
            lower = name.lower()
            if lower in ("connection", "transfer-encoding"):
                continue
            if lower == "content-length":
                has_length = True
                if send_body:
                    continue  # set from the body sent, below
            lines.append(f"{name}: {value}")
        if send_body:
            lines.append(f"Content-Length: {len(body)}")
        elif not has_length and not self.head and code >= 200 and code not in _NO_BODY:
            lines.append("Content-Length: 0")
        if not keep_alive:
            lines.append("Connection: close")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        return head + body if send_body else head


def read_request(rfile: io.BufferedReader, conn: socket.socket) -> Request | None:
    """The next request on a connection (None once the client has closed it)."""
    line = rfile.readline(_MAX_LINE + 1)
    while line in (b"\r\n", b"\n"):  # stray line breaks between requests
        line = rfile.readline(_MAX_LINE + 1)
    if not line:
        return None
    if len(line) > _MAX_LINE or not line.endswith(b"\n"):
        raise BadRequest("request line too long")
    parts = line.decode("latin-1").rstrip("\r\n").split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadRequest("malformed request line")
    method, target, version = parts
    headers: list[tuple[str, str]] = []
    while True:
        raw = rfile.readline(_MAX_LINE + 1)
        if raw in (b"\r\n", b"\n"):
            break
        if not raw or len(raw) > _MAX_LINE or not raw.endswith(b"\n"):
            raise BadRequest("malformed or truncated header")
        name, colon, value = raw.decode("latin-1").partition(":")
        if not colon or not name or name != name.strip():
            raise BadRequest("malformed header")
        headers.append((name, value.strip()))
        if len(headers) > _MAX_HEADERS:
            raise BadRequest("too many headers")
    fields = {name.lower(): value for name, value in headers}
    if fields.get("expect", "").lower() == "100-continue":
        conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
    if "chunked" in fields.get("transfer-encoding", "").lower():
        body = _read_chunked(rfile)
    else:
        length = fields.get("content-length", "0") or "0"
        if not length.isdigit():
            raise BadRequest("malformed Content-Length")
        body = _read_exactly(rfile, int(length))
    return Request(method, target, version, headers, body)


def _read_exactly(rfile: io.BufferedReader, n: int) -> bytes:
    data = rfile.read(n) if n else b""
    if len(data) != n:
        raise BadRequest("body shorter than its Content-Length")
    return data


def _read_chunked(rfile: io.BufferedReader) -> bytes:
    parts = []
    while True:
        size_line = rfile.readline(_MAX_LINE + 1)
        size_text = size_line.split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise BadRequest("malformed chunk size") from None
        if size == 0:
            while rfile.readline(_MAX_LINE + 1) not in (b"\r\n", b"\n", b""):
                pass  # trailers: not used by the emulator's clients
            return b"".join(parts)
        parts.append(_read_exactly(rfile, size))
        if rfile.readline(_MAX_LINE + 1) not in (b"\r\n", b"\n"):
            raise BadRequest("malformed chunk")


def _bad_request(message: str) -> bytes:
    body = message.encode()
    return (
        "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body
