"""The canary rule (``switchyard.canary``): a canary judged against the stable
version over the same window, beyond the noise of small samples; and the document
a rollback leaves."""

from __future__ import annotations

import random

import pytest

from switchyard.canary import VersionStats, judge
from switchyard.manifest import RolloutLimits
from switchyard.routing import RoutingDocument, rolled_back

LIMITS = RolloutLimits(
    window_seconds=60,
    min_requests=20,
    max_error_rate=0.05,
    max_error_rate_over_stable=0.02,
    max_p99_ratio=2.0,
    noise_z=4.0,
    noise_min_count=5,
)


def stats(requests, errors, latency):
    return VersionStats(requests, errors, [latency] * requests)


CANARY = RoutingDocument(weights={"v1": 90, "v2": 10})


def test_a_canary_failing_where_stable_does_not_is_rolled_back():
    verdict = judge(CANARY, {"v1": stats(200, 0, 20), "v2": stats(25, 25, 20)}, LIMITS, 500)
    assert "error rate 100.0%" in verdict["v2"] and "stable's 0.0%" in verdict["v2"]


@pytest.mark.parametrize(
    ("stable_errors", "canary_errors", "rolled_back"),
    [
        (90, 10, False),  # both fail 10 %: the model fails, not the canary
        (180, 10, False),  # stable fails more
        (0, 4, False),  # 4 % against none: worse, but within the 5 % limit
        (9, 10, True),  # 10 % against 1 %: over the limit, and by the canary's doing
    ],
)
def test_an_error_rate_over_the_limit_counts_only_where_stable_is_better(
    stable_errors, canary_errors, rolled_back
):
    # GIVEN 900 stable and 100 canary requests in the window
    s = {"v1": stats(900, stable_errors, 20), "v2": stats(100, canary_errors, 20)}
    # WHEN the canary is judged
    verdict = judge(CANARY, s, LIMITS, 500)
    # THEN it is rolled back only when it fails more than stable by the margin
    assert ("v2" in verdict) is rolled_back


def test_an_error_excess_within_sampling_noise_is_not_rolled_back():
    # 3 of 30 against 6 of 270: 10 % against 2 %, but a small sample's luck
    assert judge(CANARY, {"v1": stats(270, 6, 20), "v2": stats(30, 3, 20)}, LIMITS, 500) == {}
    # the same rates over ten times the requests are no luck
    verdict = judge(CANARY, {"v1": stats(2700, 54, 20), "v2": stats(300, 30, 20)}, LIMITS, 500)
    assert "beyond noise" in verdict["v2"]


@pytest.mark.parametrize(
    ("stable_p99", "canary_p99", "rolled_back"),
    [
        (1380, 1404, False),  # the whole model is saturated: both over the SLO
        (400, 700, False),  # over the SLO, but within twice stable's p99
        (20, 50, False),  # 2.5 times stable's, but within the SLO
        (100, 600, True),  # over the SLO, and six times stable's
    ],
)
def test_a_p99_over_the_slo_counts_only_where_stable_is_much_faster(
    stable_p99, canary_p99, rolled_back
):
    s = {"v1": stats(200, 0, stable_p99), "v2": stats(30, 0, canary_p99)}
    verdict = judge(CANARY, s, LIMITS, 500)
    assert ("v2" in verdict) is rolled_back
    if rolled_back:
        assert "> SLO 500 ms and > 2 x stable's 100 ms" in verdict["v2"]


def test_without_a_stable_baseline_the_canary_is_judged_alone():
    # GIVEN a stable version with fewer requests than a judgement needs
    few = stats(LIMITS.min_requests - 1, 0, 2000)
    # WHEN the canary breaks an absolute limit THEN it is rolled back on it alone
    slow = judge(CANARY, {"v1": few, "v2": stats(100, 0, 900)}, LIMITS, 500)
    assert "SLO" in slow["v2"] and "too few" in slow["v2"]
    failing = judge(CANARY, {"v2": stats(100, 10, 20)}, LIMITS, 500)
    assert "error rate" in failing["v2"] and "too few" in failing["v2"]
    # but not within them
    assert judge(CANARY, {"v1": few, "v2": stats(100, 3, 300)}, LIMITS, 500) == {}


