"""A request's faults, each named by its field as the caller wrote it
(``inputs[3][12]``, ``messages[1].content``): what every validation in the
platform answers with, so a 422 names fields the same way on every route."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class FieldError:
    """A problem with one part of a request, named by its path (``inputs[3][12]``)."""

    field: str
    message: str


def field_path(loc: Iterable[str | int], base: str = "") -> str:
    """A validation error's location as the caller wrote it: ``stop[0]``,
    ``messages[1].content``, after ``base`` (a field of its own)."""
    path = base
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path
