"""The scaling policy: every branch of ``decide`` with its reason, its bounds, and
bursty traces replayed through a small simulator that counts changes of the
desired count (no flapping)."""

from __future__ import annotations

import itertools
import math
import tomllib
from dataclasses import replace

import pytest

from harness.scaling_scenarios import SCENARIOS, Scenario, Simulator, fits, signals
from stacks.assets import MANIFEST_FILE
from switchyard.manifest import Manifest
from switchyard.scaling import (
    Action,
    LaneSignals,
    ScalingPolicy,
    ScalingSignals,
    decide,
)

DEV = ScalingPolicy(
    min_tasks=0,
    max_tasks=4,
    backlog_per_task=100,
    target_age_seconds=60,
    scale_out_cooldown_seconds=60,
    scale_in_cooldown_seconds=300,
    idle_seconds=900,
)
PROD = replace(DEV, min_tasks=1, idle_seconds=1800)


# policy, signals, desired, action, words of the reason
BRANCHES: list[tuple[str, ScalingPolicy, ScalingSignals, int, Action, str]] = [
    ("wake: one request", DEV, signals(visible=1), 1, "wake", "no worker: start 1 now"),
    ("wake: a burst asks for 3", DEV, signals(visible=250), 3, "wake", "start 3 now"),
    ("wake: a larger burst, up to the maximum", DEV, signals(visible=5000), 4, "wake", "start 4"),
    ("wake: in flight only", DEV, signals(in_flight=2), 1, "wake", "2 messages waiting"),
    (
        "wake ignores the scale-out cool-down",
        DEV,
        replace(signals(visible=1), since_scale_out_seconds=0.0),
        1,
        "wake",
        "start 1 now",
    ),
    ("raise to the minimum", PROD, signals(), 1, "raise_to_minimum", "below the stage's minimum"),
    ("lower to the maximum", DEV, signals(running=6), 4, "lower_to_maximum", "above the maximum"),
    (
        "scale out on backlog",
        DEV,
        signals(visible=250, running=1),
        3,
        "scale_out",
        "backlog 250 at 100 per worker wants 3: 1 → 3",
    ),
    (
        "scale out on backlog, to the maximum",
        DEV,
        signals(visible=900, running=2),
        4,
        "scale_out",
        "2 → 4",
    ),
    (
        "scale out on age",
        DEV,
        signals(visible=20, age=90, running=1),
        2,
        "scale_out",
        "oldest message 90 s old, over the target of 60 s",
    ),
    (
        "hold: scale-out cool-down",
        DEV,
        replace(signals(visible=250, running=1), since_scale_out_seconds=30),
        1,
        "hold",
        "the last scale-out was 30 s ago (cool-down 60 s)",
    ),
    (
        "hold: at the maximum",
        DEV,
        signals(visible=900, running=4),
        4,
        "hold",
        "but 4 is the maximum",
    ),
    (
        "hold: aged, but a worker is starting",
        DEV,
        signals(visible=20, age=90, running=1, starting=1),
        2,
        "hold",
        "2 workers on 20 messages",
    ),
    (
        "hold: aged, but the last worker became ready only 10 s ago",
        DEV,
        signals(visible=20, age=90, running=2, ready=10.0),
        2,
        "hold",
        "2 workers on 20 messages",
    ),
    (
        "hold: starting workers are capacity on the way",
        DEV,
        signals(visible=250, starting=3),
        3,
        "hold",
        "wants 3; 3 workers",
    ),
    (
        "hold: in flight only, no scale-in under load",
        DEV,
        signals(in_flight=40, running=3),
        3,
        "hold",
        "3 workers on 40 messages",
    ),
    (
        "hold: not idle long enough",
        DEV,
        signals(running=3, idle=600),
        3,
        "hold",
        "idle for 600 s of 900 s",
    ),
    (
        "hold: scale-in cool-down",
        DEV,
        replace(signals(running=3, idle=1000), since_scale_in_seconds=100),
        3,
        "hold",
        "the last scale-in was 100 s ago (cool-down 300 s)",
    ),
    ("scale in to zero in dev", DEV, signals(running=3, idle=900), 0, "scale_in", "3 → 0"),
    ("scale in to the minimum in prod", PROD, signals(running=3, idle=1800), 1, "scale_in", "→ 1"),
    ("hold at the minimum", PROD, signals(running=1, idle=5000), 1, "hold", "at the minimum"),
    ("hold at zero", DEV, signals(), 0, "hold", "0 workers at the minimum"),
]


