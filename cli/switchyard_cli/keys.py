"""``switchyard keys``: every tenant's API key, for the operator to hand over.

Locally the keys are in the running platform's ``platform.json`` (the supervisor
writes it at start, with the keys it provisioned in the emulator's API Gateway).
With ``--aws`` they are read from API Gateway (``GetApiKeys`` with their values):
the stage's keys are those named ``<prefix>-<stage>-<tenant>`` and tagged
``switchyard:tenant`` with that tenant, as the CDK app makes them. The platform's
own roles may not read key values; an operator's credentials may.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from switchyard import aws
from switchyard.auth import TENANT_TAG
from switchyard.manifest import Manifest
from switchyard_cli.targets import CommandError, aws_region, manifest_of, platform_info

ABOUT = (
    "every tenant's API key: the running local platform's, or with --aws the deployed "
    "stage's, read from API Gateway"
)


def add_command(commands: Any) -> None:
    """The ``keys`` command (``--aws``, ``--run-dir`` and the rest are the main parser's)."""
    keys = commands.add_parser("keys", help=ABOUT, description=ABOUT)
    keys.add_argument(
        "--tenant",
        help="this tenant's key alone, printed bare (KEY=$(switchyard keys --tenant acme))",
    )
    keys.add_argument("--json", action="store_true", help="tenant -> key, as JSON")
    keys.set_defaults(func=_keys)


def _keys(args: argparse.Namespace) -> int:
    if args.aws:
        found = deployed_keys(args, manifest_of(args))
    else:
        found = dict(platform_info(args.run_dir).get("api_keys", {}))
    if args.tenant is not None:
        if args.tenant not in found:
            known = ", ".join(sorted(found)) or "none"
            raise CommandError(f"--tenant {args.tenant}: no key for it (tenants: {known})")
        found = {args.tenant: found[args.tenant]}
    if args.json:
        print(json.dumps(found, indent=2))
    elif args.tenant is not None:
        print(found[args.tenant])
    else:
        for tenant, key in found.items():
            print(f"{tenant}\t{key}")
    return 0


def deployed_keys(args: argparse.Namespace, manifest: Manifest) -> dict[str, str]:
    """Tenant -> API key value of the deployed stage ``args.stage``, from API Gateway."""
    names = manifest.names(args.stage)
    api = aws.client("apigateway", aws_region(args, manifest))
    found: dict[str, str] = {}
    pages = api.get_paginator("get_api_keys").paginate(
        includeValues=True, nameQuery=f"{names.base}-"
    )
    for page in pages:
        for key in page.get("items", []):
            tenant = (key.get("tags") or {}).get(TENANT_TAG)
            # Another stage's key carries the same tag: its name tells them apart.
            if tenant and key.get("name") == names.api_key(tenant) and "value" in key:
                found[tenant] = key["value"]
    # The manifest's order (its first tenant is the local platform's default), then any other.
    ordered = [t for t in manifest.tenants if t in found]
    ordered += sorted(set(found) - set(ordered))
    return {tenant: found[tenant] for tenant in ordered}
