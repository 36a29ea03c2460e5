"""The router's HTTP contract, on in-memory stores (the e2e tier repeats the key
cases against the real platform)."""

from __future__ import annotations

import json
import time

import jsonschema
import pytest
from fastapi.testclient import TestClient

from harness.fakes import (
    FakePayloads,
    FakeQueue,
    FakeResults,
    answered,
    version_record,
)
from harness.router_app import predict_service, router_client
from switchyard.bodies import predict_body_for, request_schema
from switchyard.queues import ModelLanes
from switchyard.schemas import FORBIDDEN, UNAUTHORIZED, ErrorInfo, QueueMessage, ResultRecord

KEYS = {"k-acme": "acme", "k-globex": "globex"}
IMAGE = [0] * 64


class InstantQueue(FakeQueue):
    """Answers every message at once, as a worker would, when ``answer`` is set."""

    def __init__(self, results: FakeResults, answer: bool) -> None:
        super().__init__("realtime")
        self.results = results
        self.answer = answer

    def send(self, body: str, group: str) -> None:
        super().send(body, group)
        if self.answer:
            m = QueueMessage.model_validate_json(body)
            self.results.complete(
                answered(m, {"class": 0}, received_at=time.time(), compute_ms=1.0)
            )


@pytest.fixture
def world(digits_v1, digits_v2):
    results = FakeResults()
    queue = InstantQueue(results, answer=True)
    payloads = FakePayloads()
    lanes = {"digits-cnn": ModelLanes(realtime=queue, batch=FakeQueue("batch"))}
    service = predict_service(lanes, digits_v1, digits_v2, results=results, payloads=payloads)
    return router_client(service, KEYS), queue, results, payloads


def post(client, body, key="k-acme", model="digits-cnn", **headers):
    data = body if isinstance(body, str | bytes) else json.dumps(body)
    hdrs = {"content-type": "application/json", **headers}
    if key:
        hdrs["x-api-key"] = key
    return client.post(f"/v1/models/{model}/predict", content=data, headers=hdrs)


def test_predict_returns_outputs_version_and_timings(world):
    client, queue, _, _ = world
    response = post(client, {"inputs": [IMAGE, IMAGE]})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["version"] == "v2"  # the newest active version, with no routing document
    assert response.headers["x-model-version"] == "v2"
    assert len(body["outputs"]) == 2
    assert {"router_ms", "enqueue_ms", "compute_ms", "total_ms"} <= set(body["timings"])
    message = json.loads(queue.visible[0]["body"])
    assert message["tenant"] == "acme" and queue.visible[0]["group"] == "acme"


@pytest.mark.parametrize(
    ("key", "answer"), [(None, UNAUTHORIZED), ("", UNAUTHORIZED), ("wrong", FORBIDDEN)]
)
def test_missing_or_unknown_keys_are_refused(world, key, answer):
    client, queue, _, _ = world
    for response in (
        post(client, {"inputs": [IMAGE]}, key=key),
        client.get("/v1/models", headers={} if key is None else {"x-api-key": key}),
    ):
        assert response.status_code == answer.status
        assert response.json() == answer.body()
    assert queue.visible == []


@pytest.mark.parametrize(
    "context",
    [None, {"requestContext": {}}, {"requestContext": {"identity": {"apiKeyId": "id-nobody"}}}],
)
def test_the_router_itself_refuses_a_request_without_a_known_verified_key(world, context):
    # GIVEN the router app reached without API Gateway's verified key id (or an id
    # of no tenant): a key value alone is not trusted
    gateway_client, queue, _, _ = world
    router = gateway_client.app.app
    extra = {"aws.event": context} if context is not None else {}

    async def without_gateway(scope, receive, send):
        await router({**scope, **extra} if scope["type"] == "http" else scope, receive, send)

    # WHEN a call arrives with a key value that API Gateway would accept
    client = TestClient(without_gateway)
    response = post(client, {"inputs": [IMAGE]}, key="k-acme")
    # THEN it is forbidden and nothing is enqueued
    assert response.status_code == 403 and response.json()["code"] == "forbidden"
    assert queue.visible == []


