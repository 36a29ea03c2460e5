"""A lighter HTTP transport for the AWS calls the platform makes most: DynamoDB's and
SQS's (JSON protocols, every call a POST of a small body).

botocore sends a request through urllib3 and the standard library's ``http.client``,
which reads each response's headers with the ``email`` package's parser. Measured
against the local emulator, a DynamoDB GetItem cost the caller 780 to 975 µs of CPU so
and 414 to 449 through this transport: at 16 sync callers the router's threads spent a
quarter of their CPU in that transport (``docs/benchmarks.md``). The rest of botocore
(serialising, signing, retries, parsing the answer, its errors) is unchanged: this is
only the client's HTTP session (:func:`install`).

What it does: HTTP/1.1 over a kept-alive connection (TLS checked against the same CA
bundle botocore would use), a pool of idle connections per host, a response read by
its ``Content-Length`` or chunks. A pooled connection is not used after
``IDLE_MOST_S`` idle, nor if the server has closed it (urllib3 looks the same way); one
that fails before any byte of an answer came back is replaced and the request sent
again, once. What it does not do, it leaves to
botocore's own session: a proxy, a client certificate, a streamed answer, a request
that is not a POST of bytes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from botocore.awsrequest import AWSResponse
from botocore.exceptions import (
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
    SSLError,
)
from botocore.httpsession import get_cert_path

log = logging.getLogger(__name__)

_DEFAULT_PORTS = {"http": 80, "https": 443}
_RECV = 65_536
# A connection idle longer than this is closed rather than used: a server or a load
# balancer between may have dropped it without a word (a Lambda instance thawed after
# minutes frozen), and a request on it would wait its whole read timeout.
IDLE_MOST_S = 20.0


Answer = tuple[int, dict[str, str], bytes]
"""An HTTP answer: its status, headers (names in lower case) and body."""


class _Body:
    """An answer's body, as botocore reads it from ``AWSResponse.raw``."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._data


class _Closed(Exception):
    """The connection ended before a whole answer came; ``started``: some of it had."""

    def __init__(self, started: bool) -> None:
        super().__init__("the connection closed before the answer ended")
        self.started = started


