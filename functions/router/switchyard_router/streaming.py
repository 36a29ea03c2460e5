"""Reading a generation's token stream for the caller who waits on it.

The worker writes a streamed request's tokens as chunks in the results table
(``switchyard.generation``); :class:`TokenReader` reads what follows the last token
it passed on, in order, each token once. It looks often while tokens come (10 ms,
backing off to 50 ms when none do) and, when nothing new arrives for a while,
reads the request's record: an error, expiry or cancellation ends the stream, and
a request answered without its last chunk (its worker wrote the result and died
before the chunk) ends with the rest of the result's text.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from switchyard.generation import TokenStream
from switchyard.results import ResultStore
from switchyard.schemas import ResultRecord

_FIRST_POLL_S = 0.01
_MAX_POLL_S = 0.05
_STREAM_POLL_S = 0.05  # after the first token: a look per chunk the worker writes
_RECORD_EVERY_S = 0.5  # with nothing new for this long, read the request's record


@dataclass
class Piece:
    """Text a token (or several) added, in order."""

    text: str
    index: int  # of its token in the completion


@dataclass
class Ending:
    """How the stream ended: ``finish_reason`` and ``usage``, or the record of a
    request that did not complete (``record.status`` is not ``done``)."""

    finish_reason: str | None = None
    usage: dict[str, int] = field(default_factory=dict)
    record: ResultRecord | None = None

    @property
    def failed(self) -> bool:
        return self.record is not None and self.record.status != "done"


class TokenReader:
    def __init__(
        self,
        stream: TokenStream,
        results: ResultStore,
        tenant: str,
        request_id: str,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._stream = stream
        self._results = results
        self._tenant = tenant
        self._request_id = request_id
        self._sleep = sleep
        self.next_index = 0  # the first token not passed on yet
        self.text = ""
        self.ending: Ending | None = None

    def first(self, deadline: float) -> list[Piece | Ending] | None:
        """What the stream holds once its first token (or its end) is there, or None
        if the monotonic ``deadline`` passes first."""
        return self._until(deadline, _FIRST_POLL_S)

    def rest(self, deadline: float) -> Iterator[Piece | Ending]:
        """Everything after what was passed on, until the stream ends or the deadline
        passes (then an Ending whose finish_reason is ``timeout``)."""
        while self.ending is None:
            self._sleep(_STREAM_POLL_S)  # what it has was just passed on
            got = self._until(deadline, _STREAM_POLL_S)
            if got is None:
                self.ending = Ending(finish_reason="timeout")
                yield self.ending
                return
            yield from got

    def _until(self, deadline: float, first_interval: float) -> list[Piece | Ending] | None:
        interval = first_interval
        quiet_since = time.monotonic()
        while True:
            got = self._look()
            if got:
                return got
            now = time.monotonic()
            if now - quiet_since >= _RECORD_EVERY_S:
                quiet_since = now
                ended = self._from_record()
                if ended:
                    return ended
            if now >= deadline:
                return None
            self._sleep(min(interval, max(deadline - now, 0)))
            interval = min(interval * 1.5, _MAX_POLL_S)

    def _look(self) -> list[Piece | Ending]:
        out: list[Piece | Ending] = []
        for chunk in self._stream.after(self._tenant, self._request_id, self.next_index):
            if chunk.start > self.next_index:
                break  # a gap: its chunk is not written yet
            skip = self.next_index - chunk.start
            for offset, text in enumerate(chunk.pieces[skip:], start=skip):
                self.next_index = chunk.start + offset + 1
                if text:
                    self.text += text
                    out.append(Piece(text, chunk.start + offset))
            if chunk.finish_reason is not None:
                self.ending = Ending(chunk.finish_reason, dict(chunk.usage))
                out.append(self.ending)
                break
        return out

    def _from_record(self) -> list[Piece | Ending]:
        record = self._results.get(self._tenant, self._request_id)
        if record is None or record.status == "queued":
            return []
        if record.status != "done":
            self.ending = Ending(record=record)
            return [self.ending]
        got = self._look()  # its last chunk may have landed since
        if got and self.ending is not None:
            return got
        output = (record.outputs or [{}])[0]
        rest = str(output.get("text", ""))[len(self.text) :]
        out: list[Piece | Ending] = list(got)
        if rest:
            self.text += rest
            out.append(Piece(rest, self.next_index))
        self.ending = Ending(output.get("finish_reason"), dict(output.get("usage") or {}))
        out.append(self.ending)
        return out


def sse(data: Any) -> bytes:
    """One server-sent event."""
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {text}\n\n".encode()


SSE_HEADERS = {
    "cache-control": "no-cache",
    "x-accel-buffering": "no",  # proxies must pass each event on at once
}
