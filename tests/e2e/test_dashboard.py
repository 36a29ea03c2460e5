"""The local dashboard in a browser: headless Chromium (Debian's, installed when
missing) opens the page `switchyard up` serves, sees a panel per model with its
figures filled in, then sees a burst of async requests move the queue-depth chart;
and `switchyard status --json` says the same as the page's data."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from harness import waiting
from tests.e2e.accounting import SENTENCES, wait_all_done
from tests.e2e.chromium import Browser, Page, ensure_chromium
from tests.e2e.test_rollouts import cli

MODEL = "minilm-embed"
DASHBOARD = re.compile(r"^DASHBOARD (http://127\.0\.0\.1:\d+/)$")

# What the page shows, read from its DOM: each panel's figures and, per chart, the
# largest value drawn and the number of points of each series.
PAGE_SUMMARY = """(() => {
  const out = { polls: Number((document.body && document.body.dataset.polls) || 0),
                errors: window.dashboardErrors, models: {} };
  if (!document.body) return out;  // the page is still loading
  for (const s of document.querySelectorAll("section.model")) {
    const field = (k) => {
      const n = s.querySelector(`[data-field="${k}"]`);
      return n ? n.textContent : null;
    };
    const chart = (k) => {
      const svg = s.querySelector(`svg[data-chart="${k}"]`);
      const series = {};
      for (const line of svg.querySelectorAll("polyline")) {
        series[line.dataset.series] = { points: Number(line.dataset.points),
          max: Number(line.dataset.max), last: line.dataset.last,
          values: line.dataset.values.split(" ").map(Number),
          drawn: line.getAttribute("points") };
      }
      return { max: Number(svg.dataset.max), points: Number(svg.dataset.points),
               times: svg.dataset.times.split(" ").map(Number), series };
    };
    out.models[s.dataset.model] = {
      running: field("workers.running"), starting: field("workers.starting"),
      desired: field("workers.desired"), visible: field("lanes.realtime.visible"),
      in_flight: field("lanes.realtime.in_flight"),
      oldest: field("lanes.realtime.oldest_age_seconds"),
      per_second: field("requests.per_second"), p50: field("requests.p50_ms"),
      routing: s.querySelector('[data-block="routing"]').textContent,
      rollbacks: s.querySelector('[data-block="rollbacks"]').textContent,
      depth: chart("depth"), age: chart("age"), workers: chart("workers"),
    };
  }
  return out;
})()"""


@pytest.fixture(scope="module")
def dashboard_url(platform) -> str:
    def printed() -> str | None:
        for line in platform.output:
            if match := DASHBOARD.match(line.strip()):
                return match.group(1)
        return None

    return waiting.wait_for(
        printed, timeout_s=30, every_s=0.2, what="switchyard up printed no DASHBOARD line"
    )


@pytest.fixture(scope="module")
def page(dashboard_url, tmp_path_factory):
    folder = tmp_path_factory.mktemp("chromium")
    with Browser(ensure_chromium(), folder / "profile", folder / "chromium.log") as browser:
        yield browser.open(dashboard_url)


def wait_for(page: Page, ok: Callable[[dict[str, Any]], bool], timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        summary = page.evaluate(PAGE_SUMMARY)
        if ok(summary):
            return summary
        assert time.monotonic() < deadline, f"the page never got there: {summary}"
        time.sleep(0.5)


def number(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def test_the_page_shows_every_model_and_a_burst_moves_its_charts(platform, page):
    models = set(platform.info["queues"])
    platform.wait_until_idle(MODEL)
    # A few answers from the router, whose request figures the page shows too (async
    # submissions are queue work: they count there, not as answered requests).
    with httpx.Client(base_url=platform.url, timeout=60) as client:
        for _ in range(3):
            answered = client.post(
                f"/v1/models/{MODEL}/predict",
                json={"inputs": ["a request answered while the caller waits"]},
                headers={"x-api-key": platform.api_key},
            )
            assert answered.status_code == 200, answered.text

    # GIVEN the page open in headless Chromium: a panel per model, numbers filled in,
    # the model's queue drawn empty
    def rendered(s: dict[str, Any]) -> bool:
        return (
            set(s["models"]) == models
            and all(
                number(m["running"]) is not None
                and number(m["visible"]) is not None
                and m["depth"]["points"] >= 2
                for m in s["models"].values()
            )
            and s["models"][MODEL]["depth"]["series"]["realtime"]["last"] == "0"
            and (number(s["models"][MODEL]["per_second"]) or 0) > 0
        )

    before = wait_for(page, rendered, timeout=30)
    assert before["errors"] == []
    for figures in before["models"].values():
        assert number(figures["desired"]) is not None  # the supervisor's, not observed
        assert figures["routing"] and figures["rollbacks"]
    assert (number(before["models"][MODEL]["p50"]) or 0) > 0
    quiet = before["models"][MODEL]["depth"]
    since = quiet["times"][-1]

    # WHEN a burst of async requests arrives (more work than a worker does while
    # they are sent)
    burst = submit_burst(platform, 100)

    # THEN the page's queue-depth series rises from zero after that point
    def peak_since(s: dict[str, Any]) -> float:
        depth = s["models"][MODEL]["depth"]
        values = depth["series"]["realtime"]["values"]
        return max((v for t, v in zip(depth["times"], values, strict=True) if t > since), default=0)

    busy = wait_for(page, lambda s: peak_since(s) > 0, timeout=30)
    depth = busy["models"][MODEL]["depth"]
    assert depth["series"]["realtime"]["drawn"] != quiet["series"]["realtime"]["drawn"]
    assert depth["max"] >= peak_since(busy) > 0
    assert busy["polls"] > before["polls"] and busy["errors"] == []

    # and once the burst has drained, back to zero, the peak still drawn
    wait_all_done(platform, burst, timeout=120)
    platform.wait_until_idle(MODEL, timeout_s=60)
    after = wait_for(
        page,
        lambda s: s["models"][MODEL]["depth"]["series"]["realtime"]["last"] == "0",
        timeout=15,
    )
    assert after["models"][MODEL]["depth"]["max"] >= peak_since(busy)
    assert after["models"][MODEL]["workers"]["series"]["running"]["max"] >= 1
    assert after["errors"] == []


def submit_burst(platform, count: int) -> list[str]:
    """``count`` async requests of 16 sentences each, eight at a time."""
    headers = {"x-api-key": platform.api_key}

    def one(_: int) -> str:
        with httpx.Client(base_url=platform.url, timeout=30) as client:
            response = client.post(
                f"/v1/models/{MODEL}/predict?async=true",
                json={"inputs": SENTENCES},
                headers=headers,
            )
            assert response.status_code == 202, response.text
            return str(response.json()["request_id"])

    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(one, range(count)))


def test_status_json_has_the_shape_the_page_reads(platform, dashboard_url):
    # WHEN an operator asks for the status, and the page for its data
    status = json.loads(cli(platform, "status", "--json").stdout)
    page_data = httpx.get(f"{dashboard_url}api/status", timeout=10).json()

    # THEN both have, per model, workers, both lanes and the last decision
    for doc in (status, page_data):
        assert set(doc["models"]) == set(platform.info["queues"])
        for figures in doc["models"].values():
            assert set(figures["workers"]) >= {"running", "starting", "desired"}
            assert set(figures["lanes"]) == {"realtime", "batch"}
            for lane in figures["lanes"].values():
                assert set(lane) >= {"visible", "in_flight", "oldest_age_seconds"}
            assert figures["last_decision"]["reason"]
            assert set(figures["requests"]) >= {"per_second", "p50_ms", "p99_ms"}
    assert all("history" in m and "routing" in m for m in page_data["models"].values())


def test_the_dashboard_answers_loopback_names_only(dashboard_url):
    page_html = httpx.get(dashboard_url, timeout=10)
    assert page_html.status_code == 200 and '<main id="models">' in page_html.text
    refused = httpx.get(dashboard_url, headers={"Host": "evil.example"}, timeout=10)
    assert refused.status_code == 403


def test_the_dashboard_takes_get_and_head_and_names_them_to_other_methods(dashboard_url):
    head = httpx.head(f"{dashboard_url}api/status", timeout=10)
    got = httpx.get(f"{dashboard_url}api/status", timeout=10)
    assert head.status_code == 200 and head.content == b""
    assert head.headers["content-type"] == got.headers["content-type"] == "application/json"
    for method in ("POST", "PUT", "PATCH", "DELETE", "OPTIONS"):
        # 501 and an HTML page before
        refused = httpx.request(method, f"{dashboard_url}api/status", timeout=10)
        assert refused.status_code == 405, method
        assert refused.headers["allow"] == "GET, HEAD"
        assert refused.headers["content-type"] == "text/plain"
