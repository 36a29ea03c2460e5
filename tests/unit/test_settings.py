"""The SWITCHYARD_* environment contract: one renderer for the CDK app and the
local platform, read back by each deployable at its cold start."""

from __future__ import annotations

import json

import pytest

from switchyard.settings import (
    RouterSettings,
    SettingsError,
    WorkerSettings,
    to_environment,
)
from tests.environment import read_settings

ROUTER = {
    "registry_table": "registry",
    "results_table": "results",
    "payloads_bucket": "payloads",
    "queues": {"m": {"realtime": "https://q/rt", "batch": "https://q/b"}},
    "tenant_keys": {"acme": "k1", "globex": "k2"},
    "visibility_timeout_seconds": 30,
    "routing_source": "appconfig-extension",
    "aws_endpoint_url": "http://127.0.0.1:4566",
    "routing_cache_seconds": 0.5,
    "max_age_seconds": {"realtime": 60, "batch": 600},
}


def test_what_is_written_is_what_is_read(monkeypatch):
    # GIVEN a router's values rendered as the CDK app and the supervisor render them
    env = to_environment(RouterSettings, ROUTER)
    # WHEN the router reads its environment at cold start
    settings = read_settings(RouterSettings, env, monkeypatch)
    # THEN it reads the same values
    assert settings.tenant_keys == ROUTER["tenant_keys"]
    assert settings.queues["m"].batch == "https://q/b"
    assert settings.visibility_timeout_seconds == 30
    assert settings.routing_source == "appconfig-extension"
    assert settings.aws_endpoint_url == "http://127.0.0.1:4566"  # text, not JSON
    assert settings.routing_cache_seconds == 0.5
    assert settings.max_age_seconds == {"realtime": 60, "batch": 600}
    assert settings.jobs_table is None  # not set: its default


def test_queue_urls_given_without_their_common_part_are_read_whole(monkeypatch):
    # GIVEN a function that reaches many models' queues, written with only what
    # differs between their URLs, and one URL given whole
    values = {
        **ROUTER,
        "queues": {
            "m": {"realtime": "m-realtime", "batch": "m-batch"},
            "n": {"realtime": "n-realtime", "batch": "https://elsewhere/n-batch"},
        },
        "queue_url_prefix": "https://sqs.us-east-1.amazonaws.com/123456789012/yard-dev-",
    }
    # WHEN it reads its environment
    settings = read_settings(RouterSettings, to_environment(RouterSettings, values), monkeypatch)
    # THEN each URL is whole: the common part before each short one
    assert settings.queues["m"].realtime == (
        "https://sqs.us-east-1.amazonaws.com/123456789012/yard-dev-m-realtime"
    )
    assert settings.queues["n"].batch == "https://elsewhere/n-batch"


def test_mappings_go_through_the_given_json_renderer():
    rendered = []

    def dumps(value):
        rendered.append(value)
        return json.dumps(value)

    env = to_environment(RouterSettings, ROUTER, dumps=dumps)
    assert rendered == [ROUTER["queues"], ROUTER["tenant_keys"], ROUTER["max_age_seconds"]]
    assert json.loads(env["SWITCHYARD_QUEUES"]) == ROUTER["queues"]


def test_a_forgotten_or_unknown_setting_fails_where_the_environment_is_written():
    without = {k: v for k, v in ROUTER.items() if k != "tenant_keys"}
    with pytest.raises(SettingsError, match="RouterSettings needs tenant_keys"):
        to_environment(RouterSettings, without)
    with pytest.raises(SettingsError, match="has no setting worker_model"):
        to_environment(RouterSettings, {**ROUTER, "worker_model": "m"})


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        (
            "SWITCHYARD_WORKER_MODEL",
            None,
            "set one of SWITCHYARD_WORKER_MODEL (a model's own service) or "
            "SWITCHYARD_WORKER_POOL (a pool)",
        ),
        ("SWITCHYARD_QUEUES", "[1, 2", "SWITCHYARD_QUEUES: not valid JSON"),
        ("SWITCHYARD_POLL_WAIT_SECONDS", "forever", "SWITCHYARD_POLL_WAIT_SECONDS"),
        (
            "SWITCHYARD_QUEUES",
            '{"m": {"realtime": "u"}}',
            "SWITCHYARD_QUEUES: Field required (at m.batch)",
        ),
    ],
)
def test_a_bad_variable_stops_the_start_with_its_name(monkeypatch, variable, value, expected):
    values = {
        **{
            k: v
            for k, v in ROUTER.items()
            if k not in ("tenant_keys", "routing_source", "routing_cache_seconds")
        },
        "worker_model": "m",
        "artifacts_bucket": "a",
    }
    env = to_environment(WorkerSettings, values)
    if value is None:
        del env[variable]
    else:
        env[variable] = value
    with pytest.raises(SettingsError) as caught:
        read_settings(WorkerSettings, env, monkeypatch)
    assert expected in str(caught.value)


