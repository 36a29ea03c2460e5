"""A private AWS emulator for the sections that call the platform's code
in-process (AWS calls, router cold start): the local platform's emulator on a
loopback port, provisioned from the manifest exactly as the local platform
provisions it."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.local_platform import use_local_credentials

REGION = "us-east-1"
STAGE = "dev"


@dataclass
class Emulator:
    url: str
    provisioned: Any  # switchyard_local.provision.Provisioned
    pid: int = 0  # the emulator's process

    @property
    def api_keys(self) -> dict[str, str]:
        return dict(self.provisioned.api_keys)

    def client(self, service: str) -> Any:
        """A client of the bench's own, outside the platform's cached (and counted)
        clients: for setting up and for checking, never for the measured path."""
        import boto3

        return boto3.session.Session().client(service, region_name=REGION, endpoint_url=self.url)


@contextmanager
def emulator() -> Iterator[Emulator]:
    from stacks.assets import MANIFEST_FILE
    from switchyard.manifest import load_manifest
    from switchyard_local.emulator import start_emulator
    from switchyard_local.provision import provision

    use_local_credentials()
    with tempfile.TemporaryDirectory(
        prefix="switchyard-bench-emulator-", ignore_cleanup_errors=True
    ) as workdir:
        running = start_emulator(Path(workdir) / "moto.log")
        try:
            provisioned = provision(load_manifest(MANIFEST_FILE), STAGE, running.url, REGION)
            yield Emulator(running.url, provisioned, running.pid)
        finally:
            running.stop()
