"""``switchyard``: the operator's command line.

``switchyard up`` runs the local platform. The other commands talk to the running
local platform by default (they read ``.run/platform.json``)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from switchyard import aws
from switchyard.registry import DynamoDBRegistry


def _up(args: argparse.Namespace) -> int:
    from switchyard_local.supervisor import LocalPlatform

    platform = LocalPlatform(
        manifest_path=Path(args.manifest) if args.manifest else None,
        port=args.port,
        run_dir=Path(args.run_dir),
        models_dir=Path(args.models_dir),
        workers_per_model=args.workers,
    )
    try:
        platform.start()
        platform.supervise()
    except KeyboardInterrupt:
        pass
    finally:
        platform.stop()
    return 0


def _local_info(run_dir: str) -> dict[str, Any]:
    path = Path(run_dir) / "platform.json"
    if not path.exists():
        raise SystemExit(f"no local platform found ({path} is missing): run `make up` first")
    return json.loads(path.read_text())


def _models_list(args: argparse.Namespace) -> int:
    info = _local_info(args.run_dir)
    env = info["env"]
    registry = DynamoDBRegistry(
        aws.client("dynamodb", info["region"], info["emulator_url"]),
        env["SWITCHYARD_REGISTRY_TABLE"],
    )
    for record in registry.versions():
        print(
            f"{record.model}\t{record.version}\t{record.status}\t{record.runtime}\t{record.sha256[:12]}"
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "local")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local")
    parser = argparse.ArgumentParser(prog="switchyard", description=__doc__)
    parser.add_argument(
        "--run-dir",
        default=os.environ.get("SWITCHYARD_RUN_DIR", ".run"),
        help="the local platform's state folder",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    up = commands.add_parser("up", help="run the local platform until Ctrl-C")
    up.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8080")))
    up.add_argument("--manifest", default=os.environ.get("SWITCHYARD_MANIFEST"))
    up.add_argument("--models-dir", default="build/models")
    up.add_argument("--workers", type=int, default=1, help="worker processes per model")
    up.set_defaults(func=_up)

    models = commands.add_parser("models", help="the model registry")
    models_cmd = models.add_subparsers(dest="models_command", required=True)
    listing = models_cmd.add_parser("list", help="every registered version")
    listing.set_defaults(func=_models_list)

    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