WORKER = {
    **{
        k: v
        for k, v in ROUTER.items()
        if k not in ("tenant_keys", "routing_source", "routing_cache_seconds")
    },
    "artifacts_bucket": "a",
}
POOL = {
    "worker_pool": "small",
    "worker_models": ["m", "n"],
    "memory_budget_mib": 2048,
    "device_memory_budget_mib": 8192,
}


def test_a_pool_worker_reads_its_pool_its_models_and_its_budgets(monkeypatch):
    # GIVEN a pool's worker environment, as the CDK app and the supervisor write it
    env = to_environment(WorkerSettings, {**WORKER, **POOL})
    assert env["SWITCHYARD_WORKER_MODELS"] == '["m", "n"]'  # a JSON list
    # WHEN the worker reads it at start
    settings = read_settings(WorkerSettings, env, monkeypatch)
    # THEN it is a pool's worker, serving the pool's models within its budgets
    assert settings.worker_model is None
    assert settings.service == "small"
    assert settings.served_models == ["m", "n"]
    assert (settings.memory_budget_mib, settings.device_memory_budget_mib) == (2048, 8192)


def test_a_cpu_pool_worker_reads_the_models_it_takes_on_overflow(monkeypatch):
    # GIVEN a CPU pool's worker environment that names a GPU pool's model
    overflow = {"g": {"pool": "small-gpu", "after_ms": 1500}}
    env = to_environment(WorkerSettings, {**WORKER, **POOL, "overflow": overflow})
    # WHEN the worker reads it at start
    settings = read_settings(WorkerSettings, env, monkeypatch)
    # THEN it takes that model's work too, knowing where it comes from
    assert settings.served_models == ["m", "n", "g"]
    assert settings.overflow["g"].pool == "small-gpu"
    assert settings.overflow["g"].after_ms == 1500
    assert settings.pool_heartbeat is False


def test_a_model_worker_serves_its_model():
    settings = WorkerSettings.model_validate({**WORKER, "worker_model": "m"})
    assert settings.service == "m"
    assert settings.served_models == ["m"]
    assert settings.worker_pool is None


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (
            {"worker_model": "m", **POOL},
            "set one of SWITCHYARD_WORKER_MODEL (a model's own service) or "
            "SWITCHYARD_WORKER_POOL (a pool)",
        ),
        (
            {"worker_pool": "small"},
            "a pool (SWITCHYARD_WORKER_POOL) needs SWITCHYARD_WORKER_MODELS and "
            "SWITCHYARD_MEMORY_BUDGET_MIB",
        ),
        (
            {**POOL, "worker_models": []},
            "SWITCHYARD_WORKER_MODELS: the pool's models, each once, at least one unless "
            "it serves SWITCHYARD_OVERFLOW",
        ),
        (
            {**POOL, "worker_models": ["m", "m"]},
            "SWITCHYARD_WORKER_MODELS: the pool's models, each once, at least one unless "
            "it serves SWITCHYARD_OVERFLOW",
        ),
        (
            {**POOL, "overflow": {"m": {"pool": "gpu", "after_ms": 100}}},
            "SWITCHYARD_OVERFLOW: 'm' is the pool's own model",
        ),
        ({**POOL, "memory_budget_mib": 0}, "SWITCHYARD_MEMORY_BUDGET_MIB: Input should be"),
    ],
)
def test_a_worker_is_one_model_s_or_one_pool_s(monkeypatch, values, expected):
    # GIVEN a worker environment that is both, or a pool that lacks what it needs
    env = to_environment(WorkerSettings, {**WORKER, **values})
    # WHEN the worker starts, THEN it stops, naming the variables
    with pytest.raises(SettingsError) as caught:
        read_settings(WorkerSettings, env, monkeypatch)
    assert expected in str(caught.value)
