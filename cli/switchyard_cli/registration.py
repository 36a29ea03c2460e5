"""``switchyard models register``'s last steps: check the artifact in its runtime,
then upload it and record the version, taking back what was uploaded if the
record cannot be written.

A version is immutable and active once registered, so an artifact that cannot load
or whose outputs are not what the signature promises is refused before anything
is written. The check is the worker's own loading code
(``switchyard_worker.version_check``), run in a process of its own: the model
libraries (torch, transformers) stay out of the command line's process, and a
model that crashes its process takes only the check with it.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from switchyard.artifacts import publish_artifact, split_s3_uri
from switchyard.registry import ModelVersion, Registry, VersionExists
from switchyard_cli.targets import CommandError, first_line

CHECK_MODULE = "switchyard_worker.version_check"
CHECK_TIMEOUT_S = 600  # a large model's load on a laptop's CPU
TOKENIZER = "tokenizer.json"


def check_in_runtime(record: ModelVersion, artifact: Path) -> str:
    """What the check found (a line), or :class:`CommandError` with its one line of
    why: ``artifact`` loaded in ``record``'s runtime, an example input made from its
    signature run through it, the outputs checked."""
    refused = f"--artifact {artifact}: "
    not_registered = f"; {record.model} {record.version} was not registered"
    try:
        done = subprocess.run(
            [sys.executable, "-m", CHECK_MODULE, str(artifact)],
            input=record.model_dump_json(),
            capture_output=True,
            text=True,
            timeout=CHECK_TIMEOUT_S,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise CommandError(
            f"{refused}the check in {record.runtime} did not end within {CHECK_TIMEOUT_S} s"
            + not_registered
        ) from None
    verdict = _verdict(done.stdout)
    if verdict is None:
        said = first_line(done.stderr.strip().splitlines()[-1]) if done.stderr.strip() else ""
        raise CommandError(
            f"{refused}the check in {record.runtime} ended with exit {done.returncode}"
            + (f" ({said})" if said else "")
            + not_registered
        )
    if not verdict.get("ok"):
        raise CommandError(f"{refused}{verdict.get('why')}{not_registered}")
    return str(verdict.get("summary", ""))


def _verdict(stdout: str) -> dict[str, Any] | None:
    """The check's verdict: the JSON object on the last line it printed."""
    lines = stdout.strip().splitlines()
    try:
        verdict = json.loads(lines[-1]) if lines else None
    except ValueError:
        return None
    return verdict if isinstance(verdict, dict) else None


def publish_version(
    s3: Any, bucket: str, registry: Registry, record: ModelVersion, artifact: Path
) -> ModelVersion:
    """Upload ``artifact`` (and a Hugging Face tar's ``tokenizer.json``, which the
    router counts prompt tokens with) and register ``record`` with where they are;
    the record registered. Whatever fails deletes what this call uploaded, unless
    the version turned out to be registered meanwhile (VersionExists: the objects
    under its keys are that version's)."""
    uploaded: list[str] = []
    try:
        uri, digest = publish_artifact(s3, bucket, record.model, record.version, artifact)
        uploaded.append(uri)
        extra: dict[str, str] = {}
        with tempfile.TemporaryDirectory(prefix="switchyard-register-") as folder:
            tokenizer = tokenizer_in(artifact, Path(folder))
            if tokenizer is not None:
                tokenizer_uri, tokenizer_digest = publish_artifact(
                    s3, bucket, record.model, record.version, tokenizer
                )
                uploaded.append(tokenizer_uri)
                extra = {"tokenizer_uri": tokenizer_uri, "tokenizer_sha256": tokenizer_digest}
        final = record.model_copy(update={"artifact_uri": uri, "sha256": digest, **extra})
        registry.register(final)
    except VersionExists:
        raise  # registered meanwhile by another: the objects under its keys are its own
    except BaseException:
        _delete(s3, uploaded)
        raise
    return final


def tokenizer_in(artifact: Path, folder: Path) -> Path | None:
    """A Hugging Face tar's ``tokenizer.json`` (at the top of the tar, where the
    worker looks for it), copied into ``folder``; None for any other artifact."""
    if not tarfile.is_tarfile(artifact):
        return None
    with tarfile.open(artifact) as tar:
        for member in tar.getmembers():
            if member.isfile() and Path(member.name).parts == (TOKENIZER,):
                source = tar.extractfile(member)
                if source is None:
                    return None
                target = folder / TOKENIZER
                target.write_bytes(source.read())
                return target
    return None


def _delete(s3: Any, uris: list[str]) -> None:
    for uri in uris:
        bucket, key = split_s3_uri(uri)
        with contextlib.suppress(Exception):  # the first failure is the one to report
            s3.delete_object(Bucket=bucket, Key=key)
