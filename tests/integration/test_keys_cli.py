"""`switchyard keys`: every tenant's API key, from the running local platform's
``platform.json``, or with ``--aws`` from API Gateway (the emulator answering as
AWS), where only the stage's keys tagged with their tenant count."""

from __future__ import annotations

import json
import os

import pytest

from switchyard import aws
from switchyard.auth import TENANT_TAG


@pytest.fixture
def running(run_dir, provisioned):
    """The run folder of a platform that runs (this process) with the keys it made."""
    record = json.loads((run_dir / "platform.json").read_text())
    record.update(pid=os.getpid(), api_keys=provisioned.api_keys)
    (run_dir / "platform.json").write_text(json.dumps(record))
    return run_dir


def test_keys_lists_every_tenant_of_the_local_platform(cli, running, provisioned):
    # WHEN the operator asks for the keys
    code, out, _ = cli("keys")
    # THEN each tenant's key is printed on a line of its own, the first tenant first
    assert code == 0
    assert [line.split("\t") for line in out.splitlines()] == [
        [tenant, key] for tenant, key in provisioned.api_keys.items()
    ]
    assert list(provisioned.api_keys)[:2] == ["acme", "globex"]


def test_one_tenants_key_is_printed_bare_and_an_unknown_tenant_refused(cli, running, provisioned):
    # WHEN one tenant's key is asked for, as a shell assignment takes it
    code, out, _ = cli("keys", "--tenant", "globex")
    # THEN the value alone is printed
    assert (code, out) == (0, provisioned.api_keys["globex"] + "\n")
    assert json.loads(cli("keys", "--json")[1]) == provisioned.api_keys
    # AND a tenant without a key is refused in one line, naming those there are
    code, _, err = cli("keys", "--tenant", "initech")
    assert code == 2
    assert err == "switchyard: --tenant initech: no key for it (tenants: acme, globex)\n"


def test_keys_without_a_running_platform_say_how_to_start_one(cli, tmp_path):
    nowhere = tmp_path / "never-started"
    nowhere.mkdir()
    code, _, err = cli("keys", where=nowhere)
    assert code == 2
    assert "no local platform found" in err and "make up" in err


@pytest.fixture
def as_aws(emulator_url, monkeypatch):
    """boto3 pointed at the emulator through its own setting, as `--aws` runs."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", emulator_url)
    aws.client.cache_clear()
    yield
    aws.client.cache_clear()


def test_aws_keys_are_the_stages_keys_tagged_with_their_tenant(
    cli, provisioned, clients, as_aws, tmp_path
):
    # GIVEN the stage's keys (what provisioning made, as the CDK app makes them), and
    # beside them another stage's key for the same tenant and a key of no tenant
    api = clients("apigateway")
    api.create_api_key(name="switchyard-prod-acme", value="sy-prod-" + "x" * 20,
                       enabled=True, tags={TENANT_TAG: "acme"})  # fmt: skip
    api.create_api_key(name="switchyard-dev-someone", value="sy-untagged-" + "y" * 20,
                       enabled=True)  # fmt: skip
    # WHEN the operator reads the deployed dev stage's keys (no local platform there)
    nowhere = tmp_path / "no-local-platform"
    nowhere.mkdir()
    code, out, err = cli("keys", "--aws", "--stage", "dev", "--json", where=nowhere)
    # THEN exactly the dev stage's tenants' keys are listed, with their values
    assert code == 0, err
    assert json.loads(out) == provisioned.api_keys
