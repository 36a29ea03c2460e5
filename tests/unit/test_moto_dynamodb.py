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


def tables(ddb) -> None:
    for name in ("results", "jobs"):
        ddb.create_table(
            TableName=name,
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )


def chunk_done(ddb, rid: str, job_status: str = "queued") -> None:
    """A chunk's result and its job's count, as one transaction (as the workers
    write them): only while the job is still ``job_status``."""
    ddb.transact_write_items(
        TransactItems=[
            {"Put": {"TableName": "results", "Item": {"pk": {"S": rid}, "status": {"S": "done"}}}},
            {
                "Update": {
                    "TableName": "jobs",
                    "Key": {"pk": {"S": "job"}},
                    "UpdateExpression": "ADD chunks :one",
                    "ConditionExpression": "#st = :st",
                    "ExpressionAttributeNames": {"#st": "status"},
                    "ExpressionAttributeValues": {":one": {"N": "1"}, ":st": {"S": job_status}},
                }
            },
        ]
    )


@pytest.fixture
def tables_may_not_be_copied(monkeypatch):
    """A deep copy of a whole table fails (moto's own transaction makes one)."""
    from moto.dynamodb.models.table import Table

    def refuse(self, memo):
        raise AssertionError("a whole table was copied")

    monkeypatch.setattr(Table, "__deepcopy__", refuse, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")


def test_moto_as_it_is_copies_every_table_a_transaction_names(tables_may_not_be_copied):
    # The cost the fix is for (a chunk's transaction copied the whole results table):
    # if moto stops copying tables, this fails, and that part of the fix can go.
    with mock_aws():
        ddb = boto3.client("dynamodb", region_name="us-east-1")
        tables(ddb)
        ddb.put_item(TableName="jobs", Item={"pk": {"S": "job"}, "status": {"S": "queued"}})
        with pytest.raises(AssertionError, match="a whole table was copied"):
            chunk_done(ddb, "c1")


def test_with_the_fix_a_transaction_copies_no_table_and_is_still_all_or_nothing(
    tables_may_not_be_copied, fixed
):
    with mock_aws():
        ddb = boto3.client("dynamodb", region_name="us-east-1")
        tables(ddb)
        ddb.put_item(TableName="jobs", Item={"pk": {"S": "job"}, "status": {"S": "queued"}})
        ddb.put_item(TableName="results", Item={"pk": {"S": "c2"}, "status": {"S": "queued"}})

        # GIVEN a transaction that succeeds: both of its writes are made
        chunk_done(ddb, "c1")
        job = ddb.get_item(TableName="jobs", Key={"pk": {"S": "job"}})["Item"]
        assert job["chunks"] == {"N": "1"}

        # WHEN one fails on its second write's condition, over an item that existed
        # and (another time) one that did not
        for rid in ("c2", "c3"):
            with pytest.raises(ClientError) as failed:
                chunk_done(ddb, rid, job_status="cancelled")
            assert failed.value.response["Error"]["Code"] == "TransactionCanceledException"

        # THEN neither left anything behind: the items are as they were
        item = ddb.get_item(TableName="results", Key={"pk": {"S": "c2"}})["Item"]
        assert item == {"pk": {"S": "c2"}, "status": {"S": "queued"}}
        assert "Item" not in ddb.get_item(TableName="results", Key={"pk": {"S": "c3"}})
        job = ddb.get_item(TableName="jobs", Key={"pk": {"S": "job"}})["Item"]
        assert job["chunks"] == {"N": "1"}


def queries() -> list:
    """Queries of one partition among others, of every kind the platform and
    DynamoDB's users make: ranges, prefixes, paging, both directions."""
    with mock_aws():
        ddb = boto3.client("dynamodb", region_name="us-east-1")
        ddb.create_table(
            TableName="results",
            KeySchema=[
                {"AttributeName": "tenant", "KeyType": "HASH"},
                {"AttributeName": "request_id", "KeyType": "RANGE"},
            ],
            AttributeDefinitions=[
                {"AttributeName": "tenant", "AttributeType": "S"},
                {"AttributeName": "request_id", "AttributeType": "S"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        for tenant in ("acme", "globex"):
            for i in range(40):
                for key in (f"r{i:03d}", f"r{i:03d}#t{i % 7:06d}"):
                    ddb.put_item(
                        TableName="results",
                        Item={
                            "tenant": {"S": tenant},
                            "request_id": {"S": key},
                            "n": {"N": str(i)},
                        },
                    )
        asked = [
            (
                "#pk = :t AND #sk BETWEEN :lo AND :hi",
                {":lo": {"S": "r010#t"}, ":hi": {"S": "r010#t~"}},
            ),
            ("#pk = :t AND #sk BETWEEN :lo AND :hi", {":lo": {"S": "r005"}, ":hi": {"S": "r020"}}),
            ("#pk = :t AND begins_with(#sk, :p)", {":p": {"S": "r03"}}),
            ("#pk = :t AND #sk > :lo", {":lo": {"S": "r035"}}),
            ("#pk = :t", {}),
        ]
        answers = []
        for condition, values in asked:
            for forward in (True, False):
                request = {
                    "TableName": "results",
                    "KeyConditionExpression": condition,
                    "ExpressionAttributeNames": {
                        "#pk": "tenant",
                        **({"#sk": "request_id"} if "#sk" in condition else {}),
                    },
                    "ExpressionAttributeValues": {":t": {"S": "acme"}, **values},
                    "ScanIndexForward": forward,
                    "Limit": 7,
                }
                pages = []
                while True:
                    page = ddb.query(**request)
                    pages.append([item["request_id"]["S"] for item in page["Items"]])
                    if "LastEvaluatedKey" not in page:
                        break
                    request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
                answers.append(pages)
        return answers


def test_a_query_answers_the_same_when_it_reads_its_partition_only(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    # GIVEN moto's answers, which read every item of the table for each query
    expected = queries()
    assert any(len(pages) > 1 for pages in expected)  # paging is exercised
    assert expected[0] == [["r010#t000003"]] and expected[1] == [["r010#t000003"]]
    # WHEN a query reads its partition, narrowed to its range, instead
    moto_dynamodb.apply()
    try:
        answered = queries()
    finally:
        moto_dynamodb.undo()
    # THEN every query and every page answers the same
    assert answered == expected


def sized_writes() -> list:
    """What moto answers to puts and an update around its item size limit (405,000
    bytes, counted over names and values): each outcome, and each item's size."""
    with mock_aws():
        ddb = boto3.client("dynamodb", region_name="us-east-1")
        tables(ddb)
        outcomes = []
        # Besides the padding: "pk" + "r" + "pad" + "many" + "1", 11 bytes.
        for pad in (399_000, 404_988, 404_989, 404_990, 500_000):
            item = {"pk": {"S": "r"}, "pad": {"S": "x" * pad}, "many": {"N": "1"}}
            try:
                ddb.put_item(TableName="results", Item=item)
                got = ddb.get_item(TableName="results", Key={"pk": {"S": "r"}})["Item"]
                outcomes.append(("kept", len(got["pad"]["S"])))
            except ClientError as exc:
                outcomes.append(("refused", pad, exc.response["Error"]["Message"]))
        try:
            ddb.update_item(
                TableName="results",
                Key={"pk": {"S": "r"}},
                UpdateExpression="SET more = :v",
                ExpressionAttributeValues={":v": {"S": "y" * 1000}},
            )
            outcomes.append(("updated",))
        except ClientError as exc:
            outcomes.append(("refused", "update", exc.response["Error"]["Message"]))
        return outcomes


def test_an_item_is_refused_at_the_same_size_when_its_size_is_kept_as_it_goes(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    # GIVEN what moto answers around its limit, summing every attribute at each one
    expected = sized_writes()
    assert {o[0] for o in expected} == {"kept", "refused"}  # both sides of the limit
    # WHEN an item's size is kept as it is built
    moto_dynamodb.apply()
    try:
        answered = sized_writes()
    finally:
        moto_dynamodb.undo()
    # THEN the same items are kept and refused, with the same errors
    assert answered == expected
