"""What `cdk deploy` ships, built on this machine without Docker.

Deployed code lives in three layouts:

- the core layer, whose ``python/`` directory Lambda mounts at ``/opt/python``;
- each function's code asset, which Lambda unpacks at ``/var/task``;
- the worker image's ``/app``, laid out by the ``COPY`` lines of its Dockerfile.

The CDK app bundles the layer and the function assets with :func:`bundle` for the
Lambda runtime (pip picks its manylinux wheels). The local platform and the deploy
test tier build the very same layouts with :func:`build_layouts`, for this machine's
interpreter, and run the router, the splitter and the workers from them, never from
the source tree. Nothing here imports the CDK, so the local platform stays light.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
MANIFEST_FILE = REPO_ROOT / "manifest.toml"
CORE_LAYER_DIR = REPO_ROOT / "layers" / "core"
ROUTER_DIR = REPO_ROOT / "functions" / "router"
SPLITTER_DIR = REPO_ROOT / "functions" / "batch_splitter"
KEY_AUTHORIZER_DIR = REPO_ROOT / "functions" / "key_authorizer"
WORKER_DOCKERFILE = "gpu_workers/Dockerfile"  # relative to REPO_ROOT, the build context
BUILD_DIR = REPO_ROOT / "build"
DEPS_CACHE = BUILD_DIR / "lambda-deps"
LAYOUTS_DIR = BUILD_DIR / "layouts"
# An older build of a layout or asset is removed once nobody has asked for it this long.
KEEP_UNUSED_BUILDS_SECONDS = 86_400

# Never part of an asset: caches, pins (already installed) and tests.
_SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", "requirements*.txt", "tests")


class BundlingError(RuntimeError):
    pass


@dataclass(frozen=True)
class PipTarget:
    """The interpreter whose wheels pip installs: the Lambda runtime's, or (with no
    platform) the one running this code."""

    platform: str | None = None
    python_version: str | None = None

    def pip_options(self) -> list[str]:
        if self.platform is None:
            return ["--only-binary=:all:"]
        return [
            "--platform",
            self.platform,
            "--implementation",
            "cp",
            "--python-version",
            str(self.python_version),
            "--only-binary=:all:",
        ]

    def interpreter(self) -> str | None:
        """A Python of this target's version on this machine, if there is one."""
        if self.platform is None:
            return sys.executable
        return shutil.which(f"python{self.python_version}")

    def describe(self) -> str:
        if self.platform is None:
            return f"this interpreter ({sys.implementation.cache_tag}, {sys.platform})"
        return f"{self.platform}, Python {self.python_version}"


# The Lambda runtime of stacks/cloud.py (x86_64, Python 3.14): no Docker, no compiler.
LAMBDA_TARGET = PipTarget(platform="manylinux2014_x86_64", python_version="3.14")
HOST_TARGET = PipTarget()


@dataclass(frozen=True)
class LambdaCode:
    """One Lambda code asset: a directory of code plus its pinned requirements.
    ``prefix`` "python" makes it a layer (Lambda adds ``/opt/python`` to the path)."""

    name: str
    code: Path
    requirements: Path | None
    constraints: Path | None = None
    prefix: str = ""


CORE_REQUIREMENTS = CORE_LAYER_DIR / "requirements.txt"
CORE_LAYER = LambdaCode("core-layer", CORE_LAYER_DIR / "python", CORE_REQUIREMENTS, prefix="python")
# The functions' pins are constrained by the core's, so both agree on pydantic.
ROUTER = LambdaCode("router", ROUTER_DIR, ROUTER_DIR / "requirements.txt", CORE_REQUIREMENTS)
SPLITTER = LambdaCode(
    "splitter", SPLITTER_DIR, SPLITTER_DIR / "requirements.txt", CORE_REQUIREMENTS
)
# The API's key authorizer: the standard library only, no layer.
KEY_AUTHORIZER = LambdaCode("key-authorizer", KEY_AUTHORIZER_DIR, None)


