"""The request bodies the platform takes, one pydantic model each: predict,
generate (``switchyard.generation.GenerationRequest``), batch jobs, and the
OpenAI-compatible completions, chat completions and embeddings.

The router validates a body with its model; the API document and API Gateway's
request models are rendered from the same model (``request_schema``, ``draft4``).
A model's own request, the body narrowed by its signature (``predict_body_for``,
``generate_body_for``, ``completion_body_for``, ...), is rendered for the document
and the gateway; the router checks the signature itself
(``switchyard.signatures.check_inputs``), so that its refusals name each input.

Each fault of a body is a ``switchyard.fields.FieldError`` that names the field as
the caller wrote it (``field_errors``). The models build their validators on first use
(``defer_build``): most cold starts never validate most bodies.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from functools import lru_cache
from typing import Annotated, Any, Literal

from annotated_types import Ge, Le, Lt
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    WithJsonSchema,
    create_model,
    model_validator,
)

from switchyard.fields import FieldError, field_path
from switchyard.generation import CHAT_ROLES, MAX_STOP_CHARS, MAX_STOPS, GenerationRequest
from switchyard.json_values import same_json, whole
from switchyard.registry import ModelVersion
from switchyard.schemas import GenerationSignature, Signature, TensorSignature, TextSignature

# A body is an object of known fields; anything else is the caller's mistake.
_BODY = ConfigDict(extra="forbid", defer_build=True)
# OpenAI's bodies take no string for a number, nor true for a 1.
_OPENAI = ConfigDict(extra="forbid", defer_build=True, strict=True)

# A text that is not blank, as the signatures tell (``str.strip``): it holds a
# character Python does not take as white space. Spelled out, because a schema's
# ``\S`` is ECMAScript's, whose white space differs (U+001C to U+001F, U+0085, U+FEFF).
NOT_BLANK = (
    "[^\\t-\\r\\x1c-\\x20\\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]"
)

# -- field types ---------------------------------------------------------------------


def _present(value: Any) -> Any:
    if value is None:
        raise ValueError("is null: leave it out instead")
    return value


def _absent_or(kind: Any) -> Any:
    """A field that may be left out but is never null (as API Gateway's model says)."""
    return Annotated[kind, BeforeValidator(_present)]


def neutral(*values: Any) -> Any:
    """A parameter the platform takes only at a value that means "not used"."""

    def check(value: Any) -> Any:
        if not any(same_json(value, v) for v in values):
            allowed = " or ".join("null" if v is None else repr(v) for v in values)
            raise ValueError(f"is not supported by this platform (only {allowed})")
        return value

    return Annotated[Any, BeforeValidator(check), WithJsonSchema({"enum": list(values)})]


def _json_type(value: Any) -> str:
    return "<array>" if isinstance(value, list) else "<string>"


def string_or_list(one: Any, many: Any) -> Any:
    """A string, or a list: validated as the one its JSON type is, so that a fault
    is named in that one (``stop[1]``), not in both."""
    return Annotated[
        Annotated[one, Tag("<string>")] | Annotated[many, Tag("<array>")],  # type: ignore[operator]
        Discriminator(_json_type),
    ]


# -- predict -------------------------------------------------------------------------


class PredictParams(BaseModel):
    model_config = _BODY

    version: _absent_or(  # type: ignore[valid-type]
        Annotated[
            str,
            Field(
                min_length=1,
                max_length=64,
                description="Pin the request to this version (as the x-model-version header does)",
            ),
        ]
    ) = None


class PredictBody(BaseModel):
    """``POST /v1/models/{model}/predict``: the inputs, each as the model's signature
    says, and an optional version pin."""

    model_config = _BODY

    inputs: list[Any] = Field(min_length=1, description="The inputs, as the model's signature says")
    params: _absent_or(PredictParams) = None  # type: ignore[valid-type]


def input_type(signature: Signature) -> Any:
    """One input as ``signature`` takes it, for the document (the router's check is
    ``switchyard.signatures.check_inputs``)."""
    if isinstance(signature, TextSignature):
        return Annotated[
            str, Field(min_length=1, max_length=signature.max_chars, pattern=NOT_BLANK)
        ]
    if isinstance(signature, TensorSignature):
        (length,) = signature.shape
        number = Annotated[float, Field(ge=signature.minimum, le=signature.maximum)]
        return Annotated[list[number], Field(min_length=length, max_length=length)]  # type: ignore[valid-type]
    prompt = Annotated[str, Field(min_length=1, max_length=signature.max_chars, pattern=NOT_BLANK)]
    return prompt | generate_body_for(signature)  # a bare prompt, or a request


@lru_cache(maxsize=256)
def predict_body_for(
    model: str, signatures: tuple[Signature, ...], max_inputs: int
) -> type[PredictBody]:
    """``model``'s own predict body: up to ``max_inputs`` inputs, each of one of
    ``signatures`` (its active versions')."""
    kinds = [input_type(s) for s in signatures]
    item = kinds[0] if len(kinds) == 1 else _union(kinds)
    return create_model(  # type: ignore[call-overload,no-any-return]
        f"{model}-predict",
        __base__=PredictBody,
        inputs=(list[item], Field(min_length=1, max_length=max_inputs)),  # type: ignore[valid-type]
    )


def _union(kinds: list[Any]) -> Any:
    union = kinds[0]
    for kind in kinds[1:]:
        union = union | kind
    return union


# -- generate ------------------------------------------------------------------------

# ``POST /v1/models/{model}/generate`` takes one generation request.
GenerateBody = GenerationRequest

Stop = Annotated[str, Field(min_length=1, max_length=MAX_STOP_CHARS)]


@lru_cache(maxsize=64)
def generate_body_for(signature: GenerationSignature) -> type[GenerationRequest]:
    """A generation request as ``signature`` takes it (its prompt's length and
    ``max_tokens``); whether prompt and ``max_tokens`` fit the model's context is
    counted in tokens, which no schema says."""
    return create_model(  # type: ignore[call-overload,no-any-return]
        "GenerationRequest",
        __base__=GenerationRequest,
        prompt=(str, Field(min_length=1, max_length=signature.max_chars, pattern=NOT_BLANK)),
        max_tokens=(whole(Ge(1), Le(signature.max_tokens)), 16),
        stop=(list[Stop], Field(default_factory=list, max_length=MAX_STOPS)),
    )


# -- batch jobs ----------------------------------------------------------------------

MAX_JOB_INPUTS = 10_000  # per submission with inputs (a larger job is a dropped file)
# A JSON Lines file in S3 (which bucket and prefix are the caller's is checked after).
INPUT_URI_PATTERN = "^s3://[^/]+/.+[.]jsonl$"
# An http(s) URL in printable ASCII (a character outside it is written
# percent-encoded), spelled as ranges so that the router and the API document's
# readers mean the same characters: optional user info ending in @; a host (not an
# IPv6 literal: no brackets, and neither : nor @); an optional port of 0 to 65535;
# then the rest, after the / ? or # that ends the host. Every URL it takes, urllib
# can post to (``tests/unit/test_callback_urls.py``).
_PORT = "[0-9]{1,4}|[0-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]"
CALLBACK_URL_PATTERN = (
    f'^https?://([!-"$-.0->@-Z^-~]*@)?[!-"$-.0-9;->A-Z^-~]+(:({_PORT})?)?([/?#][!-~]*)?$'
)

# What a field whose pattern failed must be, in words, not as its pattern.
PATTERNS_SAID = {
    CALLBACK_URL_PATTERN: "must be an http:// or https:// URL of printable ASCII naming a "
    "host (not an IPv6 literal), with a port from 0 to 65535 if it gives one",
    INPUT_URI_PATTERN: "must be s3://<drop bucket>/<tenant>/<model>/<name>.jsonl",
    NOT_BLANK: "must not be blank",
}


class JobSubmission(BaseModel):
    """``POST /v1/jobs``: ``inputs`` (one per output line), or ``input_uri`` of a JSON
    Lines file in the drop bucket under the tenant's prefix."""

    model_config = ConfigDict(
        extra="forbid",
        defer_build=True,
        json_schema_extra={
            "oneOf": [
                {"required": ["inputs"], "not": {"required": ["input_uri"]}},
                {"required": ["input_uri"], "not": {"required": ["inputs"]}},
            ]
        },
    )

    model: str = Field(min_length=1, max_length=64)
    inputs: _absent_or(  # type: ignore[valid-type]
        Annotated[
            list[Any],
            Field(
                min_length=1,
                max_length=MAX_JOB_INPUTS,
                description="One input per output line, as in a dropped file",
            ),
        ]
    ) = None
    input_uri: _absent_or(  # type: ignore[valid-type]
        Annotated[
            str,
            Field(
                min_length=6,
                max_length=1024,
                pattern=INPUT_URI_PATTERN,
                description="s3://<drop bucket>/<tenant>/<model>/<name>.jsonl",
            ),
        ]
    ) = None
    callback_url: _absent_or(  # type: ignore[valid-type]
        Annotated[
            str,
            Field(
                max_length=2048,
                pattern=CALLBACK_URL_PATTERN,
                description="POSTed the job's summary when it ends, signed "
                "(X-Switchyard-Signature: sha256=HMAC of the body with the tenant's "
                "webhook secret)",
            ),
        ]
    ) = None

    @model_validator(mode="after")
    def _one_source(self) -> JobSubmission:
        if (self.inputs is None) == (self.input_uri is None):
            raise ValueError("give exactly one of inputs and input_uri")
        return self


# -- the OpenAI-compatible API -------------------------------------------------------

Stops = string_or_list(Stop, Annotated[list[Stop], Field(max_length=MAX_STOPS)])


class StreamOptions(BaseModel):
    model_config = _OPENAI

    include_usage: bool = False


class _OpenAIBody(BaseModel):
    """What every OpenAI body may carry: the model, parameters the platform takes
    only at the value that means "not used" (``n`` > 1, log probabilities, tools,
    penalties are refused, never ignored), and those it ignores."""

    model_config = _OPENAI

    model: str = Field(min_length=1, description="A model (GET models)")
    user: str | None = None
    n: neutral(1, None) = None  # type: ignore[valid-type]
    presence_penalty: neutral(0, None) = None  # type: ignore[valid-type]
    frequency_penalty: neutral(0, None) = None  # type: ignore[valid-type]
    logprobs: neutral(False, None) = None  # type: ignore[valid-type]
    top_logprobs: neutral(0, None) = None  # type: ignore[valid-type]
    echo: neutral(False, None) = None  # type: ignore[valid-type]
    best_of: neutral(1, None) = None  # type: ignore[valid-type]
    suffix: neutral(None) = None  # type: ignore[valid-type]
    logit_bias: neutral(None) = None  # type: ignore[valid-type]
    tools: neutral(None) = None  # type: ignore[valid-type]
    tool_choice: neutral("none", None) = None  # type: ignore[valid-type]
    parallel_tool_calls: neutral(None) = None  # type: ignore[valid-type]
    response_format: neutral({"type": "text"}, None) = None  # type: ignore[valid-type]
    stream_options: StreamOptions | None = None
    # Taken and ignored, whatever their value.
    metadata: Any = None
    store: Any = None
    service_tier: Any = None


class _SamplingBody(_OpenAIBody):
    max_tokens: whole(Ge(1)) | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    seed: whole(Ge(0), Lt(2**63)) | None = None
    stop: Stops | None = None  # type: ignore[valid-type]
    stream: bool | None = None

    def sampling(self, max_tokens: int | None) -> dict[str, Any]:
        """The generation request's sampling fields, as given."""
        request: dict[str, Any] = {"stream": bool(self.stream)}
        given = {"temperature": self.temperature, "top_p": self.top_p, "seed": self.seed}
        request.update({name: value for name, value in given.items() if value is not None})
        if max_tokens is not None:
            request["max_tokens"] = max_tokens
        return request

    def stops(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])


