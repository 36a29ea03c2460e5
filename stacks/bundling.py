"""Lambda code bundled on this machine: pip for the Lambda platform, never Docker.

pip picks manylinux wheels for the Lambda runtime (``--platform``/``--only-binary``),
so synth works on any host without a container engine. The installed dependencies
are cached under ``build/`` by a hash of the requirement files, so the many synths
of a test run install once.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import jsii
from aws_cdk import AssetHashType, BundlingOptions, ILocalBundling
from aws_cdk import aws_lambda as lambda_

from stacks.cloud import LAMBDA_RUNTIME, PIP_PLATFORM, PIP_PYTHON_VERSION, REPO_ROOT

DEPS_CACHE = REPO_ROOT / "build" / "lambda-deps"
_SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", "requirements*.txt", "tests")


class BundlingError(RuntimeError):
    pass


def _install_dependencies(requirements: Path, constraints: Path | None) -> Path:
    """A directory holding the requirements installed for Lambda, cached by content."""
    key = hashlib.sha256()
    for part in (requirements, constraints):
        key.update(part.read_bytes() if part else b"-")
    key.update(f"{PIP_PLATFORM}/{PIP_PYTHON_VERSION}".encode())
    target = DEPS_CACHE / key.hexdigest()[:16]
    if (target / ".complete").exists():
        return target
    DEPS_CACHE.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=DEPS_CACHE, prefix=".staging-"))
    command = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-compile",
        "--target",
        str(staging),
        "--platform",
        PIP_PLATFORM,
        "--implementation",
        "cp",
        "--python-version",
        PIP_PYTHON_VERSION,
        "--only-binary=:all:",
        "-r",
        str(requirements),
    ]
    if constraints:
        command += ["-c", str(constraints)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise BundlingError(
            f"pip could not install {requirements} for Lambda ({PIP_PLATFORM}, "
            f"Python {PIP_PYTHON_VERSION}); synth needs PyPI or a filled {DEPS_CACHE}:\n"
            f"{done.stderr.strip()}"
        )
    shutil.rmtree(staging / "bin", ignore_errors=True)
    (staging / ".complete").touch()
    if target.exists():  # another synth finished first
        shutil.rmtree(staging, ignore_errors=True)
    else:
        staging.rename(target)
    return target


def _has_requirements(path: Path) -> bool:
    if not path.exists():
        return False
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return any(lines)


@jsii.implements(ILocalBundling)
class PipBundle:
    """Copies cached dependencies and the code into the asset; never falls back."""

    def __init__(
        self,
        code: Path,
        requirements: Path | None,
        constraints: Path | None = None,
        prefix: str = "",
    ) -> None:
        self._code = code
        self._requirements = requirements
        self._constraints = constraints
        self._prefix = prefix

    def try_bundle(self, output_dir: str, options: Any = None) -> bool:
        if not any(self._code.glob("*.py")) and not self._prefix:
            raise BundlingError(f"{self._code} holds no Python module to deploy")
        out = Path(output_dir) / self._prefix
        out.mkdir(parents=True, exist_ok=True)
        if self._requirements and _has_requirements(self._requirements):
            deps = _install_dependencies(self._requirements, self._constraints)
            shutil.copytree(
                deps, out, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".complete")
            )
        if self._code.is_dir():
            shutil.copytree(self._code, out, dirs_exist_ok=True, ignore=_SKIP)
        return True


def python_code(
    code: Path,
    requirements: Path | None = None,
    constraints: Path | None = None,
    prefix: str = "",
) -> lambda_.Code:
    """Lambda code (or, with prefix "python", a layer) built by :class:`PipBundle`.

    The asset hash is the bundle's output, so a change to a pinned dependency
    anywhere (requirements or constraints) reaches the cloud.
    """
    return lambda_.Code.from_asset(
        str(code),
        asset_hash_type=AssetHashType.OUTPUT,
        bundling=BundlingOptions(
            image=LAMBDA_RUNTIME.bundling_image,  # named, never pulled: local always wins
            local=PipBundle(code, requirements, constraints, prefix),
        ),
    )
