"""A real HTTP server that takes job callbacks, for the integration and e2e tiers:
it answers the first ``refuse`` deliveries with 503 and the rest with 200, and keeps
each delivery's headers and body."""

from __future__ import annotations

import http.server
import threading
from dataclasses import dataclass, field


@dataclass
class Delivery:
    headers: dict[str, str]
    body: bytes


@dataclass
class CallbackReceiver:
    refuse: int = 0
    deliveries: list[Delivery] = field(default_factory=list)

    def __post_init__(self) -> None:
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server spelling
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.deliveries.append(Delivery(dict(self.headers), body))
                self.send_response(503 if len(receiver.deliveries) <= receiver.refuse else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: object) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/hooks/jobs"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> CallbackReceiver:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
