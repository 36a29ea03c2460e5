"""The devices a test of a model runtime runs on: the CPU everywhere, and CUDA where
torch sees a GPU. Elsewhere the CUDA case is skipped, with its reason, unless
``SWITCHYARD_TEST_CUDA=1`` (``make test-gpu``): then it runs, and fails where there
is no GPU, so a GPU host's run cannot pass by skipping."""

from __future__ import annotations

import os

import pytest

from switchyard_worker.runtimes import choose_device

DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=pytest.mark.skipif(
            not os.environ.get("SWITCHYARD_TEST_CUDA") and choose_device() != "cuda",
            reason="no CUDA device visible to torch",
        ),
    ),
]
