"""When the router looks for a sync request's result (LookSchedule)."""

from __future__ import annotations

import random

import pytest

from switchyard_router.logic import LookSchedule


def looks_taken(schedule: LookSchedule, model: str, ready_at: float) -> tuple[int, float]:
    """Looks a request ready ``ready_at`` seconds into its wait takes, and how long
    its answer waits after it is ready (the schedule as PredictService.wait uses it)."""
    first = schedule.looks(model)
    at, n = 0.0, 0
    while True:
        at = first.pop(0) if first else at + schedule.next_gap(model, at)
        n += 1
        if at >= ready_at:
            return n, at - ready_at


def test_a_model_not_seen_yet_is_looked_at_soon_then_further_apart():
    schedule = LookSchedule()
    assert schedule.looks("m") == [0.02]
    gaps = [schedule.next_gap("m", w) for w in (0.0, 0.02, 0.1, 1.0, 4.0)]
    assert gaps == pytest.approx([0.005, 0.005, 0.025, 0.25, 0.25])


def test_an_idle_models_request_is_picked_up_within_250_ms_of_its_answer():
    """A model at zero: its last answers each waited for a worker to start (2 s),
    and none came in the last 5 s. This request's answer may come after a standby
    worker's start (1 s), a fresh one's (5 s) or at once from a warm worker."""
    clock = Clock()
    schedule = LookSchedule(clock=clock)
    for _ in range(8):
        schedule.saw("m", 2.0)
        clock.now += 60
    assert schedule.looks("m") == pytest.approx([0.25, 0.5])
    for ready_at in (5.0, 1.0, 0.05):
        n, pickup = looks_taken(schedule, "m", ready_at)
        assert pickup <= 0.25
        assert n <= 4 + ready_at * 4  # four looks a second
    assert schedule.next_gap("m", 4.0) == pytest.approx(0.25)
    assert schedule.next_gap("m", 0.4) == pytest.approx(0.1)  # a quarter, where shorter
    # its next answer ends the idle: the looks follow the answers again
    schedule.saw("m", 2.0)
    assert schedule.looks("m")[0] == pytest.approx(2.0)
    assert schedule.next_gap("m", 4.0) == pytest.approx(1.0)


def test_a_slow_model_answering_rarely_keeps_its_looks_where_its_answers_come():
    """A generation model asked every 4 s, each answer 10 s: never idle, so its
    requests are looked for at 10 s, not every 250 ms."""
    clock = Clock()
    schedule = LookSchedule(clock=clock)
    for _ in range(8):
        schedule.saw("m", 10.0)
        clock.now += 4
    assert schedule.looks("m")[0] == pytest.approx(10.0)
    assert looks_taken(schedule, "m", 10.0)[0] == 1


def test_a_busy_models_requests_keep_their_looks_a_quarter_of_the_wait_apart():
    """An overload: 64 answers of about 2 s in the last 5 s. A request waiting 6 s is
    looked for 1.5 s later, not every 250 ms."""
    schedule = LookSchedule(clock=Clock())
    for i in range(64):
        schedule.saw("m", 1.9 + i / 640)
    assert schedule.looks("m")[0] > 1.9
    assert schedule.next_gap("m", 6.0) == pytest.approx(1.5)


def test_an_answer_later_than_all_before_costs_a_few_looks_and_a_quarter_of_its_time():
    """Load rises: the model's last answers took 30 ms, this one takes 700."""
    schedule = LookSchedule()
    for _ in range(16):
        schedule.saw("m", 0.030)
    n, pickup = looks_taken(schedule, "m", 0.700)
    assert n <= 16
    assert pickup <= 0.700 / 4


def test_the_first_looks_are_at_the_median_and_the_90th_percentile_of_what_it_saw():
    schedule = LookSchedule(keep=100)
    for ms in range(51, 151):
        schedule.saw("m", ms / 1000)
    assert schedule.looks("m") == pytest.approx([0.1005, 0.1401])


def test_looks_are_at_least_5_ms_apart():
    schedule = LookSchedule()
    for _ in range(10):
        schedule.saw("m", 0.030)
    assert schedule.looks("m") == pytest.approx([0.030, 0.035])


