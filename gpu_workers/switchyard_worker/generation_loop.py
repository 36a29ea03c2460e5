"""A generative model's worker loop: continuous batching, tokens streamed back.

A receiver thread long-polls while the running batch has room, and the main loop
lets arrivals join between decode steps. A streamed request's tokens are written as
chunks (``switchyard.generation``) as they come, the first at once and then at most
every flush interval (``stream_flush_seconds``, longer with more streams:
:func:`flush_interval`), in order, the last one at once and before the result. One
writer thread writes every stream's due chunk together, one call per tick
(``TokenStream.put_many``), not one per chunk. A redelivered streamed request
continues from the tokens its chunks hold. Its messages are held with a short
visibility (``generation_visibility_seconds``, extended while they run), so a request
whose worker died is taken up again within seconds. Decoding, triage, results and
deletes are the stages it shares with the micro-batch loop (``micro_batch_loop``).
"""

from __future__ import annotations

import functools
import math
import queue as stdlib_queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from switchyard.generation import (
    Chunk,
    ChunkWrite,
    TokenStream,
    as_request,
    over_context,
    tokens_written,
)
from switchyard.schemas import ErrorInfo, GenerationSignature, QueueMessage
from switchyard_worker.batching import Pending, unread
from switchyard_worker.finisher import Finisher
from switchyard_worker.generation import Continuous, Sequence
from switchyard_worker.in_hand import MessagesInHand
from switchyard_worker.intake import RECEIVE_MAX, Intake
from switchyard_worker.stages import MetricsEmitter, log, pause
from switchyard_worker.triage import Triage
from switchyard_worker.versions import ServedVersions

_IDLE_WAIT_S = 0.02  # how long a step with nothing running waits for an arrival
# While requests generate, their records are read this often (one read for all): a
# request that ended elsewhere (its caller cancelled it, or left its stream) stops.
_LOOK_AT_RECORDS_S = 0.5
# Streams that chunk at the flush setting's interval; more stretch it in proportion.
STREAMS_PER_FLUSH = 4
MOST_FLUSH_S = 0.2  # the longest a stream's tokens gather (unless the setting is longer)


def flush_interval(base: float, streams: int, write_seconds: float) -> float:
    """How long a stream's tokens gather before their chunk is written. Each chunk is
    an item the table stores, the router reads and passes on, so chunks grow with the
    load: ``base`` (``stream_flush_seconds``) up to STREAMS_PER_FLUSH streams, longer in
    proportion beyond; at least four times the last tick's write (a busy table, a busy
    worker: chunks grow rather than writes queue); at most MOST_FLUSH_S or ``base``."""
    grown = max(base * max(1.0, streams / STREAMS_PER_FLUSH), 4 * write_seconds)
    return min(grown, max(base, MOST_FLUSH_S))


