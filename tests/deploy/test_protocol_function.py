"""Binary tensors through the router function as Lambda runs it: API Gateway passes
an ``application/octet-stream`` body base64-encoded (the REST API's binary media
type), and the function answers raw outputs base64-encoded, which API Gateway turns
back into bytes for a caller that accepts them."""

from __future__ import annotations

import base64
import json
import struct

from switchyard_local.deployed import LambdaProcess

from .conftest import MODEL, rest_event

INFER = f"/v2/models/{MODEL}/infer"
SENTENCES = ["a sentence sent as bytes", "and a second one"]


def bytes_tensor(texts: list[str]) -> bytes:
    """BYTES elements as the protocol sends them: each one's length, then itself."""
    return b"".join(struct.pack("<I", len(t.encode())) + t.encode() for t in texts)


def test_binary_tensors_in_and_out_through_the_function(router: LambdaProcess, platform) -> None:
    # GIVEN an infer whose input follows its JSON header as raw bytes, and which asks
    # for its output as raw bytes, in the event API Gateway makes of it
    raw = bytes_tensor(SENTENCES)
    header = json.dumps(
        {
            "inputs": [
                {"name": "text", "datatype": "BYTES", "shape": [len(SENTENCES)],
                 "parameters": {"binary_data_size": len(raw)}}
            ],
            "parameters": {"binary_data_output": True},
        }
    ).encode()  # fmt: skip
    event = rest_event(platform, "POST", INFER)
    event["body"] = base64.b64encode(header + raw).decode()
    event["isBase64Encoded"] = True
    sent = {
        "content-type": "application/octet-stream",
        "accept": "application/octet-stream",
        "inference-header-content-length": str(len(header)),
    }
    event["headers"].update(sent)
    event["multiValueHeaders"].update({k: [v] for k, v in sent.items()})
    # WHEN the function answers it
    response = router.invoke(event)
    # THEN the answer is base64 for API Gateway to decode: the JSON header, then each
    # sentence's embedding as little-endian float32
    assert response["statusCode"] == 200, response.get("body")
    assert response["isBase64Encoded"] is True
    body = base64.b64decode(response["body"])
    headers = {k.lower(): v for k, v in response["headers"].items()}
    assert headers["content-type"] == "application/octet-stream"
    size = int(headers["inference-header-content-length"])
    (output,) = json.loads(body[:size])["outputs"]
    assert output["name"] == "embedding" and output["shape"] == [2, 384]
    assert output["parameters"]["binary_data_size"] == 2 * 384 * 4 == len(body) - size
    vectors = struct.unpack(f"<{2 * 384}f", body[size:])
    assert all(abs(v) < 10 for v in vectors) and any(v != 0 for v in vectors)
