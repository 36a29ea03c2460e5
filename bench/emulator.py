"""A private AWS emulator for the sections that call the platform's code
in-process (AWS calls, router cold start): moto in server mode on a loopback port,
provisioned from the manifest exactly as the local platform provisions it."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import ROOT
from bench.platform_proc import free_port

REGION = "us-east-1"
STAGE = "dev"


@dataclass
class Emulator:
    url: str
    env: dict[str, str]  # the SWITCHYARD_* settings the platform's processes get
    api_keys: dict[str, str]
    provisioned: Any

    def client(self, service: str) -> Any:
        """A client of the bench's own, outside the platform's cached (and counted)
        clients: for setting up and for checking, never for the measured path."""
        import boto3

        return boto3.session.Session().client(service, region_name=REGION, endpoint_url=self.url)


@contextmanager
def emulator() -> Iterator[Emulator]:
    from switchyard import aws
    from switchyard_local.provision import provision
    from switchyard_local.supervisor import LocalPlatform, _wait_http

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "local")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local")
    port = free_port()
    workdir = Path(tempfile.mkdtemp(prefix="switchyard-bench-emulator-"))
    log = open(workdir / "moto.log", "wb")  # noqa: SIM115 - held for the emulator's life
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_http(f"{url}/moto-api/", 30, "the AWS emulator")
        local = LocalPlatform(emulator_port=port, run_dir=workdir)
        provisioned = provision(local.manifest, STAGE, lambda s: aws.client(s, REGION, url))
        yield Emulator(url, local.platform_env(provisioned), provisioned.api_keys, provisioned)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
        log.close()
