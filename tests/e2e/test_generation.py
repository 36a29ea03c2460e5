"""Generation on the local platform: the official ``openai`` client against
``/openai/v1``, the native generate stream, and a stream whose worker is killed
mid-way. Every request goes through the router, the model's realtime queue and a
worker batching continuously, as in the cloud."""

from __future__ import annotations

import json
import os
import signal

import httpx
import openai
import pytest

from harness.waiting import wait_for
from tests.e2e.conftest import slow_version

MODEL = "pydoc-gpt"
PROMPT = "Return the"


@pytest.fixture
def client(platform):
    return openai.OpenAI(base_url=f"{platform.url}/openai/v1", api_key=platform.api_key)


def sse_events(response: httpx.Response) -> list:
    events = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            events.append(line[6:] if line[6:] == "[DONE]" else json.loads(line[6:]))
    return events


def test_the_openai_client_lists_the_models(client, platform):
    models = client.models.list()
    assert {m.id for m in models} == set(platform.info["queues"])  # every model served
    assert MODEL in {m.id for m in models}
    assert all(m.object == "model" and m.owned_by == "switchyard" for m in models)
    assert client.models.retrieve(MODEL).id == MODEL


def test_a_streamed_chat_completion_is_the_same_text_as_the_whole_answer(client):
    asked = {
        "model": MODEL,
        "messages": [{"role": "system", "content": "Answer briefly."},
                     {"role": "user", "content": "What does a parser return?"}],
        "max_tokens": 40,
        "temperature": 0.9,
        "seed": 1234,
    }  # fmt: skip
    whole = client.chat.completions.create(**asked)
    choice = whole.choices[0]
    assert whole.object == "chat.completion" and whole.model == MODEL
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason in ("stop", "length")
    assert "\nUser:" not in choice.message.content  # the end of the turn is a stop
    assert whole.usage.completion_tokens <= 40
    assert whole.usage.total_tokens == whole.usage.prompt_tokens + whole.usage.completion_tokens

    chunks = list(
        client.chat.completions.create(**asked, stream=True, stream_options={"include_usage": True})
    )
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert text == choice.message.content  # same seed: same tokens, whole or streamed
    assert finishes[-1] == choice.finish_reason and not any(finishes[:-1])
    assert len(chunks) > 3  # it came in pieces, not at once
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def requests_counted(platform) -> dict[str, int]:
    """Requests per model in the router's metrics (its EMF documents in its log)."""
    counted: dict[str, int] = {}
    for line in (platform.run_dir / "logs" / "router.log").read_text().splitlines():
        document = json.loads(line) if line.startswith("{") else {}
        if "Requests" in document and "model" in document:
            counted[document["model"]] = counted.get(document["model"], 0) + 1
    return counted


def test_generations_and_embeddings_count_in_their_models_request_metrics(client, platform, http):
    # They were answered, but only predict's requests were counted: a generative
    # model's status and dashboard read 0 requests, and no alarm could see them
    before = requests_counted(platform)
    asked = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3}
    client.chat.completions.create(**asked)
    list(client.chat.completions.create(**asked, stream=True))
    native = http.post(
        f"/v1/models/{MODEL}/generate",
        json={"prompt": PROMPT, "max_tokens": 3},
        headers={"x-api-key": platform.api_key},
    )
    assert native.status_code == 200, native.text
    client.embeddings.create(model="minilm-embed", input="a sentence")

    def grown() -> dict[str, int] | None:
        now = requests_counted(platform)
        added = {m: now.get(m, 0) - before.get(m, 0) for m in (MODEL, "minilm-embed")}
        return added if added == {MODEL: 3, "minilm-embed": 1} else None

    wait_for(grown, timeout_s=10, what="the requests counted in the router's metrics")