Prompt = Annotated[str, Field(min_length=1)]


class CompletionBody(_SamplingBody):
    """``POST /openai/v1/completions``: one prompt (a list of one is taken too)."""

    prompt: string_or_list(Prompt, Annotated[list[Prompt], Field(min_length=1, max_length=1)])  # type: ignore[valid-type]

    def generation(self) -> dict[str, Any]:
        """The platform's generation request."""
        prompt = self.prompt if isinstance(self.prompt, str) else self.prompt[0]
        return {"prompt": prompt, "stop": self.stops(), **self.sampling(self.max_tokens)}


class TextPart(BaseModel):
    model_config = _OPENAI

    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    """A turn; what a message may say besides (a name, tool calls) would be ignored,
    so it is refused."""

    model_config = _OPENAI

    role: Literal[tuple(sorted(CHAT_ROLES))]  # type: ignore[valid-type]
    content: string_or_list(str, list[TextPart])  # type: ignore[valid-type]

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class ChatBody(_SamplingBody):
    """``POST /openai/v1/chat/completions``."""

    messages: list[ChatMessage] = Field(min_length=1)
    # OpenAI's newer name for max_tokens; given both, it wins.
    max_completion_tokens: whole(Ge(1)) | None = None

    def turns(self) -> list[dict[str, str]]:
        return [{"role": m.role, "content": m.text()} for m in self.messages]


