"""Calls that threads of one process make at once, made as one.

A router process serves many requests at once (the local platform's; a Lambda
instance serves one at a time), and its requests arrive and end in groups: a
worker's batch answers several callers together, and they send their next requests
together. What each would write alone (a slot taken or given back, a place in
queued work, a message sent) is then written for the group in one call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class Together:
    """Items that threads of one process hand to ``write`` at once, written together:
    the first caller writes its item; callers that come while a write is out wait
    for it, and the first of them then writes all of theirs in one call. Each call
    returns its own item's answer once it is written (``write`` answers a list, one
    per item, or None), or raises what the write raised, as if it had written it
    alone; nobody waits for a timer, and a caller alone (a Lambda instance serves
    one request at a time) writes at once, on its own thread.

    Its slots and places (``switchyard.admission``) and its messages
    (``switchyard.queues``) are written so."""

    def __init__(self, write: Callable[[list[Any]], list[Any] | None]) -> None:
        self._write = write
        self._changed = threading.Condition()
        self._waiting: list[_Handed] = []
        self._writing = False

    def __call__(self, item: Any) -> Any:
        handed = _Handed(item)
        with self._changed:
            self._waiting.append(handed)
            while self._writing and not handed.written:
                self._changed.wait()
            batch = None
            if not handed.written:  # no write out: this caller writes what waits
                self._writing = True
                batch, self._waiting = self._waiting, []
        if batch is not None:
            self._write_out(batch)
        if handed.failed is not None:
            raise handed.failed
        return handed.answer

    def _write_out(self, batch: list[_Handed]) -> None:
        failed: Exception | None = None
        answers: list[Any] | None = None
        try:
            answers = self._write([h.item for h in batch])
        except Exception as exc:  # noqa: BLE001 - raised by each caller whose item it held
            failed = exc
        finally:  # whatever ended the write, the next may begin
            with self._changed:
                for i, h in enumerate(batch):
                    h.answer = answers[i] if answers is not None else None
                    h.failed, h.written = failed, True
                self._writing = False
                self._changed.notify_all()


class _Handed:
    __slots__ = ("item", "written", "failed", "answer")

    def __init__(self, item: Any) -> None:
        self.item = item
        self.written = False
        self.failed: Exception | None = None
        self.answer: Any = None