def test_completions_honour_max_tokens_and_stop_whole_and_streamed(client):
    long = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=12, temperature=0)
    assert long.object == "text_completion"
    assert long.choices[0].finish_reason == "length"
    assert long.usage.completion_tokens == 12
    streamed = client.completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=12, temperature=0, stream=True
    )
    assert "".join(c.choices[0].text for c in streamed if c.choices) == long.choices[0].text

    # A stop sequence taken from the text itself: the answer ends just before it.
    text = long.choices[0].text
    stop = text.strip().split()[1]
    cut = client.completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=12, temperature=0, stop=[stop]
    )
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].text == text[: text.index(stop)]
    pieces = client.completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=12, temperature=0, stop=[stop], stream=True
    )
    assert "".join(c.choices[0].text for c in pieces if c.choices) == cut.choices[0].text


def test_embeddings_are_the_models_vectors_in_float_and_base64(client, platform, http):
    sentences = ["a sentence to embed", "another one"]
    native = http.post(
        "/v1/models/minilm-embed/predict",
        json={"inputs": sentences},
        headers={"x-api-key": platform.api_key},
    ).json()["outputs"]
    as_base64 = client.embeddings.create(model="minilm-embed", input=sentences)  # the default
    as_float = client.embeddings.create(
        model="minilm-embed", input=sentences[0], encoding_format="float"
    )
    assert [d.index for d in as_base64.data] == [0, 1]
    for got, want in zip(as_base64.data, native, strict=True):
        assert got.embedding == pytest.approx(want, abs=1e-6)
    assert as_float.data[0].embedding == pytest.approx(native[0], abs=1e-6)


def test_openai_errors_have_openais_types_statuses_and_bodies(client, platform):
    with pytest.raises(openai.NotFoundError) as unknown:
        client.completions.create(model="no-such-model", prompt="x", max_tokens=4)
    assert unknown.value.body["code"] == "model_not_found"
    with pytest.raises(openai.PermissionDeniedError):
        openai.OpenAI(base_url=f"{platform.url}/openai/v1", api_key="not-a-key").models.list()
    with pytest.raises(openai.BadRequestError) as hot:
        client.completions.create(model=MODEL, prompt="x", max_tokens=4, temperature=5)
    assert hot.value.body["param"] == "temperature"
    assert hot.value.body["type"] == "invalid_request_error"
    with pytest.raises(openai.BadRequestError) as many:
        client.completions.create(model=MODEL, prompt="x", max_tokens=4, n=2)
    assert many.value.body["param"] == "n"
    with pytest.raises(openai.BadRequestError) as too_long:
        client.completions.create(model=MODEL, prompt="word " * 600, max_tokens=8)
    assert too_long.value.body["code"] == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as over:
        client.completions.create(model=MODEL, prompt="x", max_tokens=100_000)
    assert over.value.body["param"] == "max_tokens"
    with pytest.raises(openai.BadRequestError) as wrong_task:
        client.embeddings.create(model=MODEL, input="x")
    assert wrong_task.value.body["code"] == "wrong_task"
    # each named as the caller sent it
    with pytest.raises(openai.BadRequestError) as not_text:
        client.embeddings.create(model="minilm-embed", input=["a", "b", 5])  # type: ignore[list-item]
    assert not_text.value.body["param"] == "input[2]"
    with pytest.raises(openai.BadRequestError) as newer_name:
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "x"}], max_completion_tokens=100_000
        )
    assert newer_name.value.body["param"] == "max_completion_tokens"
    assert newer_name.value.body["message"].startswith("max_completion_tokens: ")
    # a deadline (x-deadline-ms) bounds the wait as on the native routes: past it, 202
    late = httpx.post(
        f"{platform.url}/openai/v1/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": 8},
        headers={"Authorization": f"Bearer {platform.api_key}", "x-deadline-ms": "1"},
    )
    assert late.status_code == 202 and late.json()["location"].startswith("/v1/requests/")


