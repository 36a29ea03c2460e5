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
