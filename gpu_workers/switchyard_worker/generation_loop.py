"""A generative model's worker loop: continuous batching, tokens streamed back.

A receiver thread long-polls while the running batch has room, and the main loop
lets arrivals join between decode steps. A streamed request's tokens are written as
chunks (``switchyard.generation``) as they come, the first at once and then at most
every ``stream_flush_seconds``, on their own thread and in order, the last one before
the result. A redelivered streamed request continues from the tokens its chunks
hold. Its messages are held with a short visibility (``generation_visibility_seconds``,
extended while they run), so a request whose worker died is taken up again within
seconds. Decoding, triage, results and deletes are the stages it shares with the
micro-batch loop (``micro_batch_loop``).
"""

from __future__ import annotations

import functools
import queue as stdlib_queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from switchyard.generation import Chunk, TokenStream, as_request, over_context, tokens_written
from switchyard.schemas import ErrorInfo, GenerationSignature, QueueMessage
from switchyard_worker.batching import Pending
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
        self.stream_flush = stream_flush_seconds
        self._result_ttl = result_ttl_seconds
        self._batches: dict[str, Continuous] = {}
        self.arrivals: stdlib_queue.Queue[Pending] = stdlib_queue.Queue()
        self._generating: dict[str, _Generating] = {}
        self._looked_at_records = time.monotonic()
        # One write in flight per stream (so each stream's chunks land in order), up
        # to this many streams' writes at once.
        self.stream_writer = ThreadPoolExecutor(max_workers=4, thread_name_prefix="stream-writer")
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
            for pending in self._intake.keep(received):
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
        if self._generating and time.monotonic() - self._looked_at_records >= _LOOK_AT_RECORDS_S:
            self._stop_what_ended_elsewhere()
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
                streamer = _Streamer(self, m, sequence)
                sequence.on_token = streamer.on_token
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

    def _stop_what_ended_elsewhere(self) -> None:
        """Stop the requests whose record has ended while they generate: cancelled
        (``DELETE /v1/requests/{id}``, or a streamed caller who went away) or
        expired. Their sequences leave the running batch, their streams are written
        no more, and their messages are deleted: the record keeps its ending."""
        self._looked_at_records = time.monotonic()
        works = list(self._generating.values())
        try:
            self._intake.read_statuses([w.pending for w in works])
        except Exception:  # noqa: BLE001 - they run on; the next look tries again
            log.exception("reading running requests' records failed")
            return
        for work in works:
            status = work.pending.status
            if status in (None, "queued"):
                continue
            m = work.pending.message
            assert m is not None
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
        if failed:
            self._metrics.emit(version, item_errors=len(failed))
            self._finisher.failed(failed, reason)

    def write_chunk(self, m: QueueMessage, chunk: Chunk, streamer: _Streamer) -> None:
        """On the stream writer: one chunk, once. Another worker's chunk at the same
        place means it holds the request too: this one stops writing its stream."""
        assert self._stream is not None
        if streamer.disowned:
            return
        try:
            if not self._stream.put(
                m.tenant, m.request_id, chunk, int(time.time() + self._result_ttl)
            ):
                streamer.disowned = True
                log.warning("stream written by another worker", extra={"request_id": m.request_id})
        except Exception:  # noqa: BLE001 - the reader falls back to the result's text
            log.exception("stream chunk write failed", extra={"request_id": m.request_id})


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
    """Gathers a streamed sequence's tokens into chunks and writes them, in order,
    with at most one write of its own in flight: the first token at once (the
    caller's time to first token), then what has gathered when the last write is
    done and ``stream_flush_seconds`` have passed, and the last chunk with how the
    generation ended. When writes are slower than tokens come (many streams, a busy
    table), chunks grow rather than queue. ``after_last`` runs once the last chunk
    is written (or cannot be): the request's result is stored then."""

    def __init__(self, loop: GenerationLoop, message: QueueMessage, sequence: Sequence) -> None:
        self._loop = loop
        self._message = message
        self._start = len(sequence.ids)  # tokens before it are written already
        self._ids: list[int] = []
        self._pieces: list[str] = []
        self._ending: dict[str, Any] | None = None
        self._flushed_at = 0.0
        self._writing = False
        self._last_written = sequence.done  # resumed after its end: nothing to write
        self._then: Callable[[], None] | None = None
        self._lock = threading.Lock()
        self.disowned = False

    def on_token(self, sequence: Sequence, index: int, token: int, piece: str) -> None:
        with self._lock:
            self._ids.append(token)
            self._pieces.append(piece)
            if sequence.done:
                output = sequence.output()
                self._ending = {"finish_reason": output["finish_reason"], "usage": output["usage"]}
            if self._writing or not self._due():
                return
            self._writing = True
        self._loop.stream_writer.submit(self._write)

    def after_last(self, then: Callable[[], None]) -> None:
        with self._lock:
            if not self._last_written:
                self._then = then
                return
        then()

    def _due(self) -> bool:
        first = self._flushed_at == 0.0
        waited = time.monotonic() - self._flushed_at >= self._loop.stream_flush
        return bool(self._ids) and (first or waited or self._ending is not None)

    def _write(self) -> None:
        """On a stream writer thread: write what has gathered, then again while more
        is due; the last chunk runs ``after_last``'s callback."""
        while True:
            with self._lock:
                if not self._ids or self.disowned:
                    self._writing = False
                    last = self.disowned and self._ending is not None
                    break
                chunk = Chunk(start=self._start, ids=self._ids, pieces=self._pieces)
                last = self._ending is not None
                if last:
                    chunk.finish_reason = self._ending["finish_reason"]
                    chunk.usage = self._ending["usage"]
                self._start += len(self._ids)
                self._ids, self._pieces = [], []
                self._flushed_at = time.monotonic()
            self._loop.write_chunk(self._message, chunk, self)
            if last:
                with self._lock:
                    self._writing = False
                break
            with self._lock:
                if not self._due():
                    self._writing = False
                    last = False
                    break
        if last:
            self._finished()

    def _finished(self) -> None:
        with self._lock:
            self._last_written = True
            then, self._then = self._then, None
        if then is not None:
            then()
