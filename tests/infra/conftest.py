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


@dataclass
class Synthesized:
    """One stage of the platform, synthesized: its stacks and their templates."""

    app: App
    platform: Platform
    data: Template
    serving: Template


def synthesize(manifest: Manifest, stage: str, outdir: Path) -> Synthesized:
    app = App(context=app_context(stage=stage), outdir=str(outdir))
    platform = add_platform(app, manifest)
    return Synthesized(
        app=app,
        platform=platform,
        data=Template.from_stack(platform.data),
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
def data_template(dev: Synthesized) -> Template:
    return dev.data


@pytest.fixture(scope="session")
def serving_template(dev: Synthesized) -> Template:
    return dev.serving


@pytest.fixture(scope="session")
def prod_data_template(prod: Synthesized) -> Template:
    return prod.data


@pytest.fixture(scope="session")
def prod_serving_template(prod: Synthesized) -> Template:
    return prod.serving
