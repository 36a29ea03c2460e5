"""`python app.py` synthesizes offline: no AWS credentials, no Docker; cdk-nag runs
inside synth; Lambda code is bundled on this machine; the worker image is only
described (built at deploy time)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from stacks.cloud import WEB_ADAPTER_HANDLER

from .conftest import REPO_ROOT, Synthesized


def test_python_app_synthesizes_without_credentials_or_docker(tmp_path: Path) -> None:
    # GIVEN no AWS credentials, profile or region, and no Docker on PATH
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CDK_", "DOCKER"))}
    env.update(CDK_OUTDIR=str(tmp_path), PATH=str(Path(sys.executable).parent) + ":/usr/bin:/bin")

    # WHEN the app runs by itself
    done = subprocess.run(
        [sys.executable, "app.py"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    # THEN it writes the stacks' templates, nag found nothing, and the image is described
    assert done.returncode == 0, done.stderr[-3000:]
    assert {p.name for p in tmp_path.glob("*.template.json")} == {
        "switchyard-dev-data.template.json",
        "switchyard-dev-models.template.json",
        "switchyard-dev-serving.template.json",
    }
    report = json.loads((tmp_path / "validation-report.json").read_text())
    assert report["pluginReports"] == []
    assets = json.loads((tmp_path / "switchyard-dev-serving.assets.json").read_text())
    (image,) = assets["dockerImages"].values()
    assert image["source"]["dockerFile"] == "gpu_workers/Dockerfile"
    assert image["source"]["platform"] == "linux/amd64"


def test_lambda_code_is_bundled_for_the_lambda_runtime(dev: Synthesized) -> None:
    outdir = Path(dev.app.outdir)
    template = dev.serving.to_json()["Resources"]

    def asset_of(logical_id: str, key: str) -> Path:
        s3_key = template[logical_id]["Properties"][key]["S3Key"]
        return outdir / f"asset.{s3_key.removesuffix('.zip')}"

    layer_id = next(k for k, v in template.items() if v["Type"] == "AWS::Lambda::LayerVersion")
    layer = asset_of(layer_id, "Content")
    assert (layer / "python" / "switchyard" / "manifest.py").exists()
    assert (layer / "python" / "aws_lambda_powertools").is_dir()
    assert list((layer / "python" / "pydantic_core").glob("*cpython-314-x86_64-linux-gnu.so"))

    router_id = next(
        k
        for k, v in template.items()
        if v["Type"] == "AWS::Lambda::Function"
        and "SWITCHYARD_APPCONFIG_ENVIRONMENT"
        in v["Properties"].get("Environment", {}).get("Variables", {})
    )
    router = asset_of(router_id, "Code")
    assert (router / "handler.py").exists() and (router / "switchyard_router").is_dir()
    assert (router / "mangum").is_dir() and (router / "fastapi").is_dir()
    assert not (router / "torch").exists(), "no torch on the router's cold-start path"


def test_the_key_authorizer_ships_its_handler_alone(dev: Synthesized) -> None:
    outdir = Path(dev.app.outdir)
    template = dev.serving.to_json()["Resources"]
    authorizer, *_ = [v for v in template.values() if v["Type"] == "AWS::ApiGateway::Authorizer"]
    function = next(
        v
        for k, v in template.items()
        if v["Type"] == "AWS::Lambda::Function" and k in json.dumps(authorizer)
    )
    s3_key = function["Properties"]["Code"]["S3Key"]
    asset = outdir / f"asset.{s3_key.removesuffix('.zip')}"
    # the standard library only: no packages, no layer
    shipped = {p.name for p in asset.iterdir() if p.name != "__pycache__"}
    assert shipped == {"handler.py"}


def test_streaming_functions_ship_their_handler_as_an_executable(dev: Synthesized) -> None:
    # The Lambda Web Adapter runs the handler (run.sh) as a program.
    outdir = Path(dev.app.outdir)
    template = dev.serving.to_json()["Resources"]
    streaming = [
        v["Properties"]
        for v in template.values()
        if v["Type"] == "AWS::Lambda::Function"
        and v["Properties"].get("Handler") == WEB_ADAPTER_HANDLER
    ]
    assert streaming, "the OpenAI-compatible function streams"
    for props in streaming:
        asset = outdir / f"asset.{props['Code']['S3Key'].removesuffix('.zip')}"
        script = asset / WEB_ADAPTER_HANDLER
        assert script.is_file() and os.access(script, os.X_OK), f"{script} is not executable"
        assert (asset / "uvicorn").is_dir(), "run.sh serves the app with uvicorn"