def test_unknown_model_is_404(world):
    client, _, _, _ = world
    response = post(client, {"inputs": [IMAGE]}, model="nope")
    assert response.status_code == 404
    assert "nope" in response.json()["message"]


def test_a_path_of_the_openai_api_that_does_not_exist_is_an_unknown_url(world):
    client, queue, _, _ = world
    for method, path in (("POST", "/openai/v1/responses"), ("GET", "/openai/v1/foo")):
        response = client.request(method, path, headers={"Authorization": "Bearer k-acme"})
        error = response.json()["error"]
        # no model is named, so it is not model_not_found
        assert response.status_code == 404 and error["code"] == "unknown_url"
        assert error["message"] == f"Invalid URL ({method} {path})"
        assert error["type"] == "invalid_request_error"
    assert queue.visible == []


@pytest.mark.parametrize("encoding", [{}, "", 0, "float32"])
def test_an_embeddings_encoding_other_than_float_or_base64_is_refused(world, encoding):
    client, queue, _, _ = world
    response = client.post(
        "/openai/v1/embeddings",
        json={"model": "digits-cnn", "input": "x", "encoding_format": encoding},
        headers={"Authorization": "Bearer k-acme"},
    )
    # ({} and "" were read as no encoding: float)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "encoding_format"
    assert queue.visible == []


@pytest.mark.parametrize("path", ["completions", "chat/completions", "embeddings"])
@pytest.mark.parametrize("deadline", ["-5", "0", "abc", "28001"])
def test_the_openai_api_takes_a_deadline_as_predict_does_and_refuses_a_bad_one(
    world, path, deadline
):
    client, queue, _, _ = world
    response = client.post(
        f"/openai/v1/{path}",
        json={"model": "digits-cnn"},
        headers={"Authorization": "Bearer k-acme", "x-deadline-ms": deadline},
    )
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "x-deadline-ms"
    assert queue.visible == []


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ("{not json", 400, "body"),
        # The json module raised RecursionError on it.
        pytest.param("[" * 5000 + "]" * 5000, 400, "body", id="nested-5000-deep"),
        # A lone surrogate: no UTF-8 text holds it, so its error could not be written.
        pytest.param('{"\\ud800": 1, "inputs": [[0]]}', 400, "body", id="lone-surrogate"),
        ("[1, 2]", 422, "body"),
        ({"input": [IMAGE]}, 422, "inputs"),
        ({"inputs": [IMAGE], "extra": 1}, 422, "extra"),
        ({"inputs": "x"}, 422, "inputs"),
        ({"inputs": [[0] * 63]}, 422, "inputs[0]"),
        ({"inputs": [[0] * 63 + ["a"]]}, 422, "inputs[0][63]"),
        ({"inputs": [[0] * 63 + [99]]}, 422, "inputs[0][63]"),
        ({"inputs": [[0] * 63 + [10**400]]}, 422, "inputs[0][63]"),  # no float holds it
        ({"inputs": [IMAGE] * 257}, 422, "inputs"),
        ({"inputs": [IMAGE] * 500}, 400, "body"),  # over the 60 kB body limit
    ],
)
def test_bad_input_names_the_field_and_enqueues_nothing(world, body, status, field):
    client, queue, results, _ = world
    response = post(client, body)
    assert response.status_code == status, response.text
    assert field in [e["field"] for e in response.json()["errors"]]
    assert queue.visible == [] and results.items == {}


def test_a_bad_deadline_header_is_refused(world):
    client, queue, _, _ = world
    response = post(client, {"inputs": [IMAGE]}, **{"x-deadline-ms": "soon"})
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "x-deadline-ms"
    assert queue.visible == []


def test_deadline_passing_gives_202_with_a_location(world):
    client, queue, results, _ = world
    queue.answer = False
    response = post(client, {"inputs": [IMAGE]}, **{"x-deadline-ms": "30"})
    assert response.status_code == 202
    location = response.headers["location"]
    assert location == f"/v1/requests/{response.json()['request_id']}"
    status = client.get(location, headers={"x-api-key": "k-acme"})
    assert status.json()["status"] == "queued"


