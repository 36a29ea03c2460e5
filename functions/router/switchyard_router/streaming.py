"""Reading a generation's token stream for the caller who waits on it.

The worker writes a streamed request's tokens as chunks in the results table
(``switchyard.generation``); :class:`TokenReader` reads what follows the last token
it passed on, in order, each token once, a chunk's tokens together (its caller
passes them on in one write). The process's :class:`StreamHub` reads every
stream's next chunk together, the first token's too: one read of a stream's chunk
at token 0 by its key from 10 ms after it was asked for, backing off to 25 ms, then
its next chunk every 50 ms, each read shared with every other stream due then.
When nothing new arrives for a while, it reads the whole stream once (a chunk
another worker cut elsewhere) and the request's record: an error, expiry or
cancellation ends the stream, and
a request answered without its last chunk (its worker wrote the result and died
before the chunk) ends with the rest of the result's text.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from switchyard.generation import Chunk, TokenStream
from switchyard.results import ResultStore
from switchyard.schemas import ResultRecord

_FIRST_POLL_S = 0.01
_MAX_POLL_S = 0.05
# The hub's looks for a first token back off to this: one look serves every stream
# waiting, and a first token waits for no reader that looks less often.
_FIRST_MOST_S = 0.025
_STREAM_POLL_S = 0.05  # after the first token: a look per chunk the worker writes
_RECORD_EVERY_S = 0.5  # with nothing new for this long, read the request's record

log = logging.getLogger("switchyard.router")


class _Watch:
    """One stream the hub reads: where its next chunk begins, when it is next read
    (and how long after the last look, growing while it waits for its first token),
    and what it found."""

    def __init__(self, tenant: str, request_id: str, cursor: int, every: float) -> None:
        self.tenant = tenant
        self.request_id = request_id
        self.cursor = cursor  # the token its next chunk begins at
        self.every = every
        self.next_look = time.monotonic() + every
        self.found: queue.Queue[Chunk] = queue.Queue()
        self.forgotten = False  # its reader reads no more: the hub drops it


class StreamHub:
    """Every stream this router process passes on, read together, from its first
    token: each look is one read of the next chunk of every stream due a look, by its
    exact key (``TokenStream.at``, a BatchGetItem), so n streams cost one call per
    look, not n. A stream waiting for its first token is looked at 10 ms after it is
    asked for, then every 1.5 times longer, up to 25 ms; a stream whose tokens flow,
    every 50 ms. In Lambda a function instance holds one stream at a time
    and the hub reads one key; the local router holds them all.

    :meth:`forget` takes no lock: a stream's reader is closed from its response's
    generator, which the garbage collector may finalize on any thread at any
    allocation, the hub's own while it holds its lock included."""

    def __init__(
        self,
        stream: TokenStream,
        interval_s: float = _STREAM_POLL_S,
        first_interval_s: float = _FIRST_POLL_S,
    ) -> None:
        self._stream = stream
        self._interval = interval_s
        self._first_interval = first_interval_s
        self._watches: dict[int, _Watch] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, tenant: str, request_id: str, cursor: int) -> _Watch:
        every = self._first_interval if cursor == 0 else self._interval
        watch = _Watch(tenant, request_id, cursor, every)
        with self._lock:
            self._watches[id(watch)] = watch
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="stream-hub", daemon=True)
                self._thread.start()
        self._wake.set()  # its first look may come before the hub's next
        return watch

    def forget(self, watch: _Watch) -> None:
        """Reads of ``watch`` stop: the hub drops it before its next look."""
        watch.forgotten = True

    def _run(self) -> None:
        while True:
            with self._lock:
                for key in [k for k, w in self._watches.items() if w.forgotten]:
                    del self._watches[key]
                watches = list(self._watches.values())
                if not watches:
                    self._thread = None
                    return
            # A look takes along the streams due within half a first look's interval.
            now = time.monotonic()
            due = [w for w in watches if w.next_look <= now + self._first_interval / 2]
            if not due:
                self._wake.wait(min(w.next_look for w in watches) - now)
                self._wake.clear()
                continue
            # Streams that had a chunk after their first are read again at once: the
            # next may be there too (a reader that fell behind catches up in one look,
            # not one a look).
            while due := [w for w in due if not w.forgotten]:
                try:
                    found = self._stream.at([(w.tenant, w.request_id, w.cursor) for w in due])
                except Exception:  # noqa: BLE001 - each reader falls back to its own Query
                    log.exception("reading the streams' next chunks failed")
                    found = {}
                moved = []
                looked = time.monotonic()
                for w in due:
                    chunk = found.get((w.tenant, w.request_id, w.cursor))
                    if chunk is None:
                        most = _FIRST_MOST_S if w.cursor == 0 else self._interval
                        w.every = min(w.every * 1.5, max(most, self._first_interval))
                        w.next_look = looked + w.every
                        continue
                    again = chunk.start > 0
                    w.cursor = chunk.end
                    w.found.put(chunk)
                    w.every = self._interval
                    w.next_look = looked + w.every
                    if chunk.finish_reason is not None:
                        self.forget(w)  # its reader has all it needs
                    elif again:
                        moved.append(w)
                due = moved


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
        hub: StreamHub | None = None,
    ) -> None:
        self._stream = stream
        self._hub = hub
        self._results = results
        self._tenant = tenant
        self._request_id = request_id
        self._sleep = sleep
        self.next_index = 0  # the first token not passed on yet
        self.text = ""
        self.ending: Ending | None = None
        self._watch: _Watch | None = None  # its stream, as the hub reads it

    def first(self, deadline: float) -> list[Piece | Ending] | None:
        """What the stream holds once its first token (or its end) is there, or None
        if the monotonic ``deadline`` passes first. With a hub, the hub reads it, and
        goes on reading the stream for :meth:`rest`."""
        if self._hub is None:
            return self._until(deadline, _FIRST_POLL_S)
        self._watch = self._hub.watch(self._tenant, self._request_id, self.next_index)
        got = self._from_watch(self._watch, deadline)
        if got is None or self.ending is not None:
            self._hub.forget(self._watch)
        return got

    def rest(self, deadline: float) -> Iterator[list[Piece | Ending]]:
        """Everything after what was passed on, a chunk's worth at a time (or all the
        chunks that came since the last), until the stream ends or the deadline
        passes (then an Ending whose finish_reason is ``timeout``)."""
        try:
            while self.ending is None:
                if self._hub is None:
                    self._sleep(_STREAM_POLL_S)  # what it has was just passed on
                    got = self._until(deadline, _STREAM_POLL_S)
                else:
                    if self._watch is None:
                        self._watch = self._hub.watch(
                            self._tenant, self._request_id, self.next_index
                        )
                    got = self._from_watch(self._watch, deadline)
                if got is None:
                    self.ending = Ending(finish_reason="timeout")
                    got = [self.ending]
                yield got
        finally:
            self.close()

    def close(self) -> None:
        """The caller reads no more: the hub stops reading its stream."""
        if self._hub is not None and self._watch is not None:
            self._hub.forget(self._watch)

    def _from_watch(self, watch: _Watch, deadline: float) -> list[Piece | Ending] | None:
        """What the chunks the hub found next add (all it has found), or None if the
        deadline passes first; quiet for a while, a Query (a chunk that does not begin
        where the last ended: another worker's) and the record."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                chunks = [watch.found.get(timeout=min(_RECORD_EVERY_S, left))]
            except queue.Empty:
                got = self._look(whole=True) or self._from_record()
                watch.cursor = max(watch.cursor, self.next_index)
            else:
                while not watch.found.empty():
                    chunks.append(watch.found.get_nowait())
                got = self._take(chunks)
            if got:
                return got

    def _until(self, deadline: float, first_interval: float) -> list[Piece | Ending] | None:
        interval = first_interval
        quiet_since = time.monotonic()
        while True:
            got = self._look_next()
            if got:
                return got
            now = time.monotonic()
            if now - quiet_since >= _RECORD_EVERY_S:
                quiet_since = now
                ended = self._look(whole=True) or self._from_record()
                if ended:
                    return ended
            if now >= deadline:
                return None
            self._sleep(min(interval, max(deadline - now, 0)))
            interval = min(interval * 1.5, _MAX_POLL_S)

    def _look_next(self) -> list[Piece | Ending]:
        """The chunk that begins at the next token, read by its key (a Query reads a
        range; this reads one item), and each one after it that is there."""
        out: list[Piece | Ending] = []
        while self.ending is None:
            place = (self._tenant, self._request_id, self.next_index)
            chunk = self._stream.at([place]).get(place)
            if chunk is None:
                break
            out += self._take([chunk])
        return out

    def _look(self, whole: bool = False) -> list[Piece | Ending]:
        """What the chunks after the last token passed on add; ``whole``: read every
        chunk, for one that begins before that token and ends after it (another
        worker's, cut elsewhere)."""
        start = 0 if whole else self.next_index
        return self._take(self._stream.after(self._tenant, self._request_id, start))

    def _take(self, chunks: list[Chunk]) -> list[Piece | Ending]:
        """What these chunks (in order) add after the last token passed on: a Piece
        per token that adds text."""
        out: list[Piece | Ending] = []
        for chunk in chunks:
            if chunk.start > self.next_index:
                break  # a gap: its chunk is not written yet
            skip = self.next_index - chunk.start
            for offset, text in enumerate(chunk.pieces[skip:], start=skip):
                if text:
                    out.append(Piece(text, chunk.start + offset))
            self.text += "".join(chunk.pieces[skip:])
            self.next_index = max(self.next_index, chunk.end)
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
        got = self._look(whole=True)  # its last chunk may have landed since
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
