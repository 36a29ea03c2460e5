"""The HTTP transport of the platform's DynamoDB and SQS clients
(``switchyard.http_transport``): against the emulator, and against a scripted server
on a real socket for what the emulator does not do (idle connections closed, chunked
answers, failures mid-answer, timeouts, TLS)."""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from urllib.parse import urlsplit

import botocore.session
import pytest
from botocore.config import Config
from botocore.exceptions import (
    ConnectionClosedError,
    ProxyConnectionError,
    ReadTimeoutError,
    SSLError,
)

from switchyard import http_transport
from switchyard.http_transport import KeepAliveSession, install
from switchyard.queues import SqsWorkQueue
from switchyard.tables import RESULTS

REGION = "us-east-1"

# -- against the emulator ------------------------------------------------------------


def test_the_platforms_dynamodb_and_sqs_clients_use_it_and_others_do_not(clients):
    assert isinstance(clients("dynamodb")._endpoint.http_session, KeepAliveSession)
    assert isinstance(clients("sqs")._endpoint.http_session, KeepAliveSession)
    assert not isinstance(clients("s3")._endpoint.http_session, KeepAliveSession)


def test_dynamodb_answers_as_through_botocores_own_transport(clients, provisioned, emulator_url):
    ours = clients("dynamodb")
    theirs = botocore.session.get_session().create_client(
        "dynamodb", region_name=REGION, endpoint_url=emulator_url
    )
    table = provisioned.names.results_table
    key = {RESULTS.partition: {"S": "acme"}, RESULTS.sort: {"S": "r1"}}
    ours.put_item(TableName=table, Item={**key, "status": {"S": "queued"}, "n": {"N": "1"}})
    updated = ours.update_item(
        TableName=table,
        Key=key,
        UpdateExpression="ADD n :one",
        ExpressionAttributeValues={":one": {"N": "1"}},
        ReturnValues="ALL_NEW",
    )
    assert updated["Attributes"]["n"] == {"N": "2"}
    for client in (ours, theirs):
        item = client.get_item(TableName=table, Key=key, ConsistentRead=True)["Item"]
        assert item == {**key, "status": {"S": "queued"}, "n": {"N": "2"}}
        many = client.batch_get_item(RequestItems={table: {"Keys": [key], "ConsistentRead": True}})
        assert many["Responses"][table] == [item]
    # an error answer is the same exception, with its code
    with pytest.raises(ours.exceptions.ConditionalCheckFailedException) as refused:
        ours.put_item(
            TableName=table, Item=key, ConditionExpression="attribute_not_exists(#sk)",
            ExpressionAttributeNames={"#sk": RESULTS.sort},
        )  # fmt: skip
    assert refused.value.response["Error"]["Code"] == "ConditionalCheckFailedException"


def test_sqs_sends_receives_and_deletes_through_it(clients, provisioned):
    sqs = clients("sqs")
    url = next(iter(provisioned.queues.values()))["realtime"]
    queue = SqsWorkQueue(sqs, url, "realtime")
    bodies = [json.dumps({"n": i, "text": "é" * i}) for i in range(3)]
    for body in bodies:
        queue.send(body, "acme")
    received = []
    for _ in range(10):
        received += queue.receive(10, 1)
        if len(received) == 3:
            break
    assert sorted(r.body for r in received) == sorted(bodies)
    queue.delete(received)
    assert queue.receive(10, 0) == []


# -- against a scripted server -------------------------------------------------------

Reply = Callable[[socket.socket, bytes], bool]
"""Answers one request (its head and body) on a connection; whether to keep it."""


def json_reply(
    status: int = 200, body: bytes = b"{}", close: bool = False, headers: str = ""
) -> Reply:
    def reply(conn: socket.socket, _: bytes) -> bool:
        head = (
            f"HTTP/1.1 {status} X\r\nContent-Type: application/x-amz-json-1.0\r\n"
            f"x-amzn-RequestId: r\r\nContent-Length: {len(body)}\r\n{headers}"
            + ("Connection: close\r\n" if close else "")
            + "\r\n"
        )
        conn.sendall(head.encode() + body)
        return not close

    return reply


