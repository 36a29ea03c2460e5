"""The docs' runnable console blocks (```` ```console runnable ````), run as a reader
runs them, against the tier's platform: the README's and every how-to page's, one
bash session per page (``harness.doc_blocks``), with ``switchyard`` on the ``PATH``
and pointed at that platform, as a reader's shell is at theirs. A snippet that no
longer works fails here, named by its page and line.

docs/your-model.md is run by tests/e2e/test_your_model.py, on a platform of its own
that serves the model the page builds."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from harness.doc_blocks import run_page, runnable_blocks
from harness.local_platform import LOCAL_CREDENTIALS, ROOT

RUN_ELSEWHERE = {"your-model.md"}
PAGES = [
    page
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    if page.name not in RUN_ELSEWHERE and runnable_blocks(page)
]
# What a page's blocks must print, beyond succeeding: the answers they are there for.
PRINTS = {
    "README.md": ('"model":"minilm-embed"', '"model":"digits-cnn"', 'data: {"done":true'),
    "generation.md": ('data: {"token":', 'data: {"done":true'),
    "batch-jobs.md": ("succeeded", '"job_id"'),
    "troubleshooting.md": ('"code": "unauthorized"} 401', '"code": "forbidden"} 403'),
}


def test_the_pages_with_steps_to_run_are_marked():
    marked = {"README.md", "generation.md", "batch-jobs.md", "troubleshooting.md"}
    assert marked <= {page.name for page in PAGES}


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_a_pages_runnable_blocks_run_against_the_platform(platform, page, tmp_path):
    # GIVEN a shell as a reader's: `switchyard` on its PATH, aimed at this platform
    env = {
        **LOCAL_CREDENTIALS,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "SWITCHYARD_RUN_DIR": str(platform.run_dir),
        "SWITCHYARD_MANIFEST": str(platform.run_dir / "manifest.toml"),
    }
    # WHEN the page's blocks run in order, in one session (files they write land in
    # a folder of their own)
    ran = run_page(page, env, tmp_path, port=urlsplit(platform.url).port, timeout_s=300)
    # THEN every command succeeded, and the blocks printed what they are there for
    printed = "".join(ran.output.values())
    for line, output in ran.output.items():
        print(f"--- {page.name}:{line}\n{output}")
    for expected in PRINTS.get(page.name, ()):
        assert expected in printed, f"{page.name}: no {expected!r} in what it printed"