def test_a_sync_request_answered_in_time_has_one_write_the_result(world):
    client, queue, results, _ = world
    written: list[str] = []
    put_queued = results.put_queued
    results.put_queued = lambda record: written.append(record.request_id) or put_queued(record)
    response = post(client, {"inputs": [IMAGE]})
    assert response.status_code == 200
    assert written == []  # no queued record: the worker's result is its only write
    assert results.get("acme", response.json()["request_id"]).status == "done"


def test_a_result_stored_as_the_request_is_handed_off_is_the_answer(world):
    # GIVEN a worker that stores the result just as the router gives up waiting
    client, queue, results, _ = world
    queue.answer = False
    put_queued = results.put_queued

    def racing_worker(record):
        results.complete(record.model_copy(update={"status": "done", "outputs": [{"class": 7}]}))
        return put_queued(record)

    results.put_queued = racing_worker
    # WHEN its deadline passes, THEN the caller gets the result, not a 202
    response = post(client, {"inputs": [IMAGE]}, **{"x-deadline-ms": "30"})
    assert response.status_code == 200 and response.json()["outputs"] == [{"class": 7}]


def test_async_returns_at_once_and_results_are_private_to_the_tenant(world):
    client, queue, _, _ = world
    response = client.post(
        "/v1/models/digits-cnn/predict?async=true",
        json={"inputs": [IMAGE]},
        headers={"x-api-key": "k-acme"},
    )
    assert response.status_code == 202
    location = response.headers["location"]
    mine = client.get(location, headers={"x-api-key": "k-acme"})
    assert mine.status_code == 200 and mine.json()["status"] == "done"
    theirs = client.get(location, headers={"x-api-key": "k-globex"})
    assert theirs.status_code == 404


def test_models_lists_versions_from_the_registry(world):
    client, _, _, _ = world
    models = client.get("/v1/models", headers={"x-api-key": "k-acme"}).json()["models"]
    assert models[0]["model"] == "digits-cnn"
    assert [v["version"] for v in models[0]["versions"]] == ["v1", "v2"]


def test_openapi_documents_each_models_own_predict_body(world, digits_v1):
    # GIVEN a router of digits-cnn, whose versions take 64 numbers from 0 to 16
    client, _, _, _ = world
    # WHEN its document is read
    spec = client.get("/openapi.json").json()
    # THEN its predict is a path of its own, whose body is the model's own request
    assert "/v1/models/{model}/predict" not in spec["paths"]
    body = spec["paths"]["/v1/models/digits-cnn/predict"]["post"]["requestBody"]
    schema = body["content"]["application/json"]["schema"]
    own = predict_body_for("digits-cnn", (digits_v1.signature,), 256)
    assert schema == request_schema(own)
    assert schema["properties"]["inputs"]["items"] == {
        "type": "array",
        "minItems": 64,
        "maxItems": 64,
        "items": {"type": "number", "minimum": 0, "maximum": 16},
    }
    # AND its example is such a request
    (example,) = body["content"]["application/json"]["examples"].values()
    jsonschema.validate(example["value"], schema)
    assert client.get("/docs").status_code == 200


@pytest.mark.parametrize("method", ["TRACE", "PATCH", "PUT", "HEAD"])
@pytest.mark.parametrize(
    ("path", "allowed"),
    [
        ("/healthz", {"GET"}),
        ("/v1/models", {"GET"}),
        ("/v1/models/digits-cnn/predict", {"POST"}),
        ("/v1/requests/abc", {"GET", "DELETE"}),
    ],
)
def test_a_method_the_path_does_not_take_is_405_with_allow(world, method, path, allowed):
    client, queue, _, _ = world
    # WHEN a path gets a method none of its routes takes, through the gateway
    response = client.request(method, path, headers={"x-api-key": "k-acme"})
    # THEN it is 405, Allow names every method of every route on the path, and the
    # body (where there is one) is the platform's error
    assert response.status_code == 405
    assert set(response.headers["allow"].split(", ")) == allowed
    assert method == "HEAD" or response.json()["code"] == "http_error"
    assert queue.visible == []