@pytest.mark.parametrize(
    ("policy", "given", "desired", "action", "reason"),
    [row[1:] for row in BRANCHES],
    ids=[row[0] for row in BRANCHES],
)
def test_each_rule_decides_and_says_why(
    policy: ScalingPolicy, given: ScalingSignals, desired: int, action: Action, reason: str
) -> None:
    decision = decide(policy, given)
    assert (decision.desired, decision.action) == (desired, action), decision.reason
    assert reason in decision.reason
    assert decision.changes == (action != "hold")


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
@pytest.mark.parametrize("policy", [DEV, PROD], ids=["dev", "prod"])
def test_shared_scenarios(policy: ScalingPolicy, scenario: Scenario) -> None:
    """The table the infra tier also evaluates on the synthesized alarms."""
    assert fits(policy)
    decision = decide(policy, scenario.given(policy))
    assert (decision.desired, decision.action) == scenario.expected(policy), decision.reason


def _grid() -> list[ScalingSignals]:
    out = []
    for visible, in_flight, age, running, starting, idle in itertools.product(
        (0, 1, 99, 100, 101, 450, 10_000),
        (0, 7),
        (0.0, 59.0, 61.0, 3600.0),
        range(6),
        range(3),
        (0.0, 899.0, 900.0, math.inf),
    ):
        lanes = {"realtime": LaneSignals(visible, in_flight, age), "batch": LaneSignals()}
        for since_out, since_in in ((math.inf, math.inf), (10.0, 10.0)):
            out.append(ScalingSignals(lanes, running, starting, idle, since_out, since_in))
    return out


GRID = _grid()


@pytest.mark.parametrize("policy", [DEV, PROD], ids=["dev", "prod"])
def test_never_below_the_minimum_nor_above_the_maximum(policy: ScalingPolicy) -> None:
    for given in GRID:
        decision = decide(policy, given)
        assert policy.min_tasks <= decision.desired <= policy.max_tasks, (given, decision)


@pytest.mark.parametrize("policy", [DEV, PROD], ids=["dev", "prod"])
def test_work_always_has_a_worker_and_never_loses_one(policy: ScalingPolicy) -> None:
    for given in GRID:
        decision = decide(policy, given)
        if given.visible + given.in_flight:
            assert decision.desired >= 1, (given, decision)
            # no scale-in under load (only down to the maximum, if above it)
            assert decision.desired >= min(given.workers, policy.max_tasks), (given, decision)


@pytest.mark.parametrize("policy", [DEV, PROD], ids=["dev", "prod"])
def test_only_a_scale_out_starts_the_scale_out_cooldown(policy: ScalingPolicy) -> None:
    for given in GRID:
        decision = decide(policy, given)
        assert decision.starts_scale_out_cooldown == (decision.action == "scale_out"), decision
    # a wake in particular, however large
    assert not decide(policy, signals(visible=10_000)).starts_scale_out_cooldown


def test_a_manifest_policy_fits_the_scenarios(manifest: Manifest) -> None:
    for model in manifest.models:
        for stage in manifest.stages:
            assert fits(manifest.scaling_policy(model, stage)), (model, stage)


def _manifest_data() -> dict:
    return tomllib.loads(MANIFEST_FILE.read_text())


