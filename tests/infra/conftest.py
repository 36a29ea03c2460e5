"""Fixtures of the infra tier: each stage is synthesized once per session, and each
stack of it is one ``Template`` fixture."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
for path in (REPO_ROOT, REPO_ROOT / "layers" / "core" / "python"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from aws_cdk import App  # noqa: E402
from aws_cdk.assertions import Template  # noqa: E402

from stacks.app import Platform, add_platform, app_context  # noqa: E402
from stacks.assets import MANIFEST_FILE  # noqa: E402
from stacks.endpoint import generates  # noqa: E402
from switchyard.manifest import Manifest, load_manifest  # noqa: E402

# A generation model, for a manifest that has none of its own.
GENERATION_MODEL = """
[models.tiny-gpt]
runtime = "causal-lm"
compute = "gpu"
instance_types = ["g5.xlarge"]
signature = { kind = "generation", context_length = 256, max_tokens = 64, max_chars = 2000 }
max_inputs_per_request = 1
max_batch_size = 8
max_wait_ms = 0
default_deadline_ms = 20000
slo_p99_ms = 10000
demo_versions = ["v1"]
"""


# A CPU pool of thirty long-tail models, each a copy of the project's digits-cnn,
# beside the project's own models: a pool whose queues (sixty) are far more than an
# alarm may read.
POOL = "long-tail"
POOL_SIZE = 30


def pooled_manifest(base: Manifest, pool: str = POOL, size: int = POOL_SIZE) -> Manifest:
    """``base`` plus ``pool``, a CPU pool serving ``size`` copies of digits-cnn
    (``tail-01``...), with room in each stage's concurrency for their routers."""
    data = base.model_dump(mode="json", exclude_none=True)
    template = {
        k: v
        for k, v in data["models"]["digits-cnn"].items()
        if k not in ("instance_types", "scaling", "pool")
    }
    for i in range(1, size + 1):
        data["models"][f"tail-{i:02d}"] = {**template, "compute": "cpu", "pool": pool}
    data.setdefault("pools", {})[pool] = {
        "compute": "cpu",
        "instance_types": ["c7i.xlarge"],
        "memory_budget_mib": 4096,
        "scaling": {"max_tasks": 6, "prod": {"min_tasks": 1}},
    }
    for stage in data["stages"].values():
        stage.setdefault("concurrency", {})["account_limit"] = 10_000
    return Manifest.model_validate(data)


@dataclass
class Synthesized:
    """One stage of the platform, synthesized: its stacks and their templates."""

    app: App
    platform: Platform
    data: Template
    models: Template
    serving: Template


# CloudFormation's limits on one stack (500 resources, a 1 MB template), which CDK
# checks at synth. A model's endpoint is about 35 resources, half of them (its queues
# and alarms) in the models stack, so a stage holds about 16 models
# (docs/deploying.md, "Pools"); a manifest of thirty pooled models is synthesized
# past them, for what its templates say of the pool.
RESOURCE_LIMIT_CONTEXT = "@aws-cdk/core:stackResourceLimit"


def synthesize(
    manifest: Manifest, stage: str, outdir: Path, *, stack_limits: bool = True
) -> Synthesized:
    context = app_context(stage=stage)
    if not stack_limits:
        context[RESOURCE_LIMIT_CONTEXT] = 0
    app = App(context=context, outdir=str(outdir), builtin_cloud_formation_validation=stack_limits)
    platform = add_platform(app, manifest)
    return Synthesized(
        app=app,
        platform=platform,
        data=Template.from_stack(platform.data),
        models=Template.from_stack(platform.models),
        serving=Template.from_stack(platform.serving),
    )


@pytest.fixture(scope="session")
def manifest() -> Manifest:
    return load_manifest(MANIFEST_FILE)


@pytest.fixture(scope="session")
def synth(
    tmp_path_factory: pytest.TempPathFactory,
) -> Callable[[Manifest, str], Synthesized]:
    """Synthesize any manifest at any stage, into a fresh cloud assembly."""

    def run(manifest: Manifest, stage: str) -> Synthesized:
        return synthesize(manifest, stage, tmp_path_factory.mktemp(f"cdk.out.{stage}"))

    return run


@pytest.fixture(scope="session")
def dev(synth: Callable[[Manifest, str], Synthesized], manifest: Manifest) -> Synthesized:
    return synth(manifest, "dev")


@pytest.fixture(scope="session")
def prod(synth: Callable[[Manifest, str], Synthesized], manifest: Manifest) -> Synthesized:
    return synth(manifest, "prod")


@pytest.fixture(scope="session")
def generative(
    synth: Callable[[Manifest, str], Synthesized],
    manifest: Manifest,
    dev: Synthesized,
    tmp_path_factory: pytest.TempPathFactory,
) -> Synthesized:
    """dev from a manifest that serves generation models beside the others: the
    project's own once it has one, else the project's plus :data:`GENERATION_MODEL`."""
    if any(generates(spec) for spec in manifest.models.values()):
        return dev
    path = tmp_path_factory.mktemp("generative") / "manifest.toml"
    path.write_text(MANIFEST_FILE.read_text() + GENERATION_MODEL)
    return synth(load_manifest(path), "dev")


@pytest.fixture(scope="session")
def pooled(manifest: Manifest) -> Manifest:
    """The project's manifest plus a pool of three models, a stage that fits in one
    stack: what cfn-lint, cdk-nag and the deploy check read of a pool."""
    return pooled_manifest(manifest, size=3)


@pytest.fixture(scope="session")
def pooled_dev(synth: Callable[[Manifest, str], Synthesized], pooled: Manifest) -> Synthesized:
    return synth(pooled, "dev")


@pytest.fixture(scope="session")
def pooled_prod(synth: Callable[[Manifest, str], Synthesized], pooled: Manifest) -> Synthesized:
    return synth(pooled, "prod")


@pytest.fixture(scope="session")
def pool_of_30(manifest: Manifest) -> Manifest:
    """The project's manifest plus a pool of thirty models (:func:`pooled_manifest`)."""
    return pooled_manifest(manifest)


@pytest.fixture(scope="session")
def pool_of_30_stages(
    pool_of_30: Manifest, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Synthesized]:
    """Each stage of :func:`pool_of_30`, synthesized past the stacks' limits."""
    return {
        stage: synthesize(
            pool_of_30,
            stage,
            tmp_path_factory.mktemp(f"cdk.out.pool30.{stage}"),
            stack_limits=False,
        )
        for stage in ("dev", "prod")
    }


@pytest.fixture(scope="session")
def pool_of_30_templates(pool_of_30_stages: dict[str, Synthesized]) -> dict[str, Template]:
    """Each stage's serving template of :func:`pool_of_30`."""
    return {stage: synthesized.serving for stage, synthesized in pool_of_30_stages.items()}


@pytest.fixture(scope="session")
def data_template(dev: Synthesized) -> Template:
    return dev.data


@pytest.fixture(scope="session")
def serving_template(dev: Synthesized) -> Template:
    return dev.serving


@pytest.fixture(scope="session")
def models_template(dev: Synthesized) -> Template:
    """Each model's queues and alarms (``stacks.models``)."""
    return dev.models


@pytest.fixture(scope="session")
def prod_models_template(prod: Synthesized) -> Template:
    return prod.models


@pytest.fixture(scope="session")
def prod_data_template(prod: Synthesized) -> Template:
    return prod.data


@pytest.fixture(scope="session")
def prod_serving_template(prod: Synthesized) -> Template:
    return prod.serving
