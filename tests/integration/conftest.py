"""Integration tier: the AWS emulator (moto in server mode) over its wire protocol."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from switchyard import aws
from switchyard.manifest import load_manifest
from switchyard_local.provision import provision
from switchyard_local.supervisor import _wait_http, free_port

REGION = "us-east-1"
TEST_MANIFEST_OVERRIDES = {"visibility_timeout_seconds": 10, "max_receive_count": 3}


@pytest.fixture(scope="session")
def emulator_url(tmp_path_factory):
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
    port = free_port()
    log = open(tmp_path_factory.mktemp("emulator") / "moto.log", "wb")  # noqa: SIM115
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_http(f"{url}/moto-api/", 30, "the AWS emulator")
        yield url
    finally:
        process.terminate()
        process.wait(10)
        log.close()


@pytest.fixture
def clients(emulator_url):
    request = urllib.request.Request(f"{emulator_url}/moto-api/reset", method="POST")
    urllib.request.urlopen(request).close()

    def make(service: str):
        return aws.client(service, REGION, emulator_url)

    return make


@pytest.fixture(scope="session")
def manifest():
    base = load_manifest()
    platform = base.platform.model_copy(update=TEST_MANIFEST_OVERRIDES)
    return base.model_copy(update={"platform": platform})


@pytest.fixture
def provisioned(manifest, clients):
    return provision(manifest, "dev", clients)


@pytest.fixture(scope="session")
def models_dir() -> Path:
    out = Path(__file__).resolve().parents[2] / "build" / "models"
    from switchyard_local.models import build_all

    build_all(out)
    return out
