"""Lambda code bundled on this machine: pip for the Lambda platform, never Docker.

The CDK asset's local bundling calls :func:`stacks.assets.bundle` for the Lambda
runtime's platform (``--platform``/``--only-binary``), so synth works on any host
without a container engine, and the deploy test tier and the local platform build
the same layouts with the same function.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsii
from aws_cdk import AssetHashType, BundlingOptions, ILocalBundling
from aws_cdk import aws_lambda as lambda_

from stacks.assets import LAMBDA_TARGET, LambdaCode, bundle
from stacks.cloud import LAMBDA_RUNTIME


@jsii.implements(ILocalBundling)
class PipBundle:
    """Bundles one asset for the Lambda runtime; never falls back to Docker."""

    def __init__(self, asset: LambdaCode) -> None:
        self._asset = asset

    def try_bundle(self, output_dir: str, options: Any = None) -> bool:
        bundle(self._asset, Path(output_dir), LAMBDA_TARGET)
        return True


def python_code(asset: LambdaCode) -> lambda_.Code:
    """Lambda code (or, for an asset with prefix "python", a layer) built by
    :class:`PipBundle`.

    The asset hash is the bundle's output, so a change to a pinned dependency
    anywhere (requirements or constraints) reaches the cloud.
    """
    return lambda_.Code.from_asset(
        str(asset.code),
        asset_hash_type=AssetHashType.OUTPUT,
        bundling=BundlingOptions(
            image=LAMBDA_RUNTIME.bundling_image,  # named, never pulled: local always wins
            local=PipBundle(asset),
        ),
    )
