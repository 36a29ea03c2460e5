"""The capacity plan's parts (``switchyard.traffic_profile``, ``switchyard.planning``,
``switchyard.scaling_replay``, ``switchyard.prices``): a profile's mistakes named by
their field, the arithmetic on a small profile checked by hand, and the replay of a
constant load through the scaling rule worked out step by step."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from switchyard.planning import SECONDS_PER_MONTH, admission_writes, make_plan, max_tasks_bound
from switchyard.prices import PriceTable, cost
from switchyard.scaling import ScalingPolicy
from switchyard.scaling_replay import (
    ReplaySettings,
    ServiceLoad,
    WaitDistribution,
    replay,
)
from switchyard.traffic_profile import Profile, ProfileError, load_profile

SMALL = """
description = "one model, flat, checked by hand"
headroom = 0.5

[defaults.scaling]
min_tasks = 0
backlog_per_task = 100
target_age_seconds = 60
scale_out_cooldown_seconds = 60
scale_in_cooldown_seconds = 300
idle_seconds = 900

[models.m]
peak_rps = 1000
shape = "flat"
compute = "gpu"
instance_type = "g5.xlarge"
batch_size = 10
max_wait_ms = 1000
worker_rps = 100
payload_in_bytes = 1000
payload_out_bytes = 500

[path]
status_reads_per_batch = 0
idle_worker_sqs_per_hour = 0