def test_manifest_gives_stage_values_overridden_by_the_models(manifest: Manifest) -> None:
    dev = manifest.scaling_policy("minilm-embed", "dev")
    prod = manifest.scaling_policy("minilm-embed", "prod")
    assert (dev.min_tasks, prod.min_tasks) == (0, 1)  # the model's prod override: kept warm
    assert dev.backlog_per_task == prod.backlog_per_task == 200  # the model's, every stage
    assert prod.idle_seconds == manifest.stages["prod"].scaling.idle_seconds  # the stage's
    assert manifest.scaling_policy("digits-cnn", "prod").min_tasks == 0


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (
            lambda d: d["models"]["minilm-embed"]["scaling"]["prod"].update(min_tasks=9),
            r"models\.minilm-embed\.scaling, in prod: min_tasks \(9\) must be between 0",
        ),
        (
            lambda d: d["stages"]["dev"]["scaling"].pop("idle_seconds"),
            r"stages\.dev\n.*scaling: missing idle_seconds",
        ),
        (
            lambda d: d["stages"]["dev"]["scaling"].update(idle_seconds=90),
            r"stages\.dev\.scaling\.idle_seconds\n.*multiple of 60",
        ),
        (
            lambda d: d["models"]["digits-cnn"]["scaling"].update(max_task=3),
            r"models\.digits-cnn\.scaling\.max_task\n.*Extra inputs are not permitted",
        ),
        (
            lambda d: d["models"]["digits-cnn"]["scaling"].update(qa={"min_tasks": 1}),
            r"models\.digits-cnn\.scaling\.qa\n.*Extra inputs are not permitted",
        ),
    ],
    ids=["min over max", "stage value missing", "idle not whole minutes", "typo", "unknown stage"],
)
def test_manifest_refuses_scaling_it_cannot_apply(change, error: str) -> None:
    data = _manifest_data()
    change(data)
    with pytest.raises(ValueError, match=error):
        Manifest.model_validate(data)


def test_policy_of_an_unknown_stage_or_model_is_refused(manifest: Manifest) -> None:
    with pytest.raises(ValueError, match="unknown stage 'qa'"):
        manifest.scaling_policy("minilm-embed", "qa")
    with pytest.raises(ValueError, match="unknown model 'nope'"):
        manifest.scaling_policy("nope", "dev")


def test_policy_refuses_impossible_bounds() -> None:
    with pytest.raises(ValueError, match=r"min_tasks \(5\) must be between 0 and max_tasks \(4\)"):
        replace(DEV, min_tasks=5)
    with pytest.raises(ValueError, match="max_tasks"):
        replace(DEV, min_tasks=0, max_tasks=0)
    with pytest.raises(ValueError, match="backlog_per_task"):
        replace(DEV, backlog_per_task=0)
    with pytest.raises(ValueError, match="idle_seconds"):
        replace(DEV, idle_seconds=-1)


# --- Replays ----------------------------------------------------------------------


TICKS_PER_MINUTE = 12  # 5-second ticks


def test_steady_trickle_wakes_once_and_never_scales_in() -> None:
    # GIVEN 20 messages every tick for an hour, which one worker keeps up with
    # WHEN replayed
    sim = Simulator(DEV).run([20] * 60 * TICKS_PER_MINUTE)
    # THEN one change (0 → 1) and nothing else
    assert sim.changes == 1
    assert sim.desired[-1] == 1


def test_steady_load_above_one_worker_settles_without_oscillating() -> None:
    # GIVEN 120 messages a tick, more than two workers take (50 each)
    sim = Simulator(DEV).run([120] * 60 * TICKS_PER_MINUTE)
    # THEN the count only rises, settles, and holds for the rest of the hour
    assert sim.scale_ins == 0
    assert sim.changes <= 3
    settled = sim.desired[10 * TICKS_PER_MINUTE :]
    assert len(set(settled)) == 1 and settled[0] >= 3
    assert not sim.queue or len(sim.queue) < 2 * DEV.backlog_per_task


def test_periodic_bursts_within_the_idle_time_do_not_flap() -> None:
    # GIVEN 600 messages at once every 2 minutes (shorter than the 15-minute idle time)
    burst = [600] + [0] * (2 * TICKS_PER_MINUTE - 1)
    sim = Simulator(DEV).run(burst * 30)
    # THEN the count rises at most once per worker and never falls in between
    assert sim.scale_ins == 0
    assert sim.changes <= DEV.max_tasks
    assert sim.desired[-1] == DEV.max_tasks


def test_bursts_farther_apart_than_the_idle_time_scale_from_and_to_zero_each_time() -> None:
    # GIVEN 600 messages at once every 20 minutes (longer than the 15-minute idle time)
    burst = [600] + [0] * (20 * TICKS_PER_MINUTE - 1)
    sim = Simulator(DEV).run(burst * 4)
    # THEN each burst wakes the model to what its backlog asks for, then back to 0
    assert sim.changes == 2 * 4
    assert sim.started == 4 * DEV.max_tasks
    assert sim.desired[-1] == 0
    assert [d.action for d in sim.decisions if d.changes] == ["wake", "scale_in"] * 4


