"""Calls that threads of one process make at once, made as one
(switchyard.together): each caller answered its own item's answer once it is
written, a caller alone writing at once on its own thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from switchyard.together import Together


class HeldWrite:
    """A write that holds its first call until released, recording every call."""

    def __init__(self, fail_after_first: bool = False) -> None:
        self.calls: list[list[int]] = []
        self.first_in = threading.Event()
        self.release = threading.Event()
        self._fail = fail_after_first

    def __call__(self, items: list[int]) -> None:
        self.calls.append(sorted(items))
        if len(self.calls) == 1:
            self.first_in.set()
            assert self.release.wait(10)
        elif self._fail:
            raise ConnectionError("DynamoDB is unreachable")


def while_one_is_out(
    together: Together,
    first: Callable[[], object],
    others: list[Callable[[], object]],
    out: threading.Event,
    release: threading.Event,
    before_release: Callable[[], object] = lambda: None,
) -> None:
    """``first`` run on a thread of its own until its write is out (``out`` set by
    the write, which then waits for ``release``); then each of ``others`` on one of
    its own, until all of them wait on ``together``; ``before_release`` called, the
    write released and every thread joined."""
    threads = [threading.Thread(target=first)]
    threads[0].start()
    assert out.wait(10)
    threads += [threading.Thread(target=other) for other in others]
    for thread in threads[1:]:
        thread.start()
    deadline = time.monotonic() + 10
    while len(together._waiting) < len(others) and time.monotonic() < deadline:
        time.sleep(0.001)
    before_release()
    release.set()
    for thread in threads:
        thread.join(10)


def callers_during_a_write(write: HeldWrite, n: int) -> tuple[list, list]:
    """Item 0 handed over, then ``n`` more while its write is out: what each call
    ended with (``(item, None)`` or ``(item, the error)``), in the order they ended,
    and what had ended when the first write was released."""
    together = Together(write)
    ended: list = []
    before: list = []

    def call(item: int) -> None:
        try:
            together(item)
            ended.append((item, None))
        except ConnectionError as exc:
            ended.append((item, exc))

    while_one_is_out(
        together,
        lambda: call(0),
        [lambda i=i: call(i) for i in range(1, n + 1)],
        write.first_in,
        write.release,
        lambda: before.extend(ended),
    )
    return ended, before


def test_items_handed_over_while_a_write_is_out_are_written_together_after_it():
    # GIVEN a slot's give-back being written, and five more handed over meanwhile
    write = HeldWrite()
    ended, before_release = callers_during_a_write(write, 5)
    # THEN none returned before the first write ended, and then the five were
    # written in one call, and every caller returned
    assert before_release == []
    assert write.calls == [[0], [1, 2, 3, 4, 5]]
    assert sorted(item for item, _ in ended) == [0, 1, 2, 3, 4, 5]
    assert ended[0] == (0, None)


def test_a_failed_write_is_raised_to_each_caller_whose_item_it_held():
    write = HeldWrite(fail_after_first=True)
    ended, _ = callers_during_a_write(write, 3)
    assert write.calls == [[0], [1, 2, 3]]
    failures = dict(ended)
    assert failures[0] is None
    assert all(isinstance(failures[i], ConnectionError) for i in (1, 2, 3))


def test_a_caller_alone_writes_its_item_at_once_on_its_own_thread():
    threads: list[str] = []
    together = Together(lambda items: threads.append(threading.current_thread().name))
    together("slot")
    assert threads == [threading.current_thread().name]
