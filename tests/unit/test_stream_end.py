"""A streamed generation's end (``switchyard_router.generate_api``): whether its caller
reads to the last event or goes away midway, what the stream holds (its tenant's
stream slot, its reader) is given back once, at the response's end, without waiting
for the collector to close the response's generator."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import anyio
import pytest

from switchyard_router.generate_api import EndingStreamingResponse


def body(events: list[str], gate: threading.Event) -> Iterator[bytes]:
    """Two events, then one more only once ``gate`` is set (a slow generation)."""
    try:
        yield b"data: 1\n\n"
        yield b"data: 2\n\n"
        gate.wait(5)
        yield b"data: 3\n\n"
    finally:
        events.append("generator closed")


def run(spec_version: str, go_away_after: int | None) -> tuple[list[str], list[bytes]]:
    """The response served over ASGI ``spec_version``; its caller goes away once it
    has ``go_away_after`` events (None: reads them all)."""
    events: list[str] = []
    sent: list[bytes] = []
    gate = threading.Event()

    async def serve() -> None:
        gone = anyio.Event()
        response = EndingStreamingResponse(
            body(events, gate), on_end=lambda: events.append("ended"), media_type="text/plain"
        )

        async def receive() -> dict:
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict) -> None:
            if message["type"] != "http.response.body" or not message.get("body"):
                return
            if gone.is_set():
                if spec_version >= "2.4":
                    raise OSError("the caller went away")
                return  # the server notices at its next receive
            sent.append(message["body"])
            if len(sent) == (go_away_after or 2):
                if go_away_after is not None:
                    gone.set()
                gate.set()  # the generation goes on

        scope = {"type": "http", "asgi": {"spec_version": spec_version}, "method": "POST"}
        try:
            await response(scope, receive, send)
        except Exception:  # noqa: BLE001 - the server's to handle (ClientDisconnect)
            events.append("disconnected")

    anyio.run(serve)
    return events, sent


@pytest.fixture(autouse=True)
def no_collector():
    """The collector held off: nothing here may wait for it."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.mark.parametrize("spec_version", ["2.3", "2.4"])
def test_a_caller_that_goes_away_midway_ends_the_stream_at_once(spec_version):
    events, sent = run(spec_version, go_away_after=2)
    # THEN it had two events, and the stream ended once, as its response ended
    assert sent == [b"data: 1\n\n", b"data: 2\n\n"]
    assert events.count("ended") == 1


def test_a_stream_read_to_its_end_ends_once_after_its_last_event():
    events, sent = run("2.4", go_away_after=None)
    assert sent == [b"data: 1\n\n", b"data: 2\n\n", b"data: 3\n\n"]
    assert events == ["generator closed", "ended"]
