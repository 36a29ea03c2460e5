"""The worker image's pins resolve for the image's Python and platform, as its
`pip install` will at `cdk deploy` (pip's resolver, asked over the network of the
package index, installs nothing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stacks.image import ImageUnresolvable, image_target, resolve, resolve_image


def test_the_image_reads_its_python_and_requirements_from_the_dockerfile():
    target = image_target()
    assert target.python_version == "3.12"
    assert target.debian_release == "bookworm"
    assert [p.name for p in target.requirements] == ["requirements.txt", "requirements-gpu.txt"]
    # the CUDA wheels carry one manylinux tag each: every one the image loads is asked
    assert "manylinux_2_27_x86_64" in target.platforms()
    assert "manylinux_2_37_x86_64" not in target.platforms()  # newer than bookworm's glibc


def test_pip_resolves_the_images_requirements():
    packages = resolve_image()
    assert packages["vllm"] == "0.32.0"
    assert packages["torch"] == "2.13.0"
    assert packages["numpy"].startswith("2.")
    # ONNX Runtime's CUDA build, with the CUDA 13 libraries torch brings, and not
    # its CPU build beside it (the two install the same module)
    assert packages["onnxruntime-gpu"] == "1.31.1"
    assert packages["nvidia-cuda-runtime"].startswith("13.")
    assert "onnxruntime" not in packages


def test_a_conflicting_pin_fails_naming_the_conflict(tmp_path: Path):
    # GIVEN numpy 2.4 beside mistral_common (vLLM's), which wants numpy<2.4 on 3.12
    pins = tmp_path / "requirements.txt"
    pins.write_text("numpy==2.4.6\nmistral_common==1.13.1\n")
    # WHEN pip resolves them for the image's Python
    with pytest.raises(ImageUnresolvable) as refused:
        resolve(image_target(), [pins])
    # THEN the error names both sides of the conflict
    message = str(refused.value)
    assert "Python 3.12" in message
    assert "numpy==2.4.6" in message
    assert "numpy<2.4" in message
