"""The splitter's line reader: a file in byte ranges, never whole, every line with
the offset just past it (where a later invocation goes on from)."""

from __future__ import annotations

import io

import pytest

from switchyard_batch import splitter
from switchyard_batch.splitter import lines_from


class RangedObject:
    """An object that answers ranged GETs and counts the bytes it handed out."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.ranges: list[tuple[int, int]] = []

    def get_object(self, Bucket: str, Key: str, Range: str, IfMatch: str) -> dict:  # noqa: N803
        first, last = (int(x) for x in Range.removeprefix("bytes=").split("-"))
        self.ranges.append((first, last))
        return {"Body": io.BytesIO(self.data[first : last + 1])}


def read(data: bytes, start: int = 0, slice_bytes: int = 4) -> tuple[list, RangedObject]:
    s3 = RangedObject(data)
    return list(lines_from(s3, "b", "k", "etag", start, len(data), slice_bytes)), s3


def test_lines_cross_slices_and_each_ends_at_its_offset() -> None:
    data = b'"one"\n"two three"\n\n"four"'
    lines, s3 = read(data)
    assert [(line, end) for line, end, _ in lines] == [
        (b'"one"', 6),
        (b'"two three"', 18),
        (b"", 19),
        (b'"four"', 25),  # the last line needs no newline
    ]
    assert max(last - first + 1 for first, last in s3.ranges) == 4  # never more at once
    assert s3.ranges[0] == (0, 3) and s3.ranges[-1][1] == len(data) - 1


def test_reading_from_a_recorded_offset_gives_the_rest() -> None:
    data = b'"one"\n"two"\n"three"\n'
    lines, _ = read(data, start=6)
    assert [line for line, _, _ in lines] == [b'"two"', b'"three"']


def test_a_line_longer_than_the_limit_is_none_and_never_held(monkeypatch) -> None:
    monkeypatch.setattr(splitter, "MAX_LINE_BYTES", 8)
    data = b'"ok"\n"' + b"x" * 40 + b'"\n"after"\n"' + b"y" * 20
    lines, _ = read(data, slice_bytes=5)
    assert [line for line, _, _ in lines] == [b'"ok"', None, b'"after"', None]
    assert [end for _, end, _ in lines] == [5, 48, 56, len(data)]


@pytest.mark.parametrize("slice_bytes", [1, 3, 7, 100])
def test_the_slice_size_changes_nothing_but_the_reads(slice_bytes: int) -> None:
    data = b"\n".join(b'"line %d"' % i for i in range(30)) + b"\n"
    lines, s3 = read(data, slice_bytes=slice_bytes)
    assert [line for line, _, _ in lines] == data.split(b"\n")[:-1]
    assert len(s3.ranges) == -(-len(data) // slice_bytes)