class Scripted:
    """A server on a real socket that answers each request with the next reply of
    ``replies`` (the last one repeated), counting connections and requests."""

    def __init__(self, replies: list[Reply], tls: ssl.SSLContext | None = None) -> None:
        self.replies = replies
        self.connections = 0
        self.requests: list[bytes] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._tls = tls
        self.port = self._listener.getsockname()[1]
        self._open: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"{'https://localhost' if self._tls else 'http://127.0.0.1'}:{self.port}"

    def close_idle(self) -> None:
        """Close every connection it holds open (as a server's idle timeout does)."""
        for conn in self._open:
            with suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
        self._open.clear()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            if self._tls is not None:
                try:
                    conn = self._tls.wrap_socket(conn, server_side=True)
                except (ssl.SSLError, OSError):
                    conn.close()
                    continue
            self.connections += 1
            self._open.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buffer = b""
        try:
            while True:
                while b"\r\n\r\n" not in buffer:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buffer += data
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                while len(buffer) < length:
                    buffer += conn.recv(65536)
                body, buffer = buffer[:length], buffer[length:]
                self.requests.append(head + b"\r\n\r\n" + body)
                reply = self.replies[min(len(self.requests), len(self.replies)) - 1]
                if not reply(conn, body):
                    conn.close()
                    return
        except OSError:
            return

    def stop(self) -> None:
        self._listener.close()
        self.close_idle()


@contextmanager
def scripted(*replies: Reply, tls: ssl.SSLContext | None = None) -> Iterator[Scripted]:
    server = Scripted(list(replies), tls)
    try:
        yield server
    finally:
        server.stop()


def client_of(url: str, attempts: int = 1, read_timeout: float = 5, verify=None):
    """A DynamoDB client of the scripted server, its transport installed as the
    platform's are, botocore's retries limited to ``attempts``."""
    session = botocore.session.get_session()
    session.set_credentials("test", "test")
    client = session.create_client(
        "dynamodb",
        region_name=REGION,
        endpoint_url=url,
        verify=verify,
        config=Config(
            retries={"mode": "standard", "total_max_attempts": attempts},
            connect_timeout=2,
            read_timeout=read_timeout,
        ),
    )
    return install(client)


def test_calls_go_over_one_kept_alive_connection():
    with scripted(json_reply(body=b'{"TableNames": ["t"]}')) as server:
        client = client_of(server.url)
        for _ in range(3):
            assert client.list_tables()["TableNames"] == ["t"]
        assert server.connections == 1 and len(server.requests) == 3
        # signed for the host it went to, as botocore signs it
        assert b"\r\nHost: 127.0.0.1:" in server.requests[0]
        assert b"Authorization: AWS4-HMAC-SHA256" in server.requests[0]


def raw_post(url: str, body: bytes) -> bytes:
    host = url.split("//", 1)[1]
    return f"POST / HTTP/1.1\r\nHost: {host}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body


def test_requests_exchanged_together_all_reach_the_server_before_any_is_answered():
    # GIVEN a server that answers no request until three have come, each on its own
    # connection, and drops the one that says so without an answer
    arrived = threading.Barrier(3, timeout=5)

    def together(conn: socket.socket, body: bytes) -> bool:
        arrived.wait()  # sent one after another's answer, they would never all come
        if body == b"drop":
            return False
        return json_reply(body=b'{"echo": "' + body + b'"}')(conn, body)

    with scripted(together) as server:
        session = client_of(server.url)._endpoint.http_session
        key = http_transport.host_key(urlsplit(server.url))
        # WHEN three requests are exchanged together, on this thread
        bodies = [b"one", b"drop", b"three"]
        answers = session.exchange_all(key, server.url, [raw_post(server.url, b) for b in bodies])
    # THEN each has its own answer, in order, and the dropped one its error
    first, dropped, third = answers
    assert first[0] == 200 and json.loads(first[2]) == {"echo": "one"}
    assert isinstance(dropped, ConnectionClosedError)
    assert third[0] == 200 and json.loads(third[2]) == {"echo": "three"}
    assert server.connections == 3


def test_a_connection_the_server_closed_while_idle_is_replaced_and_the_call_sent_once():
    with scripted(json_reply(body=b'{"TableNames": []}')) as server:
        client = client_of(server.url)  # no retries of botocore's own
        client.list_tables()
        server.close_idle()
        client.list_tables()
        client.list_tables()
        # the closed one's request never reached the server: three calls, three requests
        assert server.connections == 2 and len(server.requests) == 3


def test_a_connection_that_closes_before_any_answer_is_replaced_and_the_request_sent_again():
    def drop(conn: socket.socket, _: bytes) -> bool:
        return False  # the request read, the connection closed, no answer

    ok = json_reply(body=b'{"TableNames": ["b"]}')
    with scripted(ok, drop, ok) as server:
        client = client_of(server.url)  # no retries of botocore's own
        client.list_tables()
        assert client.list_tables()["TableNames"] == ["b"]
        assert server.connections == 2 and len(server.requests) == 3


