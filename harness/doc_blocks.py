"""The console blocks of the docs that are marked runnable, run as a reader runs them.

A block is marked by its fence: ```` ```console runnable ```` (renderers take the
first word for the language and ignore the rest). Its commands are its lines that
start with ``$ `` (a line ending in ``\\`` goes on to the next); other lines show
what the command prints and are not run. A page's blocks run in order in one bash
session, so a variable set in one block is there in the next, with
``set -euo pipefail``: a command that fails fails the page, named by the block's
line. The docs speak of the local platform at ``127.0.0.1:8080``; a test's platform
listens elsewhere, so that address is given the test's port.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

FENCE = re.compile(r"^```console\s+runnable\s*$")
DOCS_ADDRESS = re.compile(r"(127\.0\.0\.1|localhost):8080\b")
_MARK = "::block-at-line "


@dataclass(frozen=True)
class Block:
    """One runnable block: the line of its fence on its page, and its commands."""

    page: Path
    line: int
    commands: tuple[str, ...]


def runnable_blocks(page: Path) -> list[Block]:
    """The runnable console blocks of ``page``, in order."""
    blocks: list[Block] = []
    lines = page.read_text().splitlines()
    i = 0
    while i < len(lines):
        if not FENCE.match(lines[i].strip()):
            i += 1
            continue
        start, commands, i = i + 1, [], i + 1
        while i < len(lines) and not lines[i].strip().startswith("```"):
            text = lines[i].strip()
            if text.startswith("$ "):
                command = text[2:]
                while command.endswith("\\") and i + 1 < len(lines):
                    i += 1
                    command = command[:-1] + " " + lines[i].strip()
                commands.append(command)
            i += 1
        if not commands:
            raise ValueError(f"{page}:{start}: a runnable block with no `$ ` command")
        blocks.append(Block(page, start, tuple(commands)))
        i += 1
    return blocks


@dataclass
class PageRun:
    """What running a page's blocks printed, block by block (by starting line)."""

    output: dict[int, str]


def run_page(
    page: Path,
    env: Mapping[str, str],
    cwd: Path,
    port: int | None = None,
    timeout_s: float = 600,
) -> PageRun:
    """Run every runnable block of ``page`` in one bash session from ``cwd`` with
    ``env`` over this process's environment (``port``: the local platform's, in
    place of the docs' 8080). Raises AssertionError naming the block that failed,
    with what it printed."""
    blocks = runnable_blocks(page)
    script = ["set -euo pipefail"]
    for block in blocks:
        script.append(f"echo '{_MARK}{block.line}'")
        for command in block.commands:
            if port is not None:
                command = DOCS_ADDRESS.sub(rf"\g<1>:{port}", command)
            script.append(command)
    done = subprocess.run(
        ["bash", "-c", "\n".join(script)],
        cwd=cwd,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    output: dict[int, str] = {}
    current: int | None = None
    for text in done.stdout.splitlines():
        if text.startswith(_MARK):
            current = int(text[len(_MARK) :])
            output[current] = ""
        elif current is not None:
            output[current] += text + "\n"
    if done.returncode != 0:
        failed = current if current is not None else blocks[0].line
        raise AssertionError(
            f"{page.name}:{failed}: a command of this block failed "
            f"(exit {done.returncode}):\n{output.get(failed, '')}{done.stderr[-3000:]}"
        )
    return PageRun(output)
