"""The local dashboard: one page with every model's live figures and their recent past.

``switchyard up`` serves it from a small HTTP server of its own, on loopback, on a
port of its own (the API's port + 1 by default): it is no route of the platform's
API, so it is neither behind the API Gateway stand-in nor part of what the cloud
serves, and it takes no API key. Loopback is its only guard, so it refuses a
request whose ``Host`` is not a loopback name (a web page elsewhere cannot reach it
through DNS rebinding), and it only answers GET.

- ``GET /``: the page (``static/dashboard.html``: HTML, CSS and a small script that
  draws its charts as inline SVG; nothing is fetched from the network).
- ``GET /api/status``: what ``switchyard status --json`` prints (:mod:`.status`),
  plus per model: ``history``, the last :data:`HISTORY_POINTS` samples taken every
  :data:`SAMPLE_SECONDS` (queue depth and age of the oldest message per lane,
  workers running, starting and desired), kept in memory in a ring buffer from the
  moment the platform started; ``routing``, the routing document in force (the
  traffic split, as ``switchyard traffic show`` prints it); and ``rollbacks``, the
  recent rollbacks among the routing changes (the rollback controller's, and
  AppConfig's in the cloud).
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any

from switchyard import aws
from switchyard.schemas import LANES
from switchyard_local.bridge import LocalTrafficStore
from switchyard_local.controller import CONTROLLER
from switchyard_local.routing_changes import NOT_IN_FORCE, Change, TrafficStore
from switchyard_local.status import LocalStatusReader, ModelStatus, Status

SAMPLE_SECONDS = 2.0
HISTORY_POINTS = 450  # 15 minutes at one sample every 2 s
ROUTING_SECONDS = 10.0  # the routing documents change rarely: read them this often
RECENT_CHANGES = 20  # how far back in a model's routing changes rollbacks are looked for
LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "[::1]"}
PAGE = "static/dashboard.html"


def history_point(at: float, status: ModelStatus) -> dict[str, Any]:
    """One sample of a model for the charts."""
    lanes = {lane: status.lanes.get(lane) for lane in LANES}
    return {
        "at": round(at, 3),
        "depth": {lane: f.depth if f else None for lane, f in lanes.items()},
        "age": {lane: f.oldest_age_seconds if f else None for lane, f in lanes.items()},
        "workers": {
            "running": status.workers.running,
            "starting": status.workers.starting,
            "desired": status.workers.desired,
        },
    }


@dataclass
class History:
    """The last ``points`` samples of every model, oldest first (a ring buffer)."""

    points: int = HISTORY_POINTS
    _models: dict[str, deque[dict[str, Any]]] = field(default_factory=dict)

    def add(self, status: Status) -> None:
        for model, figures in status.models.items():
            series = self._models.setdefault(model, deque(maxlen=self.points))
            series.append(history_point(status.at, figures))

    def of(self, model: str) -> list[dict[str, Any]]:
        return list(self._models.get(model, ()))


def routing_summary(change: Change | None) -> dict[str, Any] | None:
    """The routing document in force: its split, and who set it, when and why."""
    if change is None:
        return None
    doc = change.document
    return {
        "weights": dict(doc.weights),
        "sticky_key": doc.sticky_key,
        "shadow": {"version": doc.shadow.version, "percent": doc.shadow.percent}
        if doc.shadow
        else None,
        "fallback": doc.fallback,
        "change": change.number,
        "by": change.by,
        "at": change.at or None,
        "why": change.why,
    }


def is_rollback(change: Change) -> bool:
    """A change made by the rollback controller, or a deployment AppConfig rolled back."""
    return change.by == CONTROLLER or change.state in NOT_IN_FORCE


def rollbacks(changes: Iterable[Change]) -> list[dict[str, Any]]:
    """The rollbacks among ``changes`` (newest first), each with what it left in force."""
    return [
        {
            "change": c.number,
            "at": c.at or None,
            "by": c.by,
            "why": c.why,
            "state": c.state,
            "weights": dict(c.document.weights),
        }
        for c in changes
        if is_rollback(c)
    ]


class RoutingView:
    """Each model's routing document in force and its recent rollbacks, read again
    only when a newer change is published."""

    def __init__(self, store: TrafficStore) -> None:
        self._store = store
        self._seen: dict[str, int] = {}
        self._views: dict[str, dict[str, Any]] = {}

    def refresh(self, models: Iterable[str]) -> None:
        for model in models:
            deployed = self._store.deployed(model)
            number = deployed.number if deployed else 0
            if model in self._views and self._seen.get(model) == number:
                continue
            history = self._store.history(model, limit=RECENT_CHANGES) if deployed else []
            self._views[model] = {
                "routing": routing_summary(deployed),
                "rollbacks": rollbacks(history),
            }
            self._seen[model] = number

    def of(self, model: str) -> dict[str, Any]:
        return self._views.get(model, {"routing": None, "rollbacks": []})


class Dashboard:
    """Samples the platform's status every :data:`SAMPLE_SECONDS` into a history and
    serves the page and its data on ``127.0.0.1:port`` (0: any free port)."""

    def __init__(
        self,
        read_status: Callable[[], Status],
        routing: RoutingView | None,
        port: int = 0,
        *,
        about: dict[str, Any] | None = None,
        sample_seconds: float = SAMPLE_SECONDS,
        history_points: int = HISTORY_POINTS,
    ) -> None:
        self._read_status = read_status
        self._routing = routing
        self._about = about or {}
        self._sample_seconds = sample_seconds
        self.history = History(history_points)
        self._document = b'{"models": {}}'
        self._last: dict[str, Any] | None = None
        self._routing_read_at = 0.0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._page = resources.files("switchyard_local").joinpath(PAGE).read_bytes()
        self._port = port
        self._server: _Server | None = None

    @property
    def port(self) -> int:
        assert self._server is not None, "start() binds the port"
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def start(self) -> Dashboard:
        """Bind the port (a taken one falls back to any free one), take a first
        sample and serve."""
        self._server = _bind(self._port, self)
        self.sample()
        for name, target in (
            ("dashboard-http", self._server.serve_forever),
            ("dashboard", self._run),
        ):
            threading.Thread(target=target, name=name, daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def _run(self) -> None:
        while not self._stop.wait(self._sample_seconds):
            self.sample()

    def sample(self) -> None:
        """Read the status once, add it to the history and make the served document.
        A failed read keeps the last document, with the error, for the page to show."""
        try:
            status = self._read_status()
        except Exception as exc:  # noqa: BLE001 - shown on the page; the next sample retries
            self._publish(None, repr(exc))
            return
        self.history.add(status)
        error = None
        if self._routing is not None and time.time() - self._routing_read_at >= ROUTING_SECONDS:
            self._routing_read_at = time.time()
            try:
                self._routing.refresh(status.models)
            except Exception as exc:  # noqa: BLE001 - the figures are still worth serving
                error = f"routing documents: {exc!r}"
        self._publish(status, error)

    def _publish(self, status: Status | None, error: str | None) -> None:
        if status is None:
            doc = dict(self._last) if self._last else {"models": {}}
        else:
            doc = status.as_dict()
            for model, entry in doc["models"].items():
                entry["history"] = self.history.of(model)
                entry.update(self._routing.of(model) if self._routing else {})
            self._last = doc
        doc["platform"] = self._about
        doc["sample_seconds"] = self._sample_seconds
        doc["history_points"] = self.history.points
        doc["error"] = error
        encoded = json.dumps(doc, separators=(",", ":")).encode()
        with self._lock:
            self._document = encoded

    def document(self) -> bytes:
        with self._lock:
            return self._document

    def page(self) -> bytes:
        return self._page


def loopback_host(header: str | None) -> bool:
    """Whether a request's ``Host`` names this machine's loopback (with any port)."""
    host = (header or "").strip().lower()
    # "[::1]:8081" keeps its brackets; "127.0.0.1:8081" loses its port
    name = host.split("]", 1)[0] + "]" if host.startswith("[") else host.rsplit(":", 1)[0]
    return name in LOOPBACK_HOSTS


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "switchyard-dashboard"

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._answer()

    def do_HEAD(self) -> None:  # noqa: N802
        self._answer(head=True)

    def _not_allowed(self) -> None:
        """Every other method: 405 naming the two it takes (501 in HTML before)."""
        self._send(
            HTTPStatus.METHOD_NOT_ALLOWED,
            b"GET or HEAD only\n",
            "text/plain",
            extra={"Allow": "GET, HEAD"},
        )

    do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = _not_allowed  # noqa: N815

    def _answer(self, head: bool = False) -> None:
        if not loopback_host(self.headers.get("Host")):
            self._send(HTTPStatus.FORBIDDEN, b"loopback only\n", "text/plain", head=head)
            return
        path = self.path.split("?", 1)[0]
        dashboard = self.server.dashboard
        if path in ("/", "/index.html"):
            self._send(HTTPStatus.OK, dashboard.page(), "text/html; charset=utf-8", head=head)
        elif path == "/api/status":
            self._send(HTTPStatus.OK, dashboard.document(), "application/json", head=head)
        else:
            self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain", head=head)

    def _send(
        self,
        status: HTTPStatus,
        body: bytes,
        content_type: str,
        extra: dict[str, str] | None = None,
        head: bool = False,
    ) -> None:
        """The answer; to a HEAD, its headers alone."""
        self.send_response(status)
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        # The page runs its own inline script and talks only to this server.
        self.send_header(
            "Content-Security-Policy",
            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
            "connect-src 'self'; img-src 'self' data:",
        )
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        return  # no access log: the page polls every two seconds


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int, dashboard: Dashboard) -> None:
        self.dashboard = dashboard
        super().__init__(("127.0.0.1", port), _Handler)


def _bind(port: int, dashboard: Dashboard) -> _Server:
    """The server on ``port``, or on any free port if that one is taken."""
    try:
        return _Server(port, dashboard)
    except (OSError, OverflowError):
        if port == 0:
            raise
    return _Server(0, dashboard)


def start_local_dashboard(run_dir: Path, port: int) -> Dashboard:
    """The dashboard of the local platform whose run folder is ``run_dir`` (it must
    have written its ``platform.json``), started."""
    reader = LocalStatusReader.for_run_dir(run_dir)
    info = json.loads((run_dir / "platform.json").read_text())
    store = LocalTrafficStore(
        aws.client("appconfig", info["region"], info["emulator_url"]),
        info["names"]["appconfig_application_id"],
    )
    about = {"url": info.get("url"), "stage": info.get("stage"), "region": info.get("region")}
    return Dashboard(reader.read, RoutingView(store), port, about=about).start()
