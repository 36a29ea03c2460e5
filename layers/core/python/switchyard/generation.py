"""Generation: the request a generative model takes, chat prompts, prompt token
counts, and the token stream a worker writes and a router reads.

A generation request is one input of a queue message, like a sentence or an image:
it rides the model's realtime (or batch) lane, is checked against the version's
signature by the router and again by the worker, and ends in a result record. What
generation adds is the stream: while a worker decodes, it writes the tokens it has
produced as *chunks* in the results table, beside the request's record and under
the same tenant, and the router that holds the caller's connection reads them in
order (``docs/generation.md`` says why this transport, with the figures).

Chunks are keyed by the index of their first token (``<request id>#t000042``), so a
reader asks only for what follows the last token it passed on, and a worker that
takes over a request after a crash continues from the tokens already written (it
forces them as the prefix of its own decode) rather than starting again: the
caller sees every token once, in order.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from typing import Any, Protocol

from annotated_types import Ge, Lt
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from switchyard.fields import FieldError, field_path
from switchyard.json_values import whole
from switchyard.results import insert_of
from switchyard.schemas import GenerationSignature
from switchyard.tables import RESULTS

# What a chat renders to (the demo model's template; a model's own template would
# live with its artifact). The assistant's turn ends where the next user turn would
# begin, so that is a stop sequence of every chat request.
CHAT_ROLES = {"system": "System", "user": "User", "assistant": "Assistant", "developer": "System"}
CHAT_STOP = "\nUser:"
MAX_STOPS = 4
MAX_STOP_CHARS = 64


class GenerationRequest(BaseModel):
    """One generation: the prompt and how to sample its continuation.

    ``seed`` fixes the sampling; without one the worker derives it from the request
    id, so a redelivered request samples the same tokens (but such a request is no
    one's to cache: the caller did not ask for a repeatable answer)."""

    # Strict: a JSON string is not a number here, nor true a 1 (but 1.0 is a 1).
    model_config = ConfigDict(extra="forbid", strict=True)

    prompt: str = Field(min_length=1)
    max_tokens: whole(Ge(1)) = 16  # type: ignore[valid-type]
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    seed: whole(Ge(0), Lt(2**63)) | None = None  # type: ignore[valid-type]
    # A caller's stop sequences (at most MAX_STOPS), and a chat's end of turn.
    stop: list[str] = Field(default_factory=list, max_length=MAX_STOPS + 1)
    stream: bool = False

    @field_validator("stop")
    @classmethod
    def _callers_stops(cls, stop: list[str]) -> list[str]:
        """A caller names at most MAX_STOPS; a chat's end of turn comes beside them."""
        if len([s for s in stop if s != CHAT_STOP]) > MAX_STOPS:
            raise ValueError(f"at most {MAX_STOPS} stop sequences")
        return stop

    @property
    def repeatable(self) -> bool:
        """The same request always gets the same answer (greedy, or seeded)."""
        return self.temperature == 0 or self.seed is not None

    def seed_for(self, request_id: str) -> int:
        if self.seed is not None:
            return self.seed
        return int.from_bytes(hashlib.sha256(request_id.encode()).digest()[:8], "big") >> 1


def as_request(item: Any) -> GenerationRequest:
    """A valid input item (already checked) as a request: a bare string is a prompt."""
    if isinstance(item, str):
        return GenerationRequest(prompt=item)
    return GenerationRequest.model_validate(item)


def check_generation(item: Any, sig: GenerationSignature, field: str) -> list[FieldError]:
    """What is wrong with one generation input (the token count is checked where a
    tokenizer is at hand: ``PromptTokens``)."""
    if isinstance(item, str):
        item = {"prompt": item}
    if not isinstance(item, dict):
        return [FieldError(field, "must be a prompt string or a generation request object")]
    try:
        request = GenerationRequest.model_validate(item)
    except ValidationError as exc:
        return [FieldError(field_path(e["loc"], field), e["msg"]) for e in exc.errors()]
    errors = []
    if not request.prompt.strip():
        errors.append(FieldError(f"{field}.prompt", "must not be empty"))
    if len(request.prompt) > sig.max_chars:
        errors.append(
            FieldError(
                f"{field}.prompt",
                f"is {len(request.prompt)} characters; at most {sig.max_chars} allowed",
            )
        )
    if request.max_tokens > sig.max_tokens:
        errors.append(
            FieldError(
                f"{field}.max_tokens", f"is {request.max_tokens}; at most {sig.max_tokens} allowed"
            )
        )
    for i, stop in enumerate(request.stop):
        if not 1 <= len(stop) <= MAX_STOP_CHARS:
            errors.append(
                FieldError(f"{field}.stop[{i}]", f"must be 1 to {MAX_STOP_CHARS} characters")
            )
    return errors


def render_chat(messages: list[dict[str, str]]) -> str:
    """The prompt of a chat: one line per turn, then the assistant's turn to speak."""
    lines = [f"{CHAT_ROLES[m['role']]}: {m['content'].strip()}" for m in messages]
    return "\n".join(lines) + "\nAssistant:"


def over_context(prompt_tokens: int, max_tokens: int, context_length: int) -> str | None:
    """Why a request does not fit the model's context, or None if it does."""
    if prompt_tokens + max_tokens <= context_length:
        return None
    return (
        f"the prompt is {prompt_tokens} tokens and max_tokens {max_tokens}: "
        f"{prompt_tokens + max_tokens} is over the model's context of {context_length}"
    )


class PromptTokens:
    """Counts a prompt's tokens with the version's own tokenizer (``tokenizer.json``
    beside its artifact, checked against its sha256), loaded once per version.
    ``tokenizers`` is imported only here, so only generation requests pay for it."""

    def __init__(self, fetch: Any) -> None:
        self._fetch = fetch  # (uri, sha256) -> local Path
        self._loaded: dict[str, Any] = {}
        self._lock = threading.Lock()

    def count(self, tokenizer_uri: str, sha256: str, text: str) -> int:
        with self._lock:
            tokenizer = self._loaded.get(sha256)
            if tokenizer is None:
                from tokenizers import Tokenizer

                tokenizer = Tokenizer.from_file(str(self._fetch(tokenizer_uri, sha256)))
                self._loaded[sha256] = tokenizer
        return len(tokenizer.encode(text, add_special_tokens=False).ids)


# -- the token stream --------------------------------------------------------------


@dataclass
class Chunk:
    """Tokens ``start`` .. ``start + len(ids) - 1`` of a request's generation, with the
    text each added (a token may add none: part of a character), and on the last
    chunk, how the generation ended."""

    start: int
    ids: list[int]
    pieces: list[str]
    finish_reason: str | None = None
    usage: dict[str, int] = field(default_factory=dict)

    @property
    def end(self) -> int:
        return self.start + len(self.ids)


@dataclass(frozen=True)
class ChunkWrite:
    """One chunk of one request's stream, to be written with others."""

    tenant: str
    request_id: str
    chunk: Chunk
    expires_at: int


class TokenStream(Protocol):
    def put(self, tenant: str, request_id: str, chunk: Chunk, expires_at: int) -> bool:
        """Write a chunk once; False if that chunk (same first token) exists."""
        ...

    def put_many(self, writes: list[ChunkWrite]) -> list[bool]:
        """Write many streams' chunks, each once, in as few calls as the store allows
        (at most one chunk per stream: a stream's chunks are written in order); for
        each, False if that chunk exists."""
        ...

    def after(self, tenant: str, request_id: str, index: int) -> list[Chunk]:
        """The chunks whose first token is ``index`` or later, in order."""
        ...

    def at(self, places: list[tuple[str, str, int]]) -> dict[tuple[str, str, int], Chunk]:
        """The chunks that begin exactly at these (tenant, request id, token) places,
        those written so far, in one read."""
        ...


def chunk_key(request_id: str, start: int) -> str:
    return f"{request_id}#t{start:06d}"


class DynamoDBTokenStream:
    """Chunks as items of the results table: same tenant partition, sort key
    ``<request id>#t<first token>``, same TTL attribute. A reader's look is one
    Query over the range after what it has; a chunk is written with a condition,
    so none is ever overwritten."""

    def __init__(self, dynamodb: Any, table: str) -> None:
        self._ddb = dynamodb
        self._table = table

    def put(self, tenant: str, request_id: str, chunk: Chunk, expires_at: int) -> bool:
        return self._put(_item_of(ChunkWrite(tenant, request_id, chunk, expires_at)))

    def _put(self, item: dict[str, Any]) -> bool:
        try:
            self._ddb.put_item(
                TableName=self._table,
                Item=item,
                ConditionExpression="attribute_not_exists(#sk)",
                ExpressionAttributeNames={"#sk": RESULTS.sort},
            )
        except self._ddb.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def put_many(self, writes: list[ChunkWrite]) -> list[bool]:
        # One BatchExecuteStatement of INSERTs per 25 chunks: an INSERT never replaces
        # an item, so a chunk is still written once; one whose place is taken fails
        # with DuplicateItem on its own. A statement that fails otherwise (throttled)
        # leaves its chunk to the conditional put.
        written: list[bool] = []
        for i in range(0, len(writes), _BATCH_WRITE_LIMIT):
            items = [_item_of(w) for w in writes[i : i + _BATCH_WRITE_LIMIT]]
            statements = [insert_of(self._table, item) for item in items]
            answers = self._ddb.batch_execute_statement(Statements=statements)["Responses"]
            for item, answer in zip(items, answers, strict=True):
                error = answer.get("Error", {}).get("Code")
                written.append(
                    error is None or (error != "DuplicateItem" and self._put(item))
                )  # fmt: skip
        return written

    def after(self, tenant: str, request_id: str, index: int) -> list[Chunk]:
        chunks: list[Chunk] = []
        request: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "#pk = :t AND #sk BETWEEN :lo AND :hi",
            "ExpressionAttributeNames": {"#pk": RESULTS.partition, "#sk": RESULTS.sort},
            "ExpressionAttributeValues": {
                ":t": {"S": tenant},
                ":lo": {"S": chunk_key(request_id, index)},
                ":hi": {"S": f"{request_id}#t~"},
            },
            "ConsistentRead": True,
        }
        while True:
            response = self._ddb.query(**request)
            chunks.extend(_chunk_of(item) for item in response.get("Items", []))
            if "LastEvaluatedKey" not in response:
                return chunks
            request["ExclusiveStartKey"] = response["LastEvaluatedKey"]

    def at(self, places: list[tuple[str, str, int]]) -> dict[tuple[str, str, int], Chunk]:
        found: dict[tuple[str, str, int], Chunk] = {}
        wanted = list(dict.fromkeys(places))
        for i in range(0, len(wanted), _BATCH_GET_LIMIT):
            keys: list[dict[str, Any]] = [
                {RESULTS.partition: {"S": t}, RESULTS.sort: {"S": chunk_key(r, n)}}
                for t, r, n in wanted[i : i + _BATCH_GET_LIMIT]
            ]
            while keys:
                response = self._ddb.batch_get_item(
                    RequestItems={self._table: {"Keys": keys, "ConsistentRead": True}}
                )
                for item in response.get("Responses", {}).get(self._table, []):
                    request_id = item[RESULTS.sort]["S"].rsplit("#t", 1)[0]
                    chunk = _chunk_of(item)
                    found[(item[RESULTS.partition]["S"], request_id, chunk.start)] = chunk
                keys = response.get("UnprocessedKeys", {}).get(self._table, {}).get("Keys", [])
        return found


