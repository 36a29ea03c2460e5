"""A stand-in for the AWS Lambda runtime: import a handler, invoke it with events.

Run as a script (never imported by deployed code), in an interpreter whose path
holds only the function's layout (``stacks.assets``)::

    python -S -P lambda_runtime.py handler.handler < events.jsonl

Like Lambda, it imports the handler's module once, at init (settings are read and
clients built then), and then invokes the handler once per event. Each line on
stdin is ``{"event": {...}}``; each answer is one line on stdout:
``{"result": ...}``, or ``{"error": {"type", "message"}}`` when the handler raised.
An init failure prints ``{"init_error": ...}`` and exits 1, as a Lambda cold start
that fails does. Logs go to stderr.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import sys
import time
import traceback
import uuid
from typing import Any


class LambdaContext:
    """The parts of Lambda's context object that handlers read."""

    def __init__(self, function_name: str, timeout_s: float) -> None:
        self.function_name = function_name
        self.function_version = "$LATEST"
        self.memory_limit_in_mb = 1024
        self.invoked_function_arn = (
            f"arn:aws:lambda:us-east-1:000000000000:function:{function_name}"
        )
        self.aws_request_id = str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = "local"
        self._deadline = time.monotonic() + timeout_s

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def _compiled_at_start() -> list[str]:
    """The modules imported from source with no bytecode beside it: Lambda's code is
    read-only, so each of them is compiled again on every cold start."""
    compiled = []
    for name, module in sorted(sys.modules.items()):
        spec = getattr(module, "__spec__", None)
        cached = getattr(spec, "cached", None)
        if cached and getattr(spec, "origin", "").endswith(".py") and not os.path.exists(cached):
            compiled.append(name)
    return compiled


def main(argv: list[str]) -> int:
    if len(argv) != 2 or "." not in argv[1]:
        print("usage: lambda_runtime.py MODULE.FUNCTION < events.jsonl", file=sys.stderr)
        return 2
    module_name, function_name = argv[1].rsplit(".", 1)
    out = sys.stdout
    sys.stdout = sys.stderr  # a handler's prints are logs, not answers
    try:
        handler = getattr(importlib.import_module(module_name), function_name)
    except Exception as exc:  # noqa: BLE001 - reported as Lambda reports an init error
        traceback.print_exc()
        _answer(out, {"init_error": {"type": type(exc).__name__, "message": str(exc)}})
        return 1
    # Where the platform's own modules came from: the deploy tier checks that they
    # are the layout's, never the source tree's.
    modules = {
        name: str(getattr(module, "__file__", None))
        for name, module in sorted(sys.modules.items())
        if name.split(".")[0].startswith("switchyard")
    }
    top_level = sorted({name.split(".")[0] for name in sys.modules})
    _answer(
        out,
        {
            "ready": True,
            "modules": modules,
            "top_level": top_level,
            "compiled_at_start": _compiled_at_start(),
            # The cyclic collector as the init left it.
            "gc": {"enabled": gc.isenabled(), "frozen": gc.get_freeze_count()},
        },
    )
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        context = LambdaContext(module_name, float(request.get("timeout_s", 900)))
        try:
            result: Any = {"result": handler(request["event"], context)}
        except Exception as exc:  # noqa: BLE001 - an invocation error, not a crash
            traceback.print_exc()
            result = {"error": {"type": type(exc).__name__, "message": str(exc)}}
        _answer(out, result)
    return 0


def _answer(out: Any, value: dict[str, Any]) -> None:
    out.write(json.dumps(value) + "\n")
    out.flush()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