def bundle(asset: LambdaCode, output_dir: Path, target: PipTarget) -> None:
    """Write ``asset`` into ``output_dir``: its installed requirements, then its code,
    then their bytecode where an interpreter of the target's version is at hand."""
    if not any(asset.code.glob("*.py")) and not asset.prefix:
        raise BundlingError(f"{asset.code} holds no Python module to deploy")
    out = output_dir / asset.prefix
    out.mkdir(parents=True, exist_ok=True)
    if asset.requirements and _has_requirements(asset.requirements):
        deps = install_requirements(asset.requirements, asset.constraints, target)
        shutil.copytree(deps, out, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".complete"))
    shutil.copytree(asset.code, out, dirs_exist_ok=True, ignore=_SKIP)
    compile_bytecode(out, target)


def compile_bytecode(directory: Path, target: PipTarget) -> bool:
    """Compile every module under ``directory`` for the target's interpreter, if one
    is on this machine. Lambda's code is read-only, so modules without bytecode are
    compiled again on every cold start. The bytecode is checked by hash, never by
    file time (asset archives do not keep times), and only if the source changed."""
    interpreter = target.interpreter()
    if interpreter is None:
        return False
    done = subprocess.run(
        [
            interpreter,
            "-m",
            "compileall",
            "-q",
            "-j",
            "0",
            "--invalidation-mode",
            "unchecked-hash",
            str(directory),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    # A module that does not compile (a package's Python 2 leftovers, say) keeps its
    # source; everything else has its bytecode.
    return done.returncode == 0


def install_requirements(
    requirements: Path, constraints: Path | None, target: PipTarget, *, compiled: bool = False
) -> Path:
    """A directory holding ``requirements`` installed for ``target``, cached by content
    (the many synths of a test run, and every `make up`, install once). ``compiled``:
    with their bytecode, as a package is where it is used as installed (an asset's
    requirements are compiled with the asset instead)."""
    key = hashlib.sha256()
    for part in (requirements, constraints):
        key.update(part.read_bytes() if part else b"-")
    key.update(target.describe().encode())
    key.update(b"compiled" if compiled else b"")
    cached = DEPS_CACHE / key.hexdigest()[:16]
    if (cached / ".complete").exists():
        return cached
    command = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-compile",
        *target.pip_options(),
        "-r",
        str(requirements),
    ]
    if constraints:
        command += ["-c", str(constraints)]

    def install(staging: Path) -> None:
        done = subprocess.run(
            [*command, "--target", str(staging)], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise BundlingError(
                f"pip could not install {requirements} for {target.describe()}; "
                f"this needs PyPI or a filled {DEPS_CACHE}:\n{done.stderr.strip()}"
            )
        shutil.rmtree(staging / "bin", ignore_errors=True)
        if compiled:
            compile_bytecode(staging, target)

    return _build_once(cached, install)


def _has_requirements(path: Path) -> bool:
    if not path.exists():
        return False
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return any(lines)


# -- the worker image's /app --------------------------------------------------------

_COPY = re.compile(r"^COPY\s+(?:--\S+\s+)*(\S+)\s+(\S+)\s*$")
_WORKDIR = re.compile(r"^WORKDIR\s+(\S+)\s*$")


def image_copies(dockerfile: Path = REPO_ROOT / WORKER_DOCKERFILE) -> list[tuple[str, str]]:
    """The Dockerfile's ``COPY source destination`` pairs that land under its WORKDIR
    (relative to it): what the image's ``/app`` holds."""
    workdir = "/"
    copies = []
    for line in dockerfile.read_text().splitlines():
        line = line.strip()
        if match := _WORKDIR.match(line):
            workdir = match.group(1).rstrip("/") + "/"
        elif (match := _COPY.match(line)) and match.group(2).startswith(workdir):
            copies.append((match.group(1), match.group(2)[len(workdir) :]))
    if not copies:
        raise BundlingError(f"{dockerfile} copies nothing into its WORKDIR")
    return copies


def lay_out_image(output_dir: Path, dockerfile: Path = REPO_ROOT / WORKER_DOCKERFILE) -> None:
    """The worker image's WORKDIR (``/app``) as the Dockerfile's COPY lines fill it,
    the build context being the repository."""
    for source, destination in image_copies(dockerfile):
        src, dst = REPO_ROOT / source, output_dir / destination
        if src.is_dir():
            shutil.copytree(src, dst, dirs_exist_ok=True, ignore=_SKIP)
        else:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)


# -- every layout, built once per content -----------------------------------------


@dataclass(frozen=True)
class Layouts:
    """The deployed layouts on disk. Mount ``layer`` at ``/opt``, ``router``,
    ``splitter`` or ``key_authorizer`` at ``/var/task`` and ``worker`` at ``/app``, and
    they are what AWS runs."""

    layer: Path
    router: Path
    splitter: Path
    worker: Path
    # What the Lambda runtime itself provides beside the layer (boto3).
    lambda_runtime: Path
    # The API's key authorizer (runs without the layer).
    key_authorizer: Path

    @property
    def layer_python(self) -> Path:
        return self.layer / "python"


def build_layouts(target: PipTarget = HOST_TARGET, root: Path = LAYOUTS_DIR) -> Layouts:
    """Build (or find, unchanged since the last build) every deployed layout."""

    def lambda_asset(asset: LambdaCode) -> Path:
        inputs = [asset.code, asset.requirements, asset.constraints]
        return _built(root, asset.name, inputs, target, lambda out: bundle(asset, out, target))

    worker = _built(
        root,
        "worker",
        [REPO_ROOT / WORKER_DOCKERFILE, *(REPO_ROOT / src for src, _ in image_copies())],
        target,
        lay_out_image,
    )
    return Layouts(
        layer=lambda_asset(CORE_LAYER),
        router=lambda_asset(ROUTER),
        splitter=lambda_asset(SPLITTER),
        worker=worker,
        # The runtime's SDK comes with its bytecode, as in Lambda's images; without it
        # every cold start here would compile botocore again (~200 ms).
        lambda_runtime=install_requirements(_runtime_requirements(), None, target, compiled=True),
        key_authorizer=lambda_asset(KEY_AUTHORIZER),
    )


def _runtime_requirements() -> Path:
    """boto3 at the project's pin: the Lambda runtime ships it, so no asset carries it."""
    pins = [
        line.strip()
        for line in (REPO_ROOT / "requirements.txt").read_text().splitlines()
        if re.match(r"^boto3==", line.strip())
    ]
    if not pins:
        raise BundlingError("requirements.txt pins no boto3 (the Lambda runtime's SDK)")
    path = DEPS_CACHE / "lambda-runtime-requirements.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != pins[0] + "\n":
        path.write_text(pins[0] + "\n")
    return path


def _built(root: Path, name: str, inputs: list[Path | None], target: PipTarget, make) -> Path:  # noqa: ANN001
    """``root/<name>-<digest of inputs>``, made by ``make(dir)`` unless it exists; older
    builds of the same name are removed once the new one is complete."""
    digest = hashlib.sha256(target.describe().encode())
    for path in inputs:
        for file in _files(path):
            digest.update(str(file.relative_to(REPO_ROOT)).encode() + b"\0")
            digest.update(file.read_bytes())
    built = root / f"{name}-{digest.hexdigest()[:12]}"
    if not (built / ".complete").exists():
        _build_once(built, make)
    # ``.complete``'s time is when a build was last asked for. A platform started
    # from an older tree may still be running from its build (it restarts workers
    # from it), so only builds nobody asked for in a day are removed.
    (built / ".complete").touch()
    for stale in root.glob(f"{name}-*"):
        if stale != built and _unused_for(stale, KEEP_UNUSED_BUILDS_SECONDS):
            shutil.rmtree(stale, ignore_errors=True)
    return built


def _unused_for(build: Path, seconds: float) -> bool:
    try:
        return time.time() - (build / ".complete").stat().st_mtime > seconds
    except FileNotFoundError:  # never completed: a crashed build's leftovers
        return True


def _files(path: Path | None) -> Iterator[Path]:
    if path is None or not path.exists():
        return
    if path.is_file():
        yield path
        return
    for file in sorted(path.rglob("*")):
        if file.is_file() and "__pycache__" not in file.parts and file.suffix != ".pyc":
            yield file


def _build_once(target: Path, make) -> Path:  # noqa: ANN001
    """Build into a staging directory and rename it into place, so a crash never
    leaves a half-built directory that looks complete."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".staging-{target.name}-"))
    try:
        make(staging)
        (staging / ".complete").touch()
        if target.exists():  # another build finished first
            shutil.rmtree(staging)
        else:
            staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target
