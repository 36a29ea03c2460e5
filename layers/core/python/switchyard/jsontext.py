"""The JSON text the platform writes in volume: stored outputs, payloads, job
output files and the router's answers.

Written by pydantic-core, which every part of the platform loads already: the float
lists models return (an embedding's 384 values) are written about ten times faster
than with the json module, and read back as the same numbers. Text that is signed
or used as a key (callbacks, the result cache) keeps the json module's exact form.
"""

from __future__ import annotations

from typing import Any

import pydantic_core


def json_bytes(value: Any, *, nan_as_null: bool = False) -> bytes:
    """``value`` as compact UTF-8 JSON. A float that is not a number is written as
    the json module writes it (``NaN``, ``Infinity``, which it also reads), or as
    ``null`` with ``nan_as_null``, for answers that strict JSON readers take."""
    return pydantic_core.to_json(value, inf_nan_mode="null" if nan_as_null else "constants")