# What a route that creates work and waits for it may answer.
WAITING_STATUSES = {"200", "202", "400", "404", "409", "413", "422", "504"}
EXPECTED_STATUSES = {
    ("get", "/healthz"): {"200"},
    ("get", "/v1/models"): {"200"},
    **{
        ("post", f"/v1/models/{model}/predict"): WAITING_STATUSES
        for model in ("digits-cnn", "minilm-embed", "pydoc-gpt")
    },
    ("get", "/v1/requests/{request_id}"): {"200", "404", "422"},
    ("delete", "/v1/requests/{request_id}"): {"200", "404", "409", "422"},
    ("post", "/v1/models/pydoc-gpt/generate"): WAITING_STATUSES,
    ("get", "/openai/v1/models"): {"200"},
    ("get", "/openai/v1/models/{model}"): {"200", "404"},
    ("post", "/openai/v1/completions"): {"200", "202", "400", "404", "409", "504"},
    ("post", "/openai/v1/chat/completions"): {"200", "202", "400", "404", "409", "504"},
    ("post", "/openai/v1/embeddings"): {"200", "202", "400", "404", "409", "504"},
    **{("get", path): {"200"} for path in ("/v2", "/v2/health/live", "/v2/health/ready")},
    **{
        ("get", f"/v2/models/{{model}}{version}{ready}"): {"200", "400", "404"}
        for version in ("", "/versions/{version}")
        for ready in ("", "/ready")
    },
    **{
        ("post", f"/v2/models/{{model}}{version}/infer"): WAITING_STATUSES - {"422"}
        for version in ("", "/versions/{version}")
    },  # fmt: skip
}


def test_the_document_lists_every_status_of_every_route(every_model):
    client, _ = every_model
    paths = client.get("/openapi.json").json()["paths"]
    operations = {(m, p): op for p, methods in paths.items() for m, op in methods.items()}
    assert set(operations) == set(EXPECTED_STATUSES)
    for key, operation in operations.items():
        # THEN each route lists its own answers, the gateway's and the platform's
        common = {"401", "403", "405", "429", "500"}
        assert set(operation["responses"]) == EXPECTED_STATUSES[key] | common, key
        allow = operation["responses"]["405"]["headers"]["Allow"]
        assert allow["required"] is True
        if key[1].startswith(("/v1/", "/v2")):
            assert operation["security"] == [{"apiKey": []}]
        # AND no header or query parameter is documented as JSON null
        for parameter in operation.get("parameters", []):
            assert "anyOf" not in parameter["schema"], (key, parameter["name"])


def _conforms(spec: dict, method: str, path: str, response) -> None:
    """The answer's status is documented for the route and its body matches."""
    documented = spec["paths"][path][method]["responses"]
    assert str(response.status_code) in documented, (path, response.status_code)
    schema = documented[str(response.status_code)]["content"]["application/json"]["schema"]
    jsonschema.validate(response.json(), {**schema, "components": spec["components"]})


def test_answers_match_their_documented_schemas(world):
    client, queue, _, _ = world
    spec = client.get("/openapi.json").json()
    key = {"x-api-key": "k-acme"}
    status, predict = "/v1/requests/{request_id}", "/v1/models/digits-cnn/predict"
    done = post(client, {"inputs": [IMAGE]})
    _conforms(spec, "post", predict, done)
    location = done.headers["x-request-id"]
    for method, path, response in [
        ("get", status, client.get(f"/v1/requests/{location}", headers=key)),
        ("delete", status, client.delete(f"/v1/requests/{location}", headers=key)),
        ("get", status, client.get("/v1/requests/nope", headers=key)),
        ("get", status, client.get(f"/v1/requests/{'x' * 65}", headers=key)),
        ("get", "/v1/models", client.get("/v1/models", headers=key)),
        ("get", "/v1/models", client.get("/v1/models")),
        ("get", "/healthz", client.get("/healthz")),
        ("post", predict, post(client, "{not json")),
        ("post", predict, post(client, {"inputs": [[0] * 63]})),
        ("post", predict, post(client, {"inputs": [IMAGE]}, model="nope")),
        ("post", predict, post(client, {"inputs": [IMAGE], "params": {"version": "v9"}})),
    ]:
        _conforms(spec, method, path, response)
    queue.answer = False
    queued = post(client, {"inputs": [IMAGE]}, **{"x-deadline-ms": "1"})
    _conforms(spec, "post", predict, queued)
    cancelled = client.delete(queued.headers["location"], headers=key)
    assert cancelled.json()["status"] == "cancelled"
    _conforms(spec, "delete", status, cancelled)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"inputs": [IMAGE], "params": None}, "params"),
        ({"inputs": [IMAGE], "params": {"version": None}}, "params.version"),
    ],
)
def test_a_null_where_the_body_schema_wants_a_value_is_refused(world, body, field):
    client, queue, _, _ = world
    response = post(client, body)
    assert response.status_code == 422, response.text
    assert [e["field"] for e in response.json()["errors"]] == [field]
    assert queue.visible == []


