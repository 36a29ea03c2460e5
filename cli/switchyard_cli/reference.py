"""The reference pages under ``docs/reference/``, generated from the code, so that
they say what the code does now:

- ``cli.md``: every command of ``switchyard``, its arguments, defaults and help, from
  its parser (``switchyard_cli.main.build_parser``), and the environment variables
  its defaults come from (found by building the parser with each one set);
- ``manifest.md``: every field of ``manifest.toml``, its type, default, bounds and
  meaning, from the manifest's models (``switchyard.manifest.Manifest``);
- ``environment.md``: the ``SWITCHYARD_*`` contract of the deployed code, from its
  settings classes (``switchyard.settings``), and the variables the command line and
  the local platform read;
- ``api.md`` and ``openapi.json``: the router app's OpenAPI document, as the local
  platform serves it at ``/openapi.json``, built from the app over the manifest's
  models (in memory, no platform running) and rendered.

``make reference`` writes them (``python -m switchyard_cli.reference``); ``--check``
says which committed page differs from what the code gives now, and
``tests/unit/test_reference.py`` fails on the same. This is the operator's package:
nothing deployed imports it.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import re
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin
from unittest import mock

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from stacks.assets import MANIFEST_FILE, REPO_ROOT

OUT = REPO_ROOT / "docs" / "reference"
GENERATED = "Generated from the code by `make reference`"
_PROBE = "__probe__"


# -- rendering Markdown -------------------------------------------------------------


def _doc(text: str | None) -> str:
    """A docstring as Markdown: dedented, its paragraphs joined, ``x`` as `x`."""
    if not text:
        return ""
    paragraphs = inspect.cleandoc(text).split("\n\n")
    joined = "\n\n".join(" ".join(p.split()) for p in paragraphs)
    return re.sub(r":(?:class|func|meth|mod|attr):`", "`", joined.replace("``", "`"))


def _cell(text: str) -> str:
    """Text that fits a table cell: one line, its pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _page(title: str, source: str, intro: str, sections: list[str]) -> str:
    head = f"# {title}\n\n{GENERATED} ({source}); do not edit it by hand.\n"
    body = "\n\n".join(part.strip() for part in [intro, *sections] if part.strip())
    return f"{head}\n{body}\n"


def _number(value: float) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) or float(value).is_integer() and abs(value) >= 1000:
        return f"{int(value):,}"
    return repr(value)


