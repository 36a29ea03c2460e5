"""The age of a queue's oldest message as the local emulator answers CloudWatch's
``ApproximateAgeOfOldestMessage`` (``switchyard_local.sqs_metrics``); over the wire in
``tests/integration/test_queue_signals.py``."""

from __future__ import annotations

from dataclasses import dataclass

from switchyard_local.sqs_metrics import oldest_age_seconds

NOW_MS = 1_000_000.0


@dataclass
class Message:
    """The two fields of moto's ``Message`` the age reads."""

    sent_timestamp: int | None
    approximate_receive_count: int = 0


def test_the_first_message_in_queue_order_is_the_oldest() -> None:
    queue = [Message(NOW_MS - 7_500), Message(NOW_MS - 2_000)]
    assert oldest_age_seconds(queue, NOW_MS) == 7.5


def test_a_message_received_three_times_no_longer_counts_as_aws_defines_it() -> None:
    queue = [Message(NOW_MS - 60_000, 3), Message(NOW_MS - 60_000, 2), Message(NOW_MS - 1_000)]
    assert oldest_age_seconds(queue, NOW_MS) == 60.0
    assert oldest_age_seconds(queue[:1] + queue[2:], NOW_MS) == 1.0


def test_an_empty_queue_has_age_zero() -> None:
    assert oldest_age_seconds([], NOW_MS) == 0.0
    assert oldest_age_seconds([Message(NOW_MS - 5_000, 4)], NOW_MS) == 0.0