def test_a_connection_idle_too_long_is_not_used(monkeypatch):
    monkeypatch.setattr(http_transport, "IDLE_MOST_S", 0.05)
    with scripted(json_reply(body=b'{"TableNames": []}')) as server:
        client = client_of(server.url)
        client.list_tables()
        time.sleep(0.1)
        client.list_tables()
        assert server.connections == 2 and len(server.requests) == 2


def test_an_answer_that_closes_its_connection_is_read_and_the_next_call_reconnects():
    with scripted(json_reply(body=b'{"TableNames": ["a"]}', close=True)) as server:
        client = client_of(server.url)
        assert client.list_tables()["TableNames"] == ["a"]
        assert client.list_tables()["TableNames"] == ["a"]
        assert server.connections == 2


def test_a_chunked_answer_is_read_whole():
    body = b'{"TableNames": ["one", "two", "three"]}'

    def chunked(conn: socket.socket, _: bytes) -> bool:
        parts = [body[:10], body[10:25], body[25:]]
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/x-amz-json-1.0\r\n"
        head += b"Transfer-Encoding: chunked\r\n\r\n"
        chunks = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts)
        conn.sendall(head + chunks + b"0\r\n\r\n")
        return True

    with scripted(chunked) as server:
        client = client_of(server.url)
        assert client.list_tables()["TableNames"] == ["one", "two", "three"]
        assert client.list_tables()["TableNames"] == ["one", "two", "three"]
        assert server.connections == 1


def test_a_server_error_is_retried_by_botocore_as_before():
    error = b'{"__type": "com.amazonaws.dynamodb.v20120810#InternalServerError", "message": "x"}'
    with scripted(json_reply(500, error), json_reply(body=b'{"TableNames": []}')) as server:
        client = client_of(server.url, attempts=3)
        assert client.list_tables()["TableNames"] == []
        assert len(server.requests) == 2


def test_an_answer_cut_off_midway_is_a_closed_connection_not_sent_again():
    def cut(conn: socket.socket, _: bytes) -> bool:
        conn.sendall(b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"Tab')
        return False

    with scripted(cut) as server:
        client = client_of(server.url)
        with pytest.raises(ConnectionClosedError):
            client.list_tables()
        assert len(server.requests) == 1


def test_an_answer_that_never_comes_times_out():
    def silent(conn: socket.socket, _: bytes) -> bool:
        return True

    with scripted(silent) as server:
        client = client_of(server.url, read_timeout=0.3)
        with pytest.raises(ReadTimeoutError):
            client.list_tables()


def test_a_call_a_proxy_is_set_for_goes_through_botocores_own_transport():
    session = botocore.session.get_session()
    session.set_credentials("test", "test")
    with scripted(json_reply(body=b'{"TableNames": []}')) as server:
        client = install(
            session.create_client(
                "dynamodb",
                region_name=REGION,
                endpoint_url=server.url,
                config=Config(
                    proxies={"http": "http://127.0.0.1:9"},  # nothing listens there
                    retries={"mode": "standard", "total_max_attempts": 1},
                ),
            )
        )
        assert isinstance(client._endpoint.http_session, KeepAliveSession)
        with pytest.raises(ProxyConnectionError):
            client.list_tables()
        assert server.requests == []


def test_a_botocore_unlike_this_one_keeps_its_own_transport():
    session = botocore.session.get_session()
    session.set_credentials("test", "test")
    client = session.create_client("dynamodb", region_name=REGION)
    theirs = object()  # a session without the settings this one reads
    client._endpoint.http_session = theirs
    assert install(client)._endpoint.http_session is theirs


# -- TLS -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certificate(tmp_path_factory) -> tuple[Path, Path]:
    """A self-signed certificate for localhost and its key, as PEM files."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    folder = tmp_path_factory.mktemp("tls")
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


def _server_tls(certificate: tuple[Path, Path]) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*certificate)
    return context


def test_tls_is_checked_against_the_ca_bundle_botocore_would_use(certificate):
    with scripted(json_reply(body=b'{"TableNames": ["x"]}'), tls=_server_tls(certificate)) as s:
        trusting = client_of(s.url, verify=str(certificate[0]))
        assert trusting.list_tables()["TableNames"] == ["x"]
        assert trusting.list_tables()["TableNames"] == ["x"]
        assert s.connections == 1
        # a server whose certificate the default bundle does not hold is refused
        with pytest.raises(SSLError):
            client_of(s.url).list_tables()
        assert len(s.requests) == 2