def _toml(value: Any) -> str:
    """A value as manifest.toml writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        inner = ", ".join(f"{k} = {_toml(v)}" for k, v in value.items())
        return "{ " + inner + " }" if inner else "{}"
    return str(value)


def _relative(value: Any) -> Any:
    """A path in the repository, as a path from its root."""
    root = str(REPO_ROOT) + os.sep
    if isinstance(value, str) and value.startswith(root):
        return value[len(root) :]
    return value


# -- the command line ---------------------------------------------------------------


class _RecordingEnviron(dict[str, str]):
    """An environment that records the names read from it."""

    def __init__(self, values: dict[str, str], reads: list[str]) -> None:
        super().__init__(values)
        self.reads = reads

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        self.reads.append(key)
        return super().get(key, default)

    def __getitem__(self, key: str) -> str:
        self.reads.append(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self.reads.append(str(key))
        return super().__contains__(key)


@contextmanager
def _environment(values: dict[str, str]) -> Iterator[list[str]]:
    """``os.environ`` is ``values`` alone while the block runs; yields the names read."""
    reads: list[str] = []
    with mock.patch.object(os, "environ", _RecordingEnviron(values, reads)):
        yield reads


def _parser(env: dict[str, str]) -> tuple[argparse.ArgumentParser, list[str]]:
    from switchyard_cli.main import build_parser

    with _environment(env) as reads:
        parser = build_parser()
    return parser, list(dict.fromkeys(reads))


def _commands(parser: argparse.ArgumentParser) -> Iterator[tuple[argparse.ArgumentParser, str]]:
    """Every parser under ``parser``, depth first, each with its one-line help."""
    for action in parser._actions:  # noqa: SLF001 - argparse lists its subparsers only here
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            about = {a.dest: a.help or "" for a in action._choices_actions}  # noqa: SLF001
            for name, sub in action.choices.items():
                yield sub, about.get(name, "")
                yield from _commands(sub)


def _arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [
        a
        for a in parser._actions  # noqa: SLF001
        if not isinstance(a, argparse._HelpAction | argparse._SubParsersAction)  # noqa: SLF001
    ]


def _defaults(parser: argparse.ArgumentParser) -> dict[tuple[str, str], Any]:
    found = {("switchyard", a.dest): a.default for a in _arguments(parser)}
    for sub, _ in _commands(parser):
        found.update({(sub.prog, a.dest): a.default for a in _arguments(sub)})
    return found


def cli_environment() -> dict[tuple[str, str], str]:
    """(command, argument's dest) -> the environment variable its default comes from:
    the names building the parser reads, each set in turn to see whose default moves."""
    parser, reads = _parser({})
    clean = _defaults(parser)
    found: dict[tuple[str, str], str] = {}
    for name in reads:
        probed, _ = _parser({name: _PROBE})
        for where, default in _defaults(probed).items():
            if default != clean.get(where):
                found[where] = name
    return found


def _synopsis(prog: str, actions: list[argparse.Action]) -> str:
    parts = [prog]
    for action in actions:
        if not action.option_strings:
            name = action.metavar or action.dest.upper()
            parts.append(f"{name} ..." if action.nargs in ("+", "*") else str(name))
            continue
        flag = max(action.option_strings, key=len)
        part = flag if action.nargs == 0 else f"{flag} {action.metavar or action.dest.upper()}"
        parts.append(part if action.required else f"[{part}]")
    return " ".join(parts)


def _argument_row(action: argparse.Action, env: str | None) -> tuple[str, str, str, str]:
    if action.option_strings:
        name = ", ".join(f"`{s}`" for s in action.option_strings)
        if action.nargs != 0:
            name += f" {action.metavar or action.dest.upper()}"
    else:
        name = f"`{action.metavar or action.dest.upper()}`"
    if action.required or not action.option_strings:
        default = "required" + (", one or more" if action.nargs in ("+", "*") else "")
    elif action.nargs == 0:
        default = "on" if action.default else "off"
    elif action.default is None:
        default = "–"
    else:
        default = f"`{_relative(action.default)}`"
    meaning = (action.help or "") % {"default": action.default, "prog": ""}
    if action.choices and not isinstance(action.choices, dict):
        meaning += (
            (". " if meaning else "") + "One of " + ", ".join(f"`{c}`" for c in action.choices)
        )
    return name, default, f"`{env}`" if env else "", meaning


def _argument_table(actions: list[argparse.Action], env: dict[str, str]) -> str:
    rows = [_argument_row(a, env.get(a.dest)) for a in actions]
    return _table(("argument", "default", "environment", "meaning"), rows)


# Options every command takes (after the command too); described once.
_EVERY_COMMAND = ("run_dir", "manifest", "aws", "stage", "profile", "region")


def cli_page() -> str:
    parser, _ = _parser({})
    env = cli_environment()
    top = _arguments(parser)
    sections = [
        "## Options of every command\n\n"
        "Given before the command or after it (`switchyard --aws status`, `switchyard "
        "status --aws`); one given after it stands over one given before.\n\n"
        + _argument_table(top, {d: v for (p, d), v in env.items() if p == "switchyard"})
    ]
    index = []
    for sub, about in _commands(parser):
        actions = [
            a
            for a in _arguments(sub)
            if not (a.dest in _EVERY_COMMAND and a.default is argparse.SUPPRESS)
        ]
        nested = any(isinstance(a, argparse._SubParsersAction) for a in sub._actions)  # noqa: SLF001
        if nested:
            continue  # a group (`models`, `traffic`): its commands have sections
        index.append((f"`{sub.prog}`", _doc(sub.description or about)))
        text = f"## {sub.prog}\n\n{_doc(sub.description or about)}\n\n"
        text += f"```\n{_synopsis(sub.prog, actions)}\n```"
        if actions:
            own = {d: v for (p, d), v in env.items() if p == sub.prog}
            text += "\n\n" + _argument_table(actions, own)
        sections.append(text)
    intro = (
        f"{_doc(parser.description)}\n\n"
        "`make up` installs it as `.venv/bin/switchyard` (put `.venv/bin` on your `PATH`, "
        "or run `.venv/bin/switchyard`, or `python -m switchyard_cli` with the virtual "
        "environment's Python). Paths are relative to the repository. A refused command "
        "prints `switchyard: <why>` on one line and exits 2.\n\n"
        + _table(("command", "what it does"), index)
    )
    return _page(
        "Command line: `switchyard`",
        "the parser, `switchyard_cli.main.build_parser`",
        intro,
        sections,
    )


# -- the manifest -------------------------------------------------------------------


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _optional(annotation: Any) -> Any:
    """``X`` of ``X | None``, else the annotation itself."""
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _variants(annotation: Any) -> list[type[BaseModel]]:
    """The models of a union of models (a discriminated one, as the signature)."""
    if get_origin(annotation) in (Union, types.UnionType):
        args = get_args(annotation)
        if args and all(_is_model(a) for a in args):
            return list(args)
    return []


def _type_name(annotation: Any) -> str:
    annotation = _optional(annotation)
    origin, args = get_origin(annotation), get_args(annotation)
    if annotation is bool:
        return "boolean"
    if annotation is int:
        return "integer"
    if annotation is float:
        return "number"
    if annotation is str:
        return "string"
    if origin is Literal:
        return " or ".join(f'`"{a}"`' for a in args)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return f"list of {_type_name(args[0])}s"
        return f"list of {len(args)} {_type_name(args[0])}" + ("s" if len(args) > 1 else "")
    if origin is dict:
        key, value = args
        keys = ", ".join(f"`{k}`" for k in get_args(key)) if get_origin(key) is Literal else "name"
        return f"table: {keys} → {_type_name(value)}"
    if _variants(annotation):
        return "inline table, by `kind`"
    if _is_model(annotation):
        return "table of " + ", ".join(f"`{name}`" for name in annotation.model_fields)
    return str(annotation)


def _bounds(field: FieldInfo) -> str:
    found = []
    for item in field.metadata:
        for kind, attribute, sign in (
            (annotated_types.Gt, "gt", ">"),
            (annotated_types.Ge, "ge", "≥"),
            (annotated_types.Lt, "lt", "<"),
            (annotated_types.Le, "le", "≤"),
        ):
            if isinstance(item, kind):
                found.append(f"{sign} {_number(getattr(item, attribute))}")
        if isinstance(item, annotated_types.MultipleOf):
            found.append(f"a multiple of {_number(item.multiple_of)}")
        pattern = getattr(item, "pattern", None)
        if pattern:
            found.append(f"matches `{pattern}`")
    return ", ".join(found)


def _field_default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        return f"`{_toml(field.default_factory())}`"  # type: ignore[call-arg]
    if field.default is PydanticUndefined:
        return "required"
    value = field.default
    if value is None:
        return "unset"
    if isinstance(value, BaseModel):
        given = value.model_dump(exclude_none=True)
        return "its fields' defaults" if given else "none"
    return f"`{_toml(value)}`"


def _key(name: str) -> str:
    """The placeholder of a table's keys: ``models`` -> ``<model>``."""
    return f"<{name[:-1] if name.endswith('s') else name}>"


def manifest_models() -> list[tuple[str, type[BaseModel], str]]:
    """Every table of the manifest: its path (``stages.<stage>.scaling``), its model,
    and for a variant of the signature the ``kind`` it is chosen by, in page order.
    A model met again (a model's ``scaling.dev``) is listed where it was first met."""
    from switchyard.manifest import Manifest

    found: list[tuple[str, type[BaseModel], str]] = []
    seen: set[type[BaseModel]] = set()

    def walk(path: str, model: type[BaseModel], kind: str = "") -> None:
        if model in seen:
            return
        seen.add(model)
        found.append((path, model, kind))
        for name, field in model.model_fields.items():
            annotation = _optional(field.annotation)
            here = f"{path}.{name}" if path else name
            if get_origin(annotation) is dict and _is_model(get_args(annotation)[1]):
                walk(f"{here}.{_key(name)}", get_args(annotation)[1])
            elif _is_model(annotation):
                walk(here, annotation)
            for variant in _variants(annotation):
                walk(here, variant, str(variant.model_fields["kind"].default))

    walk("", Manifest)
    return found


def _where(model: type[BaseModel]) -> str:
    return f"`{model.__module__}.{model.__qualname__}`"


def manifest_page() -> str:
    tables = manifest_models()
    first_path = {model: path for path, model, _ in tables}
    sections = []
    for path, model, kind in tables:
        if not path:
            continue
        rows = []
        for name, field in model.model_fields.items():
            annotation = _optional(field.annotation)
            kind_of = _type_name(field.annotation)
            nested = annotation if _is_model(annotation) else None
            if nested is not None:
                first = first_path[nested]
                kind_of = "table, below" if first == f"{path}.{name}" else f"table, as `[{first}]`"
            bounds = _bounds(field)
            rows.append(
                (
                    f"`{name}`",
                    kind_of + (f", {bounds}" if bounds else ""),
                    _field_default(field),
                    field.description or "",
                )
            )
        title = f"[{path}]" if not kind else f'[{path}] with kind = "{kind}"'
        text = f"## `{title}`\n\nModel: {_where(model)}. {_doc(model.__doc__)}\n\n"
        text += _table(("field", "type", "default", "meaning"), rows)
        sections.append(text)
    from switchyard.manifest import Manifest

    intro = (
        f"{_doc(Manifest.__doc__)} One file feeds the CDK app and the local platform; a "
        "mistake in it stops both with a message naming the field "
        "(`switchyard.manifest.load_manifest`). A table's name in angle brackets "
        "(`<model>`) is a name of your choice; `<stage>` is `dev` or `prod`. No field "
        "beyond these is taken."
    )
    return _page(
        "Manifest: `manifest.toml`", "the manifest's models, `switchyard.manifest`", intro, sections
    )


# -- the environment ----------------------------------------------------------------


def _local_variables() -> dict[str, Callable[..., Any]]:
    """The local platform's own variables, each with the function that reads it."""
    from switchyard_local.role_policies import iam_wanted

    return {"SWITCHYARD_LOCAL_IAM": iam_wanted}


def _settings_classes() -> list[tuple[type[BaseModel], str]]:
    from switchyard.settings import (
        RouterSettings,
        RoutingSettings,
        Settings,
        SplitterSettings,
        WorkerSettings,
    )

    return [
        (Settings, "every process (the routers, the splitter, the workers)"),
        (RoutingSettings, "the routers and the splitter, which read routing documents"),
        (RouterSettings, "the router functions (locally, the one router process)"),
        (SplitterSettings, "the batch splitter function"),
        (WorkerSettings, "each model's workers"),
    ]


def _is_json(annotation: Any) -> bool:
    """Whether the contract writes a field of this type as JSON: a mapping, a list or
    a model (``switchyard.settings.from_environment``)."""
    annotation = _optional(annotation)
    return get_origin(annotation) in (dict, list, tuple, set) or _is_model(annotation)


def environment_page() -> str:
    from switchyard.settings import variable

    sections = []
    for kind, readers in _settings_classes():
        own = kind.__annotations__
        rows = []
        for name, field in kind.model_fields.items():
            if name not in own:
                continue
            bounds = _bounds(field)
            written = " as JSON" if _is_json(field.annotation) else ""
            rows.append(
                (
                    f"`{variable(kind, name)}`",
                    f"{_type_name(field.annotation)}{written}" + (f", {bounds}" if bounds else ""),
                    _field_default(field),
                    field.description or "",
                )
            )
        text = f"## `{kind.__name__}`: {readers}\n\nModel: {_where(kind)}. {_doc(kind.__doc__)}"
        text += "\n\n" + _table(("variable", "type", "default", "meaning"), rows)
        sections.append(text)

    parser, _ = _parser({})
    actions = {(p.prog, a.dest): a for p, _ in _commands(parser) for a in _arguments(p)}
    actions.update({("switchyard", a.dest): a for a in _arguments(parser)})
    rows = []
    for (prog, dest), name in sorted(cli_environment().items(), key=lambda kv: kv[1]):
        action = actions[(prog, dest)]
        flag = max(action.option_strings, key=len)
        _, default, _, meaning = _argument_row(action, None)
        rows.append((f"`{name}`", f"`{prog} {flag}`", default, meaning))
    sections.append(
        "## The command line's\n\nEach is the default of an option of `switchyard` "
        "([cli.md](cli.md)); the option, given, stands over it. `make up` passes them on "
        "(`PORT=9000 make up`, `SWITCHYARD_MIN_WORKERS=1 make up`).\n\n"
        + _table(("variable", "option", "default", "meaning"), rows)
    )
    rows = [
        (f"`{name}`", f"`{reader.__module__}.{reader.__qualname__}`", _doc(reader.__doc__))
        for name, reader in _local_variables().items()
    ]
    sections.append(
        "## The local platform's\n\n" + _table(("variable", "read by", "meaning"), rows)
    )
    intro = (
        "The deployed code (router, splitter, worker) reads its configuration from "
        "`SWITCHYARD_<FIELD>` variables only, parsed once at its start into its settings "
        "class; a missing or malformed one stops the start with its name "
        "(`switchyard.settings.get_settings`). The CDK app writes them in the cloud and the "
        "local supervisor writes them locally, both with "
        "`switchyard.settings.to_environment`, from the manifest. A table or a list is "
        "written as JSON, anything else as text. You set none of these by hand: the "
        "manifest ([manifest.md](manifest.md)) is where their values come from. The "
        "variables after them are yours to set."
    )
    return _page(
        "Environment variables",
        "the settings classes of `switchyard.settings`, the parser of `switchyard`, and "
        "the local platform",
        intro,
        sections,
    )


# -- the API ------------------------------------------------------------------------


def openapi_document() -> dict[str, Any]:
    """The router app's OpenAPI document, as the local platform's router builds it:
    the app over the manifest's models (each demo version registered), with the local
    router's settings, on AWS services mocked in this process."""
    from moto import mock_aws

    from switchyard import aws
    from switchyard.manifest import load_manifest
    from switchyard.registry import DynamoDBRegistry
    from switchyard.schemas import LANES
    from switchyard.settings import RouterSettings
    from switchyard.tables import REGISTRY
    from switchyard_local.provision import Provisioned
    from switchyard_router.app import create_app
    from switchyard_router.wiring import build_deps

    manifest = load_manifest(MANIFEST_FILE)
    stage, region = "dev", manifest.platform.region
    names = manifest.names(stage)
    account_url = f"https://sqs.{region}.amazonaws.com/000000000000"
    local = Provisioned(manifest, stage, region, None, names)  # type: ignore[arg-type]
    local.queues = {
        model: {lane: f"{account_url}/{names.queue(model, lane)}" for lane in LANES}
        for model in manifest.models
    }
    local.drop_queue = f"{account_url}/{names.batch_drop_queue}"
    # Clients made here must reach the mock, not an endpoint or profile of the shell's.
    outside = {
        k: v for k, v in os.environ.items() if not k.startswith(("AWS_ENDPOINT_URL", "AWS_PROFILE"))
    }
    aws.reset_clients()
    try:
        with mock.patch.dict(os.environ, outside, clear=True), mock_aws():
            ddb = aws.client("dynamodb", region)
            keys = (REGISTRY.partition, "HASH"), (REGISTRY.sort, "RANGE")
            ddb.create_table(
                TableName=names.registry_table,
                KeySchema=[{"AttributeName": n, "KeyType": k} for n, k in keys],
                AttributeDefinitions=[{"AttributeName": n, "AttributeType": "S"} for n, _ in keys],
                BillingMode="PAY_PER_REQUEST",
            )
            registry = DynamoDBRegistry(ddb, names.registry_table)
            for model, spec in manifest.models.items():
                for version in spec.demo_versions or ("v1",):
                    uri = f"s3://{names.artifacts_bucket}/models/{model}/{version}"
                    registry.register(spec.version_record(model, version, uri, "0" * 64))
            settings = RouterSettings(**local.router_values(None))
            return dict(create_app(build_deps(settings)).openapi())
    finally:
        aws.reset_clients()


def _ref_name(schema: dict[str, Any]) -> str:
    return str(schema["$ref"]).rsplit("/", 1)[-1]


def _anchor(name: str) -> str:
    return re.sub(r"[^a-z0-9_-]", "", name.lower())


def _json_type(schema: dict[str, Any]) -> str:
    """A JSON schema in a few words: ``array (1 to 256) of number ≥ 0``."""
    if not schema:
        return "any"
    if "$ref" in schema:
        name = _ref_name(schema)
        return f"[{name}](#{_anchor(name)})"
    for union in ("anyOf", "oneOf"):
        if union in schema:
            return " or ".join(dict.fromkeys(_json_type(s) for s in schema[union]))
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    if "enum" in schema:
        return " or ".join(f"`{json.dumps(v)}`" for v in schema["enum"])
    kind = schema.get("type", "any")
    if isinstance(kind, list):
        text = " or ".join(kind)
    elif kind == "array":
        size = ""
        low, high = schema.get("minItems"), schema.get("maxItems")
        if low is not None and low == high:
            size = f" ({low})"
        elif low is not None or high is not None:
            size = f" ({low or 0} to {high if high is not None else 'any'})"
        text = f"array{size} of {_json_type(schema.get('items', {}))}"
    elif kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        text = f"object of {_json_type(schema['additionalProperties'])}"
    else:
        text = str(kind)
    bounds = []
    for key, sign in (
        ("exclusiveMinimum", ">"),
        ("minimum", "≥"),
        ("exclusiveMaximum", "<"),
        ("maximum", "≤"),
        ("minLength", "length ≥"),
        ("maxLength", "length ≤"),
    ):
        if key in schema:
            bounds.append(f"{sign} {_number(schema[key])}")
    if "pattern" in schema:
        bounds.append(f"matching `{schema['pattern']}`")
    if "default" in schema:
        bounds.append(f"default `{json.dumps(schema['default'])}`")
    return text + (" " + ", ".join(bounds) if bounds else "")


def _fields(schema: dict[str, Any], prefix: str = "") -> list[tuple[str, str, str, str]]:
    """A JSON object schema's fields, an inline object's own fields after it."""
    rows = []
    required = set(schema.get("required", []))
    for name, field in schema.get("properties", {}).items():
        path = f"{prefix}{name}"
        rows.append(
            (
                f"`{path}`",
                _json_type(field),
                "yes" if name in required else "",
                field.get("description", ""),
            )
        )
        if field.get("type") == "object" and "properties" in field:
            rows.extend(_fields(field, f"{path}."))
    return rows


def _operation(method: str, path: str, op: dict[str, Any]) -> str:
    text = f"### {method.upper()} {path}\n\n**{op.get('summary', '')}**"
    if op.get("description"):
        text += f". {_doc(op['description'])}"
    if op.get("security"):
        text += " Needs a tenant's API key (`x-api-key`, or `Authorization: Bearer`)."
    parameters = [
        (
            f"`{p['name']}`",
            p["in"],
            _json_type(p.get("schema", {})),
            "yes" if p.get("required") else "",
            p.get("description", ""),
        )
        for p in op.get("parameters", [])
    ]
    if parameters:
        text += "\n\n" + _table(("parameter", "in", "type", "required", "meaning"), parameters)
    body = op.get("requestBody")
    if body:
        content = body.get("content", {})
        for media, entry in content.items():
            schema = entry.get("schema", {})
            text += f"\n\nBody ({media}{', required' if body.get('required') else ''}):"
            if "$ref" in schema or "properties" not in schema:
                text += " " + _json_type(schema)
            else:
                about = _doc(schema.get("description", ""))
                text += (f" {about}" if about else "") + "\n\n"
                text += _table(("field", "type", "required", "meaning"), _fields(schema))
    answers = []
    for status, answer in sorted(op.get("responses", {}).items()):
        kinds = [
            f"{media}: {_json_type(entry.get('schema', {}))}"
            for media, entry in answer.get("content", {}).items()
        ]
        headers = ", ".join(f"`{h}`" for h in answer.get("headers", {}))
        answers.append((f"`{status}`", answer.get("description", ""), "; ".join(kinds), headers))
    text += "\n\n" + _table(("status", "when", "body", "headers"), answers)
    return text


def api_page(document: dict[str, Any]) -> str:
    info = document.get("info", {})
    index, operations = [], []
    for path, methods in document.get("paths", {}).items():
        for method, op in methods.items():
            statuses = ", ".join(sorted(op.get("responses", {})))
            index.append((f"`{method.upper()} {path}`", op.get("summary", ""), statuses))
            operations.append(_operation(method, path, op))
    schemas = []
    for name, schema in document.get("components", {}).get("schemas", {}).items():
        text = f"### {name}\n\n{_doc(schema.get('description', ''))}".rstrip()
        rows = _fields(schema)
        text += "\n\n" + (
            _table(("field", "type", "required", "meaning"), rows) if rows else _json_type(schema)
        )
        schemas.append(text)
    intro = (
        f"{info.get('title', '')} {info.get('version', '')}: {_doc(info.get('description'))}\n\n"
        "The router's OpenAPI document as the local platform serves it at `/openapi.json` "
        "(browsable at `/docs`), built from the app (`switchyard_router.app.create_app`) "
        "over the manifest's models, each with its own predict (and generate) path and "
        "body; the document itself: [openapi.json](openapi.json). In AWS each model's "
        "router serves its own part of it behind API Gateway.\n\n"
        + _table(("route", "what", "answers"), index)
    )
    return _page(
        "API",
        "the router app's OpenAPI document",
        intro,
        ["## Routes", *operations, "## Bodies", *schemas],
    )


# -- the pages ----------------------------------------------------------------------


def _api_files() -> dict[str, str]:
    document = openapi_document()
    return {
        "api.md": api_page(document),
        "openapi.json": json.dumps(document, indent=2, ensure_ascii=False) + "\n",
    }


PAGES: dict[str, Callable[[], dict[str, str]]] = {
    "cli": lambda: {"cli.md": cli_page()},
    "manifest": lambda: {"manifest.md": manifest_page()},
    "environment": lambda: {"environment.md": environment_page()},
    "api": _api_files,
}


def generate(only: list[str] | None = None) -> dict[str, str]:
    """File name under ``docs/reference/`` -> its text, for the pages named (all)."""
    files: dict[str, str] = {}
    for name in only or list(PAGES):
        files.update(PAGES[name]())
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m switchyard_cli.reference", description=_doc(__doc__).split("\n\n")[0]
    )
    parser.add_argument("--only", help=f"comma-separated, of {', '.join(PAGES)} (default: all)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale")
    parser.add_argument("--out", type=Path, default=OUT, help="where the pages go")
    args = parser.parse_args(argv)
    only = [name.strip() for name in args.only.split(",")] if args.only else None
    unknown = sorted(set(only or []) - set(PAGES))
    if unknown:
        parser.error(f"--only {', '.join(unknown)}: not a page (pages: {', '.join(PAGES)})")
    stale = []
    for name, text in generate(only).items():
        path = args.out / name
        if path.exists() and path.read_text() == text:
            continue
        stale.append(name)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if args.check and stale:
        print(f"stale: {', '.join(stale)} (run `make reference`)", file=sys.stderr)
        return 1
    verb = "differ" if args.check else "written"
    print(f"{len(stale)} page(s) {verb}: {', '.join(stale) or 'none'} ({args.out})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