class EmbeddingsBody(_OpenAIBody):
    """``POST /openai/v1/embeddings``: a text, or a list of them."""

    input: string_or_list(Prompt, Annotated[list[str], Field(min_length=1)])  # type: ignore[valid-type]
    encoding_format: Literal["float", "base64"] | None = None
    dimensions: whole(Ge(1)) | None = Field(
        default=None,
        description="Shorter embeddings: the first this many numbers, scaled back to length "
        "1; at most the model's own size",
    )

    def texts(self) -> list[str]:
        return [self.input] if isinstance(self.input, str) else list(self.input)


@lru_cache(maxsize=64)
def completion_body_for(model: str, signature: GenerationSignature) -> type[CompletionBody]:
    prompt = Annotated[str, Field(min_length=1, max_length=signature.max_chars, pattern=NOT_BLANK)]
    return create_model(  # type: ignore[call-overload,no-any-return]
        f"{model}-completion",
        __base__=CompletionBody,
        model=(Literal[model], ...),
        prompt=(
            string_or_list(prompt, Annotated[list[prompt], Field(min_length=1, max_length=1)]),
            ...,
        ),  # type: ignore[valid-type]
        max_tokens=(whole(Ge(1), Le(signature.max_tokens)) | None, None),
    )


@lru_cache(maxsize=64)
def chat_body_for(model: str, signature: GenerationSignature) -> type[ChatBody]:
    tokens = whole(Ge(1), Le(signature.max_tokens)) | None
    return create_model(  # type: ignore[call-overload,no-any-return]
        f"{model}-chat",
        __base__=ChatBody,
        model=(Literal[model], ...),
        max_tokens=(tokens, None),
        max_completion_tokens=(tokens, None),
    )


