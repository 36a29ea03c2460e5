"""Pools in the manifest: a model names a pool or keeps a service of its own; a
pool's models, its scaling and the worker services follow from the manifest, and a
pool that cannot be run is refused with the field that says why."""

from __future__ import annotations

import copy
import tomllib

import pytest

from stacks.assets import MANIFEST_FILE
from switchyard.manifest import Manifest

SMALL_CPU = {
    "compute": "cpu",
    "instance_types": ["c7i.xlarge"],
    "memory_budget_mib": 2048,
    "scaling": {"max_tasks": 3, "dev": {"min_tasks": 0}},
}


def _data() -> dict:
    return tomllib.loads(MANIFEST_FILE.read_text())


def _pooled(data: dict, *models: str, pool: str = "small-cpu") -> dict:
    data.setdefault("pools", {})[pool] = copy.deepcopy(SMALL_CPU)
    for model in models:
        spec = data["models"][model]
        spec.update(pool=pool, compute="cpu")
        spec.pop("instance_types", None)
        spec.pop("scaling", None)
    return data


def test_models_in_a_pool_share_its_service_and_its_scaling():
    manifest = Manifest.model_validate(_pooled(_data(), "minilm-embed", "digits-cnn"))
    assert manifest.pool_models("small-cpu") == ("minilm-embed", "digits-cnn")
    assert manifest.services() == {
        "pydoc-gpt": ("pydoc-gpt",),
        "small-cpu": ("minilm-embed", "digits-cnn"),
    }
    policy = manifest.pool_scaling_policy("small-cpu", "prod")
    stage = manifest.stages["prod"].scaling
    assert (policy.max_tasks, policy.backlog_per_task) == (3, stage.backlog_per_task)


def test_without_pools_every_model_keeps_a_service_of_its_own():
    manifest = Manifest.model_validate(_data())
    assert manifest.services() == {name: (name,) for name in manifest.models}


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (
            lambda d: _pooled(d, "digits-cnn")["models"]["digits-cnn"].update(pool="nowhere"),
            r"models\.digits-cnn\.pool: unknown pool 'nowhere'",
        ),
        (
            lambda d: _pooled(d, "digits-cnn")["models"]["digits-cnn"].update(compute="gpu"),
            r"models\.digits-cnn\.compute: gpu, but pool 'small-cpu' is cpu",
        ),
        (
            lambda d: d.setdefault("pools", {}).update({"idle": copy.deepcopy(SMALL_CPU)}),
            r"pools\.idle: no model names it",
        ),
        (
            lambda d: _pooled(d, "digits-cnn")["models"]["digits-cnn"].update(
                scaling={"max_tasks": 2}
            ),
            r"scaling: a model in pool 'small-cpu' scales with the pool",
        ),
        (
            lambda d: _pooled(d, "digits-cnn")["models"]["digits-cnn"].update(
                instance_types=["c7i.large"]
            ),
            r"instance_types: a model in pool 'small-cpu' runs on the pool's",
        ),
        (
            lambda d: d["models"]["digits-cnn"].pop("instance_types"),
            r"instance_types: a model with a service of its own names them",
        ),
        (
            lambda d: _pooled(d, "digits-cnn")["pools"]["small-cpu"].update(compute="gpu"),
            r"device_memory_budget_mib: a GPU pool has one",
        ),
        (
            lambda d: _pooled(d, "digits-cnn")["pools"]["small-cpu"]["scaling"].update(min_tasks=9),
            r"pools\.small-cpu\.scaling, in prod: min_tasks \(9\) must be between 0",
        ),
        (
            lambda d: _pooled(d, "digits-cnn", pool="pydoc-gpt"),
            r"pools\.pydoc-gpt: a model has that name",
        ),
        (
            lambda d: _pooled(d, "digits-cnn", "pydoc-gpt"),
            r"models\.pydoc-gpt\n.*pool: a generation model keeps a service of its own",
        ),
    ],
    ids=[
        "unknown pool",
        "compute differs",
        "empty pool",
        "own scaling",
        "own instances",
        "no instances",
        "gpu without device budget",
        "pool scaling",
        "name taken",
        "generation model",
    ],
)
def test_a_pool_that_cannot_run_is_refused(change, error):
    data = _data()
    change(data)
    with pytest.raises(ValueError, match=error):
        Manifest.model_validate(data)
