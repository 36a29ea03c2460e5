"""The demo generation model's prompts: docstring openings as `pydoc-gpt` was trained
on, the same for the generation bench and the tests that compare its engines."""

from __future__ import annotations

PROMPTS = (
    "Return the",
    "Create a new",
    "Raise an exception if",
    "Open the file and",
    "Convert a string to",
    "This module provides",
    "If the argument is",
    "Read data from the",
)
