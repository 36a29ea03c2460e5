"""The Switchyard CDK app: a data stack, a models stack (each model's queues and
alarms) and a serving stack per stage, built from the manifest. ``app.py`` calls
:func:`add_platform`; tests call it with other manifests and stages."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from aws_cdk import App, Aspects, Environment

from stacks.assets import REPO_ROOT
from stacks.cloud import Deployment, deployment_from_context
from stacks.data import DataStack
from stacks.models import ModelsStack
from stacks.nag import LinterAcknowledgments
from stacks.serving import ServingStack
from switchyard.manifest import Manifest


def app_context(**overrides: Any) -> dict[str, Any]:
    """cdk.json's context (feature flags, default stage), so ``python app.py`` and
    ``cdk synth`` build the same templates. The CLI's own context still wins."""
    context = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]
    return {**context, **overrides}


def create_app() -> App:
    """The app as ``cdk`` and ``python app.py`` run it: cdk.json's context, and
    templates in ``cdk.out`` (the CLI's own output directory when it runs us)."""
    outdir = os.environ.get("CDK_OUTDIR", str(REPO_ROOT / "cdk.out"))
    return App(context=app_context(), outdir=outdir)


@dataclass(frozen=True)
class Platform:
    deployment: Deployment
    data: DataStack
    models: ModelsStack
    serving: ServingStack


def add_platform(app: App, manifest: Manifest) -> Platform:
    """The stacks of the stage named by the app's ``stage`` context."""
    deployment = deployment_from_context(app, manifest)
    names = deployment.names
    # Region from the manifest; the account stays a deploy-time token, so synth
    # needs no credentials and makes no lookups.
    env = Environment(region=manifest.platform.region)
    data = DataStack(
        app,
        f"{names.base}-data",
        deployment=deployment,
        env=env,
        description=f"Switchyard {deployment.stage}: tables, buckets, prediction logs",
    )
    models = ModelsStack(
        app,
        f"{names.base}-models",
        deployment=deployment,
        env=env,
        description=f"Switchyard {deployment.stage}: each model's queues and alarms",
    )
    serving = ServingStack(
        app,
        f"{names.base}-serving",
        deployment=deployment,
        data=data,
        models=models,
        env=env,
        description=f"Switchyard {deployment.stage}: API, routers, workers, AppConfig",
    )
    for stack in (data, models, serving):
        Aspects.of(stack).add(LinterAcknowledgments())
    return Platform(deployment=deployment, data=data, models=models, serving=serving)
