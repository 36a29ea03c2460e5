"""The AWS side of `switchyard traffic`: the AppConfig calls it makes, checked with
botocore's Stubber (no account is reachable from here)."""

from __future__ import annotations

import io

import boto3
import pytest
from botocore.response import StreamingBody
from botocore.stub import ANY, Stubber

from switchyard.routing import RoutingDocument
from switchyard_cli.traffic import AppConfigTrafficStore, TrafficError
from switchyard_local.routing_changes import describe

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


def deployments(stub, *states: str) -> None:
    """list_deployments answering with deployments newest first, in ``states``."""
    items = [
        {"DeploymentNumber": len(states) - i, "ConfigurationVersion": "1", "State": state}
        for i, state in enumerate(states)
    ]
    stub.add_response(
        "list_deployments",
        {"Items": items},
        {"ApplicationId": "app1", "EnvironmentId": "env1", "MaxResults": 5},
    )


def test_publish_creates_a_version_and_deploys_it_with_the_stage_strategy(stubbed):
    client, stub = stubbed
    ids(stub)
    deployments(stub, "COMPLETE", "ROLLED_BACK")
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


@pytest.mark.parametrize("state", ["DEPLOYING", "BAKING"])
def test_a_change_while_another_rolls_out_is_refused_before_anything_is_written(stubbed, state):
    client, stub = stubbed
    ids(stub)
    deployments(stub, state, "COMPLETE")
    with stub:
        store = AppConfigTrafficStore(client, "sy-dev-routing", "sy-dev-allatonce")
        with pytest.raises(
            TrafficError, match=f"change #2 of digits-cnn's routing is still {state.lower()}"
        ):
            store.publish("digits-cnn", DOC, "alice", "canary v2")
    stub.assert_no_pending_responses()  # no hosted version was created


def test_a_deployment_refused_by_appconfig_leaves_no_version_behind(stubbed):
    client, stub = stubbed
    ids(stub)
    deployments(stub, "COMPLETE")
    stub.add_response(
        "create_hosted_configuration_version",
        {"ApplicationId": "app1", "ConfigurationProfileId": "prof1", "VersionNumber": 8},
    )
    stub.add_client_error("start_deployment", "ConflictException", http_status_code=409)
    stub.add_response(
        "delete_hosted_configuration_version",
        {},
        {"ApplicationId": "app1", "ConfigurationProfileId": "prof1", "VersionNumber": 8},
    )
    with stub:
        store = AppConfigTrafficStore(client, "sy-dev-routing", "sy-dev-allatonce")
        with pytest.raises(TrafficError, match="started meanwhile; nothing was changed"):
            store.publish("digits-cnn", DOC, "alice", "canary v2")
    stub.assert_no_pending_responses()


def test_stopping_a_rollout_reverts_it_and_a_quiet_environment_has_none(stubbed):
    client, stub = stubbed
    ids(stub)
    deployments(stub, "BAKING", "COMPLETE")
    stub.add_response(
        "stop_deployment",
        {"DeploymentNumber": 2, "State": "ROLLED_BACK"},
        {
            "ApplicationId": "app1",
            "EnvironmentId": "env1",
            "DeploymentNumber": 2,
            "AllowRevert": True,
        },
    )
    ids(stub)
    deployments(stub, "REVERTED", "COMPLETE")
    with stub:
        store = AppConfigTrafficStore(client, "sy-dev-routing", "sy-dev-allatonce")
        assert store.stop_rollout("digits-cnn") == 2
        assert store.stop_rollout("digits-cnn") is None
    stub.assert_no_pending_responses()


def test_traffic_rollback_on_aws_stops_a_canary_that_is_still_rolling_out(monkeypatch, capsys):
    """`switchyard traffic rollback MODEL --aws` while the canary's deployment bakes:
    AppConfig stops it, and the CLI says which document is in force again."""
    from switchyard_cli import main as cli

    sts = boto3.client(
        "sts", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    sts_stub = Stubber(sts)
    sts_stub.add_response("get_caller_identity", {"Account": "123456789012"})
    appconfig = boto3.client(
        "appconfig", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    stub = Stubber(appconfig)
    # The stage's AppConfig names, as the CDK app creates them: the CLI finds them by name.
    stub.add_response(
        "list_applications", {"Items": [{"Id": "app1", "Name": "switchyard-dev-routing"}]}
    )
    stub.add_response(
        "list_deployment_strategies",
        {"Items": [{"Id": "st1", "Name": "switchyard-dev-allatonce"}]},
    )
    ids(stub)
    deployments(stub, "BAKING", "COMPLETE")
    stub.add_response("stop_deployment", {"DeploymentNumber": 2, "State": "ROLLED_BACK"})
    ids(stub)
    stub.add_response(
        "list_deployments",
        {
            "Items": [
                {"DeploymentNumber": 2, "ConfigurationVersion": "5", "State": "ROLLED_BACK"},
                {"DeploymentNumber": 1, "ConfigurationVersion": "4", "State": "COMPLETE"},
            ]
        },
    )
    stub.add_response(
        "get_hosted_configuration_version",
        {"Content": body(DOC.model_dump_json().encode()), "Description": describe("a", "x")},
    )
    stub.add_response("get_deployment", {"EventLog": []})
    stub.add_response(
        "get_hosted_configuration_version",
        {
            "Content": body(RoutingDocument(weights={"v1": 100}).model_dump_json().encode()),
            "Description": describe("bob", "initial"),
        },
    )
    clients = {"sts": sts, "appconfig": appconfig}
    # Only STS and AppConfig are called; the other stores' clients are made, unused.
    monkeypatch.setattr(
        cli.aws,
        "client",
        lambda service, *a, **k: clients.get(service) or boto3.client(service, "us-east-1"),
    )
    with sts_stub, stub:
        code = cli.main(["--aws", "traffic", "rollback", "digits-cnn"])
    assert code == 0
    assert (
        "stopped change #2 while it rolled out; in force again: v1=100" in capsys.readouterr().out
    )
    stub.assert_no_pending_responses()
