"""The pages under docs/ are what the templates make of the figures stored beside
them: re-rendered without a run, each comes out as committed."""

from __future__ import annotations

import json
from pathlib import Path

from bench.plots import IMG
from bench.report import markdown
from bench.soak import markdown as soak_markdown

DOCS = Path(__file__).parent.parent / "docs"
SCREEN_LINES = 50
REASON_MAX_CHARS = 600


def test_the_benchmarks_page_renders_from_its_stored_figures():
    # GIVEN the figures of the last run, as benchmarks.json stores them
    results = json.loads((DOCS / "benchmarks.json").read_text())
    images = sorted(p.name for p in (DOCS / IMG).glob("*.png"))
    # WHEN the page is rendered from them, as `python -m bench.report` does
    page = markdown(results, images)
    # THEN it is the page committed beside them
    assert page == (DOCS / "benchmarks.md").read_text()


def test_the_benchmarks_page_opens_with_a_screen_of_summary_and_goals():
    # GIVEN the committed page
    lines = (DOCS / "benchmarks.md").read_text().splitlines()
    # WHEN its goals table is read
    start = lines.index("## Goals")
    first = next(i for i in range(start, len(lines)) if lines[i].startswith("|"))
    end = next(i for i in range(first, len(lines)) if not lines[i].startswith("|")) - 1
    table = lines[first : end + 1]
    # THEN the run, its machine, the summary and the goals fit on one screen
    assert "## Summary" in lines[:start]
    assert end < SCREEN_LINES
    assert lines[end + 2].startswith("## ")  # the detail follows
    # AND each goal's reason (its last cell) is short
    for row in table[2:]:
        reason = row.rstrip(" |").rsplit(" | ", 1)[-1]
        assert len(reason) <= REASON_MAX_CHARS, row[:80]


def test_the_soak_page_renders_from_its_stored_figures():
    # GIVEN the soak's figures as its last run stored them
    results = json.loads((DOCS / "soak.json").read_text())
    # WHEN its page is rendered from bench/templates/soak.md.j2
    page = soak_markdown(results)
    # THEN it is the page committed beside them
    assert page == (DOCS / "soak.md").read_text()


def test_a_failed_soak_names_its_first_lost_requests():
    # GIVEN a soak that lost two requests
    results = json.loads((DOCS / "soak.json").read_text())
    accounting = results["accounting"]
    accounting["passed"] = False
    accounting["problems"]["lost"] = 2
    accounting["examples"] = {"lost": [{"id": "r1"}, {"id": "r2", "kind": "async"}]}
    # WHEN its page is rendered
    page = soak_markdown(results)
    # THEN the verdict says so, and the examples follow the counts, one a line
    assert page.startswith("# Soak: 30 minutes of mixed load on the local platform\n\n**FAILED**")
    assert (
        'by how it ended: cancelled 192, done 2.\n\nFirst lost (of 2):\n\n- `{"id": "r1"}`\n'
        in page
    )
    assert '- `{"id": "r2", "kind": "async"}`\n\nThe workers\' logs: ' in page
    assert "The soak failed: 2 lost. The examples above name the requests." in page
