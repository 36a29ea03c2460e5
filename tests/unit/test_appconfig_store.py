"""The AWS side of `switchyard traffic`: the AppConfig calls it makes, checked with
botocore's Stubber (no account is reachable from here)."""

from __future__ import annotations

import io

import boto3
import pytest
from botocore.response import StreamingBody
from botocore.stub import ANY, Stubber

from switchyard.routing import RoutingDocument
from switchyard_local.traffic import AppConfigTrafficStore, TrafficError, describe

DOC = RoutingDocument(weights={"v1": 90, "v2": 10}, fallback="v1")


def body(text: bytes) -> StreamingBody:
    return StreamingBody(io.BytesIO(text), len(text))


@pytest.fixture
def stubbed():
    client = boto3.client(
        "appconfig", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    stub = Stubber(client)
    stub.add_response("list_applications", {"Items": [{"Id": "app1", "Name": "sy-dev-routing"}]})
    stub.add_response(
        "list_deployment_strategies", {"Items": [{"Id": "st1", "Name": "sy-dev-allatonce"}]}
    )
    return client, stub


def ids(stub):
    stub.add_response("list_environments", {"Items": [{"Id": "env1", "Name": "digits-cnn"}]})
    stub.add_response(
        "list_configuration_profiles", {"Items": [{"Id": "prof1", "Name": "digits-cnn"}]}
    )


def test_publish_creates_a_version_and_deploys_it_with_the_stage_strategy(stubbed):
    client, stub = stubbed
    ids(stub)
    stub.add_response(
        "create_hosted_configuration_version",
        {"ApplicationId": "app1", "ConfigurationProfileId": "prof1", "VersionNumber": 7},
        {
            "ApplicationId": "app1",
            "ConfigurationProfileId": "prof1",
            "Content": DOC.model_dump_json().encode(),
            "ContentType": "application/json",
            "Description": ANY,
        },
    )
    stub.add_response(
        "start_deployment",
        {"DeploymentNumber": 3, "State": "DEPLOYING"},
        {
            "ApplicationId": "app1",
            "EnvironmentId": "env1",
            "DeploymentStrategyId": "st1",
            "ConfigurationProfileId": "prof1",
            "ConfigurationVersion": "7",
            "Description": ANY,
        },
    )
    with stub:
        store = AppConfigTrafficStore(client, "sy-dev-routing", "sy-dev-allatonce")
        change = store.publish("digits-cnn", DOC, "alice", "canary v2")
    assert (change.number, change.by, change.why, change.state) == (
        3,
        "alice",
        "canary v2",
        "deploying",
    )
    stub.assert_no_pending_responses()


def test_a_rolled_back_deployment_is_shown_as_appconfigs_and_not_in_force(stubbed):
    client, stub = stubbed
    older = RoutingDocument(weights={"v1": 100})
    for _ in range(2):  # history() then deployed()
        ids(stub)
        stub.add_response(
            "list_deployments",
            {
                "Items": [
                    {
                        "DeploymentNumber": 2,
                        "ConfigurationVersion": "5",
                        "State": "ROLLED_BACK",
                    },
                    {
                        "DeploymentNumber": 1,
                        "ConfigurationVersion": "4",
                        "State": "COMPLETE",
                    },
                ]
            },
        )
        stub.add_response(
            "get_hosted_configuration_version",
            {
                "Content": body(DOC.model_dump_json().encode()),
                "Description": describe("alice", "canary v2"),
            },
        )
        stub.add_response(
            "get_deployment",
            {
                "EventLog": [
                    {
                        "EventType": "ROLLBACK_COMPLETED",
                        "Description": "alarm sy-dev-digits-cnn-error-rate",
                    }
                ]
            },
        )
        stub.add_response(
            "get_hosted_configuration_version",
            {
                "Content": body(older.model_dump_json().encode()),
                "Description": describe("bob", "initial"),
            },
        )
    with stub:
        store = AppConfigTrafficStore(client, "sy-dev-routing", "sy-dev-allatonce")
        history = store.history("digits-cnn")
        deployed = store.deployed("digits-cnn")
    assert [(c.number, c.state, c.by) for c in history] == [
        (2, "rolled_back", "AppConfig"),
        (1, "complete", "bob"),
    ]
    assert "error-rate" in history[0].why
    assert deployed.number == 1 and deployed.document.weights == {"v1": 100}


def test_a_missing_stack_is_named(stubbed):
    client, _ = stubbed
    stub = Stubber(client)
    stub.add_response("list_applications", {"Items": []})
    with stub, pytest.raises(TrafficError, match="is the stack deployed"):
        AppConfigTrafficStore(client, "sy-dev-routing", "sy-dev-allatonce")
