"""``switchyard plan``: the sections it prints, its JSON, its refusals, and the
output docs/capacity.md shows, which must be what the command prints now."""

from __future__ import annotations

import io
import json
import re
import shlex
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from stacks.assets import MANIFEST_FILE, REPO_ROOT
from switchyard_cli.main import main

PROFILES = REPO_ROOT / "docs" / "profiles"
CAPACITY_DOC = REPO_ROOT / "docs" / "capacity.md"
SECTIONS = (
    "Workers, per service",
    "Routers and queues, per model",
    "The day replayed through switchyard.scaling.decide",
    "Account quotas",
    "Cost, $ a month",
)


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["plan", *args, "--manifest", str(MANIFEST_FILE)])
    out, err = capsys.readouterr()
    return code, out, err


def doc_blocks() -> list[tuple[str, str]]:
    """docs/capacity.md's console blocks of `switchyard plan`: (command, output)."""
    found = []
    for block in re.findall(r"```console\n(.*?)```", CAPACITY_DOC.read_text(), re.S):
        command, _, output = block.partition("\n")
        if command.startswith("$ switchyard plan "):
            found.append((command[2:], output))
    return found


@pytest.fixture(scope="module")
def printed() -> dict[str, tuple[int, str]]:
    """What each of the page's commands prints now, run once from the repository's
    root (a plan of the seeds' 50 models takes seconds)."""
    out = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(REPO_ROOT)
        for command, _ in doc_blocks():
            buffer = io.StringIO()
            with redirect_stdout(buffer):
                code = main(shlex.split(command)[1:] + ["--manifest", str(MANIFEST_FILE)])
            out[command] = (code, buffer.getvalue())
    return out


def test_the_capacity_page_shows_what_the_command_prints_now(printed):
    # GIVEN the page's runs of `switchyard plan` (at least the seeds' and the demo's)
    blocks = doc_blocks()
    assert {command.split()[2] for command, _ in blocks} >= {
        "docs/profiles/seeds.toml",
        "docs/profiles/demo.toml",
    }
    for command, shown in blocks:
        # WHEN each is run again, THEN it prints what the page shows
        code, output = printed[command]
        assert code == 0
        assert output == shown, (
            f"docs/capacity.md shows output that `{command}` no longer prints: run it from "
            "the repository's root and paste its output into the page (and check the prose "
            "around it)"
        )


def test_the_seeds_plan_prints_workers_quotas_cost_and_the_replayed_wait(printed):
    [out] = [out for command, (_, out) in printed.items() if "seeds.toml" in command]
    for section in SECTIONS:
        assert section in out
    assert re.search(r"all: p99 queue wait \S+ s \(by requests\)", out)
    assert re.search(r"RAISE API Gateway throttle rate .*: needs 260,000, has 10,000", out)
    assert re.search(r"^  total +[\d,]+$", out, re.MULTILINE)
    assert re.search(r"^  all +50 +200,000 ", out, re.MULTILINE)


def test_json_parses_and_holds_the_same_plan(capsys):
    code, out, _ = run(capsys, str(PROFILES / "demo.toml"), "--json")
    assert code == 0
    plan = json.loads(out)
    assert {s["service"] for s in plan["services"]} >= {"minilm-embed", "small-cpu"}
    assert {q["name"] for q in plan["quotas"]} >= {
        "Lambda concurrent executions",
        "API Gateway throttle rate per account and region (requests/s)",
    }
    assert "p99_queue_wait_seconds" in plan["simulation"]
    assert plan["usd_per_month"]["total"] == pytest.approx(
        sum(v for k, v in plan["usd_per_month"].items() if k != "total"), rel=1e-3
    )


def test_rows_sums_the_rest_in_one_row(capsys):
    code, out, _ = run(capsys, str(PROFILES / "demo.toml"), "--rows", "2")
    assert code == 0
    assert out.count("(3 more)") == 2  # workers, the replayed day (5 services)
    assert out.count("(8 more)") == 1  # routers (10 models)


def test_a_profile_mistake_is_refused_naming_the_field(capsys, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[models.x]\npeak_rps = "lots"\n')
    code, out, err = run(capsys, str(bad))
    assert code == 2 and out == ""
    assert "models.x.peak_rps: Input should be a valid number" in err


def test_a_missing_profile_is_said_in_one_line(capsys, tmp_path):
    code, _, err = run(capsys, str(tmp_path / "none.toml"))
    assert code == 2
    assert err.startswith("switchyard: ") and "No such file" in err


def test_the_default_router_memory_is_the_deployed_one():
    # stacks.cloud imports the CDK; that it renders the core's figure is read from its
    # source instead
    source = (REPO_ROOT / "stacks" / "cloud.py").read_text()
    assert re.search(
        r"^from switchyard.costs import ROUTER_MEMORY_MB as ROUTER_MEMORY_MB", source, re.M
    )
    from switchyard.costs import ROUTER_MEMORY_MB
    from switchyard.traffic_profile import RequestPath

    assert RequestPath().router_memory_mb == ROUTER_MEMORY_MB


def test_profiles_are_in_the_repository():
    assert {p.name for p in Path(PROFILES).glob("*.toml")} >= {"seeds.toml", "demo.toml"}
