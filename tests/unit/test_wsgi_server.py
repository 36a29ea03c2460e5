"""The emulator's HTTP server (``switchyard_local.wsgi_server``), over real sockets on
loopback: persistent connections, request bodies by length and chunked,
``Expect: 100-continue``, HEAD, and what a malformed request or a failing
application gets."""

from __future__ import annotations

import http.client
import json
import socket
import threading
from collections.abc import Iterator

import pytest

from switchyard_local.emulator import free_port
from switchyard_local.wsgi_server import Server


def echo_app(environ, start_response):
    """Answers with what it was asked, as JSON; /fail raises, /empty answers 204."""
    path = environ["PATH_INFO"]
    if path == "/fail":
        raise RuntimeError("the application failed")
    if path == "/empty":
        start_response("204 No Content", [])
        return [b""]
    body = environ["wsgi.input"].read(int(environ["CONTENT_LENGTH"] or 0))
    seen = {
        "method": environ["REQUEST_METHOD"],
        "path": path,
        "query": environ["QUERY_STRING"],
        "body": body.decode(),
        "content_length": environ["CONTENT_LENGTH"],
        "content_type": environ.get("CONTENT_TYPE"),
        "x_things": environ.get("HTTP_X_THING"),
        "chunked_header_left": "HTTP_TRANSFER_ENCODING" in environ,
        "thread": threading.get_ident(),
    }
    start_response("200 OK", [("Content-Type", "application/json")])
    return [json.dumps(seen).encode()]


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server(echo_app, "127.0.0.1", free_port())
    thread = threading.Thread(target=s.serve_forever, daemon=True)
    thread.start()
    try:
        yield s
    finally:
        s.close()
        thread.join(5)


def connect(server: Server) -> http.client.HTTPConnection:
    return http.client.HTTPConnection(server.host, server.port, timeout=10)


def raw_exchange(server: Server, data: bytes) -> bytes:
    """``data`` sent on a fresh connection; everything read until the server closes."""
    with socket.create_connection((server.host, server.port), timeout=10) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_calls_on_one_connection_are_answered_in_turn_by_its_own_thread(server):
    conn = connect(server)
    answers = []
    for i in range(3):
        conn.request("POST", f"/q%20{i}?a=b", body=f"body {i}", headers={"X-Thing": "one"})
        response = conn.getresponse()
        assert response.status == 200
        assert response.getheader("Content-Length") == str(len(response.peek()))
        answers.append(json.loads(response.read()))
    assert [a["path"] for a in answers] == ["/q 0", "/q 1", "/q 2"]  # decoded
    assert [a["body"] for a in answers] == ["body 0", "body 1", "body 2"]
    assert answers[0]["query"] == "a=b" and answers[0]["x_things"] == "one"
    assert len({a["thread"] for a in answers}) == 1  # one connection, one thread
    conn.close()


def test_a_chunked_body_reaches_the_application_whole_with_its_length(server):
    conn = connect(server)
    conn.request("PUT", "/object", body=iter([b"first ", b"second ", b"third"]))
    # http.client sends an iterable body chunked
    seen = json.loads(conn.getresponse().read())
    assert seen["body"] == "first second third"
    assert seen["content_length"] == str(len("first second third"))
    assert not seen["chunked_header_left"]


def test_a_client_that_expects_100_continue_is_told_to_go_on(server):
    request = (
        b"PUT /object HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
        b"Expect: 100-continue\r\nConnection: close\r\n\r\n"
    )
    with socket.create_connection((server.host, server.port), timeout=10) as sock:
        sock.sendall(request)
        interim = sock.recv(1024)
        assert interim.startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        sock.sendall(b"hello")
        rest = b""
        while chunk := sock.recv(65536):
            rest += chunk
    final = (interim[len(b"HTTP/1.1 100 Continue\r\n\r\n") :] + rest).decode()
    assert final.startswith("HTTP/1.1 200 OK") and '"body": "hello"' in final


def test_head_and_204_answers_carry_no_body(server):
    conn = connect(server)
    conn.request("HEAD", "/object")
    response = conn.getresponse()
    assert response.status == 200 and response.read() == b""
    conn.request("GET", "/empty")  # the same connection is still in step
    response = conn.getresponse()
    assert response.status == 204 and response.read() == b""
    conn.request("GET", "/after")
    assert json.loads(conn.getresponse().read())["path"] == "/after"


def test_the_connection_is_closed_when_the_client_asks_or_speaks_http_1_0(server):
    closing = raw_exchange(server, b"GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert closing.startswith(b"HTTP/1.1 200 OK") and b"Connection: close" in closing
    old = raw_exchange(server, b"GET /b HTTP/1.0\r\n\r\n")  # the server closes: no hang
    assert old.startswith(b"HTTP/1.1 200 OK") and b'"/b"' in old


def test_a_malformed_request_gets_400_and_the_connection_is_closed(server):
    for bad in (
        b"NONSENSE\r\n\r\n",
        b"GET /a HTTP/1.1\r\nno colon here\r\n\r\n",
        b"POST /a HTTP/1.1\r\nContent-Length: twelve\r\n\r\n",
        b"POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    ):
        answer = raw_exchange(server, bad)
        assert answer.startswith(b"HTTP/1.1 400 Bad Request"), bad


def test_a_failing_application_answers_500_and_the_connection_serves_on(server):
    conn = connect(server)
    conn.request("GET", "/fail")
    response = conn.getresponse()
    assert response.status == 500 and response.read() == b"internal error"
    conn.request("GET", "/next")
    assert json.loads(conn.getresponse().read())["path"] == "/next"


def test_a_client_that_leaves_mid_request_takes_nothing_else_down(server):
    with socket.create_connection((server.host, server.port), timeout=10) as sock:
        sock.sendall(b"POST /a HTTP/1.1\r\nContent-Length: 100\r\n\r\nonly part")
    # the server is still serving others
    conn = connect(server)
    conn.request("GET", "/still")
    assert json.loads(conn.getresponse().read())["path"] == "/still"


def test_a_free_port_is_picked_below_the_ports_outgoing_connections_take():
    from switchyard_local.emulator import ephemeral_ports

    # GIVEN the kernel's range for outgoing connections' local ports
    low, high = ephemeral_ports()
    # WHEN ports are picked for servers to bind later
    ports = {free_port() for _ in range(20)}
    # THEN none is one an outgoing connection could take meanwhile, and each binds
    assert all(not low <= port <= high for port in ports)
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
