"""CPU overflow in the CDK app: a CPU pool's workers are told which GPU pool
models they take on overflow and may take their work (their queues, the GPU pool's
workers' word in the results table, SQS's age metric); the GPU pool's workers are
told to say they run."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from switchyard.manifest import Manifest

from .conftest import POOL, Synthesized, pooled_manifest
from .helpers import actions_of, assert_workers_update_first, granted, named, statements
from .test_compute import _service_of, env_of

GPU_POOL = "gpu-tail"
MODEL = "digits-cnn"


@pytest.fixture(scope="module")
def overflowing(manifest: Manifest) -> Manifest:
    """The project's manifest plus a CPU pool of three models, and digits-cnn in a GPU
    pool of its own, ``cpu_capable``, overflowing into the CPU pool."""
    data = pooled_manifest(manifest, size=3).model_dump(mode="json", exclude_none=True)
    spec = data["models"][MODEL]
    spec.update(pool=GPU_POOL, cpu_capable=True)
    spec.pop("instance_types", None)
    spec.pop("scaling", None)
    data["pools"][GPU_POOL] = {
        "compute": "gpu",
        "instance_types": ["g5.xlarge"],
        "memory_budget_mib": 4096,
        "device_memory_budget_mib": 16384,
        "overflow_pool": POOL,
        "cpu_overflow_after_ms": 1500,
    }
    return Manifest.model_validate(data)


@pytest.fixture(scope="module")
def overflowing_dev(
    synth: Callable[[Manifest, str], Synthesized], overflowing: Manifest
) -> Synthesized:
    return synth(overflowing, "dev")


def test_the_cpu_pool_is_told_what_it_takes_on_overflow_and_the_gpu_pool_to_say_it_runs(
    overflowing_dev: Synthesized, overflowing: Manifest
) -> None:
    template = overflowing_dev.serving
    _, cpu_task = _service_of(template, POOL, "SWITCHYARD_WORKER_POOL")
    _, gpu_task = _service_of(template, GPU_POOL, "SWITCHYARD_WORKER_POOL")
    cpu, gpu = env_of(cpu_task), env_of(gpu_task)
    assert json.loads(cpu["SWITCHYARD_OVERFLOW"]) == {MODEL: {"pool": GPU_POOL, "after_ms": 1500}}
    # its own models stay its own: it scales on them, not on digits-cnn's work
    assert json.loads(cpu["SWITCHYARD_WORKER_MODELS"]) == list(overflowing.pool_models(POOL))
    assert cpu["SWITCHYARD_POOL_HEARTBEAT"] == "false"
    assert gpu["SWITCHYARD_POOL_HEARTBEAT"] == "true"
    assert json.loads(gpu["SWITCHYARD_WORKER_MODELS"]) == [MODEL]
    # digits-cnn's queues are in the CPU pool's environment
    names = overflowing.names("dev")
    queues = json.dumps(cpu["SWITCHYARD_QUEUES"])
    for lane in ("realtime", "batch"):
        assert f"/{names.queue(MODEL, lane)}" in queues


def test_the_cpu_pool_may_take_the_overflow_models_work_and_read_what_opens_its_gates(
    overflowing_dev: Synthesized, overflowing: Manifest
) -> None:
    template = overflowing_dev.serving
    names = overflowing.names("dev")
    realtime = json.dumps(named("sqs", names.queue(MODEL, "realtime")))
    roles = {}
    for pool in (POOL, GPU_POOL):
        _, task = _service_of(template, pool, "SWITCHYARD_WORKER_POOL")
        roles[pool] = statements(template, task["Properties"]["TaskRoleArn"]["Fn::GetAtt"][0])
    cpu, gpu = roles[POOL], roles[GPU_POOL]
    # both take digits-cnn's work
    for role in (cpu, gpu):
        assert realtime in granted(role, "sqs:ReceiveMessage")
    # the CPU pool reads the GPU pool's word (a Query of the results table) and SQS's
    # age metric (which has no resource ARN)
    results = "StorageResults"
    assert any(results in r for r in granted(cpu, "dynamodb:Query"))
    assert granted(cpu, "cloudwatch:GetMetricData") == ['"*"']
    # the GPU pool writes its word with the item writes it has, and reads neither
    assert any(results in r for r in granted(gpu, "dynamodb:PutItem"))
    assert not any(results in r for r in granted(gpu, "dynamodb:Query"))
    assert not {"cloudwatch:GetMetricData", "dynamodb:DeleteItem"} & actions_of(gpu)


def test_a_model_taken_on_overflow_is_sent_only_after_both_pools_are_updated(
    overflowing_dev: Synthesized, overflowing: Manifest
) -> None:
    assert_workers_update_first(overflowing_dev.serving, overflowing)
