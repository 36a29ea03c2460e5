"""The code's rooms, kept apart: no import circle in the deployed, local, CLI,
stacks or bench code (a function-level import counts: it only hides a circle);
the deployed code (the Lambda functions, the core layer, the worker image) imports
nothing of the local platform, the operator's CLI, the CDK app, the benchmarks or
the tests, which are not in its layouts; and the local platform imports nothing of
the CLI, which starts it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Where each top-level package of the project lives.
PACKAGES = {
    "switchyard": ROOT / "layers" / "core" / "python" / "switchyard",
    "switchyard_router": ROOT / "functions" / "router" / "switchyard_router",
    "switchyard_batch": ROOT / "functions" / "batch_splitter" / "switchyard_batch",
    "switchyard_worker": ROOT / "gpu_workers" / "switchyard_worker",
    "switchyard_local": ROOT / "local" / "switchyard_local",
    "switchyard_cli": ROOT / "cli" / "switchyard_cli",
    "stacks": ROOT / "stacks",
    "bench": ROOT / "bench",
    "harness": ROOT / "harness",
}
DEPLOYED = ("switchyard", "switchyard_router", "switchyard_batch", "switchyard_worker")
NOT_DEPLOYED = ("switchyard_local", "switchyard_cli", "stacks", "bench", "harness", "tests")


def modules() -> dict[str, Path]:
    """Every module of the project's packages (tests apart), by dotted name."""
    found = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            if path.name.startswith("test_") or "templates" in path.parts:
                continue
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((package, *parts))] = path
    return found


def imports_of(path: Path, known: set[str]) -> set[str]:
    """The modules ``path`` imports, anywhere in it (``from a import b`` names the
    module ``a.b`` where that is one, else ``a``)."""
    named: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            named |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                named.add(child if child in known else node.module)
    return named


def graph() -> dict[str, set[str]]:
    known = modules()
    return {
        name: {m for m in imports_of(path, set(known)) if m in known and m != name}
        for name, path in known.items()
    }


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_no_module_of_the_project_imports_itself_in_a_circle():
    edges = graph()
    assert len(edges) > 120  # every package was read
    found = circles(edges)
    assert found == [], "\n".join(
        " <-> ".join(group)
        + "\n  "
        + "\n  ".join(f"{a} imports {sorted(edges[a] & set(group))}" for a in group)
        for group in found
    )


def test_deployed_code_imports_nothing_outside_its_layouts():
    known = modules()
    outside = {
        f"{name} imports {imported}"
        for name, path in known.items()
        if name.split(".")[0] in DEPLOYED
        for imported in imports_of(path, set(known))
        if imported.split(".")[0] in NOT_DEPLOYED
    }
    # and each function's handler module, at its asset's root
    for handler in (ROOT / "functions").glob("*/handler.py"):
        outside |= {
            f"{handler.relative_to(ROOT)} imports {imported}"
            for imported in imports_of(handler, set(known))
            if imported.split(".")[0] in NOT_DEPLOYED
        }
    assert outside == set()


def test_the_local_platform_imports_nothing_of_the_operators_cli():
    known = modules()
    found = {
        f"{name} imports {imported}"
        for name, path in known.items()
        if name.split(".")[0] == "switchyard_local"
        for imported in imports_of(path, set(known))
        if imported.split(".")[0] == "switchyard_cli"
    }
    assert found == set()


def test_the_check_finds_a_circle_and_names_it():
    # the rule itself: a two-module loop and a three-module loop are found, a chain is not
    edges = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"g"}, "g": set()}
    assert circles(edges) == [["a", "b"], ["c", "d", "e"]]


def test_tests_and_bench_share_the_harness_and_import_neither_each_other():
    # test modules included: a test that imports bench, or a bench module that
    # imports a test, would tie the two folders back together
    crossings = {
        f"{path.relative_to(ROOT)} imports {imported}"
        for folder, other in (
            ("tests", "bench"),
            ("bench", "tests"),
            ("harness", "tests"),
            ("harness", "bench"),
        )
        for path in (ROOT / folder).rglob("*.py")
        for imported in imports_of(path, set())
        if imported.split(".")[0] == other
    }
    assert crossings == set()
