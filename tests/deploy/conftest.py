"""Deploy tier: what `cdk deploy` ships, run as AWS runs it.

The layouts are built by the CDK app's own bundling code (``stacks.assets``) for
this machine's interpreter. Each function runs in a fresh interpreter whose path
holds only its code asset (at ``/var/task``), the core layer (at ``/opt/python``) and
the SDK the Lambda runtime provides, and its handler is invoked with the events AWS
sends it. The workers run from the image's ``/app``. As root on Linux (CI) every
layout sits exactly at those paths, each process in its own mount namespace.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import lambda_events
from stacks.assets import Layouts, build_layouts
from switchyard.settings import RouterSettings, Settings, SplitterSettings, to_environment
from switchyard.wiring import Adapters, build_adapters
from switchyard_local.deployed import (
    APP_ROOT,
    LAYER_PATH,
    TASK_ROOT,
    Function,
    LambdaProcess,
    Launcher,
    can_mount,
)
from switchyard_local.models import build_all
from switchyard_local.supervisor import LocalPlatform, base_environment, free_port

ROOT = Path(__file__).resolve().parents[2]
MODEL = "minilm-embed"


@pytest.fixture(scope="session")
def layouts() -> Layouts:
    return build_layouts()


@pytest.fixture(scope="session")
def launcher(layouts: Layouts) -> Launcher:
    if not can_mount():
        warnings.warn(
            "not root on Linux: the deployed layouts run from their build folders, "
            "not at /opt/python, /var/task and /app",
            stacklevel=1,
        )
    return Launcher(layouts, exact_paths=can_mount())


@pytest.fixture(scope="session")
def platform(
    launcher: Launcher, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalPlatform]:
    """The emulator, provisioned, with one worker per model from the image's /app."""
    models = ROOT / "build" / "models"
    build_all(models)
    local = LocalPlatform(
        port=free_port(),
        run_dir=tmp_path_factory.mktemp("deploy-platform"),
        models_dir=models,
        min_workers=1,
        exact_paths=launcher.exact_paths,
    )
    try:
        local.start()
        yield local
    finally:
        local.stop()


@pytest.fixture(scope="session")
def adapters(platform: LocalPlatform) -> Adapters:
    """The test's own view of the emulator's stores, to check what functions did."""
    assert platform.provisioned is not None
    return build_adapters(Settings(**platform.provisioned.settings_values()))


def start_function(
    platform: LocalPlatform, function: Function, name: str, environment: dict[str, str]
) -> LambdaProcess:
    """A cold start of ``function``'s asset with ``environment``, as Lambda's init."""
    command = platform.launcher.lambda_handler(function)
    return LambdaProcess(
        command,
        {**base_environment(), **environment},
        platform.run_dir / "logs" / f"function-{name}.log",
    )


def router_environment(platform: LocalPlatform, models: list[str]) -> dict[str, str]:
    """A router function's variables, as the CDK app writes them: one model's queues
    for a model's router, every model's for the requests router."""
    provisioned = platform.provisioned
    assert provisioned is not None and platform.extension is not None
    values = provisioned.router_values(platform.extension.url)
    values["queues"] = {m: provisioned.queues[m] for m in models}
    values["appconfig_environment"] = models[0] if len(models) == 1 else "dev"
    # and its role's credentials, as Lambda puts them in a function's environment
    return {
        **to_environment(RouterSettings, values),
        **platform.credentials["router"].environment(),
    }


@pytest.fixture(scope="session")
def router(platform: LocalPlatform) -> Iterator[LambdaProcess]:
    """``minilm-embed``'s router function."""
    function = start_function(platform, "router", "router", router_environment(platform, [MODEL]))
    yield function
    function.close()


@pytest.fixture(scope="session")
def requests_router(platform: LocalPlatform) -> Iterator[LambdaProcess]:
    """The router function behind GET /v1/models and GET /v1/requests/{id}."""
    models = list(platform.manifest.models)
    function = start_function(
        platform, "router", "requests-router", router_environment(platform, models)
    )
    yield function
    function.close()


@pytest.fixture(scope="session")
def splitter(platform: LocalPlatform) -> Iterator[LambdaProcess]:
    assert platform.provisioned is not None and platform.extension is not None
    values = platform.provisioned.splitter_values(platform.extension.url)
    environment = {
        **to_environment(SplitterSettings, values),
        **platform.credentials["splitter"].environment(),
    }
    function = start_function(platform, "splitter", "splitter", environment)
    yield function
    function.close()


def rest_event(
    platform: LocalPlatform,
    method: str,
    path: str,
    *,
    tenant: str = "acme",
    body: Any = None,
    query: dict[str, str] | None = None,
    key_id: str | None = None,
) -> dict[str, Any]:
    """An API Gateway REST proxy event for ``method path`` from ``tenant``'s key (or
    with another verified key id)."""
    provisioned = platform.provisioned
    assert provisioned is not None
    return lambda_events.rest_event(
        method,
        path,
        api_key=provisioned.api_keys[tenant],
        api_key_id=provisioned.api_key_ids[tenant] if key_id is None else key_id,
        body=body,
        query=query,
    )


def answer(response: dict[str, Any]) -> tuple[int, dict[str, Any], dict[str, str]]:
    """A proxy integration response as (status, JSON body, headers by lower-case name)."""
    headers = {k.lower(): v for k, v in (response.get("headers") or {}).items()}
    return int(response["statusCode"]), json.loads(response["body"]), headers


def deployed_roots(launcher: Launcher, function: Function) -> tuple[Path, Path]:
    """Where a function's own modules and the layer's must come from."""
    if launcher.exact_paths:
        return TASK_ROOT, LAYER_PATH
    task = launcher.layouts.router if function == "router" else launcher.layouts.splitter
    return task, launcher.layouts.layer_python


def image_root(launcher: Launcher) -> Path:
    return APP_ROOT if launcher.exact_paths else launcher.layouts.worker
