"""The worker image's packages, resolved as its build will resolve them.

`cdk deploy` builds the worker image (``gpu_workers/Dockerfile``) and runs its
``pip install`` there, on the image's Python and platform: a pin that pip cannot
resolve for them stops the deploy. :func:`resolve_image` asks pip's resolver for
the same requirement files, for that Python and platform, without installing
anything (``pip install --dry-run --report``), so a test and ``make deploy-check``
see a conflict before a deploy does.

What it reads from the Dockerfile, so that the two cannot drift apart: the base
image (``FROM python:<X.Y>-slim-<debian release>``: the Python version, and the C
library whose manylinux wheels the image can load) and the requirement files its
``COPY`` lines bring in.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from stacks.assets import REPO_ROOT, WORKER_DOCKERFILE

# glibc of each Debian release an official python image is built on: the newest
# manylinux_2_N tag its wheels may carry.
GLIBC_MINOR = {"bullseye": 31, "bookworm": 36, "trixie": 41}
_FROM = re.compile(
    r"^FROM\s+(?:\S+/)?python:(?P<python>3\.\d+)(?:\.\d+)?-(?:slim-)?(?P<release>[a-z]+)"
    r"(?:@sha256:[0-9a-f]{64})?\s*$"
)
_COPY_REQUIREMENTS = re.compile(r"^COPY\s+(?:--\S+\s+)*(\S*requirements\S*\.txt)\s+\S+\s*$")


class ImageUnresolvable(RuntimeError):
    """pip cannot resolve the image's requirements for its Python and platform."""


@dataclass(frozen=True)
class ImageTarget:
    """The interpreter and platform the image's ``pip install`` runs on."""

    python_version: str
    debian_release: str
    requirements: tuple[Path, ...]

    @property
    def glibc_minor(self) -> int:
        return GLIBC_MINOR[self.debian_release]

    def platforms(self) -> list[str]:
        """Every x86_64 wheel tag the image's glibc loads: pip matches a wheel only
        against tags it is given, and the CUDA wheels carry just one of them each."""
        tags = [f"manylinux_2_{minor}_x86_64" for minor in range(self.glibc_minor, 4, -1)]
        return [*tags, "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]

    def pip_options(self) -> list[str]:
        abi = "cp" + self.python_version.replace(".", "")
        options = ["--only-binary=:all:", "--implementation", "cp"]
        options += ["--python-version", self.python_version]
        options += ["--abi", abi, "--abi", "abi3", "--abi", "none"]
        for platform in self.platforms():
            options += ["--platform", platform]
        return options

    def describe(self) -> str:
        return f"Python {self.python_version} on Debian {self.debian_release}, x86_64"


def image_target(dockerfile: Path = REPO_ROOT / WORKER_DOCKERFILE) -> ImageTarget:
    """The worker image's Python, Debian release and requirement files."""
    python = release = None
    requirements: list[Path] = []
    for line in dockerfile.read_text().splitlines():
        line = line.strip()
        if match := _FROM.match(line):
            python, release = match.group("python"), match.group("release")
        elif match := _COPY_REQUIREMENTS.match(line):
            requirements.append(REPO_ROOT / match.group(1))
    if python is None or release is None:
        raise ImageUnresolvable(f"{dockerfile}: no `FROM python:<X.Y>-slim-<release>` line")
    if release not in GLIBC_MINOR:
        raise ImageUnresolvable(f"{dockerfile}: Debian {release!r} is not in GLIBC_MINOR")
    if not requirements:
        raise ImageUnresolvable(f"{dockerfile}: copies no requirements file")
    return ImageTarget(python, release, tuple(requirements))


def resolve(target: ImageTarget, requirements: list[Path] | None = None) -> dict[str, str]:
    """What pip would install for ``target`` from ``requirements`` (the image's
    own by default): ``{name: version}``. Raises :class:`ImageUnresolvable` with
    pip's account of the conflict."""
    files = requirements if requirements is not None else list(target.requirements)
    with tempfile.TemporaryDirectory(prefix="switchyard-image-") as scratch:
        report = Path(scratch) / "report.json"
        command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed"]
        command += ["--disable-pip-version-check", "--report", str(report)]
        command += target.pip_options()
        for path in files:
            command += ["-r", str(path)]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise ImageUnresolvable(
                f"pip cannot resolve {', '.join(_shown(p) for p in files)} for "
                f"{target.describe()}:\n{_conflict(done.stdout + done.stderr)}"
            )
        installed = json.loads(report.read_text())["install"]
    return {item["metadata"]["name"].lower(): item["metadata"]["version"] for item in installed}


def resolve_image(dockerfile: Path = REPO_ROOT / WORKER_DOCKERFILE) -> dict[str, str]:
    """The worker image's packages as its build will install them."""
    return resolve(image_target(dockerfile))


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def _conflict(output: str) -> str:
    """pip's lines that say what conflicts (its errors and the causes it names),
    without its download progress."""
    keep, cause = [], False
    for line in output.splitlines():
        if line.startswith("ERROR:"):
            keep.append(line)
            cause = False
        elif line.startswith("The conflict is caused by"):
            keep.append(line)
            cause = True
        elif cause and line.startswith("    "):
            keep.append(line)
        else:
            cause = False
    return "\n".join(keep) or output.strip()[-2000:]


def main() -> int:
    target = image_target()
    try:
        packages = resolve(target)
    except ImageUnresolvable as exc:
        print(exc, file=sys.stderr)
        return 1
    pins = ", ".join(
        f"{n} {packages.get(n, '-')}" for n in ("torch", "vllm", "transformers", "numpy")
    )
    print(f"worker image: {len(packages)} packages resolve for {target.describe()} ({pins})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