_BATCH_GET_LIMIT = 100
_BATCH_WRITE_LIMIT = 25  # statements per BatchExecuteStatement


def _item_of(write: ChunkWrite) -> dict[str, Any]:
    chunk = write.chunk
    document = {
        "start": chunk.start,
        "ids": chunk.ids,
        "pieces": chunk.pieces,
        "finish_reason": chunk.finish_reason,
        "usage": chunk.usage,
    }
    return {
        RESULTS.partition: {"S": write.tenant},
        RESULTS.sort: {"S": chunk_key(write.request_id, chunk.start)},
        "chunk": {"S": json.dumps(document, separators=(",", ":"))},
        "expires_at": {"N": str(write.expires_at)},
    }


def _chunk_of(item: dict[str, Any]) -> Chunk:
    return Chunk(**json.loads(item["chunk"]["S"]))


def tokens_written(stream: TokenStream, tenant: str, request_id: str) -> list[Chunk]:
    """Every chunk of a request, contiguous from token 0 (what a worker taking the
    request over continues from); a chunk that overlaps or leaves a gap ends it."""
    contiguous: list[Chunk] = []
    for chunk in stream.after(tenant, request_id, 0):
        if chunk.start != (contiguous[-1].end if contiguous else 0):
            break
        contiguous.append(chunk)
        if chunk.finish_reason is not None:
            break
    return contiguous
