"""docs/troubleshooting.md quotes what the platform prints when it cannot start or
cannot be reached: each quoted message is what the code prints now, with the page's
example values (port 8080, pid 4242, the repository at /home/you/switchyard) in place
of this run's."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
from pathlib import Path

import pytest

from switchyard_cli.main import main
from switchyard_local.emulator import free_port
from switchyard_local.provision import register_demo_models

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "troubleshooting.md"
EXAMPLE_ROOT = "/home/you/switchyard"
EXAMPLE_PORT = 8080
EXAMPLE_PID = 4242
EXAMPLE_URL = "http://127.0.0.1:41234"


def quoted(run_dir: Path, text: str, port: int | None = None, pid: int | None = None) -> str:
    """``text`` as the page writes it: this run's folder, port, pid and emulator
    address replaced by the page's examples."""
    text = text.replace(str(run_dir), f"{EXAMPLE_ROOT}/.run")
    if port is not None:
        text = re.sub(rf"\b{port}\b", str(EXAMPLE_PORT), text)
    if pid is not None:
        text = text.replace(f"pid {pid}", f"pid {EXAMPLE_PID}")
    return re.sub(r"http://127\.0\.0\.1:\d+/?", EXAMPLE_URL, text)


def refused(capsys, *argv: str) -> str:
    capsys.readouterr()
    code = main(list(argv))
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    return err.strip()


def on_page(message: str) -> None:
    assert message in PAGE.read_text(), f"not on docs/troubleshooting.md: {message}"


@pytest.fixture(autouse=True)
def signals_kept():
    """`switchyard up` takes over SIGINT and SIGTERM; this process gets its own back."""
    kept = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    yield
    for number, handler in kept.items():
        signal.signal(number, handler)


@pytest.fixture
def repository_run_dir(tmp_path) -> Path:
    run_dir = tmp_path / ".run"
    run_dir.mkdir()
    return run_dir


def test_a_taken_port_is_said_as_the_page_says(capsys, repository_run_dir):
    # GIVEN something listening on the platform's port
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        # WHEN the platform is started on it
        message = refused(capsys, "--run-dir", str(repository_run_dir), "up", "--port", str(port))
    # THEN it refuses with the page's message, before it starts anything
    on_page(quoted(repository_run_dir, message, port=port))


def test_a_platform_running_from_the_folder_is_said_as_the_page_says(capsys, repository_run_dir):
    # GIVEN a run folder whose platform runs (this process stands in for it)
    (repository_run_dir / "platform.json").write_text(json.dumps({"pid": os.getpid()}))
    # WHEN a second platform is started from it
    message = refused(
        capsys, "--run-dir", str(repository_run_dir), "up", "--port", str(free_port())
    )
    on_page(quoted(repository_run_dir, message, pid=os.getpid()))


def test_a_command_without_a_platform_is_said_as_the_page_says(
    capsys, repository_run_dir, run_dir, provisioned
):
    # no platform was started in the folder
    on_page(quoted(repository_run_dir, refused(capsys, "--run-dir", str(repository_run_dir),
                                              "models", "list")))  # fmt: skip
    # its platform was killed outright (its pid is no process)
    record = json.loads((run_dir / "platform.json").read_text())
    dead = 2**22 + 17  # above the kernel's pid_max default: no process has it
    (repository_run_dir / "platform.json").write_text(json.dumps({**record, "pid": dead}))
    message = refused(capsys, "--run-dir", str(repository_run_dir), "models", "list")
    on_page(quoted(repository_run_dir, message, pid=dead))
    # its record is there but its emulator does not answer
    record["settings"]["aws_endpoint_url"] = f"http://127.0.0.1:{free_port()}"
    (repository_run_dir / "platform.json").write_text(json.dumps(record))
    message = refused(capsys, "--run-dir", str(repository_run_dir), "models", "list")
    on_page(quoted(repository_run_dir, message))


def test_missing_demo_models_are_said_as_the_page_says(provisioned, tmp_path):
    # GIVEN no built models
    models = tmp_path / "build" / "models"
    models.mkdir(parents=True)
    # WHEN the platform registers the demo versions at its start
    with pytest.raises(FileNotFoundError) as raised:
        register_demo_models(provisioned, models)
    # THEN `switchyard up` says what the page quotes (``up: `` and the error's line)
    message = f"switchyard: up: {raised.value}"
    on_page(message.replace(str(tmp_path), EXAMPLE_ROOT))


def test_the_kept_data_and_the_gateway_refusals_are_quoted_as_the_code_says():
    from switchyard.schemas import FORBIDDEN, UNAUTHORIZED
    from switchyard_local import supervisor

    source = Path(supervisor.__file__).read_text()
    assert "keeping the data of the last run (" in source
    assert '"`switchyard up --fresh` starts empty"' in source
    on_page(
        f"keeping the data of the last run ({EXAMPLE_ROOT}/.run/state/emulator.pickle); "
        "`switchyard up --fresh` starts empty"
    )
    for answer in (UNAUTHORIZED, FORBIDDEN):  # the body the gateway stand-in writes
        on_page(json.dumps(answer.body()))
