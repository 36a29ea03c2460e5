#!/usr/bin/env python3
"""Switchyard's CDK app: `npx cdk synth -c stage=prod` (or `python app.py`)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "layers" / "core" / "python"))

from aws_cdk import Validations  # noqa: E402
from cdk_nag import AwsSolutionsChecks  # noqa: E402

from stacks.app import add_platform, create_app  # noqa: E402
from stacks.assets import MANIFEST_FILE  # noqa: E402
from switchyard.manifest import load_manifest  # noqa: E402

app = create_app()
add_platform(app, load_manifest(app.node.try_get_context("manifest") or MANIFEST_FILE))
Validations.of(app).add_plugins(AwsSolutionsChecks(app))
app.synth()
