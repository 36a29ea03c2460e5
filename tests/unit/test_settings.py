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
        ("SWITCHYARD_WORKER_MODEL", None, "SWITCHYARD_WORKER_MODEL: Field required"),
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
