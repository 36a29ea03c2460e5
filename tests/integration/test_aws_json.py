"""The lighter way of the platform's most made calls (``switchyard.aws_json``):
against the emulator, with IAM enforced, each answer is what botocore's own way
gives, and no call goes botocore's way but the ones it leaves to botocore; against a
scripted server, what it leaves to botocore (a server error, a throttle, a damaged
answer) is made again by botocore, which retries it."""

from __future__ import annotations

import json
import zlib

import botocore.session
import pytest

from switchyard.aws_json import LeanClient, lean
from switchyard.tables import RESULTS
from tests.integration.test_http_transport import client_of, json_reply, scripted

REGION = "us-east-1"


def botocore_sends(client) -> list[str]:
    """The operations ``client`` makes botocore's way from now on (botocore's
    endpoint emits ``before-send`` for each request it sends)."""
    sent: list[str] = []
    client.meta.events.register(
        "before-send", lambda request, **_: sent.append(request.headers["X-Amz-Target"].decode())
    )
    return sent


def test_dynamodb_answers_as_botocores_way_does_and_never_goes_that_way(
    clients, provisioned, emulator_url
):
    # GIVEN the platform's DynamoDB client, and a plain botocore one beside it
    ours = clients("dynamodb")
    assert isinstance(ours, LeanClient)
    theirs = botocore.session.get_session().create_client(
        "dynamodb", region_name=REGION, endpoint_url=emulator_url
    )
    sent = botocore_sends(ours)
    table = provisioned.names.results_table
    key = {RESULTS.partition: {"S": "acme"}, RESULTS.sort: {"S": "r1"}}
    packed = bytes(range(256))
    # WHEN it writes an item with binary values, updates it and reads it back
    binary = {
        "p": {"B": packed},
        "s": {"BS": [b"\x00", b"\xff"]},
        "m": {"M": {"i": {"B": b"\x01"}}},
    }
    ours.put_item(TableName=table, Item={**key, **binary, "n": {"N": "1"}})
    updated = ours.update_item(
        TableName=table, Key=key, UpdateExpression="ADD n :one",
        ExpressionAttributeValues={":one": {"N": "1"}}, ReturnValues="ALL_NEW",
    )  # fmt: skip
    # THEN every answer is botocore's, the binary values as bytes at any depth
    assert updated["Attributes"]["n"] == {"N": "2"} and updated["Attributes"]["p"] == {"B": packed}
    for read in ("get_item", "batch_get_item"):
        args = (
            {"TableName": table, "Key": key, "ConsistentRead": True}
            if read == "get_item"
            else {"RequestItems": {table: {"Keys": [key], "ConsistentRead": True}}}
        )
        mine, botocores = getattr(ours, read)(**args), getattr(theirs, read)(**args)
        assert mine.pop("ResponseMetadata")["HTTPStatusCode"] == 200
        botocores.pop("ResponseMetadata")
        assert mine == botocores
    assert mine["Responses"][table][0]["m"] == {"M": {"i": {"B": b"\x01"}}}
    # AND a failed condition is the client's modeled exception, with the item as it was
    with pytest.raises(ours.exceptions.ConditionalCheckFailedException) as refused:
        ours.put_item(TableName=table, Item=key, ConditionExpression="attribute_not_exists(#sk)",
                      ExpressionAttributeNames={"#sk": RESULTS.sort},
                      ReturnValuesOnConditionCheckFailure="ALL_OLD")  # fmt: skip
    assert refused.value.response["Error"]["Code"] == "ConditionalCheckFailedException"
    assert refused.value.response["Item"]["p"] == {"B": packed}
    # AND none of these calls went botocore's way
    assert sent == []
    # AND an operation it does not make is botocore's, on the same client
    assert ours.describe_table(TableName=table)["Table"]["TableName"] == table
    assert sent == ["DynamoDB_20120810.DescribeTable"]