def test_the_native_generate_streams_tokens_then_how_it_ended(platform, http):
    headers = {"x-api-key": platform.api_key}
    body = {"prompt": PROMPT, "max_tokens": 24, "temperature": 0.7, "seed": 99}
    whole = http.post(f"/v1/models/{MODEL}/generate", json=body, headers=headers)
    assert whole.status_code == 200, whole.text
    answer = whole.json()
    with http.stream(
        "POST", f"/v1/models/{MODEL}/generate", json={**body, "stream": True}, headers=headers
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = sse_events(response)
    tokens = [e["token"] for e in events if "token" in e]
    assert events[-1]["done"] is True
    assert events[-1]["usage"] == answer["usage"]
    assert "".join(tokens) == answer["text"]
    assert len(tokens) > 5

    queued = http.post(f"/v1/models/{MODEL}/generate?async=true", json=body, headers=headers)
    assert queued.status_code == 202

    def finished() -> dict | None:
        status = http.get(queued.headers["Location"], headers=headers).json()
        return status if status["status"] != "queued" else None

    status = wait_for(finished, timeout_s=60, every_s=0.1, what="the async generation's result")
    assert status["outputs"][0]["text"] == answer["text"]  # the same seed, the same text

    refused = http.post(
        f"/v1/models/{MODEL}/generate", json={"prompt": PROMPT, "top_k": 3}, headers=headers
    )
    assert refused.status_code == 422
    assert refused.json()["errors"][0]["field"] == "top_k"
    # an async request's answer is its record, streamed or not: nothing reads a stream
    both = http.post(
        f"/v1/models/{MODEL}/generate?async=true", json={**body, "stream": True}, headers=headers
    )
    assert both.status_code == 202, both.text

    def streamed_finished() -> dict | None:
        status = http.get(both.headers["Location"], headers=headers).json()
        return status if status["status"] != "queued" else None

    status = wait_for(streamed_finished, timeout_s=60, every_s=0.1, what="its result")
    assert status["outputs"][0]["text"] == answer["text"]
    not_generative = http.post(
        "/v1/models/minilm-embed/generate", json={"prompt": PROMPT}, headers=headers
    )
    assert not_generative.status_code == 400


def test_a_worker_killed_mid_stream_leaves_the_callers_text_whole_in_order(platform, http):
    """A slow version (each decode step 80 ms longer) is streamed; after a few
    tokens its worker is SIGKILLed. The request's message comes back after the
    generation visibility (10 s), the new worker continues from the tokens already
    streamed, and the caller's text is the request's result: complete, in order,
    no token twice."""
    headers = {"x-api-key": platform.api_key, "x-model-version": "slow"}
    body = {"prompt": PROMPT, "max_tokens": 120, "temperature": 0.8, "seed": 5, "stream": True}
    pieces: list[str] = []
    with (
        slow_version(platform, "slow"),
        http.stream(
            "POST", f"/v1/models/{MODEL}/generate", json=body, headers=headers, timeout=120
        ) as response,
    ):
        assert response.status_code == 200
        request_id = response.headers["x-request-id"]
        killed = False
        events = []
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            events.append(event)
            if "token" in event:
                pieces.append(event["token"])
            if len(pieces) >= 10 and not killed:
                os.kill(platform.worker_pid(MODEL), signal.SIGKILL)
                killed = True
    assert killed
    assert events[-1].get("done") is True, events[-3:]
    result = http.get(f"/v1/requests/{request_id}", headers={"x-api-key": platform.api_key})
    output = result.json()["outputs"][0]
    assert "".join(pieces) == output["text"]
    assert events[-1]["usage"]["completion_tokens"] == output["usage"]["completion_tokens"] == 120
    resumed = [
        e for e in platform.worker_log_events()
        if e.get("message") == "stream resumed" and e.get("request_id") == request_id
    ]  # fmt: skip
    assert resumed and resumed[0]["tokens"] >= 10


def test_a_stream_is_read_and_cancelled_while_it_runs_and_stops_when_its_caller_leaves(
    platform, http
):
    """A slow version (each decode step 80 ms longer) streams 200 tokens. While it
    runs its request reads queued and DELETE cancels it: the stream ends with the
    cancellation. A second caller who closes its stream half-way cancels it too.
    Either way the worker stops generating it within its next look at the records."""
    headers = {"x-api-key": platform.api_key, "x-model-version": "slow-cancel"}
    body = {"prompt": PROMPT, "max_tokens": 200, "temperature": 0.8, "seed": 5, "stream": True}

    def stopped(request_id: str) -> dict | None:
        return next(
            (e for e in platform.worker_log_events()
             if e.get("message") == "generation stopped: its request ended elsewhere"
             and e.get("request_id") == request_id),
            None,
        )  # fmt: skip

    with slow_version(platform, "slow-cancel"):
        # WHEN its caller cancels it while it streams
        with http.stream(
            "POST", f"/v1/models/{MODEL}/generate", json=body, headers=headers, timeout=120
        ) as response:
            assert response.status_code == 200
            cancelled_id = response.headers["x-request-id"]
            events = []
            for line in response.iter_lines():
                if not line.startswith("data: "):
                    continue
                events.append(json.loads(line[6:]))
                if len(events) == 5:
                    running = http.get(f"/v1/requests/{cancelled_id}", headers=headers)
                    assert running.status_code == 200 and running.json()["status"] == "queued"
                    gone = http.delete(f"/v1/requests/{cancelled_id}", headers=headers)
                    assert gone.status_code == 200 and gone.json()["status"] == "cancelled"
        # THEN its stream ends with the cancellation, not 200 tokens later
        assert events[-1]["error"]["code"] == "cancelled", events[-3:]
        assert len([e for e in events if "token" in e]) < 200
        # WHEN another caller leaves its stream half-way
        with http.stream(
            "POST", f"/v1/models/{MODEL}/generate", json=body, headers=headers, timeout=120
        ) as response:
            left_id = response.headers["x-request-id"]
            for n, _ in enumerate(response.iter_lines()):
                if n == 10:
                    break

        # THEN its request ends cancelled, and the worker stops both generations early
        def ended() -> dict | None:
            record = http.get(f"/v1/requests/{left_id}", headers=headers).json()
            return record if record["status"] != "queued" else None

        assert wait_for(ended, timeout_s=30)["status"] == "cancelled"
        for request_id in (cancelled_id, left_id):
            assert wait_for(lambda rid=request_id: stopped(rid), timeout_s=30)["tokens"] < 200


def test_a_batch_job_of_prompts_gets_one_generation_per_line(platform, http):
    """Generation requests (or bare prompts) as a job's lines ride the batch lane;
    each line's output is its generation, a bad line its error."""
    from tests.e2e.test_jobs_api import output_lines

    headers = {"x-api-key": platform.api_key}
    inputs = [
        {"prompt": PROMPT, "max_tokens": 6, "temperature": 0},
        "Open the file",
        {"prompt": PROMPT, "max_tokens": 100_000},
        {"prompt": "Read", "max_tokens": 5, "seed": 3, "stream": True},
    ]
    response = http.post("/v1/jobs", json={"model": MODEL, "inputs": inputs}, headers=headers)
    assert response.status_code == 202, response.text
    location = response.json()["location"]

    def succeeded() -> dict | None:
        body = http.get(location, headers=headers).json()
        return body if body["status"] == "succeeded" else None

    done = wait_for(succeeded, timeout_s=120)
    lines = output_lines(platform, done["output_uri"])
    assert [line["line"] for line in lines] == [1, 2, 3, 4]
    whole = http.post(f"/v1/models/{MODEL}/generate", json=inputs[0], headers=headers).json()
    assert lines[0]["output"]["text"] == whole["text"]
    assert lines[0]["output"]["usage"]["completion_tokens"] == 6
    assert lines[1]["output"]["usage"]["completion_tokens"] == 16  # the default max_tokens
    assert lines[2]["error"]["code"] == "invalid_input"
    assert lines[2]["error"]["message"].startswith("line 3: max_tokens is 100000; at most")
    assert lines[3]["output"]["usage"]["completion_tokens"] == 5
