"""Model artifacts in S3, checked against the sha256 the registry recorded.

A worker never loads bytes it has not verified: the download goes to a temporary
file, its digest is compared with the registry's, and only then is it moved into
the local cache under its digest.
"""

from __future__ import annotations

import hashlib
import os
import tarfile
import tempfile
import zipfile
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from switchyard.aws import transfer


class ArtifactMismatch(Exception):
    """The artifact's bytes do not match the sha256 in the registry."""


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def artifact_problem(runtime: str, path: Path) -> str | None:
    """Why the file at ``path`` cannot be ``runtime``'s artifact (None: it can), from
    its layout alone, before it is uploaded: a version is immutable, so one
    registered with the wrong file stays active and fails every request it gets.
    A TorchScript module is the zip ``torch.jit.save`` writes (its ``data.pkl`` and
    ``code/``); an ONNX model, the protobuf ``ModelProto`` with a graph; a Hugging
    Face model, a tar of its folder with ``config.json``."""
    if runtime == "onnx-classifier":
        if _is_onnx_model(path):
            return None
        return "not an ONNX model (a protobuf ModelProto with its graph, as onnx.save writes)"
    if runtime == "torchscript-classifier":
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                names = archive.namelist()
            if any(n.endswith("/data.pkl") for n in names) and any("/code/" in n for n in names):
                return None
        return "not a TorchScript module (the zip torch.jit.save writes)"
    try:
        with tarfile.open(path) as archive:
            names = archive.getnames()
    except (tarfile.TarError, OSError):
        names = []
    if any(Path(n).name == "config.json" and len(Path(n).parts) <= 2 for n in names):
        return None
    return "not a tar of a Hugging Face model's folder (with its config.json)"


# ModelProto's fields that every ONNX file has: ir_version (1, a varint) and the
# graph (7, a length-delimited message).
_ONNX_IR_VERSION, _ONNX_GRAPH = (1, 0), (7, 2)


def _is_onnx_model(path: Path) -> bool:
    """Whether ``path`` reads as an ONNX ``ModelProto``: its top-level protobuf
    fields, walked to the file's end without reading the messages they hold, are
    well formed and include the IR version and the graph. The core has no onnx
    package; the runtime's own load (``models register``'s check) reads the rest."""
    seen: set[tuple[int, int]] = set()
    size = path.stat().st_size
    with open(path, "rb") as fh:
        while fh.tell() < size:
            tag = _varint(fh)
            if tag is None or tag >> 3 == 0:
                return False
            field, wire = tag >> 3, tag & 7
            if wire == 0:
                if _varint(fh) is None:
                    return False
            elif wire in (1, 5):
                fh.seek(8 if wire == 1 else 4, os.SEEK_CUR)
            elif wire == 2:
                length = _varint(fh)
                if length is None:
                    return False
                fh.seek(length, os.SEEK_CUR)
            else:
                return False
            if fh.tell() > size:
                return False
            seen.add((field, wire))
    return {_ONNX_IR_VERSION, _ONNX_GRAPH} <= seen


def _varint(fh: Any) -> int | None:
    """A protobuf varint read from ``fh``; None where the bytes end or run on past
    ten bytes (no varint is longer)."""
    value = 0
    for shift in range(0, 70, 7):
        byte = fh.read(1)
        if not byte:
            return None
        value |= (byte[0] & 0x7F) << shift
        if byte[0] < 0x80:
            return value
    return None


def split_s3_uri(uri: str) -> tuple[str, str]:
    parsed = urlparse(uri)
    if parsed.scheme != "s3" or not parsed.netloc or not parsed.path.strip("/"):
        raise ValueError(f"not an s3://bucket/key URI: {uri!r}")
    return parsed.netloc, parsed.path.lstrip("/")


def publish_artifact(s3: Any, bucket: str, model: str, version: str, path: Path) -> tuple[str, str]:
    """Upload an artifact file; returns its URI and sha256 for the registry."""
    digest = sha256_file(path)
    key = f"models/{model}/{version}/{path.name}"
    transfer(s3).upload_file(str(path), bucket, key, extra_args={"Metadata": {"sha256": digest}})
    return f"s3://{bucket}/{key}", digest


def _stamp(path: Path) -> str:
    """What identifies a cached file's bytes without reading them: its size, change
    time and inode (any rewrite or replacement changes one)."""
    st = path.stat()
    return f"{st.st_size} {st.st_mtime_ns} {st.st_ctime_ns} {st.st_ino}"


def fetch_artifact(s3: Any, uri: str, sha256: str, cache_dir: Path) -> Path:
    """The verified local copy of an artifact, downloading it if not cached.

    A cached copy is hashed again unless its ``.verified`` stamp (written once its
    digest matched) still describes the file exactly: a worker that starts on a
    warm cache skips re-reading hundreds of megabytes, and a copy changed since is
    hashed, and refused or replaced, as before."""
    bucket, key = split_s3_uri(uri)
    target = cache_dir / sha256 / Path(key).name
    verified = target.with_name(target.name + ".verified")
    if target.exists():
        try:
            if verified.read_text() == f"{sha256} {_stamp(target)}":
                return target
        except OSError:
            pass
        if sha256_file(target) == sha256:
            verified.write_text(f"{sha256} {_stamp(target)}")
            return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=".download-")
    os.close(fd)
    try:
        transfer(s3).download_file(bucket, key, tmp_name)
        actual = sha256_file(Path(tmp_name))
        if actual != sha256:
            raise ArtifactMismatch(
                f"{uri}: sha256 is {actual}, the registry recorded {sha256}; refusing to load it"
            )
        os.replace(tmp_name, target)
        verified.write_text(f"{sha256} {_stamp(target)}")
    finally:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)
    return target