class GenerationLoop:
    """Continuous batches per version, fed by a receiver thread, one decode step at a
    time on the worker's main thread."""

    # The stop log's count of batches: a continuous batch never ends, so none is
    # counted (the micro-batch loop counts its own).
    batches_run = 0

    def __init__(
        self,
        *,
        worker_id: str,
        stopping: threading.Event,
        versions: ServedVersions,
        in_hand: MessagesInHand,
        intake: Intake,
        triage: Triage,
        finisher: Finisher,
        metrics: MetricsEmitter,
        stream: TokenStream | None,
        stream_flush_seconds: float,
        result_ttl_seconds: int,
        visibility_seconds: int,
    ) -> None:
        self.worker_id = worker_id
        self._stopping = stopping
        self._versions = versions
        self._in_hand = in_hand
        in_hand.visibility = visibility_seconds  # held briefly, extended while they run
        self._intake = intake
        self._triage = triage
        self._finisher = finisher
        self._metrics = metrics
        self._stream = stream
        self._batches: dict[str, Continuous] = {}
        self.arrivals: stdlib_queue.Queue[Pending] = stdlib_queue.Queue()
        self._generating: dict[str, _Generating] = {}
        self._looked_at_records = time.monotonic()
        # The running requests' records are read on a thread of their own: the decode
        # steps go on while a read is under way.
        self._record_reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="records")
        self._reading: Future[list[_Generating]] | None = None
        # One thread writes every stream's chunks, a tick at a time: each stream's
        # land in order, each once.
        self.stream_writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="stream-writer")
        self._ticks = _ChunkTicks(
            self.stream_writer, stream, stream_flush_seconds, result_ttl_seconds
        )
        self._receiver: threading.Thread | None = None

    # -- what the worker drives ----------------------------------------------------

    def start_taking_in(self) -> None:
        """Start the receiver thread."""
        self._receiver = threading.Thread(target=self.take_in, name="intake", daemon=True)
        self._receiver.start()

    def step_alone(self) -> None:
        """One turn without the receiver thread: what was put in ``arrivals`` joins
        (the unit tests' handle)."""
        self.step()

    def drain(self) -> None:
        """Stopping: the running batches finish, then the receiver thread is waited
        for, after which nothing more arrives."""
        while self.generating():
            self.step()
        if self._receiver is not None:
            self._receiver.join(self._intake.poll_wait + 30)

    def close(self) -> int:
        """Release the arrivals that did not join, and let the stream writes end (a
        streamed result is stored after its last chunk); the messages released."""
        released = self.release_arrivals()
        self._record_reader.shutdown(wait=True)
        self.stream_writer.shutdown(wait=True)
        return released

    # -- the receiver thread -------------------------------------------------------

    def take_in(self) -> None:
        """The receiver thread: while the running batches have room, long-poll the
        realtime lane (the batch lane when it is empty) and hand what arrives to the
        main loop, which lets it join between two decode steps."""
        realtime, batch_lane = self._in_hand.lanes
        while not self._stopping.is_set():
            room = self._room()
            if room <= 0:
                pause(self._stopping, 0.005)
                continue
            try:
                want, visibility = min(room, RECEIVE_MAX), self._in_hand.visibility
                received = realtime.receive(want, self._intake.poll_wait, visibility)
                if not received and not self._stopping.is_set():
                    received = batch_lane.receive(want, 0, visibility)
            except Exception:  # noqa: BLE001 - the next poll tries again
                log.exception("receive failed")
                pause(self._stopping, 1.0)
                continue
            kept = self._intake.keep(received)
            try:
                # Their records are read here, not by the triage that admits them on
                # the main thread: no decode step waits for the read.
                self._intake.read_statuses([p for p in kept if unread(p)])
            except Exception:  # noqa: BLE001 - the triage reads them again
                log.exception("reading received requests' records failed")
            for pending in kept:
                self.arrivals.put(pending)
            if self._stopping.is_set():
                self.release_arrivals()

    def _room(self) -> int:
        """Sequences the running batches can still take, less those waiting to join."""
        active = [v for v in self._versions.known() if v.status == "active"]
        capacity = max((v.max_batch_size for v in active), default=1)
        running = sum(len(g.sequences) for g in list(self._generating.values()))
        return capacity - running - self.arrivals.qsize()

    # -- the main thread -----------------------------------------------------------

    def generating(self) -> bool:
        return any(b.running for b in self._batches.values())

    def step(self) -> None:
        """Let arrivals join, then advance every running batch by one token."""
        arrivals = []
        try:
            wait = 0 if self.generating() else _IDLE_WAIT_S
            arrivals.append(self.arrivals.get(timeout=wait) if wait else self.arrivals.get_nowait())
            while True:
                arrivals.append(self.arrivals.get_nowait())
        except stdlib_queue.Empty:
            pass
        if arrivals and not self._stopping.is_set():
            self._admit(arrivals)
        elif arrivals:
            self._in_hand.release([p.received for p in arrivals], 0)
        self._look_at_records()
        any_ended = False
        for version, running in list(self._batches.items()):
            if not running.running:
                continue
            record = self._versions.get(version)
            if record is not None and record.faults.get("step_delay_seconds"):
                # A drill's slow model: each decode step takes this much longer.
                time.sleep(float(record.faults["step_delay_seconds"]))
            stepping = list(running.running)
            began = time.perf_counter()
            try:
                ended = running.step()
            except Exception as exc:  # noqa: BLE001 - its requests go back for retry
                self._finisher.worked(time.perf_counter() - began)  # billed to no request
                self._failed(version, running.abandon(), exc)
                continue
            self._share_step(stepping, time.perf_counter() - began)
            for sequence in ended:
                self._sequence_ended(sequence)
            any_ended = any_ended or bool(ended)
        self._ticks.stepped(any_ended)

    def _share_step(self, stepping: list[Sequence], seconds: float) -> None:
        """A decode step's time: the worker's busy time, and each sequence's equal
        share of it, its request's worker time (switchyard.costs)."""
        self._finisher.worked(seconds)
        if not stepping:
            return
        share = seconds / len(stepping)
        for sequence in stepping:
            work = self._generating.get(sequence.key.split("/")[0])
            if work is not None:
                work.worker_seconds += share

    def release_arrivals(self) -> int:
        """Arrivals that did not join a batch, released at once (stopping); how many."""
        left = []
        try:
            while True:
                left.append(self.arrivals.get_nowait())
        except stdlib_queue.Empty:
            pass
        if left:
            self._in_hand.release([p.received for p in left], 0)
        return len(left)

    def _admit(self, arrivals: list[Pending]) -> None:
        answered, runnable = self._triage(arrivals)
        for p in runnable:
            try:
                sequences, streamer = self._sequences(p)
            except _Refused as refused:
                answered.append((p, self._finisher.record(p, "error", error=refused.error)))
                continue
            except Exception as exc:  # noqa: BLE001 - the version did not load, etc.
                self._finisher.failed([p], f"{type(exc).__name__}: {exc}"[:300])
                continue
            assert p.message is not None
            work = _Generating(p, sequences, time.time(), streamer)
            self._generating[p.message.request_id] = work
            if streamer is not None:
                self._ticks.open(streamer)
            running = self._batches[p.version]
            for sequence in sequences:
                if sequence.done:  # resumed after its last token: nothing left to run
                    continue
                running.join(sequence)
            if all(sq.done for sq in sequences):
                self._done(work)
        if answered:
            self._finisher.submit(answered)

    def _sequences(self, p: Pending) -> tuple[list[Sequence], _Streamer | None]:
        """The message's inputs as sequences, each checked against the context, and
        the writer of its stream if it is streamed (one input only), which continues
        from the tokens the stream already holds."""
        m = p.message
        assert m is not None and p.inputs is not None
        record = self._versions.get(p.version)
        assert record is not None
        runtime = self._versions.runtime(record)
        decoder = runtime.decoder  # type: ignore[attr-defined]
        if p.version not in self._batches:
            self._batches[p.version] = Continuous(decoder, record.max_batch_size)
        signature = record.signature
        assert isinstance(signature, GenerationSignature)
        sequences = []
        streamer = None
        for i, item in enumerate(p.inputs):
            request = as_request(item)
            prompt = decoder.tokenizer.encode(request.prompt)
            field = f"inputs[{i}]"
            context = min(signature.context_length, decoder.context_length)
            why = over_context(len(prompt), request.max_tokens, context)
            if why:
                raise _Refused(ErrorInfo(code="invalid_input", message=why, field=field))
            key = m.request_id if len(p.inputs) == 1 else f"{m.request_id}/{i}"
            sequence = Sequence(
                key=key, request=request, prompt_ids=prompt, seed=request.seed_for(key)
            )
            if request.stream and len(p.inputs) == 1 and self._stream is not None:
                if p.received.receive_count > 1:  # only a redelivery has a stream to resume
                    self._resume(sequence, m)
                streamer = _Streamer(m, sequence)
            sequences.append(sequence)
        return sequences, streamer

    def _resume(self, sequence: Sequence, m: QueueMessage) -> None:
        """Continue a streamed request from the tokens already written (a worker that
        ran it before died): they are forced, not sampled again."""
        assert self._stream is not None
        written = tokens_written(self._stream, m.tenant, m.request_id)
        for chunk in written:
            sequence.ids.extend(chunk.ids)
            sequence.pieces.extend(chunk.pieces)
            sequence.finish_reason = chunk.finish_reason
        sequence.emitted = "".join(sequence.pieces)
        if written:
            log.info(
                "stream resumed",
                extra={"request_id": m.request_id, "tokens": len(sequence.ids),
                       "worker": self.worker_id},
            )  # fmt: skip

    def _look_at_records(self) -> None:
        """Every ``_LOOK_AT_RECORDS_S`` while requests generate, their records are read
        (one read for all, on the record reader's thread); the first step after the
        read stops those that ended elsewhere."""
        reading = self._reading
        if reading is not None:
            if reading.done():
                self._reading = None
                self._stop_what_ended_elsewhere(reading.result())
            return
        if self._generating and time.monotonic() - self._looked_at_records >= _LOOK_AT_RECORDS_S:
            self._looked_at_records = time.monotonic()
            works = list(self._generating.values())
            self._reading = self._record_reader.submit(self._read_records, works)

    def _read_records(self, works: list[_Generating]) -> list[_Generating]:
        """On the record reader: the works whose records were read (none if the read
        failed: they run on, and the next look tries again)."""
        try:
            self._intake.read_statuses([w.pending for w in works])
        except Exception:  # noqa: BLE001 - they run on; the next look tries again
            log.exception("reading running requests' records failed")
            return []
        return works

    def _stop_what_ended_elsewhere(self, works: list[_Generating]) -> None:
        """Stop the requests whose record has ended while they generate: cancelled
        (``DELETE /v1/requests/{id}``, or a streamed caller who went away) or
        expired. Their sequences leave the running batch, their streams are written
        no more, and their messages are deleted: the record keeps its ending."""
        for work in works:
            status = work.pending.status
            if status in (None, "queued"):
                continue
            m = work.pending.message
            assert m is not None
            if self._generating.get(m.request_id) is not work:
                continue  # it ended here while its record was read
            self._generating.pop(m.request_id, None)
            self._batches[work.pending.version].leave(work.sequences)
            if work.streamer is not None:
                work.streamer.disowned = True
            self._in_hand.delete([work.pending.received])
            log.info(
                "generation stopped: its request ended elsewhere",
                extra={"request_id": m.request_id, "status": status, "worker": self.worker_id,
                       "tokens": sum(len(sq.ids) for sq in work.sequences)},
            )  # fmt: skip

    def _sequence_ended(self, sequence: Sequence) -> None:
        request_id = sequence.key.split("/")[0]
        work = self._generating.get(request_id)
        if work is not None and all(s.done for s in work.sequences):
            self._done(work)

    def _done(self, work: _Generating) -> None:
        """Store the result; a streamed one after its stream's last chunk."""
        p = work.pending
        m = p.message
        assert m is not None
        self._generating.pop(m.request_id, None)
        first = min((s.first_token_at for s in work.sequences if s.first_token_at), default=None)
        now = time.time()
        batch_size = len(self._batches[p.version].running) + 1  # it has just left
        timing = {
            "received_at": p.received_at,
            "batch_started_at": work.started,
            "queue_wait_ms": (p.received_at - m.enqueued_at) * 1000,
            "compute_ms": (now - work.started) * 1000,
            "batch_size": float(batch_size),
            "worker_ms": work.worker_seconds * 1000,  # its shares of the steps it was in
        }
        if first is not None:
            timing["first_token_ms"] = (first - m.enqueued_at) * 1000
        record = self._finisher.record(
            p, "done", outputs=[s.output() for s in work.sequences], timing=timing
        )
        store = functools.partial(self._finisher.submit, [(p, record)])
        if work.streamer is not None:
            work.streamer.after_last(store)  # a reader that sees the result has its tokens
        else:
            store()
        self._metrics.emit(
            p.version,
            batch_size=batch_size,
            compute_ms=timing["compute_ms"],
            queue_wait_ms=timing["queue_wait_ms"],
        )

    def _failed(self, version: str, sequences: list[Sequence], exc: Exception) -> None:
        reason = f"{type(exc).__name__}: {exc}"[:300]
        log.warning(
            "decode step failed; its requests released for retry",
            extra={"version": version, "sequences": len(sequences), "error": reason},
        )
        failed = []
        for request_id in dict.fromkeys(s.key.split("/")[0] for s in sequences):
            work = self._generating.pop(request_id, None)
            if work is not None:
                failed.append(work.pending)
                if work.streamer is not None:
                    # Taken up again from what its stream holds: written no more here.
                    work.streamer.disowned = True
        if failed:
            self._metrics.emit(version, item_errors=len(failed))
            self._finisher.failed(failed, reason)


