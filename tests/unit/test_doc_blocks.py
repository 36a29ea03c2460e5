"""The runner of the docs' runnable console blocks (``harness.doc_blocks``)."""

from __future__ import annotations

import pytest

from harness.doc_blocks import run_page, runnable_blocks

PAGE = """# A page

```console runnable
$ GREETING=hello
$ echo "$GREETING" \\
    world
hello world
```

Not run:

```console
$ exit 3
```

```console runnable
$ echo "$GREETING again at http://127.0.0.1:8080/v1"
```
"""


def test_blocks_are_read_with_their_lines_and_continuations(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    blocks = runnable_blocks(page)
    assert [(b.line, b.commands) for b in blocks] == [
        (3, ("GREETING=hello", 'echo "$GREETING"  world')),
        (16, ('echo "$GREETING again at http://127.0.0.1:8080/v1"',)),
    ]


def test_a_page_runs_in_one_session_with_the_platforms_port(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    ran = run_page(page, {}, tmp_path, port=18123)
    assert ran.output == {3: "hello world\n", 16: "hello again at http://127.0.0.1:18123/v1\n"}


def test_a_failing_command_names_its_block(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(PAGE + "\n```console runnable\n$ echo before\n$ false\n$ echo after\n```\n")
    with pytest.raises(AssertionError, match=r"page.md:20: .*\(exit 1\):\nbefore\n"):
        run_page(page, {}, tmp_path)


def test_a_runnable_block_without_a_command_is_a_mistake_in_the_page(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```console runnable\nonly output\n```\n")
    with pytest.raises(ValueError, match="no `\\$ ` command"):
        runnable_blocks(page)