class _Connection:
    """One kept-alive connection to a host, and what is left of the last read."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""
        self.idle_since = 0.0  # monotonic: when it went back to the pool

    def usable(self, now: float) -> bool:
        """Whether an idle connection may carry the next request: idle for less than
        ``IDLE_MOST_S``, and nothing to read on it (the server's close, or bytes no
        request asked for, would be)."""
        if now - self.idle_since > IDLE_MOST_S or self.buffer:
            return False
        try:
            readable, _, _ = select.select([self.sock], [], [], 0)
        except (OSError, ValueError):
            return False
        if not readable:
            return True
        # Something came: the server's close, stray bytes, or (TLS) only the
        # protocol's own records, such as TLS 1.3's session tickets.
        timeout = self.sock.gettimeout()
        try:
            self.sock.setblocking(False)
            self.sock.recv(_RECV)
        except (ssl.SSLWantReadError, BlockingIOError):
            return True  # no data for us: the records were the protocol's own
        except OSError:
            return False
        finally:
            with contextlib.suppress(OSError):
                self.sock.settimeout(timeout)
        return False  # closed, or bytes no request asked for

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def send(self, request: bytes) -> None:
        """Send ``request`` (its answer is read by :meth:`answer`)."""
        try:
            self.sock.sendall(request)
        except TimeoutError:
            raise
        except OSError:
            raise _Closed(started=False) from None

    def answer(self) -> tuple[int, dict[str, str], bytes, bool]:
        """The answer to the request sent: its status, headers, body, and whether the
        connection may be used again."""
        while True:  # past any interim (1xx) answer
            head = self._until(b"\r\n\r\n", started=False)
            status_line, _, header_text = head.partition(b"\r\n")
            parts = status_line.split(b" ", 2)
            if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
                raise _Closed(started=True)
            status = int(parts[1])
            if not 100 <= status < 200:
                break
        headers: dict[str, str] = {}
        for line in header_text.split(b"\r\n"):
            name, sep, value = line.partition(b":")
            if sep:
                key = name.strip().decode("latin-1").lower()
                text = value.strip().decode("latin-1")
                headers[key] = f"{headers[key]}, {text}" if key in headers else text
        if headers.get("transfer-encoding", "").lower().endswith("chunked"):
            body = self._chunked()
        elif "content-length" in headers:
            body = self._exactly(int(headers["content-length"]))
        elif status in (204, 304):
            body = b""
        else:  # no length: the body runs to the connection's end
            body = self._to_end()
            return status, headers, body, False
        reuse = headers.get("connection", "").lower() != "close" and parts[0] != b"HTTP/1.0"
        return status, headers, body, reuse

    def _recv(self) -> bytes:
        """What came next; nothing once the connection is closed or reset (a timeout
        is raised)."""
        try:
            return self.sock.recv(_RECV)
        except TimeoutError:
            raise
        except OSError:
            return b""

    def _more(self, started: bool) -> None:
        data = self._recv()
        if not data:
            raise _Closed(started or bool(self.buffer))
        self.buffer += data

    def _until(self, mark: bytes, started: bool = True) -> bytes:
        while True:
            at = self.buffer.find(mark)
            if at >= 0:
                out, self.buffer = self.buffer[:at], self.buffer[at + len(mark) :]
                return out
            self._more(started)

    def _exactly(self, n: int) -> bytes:
        while len(self.buffer) < n:
            self._more(True)
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def _chunked(self) -> bytes:
        parts = []
        while True:
            size = int(self._until(b"\r\n").split(b";", 1)[0].strip(), 16)
            if size == 0:
                while self._until(b"\r\n"):  # trailers, up to an empty line
                    pass
                return b"".join(parts)
            parts.append(self._exactly(size))
            self._exactly(2)  # the chunk's CRLF

    def _to_end(self) -> bytes:
        while True:
            data = self._recv()
            if not data:
                out, self.buffer = self.buffer, b""
                return out
            self.buffer += data


class KeepAliveSession:
    """An HTTP session for a botocore client (``send(request) -> AWSResponse``), with
    ``fallback`` (the client's own session) taking what it does not do."""

    def __init__(self, fallback: Any) -> None:
        self._fallback = fallback
        settings = _settings_of(fallback)
        self._connect_timeout, self._read_timeout = settings["timeouts"]
        self._max_idle = settings["max_idle"]
        self._verify = settings["verify"]
        self._plain_only = settings["client_cert"]  # a client certificate: all fallback
        self._proxied = settings["proxied"]  # the schemes a proxy takes: fallback
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}
        self._lock = threading.Lock()
        self._tls: ssl.SSLContext | None = None

    def send(self, request: Any) -> Any:
        body = request.body
        if isinstance(body, str):
            body = body.encode()
        url = urlsplit(request.url)
        if (
            request.method != "POST"
            or request.stream_output
            or not isinstance(body, bytes | type(None))
            or not self._sends(url.scheme)
        ):
            return self._fallback.send(request)
        payload = _request_bytes(request, url, body or b"")
        status, headers, data = self.exchange(host_key(url), request.url, payload)
        return AWSResponse(request.url, status, headers, _Body(data))

    def exchange(
        self, key: tuple[str, str, int], url: str, payload: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        """``payload`` (a whole request: its head and body) sent to ``key``'s host
        (``host_key``) on a pooled connection; the answer's status, headers (their
        names in lower case) and body. ``url`` names the endpoint in errors."""
        answer = self._answered(key, url, payload, self._sent(key, url, payload))
        if isinstance(answer, Exception):
            raise answer
        return answer

    def exchange_all(
        self, key: tuple[str, str, int], url: str, payloads: list[bytes]
    ) -> list[Answer | Exception]:
        """Each of ``payloads`` sent as :meth:`exchange` sends it, each on a connection
        of its own, every one sent before any answer is read: the calls wait on the
        host together, not in turn, and on the caller's thread alone (a worker's
        batch: its result writes, its deletes). Each one's answer, or the error it
        met (botocore's, as :meth:`exchange` raises it), in order. At most the pool's
        size are in flight at once."""
        answers: list[Answer | Exception] = []
        for start in range(0, len(payloads), max(1, self._max_idle)):
            wave = payloads[start : start + max(1, self._max_idle)]
            sent = [self._sent(key, url, payload) for payload in wave]
            answers += [
                self._answered(key, url, payload, conn)
                for payload, conn in zip(wave, sent, strict=True)
            ]
        return answers

    def _sent(
        self, key: tuple[str, str, int], url: str, payload: bytes
    ) -> tuple[_Connection, bool] | Exception:
        """``payload`` sent on a pooled connection (or, where the pooled one turns out
        closed, on a new one); the connection and whether it was pooled, or the
        error."""
        try:
            conn, reused = self._take(key, url)
        except (ConnectTimeoutError, EndpointConnectionError, SSLError) as exc:
            return exc
        failed = _send_on(conn, payload, url)
        if failed is None:
            return conn, reused
        if reused and isinstance(failed, ConnectionClosedError):
            return self._resent(key, url, payload)  # the server had closed it while idle
        return failed

    def _resent(
        self, key: tuple[str, str, int], url: str, payload: bytes
    ) -> tuple[_Connection, bool] | Exception:
        """``payload`` sent again, on a new connection."""
        try:
            conn = self._connect(key, url)
        except (ConnectTimeoutError, EndpointConnectionError, SSLError) as exc:
            return exc
        failed = _send_on(conn, payload, url)
        return (conn, False) if failed is None else failed

    def _answered(
        self,
        key: tuple[str, str, int],
        url: str,
        payload: bytes,
        sent: tuple[_Connection, bool] | Exception,
    ) -> Answer | Exception:
        """The answer to ``payload``, sent (``sent``: :meth:`_sent`'s), read; a pooled
        connection that closes before any byte of it came (the server had closed it
        while it was idle) is replaced and the request sent again, once."""
        if isinstance(sent, Exception):
            return sent
        conn, reused = sent
        try:
            status, headers, data, reuse = conn.answer()
        except _Closed as closed:
            conn.close()
            if reused and not closed.started:
                return self._answered(key, url, payload, self._resent(key, url, payload))
            return ConnectionClosedError(endpoint_url=url)
        except TimeoutError:
            conn.close()
            return ReadTimeoutError(endpoint_url=url)
        except Exception as exc:  # noqa: BLE001 - an answer not HTTP's: the others are read
            conn.close()
            return exc
        if reuse:
            self._give(key, conn)
        else:
            conn.close()
        return status, headers, data

    def takes(self, url: str) -> bool:
        """Whether this session sends a POST to ``url`` itself (no proxy, no client
        certificate, HTTP or HTTPS)."""
        return self._sends(urlsplit(url).scheme)

    def _sends(self, scheme: str) -> bool:
        return not self._plain_only and scheme in _DEFAULT_PORTS and scheme not in self._proxied

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, {}
        for conns in idle.values():
            for conn in conns:
                conn.close()
        self._fallback.close()

    def _take(self, key: tuple[str, str, int], url: str) -> tuple[_Connection, bool]:
        """The most recently idle connection to ``key`` that is still usable (the
        others closed), or a new one; whether it was taken from the pool."""
        now = time.monotonic()
        while True:
            with self._lock:
                idle = self._idle.get(key)
                conn = idle.pop() if idle else None
            if conn is None:
                return self._connect(key, url), False
            if conn.usable(now):
                return conn, True
            conn.close()

    def _give(self, key: tuple[str, str, int], conn: _Connection) -> None:
        conn.idle_since = time.monotonic()
        with self._lock:
            idle = self._idle.setdefault(key, [])
            if len(idle) < self._max_idle:
                idle.append(conn)
                return
        conn.close()

    def _connect(self, key: tuple[str, str, int], url: str) -> _Connection:
        scheme, host, port = key
        try:
            sock = socket.create_connection((host, port), timeout=self._connect_timeout)
        except TimeoutError:
            raise ConnectTimeoutError(endpoint_url=url) from None
        except OSError as exc:
            raise EndpointConnectionError(endpoint_url=url, error=exc) from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if scheme == "https":
            try:
                sock = self._context().wrap_socket(sock, server_hostname=host)
            except (ssl.SSLError, ssl.CertificateError) as exc:
                sock.close()
                raise SSLError(endpoint_url=url, error=exc) from None
            except OSError as exc:
                sock.close()
                raise EndpointConnectionError(endpoint_url=url, error=exc) from None
        sock.settimeout(self._read_timeout)
        return _Connection(sock)

    def _context(self) -> ssl.SSLContext:
        if self._tls is None:
            if self._verify is False:
                context = ssl.create_default_context()
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            else:
                cafile = get_cert_path(self._verify)
                if os.path.isdir(cafile):
                    context = ssl.create_default_context(capath=cafile)
                else:
                    context = ssl.create_default_context(cafile=cafile)
            self._tls = context
        return self._tls


def _send_on(conn: _Connection, payload: bytes, url: str) -> Exception | None:
    """``payload`` sent on ``conn``; the error (``conn`` closed) if it could not be."""
    try:
        conn.send(payload)
    except _Closed:
        conn.close()
        return ConnectionClosedError(endpoint_url=url)
    except TimeoutError:
        conn.close()
        return ReadTimeoutError(endpoint_url=url)
    return None


def host_key(url: Any) -> tuple[str, str, int]:
    """The pool's key for a URL's host (``urlsplit``'s): scheme, host name, port."""
    return (url.scheme, url.hostname or "", url.port or _DEFAULT_PORTS[url.scheme])


def host_header(url: Any) -> str:
    """A URL's ``Host`` value as botocore signs it: its host, and its port unless
    the scheme's own."""
    host = url.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = url.port
    return host if port in (None, _DEFAULT_PORTS[url.scheme]) else f"{host}:{port}"


def _request_bytes(request: Any, url: Any, body: bytes) -> bytes:
    """The request's head and body as sent: its target, ``Host`` as botocore signed
    it (the URL's host, its port unless the scheme's own), its headers."""
    target = (url.path or "/") + (f"?{url.query}" if url.query else "")
    lines = [f"{request.method} {target} HTTP/1.1"]
    names = {k.lower() for k in request.headers}
    if "host" not in names:
        lines.append(f"Host: {host_header(url)}")
    for name, value in request.headers.items():
        lines.append(f"{name}: {value.decode() if isinstance(value, bytes) else value}")
    if "content-length" not in names:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def _settings_of(session: Any) -> dict[str, Any]:
    """The connection settings botocore gave the client's own session: its timeouts
    (connect, read), pool size, TLS verification, client certificate, and the
    schemes it sends through a proxy (botocore works the endpoint's proxies out,
    ``NO_PROXY`` included, as it makes the session). Read from the session's own
    attributes (botocore's ``URLLib3Session``): a botocore without them raises
    AttributeError here, and the client keeps its session (:func:`install`)."""
    timeout = session._timeout
    if isinstance(timeout, int | float):
        timeouts = (float(timeout), float(timeout))
    else:
        timeouts = (timeout.connect_timeout, timeout.read_timeout)
    proxies = session._proxy_config
    return {
        "timeouts": timeouts,
        "max_idle": int(session._max_pool_connections),
        "verify": session._verify,
        "client_cert": session._cert_file is not None,
        "proxied": frozenset(
            scheme for scheme in _DEFAULT_PORTS if proxies.proxy_url_for(f"{scheme}://host/")
        ),
    }


# The services whose every call is a POST of a JSON body, served by this transport.
SERVICES = frozenset({"dynamodb", "sqs"})


def install(client: Any) -> Any:
    """``client`` sending its calls through a :class:`KeepAliveSession` (a DynamoDB or
    SQS client; any other is left as it is). The client's endpoint and session are
    botocore's own parts, not its public interface: where a botocore (a Lambda
    runtime's, say) does not have them as this one does, the client is left as it
    is, with its own transport. Returns the client."""
    if client.meta.service_model.service_name not in SERVICES:
        return client
    try:
        endpoint = client._endpoint
        session = KeepAliveSession(endpoint.http_session)
    except (AttributeError, TypeError, ValueError):
        log.warning("botocore's client is not as expected: its own HTTP transport kept")
        return client
    endpoint.http_session = session
    return client
