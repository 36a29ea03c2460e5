"""Each component's policy is the one the CDK app synthesizes for its role
(``switchyard_local.role_policies``), and the emulator holds the component to it:
a statement taken out of a role's policy is a call refused."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from switchyard import aws
from switchyard_local.role_policies import Statement, create_users, enforce_iam, resolved_policies
from tests.integration.conftest import REGION

RESULTS_PUT = "dynamodb:PutItem"


@pytest.fixture(autouse=True)
def enforced(emulator_url):
    """IAM on for each test (after its fixtures provisioned as the operator)."""
    yield
    enforce_iam(emulator_url, on=False)


@pytest.fixture(scope="session")
def roles(manifest) -> dict[str, list[Statement]]:
    return resolved_policies(manifest, "dev", REGION)


def as_user(service: str, url: str, keys: Any) -> Any:
    return boto3.client(
        service,
        region_name=REGION,
        endpoint_url=url,
        config=Config(retries={"max_attempts": 1}),
        **keys.as_dict(),
    )


def without(statements: list[Statement], action: str, resource: str) -> list[Statement]:
    """``statements`` less every statement that grants ``action`` on ``resource``."""

    def grants(s: Statement) -> bool:
        actions = s["Action"] if isinstance(s["Action"], list) else [s["Action"]]
        resources = s["Resource"] if isinstance(s["Resource"], list) else [s["Resource"]]
        return action in actions and resource in resources

    return [s for s in statements if not grants(s)]


def refused(call: Any) -> bool:
    with pytest.raises(ClientError) as error:
        call()
    return error.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403


def test_every_component_has_its_role(roles, manifest):
    expected = {"openai", "requests", "key-authorizer", "splitter"}
    expected |= {f"router:{model}" for model in manifest.models}
    # a worker role per service: a model's own, or its pool's
    expected |= {f"worker:{service}" for service in manifest.services()}
    expected |= {f"drop:{tenant}" for tenant in manifest.tenants}
    assert expected <= set(roles)
    # resolved to the local names: no intrinsic is left
    assert "Fn::" not in str(roles) and "'Ref'" not in str(roles)


def test_the_router_without_its_results_statement_cannot_store_a_result(
    roles, provisioned, emulator_url
):
    # GIVEN the router's synthesized policy, and the same less its statement that
    # grants dynamodb:PutItem on the results table
    model = next(iter(provisioned.manifest.models))
    results_arn = f"arn:aws:dynamodb:{REGION}:123456789012:table/{provisioned.names.results_table}"
    policy = roles[f"router:{model}"]
    cut = without(policy, RESULTS_PUT, results_arn)
    assert len(cut) == len(policy) - 1
    iam = aws.client("iam", REGION, emulator_url)
    users = {"router-whole": {"router": policy}, "router-cut": {"router": cut}}
    keys = create_users(iam, users, operator=False)
    enforce_iam(emulator_url)
    item = {"tenant": {"S": "acme"}, "request_id": {"S": "r1"}}
    table = provisioned.names.results_table

    # WHEN each puts a result; THEN the whole policy may, the cut one is refused
    as_user("dynamodb", emulator_url, keys["router-whole"]).put_item(TableName=table, Item=item)
    cut_client = as_user("dynamodb", emulator_url, keys["router-cut"])
    assert refused(lambda: cut_client.put_item(TableName=table, Item=item))


def test_a_worker_may_not_take_another_model_s_work(roles, provisioned, emulator_url):
    mine, theirs = list(provisioned.manifest.models)[:2]
    iam = aws.client("iam", REGION, emulator_url)
    keys = create_users(iam, {"worker": {"worker": roles[f"worker:{mine}"]}}, False)
    enforce_iam(emulator_url)
    sqs = as_user("sqs", emulator_url, keys["worker"])
    sqs.receive_message(QueueUrl=provisioned.queues[mine]["realtime"], WaitTimeSeconds=0)
    assert refused(
        lambda: sqs.receive_message(
            QueueUrl=provisioned.queues[theirs]["realtime"], WaitTimeSeconds=0
        )
    )


def test_a_tenant_s_drop_credentials_reach_its_own_prefix_only(roles, provisioned, emulator_url):
    # GIVEN acme's drop role as synthesized
    iam = aws.client("iam", REGION, emulator_url)
    keys = create_users(iam, {"drop-acme": {"drop": roles["drop:acme"]}}, False)
    enforce_iam(emulator_url)
    s3 = as_user("s3", emulator_url, keys["drop-acme"])
    bucket = provisioned.names.batch_drop_bucket

    # WHEN it puts under its own prefix and under globex's
    s3.put_object(Bucket=bucket, Key="acme/minilm-embed/mine.jsonl", Body=b'"a"\n')
    with pytest.raises(ClientError) as theirs:
        s3.put_object(Bucket=bucket, Key="globex/minilm-embed/theirs.jsonl", Body=b'"a"\n')

    # THEN its own is stored and globex's is refused; other buckets are out of reach
    assert s3.get_object(Bucket=bucket, Key="acme/minilm-embed/mine.jsonl")["Body"].read()
    assert theirs.value.response["Error"]["Code"] == "AccessDenied"
    assert refused(
        lambda: s3.put_object(Bucket=provisioned.names.artifacts_bucket, Key="acme/x", Body=b"")
    )


def test_unknown_credentials_are_refused(provisioned, emulator_url):
    enforce_iam(emulator_url)
    s3 = boto3.client(
        "s3",
        region_name=REGION,
        endpoint_url=emulator_url,
        aws_access_key_id="AKIAUNKNOWN000000000",
        aws_secret_access_key="nothing",
    )
    with pytest.raises(ClientError) as refused_key:
        s3.put_object(Bucket=provisioned.names.batch_drop_bucket, Key="acme/x.jsonl", Body=b"")
    assert refused_key.value.response["Error"]["Code"] == "InvalidAccessKeyId"


def test_the_reads_that_list_jobs_and_resume_a_stream_are_granted(roles, provisioned, emulator_url):
    # GIVEN the requests function's role (GET /v1/jobs) and a generation model's
    # worker role (a worker taking over a stream reads the tokens already written)
    generator = next(m for m, spec in provisioned.manifest.models.items() if spec.generates)
    classifier = next(m for m, spec in provisioned.manifest.models.items() if not spec.generates)
    iam = aws.client("iam", REGION, emulator_url)
    keys = create_users(
        iam,
        {
            "requests": {"requests": roles["requests"]},
            "generator": {"worker": roles[f"worker:{generator}"]},
            "classifier": {"worker": roles[f"worker:{classifier}"]},
        },
        False,
    )
    enforce_iam(emulator_url)
    names = provisioned.names

    def query(who: str, table: str) -> Any:
        return as_user("dynamodb", emulator_url, keys[who]).query(
            TableName=table,
            KeyConditionExpression="tenant = :t",
            ExpressionAttributeValues={":t": {"S": "acme"}},
        )

    # WHEN each makes its Query; THEN it is allowed (both were refused: the roles
    # lacked dynamodb:Query), and a classifier's worker, which resumes nothing, may not
    assert query("requests", names.jobs_table)["Items"] == []
    assert query("generator", names.results_table)["Items"] == []
    assert refused(lambda: query("classifier", names.results_table))