def test_sqs_sends_receives_and_deletes_this_way_and_leaves_its_errors_to_botocore(
    clients, provisioned
):
    sqs = clients("sqs")
    sent = botocore_sends(sqs)
    url = next(iter(provisioned.queues.values()))["realtime"]
    # WHEN a message with a binary attribute is sent, received and deleted
    raw = {"DataType": "Binary", "BinaryValue": b"\x00\x01"}
    sqs.send_message(
        QueueUrl=url, MessageBody=json.dumps({"text": "é"}), MessageAttributes={"raw": raw}
    )
    (message,) = sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"],
        MessageSystemAttributeNames=["ApproximateReceiveCount"],
    )["Messages"]  # fmt: skip
    # THEN it is received as sent, its binary attribute as bytes
    assert json.loads(message["Body"]) == {"text": "é"}
    assert message["MessageAttributes"]["raw"]["BinaryValue"] == b"\x00\x01"
    assert message["Attributes"]["ApproximateReceiveCount"] == "1"
    deleted = sqs.delete_message_batch(
        QueueUrl=url, Entries=[{"Id": "0", "ReceiptHandle": message["ReceiptHandle"]}]
    )
    assert [e["Id"] for e in deleted["Successful"]] == ["0"]
    assert sent == []
    # AND an error of SQS's is made again by botocore, which raises its modeled exception
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.send_message(QueueUrl=url + "-nowhere", MessageBody="x")
    assert sent == ["AmazonSQS.SendMessage"]


def test_each_call_is_seen_by_the_clients_event_handlers_once(clients, provisioned):
    # GIVEN handlers on the events botocore emits for a call, as a call counter has
    dynamodb = clients("dynamodb")
    seen: list[tuple[str, str]] = []
    for event in ("before-parameter-build", "before-call", "after-call"):
        dynamodb.meta.events.register(
            f"{event}.dynamodb.GetItem",
            lambda model, event_name, **_: seen.append((event_name.split(".")[0], model.name)),
        )
    answers: list[dict] = []
    dynamodb.meta.events.register(
        "after-call.dynamodb.GetItem", lambda parsed, **_: answers.append(parsed)
    )
    # WHEN one GetItem is made
    key = {RESULTS.partition: {"S": "acme"}, RESULTS.sort: {"S": "none"}}
    got = dynamodb.get_item(TableName=provisioned.names.results_table, Key=key)
    # THEN each handler saw it once, in botocore's order, the last with its answer
    assert seen == [("before-parameter-build", "GetItem"), ("before-call", "GetItem"),
                    ("after-call", "GetItem")]  # fmt: skip
    assert answers == [got]


def scripted_client(url: str, attempts: int):
    return lean(client_of(url, attempts=attempts))


@pytest.mark.parametrize(
    "first",
    [
        json_reply(500, b'{"__type": "com.amazonaws.dynamodb.v20120810#InternalServerError"}'),
        json_reply(400, b'{"__type": "com.amazonaws.dynamodb.v20120810#ThrottlingException"}'),
        json_reply(body=b'{"Item": {"a": {"S": "damaged"}}}', headers="x-amz-crc32: 1\r\n"),
    ],
    ids=["a server error", "a throttle", "a damaged answer"],
)
def test_what_it_cannot_take_is_made_again_by_botocore(first):
    # GIVEN a server whose first answer is one the lighter way leaves to botocore
    good = b'{"Item": {"a": {"S": "b"}}}'
    crc = f"x-amz-crc32: {zlib.crc32(good)}\r\n"
    with scripted(first, json_reply(body=good, headers=crc)) as server:
        client = scripted_client(server.url, attempts=1)
        # WHEN a GetItem is made
        got = client.get_item(TableName="t", Key={"k": {"S": "v"}})
        # THEN botocore made it again (one try of its own), and its answer is the call's
        assert got["Item"] == {"a": {"S": "b"}}
        assert len(server.requests) == 2
        assert [b"Botocore/" in r for r in server.requests] == [False, True]


def test_a_final_error_is_raised_at_once_without_botocore():
    code = "com.amazonaws.dynamodb.v20120810#ResourceNotFoundException"
    refused = json.dumps({"__type": code, "message": "no table"}).encode()
    with scripted(json_reply(400, refused)) as server:
        client = scripted_client(server.url, attempts=3)
        with pytest.raises(client.exceptions.ResourceNotFoundException) as raised:
            client.get_item(TableName="t", Key={"k": {"S": "v"}})
        assert raised.value.response["Error"] == {"Code": "ResourceNotFoundException",
                                                  "Message": "no table"}  # fmt: skip
        assert len(server.requests) == 1