[simulation]
arrivals = "even"
"""


def profile_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "profile.toml"
    path.write_text(text)
    return path


def plan_of(tmp_path: Path, text: str = SMALL):
    path = profile_file(tmp_path, text)
    return make_plan(load_profile(path), None, tmp_path)


# -- the profile -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (("peak_rps = 1000", "peak_rps = -5"), "models.m.peak_rps: Input should be greater than 0"),
        (
            ("peak_rps = 1000", "peek_rps = 1000"),
            "models.m.peek_rps: Extra inputs are not permitted",
        ),
        (('shape = "flat"', "shape = [1, 2, 3]"), "models.m.shape: 24 hourly multipliers, not 3"),
        (('shape = "flat"', 'shape = "weekly"'), "models.m.shape: Input should be 'flat'"),
        (("worker_rps = 100", ""), "models.m.worker_rps: what one worker takes is not given"),
        (('compute = "gpu"', ""), "models.m.compute: not given, and the manifest has no m"),
        (
            ("headroom = 0.5", "headroom = -1"),
            "headroom: Input should be greater than or equal to 0",
        ),
        (("min_tasks = 0", "min_tasks = -1"), "defaults.scaling.min_tasks: Input should be"),
        (
            ('arrivals = "even"', 'arrivals = "even"\ntick_seconds = 7'),
            "simulation.tick_seconds: divides a day",
        ),
        (
            ("[path]", "[prices]\nsqs_per_million_requests = [[0, 1.0]]\n[path]"),
            "prices.sqs_per_million_requests: each tier [width, price] has a width > 0",
        ),
    ],
)
def test_a_profile_mistake_is_named_by_its_field(tmp_path, change, named):
    # GIVEN the small profile with one mistake in it
    text = SMALL.replace(*change)
    assert text != SMALL
    # WHEN it is planned
    with pytest.raises(ProfileError) as raised:
        plan_of(tmp_path, text)
    # THEN the error names the field, as the reader wrote it
    assert named in str(raised.value)


def test_a_mean_a_shape_cannot_reach_is_refused_naming_the_hour(tmp_path):
    text = SMALL.replace('shape = "flat"', 'shape = "business"\nmean_rps = 100')
    with pytest.raises(ProfileError, match=r"models\.m\.mean_rps: .* leaves hour 00 below zero"):
        plan_of(tmp_path, text)


def test_a_shape_is_mapped_onto_the_mean_and_the_peak(tmp_path):
    text = SMALL.replace('shape = "flat"', 'shape = "diurnal"\nmean_rps = 600')
    plan = plan_of(tmp_path, text)
    model = plan.models[0]
    assert model.peak_rps == pytest.approx(1000)
    # the day's ticks sample the hourly points' straight lines: their mean is the mean
    assert model.mean_rps == pytest.approx(600, rel=1e-6)


def test_a_trace_gives_the_day_and_peak_rps_rescales_it(tmp_path):
    (tmp_path / "day.csv").write_text("seconds,rps\n0,10\n43200,30\n")
    text = SMALL.replace('peak_rps = 1000\nshape = "flat"', 'trace = "day.csv"')
    plan = plan_of(tmp_path, text)
    assert (plan.models[0].peak_rps, plan.models[0].mean_rps) == (30, pytest.approx(20))
    rescaled = plan_of(
        tmp_path, text.replace('trace = "day.csv"', 'trace = "day.csv"\npeak_rps = 300')
    )
    assert (rescaled.models[0].peak_rps, rescaled.models[0].mean_rps) == (300, pytest.approx(200))


def test_a_fleet_splits_its_traffic_by_zipf(tmp_path):
    text = SMALL.replace("[models.m]", "[fleets.f]\nmodels = 3\nzipf = 1.0")
    plan = plan_of(tmp_path, text)
    peaks = {m.model: m.peak_rps for m in plan.models}
    harmonic = 1 + 1 / 2 + 1 / 3
    assert peaks == {
        "f-01": pytest.approx(1000 / harmonic),
        "f-02": pytest.approx(1000 / 2 / harmonic),
        "f-03": pytest.approx(1000 / 3 / harmonic),
    }


def test_a_manifest_model_takes_its_compute_batch_and_scaling_from_the_manifest(manifest):
    # GIVEN a profile that gives minilm-embed's traffic and worker rate alone
    profile = Profile.model_validate(
        {"models": {"minilm-embed": {"peak_rps": 10, "worker_rps": 200}}}
    )
    # WHEN it is planned against the repository's manifest
    plan = make_plan(profile, manifest, Path("."))
    # THEN the manifest gave what the profile left out
    spec = manifest.models["minilm-embed"]
    service = plan.services[0]
    assert service.instance_type == spec.instance_types[0]
    assert service.compute == spec.compute
    assert plan.models[0].messages_per_batch == spec.max_batch_size
    policy = manifest.scaling_policy("minilm-embed", "prod")
    assert service.min_workers == policy.min_tasks
    assert service.policy.backlog_per_task == policy.backlog_per_task
    assert service.manifest_max_tasks == policy.max_tasks


# -- the arithmetic ------------------------------------------------------------------


def test_the_arithmetic_of_a_small_profile_checked_by_hand(tmp_path):
    plan = plan_of(tmp_path)
    service, model = plan.services[0], plan.models[0]

    # Workers: 1,000 req/s over 100 a worker is 10; with 50 % headroom 15; a g5.xlarge
    # has 4 vCPUs.
    assert (service.needed_at_peak, service.min_workers, service.max_workers) == (10, 0, 15)
    assert service.max_workers * service.vcpus_per_worker == 60

    # Router: a batch of 10 takes 0.1 s; the batch forms in 0.1 s (10 at 100 a worker,
    # under max_wait_ms); a request waits for the batch in progress and runs in its own:
    # 30 + 100 + 2 × 100 = 330 ms. Little's law at the peak with headroom:
    # 1,000 × 0.33 × 1.5 = 495 held at once.
    assert model.batch_seconds == pytest.approx(0.1)
    assert model.router_ms == pytest.approx(330)
    assert model.reserved_concurrency == 495

    quotas = {q.name: q for q in plan.quotas}
    lambda_ = quotas["Lambda concurrent executions"]
    assert lambda_.needs == 495 + 100  # and Lambda's unreserved 100; no manifest, no others
    assert quotas["API Gateway throttle rate per account and region (requests/s)"].needs == 1500
    gpu = quotas["EC2 Running On-Demand G and VT instances (vCPUs)"]
    assert (gpu.needs, gpu.default, gpu.to_raise) == (60, None, True)
    # 800 bytes of result: one write unit, and 1.9 looks of one read unit each; each
    # sync request's slot is taken and given back: two write units more
    writes = quotas["DynamoDB on-demand write units per second, results table"]
    reads = quotas["DynamoDB on-demand read units per second, results table"]
    assert (writes.needs, reads.needs) == (1500 + 2 * 1500, 2850)
    assert not writes.to_raise

    # A month of the mean (the peak: the shape is flat).
    requests = 1000 * SECONDS_PER_MONTH
    monthly = plan.monthly
    assert monthly["requests"] == pytest.approx(requests)
    # SQS: a send each (1,000 bytes: one 64 KB chunk), and a receive and a delete per
    # full batch of 10 (the batch fills: max_wait_ms is long)
    assert model.batch_fill == pytest.approx(10)
    assert monthly["sqs_requests"] == pytest.approx(requests + 2 * requests / 10)
    assert monthly["dynamodb_wru"] == pytest.approx(requests + 2 * requests)  # and the slots
    assert monthly["dynamodb_rru"] == pytest.approx(requests * 1.9)
    # Firehose: a record per full batch of 10, its 10 lines of 550 bytes billed as 10 KB
    assert monthly["firehose_gb"] == pytest.approx(requests / 10 * 10 / 1024**2)
    assert monthly["lambda_gb_seconds"] == pytest.approx(requests * 0.33)  # 1 GB routers

    usd = plan.usd_per_month
    millions = requests / 1e6  # 2,628: three of API Gateway's tiers
    assert usd["API Gateway"] == pytest.approx(333 * 3.5 + 667 * 2.8 + (millions - 1000) * 2.38)
    assert usd["SQS"] == pytest.approx(millions * 1.2 * 0.40)
    assert usd["DynamoDB"] == pytest.approx(3 * millions * 0.625 + millions * 1.9 * 0.125)
    assert usd["Lambda"] == pytest.approx(millions * 0.20 + requests * 0.33 * 0.0000166667)
    # the replayed day kept 15 workers all day, one host each, at $1.006 an hour
    assert service.replay.worker_hours == pytest.approx(15 * 24)
    assert usd["EC2 g5.xlarge"] == pytest.approx(15 * 730 * 1.006)
    assert plan.total_usd_per_month == pytest.approx(sum(usd.values()))


def test_idle_worker_hours_are_what_the_load_did_not_use(tmp_path):
    plan = plan_of(tmp_path)
    day = plan.services[0].replay
    busy = 1000 * 86_400 / 100 / 3600  # 240 hours of work in the day
    assert day.idle_hours == pytest.approx(day.worker_hours - busy)
    assert plan.idle_usd_per_month == pytest.approx(day.idle_hours * 730 / 24 * 1.006)


def test_a_service_over_the_clouds_worker_bound_is_a_note(tmp_path):
    text = SMALL.replace("peak_rps = 1000", "peak_rps = 3000")
    plan = plan_of(tmp_path, text)
    assert plan.services[0].max_workers == 45 > max_tasks_bound()
    assert any("more than the 20 workers" in note for note in plan.notes)


def test_as_dict_is_json_ready(tmp_path):
    import json

    data = json.loads(json.dumps(plan_of(tmp_path).as_dict()))
    assert data["services"][0]["workers"] == {
        "at_peak": 10,
        "min": 0,
        "max": 15,
        "manifest_max_tasks": None,
    }
    assert data["usd_per_month"]["total"] > 0


# -- prices ----------------------------------------------------------------------------


def test_tiers_are_charged_in_turn_and_the_last_goes_on():
    tiers = [(100.0, 1.0), (100.0, 0.5), (math.inf, 0.25)]
    assert cost(50, tiers) == 50
    assert cost(150, tiers) == 100 + 25
    assert cost(1000, tiers) == 100 + 50 + 800 * 0.25
    assert cost(10, 0.4) == pytest.approx(4)


def test_a_profiles_instance_prices_add_to_the_defaults():
    prices = PriceTable.model_validate({"instances_per_hour": {"p5.48xlarge": 98.32}})
    assert prices.instances_per_hour["p5.48xlarge"] == 98.32
    assert prices.instances_per_hour["g5.xlarge"] == 1.006


# -- the replay ----------------------------------------------------------------------------

POLICY = ScalingPolicy(
    min_tasks=0,
    max_tasks=50,
    backlog_per_task=6000,
    target_age_seconds=600,
    scale_out_cooldown_seconds=60,
    scale_in_cooldown_seconds=300,
    idle_seconds=900,
)


def test_a_constant_load_from_zero_settles_where_the_backlog_rule_puts_it():
    # GIVEN 1,000 req/s all day, 100 a worker, no worker at midnight, a decision a
    # minute and a worker serving a minute after it is started
    settings = ReplaySettings(start_delay_seconds=60, warmup_seconds=0, arrivals="even")
    load = ServiceLoad([1000.0] * settings.day_ticks, 100.0, 0.1, POLICY)
    # WHEN the day is replayed
    day = replay(load, settings)
    # THEN at 60 s the backlog of 60,000 wakes ceil(60,000 / 6,000) = 10 workers; at
    # 120 s, with them still starting, the backlog of 120,000 asks for 20: a scale-out
    # at once (a wake starts no cool-down). From 180 s the 20 drain the backlog, and the
    # model keeps them: it always has work, so it never scales in.
    assert (day.wakes, day.scale_outs, day.scale_ins) == (1, 1, 0)
    assert day.peak_workers == 20
    # paid: 10 workers from 60 s, 20 from 120 s
    assert day.worker_seconds == pytest.approx(10 * 60 + 20 * (86_400 - 120))
    assert day.busy_seconds == pytest.approx(86_400 * 1000 / 100)
    assert day.served == pytest.approx(day.arrived) and day.unserved == 0
    # The first request waited for the decision and the start: 60 + 60 s, the longest.
    assert day.waits.maximum() == pytest.approx(120)
    # The wait falls from 120 s for a request at 60 s to none at 300 s (w = 150 - a/2),
    # so the 300,000 that waited are under 1 % of the day's 86.4 million.
    assert day.waits.quantile(0.99) == 0
    assert day.waits.requests == pytest.approx(86_400 * 1000)
    waited = day.waits.requests - day.waits.points[0.0]
    assert waited == pytest.approx(300_000)
    assert day.waits.points[120.0] == pytest.approx(60_000)  # served at the rate they came
    assert day.waits.mean() == pytest.approx((60_000 * 120 + 240_000 * 60) / 86_400_000)


def test_with_a_warm_minimum_nothing_waits():
    settings = ReplaySettings(start_delay_seconds=60, warmup_seconds=0, arrivals="even")
    warm = ScalingPolicy(**{**POLICY.__dict__, "min_tasks": 10})
    day = replay(ServiceLoad([1000.0] * settings.day_ticks, 100.0, 0.1, warm), settings)
    assert day.waits.maximum() == 0
    assert day.worker_seconds == pytest.approx(10 * 86_400)
    assert day.idle_hours == pytest.approx(0)


def test_p99_wait_from_zero_is_bounded_by_the_decision_and_the_start():
    # GIVEN a model at zero that gets 1 req/s (Poisson) from a quiet start, and a
    # worker that takes 10 each second
    settings = ReplaySettings(start_delay_seconds=180, warmup_seconds=0, seed=7)
    policy = ScalingPolicy(**{**POLICY.__dict__, "backlog_per_task": 100})
    day = replay(ServiceLoad([1.0] * settings.day_ticks, 10.0, 0.1, policy), settings, "m")
    # THEN no request waits longer than a decision's interval and the start delay
    assert 0 < day.waits.maximum() <= 60 + 180
    assert day.waits.quantile(0.99) <= 180
    assert day.wakes == 1 and day.scale_ins == 0


def test_an_idle_model_scales_in_after_its_idle_time():
    # GIVEN traffic in the first hour only
    settings = ReplaySettings(start_delay_seconds=60, warmup_seconds=0, arrivals="even")
    rates = [1000.0] * 360 + [0.0] * (settings.day_ticks - 360)
    day = replay(ServiceLoad(rates, 100.0, 0.1, POLICY), settings)
    # THEN the workers go once the queue has been empty for idle_seconds
    assert day.scale_ins == 1
    assert day.worker_seconds < 20 * (3600 + 900 + 120)


def test_waits_quantiles_over_points_and_spreads():
    waits = WaitDistribution()
    waits.add(98, 0, 0)
    waits.add(2, 10, 20)  # two requests, their waits evenly from 10 to 20 s
    assert waits.quantile(0.98) == 0
    assert waits.quantile(0.99) == pytest.approx(15)
    assert waits.quantile(1.0) == pytest.approx(20)
    assert waits.mean() == pytest.approx(2 * 15 / 100)


def test_admission_writes_are_a_sync_slot_and_a_counted_place_given_back_per_batch():
    # GIVEN 1,000 requests, half of them sync, answered in 50 batches
    # THEN the sync ones' slots take 2 writes each (1,000); the async ones' places
    # are counted one write each (500) and given back a write a batch, for the async
    # half of the batches (25)
    assert admission_writes(1000, 0.5, 50) == pytest.approx(1000 + 500 + 25)
