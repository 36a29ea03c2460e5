"""Integration tier: the AWS emulator (moto in server mode) over its wire protocol."""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from botocore.validate import validate_parameters

from stacks.assets import MANIFEST_FILE
from switchyard import aws
from switchyard.manifest import load_manifest
from switchyard_local.emulator import start_emulator
from switchyard_local.provision import provision
from switchyard_local.role_policies import ADMIN, create_users, enforce_iam, iam_wanted

REGION = "us-east-1"
TEST_MANIFEST_OVERRIDES = {"visibility_timeout_seconds": 10, "max_receive_count": 3}


@pytest.fixture(scope="session")
def emulator_url(tmp_path_factory):
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
    emulator = start_emulator(tmp_path_factory.mktemp("emulator") / "moto.log")
    try:
        yield emulator.url
    finally:
        emulator.stop()


def _check_parameters(params: dict, model: Any, **_: Any) -> None:
    """Raises botocore's ParamValidationError for a call whose parameters its
    operation's model does not allow."""
    validate_parameters(params, model.input_shape)


@pytest.fixture
def clients(emulator_url):
    """Clients of a fresh emulator, as the operator (an IAM user that may do
    anything; its key in this process's environment)."""
    enforce_iam(emulator_url, on=False)
    request = urllib.request.Request(f"{emulator_url}/moto-api/reset", method="POST")
    urllib.request.urlopen(request).close()
    operator = create_users(aws.client("iam", REGION, emulator_url), {})[ADMIN]
    os.environ.update(operator.environment())
    aws.reset_clients()
    # The clients ship without botocore's check of each call's parameters (the
    # service checks them; switchyard.aws says why): here every call the platform
    # makes is checked against the service's model, before it is sent.
    events = aws._session().get_component("event_emitter")
    events.register_last("before-parameter-build", _check_parameters)
    # IAM enforced, as the local platform enforces it (SWITCHYARD_LOCAL_IAM=0 turns
    # it off); tests of IAM turn it on themselves.
    enforce_iam(emulator_url, on=iam_wanted())

    def make(service: str):
        return aws.client(service, REGION, emulator_url)

    return make


@pytest.fixture
def sqs(clients):
    """The emulator's SQS, as the tests of queues themselves call it."""
    return clients("sqs")


@pytest.fixture(scope="session")
def manifest():
    base = load_manifest(MANIFEST_FILE)
    platform = base.platform.model_copy(update=TEST_MANIFEST_OVERRIDES)
    return base.model_copy(update={"platform": platform})


@pytest.fixture
def provisioned(manifest, clients, emulator_url):
    return provision(manifest, "dev", emulator_url, REGION)


@pytest.fixture
def run_dir(provisioned, tmp_path) -> Path:
    """A run folder as the local platform leaves it for the CLI: ``platform.json``
    with its settings, names and first tenant."""
    record = {
        "settings": provisioned.settings_values(),
        "names": provisioned.resource_names(),
        "default_tenant": "acme",
    }
    (tmp_path / "platform.json").write_text(json.dumps(record))
    return tmp_path


@pytest.fixture
def cli(run_dir, capsys):
    """``switchyard`` as an operator runs it, on ``run_dir`` (or ``where``): its exit
    code, output and errors."""
    from switchyard_cli.main import main

    def run(*args: str, where: Path | None = None) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(["--run-dir", str(where or run_dir), *args])
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture(scope="session")
def models_dir() -> Path:
    out = Path(__file__).resolve().parents[2] / "build" / "models"
    from switchyard_local.models import build_all

    build_all(out)
    return out
