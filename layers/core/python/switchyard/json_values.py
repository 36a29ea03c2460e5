"""JSON's values as JSON Schema reads them, for the models that read request bodies
(``switchyard.bodies``, ``switchyard.generation``): an integer is any number with no
fraction (``1.0`` is one), and ``0`` equals ``0.0`` but no boolean. What the API
document allows, a body's model takes."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator


def _whole(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def whole(*bounds: Any) -> Any:
    """An integer within ``bounds`` (``annotated_types``' ``Ge``, ``Le``, ``Lt``),
    taken from a JSON number with no fraction too."""
    return Annotated[int, *bounds, BeforeValidator(_whole)]


def same_json(a: Any, b: Any) -> bool:
    """Equal as JSON values are: 0 is 0.0, but false is no 0."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b
