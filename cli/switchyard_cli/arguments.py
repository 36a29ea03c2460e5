"""Argument types of the operator's command line: numbers in a range, said in words
when they are not (``'-1' is not a whole number >= 1``)."""

from __future__ import annotations

import argparse
from typing import Any


def count(variable: str | None = None, minimum: int = 0, maximum: int | None = None) -> Any:
    """An argparse type for a whole number from ``minimum`` to ``maximum``, which may
    come from the environment's ``variable``."""
    bounds = f">= {minimum}" if maximum is None else f"from {minimum} to {maximum}"
    source = f" (the option, or {variable})" if variable else ""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum or (maximum is not None and value > maximum):
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number {bounds}{source}")
        return value

    return parse


def seconds(variable: str | None = None, positive: bool = False) -> Any:
    """An argparse type for seconds (>= 0, or > 0 if ``positive``) that may come from
    the environment's ``variable``."""
    bounds = "> 0" if positive else ">= 0"
    source = f" (the option, or {variable})" if variable else ""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = -1.0
        if not 0 <= value < float("inf") or (positive and value == 0):
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a number of seconds {bounds}{source}"
            )
        return value

    return parse


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400}


def duration(text: str) -> float:
    """An argparse type for a span of time: a whole number and a unit (``90s``,
    ``30m``, ``1h``, ``7d``), in seconds."""
    number, unit = text[:-1], text[-1:]
    if unit not in _UNITS or not number.isdigit() or int(number) == 0:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a span of time: a whole number > 0 and s, m, h or d (e.g. 1h)"
        )
    return float(int(number) * _UNITS[unit])
