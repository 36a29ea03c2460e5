"""The emulator under IAM answers as AWS does (``switchyard_local.moto_iam``): each
call is evaluated against its caller's policies (DynamoDB on the tables it touches,
the direct answers as moto's own), unknown keys are refused, and a missing key is
403 to a caller that may not list its bucket; the platform's three reads of a key
that may be missing end as they should under that answer."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from switchyard.payloads import PayloadMissing, S3PayloadStore
from switchyard_local.role_policies import enforce_iam
from tests.integration.conftest import REGION

ACCOUNT = "123456789012"  # moto's
BUCKET = "iam-bucket"
TABLE = "iam-table"


def client_as(service: str, emulator_url: str, keys: dict[str, str]) -> Any:
    return boto3.client(
        service,
        region_name=REGION,
        endpoint_url=emulator_url,
        config=Config(retries={"max_attempts": 1}),
        **keys,
    )


def user_with(iam: Any, name: str, statements: list[dict[str, Any]]) -> dict[str, str]:
    """An IAM user whose one inline policy is ``statements``: its access key."""
    iam.create_user(UserName=name)
    document = {"Version": "2012-10-17", "Statement": statements}
    iam.put_user_policy(UserName=name, PolicyName="own", PolicyDocument=json.dumps(document))
    key = iam.create_access_key(UserName=name)["AccessKey"]
    return {
        "aws_access_key_id": key["AccessKeyId"],
        "aws_secret_access_key": key["SecretAccessKey"],
    }


def allow(actions: list[str], resource: str) -> dict[str, Any]:
    return {"Effect": "Allow", "Action": actions, "Resource": resource}


@pytest.fixture
def iam_world(clients, emulator_url) -> Iterator[Any]:
    """A bucket with one object, a table and two queues, made before IAM is on; IAM
    on for the test, off after."""
    s3, ddb, sqs = clients("s3"), clients("dynamodb"), clients("sqs")
    s3.create_bucket(Bucket=BUCKET)
    s3.put_object(Bucket=BUCKET, Key="there.json", Body=b'{"a": 1}')
    ddb.create_table(
        TableName=TABLE,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    ddb.put_item(TableName=TABLE, Item={"pk": {"S": "one"}})
    queues = {name: sqs.create_queue(QueueName=name)["QueueUrl"] for name in ("mine", "theirs")}
    iam = clients("iam")
    table_arn = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{TABLE}"
    reader = user_with(
        iam,
        "reader",
        [
            allow(["s3:GetObject"], f"arn:aws:s3:::{BUCKET}/*"),
            allow(["dynamodb:GetItem", "dynamodb:UpdateItem"], table_arn),
            allow(["sqs:SendMessage"], f"arn:aws:sqs:{REGION}:{ACCOUNT}:mine"),
            allow(["cloudwatch:GetMetricData"], "*"),
        ],
    )
    keeper = user_with(iam, "keeper", [allow(["apigateway:*"], "*")])
    lister = user_with(
        iam,
        "lister",
        [
            allow(["s3:GetObject"], f"arn:aws:s3:::{BUCKET}/*"),
            allow(["s3:ListBucket"], f"arn:aws:s3:::{BUCKET}"),
        ],
    )
    enforce_iam(emulator_url)
    try:

        class World:
            url = emulator_url
            keys = {"reader": reader, "lister": lister, "keeper": keeper}
            queue_urls = queues

            @staticmethod
            def client(service: str, who: str) -> Any:
                return client_as(service, emulator_url, World.keys[who])

        yield World
    finally:
        enforce_iam(emulator_url, on=False)


def code_of(call: Any) -> str:
    with pytest.raises(ClientError) as refused:
        call()
    return refused.value.response["Error"]["Code"]


def refused(call: Any) -> bool:
    """Whether ``call`` is refused 403 (moto answers JSON services' refusals in XML,
    so botocore names only the status where AWS says AccessDeniedException)."""
    with pytest.raises(ClientError) as error:
        call()
    return error.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403


def test_unknown_credentials_are_refused(iam_world):
    s3 = client_as(
        "s3", iam_world.url, {"aws_access_key_id": "local", "aws_secret_access_key": "x"}
    )
    assert code_of(lambda: s3.list_buckets()) == "InvalidAccessKeyId"
    ddb = client_as(
        "dynamodb", iam_world.url, {"aws_access_key_id": "local", "aws_secret_access_key": "x"}
    )
    assert refused(lambda: ddb.get_item(TableName=TABLE, Key={"pk": {"S": "one"}}))


def test_a_request_signed_with_another_secret_is_refused(iam_world):
    keys = {**iam_world.keys["reader"], "aws_secret_access_key": "not-the-secret"}
    ddb = client_as("dynamodb", iam_world.url, keys)
    assert refused(lambda: ddb.get_item(TableName=TABLE, Key={"pk": {"S": "one"}}))
    sqs = client_as("sqs", iam_world.url, keys)
    assert refused(
        lambda: sqs.send_message(QueueUrl=iam_world.queue_urls["mine"], MessageBody="hi")
    )


def test_a_request_with_no_body_passes_its_signature_check(iam_world):
    # API Gateway's REST reads (how the local gateway loads keys and usage plans) are
    # GETs with no body: signed over the empty payload, as moto now checks them
    apigateway = iam_world.client("apigateway", "keeper")
    assert isinstance(apigateway.get_usage_plans()["items"], list)
    assert isinstance(apigateway.get_rest_apis(limit=5)["items"], list)
    # and the signature is still checked: a wrong secret is refused
    wrong = {**iam_world.keys["keeper"], "aws_secret_access_key": "not-the-secret"}
    assert code_of(lambda: client_as("apigateway", iam_world.url, wrong).get_usage_plans())


def test_a_missing_key_is_403_to_a_caller_that_may_not_list_and_404_to_one_that_may(iam_world):
    reader, lister = iam_world.client("s3", "reader"), iam_world.client("s3", "lister")
    assert reader.get_object(Bucket=BUCKET, Key="there.json")["Body"].read() == b'{"a": 1}'
    assert code_of(lambda: reader.get_object(Bucket=BUCKET, Key="gone.json")) == "AccessDenied"
    assert code_of(lambda: reader.head_object(Bucket=BUCKET, Key="gone.json")) == "403"
    assert code_of(lambda: lister.get_object(Bucket=BUCKET, Key="gone.json")) == "NoSuchKey"
    assert code_of(lambda: lister.head_object(Bucket=BUCKET, Key="gone.json")) == "404"
    assert code_of(lambda: reader.put_object(Bucket=BUCKET, Key="x", Body=b"")) == "AccessDenied"


def test_dynamodb_calls_are_evaluated_on_their_table(iam_world, clients):
    ddb = iam_world.client("dynamodb", "reader")
    key = {"pk": {"S": "one"}}
    assert ddb.get_item(TableName=TABLE, Key=key)["Item"] == key  # a direct answer
    ddb.update_item(
        TableName=TABLE,
        Key=key,
        UpdateExpression="SET #s = :s",
        ExpressionAttributeNames={"#s": "status"},
        ExpressionAttributeValues={":s": {"S": "done"}},
    )
    # not granted: a put (a direct answer, refused by moto), a scan, another table
    assert refused(lambda: ddb.put_item(TableName=TABLE, Item=key))
    assert refused(lambda: ddb.scan(TableName=TABLE))
    assert refused(lambda: ddb.get_item(TableName="other", Key=key))


def test_a_changed_policy_holds_from_the_next_call(iam_world, clients):
    # The emulator keeps what it found allowed for the direct answers until a call
    # to IAM; a policy taken away, then given back, holds from the next call.
    ddb = iam_world.client("dynamodb", "reader")
    key = {"pk": {"S": "one"}}
    assert ddb.get_item(TableName=TABLE, Key=key)["Item"] == key
    assert ddb.get_item(TableName=TABLE, Key=key)["Item"] == key
    iam = clients("iam")
    document = iam.get_user_policy(UserName="reader", PolicyName="own")["PolicyDocument"]
    iam.delete_user_policy(UserName="reader", PolicyName="own")
    assert refused(lambda: ddb.get_item(TableName=TABLE, Key=key))
    iam.put_user_policy(UserName="reader", PolicyName="own", PolicyDocument=json.dumps(document))
    assert ddb.get_item(TableName=TABLE, Key=key)["Item"] == key


def test_a_send_is_evaluated_on_its_queue(iam_world):
    sqs = iam_world.client("sqs", "reader")
    sqs.send_message(QueueUrl=iam_world.queue_urls["mine"], MessageBody="hi")  # direct
    assert refused(
        lambda: sqs.send_message(QueueUrl=iam_world.queue_urls["theirs"], MessageBody="hi")
    )


def test_a_batch_call_to_sqs_is_authorized_by_its_single_calls_permission(iam_world):
    # GIVEN a caller granted sqs:SendMessage on its queue only (no *Batch action is an
    # IAM action: AWS authorizes a batch by its single call)
    sqs = iam_world.client("sqs", "reader")
    entries = [{"Id": "one", "MessageBody": "hi"}, {"Id": "two", "MessageBody": "there"}]
    # THEN it may send a batch to its queue, and not to another
    sent = sqs.send_message_batch(QueueUrl=iam_world.queue_urls["mine"], Entries=entries)
    assert [e["Id"] for e in sent["Successful"]] == ["one", "two"]
    assert refused(
        lambda: sqs.send_message_batch(QueueUrl=iam_world.queue_urls["theirs"], Entries=entries)
    )


def test_cloudwatch_is_authorized_by_its_iam_actions_not_its_signing_name(iam_world):
    # GIVEN a caller granted cloudwatch:GetMetricData (CloudWatch signs as "monitoring")
    query = {
        "MetricDataQueries": [
            {
                "Id": "age",
                "MetricStat": {
                    "Metric": {
                        "Namespace": "AWS/SQS",
                        "MetricName": "ApproximateAgeOfOldestMessage",
                        "Dimensions": [{"Name": "QueueName", "Value": "mine"}],
                    },
                    "Period": 60,
                    "Stat": "Maximum",
                },
            }
        ],
        "StartTime": time.time() - 300,
        "EndTime": time.time(),
    }
    # THEN it may read metrics, and one granted nothing of CloudWatch's may not
    assert "MetricDataResults" in iam_world.client("cloudwatch", "reader").get_metric_data(**query)
    assert refused(lambda: iam_world.client("cloudwatch", "lister").get_metric_data(**query))


def test_an_expired_payload_is_missing_to_a_role_that_may_not_list(iam_world):
    store = S3PayloadStore(iam_world.client("s3", "reader"), BUCKET)
    assert store.get_json(f"s3://{BUCKET}/there.json") == {"a": 1}
    with pytest.raises(PayloadMissing):
        store.get_json(f"s3://{BUCKET}/expired.json")


def test_a_job_whose_input_is_missing_is_404_to_a_role_that_may_not_list(iam_world):
    from harness.fakes import FakeRegistry, version_record
    from switchyard_router.jobs_api import JobsApi, JobSubmission
    from switchyard_router.logic import RequestRejected

    api = JobsApi(store=None, s3=iam_world.client("s3", "reader"),  # type: ignore[arg-type]
                  registry=FakeRegistry(version_record("minilm-embed")),
                  models=["minilm-embed"], drop_bucket=BUCKET, ttl_seconds=60)  # fmt: skip
    uri = f"s3://{BUCKET}/acme/minilm-embed/none.jsonl"
    with pytest.raises(RequestRejected) as rejected:
        api.submit("acme", JobSubmission(model="minilm-embed", input_uri=uri))
    assert (rejected.value.status, rejected.value.code) == (404, "no_such_file")


def test_a_deleted_file_s_next_slice_is_gone_to_a_role_that_may_not_list(iam_world):
    from switchyard_batch.splitter import FILE_GONE, lines_from

    s3 = iam_world.client("s3", "reader")
    etag = s3.head_object(Bucket=BUCKET, Key="there.json")["ETag"]
    with pytest.raises(ClientError) as gone:
        list(lines_from(s3, BUCKET, "deleted.jsonl", etag, 0, 100, 10))
    assert gone.value.response["Error"]["Code"] in FILE_GONE
