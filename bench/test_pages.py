"""The pages under docs/ are what the templates make of the figures stored beside
them: re-rendered without a run, each comes out as committed."""

from __future__ import annotations

import json

from bench.common import ROOT
from bench.soak import markdown as soak_markdown

DOCS = ROOT / "docs"


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
