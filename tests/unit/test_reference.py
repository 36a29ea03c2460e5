"""The reference pages (``docs/reference/``) say what the code does now: each
committed page is what the generator writes from the code today, and every flag of
the command line, every field of the manifest and every ``SWITCHYARD_*`` variable
the code reads is in them, so one added without its page fails here."""

from __future__ import annotations

import argparse
import difflib
import re
import types
from pathlib import Path
from typing import Union, get_args, get_origin

import pytest
from pydantic import BaseModel

from switchyard.manifest import Manifest
from switchyard.settings import (
    RouterSettings,
    RoutingSettings,
    Settings,
    SplitterSettings,
    WorkerSettings,
    variable,
)
from switchyard_cli.main import build_parser
from switchyard_cli.reference import OUT, generate

ROOT = Path(__file__).resolve().parents[2]
FILES = ("cli.md", "manifest.md", "environment.md", "api.md", "openapi.json")
# The code that runs the platform, locally or deployed (not the tests, not the bench).
CODE = ("cli", "local", "layers", "functions", "gpu_workers", "stacks")
VARIABLE = re.compile(r"\bSWITCHYARD_[A-Z][A-Z0-9_]*[A-Z0-9]\b")


@pytest.fixture(scope="module")
def generated() -> dict[str, str]:
    return generate()


def sections(page: str) -> dict[str, str]:
    """A page's ``## `` sections by heading (backticks dropped)."""
    found = {}
    for part in re.split(r"^## ", page, flags=re.M)[1:]:
        heading, _, body = part.partition("\n")
        found[heading.strip().replace("`", "")] = body
    return found


@pytest.mark.parametrize("name", FILES)
def test_each_committed_page_is_what_the_code_gives_now(generated, name):
    # GIVEN the page as committed, and as the generator writes it from the code now
    path = OUT / name
    committed = path.read_text() if path.exists() else ""
    # THEN they are the same: a change to the parser, the manifest, the settings or the
    # router's API regenerates its page in the same commit
    if committed != generated[name]:
        diff = difflib.unified_diff(
            committed.splitlines(), generated[name].splitlines(), "committed", "code", lineterm=""
        )
        pytest.fail(
            f"docs/reference/{name} is stale: run `make reference`\n" + "\n".join(list(diff)[:60])
        )


def test_the_reference_folder_holds_only_generated_pages():
    assert sorted(p.name for p in OUT.iterdir()) == sorted(FILES)


def _commands(parser: argparse.ArgumentParser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                nested = [a for a in sub._actions if isinstance(a, argparse._SubParsersAction)]
                if nested:
                    yield from _commands(sub)
                else:
                    yield sub


def _names(action: argparse.Action) -> list[str]:
    return list(action.option_strings) or [str(action.metavar or action.dest.upper())]


def missing_from_cli_page(parser: argparse.ArgumentParser, page: str) -> list[str]:
    """``command: argument`` for each argument of the parser the page does not name in
    its command's section (the options of every command in their own)."""
    found = sections(page)
    every = found.get("Options of every command", "")
    missing = [
        f"switchyard: {name}"
        for action in parser._actions
        if not isinstance(action, argparse._HelpAction | argparse._SubParsersAction)
        for name in _names(action)
        if f"`{name}`" not in every
    ]
    for command in _commands(parser):
        section = found.get(command.prog)
        if section is None:
            missing.append(f"{command.prog}: the command itself")
            continue
        for action in command._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            shared = action.default is argparse.SUPPRESS  # --run-dir, --aws, ... after it
            for name in _names(action):
                if f"`{name}`" not in (every if shared else section):
                    missing.append(f"{command.prog}: {name}")
    return missing


def test_every_command_and_flag_is_in_the_cli_reference():
    # GIVEN the parser as `switchyard` builds it, and the committed page
    page = (OUT / "cli.md").read_text()
    # THEN every command has a section naming each of its arguments
    assert missing_from_cli_page(build_parser(), page) == []


def test_a_flag_missing_from_the_page_is_found():
    # GIVEN a parser with one flag more than the committed page knows of
    parser = build_parser()
    up = next(c for c in _commands(parser) if c.prog == "switchyard up")
    up.add_argument("--brand-new", help="not in the reference")
    # THEN the check names it
    page = (OUT / "cli.md").read_text()
    assert missing_from_cli_page(parser, page) == ["switchyard up: --brand-new"]


def _tables(model: type[BaseModel]) -> set[type[BaseModel]]:
    """``model`` and every model its fields hold (in a table, a dict or a union)."""
    found = {model}
    for field in model.model_fields.values():
        todo = [field.annotation]
        while todo:
            annotation = todo.pop()
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                if annotation not in found:
                    found |= _tables(annotation)
            elif get_origin(annotation) in (dict, tuple, list, Union, types.UnionType):
                todo.extend(get_args(annotation))
    return found


def test_every_field_of_the_manifest_is_in_its_reference_with_a_meaning():
    # GIVEN every model of the manifest, and the committed page's sections
    page = sections((OUT / "manifest.md").read_text())
    missing = []
    for model in _tables(Manifest):
        name = f"`{model.__module__}.{model.__qualname__}`"
        named = [body for body in page.values() if f"Model: {name}" in body]
        if model is not Manifest and not named:
            missing.append(f"{name}: no section")
            continue
        for field_name, field in model.model_fields.items():
            if model is Manifest:
                continue  # its fields are the page's top tables
            if not any(f"| `{field_name}` |" in body for body in named):
                missing.append(f"{name}.{field_name}")
            if model.__module__ == "switchyard.manifest" and not field.description:
                missing.append(f"{name}.{field_name}: no description")
    # THEN each has its section, and each field its row (and the manifest's own a meaning)
    assert missing == []


def test_every_setting_and_every_variable_the_code_reads_is_in_the_environment_reference():
    page = (OUT / "environment.md").read_text()
    settings = {
        variable(kind, name)
        for kind in (Settings, RoutingSettings, RouterSettings, SplitterSettings, WorkerSettings)
        for name in kind.model_fields
    }
    in_code = {
        name
        for folder in CODE
        for path in (ROOT / folder).rglob("*.py")
        for name in VARIABLE.findall(path.read_text())
    }
    missing = sorted(name for name in settings | in_code if f"`{name}`" not in page)
    assert missing == []
    for kind in (Settings, RouterSettings, SplitterSettings, WorkerSettings):
        for name, field in kind.model_fields.items():
            assert field.description, f"{kind.__name__}.{name}: no description"