def test_a_spread_of_times_is_looked_at_closer_than_its_percentiles():
    schedule = LookSchedule()
    for seconds in [0.04] * 10 + [0.7] * 6:
        schedule.saw("m", seconds)
    assert schedule.looks("m") == pytest.approx([0.04, 0.065])


def test_models_are_timed_apart_and_only_recent_requests_count():
    schedule = LookSchedule(keep=8)
    for _ in range(8):
        schedule.saw("slow", 2.0)
        schedule.saw("fast", 0.01)
    for _ in range(8):
        schedule.saw("slow", 0.2)
    assert schedule.looks("slow") == pytest.approx([0.2, 0.205])
    assert schedule.looks("fast") == pytest.approx([0.01, 0.015])


@pytest.mark.parametrize("spread", [0.01, 0.1, 0.5])
def test_a_request_costs_about_two_looks_whatever_the_spread_of_its_times(spread):
    """Times drawn around 100 ms, narrowly or widely: looks per request stay near
    two, and the answer's wait after it is ready grows with the spread only."""
    rng = random.Random(7)
    schedule = LookSchedule()
    draw = [0.1 * rng.lognormvariate(0, spread) for _ in range(2_000)]
    for t in draw[:64]:
        schedule.saw("m", t)
    taken = []
    for t in draw[64:]:
        taken.append(looks_taken(schedule, "m", t))
        schedule.saw("m", t)
    mean_looks = sum(n for n, _ in taken) / len(taken)
    mean_pickup = sum(p for _, p in taken) / len(taken)
    assert 1.2 < mean_looks < 2.2
    assert mean_pickup < 0.1 * spread + 0.005


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_looks_are_timed_by_the_last_64_answers_of_the_last_5_seconds():
    clock = Clock()
    schedule = LookSchedule(clock=clock)
    for ms in range(1, 101):  # the first 36 fall out of the 64 kept
        schedule.saw("m", ms / 1000)
    assert schedule.recent("m") == pytest.approx([ms / 1000 for ms in range(37, 101)])
    assert schedule.looks("m")[0] == pytest.approx(0.0685)


def test_an_overload_that_has_passed_leaves_the_window_within_5_seconds():
    """64 answers of a second each, then the load falls: once they are 5 s old, the
    fast answers since time the looks, and the next answer is not looked for late."""
    clock = Clock()
    schedule = LookSchedule(clock=clock)
    for _ in range(64):
        schedule.saw("m", 1.0)
    for _ in range(8):
        clock.now += 0.5
        schedule.saw("m", 0.04)
    # 4 s on: the first look follows the last 8, the others are still the overload's
    assert schedule.looks("m") == pytest.approx([0.04, 1.005])
    clock.now += 1.5
    assert schedule.looks("m") == pytest.approx([0.04, 0.045])
    assert looks_taken(schedule, "m", 0.04) == (1, pytest.approx(0.0))


def test_fewer_than_8_answers_in_5_seconds_leave_the_last_8_timing_the_looks():
    """A quiet model: its last answers, however old, say more than no answers."""
    clock = Clock()
    schedule = LookSchedule(clock=clock)
    for seconds in [2.0] * 4 + [0.05] * 8:
        schedule.saw("m", seconds)
    clock.now += 600
    assert schedule.recent("m") == [0.05] * 8
    schedule.saw("m", 0.06)
    assert schedule.recent("m") == [0.05] * 7 + [0.06]


def test_answers_faster_of_late_are_looked_for_at_the_median_of_the_last_8():
    """A queue draining: the last 8 answers took 50 ms, the 56 before them 300."""
    schedule = LookSchedule(clock=Clock())
    for seconds in [0.3] * 56 + [0.05] * 8:
        schedule.saw("m", seconds)
    first, *rest = schedule.looks("m")
    assert first == pytest.approx(0.05)
    assert rest == pytest.approx([0.305])  # the window's 90th, 5 ms after
    # answers slower of late keep the window's median first
    for _ in range(8):
        schedule.saw("m", 0.9)
    assert schedule.looks("m")[0] == pytest.approx(0.3)
