"""Run as a fresh process by the cold-start section: imports the router, then
answers two requests through its ASGI app with deps built from the environment
(the SWITCHYARD_* settings of the emulator), as a new Lambda instance would.
Prints one JSON line of timings. Not imported by the suite itself."""

import time

STARTED_WALL = time.time()
STARTED = time.perf_counter()

import asyncio  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

sys.path.insert(0, os.environ["BENCH_ROOT"])
from bench.asgi import call, predict_body  # noqa: E402

before_import = time.perf_counter()
import switchyard_router.app as router  # noqa: E402

imported = time.perf_counter()


def request() -> int:
    status, _ = asyncio.run(
        call(
            router.app,
            "POST",
            f"/v1/models/{os.environ['BENCH_MODEL']}/predict",
            {"x-api-key": os.environ["BENCH_API_KEY"]},
            predict_body(["a sentence to embed"]),
            "async=true",
        )
    )
    return status


first_status = request()
first = time.perf_counter()
second_status = request()
second = time.perf_counter()
print(
    json.dumps(
        {
            "started_wall": STARTED_WALL,
            "import_s": imported - before_import,
            "first_request_s": first - imported,
            "second_request_s": second - first,
            "statuses": [first_status, second_status],
        }
    )
)