def test_a_content_length_of_other_digits_is_read_as_no_length():
    # "²" is a digit to str.isdigit and not to int(): reading the body raised ValueError
    import asyncio

    from starlette.requests import Request

    from switchyard_router.bodies import read_body

    async def receive():
        return {"type": "http.request", "body": b"{}", "more_body": False}

    scope = {"type": "http", "method": "POST", "headers": [(b"content-length", b"\xb2")]}
    assert asyncio.run(read_body(Request(scope, receive), 100)) == b"{}"


def unanswered(*versions):
    """A router over ``versions``' models, with no worker: nothing is answered."""
    results = FakeResults()
    lanes = {
        v.model: ModelLanes(realtime=FakeQueue("realtime"), batch=FakeQueue("batch"))
        for v in versions
    }
    return router_client(predict_service(lanes, *versions, results=results), KEYS), lanes, results


@pytest.fixture
def text_world():
    """A generative model and an embedding model, no worker: nothing is answered."""
    return unanswered(version_record("pydoc-gpt"), version_record("minilm-embed"))


@pytest.fixture
def every_model(digits_v1, digits_v2):
    """Every model of the manifest, no worker."""
    client, lanes, _ = unanswered(
        digits_v1, digits_v2, version_record("pydoc-gpt"), version_record("minilm-embed")
    )
    return client, lanes


@pytest.mark.parametrize(
    ("path", "body", "status", "field"),
    [
        # the platform's own generate: the fields as sent, not as the signature's input
        ("/v1/models/pydoc-gpt/generate", {"prompt": "x", "top_k": 3}, 422, "top_k"),
        ("/v1/models/pydoc-gpt/generate", {"prompt": "x", "temperature": "hot"}, 422,
         "temperature"),
        ("/v1/models/pydoc-gpt/generate", {"prompt": "x" * 9000}, 422, "prompt"),
        # at most 4 stop sequences, as on the OpenAI route (5 were taken)
        ("/v1/models/pydoc-gpt/generate", {"prompt": "x", "stop": list("abcde")}, 422, "stop"),
        ("/v1/models/pydoc-gpt/generate", {"max_tokens": 4}, 422, "prompt"),
        # OpenAI: dimensions is checked before the model runs (it ran, then failed)
        ("/openai/v1/embeddings", {"model": "minilm-embed", "input": "x", "dimensions": "a"},
         400, "dimensions"),
        ("/openai/v1/embeddings", {"model": "minilm-embed", "input": "x", "dimensions": 0},
         400, "dimensions"),
        # an input the signature refuses is named as sent: input[1], not inputs[1]
        ("/openai/v1/embeddings", {"model": "minilm-embed", "input": ["a", " "]}, 400,
         "input[1]"),
        # a content part's text must be a string (it was taken as "", "None" or {...})
        ("/openai/v1/chat/completions",
         {"model": "pydoc-gpt", "messages": [{"role": "user", "content": [{"type": "text"}]}]},
         400, "messages[0].content[0].text"),
        ("/openai/v1/chat/completions",
         {"model": "pydoc-gpt",
          "messages": [{"role": "user", "content": [{"type": "text", "text": None}]}]},
         400, "messages[0].content[0].text"),
        ("/openai/v1/chat/completions",
         {"model": "pydoc-gpt", "messages": [{"role": "user", "content": ["hi"]}]},
         400, "messages[0].content[0]"),
        # a chat's prompt is its messages, rendered
        ("/openai/v1/chat/completions",
         {"model": "pydoc-gpt", "messages": [{"role": "user", "content": "x" * 9000}]},
         400, "messages"),
        # a neutral value of another JSON type: true is no n of 1, 0 no logprobs of false
        ("/openai/v1/completions", {"model": "pydoc-gpt", "prompt": "x", "n": True}, 400, "n"),
        ("/openai/v1/completions", {"model": "pydoc-gpt", "prompt": "x", "logprobs": 0}, 400,
         "logprobs"),
        ("/openai/v1/completions", {"model": "pydoc-gpt", "prompt": "x", "echo": 0}, 400,
         "echo"),
    ],
)  # fmt: skip
def test_generation_and_embedding_mistakes_name_the_field_as_sent(
    text_world, path, body, status, field
):
    client, lanes, results = text_world
    response = client.post(path, json=body, headers={"x-api-key": "k-acme"})
    assert response.status_code == status, response.text
    answer = response.json()
    if path.startswith("/openai"):
        assert answer["error"]["param"] == field
    else:
        assert [e["field"] for e in answer["errors"]] == [field]
        if status == 422:
            assert (
                answer["message"] == "the request does not match pydoc-gpt's generation signature"
            )
    assert all(lane.visible == [] for m in lanes.values() for lane in (m.realtime, m.batch))
    assert results.items == {}