@lru_cache(maxsize=64)
def embeddings_body_for(
    model: str, signature: TextSignature, max_inputs: int
) -> type[EmbeddingsBody]:
    text = input_type(signature)
    return create_model(  # type: ignore[call-overload,no-any-return]
        f"{model}-embeddings",
        __base__=EmbeddingsBody,
        model=(Literal[model], ...),
        input=(
            string_or_list(text, Annotated[list[text], Field(min_length=1, max_length=max_inputs)]),
            ...,
        ),  # type: ignore[valid-type]
    )


def generates(versions: list[ModelVersion]) -> bool:
    """Whether a model generates text (what ``generate`` and the OpenAI completions
    take): one of its active versions does."""
    return any(isinstance(v.signature, GenerationSignature) for v in versions)


def embeds(versions: list[ModelVersion]) -> bool:
    """Whether a model embeds text (what the OpenAI embeddings take): every active
    version does (true of none: a model with no version yet is not refused)."""
    return all(
        isinstance(v.signature, TextSignature) and v.runtime == "sentence-transformers"
        for v in versions
    )


# -- faults --------------------------------------------------------------------------

_SAID = {
    "extra_forbidden": "is not a known field",
    "missing": "is required",
    "model_type": "must be a JSON object",
    "model_attributes_type": "must be a JSON object",
}


def field_errors(exc: ValidationError) -> list[FieldError]:
    """A body's faults, each named by its field as the caller wrote it."""
    errors = []
    for error in exc.errors():
        loc = [part for part in error["loc"] if not str(part).startswith("<")]  # a union's tag
        errors.append(FieldError(field_path(loc) or "body", _said(error)))
    return errors


def _said(error: Mapping[str, Any]) -> str:
    kind = error["type"]
    if kind == "string_pattern_mismatch":
        return PATTERNS_SAID.get(error["ctx"]["pattern"], str(error["msg"]))
    if kind == "value_error":
        return str(error["msg"]).removeprefix("Value error, ")
    return _SAID.get(kind, str(error["msg"]))


# -- schemas -------------------------------------------------------------------------


@lru_cache(maxsize=256)
def _schema(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema()
    definitions = schema.pop("$defs", {})
    return _tidy(_inline(schema, definitions), top=True)  # type: ignore[no-any-return]


def request_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The body's JSON Schema (2020-12, as OpenAPI 3.1 has it), whole: no references,
    titles only at the top, no null default of a field that is never null."""
    return copy.deepcopy(_schema(model))


def _inline(node: Any, definitions: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        if "$ref" in node:
            target = definitions[node["$ref"].removeprefix("#/$defs/")]
            return _inline(
                {**target, **{k: v for k, v in node.items() if k != "$ref"}}, definitions
            )
        return {k: _inline(v, definitions) for k, v in node.items()}
    if isinstance(node, list):
        return [_inline(v, definitions) for v in node]
    return node


def _tidy(node: Any, top: bool = False) -> Any:
    if isinstance(node, list):
        return [_tidy(v) for v in node]
    if not isinstance(node, dict):
        return node
    tidy = {}
    for key, value in node.items():
        if key == "title" and not top:
            continue
        if key == "default" and value is None:
            continue
        if key in ("properties", "patternProperties"):
            tidy[key] = {name: _tidy(v) for name, v in value.items()}
        else:
            tidy[key] = _tidy(value)
    return tidy


def draft4(schema: Any) -> Any:
    """``schema`` in JSON Schema draft 4, the dialect of API Gateway's models."""
    if isinstance(schema, list):
        return [draft4(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "const":
            out["enum"] = [value]
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
        elif key in ("properties", "patternProperties"):
            out[key] = {name: draft4(v) for name, v in value.items()}
        elif key in ("examples", "contentMediaType", "contentSchema"):
            continue
        else:
            out[key] = draft4(value)
    return out
