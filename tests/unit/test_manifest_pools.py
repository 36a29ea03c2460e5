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
    """The repository's manifest without its pools and their models: the models with
    services of their own, for these tests to pool as they say."""
    data = tomllib.loads(MANIFEST_FILE.read_text())
    pools = set(data.pop("pools", {}))
    data["models"] = {m: s for m, s in data["models"].items() if s.get("pool") not in pools}
    return data


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


def test_the_repositorys_demo_pools_serve_its_classifiers():
    manifest = Manifest.model_validate(tomllib.loads(MANIFEST_FILE.read_text()))
    services = manifest.services()
    assert len(services["small-cpu"]) == 6 and services["small-gpu"] == ("digits-cnn-onnx",)
    assert {m for m, spec in manifest.models.items() if spec.pool is None} == {
        "minilm-embed",
        "digits-cnn",
        "pydoc-gpt",
    }


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


GPU_TAIL = {
    "compute": "gpu",
    "instance_types": ["g5.xlarge"],
    "memory_budget_mib": 4096,
    "device_memory_budget_mib": 16384,
    "overflow_pool": "cpu-tail",
    "cpu_overflow_after_ms": 1500,
}


def _overflowing(data: dict) -> dict:
    """digits-cnn in GPU pool ``gpu-tail``, ``cpu_capable``, overflowing into CPU pool
    ``cpu-tail`` (minilm-embed's)."""
    _pooled(data, "minilm-embed", pool="cpu-tail")
    data["pools"]["gpu-tail"] = copy.deepcopy(GPU_TAIL)
    spec = data["models"]["digits-cnn"]
    spec.update(pool="gpu-tail", cpu_capable=True)
    spec.pop("instance_types", None)
    spec.pop("scaling", None)
    return data


def test_a_cpu_pool_takes_the_cpu_capable_models_of_the_gpu_pool_that_overflows_into_it():
    manifest = Manifest.model_validate(_overflowing(_data()))
    # The CPU pool scales on its own models and also takes digits-cnn's work.
    assert manifest.pool_models("cpu-tail") == ("minilm-embed",)
    assert manifest.service_models("cpu-tail") == ("minilm-embed", "digits-cnn")
    overflow = manifest.overflow_models("cpu-tail")
    assert {m: (s.pool, s.after_ms) for m, s in overflow.items()} == {
        "digits-cnn": ("gpu-tail", 1500)
    }
    # What each pool's workers are told: the CPU pool its overflow models, the GPU
    # pool that its workers say they run.
    cpu, gpu = manifest.pool_worker_values("cpu-tail"), manifest.pool_worker_values("gpu-tail")
    assert cpu["overflow"] == {"digits-cnn": {"pool": "gpu-tail", "after_ms": 1500}}
    assert (cpu["pool_heartbeat"], gpu["pool_heartbeat"]) == (False, True)
    assert gpu["overflow"] == {} and gpu["worker_models"] == ["digits-cnn"]


def test_a_pool_that_only_takes_overflow_is_a_pool():
    data = _overflowing(_data())
    # minilm-embed back on a service of its own: cpu-tail serves overflow alone
    data["models"]["minilm-embed"] = tomllib.loads(MANIFEST_FILE.read_text())["models"][
        "minilm-embed"
    ]
    manifest = Manifest.model_validate(data)
    assert manifest.pool_models("cpu-tail") == ()
    assert list(manifest.overflow_models("cpu-tail")) == ["digits-cnn"]


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (
            lambda d: d["models"]["minilm-embed"].update(cpu_capable=True),
            r"cpu_capable: a CPU model runs on a CPU already",
        ),
        (
            lambda d: d["pools"]["gpu-tail"].pop("overflow_pool"),
            r"models\.digits-cnn\.cpu_capable: its pool 'gpu-tail' names no overflow_pool",
        ),
        (
            lambda d: d["pools"]["gpu-tail"].update(overflow_pool="nowhere"),
            r"pools\.gpu-tail\.overflow_pool: 'nowhere' is not a CPU pool of this manifest",
        ),
        (
            lambda d: d["models"]["digits-cnn"].update(cpu_capable=False),
            r"pools\.gpu-tail\.overflow_pool: none of its models is cpu_capable",
        ),
        (
            lambda d: d["pools"]["cpu-tail"].update(overflow_pool="cpu-tail"),
            r"overflow_pool: a CPU pool's work has nowhere cheaper to go",
        ),
    ],
)
def test_an_overflow_that_cannot_happen_is_refused_naming_the_field(change, error):
    data = _overflowing(_data())
    change(data)
    with pytest.raises(ValueError, match=error):
        Manifest.model_validate(data)
