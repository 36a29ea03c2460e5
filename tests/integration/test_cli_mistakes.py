"""An operator's mistakes at the command line get one line of why and exit code 2,
never a traceback, and change nothing: the CLI runs as an operator runs it, from a
local platform's ``platform.json``, against the emulator over its wire protocol."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest

from switchyard_cli.main import main
from switchyard_local.emulator import free_port

MODEL = "digits-cnn"


def refused(result: tuple[int, str, str], *words: str) -> None:
    code, _, err = result
    assert code == 2, result
    assert err.startswith("switchyard: ") and len(err.strip().splitlines()) == 1, err
    for word in words:
        assert word in err, err


def test_commands_say_when_the_platform_does_not_answer(cli, run_dir, provisioned, tmp_path):
    # GIVEN the record of a platform that has stopped (its emulator's port now closed)
    stopped = tmp_path / "stopped"
    stopped.mkdir()
    record = (run_dir / "platform.json").read_text()
    dead = f"http://127.0.0.1:{free_port()}"
    (stopped / "platform.json").write_text(record.replace(provisioned.endpoint_url, dead))
    # THEN every command that reads it says so: each raised EndpointConnectionError
    for command in (
        ("models", "list"),
        ("traffic", "show", MODEL),
        ("shadow", "report", MODEL),
        ("dlq", "list", MODEL),
        ("jobs", "list"),
        ("jobs", "show", "abc"),
    ):
        refused(cli(*command, where=stopped), "does not answer", "make up")


def test_commands_say_when_the_platform_was_killed_outright(cli, run_dir, tmp_path):
    # GIVEN the record a platform killed with -9 leaves behind (its process is gone)
    gone = subprocess.Popen(["true"])
    gone.wait()
    killed = tmp_path / "killed"
    killed.mkdir()
    record = json.loads((run_dir / "platform.json").read_text())
    (killed / "platform.json").write_text(json.dumps(record | {"pid": gone.pid}))
    # THEN commands say so, not that it "does not answer"
    for command in (("models", "list"), ("status",), ("jobs", "list")):
        refused(cli(*command, where=killed), f"(pid {gone.pid}) is no longer running", "make up")


def test_a_platform_record_that_is_not_one_is_said_so(cli, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    for text in ("{not json", "[]", '{"settings": {}}'):
        (broken / "platform.json").write_text(text)
        refused(cli("models", "list", where=broken), "is not a platform's record")
    refused(cli("models", "list", where=tmp_path / "none"), "no local platform found")


def test_a_manifest_that_cannot_be_read_is_named(cli, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[models\n")
    for path in (tmp_path / "missing.toml", tmp_path, bad):
        refused(cli("--manifest", str(path), "models", "list"), f"--manifest {path}")


@pytest.mark.parametrize("tenant", ["nobody", "", "globex/digits-cnn"])
def test_a_tenant_the_manifest_does_not_name_is_refused(cli, tenant, tmp_path):
    # It was taken: "nobody" got a job, "" meant the first tenant (and its secret was
    # printed), "globex/digits-cnn" ran a minilm-embed job as globex's digits-cnn one.
    lines = tmp_path / "lines.jsonl"
    lines.write_text('"a line"\n')
    for command in (
        ("jobs", "submit", str(lines), "--model", "minilm-embed"),
        ("jobs", "list"),
        ("jobs", "secret"),
    ):
        refused(cli(*command, "--tenant", tenant), "unknown tenant", "acme, globex")


def test_job_commands_refuse_what_they_cannot_do(cli, tmp_path):
    refused(cli("jobs", "show", ""), "a job id is required")
    refused(cli("jobs", "submit", str(tmp_path / "none.jsonl"), "--model", MODEL), "no such file")
    for output in (str(tmp_path), str(tmp_path / "no" / "x.jsonl"), ""):
        refused(cli("jobs", "fetch", "abc", "-o", output), "-o", "not a file in an existing folder")


def test_a_version_is_checked_before_its_artifact_is_uploaded(cli, clients, provisioned, tmp_path):
    artifact = tmp_path / "m.pt"
    artifact.write_bytes(b"weights")
    bucket = provisioned.resource_names()["artifacts_bucket"]

    def uploaded() -> list[str]:
        listed = clients("s3").list_objects_v2(Bucket=bucket, Prefix=f"{MODEL}/")
        return [o["Key"] for o in listed.get("Contents", [])]

    before = uploaded()
    for version, extra, words in (
        ("", (), ("version",)),
        ("v 1/../x", (), ("version",)),
        ("v10", ("--fallback", "v99"), ("--fallback v99", "not an active version")),
        ("v10", ("--fallback", "v10"), ("--fallback v10",)),
    ):
        args = ("models", "register", MODEL, version, "--artifact", str(artifact), *extra)
        refused(cli(*args), *words)
    # A file that is not the runtime's artifact was registered active, and failed
    # every request it got until the DLQ; a version cannot be registered again.
    hugging_face = tmp_path / "model.tar"
    (tmp_path / "config.json").write_text("{}")
    with tarfile.open(hugging_face, "w") as tar:
        tar.add(tmp_path / "config.json", arcname="config.json")
    torchscript = tmp_path / "model.pt"
    with zipfile.ZipFile(torchscript, "w") as archive:
        archive.writestr("model/data.pkl", b"")
        archive.writestr("model/code/__torch__.py", "")
    for model, wrong, words in (
        (MODEL, artifact, "not a TorchScript module"),
        (MODEL, hugging_face, "not a TorchScript module"),
        ("minilm-embed", torchscript, "not a tar of a Hugging Face model's folder"),
        ("pydoc-gpt", artifact, "pydoc-gpt runs causal-lm"),
    ):
        refused(cli("models", "register", model, "v10", "--artifact", str(wrong)), words)
    assert uploaded() == before
    code, listed, _ = cli("models", "list")
    assert code == 0 and "v10" not in listed


@pytest.mark.parametrize(
    "args",
    [
        ("up", "--port", "70000"),
        ("up", "--port", "0"),
        ("up", "--dashboard-port", "-1"),
        ("status", "--watch", "--interval", "-1"),
        ("status", "--watch", "--interval", "0"),
        ("traffic", "show", MODEL, "--limit", "0"),
        ("jobs", "list", "--limit", "-5"),
    ],
)
def test_numbers_out_of_range_are_refused_by_the_parser(args, capsys):
    with pytest.raises(SystemExit) as exited:
        main(list(args))
    assert exited.value.code == 2
    assert "is not a" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (("--stage", "prod", "models", "list"), "--stage names"),
        (("--stage", "dev", "--profile", "ops", "status"), "--stage, --profile name"),
        (("--region", "eu-west-1", "dlq", "list", MODEL), "--region names"),
    ],
)
def test_options_of_a_deployed_stack_need_aws(args, named, capsys):
    # Without --aws they were ignored: the command acted on the local platform
    with pytest.raises(SystemExit) as exited:
        main(list(args))
    assert exited.value.code == 2
    assert f"{named} a deployed stack: add --aws" in capsys.readouterr().err


def test_a_bad_port_in_the_environment_troubles_only_up(cli, monkeypatch):
    monkeypatch.setenv("PORT", "abc")
    # every command's parser built `up`'s default: int("abc") raised for all of them
    assert cli("models", "list")[0] == 0
    with pytest.raises(SystemExit) as exited:
        main(["up"])
    assert exited.value.code == 2


def test_up_on_a_port_already_served_stops_before_it_starts_anything(tmp_path, capsys):
    # It printed READY with a key the platform already there never knew, then
    # restarted its router, which could not listen, five times a second.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["--run-dir", str(tmp_path / "run"), "up", "--port", str(port)])
    assert code == 2
    assert f"switchyard: up: port {port} is in use" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_up_in_the_run_folder_of_a_running_platform_stops_before_it_starts_anything(
    tmp_path, capsys
):
    # A second platform on another port took the first one's .run: it wrote over its
    # platform.json and removed it on stopping, and the CLI lost the first platform.
    run = tmp_path / "run"
    run.mkdir()
    record = json.dumps({"pid": os.getpid(), "settings": {}, "names": {}})
    (run / "platform.json").write_text(record)
    assert main(["--run-dir", str(run), "up", "--port", str(free_port())]) == 2
    assert f"a platform (pid {os.getpid()}) runs from {run}" in capsys.readouterr().err
    # (--run-dir is taken after the command as well, as one writes it)
    assert main(["up", "--port", str(free_port()), "--run-dir", str(run)]) == 2
    assert f"a platform (pid {os.getpid()}) runs from {run}" in capsys.readouterr().err
    assert (run / "platform.json").read_text() == record
    assert sorted(p.name for p in run.iterdir()) == ["platform.json"]


def test_up_with_paths_that_hold_no_platform_says_so_in_a_line(tmp_path, capsys):
    # Both were tracebacks; the missing artifact only after the emulator had started
    run = ["--run-dir", str(tmp_path / "run")]
    port = ["--port", str(free_port())]
    missing = tmp_path / "missing.toml"
    assert main([*run, "--manifest", str(missing), "up", *port]) == 2
    assert f"switchyard: --manifest {missing}: " in capsys.readouterr().err
    assert main([*run, "up", *port, "--models-dir", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("switchyard: up: ") and "run `make models` first" in err, err
    assert not (tmp_path / "run" / "platform.json").exists()


@pytest.mark.parametrize(
    ("option", "said"),
    [
        (("--min-workers", "5"), "up --min-workers: "),  # exited 1, not 2
        (("--standby-workers", "1000"), "up --standby-workers: 1000 is more than the "),
    ],
)
def test_up_with_more_workers_than_the_models_can_have_is_refused(option, said, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["--run-dir", str(run), "up", "--port", str(free_port()), *option]) == 2
    assert capsys.readouterr().err.startswith(f"switchyard: {said}")
    assert not run.exists()


def test_routing_and_registration_mistakes_are_named(cli, tmp_path):
    # v1 weighed twice read "they sum to 0"; an empty --sticky was ignored; a folder
    # given as the artifact was "no such file"
    refused(cli("traffic", "set", MODEL, "v1=100", "v1=0"), "v1 is given a weight twice")
    refused(cli("traffic", "set", MODEL, "v1=100", "--sticky", " "), "--sticky")
    # a shadow of the version taking all the traffic was taken, and copied nothing
    refused(cli("traffic", "set", MODEL, "v1=100", "--shadow", "v1:50"), "takes all the traffic")
    # so was a fallback of it, which never answered for anyone
    refused(cli("traffic", "set", MODEL, "v1=100", "--fallback", "v1"), "--fallback v1: v1 takes")
    refused(cli("models", "register", MODEL, "v9", "--artifact", str(tmp_path)), "a folder")


def test_the_run_folder_and_models_are_the_repositorys_wherever_the_command_runs(
    monkeypatch, tmp_path
):
    # From outside the repository, commands said "no local platform found" while one
    # ran, and `up` found no models: both defaults were relative to the directory
    from stacks.assets import REPO_ROOT
    from switchyard_cli.main import build_parser

    monkeypatch.delenv("SWITCHYARD_RUN_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    assert Path(build_parser().parse_args(["models", "list"]).run_dir) == REPO_ROOT / ".run"
    assert Path(build_parser().parse_args(["up"]).models_dir) == REPO_ROOT / "build" / "models"
