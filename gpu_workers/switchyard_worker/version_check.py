"""A version's check before it is registered: ``python -m switchyard_worker.version_check``.

A version is immutable and active once registered, so an artifact that cannot load,
or whose outputs are not what its signature promises, would fail every request it
is given. This loads the artifact as a worker loads it (``load_runtime``, on the
CPU), runs an example input made from the signature through it, and checks what
comes back: one output per input and, per runtime, the outputs' shape (a
classifier's probabilities, one per label; an embedding, a flat vector of numbers
of one length; a generative model's first tokens, and a context as long as the
signature's). It is a smoke test, not a test of the model's answers: a model that
is wrong only on real inputs passes it, and a canary is what catches that.

The operator's ``switchyard models register`` runs it in a process of its own (the
model libraries stay out of the command line's process), with the version record
as JSON on stdin and the artifact's path as the argument. Its verdict is the last
line it prints, a JSON object: ``{"ok": true, "summary": ...}`` (exit 0) or
``{"ok": false, "why": ...}`` (exit 1); whatever a model library prints comes
before it, and its warnings go to stderr.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from switchyard.generation import GenerationRequest
from switchyard.registry import ModelVersion
from switchyard.schemas import GenerationSignature, TensorSignature, TextSignature
from switchyard_worker.generation import Continuous, Sequence
from switchyard_worker.runtimes import (
    CLASSIFIER_RUNTIMES,
    GENERATIVE_RUNTIMES,
    ModelRuntime,
    import_libraries,
    load_runtime,
)

# Two copies of the example: a batch, as a worker runs one, whose outputs must
# still be one per input.
EXAMPLES = 2
EXAMPLE_TEXT = "Switchyard runs this sentence through the model before it serves it."
EXAMPLE_PROMPT = "Hello"
EXAMPLE_TOKENS = 2
_LONGEST = 300  # characters of a runtime's error in the one line of why


class VersionRefused(Exception):
    """The version cannot serve: why, in one line."""


def example_input(signature: TextSignature | TensorSignature | GenerationSignature) -> Any:
    """One valid input of ``signature``: a sentence (cut to ``max_chars``); a vector
    of the signature's length, every value 0 or the nearest bound to it; a short
    prompt with a greedy request for two tokens."""
    if isinstance(signature, TextSignature):
        return EXAMPLE_TEXT[: signature.max_chars]
    if isinstance(signature, TensorSignature):
        value = 0.0
        if signature.minimum is not None:
            value = max(value, signature.minimum)
        if signature.maximum is not None:
            value = min(value, signature.maximum)
        return [value] * signature.shape[0]
    return {
        "prompt": EXAMPLE_PROMPT[: signature.max_chars],
        "max_tokens": min(EXAMPLE_TOKENS, signature.max_tokens),
        "temperature": 0.0,
    }


def check_version(record: ModelVersion, artifact: Path, workdir: Path) -> str:
    """Load ``artifact`` in ``record``'s runtime and run the example through it; a
    line that says what was checked. Raises :class:`VersionRefused`."""
    try:
        import_libraries([record.runtime])
        runtime = load_runtime(record, artifact, workdir, "cpu")
    except Exception as exc:  # noqa: BLE001 - whatever the runtime raises is the reason
        raise VersionRefused(f"cannot load in {record.runtime}: {runtime_error(exc)}") from None
    if record.runtime in GENERATIVE_RUNTIMES:
        return _check_generation(record, runtime)
    inputs = [example_input(record.signature)] * EXAMPLES
    try:
        outputs = runtime.predict(inputs)
    except Exception as exc:  # noqa: BLE001
        raise VersionRefused(
            f"fails on an example input ({_describe(record)}): {runtime_error(exc)}"
        ) from None
    if not isinstance(outputs, list) or len(outputs) != len(inputs):
        count = len(outputs) if isinstance(outputs, list) else type(outputs).__name__
        raise VersionRefused(f"{len(inputs)} example inputs gave {count} outputs")
    if record.runtime in CLASSIFIER_RUNTIMES:
        return _check_classes(record, outputs)
    return _check_vectors(record, outputs)


def _describe(record: ModelVersion) -> str:
    signature = record.signature
    if isinstance(signature, TensorSignature):
        return f"{EXAMPLES} vectors of {signature.shape[0]} numbers"
    return f"{EXAMPLES} texts"


def _check_classes(record: ModelVersion, outputs: list[Any]) -> str:
    widths = set()
    for output in outputs:
        row = output.get("probabilities") if isinstance(output, dict) else None
        if not _flat_numbers(row):
            raise VersionRefused(
                "its output per input is not one row of class scores (a model that maps "
                "a batch [n, features] to class scores [n, classes])"
            )
        widths.add(len(row))
    if len(widths) != 1:
        raise VersionRefused(f"its rows of class scores differ in length: {sorted(widths)}")
    (classes,) = widths
    if record.labels and classes != len(record.labels):
        raise VersionRefused(
            f"it gives {classes} class scores per input, and the manifest's labels name "
            f"{len(record.labels)}"
        )
    return f"{record.runtime}: {EXAMPLES} example inputs gave {classes} class scores each"


def _check_vectors(record: ModelVersion, outputs: list[Any]) -> str:
    if not all(_flat_numbers(o) for o in outputs):
        raise VersionRefused("its output per input is not a flat vector of numbers")
    widths = {len(o) for o in outputs}
    if len(widths) != 1:
        raise VersionRefused(f"its vectors differ in length for the same input: {sorted(widths)}")
    return f"{record.runtime}: {EXAMPLES} example texts gave vectors of {widths.pop()} numbers"


def _flat_numbers(row: Any) -> bool:
    return (
        isinstance(row, list)
        and len(row) > 0
        and all(isinstance(v, int | float) and math.isfinite(v) for v in row)
    )


def _check_generation(record: ModelVersion, runtime: ModelRuntime) -> str:
    signature = record.signature
    if not isinstance(signature, GenerationSignature):
        raise VersionRefused(f"{record.runtime} needs a signature of kind 'generation'")
    decoder = runtime.decoder  # type: ignore[attr-defined]
    if signature.context_length > decoder.context_length:
        raise VersionRefused(
            f"the signature's context_length {signature.context_length} is over the "
            f"model's {decoder.context_length} positions"
        )
    request = GenerationRequest.model_validate(example_input(signature))
    try:
        prompt = decoder.tokenizer.encode(request.prompt)
        sequence = Sequence(key="check", request=request, prompt_ids=prompt, seed=0)
        batch = Continuous(decoder, 1)
        batch.join(sequence)
        while batch.running:
            batch.step()
    except Exception as exc:  # noqa: BLE001
        raise VersionRefused(
            f"fails to generate from an example prompt: {runtime_error(exc)}"
        ) from None
    return (
        f"{record.runtime}: a {len(prompt)}-token prompt gave {len(sequence.ids)} tokens "
        f"(context {decoder.context_length})"
    )


def runtime_error(exc: BaseException) -> str:
    """A model library's error in one line: the last line of a traceback it carries
    in its message (TorchScript's), else the first; the type where it says nothing."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    line = lines[-1] if any(line.startswith("Traceback") for line in lines) else lines[0]
    line = line.split("  (Could this error message be improved?")[0]
    if len(line) > _LONGEST:
        line = line[: _LONGEST - 1] + "…"
    return line


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m switchyard_worker.version_check ARTIFACT < RECORD", file=sys.stderr)
        return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # as a worker: nothing is downloaded
    record = ModelVersion.model_validate_json(sys.stdin.read())
    with tempfile.TemporaryDirectory(prefix="switchyard-check-") as workdir:
        try:
            verdict = {"ok": True, "summary": check_version(record, Path(argv[0]), Path(workdir))}
        except VersionRefused as exc:
            verdict = {"ok": False, "why": str(exc)}
    print("\n" + json.dumps(verdict), flush=True)
    return 0 if verdict["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
