"""The worker image's self-check: ``python -m switchyard_worker.check``.

The Dockerfile runs it at build time and the deploy test tier runs it in the laid
out ``/app``: it imports the entry module, every module of the core and of the
worker, and the model libraries each runtime loads lazily, so an image that could
not serve fails its build rather than its first task.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path

import switchyard
import switchyard_worker
from switchyard_worker.runtimes import RUNTIME_LIBRARIES


def modules() -> list[str]:
    """Every module the image must be able to import."""
    ours = [
        m.name
        for package in (switchyard, switchyard_worker)
        for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")
    ]
    libraries = sorted({name for names in RUNTIME_LIBRARIES.values() for name in names})
    return ["switchyard_worker.__main__", *ours, *libraries]


def main() -> int:
    failed = []
    names = modules()
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - report every module that fails
            failed.append(f"{name}: {type(exc).__name__}: {exc}")
    for line in failed:
        print(f"cannot import {line}", file=sys.stderr)
    for package in (switchyard, switchyard_worker):
        print(f"{package.__name__} from {Path(package.__file__ or '?').parent}")
    print(f"switchyard worker image: {len(names) - len(failed)} of {len(names)} modules import")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
