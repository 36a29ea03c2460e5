"""What a deployable reads from its environment at cold start, for tests of the
``SWITCHYARD_*`` contract."""

from __future__ import annotations

import os

import pytest

from switchyard.settings import ENV_PREFIX, S, get_settings


def read_settings(kind: type[S], env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> S:
    """``kind`` as a process whose environment holds exactly ``env`` (of the
    platform's variables) reads it, or the error it stops with."""
    for key in list(os.environ):
        if key.startswith(ENV_PREFIX):
            monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    get_settings.cache_clear()
    try:
        return get_settings(kind)
    finally:
        get_settings.cache_clear()