class _Refused(Exception):
    def __init__(self, error: ErrorInfo) -> None:
        super().__init__(error.message)
        self.error = error


class _Generating:
    """A message whose sequences are in a running batch (a streamed one's writer)."""

    def __init__(
        self,
        pending: Pending,
        sequences: list[Sequence],
        started: float,
        streamer: _Streamer | None,
    ) -> None:
        self.pending = pending
        self.sequences = sequences
        self.started = started
        self.worker_seconds = 0.0  # its shares of the decode steps it was in
        self.streamer = streamer


class _Streamer:
    """A streamed sequence's writing: how many of its tokens are written, when its
    last chunk was, and what runs once its last chunk is written (or cannot be):
    ``after_last``, which stores the request's result. Its tokens are read from the
    sequence itself (``advance`` appends a token's id, then its piece, and sets how
    it ended last), so the decode step does nothing per token for its stream."""

    def __init__(self, message: QueueMessage, sequence: Sequence) -> None:
        self.message = message
        self.sequence = sequence
        self.written = len(sequence.ids)  # tokens before it are written already
        self.flushed_at: float | None = None  # none yet: its first chunk is due at once
        self.disowned = False
        self.last_written = sequence.done  # resumed after its end: nothing to write
        self._then: Callable[[], None] | None = None
        self._lock = threading.Lock()

    def due(self, now: float, interval: float) -> Chunk | None:
        """The chunk to write now: the tokens since the last one, if this is the
        stream's first, its last, or ``interval`` has passed since the last."""
        sequence = self.sequence
        ending = sequence.finish_reason  # read first: set after the last piece
        end = len(sequence.pieces)
        if end == self.written:
            return None
        first, last = self.flushed_at is None, ending is not None
        if not (first or last or now - (self.flushed_at or 0.0) >= interval):
            return None
        chunk = Chunk(
            start=self.written,
            ids=sequence.ids[self.written : end],
            pieces=sequence.pieces[self.written : end],
        )
        if last:
            output = sequence.output()
            chunk.finish_reason, chunk.usage = output["finish_reason"], output["usage"]
        return chunk

    def after_last(self, then: Callable[[], None]) -> None:
        """``then`` once the last chunk is written; at once if it is, or if the
        stream is written no more (another worker holds it)."""
        with self._lock:
            if not (self.last_written or self.disowned):
                self._then = then
                return
        then()

    def finished(self) -> None:
        """Its last chunk is written, or will not be: what waited for it runs."""
        with self._lock:
            self.last_written = True
            then, self._then = self._then, None
        if then is not None:
            then()