class EndingWorkers(FakeQueue):
    """Ends every request it is sent as ``status`` (with ``code``), as a worker would."""

    def __init__(self, results: FakeResults, status: str, code: str | None) -> None:
        super().__init__("realtime")
        self.results, self.status, self.code = results, status, code

    def send(self, body: str, group: str) -> None:
        super().send(body, group)
        m = QueueMessage.model_validate_json(body)
        self.results.complete(
            ResultRecord(
                request_id=m.request_id,
                tenant=m.tenant,
                model=m.model,
                version=m.version,
                status=self.status,
                error=ErrorInfo(code=self.code, message=f"it ended {self.code}")
                if self.code
                else None,
                created_at=m.enqueued_at,
                completed_at=time.time(),
                expires_at=int(m.expires_at),
            )
        )


# Every route that waits for a request's outcome, with a request its model takes.
WAITING_ROUTES = [
    ("/v1/models/digits-cnn/predict", {"inputs": [IMAGE]}),
    ("/v1/models/pydoc-gpt/generate", {"prompt": "Return the"}),
    ("/openai/v1/completions", {"model": "pydoc-gpt", "prompt": "Return the"}),
    (
        "/openai/v1/chat/completions",
        {"model": "pydoc-gpt", "messages": [{"role": "user", "content": "Hi"}]},
    ),
    ("/openai/v1/embeddings", {"model": "minilm-embed", "input": "a sentence"}),
]


@pytest.mark.parametrize(
    ("status", "code", "answered"),
    [
        ("expired", "expired", 504),
        ("cancelled", None, 409),
        ("error", "model_failed", 500),
        ("error", "invalid_input", 422),  # the OpenAI API's 400
    ],
)
def test_an_outcome_is_answered_with_one_status_on_every_route(digits_v1, status, code, answered):
    # GIVEN workers that end every request the same way
    results = FakeResults()
    versions = [digits_v1, version_record("pydoc-gpt"), version_record("minilm-embed")]
    lanes = {
        v.model: ModelLanes(realtime=EndingWorkers(results, status, code), batch=FakeQueue("batch"))
        for v in versions
    }
    client = router_client(predict_service(lanes, *versions, results=results), KEYS)
    spec = client.get("/openapi.json").json()
    for path, body in WAITING_ROUTES:
        # WHEN a request on each route ends so
        response = client.post(path, json=body, headers={"x-api-key": "k-acme"})
        # THEN each answers it with the same status and code, as its document says
        openai = path.startswith("/openai/")
        expected = 400 if openai and answered == 422 else answered
        assert response.status_code == expected, (path, response.text)
        answer = response.json()
        assert (answer["error"]["code"] if openai else answer["code"]) == (code or status), path
        _conforms(spec, "post", path, response)