def test_prod_keeps_its_minimum_through_bursts_and_quiet() -> None:
    burst = [300] + [0] * (40 * TICKS_PER_MINUTE - 1)
    sim = Simulator(PROD).run(burst * 3)
    assert min(sim.desired) == PROD.min_tasks == 1
    assert sim.desired[-1] == PROD.min_tasks


def test_backlog_swinging_every_tick_does_not_flap() -> None:
    # GIVEN arrivals alternating between 250 and nothing, tick by tick
    sim = Simulator(DEV).run([250, 0] * 30 * TICKS_PER_MINUTE)
    # THEN the count goes up once and stays while there is work
    assert sim.scale_ins == 0
    assert sim.changes <= 2
    # where the backlog alone, ceil(visible / per task), would follow the swing
    naive = [math.ceil(v / DEV.backlog_per_task) for v in sim.visible_seen]
    assert sum(1 for a, b in itertools.pairwise(naive) if a != b) > 100


def test_a_slow_start_is_waited_for_not_answered_with_more_starts() -> None:
    # GIVEN a burst of 250 at zero and workers that take 5 minutes to load
    sim = Simulator(DEV, start_ticks=5 * TICKS_PER_MINUTE).run([250] + [0] * 10 * TICKS_PER_MINUTE)
    # THEN three workers start at once (what the backlog asks for), and while they
    # load, with the oldest message five times the target age, no more start
    assert sim.decisions[0].action == "wake" and sim.desired[0] == 3
    assert sim.started == 3
    assert sim.changes == 1


def test_the_replay_gives_a_wake_the_standby_first_and_records_every_tick() -> None:
    # GIVEN a burst at zero, with workers starting in 4 ticks and a standby in 1
    sim = Simulator(DEV, start_ticks=4, standby_ticks=1).run([250] + [0] * 10)
    # THEN one worker is running after a tick and the others after four
    running = [point["running"] for point in sim.timeline]
    assert running[:6] == [0, 1, 1, 1, 3, 3]
    assert [p["t"] for p in sim.timeline] == [i * sim.tick_seconds for i in range(11)]
    assert sim.timeline[0]["visible"] == 250 and sim.timeline[0]["desired"] == 3


def test_a_burst_just_after_a_wake_scales_out_at_once() -> None:
    # GIVEN a model at zero woken by one request, and 31 s later a burst of 1,017
    # messages at 200 per worker (the trace that once ran one worker for a minute)
    policy = replace(DEV, backlog_per_task=200, max_tasks=8)
    arrivals = [1] + [0] * 5 + [1017] + [0] * TICKS_PER_MINUTE
    # WHEN replayed, workers starting in 4 ticks (20 s)
    sim = Simulator(policy, start_ticks=4).run(arrivals)
    # THEN the wake starts one worker, and the burst's tick asks for six at once
    assert (sim.decisions[0].action, sim.desired[0]) == ("wake", 1)
    burst = sim.decisions[6]
    assert (burst.action, burst.desired) == ("scale_out", 6), burst.reason
    assert not any("cool-down" in d.reason for d in sim.decisions), [
        d.reason for d in sim.decisions if "cool-down" in d.reason
    ]


def test_a_second_burst_within_the_cooldown_of_a_scale_out_waits() -> None:
    # GIVEN one worker running, a burst that asks for three, and 30 s later one that
    # asks for four (the first three still starting)
    sim = Simulator(DEV, start_ticks=12).run([1] + [0] * 5 + [250] + [0] * 5 + [150] + [0] * 30)
    # THEN the second scale-out waits out the cool-down counted from the first
    assert [d.action for d in sim.decisions[:7]] == ["wake"] + ["hold"] * 5 + ["scale_out"]
    held = sim.decisions[12]
    assert held.action == "hold" and "cool-down 60 s" in held.reason, held.reason
    assert max(sim.desired[:18]) == 3  # nothing more until the cool-down has passed