class _ChunkTicks:
    """The stream writer: on its one thread, a tick writes the chunk due of every open
    stream in one ``put_many`` (a BatchExecuteStatement of up to 25 INSERTs), so n
    streams cost a call a tick, not n. A tick runs when the main loop, after a
    decode step, finds a stream's first token or a generation's end waiting (written
    at once: the caller's time to its first token, and to its answer) or a stream's
    flush interval passed; one that comes while a tick runs makes it run again."""

    def __init__(
        self, writer: ThreadPoolExecutor, stream: TokenStream | None, base: float, ttl: int
    ) -> None:
        self._writer = writer
        self._stream = stream
        self._base = base
        self._ttl = ttl
        self._open: list[_Streamer] = []
        self._lock = threading.Lock()
        self._ticking = False
        self._again = False
        self._unstarted = 0  # open streams whose first chunk is not written
        self._next_due = math.inf  # monotonic: when an open stream's interval ends
        self._write_seconds = 0.0  # the last tick's write

    def open(self, streamer: _Streamer) -> None:
        """A stream to write from its next decode step on (main thread)."""
        if streamer.last_written:
            return
        with self._lock:
            self._open.append(streamer)
            self._unstarted += 1

    def stepped(self, ended: bool) -> None:
        """After a decode step (main thread): a tick if one is due."""
        with self._lock:
            if not self._open:
                return
            if not (ended or self._unstarted or time.monotonic() >= self._next_due):
                return
            if self._ticking:
                self._again = True
                return
            self._ticking = True
        self._writer.submit(self._tick)

    def _tick(self) -> None:
        try:
            self._ticks()
        except Exception:  # noqa: BLE001 - the next decode step asks for a tick again
            log.exception("stream writer tick failed")
            with self._lock:
                self._ticking = False

    def _ticks(self) -> None:
        """Ticks, until none was asked for while the last one ran."""
        while True:
            with self._lock:
                streams = list(self._open)
            now = time.monotonic()
            interval = flush_interval(self._base, len(streams), self._write_seconds)
            due = [(s, c) for s in streams if not s.disowned and (c := s.due(now, interval))]
            if due:
                self._write(due, now)
            with self._lock:
                ended = self._close_ended()
                flushed = [s.flushed_at for s in self._open if s.flushed_at is not None]
                self._unstarted = len(self._open) - len(flushed)
                self._next_due = min(flushed, default=math.inf) + interval
                again, self._again = self._again, False
                if not again:
                    self._ticking = False
            for streamer in ended:
                streamer.finished()
            if not again:
                return

    def _write(self, due: list[tuple[_Streamer, Chunk]], now: float) -> None:
        """Each due chunk, once; a place another worker wrote first means it holds
        the request too: this one writes that stream no more."""
        assert self._stream is not None
        expires_at = int(time.time() + self._ttl)
        writes = [ChunkWrite(s.message.tenant, s.message.request_id, c, expires_at) for s, c in due]
        began = time.perf_counter()
        try:
            written = self._stream.put_many(writes)
        except Exception:  # noqa: BLE001 - the readers fall back to the results' text
            log.exception("stream chunk writes failed", extra={"chunks": len(writes)})
            written = [True] * len(writes)  # lost, not another worker's: go on after them
        self._write_seconds = time.perf_counter() - began
        for (streamer, chunk), ok in zip(due, written, strict=True):
            streamer.written, streamer.flushed_at = chunk.end, now
            if not ok:
                streamer.disowned = True
                log.warning(
                    "stream written by another worker",
                    extra={"request_id": streamer.message.request_id},
                )
            if chunk.finish_reason is not None:
                streamer.finished()

    def _close_ended(self) -> list[_Streamer]:
        """Streams whose last chunk is written, or that are written no more, leave;
        those of the second kind whose generation ended, to be finished (their
        results are stored all the same)."""
        still, ended = [], []
        for streamer in self._open:
            if not (streamer.disowned or streamer.last_written):
                still.append(streamer)
            elif not streamer.last_written and streamer.sequence.done:
                ended.append(streamer)
        self._open = still
        return ended
