"""Whether a canary is rolled back: one pure rule for both substrates.

The local rollback controller (``switchyard_local.controller``) calls :func:`judge`
every second with what the router's EMF lines say of each version over the
rollout window; the CDK app renders the same rule into the canary alarms that
AppConfig watches while a routing document rolls out (``stacks/observability.py``),
and an infra test evaluates those alarms on the cases the unit tests give
:func:`judge` and checks that both decide alike.

A canary is judged against the stable version over the same window, so that a
model overloaded as a whole (both versions slow, both failing) keeps its canary.
With ``n`` requests, ``e`` errors (``r = e / n``) and p99 latency ``p`` of the
canary (``c``) and of the stable version (``s``) in the window, ``N`` =
``min_requests``, ``L`` = ``max_error_rate``, ``m`` = ``max_error_rate_over_stable``,
``k`` = ``max_p99_ratio``, ``z`` = ``noise_z``, ``M`` = ``noise_min_count`` and
``S`` = the model's SLO, first match wins:

1. **Too few.** A canary with ``n_c < N`` is not judged.
2. **Alone.** Without a baseline (``n_s < N``: the sticky key sent nearly all
   traffic to the canary) the canary is rolled back when ``r_c > L`` or ``p_c > S``.
3. **Errors.** With one, an absolute limit counts only where the canary is worse
   than stable by the margin, never where stable is as bad: ``r_c > L`` and
   ``x = r_c - r_s - m > 0`` and ``x * x > z * z * q * (1 - q) * (1 / n_c + 1 / n_s)``,
   with the pooled rate ``q = (e_c + e_s) / (n_c + n_s)``, and ``e_c >= M``: the
   excess also clears ``z`` standard errors of the difference, so that two
   identical versions never part by the luck of a small sample.
4. **Latency.** ``p_c > S`` and ``p_c > k * p_s``, and the canary's share of
   requests over the SLO exceeds stable's beyond noise: the test of rule 3, with
   ``m = 0`` and ``e`` the requests over ``S``. The p99 of a small sample is its
   slowest request or nearly; without this test one slow request among a canary's
   few dozen rolls back a version identical to stable.
5. Otherwise the canary keeps its share.
"""

from __future__ import annotations

from dataclasses import dataclass

from switchyard.manifest import RolloutLimits
from switchyard.routing import RoutingDocument, canaries, stable_version
from switchyard.stats import percentile


@dataclass
class VersionStats:
    """One version's requests in the window, as the router's metrics count them."""

    requests: int = 0
    errors: int = 0
    latencies: list[float] | None = None

    @property
    def error_rate(self) -> float:
        return self.errors / self.requests if self.requests else 0.0

    def percentile_ms(self, q: float) -> float | None:
        """The nearest-rank ``q`` quantile (0 < q <= 1) of the latencies; None without any."""
        if not self.latencies:
            return None
        return percentile(self.latencies, q * 100, nearest_rank=True)

    @property
    def p50_ms(self) -> float | None:
        return self.percentile_ms(0.5)

    @property
    def p99_ms(self) -> float | None:
        return self.percentile_ms(0.99)

    def slower_than(self, ms: float) -> int:
        """How many requests took longer than ``ms``."""
        return sum(latency > ms for latency in self.latencies or ())


def judge(
    document: RoutingDocument,
    stats: dict[str, VersionStats],
    limits: RolloutLimits,
    slo_p99_ms: float,
) -> dict[str, str]:
    """The canaries of ``document`` to roll back, each with the reason (which rule
    applied, and the figures it read)."""
    stable = stats.get(stable_version(document), VersionStats())
    baseline = stable if stable.requests >= limits.min_requests else None
    verdicts: dict[str, str] = {}
    for version in canaries(document):
        s = stats.get(version, VersionStats())
        if s.requests < limits.min_requests:
            continue
        reason = _error_verdict(s, baseline, limits) or _latency_verdict(
            s, baseline, limits, slo_p99_ms
        )
        if reason:
            verdicts[version] = reason
    return verdicts


def _error_verdict(
    canary: VersionStats, stable: VersionStats | None, limits: RolloutLimits
) -> str | None:
    rate = canary.error_rate
    if rate <= limits.max_error_rate:
        return None
    over = (
        f"error rate {rate:.1%} over {canary.requests} requests > limit {limits.max_error_rate:.0%}"
    )
    if stable is None:
        return f"{over}; stable has too few requests to compare"
    margin = limits.max_error_rate_over_stable
    if not _beyond_noise(
        canary.errors, canary.requests, stable.errors, stable.requests, margin, limits
    ):
        return None
    return f"{over} and stable's {stable.error_rate:.1%} + {margin:.0%} beyond noise"


def _latency_verdict(
    canary: VersionStats, stable: VersionStats | None, limits: RolloutLimits, slo_p99_ms: float
) -> str | None:
    p99 = canary.p99_ms
    if p99 is None or p99 <= slo_p99_ms:
        return None
    over = f"p99 {p99:.0f} ms > SLO {slo_p99_ms:.0f} ms"
    if stable is None:
        return f"{over}; stable has too few requests to compare"
    stable_p99 = stable.p99_ms or 0.0
    if p99 <= limits.max_p99_ratio * stable_p99:
        return None
    slow, stable_slow = canary.slower_than(slo_p99_ms), stable.slower_than(slo_p99_ms)
    if not _beyond_noise(slow, canary.requests, stable_slow, stable.requests, 0, limits):
        return None
    return (
        f"{over} and > {limits.max_p99_ratio:g} x stable's {stable_p99:.0f} ms; "
        f"{slow / canary.requests:.1%} of its requests over the SLO against stable's "
        f"{stable_slow / stable.requests:.1%} beyond noise"
    )


def _beyond_noise(
    hits: int,
    requests: int,
    stable_hits: int,
    stable_requests: int,
    margin: float,
    limits: RolloutLimits,
) -> bool:
    """Whether the canary's share of hits (errors, or requests over the SLO) exceeds
    stable's by more than ``margin`` beyond sampling noise: the excess clears
    ``noise_z`` standard errors of the difference between two samples of one pooled
    rate (a two-proportion z-test), and the canary has at least ``noise_min_count``
    hits, without which that test's normal approximation does not hold (two slow
    requests in 50 against none in 450 clear 4 standard errors, yet two identical
    versions that each slow one request in 200 show that in one window in 300)."""
    if hits < limits.noise_min_count:
        return False
    excess = hits / requests - stable_hits / stable_requests - margin
    pooled = (hits + stable_hits) / (requests + stable_requests)
    variance = pooled * (1 - pooled) * (1 / requests + 1 / stable_requests)
    return excess > 0 and excess * excess > limits.noise_z**2 * variance
