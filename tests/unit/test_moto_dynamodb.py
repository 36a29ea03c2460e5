"""The emulator's DynamoDB applies a conditional write as one step, as DynamoDB
does: of several writers of one item under the same condition, exactly one wins."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from switchyard_local import moto_dynamodb

WRITERS = 6


@pytest.fixture
def slow_conditions(monkeypatch) -> None:
    """Widen the window between moto's read of the item and its write, as a busy
    server does, so that interleaved writers meet in it every time."""
    import moto.dynamodb.models.table as table

    real = table.get_filter_expression

    def slow(*args, **kwargs):
        time.sleep(0.02)
        return real(*args, **kwargs)

    monkeypatch.setattr(table, "get_filter_expression", slow)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")


@pytest.fixture
def fixed() -> Iterator[None]:
    moto_dynamodb.apply()
    try:
        yield
    finally:
        moto_dynamodb.undo()


def race() -> tuple[list[str], str]:
    """A queued request; then several writers each try to end it at once (a
    worker's result, a cancel...), each only while it is still queued. The writers
    told they won, and what the item holds at the end."""
    with mock_aws():
        ddb = boto3.client("dynamodb", region_name="us-east-1")
        ddb.create_table(
            TableName="results",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        ddb.put_item(TableName="results", Item={"pk": {"S": "r"}, "status": {"S": "queued"}})
        won: list[str] = []
        start = threading.Barrier(WRITERS)

        def end_it(outcome: str) -> None:
            start.wait()
            try:
                ddb.put_item(
                    TableName="results",
                    Item={"pk": {"S": "r"}, "status": {"S": outcome}},
                    ConditionExpression="#st = :queued",
                    ExpressionAttributeNames={"#st": "status"},
                    ExpressionAttributeValues={":queued": {"S": "queued"}},
                )
            except ClientError as exc:
                assert exc.response["Error"]["Code"] == "ConditionalCheckFailedException"
            else:
                won.append(outcome)

        threads = [threading.Thread(target=end_it, args=(f"outcome-{i}",)) for i in range(WRITERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stored = ddb.get_item(TableName="results", Key={"pk": {"S": "r"}})["Item"]["status"]["S"]
        return won, stored


def test_moto_as_it_is_lets_interleaved_conditional_writes_all_win(slow_conditions):
    # The defect the fix is for: if moto ever applies conditions atomically itself,
    # this fails, and the fix can go.
    won, _ = race()
    assert len(won) > 1


def test_with_the_fix_exactly_one_conditional_write_wins(slow_conditions, fixed):
    won, stored = race()
    assert len(won) == 1 and stored == won[0]


def test_apply_is_idempotent_and_undo_puts_moto_back():
    from moto.dynamodb.models import DynamoDBBackend

    own = DynamoDBBackend.__dict__["put_item"]
    moto_dynamodb.apply()
    moto_dynamodb.apply()
    try:
        assert DynamoDBBackend.__dict__["put_item"] is not own
        assert DynamoDBBackend.__dict__["put_item"].__wrapped__ is own
    finally:
        moto_dynamodb.undo()
    assert DynamoDBBackend.__dict__["put_item"] is own
