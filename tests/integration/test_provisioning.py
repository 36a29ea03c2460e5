"""The local provisioner creates, on the emulator, what the CDK app creates in AWS."""

from __future__ import annotations

import json
import urllib.error

from switchyard.routing import CachedRouting, RoutingDocument, appconfig_extension_fetcher
from switchyard_local.bridge import ExtensionStandIn, HostedVersions
from switchyard_local.gateway import ApiKey, EmulatorKeys, Plan


def test_every_model_gets_two_lanes_each_with_a_dlq(manifest, provisioned, clients):
    sqs = clients("sqs")
    names = manifest.names("dev")
    for model in manifest.models:
        for lane in ("realtime", "batch"):
            url = provisioned.queues[model][lane]
            assert url.endswith(names.queue(model, lane))
            attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
            redrive = json.loads(attrs["RedrivePolicy"])
            assert redrive["maxReceiveCount"] == manifest.platform.max_receive_count
            assert redrive["deadLetterTargetArn"].endswith(names.dlq(model, lane))
            assert attrs["VisibilityTimeout"] == str(manifest.platform.visibility_timeout_seconds)


def test_tables_have_the_shared_key_schema_and_ttl(manifest, provisioned, clients):
    ddb = clients("dynamodb")
    names = manifest.names("dev")
    results = ddb.describe_table(TableName=names.results_table)["Table"]
    assert [k["AttributeName"] for k in results["KeySchema"]] == ["tenant", "request_id"]
    ttl = ddb.describe_time_to_live(TableName=names.results_table)["TimeToLiveDescription"]
    assert ttl["AttributeName"] == "expires_at"
    registry = ddb.describe_table(TableName=names.registry_table)["Table"]
    assert [k["AttributeName"] for k in registry["KeySchema"]] == ["model", "version"]


def test_buckets_exist_and_block_public_access(manifest, provisioned, clients):
    s3 = clients("s3")
    names = manifest.names("dev")
    for bucket in (names.artifacts_bucket, names.payloads_bucket, names.batch_drop_bucket):
        block = s3.get_public_access_block(Bucket=bucket)["PublicAccessBlockConfiguration"]
        assert all(block.values())


def test_each_tenant_has_a_key_in_its_tiers_usage_plan(manifest, provisioned, clients):
    api = clients("apigateway")
    plans = {p["name"]: p for p in api.get_usage_plans()["items"]}
    for tenant, spec in manifest.tenants.items():
        plan = plans[manifest.names("dev").usage_plan(spec.tier)]
        assert plan["throttle"]["rateLimit"] == manifest.tiers[spec.tier].rate
        assert plan["quota"]["limit"] == manifest.tiers[spec.tier].quota_per_day
        keys = api.get_usage_plan_keys(usagePlanId=plan["id"])["items"]
        assert provisioned.api_keys[tenant] in [k["value"] for k in keys]


def test_the_local_gateway_knows_each_keys_id_and_usage_plan(manifest, provisioned, clients):
    keys = EmulatorKeys(clients("apigateway"), ttl_seconds=60)
    for tenant, value in provisioned.api_keys.items():
        tier = manifest.tiers[manifest.tenants[tenant].tier]
        assert keys.key_for(value) == ApiKey(
            provisioned.api_key_ids[tenant],
            Plan(rate=tier.rate, burst=tier.burst, quota=tier.quota_per_day, period="DAY"),
        )
    assert keys.key_for("sy-unknown") is None


def test_a_disabled_key_is_no_longer_accepted(provisioned, clients):
    api = clients("apigateway")
    api.update_api_key(
        apiKey=provisioned.api_key_ids["acme"],
        patchOperations=[{"op": "replace", "path": "/enabled", "value": "false"}],
    )
    keys = EmulatorKeys(api, ttl_seconds=60)
    assert keys.key_for(provisioned.api_keys["acme"]) is None
    assert keys.key_for(provisioned.api_keys["globex"]) is not None


def test_routing_documents_are_served_through_the_bridge(manifest, provisioned, clients):
    versions = HostedVersions(clients("appconfig"), provisioned.appconfig_application_id)
    number, content = versions.latest("digits-cnn")
    assert RoutingDocument.model_validate_json(content).weights == {"v1": 100}
    newer = RoutingDocument(weights={"v1": 90, "v2": 10}).model_dump_json().encode()
    assert versions.publish("digits-cnn", newer) == number + 1
    assert versions.latest("digits-cnn") == (number + 1, newer)


def test_the_router_reads_routing_through_the_extension_stand_in(provisioned, clients):
    # GIVEN the AppConfig extension's HTTP API served from the emulator
    appconfig = clients("appconfig")
    extension = ExtensionStandIn(appconfig, provisioned.appconfig_application_id)
    try:
        # WHEN the router's own fetcher (the cloud code path) asks it for a document
        fetch = appconfig_extension_fetcher(
            provisioned.appconfig_application_id, "digits-cnn", extension.url
        )
        routing = CachedRouting(fetch, ttl_seconds=0)
        assert routing.document("digits-cnn").weights == {"v1": 100}
        # THEN a newly published document is what it reads next
        newer = RoutingDocument(weights={"v1": 90, "v2": 10}).model_dump_json().encode()
        HostedVersions(appconfig, provisioned.appconfig_application_id).publish("digits-cnn", newer)
        assert routing.document("digits-cnn").weights == {"v1": 90, "v2": 10}
        # and an unknown profile is a 404, as from the extension
        try:
            fetch("no-such-model")
            raise AssertionError("expected a 404")
        except urllib.error.HTTPError as exc:
            assert exc.code == 404
    finally:
        extension.close()
