"""The LitServe generation peer's server process:
``python -m bench.peer_generation_server --port N --model-dir DIR``.

LitServe's streaming as its documentation shows it for a Hugging Face model: a
LitAPI with ``stream=True`` whose ``predict`` runs ``generate`` on a thread and
yields each token its streamer hands over; one inference worker on the CPU, no
batching (LitServe's streaming loop runs one request at a time per worker).
``encode_response`` writes the platform's native events (``data: {"token"}`` lines,
then ``data: {"done", "usage"}``), so one reader times both.
"""

from __future__ import annotations

import argparse
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import litserve as ls

from bench.generation import TokenQueue, generate, load_model


class PydocGptStreamAPI(ls.LitAPI):
    """pydoc-gpt from the unpacked artifact, streamed token by token."""

    def __init__(self, model_dir: Path) -> None:
        super().__init__(stream=True)
        self.model_dir = model_dir

    def setup(self, device: str) -> None:
        self.model, self.tokenizer = load_model(self.model_dir)

    def decode_request(self, request) -> dict[str, Any]:  # noqa: ANN001 - LitServe reads it
        return dict(request)

    def predict(self, body: dict[str, Any]) -> Iterator[str]:
        streamer = TokenQueue()
        worker = threading.Thread(
            target=generate, args=(self.model, self.tokenizer, body, streamer), daemon=True
        )
        worker.start()
        ids: list[int] = []
        sent = ""
        for token in streamer:
            ids.append(token)
            text = self.tokenizer.decode(ids)
            yield text[len(sent) :]
            sent = text
        worker.join()

    def encode_response(self, pieces: Iterator[str]) -> Iterator[str]:
        count = 0
        for piece in pieces:
            count += 1
            yield f"data: {json.dumps({'token': piece})}\n\n"
        done = {"done": True, "usage": {"completion_tokens": count}}
        yield f"data: {json.dumps(done)}\n\n"


def main() -> None:
    parser = argparse.ArgumentParser(description="LitServe generation peer for the bench")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model-dir", type=Path, required=True)
    args = parser.parse_args()
    api = PydocGptStreamAPI(args.model_dir)
    server = ls.LitServer(api, accelerator="cpu", devices=1, timeout=60)
    server.run(host="127.0.0.1", port=args.port, generate_client_file=False, log_level="warning")


if __name__ == "__main__":
    main()
