"""The JSON text the platform writes in volume: stored outputs, payloads, job
output files and the router's answers; and the JSON its clients send (request
bodies, the lines of a dropped file), read with one parser.

Written by pydantic-core, which every part of the platform loads already: the float
lists models return (an embedding's 384 values) are written about ten times faster
than with the json module, and read back as the same numbers. Text that is signed
or used as a key (callbacks, the result cache) keeps the json module's exact form.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pydantic_core


def json_bytes(value: Any, *, nan_as_null: bool = False) -> bytes:
    """``value`` as compact UTF-8 JSON. A float that is not a number is written as
    the json module writes it (``NaN``, ``Infinity``, which it also reads), or as
    ``null`` with ``nan_as_null``, for answers that strict JSON readers take."""
    return pydantic_core.to_json(value, inf_nan_mode="null" if nan_as_null else "constants")


def parse_json(text: bytes | str) -> Any:
    """A client's JSON document (a request's body, a line of a dropped file), read by
    pydantic-core. It refuses, with a ValueError that says where, what the json module
    let through to fail later: a string with a lone surrogate escape (``"\\ud800"``,
    which no UTF-8 text can hold, so writing it back failed: a 500), and nesting deeper
    than 200 levels (the json module raised RecursionError past ~1,000). It reads
    ``NaN`` and ``Infinity`` as the json module does; the signatures refuse them."""
    return pydantic_core.from_json(text)


def written_once(values: Sequence[Any], write: Callable[[Any], Any]) -> list[Any]:
    """Each of ``values`` written by ``write`` (None stays None), a value that several
    of them are (the same object) written once: a batch's answers that cost the same
    hold one cost (``switchyard.costs.price_answers``)."""
    written: dict[int, Any] = {}
    out: list[Any] = []
    for value in values:
        if value is None:
            out.append(None)
            continue
        text = written.get(id(value))
        if text is None:
            written[id(value)] = text = write(value)
        out.append(text)
    return out