def saturated(rng, requests, error_rate, median_ms):
    """A window of a saturated version: latencies spread around a queue's wait."""
    latencies = [median_ms * rng.lognormvariate(0, 0.35) for _ in range(requests)]
    errors = sum(rng.random() < error_rate for _ in range(requests))
    return VersionStats(requests, errors, latencies)


def test_identical_versions_at_saturation_are_never_parted_by_noise():
    # GIVEN 300 windows of two identical versions at 90/10, both far over the SLO
    # and both failing 8 % of their requests
    rng = random.Random(1)
    windows = [
        {"v1": saturated(rng, 270, 0.08, 1400), "v2": saturated(rng, 30, 0.08, 1400)}
        for _ in range(300)
    ]
    # WHEN each is judged
    verdicts = [judge(CANARY, w, LIMITS, 500) for w in windows]
    # THEN none rolls the canary back
    assert [v for v in verdicts if v] == []
    # while a canary that fails 40 % against the same stable version is caught
    caught = sum(
        bool(judge(CANARY, {**w, "v2": saturated(rng, 100, 0.40, 1400)}, LIMITS, 500))
        for w in windows
    )
    assert caught >= 0.9 * len(windows)


def paused(rng, requests, median_ms, slow_share, slow_ms):
    """A window of a version under its SLO but for the requests a pause caught."""
    latencies = [
        slow_ms if rng.random() < slow_share else median_ms * rng.lognormvariate(0, 0.35)
        for _ in range(requests)
    ]
    return VersionStats(requests, 0, latencies)


def test_identical_versions_are_never_parted_by_one_slow_request():
    # GIVEN 300 windows of two identical versions at 90/10 well under the SLO, where
    # a pause makes one request in 200 take over a second
    rng = random.Random(2)
    windows = [
        {"v1": paused(rng, 450, 120, 0.005, 1160), "v2": paused(rng, 50, 120, 0.005, 1160)}
        for _ in range(300)
    ]
    # (the canary's p99, its slowest request or nearly, is over the SLO and many
    # times stable's in a fifth of them)
    over = [w for w in windows if w["v2"].p99_ms > max(500, 2 * w["v1"].p99_ms)]
    assert len(over) >= 0.1 * len(windows)
    # WHEN each is judged THEN none rolls the canary back
    assert [v for w in windows if (v := judge(CANARY, w, LIMITS, 500))] == []
    # while a canary that keeps one request in five waiting over a second is caught
    caught = [
        judge(CANARY, {**w, "v2": paused(rng, 50, 120, 1 / 5, 1160)}, LIMITS, 500) for w in windows
    ]
    assert sum("requests over the SLO" in v.get("v2", "") for v in caught) >= 0.9 * len(windows)


def test_a_healthy_or_unproven_canary_is_left_alone():
    assert judge(CANARY, {"v1": stats(100, 0, 20), "v2": stats(30, 0, 25)}, LIMITS, 500) == {}
    assert judge(CANARY, {"v1": stats(100, 0, 20), "v2": stats(5, 5, 20)}, LIMITS, 500) == {}
    assert judge(RoutingDocument(weights={"v1": 100}), {"v1": stats(50, 50, 20)}, LIMITS, 500) == {}


def test_rollback_gives_the_canary_share_to_stable_and_keeps_the_order():
    doc = RoutingDocument(weights={"v1": 80, "v2": 20}, fallback="v1")
    back = rolled_back(doc, ["v2"])
    assert back.weights == {"v1": 100, "v2": 0}
    assert back.fallback == "v1"
