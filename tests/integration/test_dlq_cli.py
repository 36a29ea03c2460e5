"""`switchyard dlq list` and `switchyard dlq redrive` against real SQS wire behaviour:
messages reach the DLQ the way SQS moves them (received past maxReceiveCount), or
are sent there directly (an undecodable one); the CLI runs as an operator runs it,
from the local platform's ``platform.json``."""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest

from switchyard.schemas import RETRIES_EXHAUSTED, ErrorInfo, QueueMessage, ResultRecord
from switchyard.settings import Settings
from switchyard.wiring import build_adapters

MODEL = "digits-cnn"


@pytest.fixture
def results(provisioned):
    return build_adapters(Settings(**provisioned.settings_values())).results


def message(rid: str, tenant: str = "acme", version: str = "v1", lane: str = "realtime") -> str:
    now = time.time()
    return QueueMessage(
        request_id=rid,
        tenant=tenant,
        model=MODEL,
        version=version,
        lane=lane,
        inputs=[[1] * 64],
        n_inputs=1,
        enqueued_at=now,
        expires_at=now + 600,
    ).model_dump_json(exclude_none=True)


def admit(results, rid: str, tenant: str = "acme", version: str = "v1") -> None:
    """The router's record of an accepted request."""
    now = time.time()
    results.put_queued(
        ResultRecord(
            request_id=rid,
            tenant=tenant,
            model=MODEL,
            version=version,
            status="queued",
            created_at=now,
            expires_at=int(now) + 3600,
            work_expires_at=now + 600,
        )
    )


def exhaust(results, rid: str, tenant: str = "acme", reason: str = "boom") -> None:
    """What a worker writes on a request's last allowed receive."""
    record = results.get(tenant, rid)
    error = ErrorInfo(code=RETRIES_EXHAUSTED, message=f"failed after 3 attempts: {reason}")
    assert results.complete(record.model_copy(update={"status": "error", "error": error}))


def dead_letter(sqs, provisioned, bodies: list[tuple[str, str]], lane: str = "realtime") -> None:
    """Send (body, tenant) pairs to the work queue and receive them until SQS has
    moved every one to the DLQ (on the receive after maxReceiveCount)."""
    queue = provisioned.queues[MODEL][lane]
    for body, tenant in bodies:
        sqs.send_message(QueueUrl=queue, MessageBody=body, MessageGroupId=tenant)
    deadline = time.monotonic() + 30
    while depth(sqs, provisioned.dlqs[MODEL][lane]) < len(bodies):
        assert time.monotonic() < deadline, "SQS never moved the messages to the DLQ"
        sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, VisibilityTimeout=0)
    assert depth(sqs, queue) == 0


def depth(sqs, url: str, *, hidden: bool = False) -> int:
    name = "ApproximateNumberOfMessagesNotVisible" if hidden else "ApproximateNumberOfMessages"
    return int(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=[name])["Attributes"][name])


def drain(sqs, url: str) -> list[tuple[str, str | None]]:
    """Every (body, MessageGroupId) in a queue, deleted as read."""
    out = []
    while True:
        got = sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=10,
            MessageSystemAttributeNames=["MessageGroupId"],
        ).get("Messages", [])
        if not got:
            return out
        for m in got:
            out.append((m["Body"], m.get("Attributes", {}).get("MessageGroupId")))
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])


def test_list_shows_each_message_with_its_request_and_last_error_and_moves_nothing(
    cli, results, clients, provisioned, manifest
):
    # GIVEN two requests whose every attempt failed (moved to the DLQ by SQS), one
    # on each lane, one request still queued with a failed attempt on record, and an
    # undecodable message sent straight to the realtime DLQ
    sqs = clients("sqs")
    for rid, tenant in (("exhausted", "acme"), ("still-queued", "globex"), ("batch-one", "acme")):
        admit(results, rid, tenant)
    exhaust(results, "exhausted", reason="RuntimeError: injected fault")
    exhaust(results, "batch-one", reason="RuntimeError: batch fault\n  in forward, layer 3")
    results.mark_failed(
        results.get("globex", "still-queued").model_copy(update={"version": "v2"}),
        "CUDA out of memory",
    )
    dead_letter(
        sqs,
        provisioned,
        [(message("exhausted"), "acme"), (message("still-queued", "globex", "v2"), "globex")],
    )
    dead_letter(sqs, provisioned, [(message("batch-one", lane="batch"), "acme")], lane="batch")
    realtime_dlq = provisioned.dlqs[MODEL]["realtime"]
    sqs.send_message(QueueUrl=realtime_dlq, MessageBody="{not json", MessageGroupId="initech")

    # WHEN an operator lists the model's DLQs
    code, out, _ = cli("dlq", "list", MODEL, "--json")

    # THEN each message shows its lane, request, tenant, version, the work queue's
    # receives and the request's last error
    assert code == 0
    rows = {row["request_id"]: row for row in json.loads(out)}
    assert set(rows) == {"exhausted", "still-queued", "batch-one", None}
    exhausted = rows["exhausted"]
    assert (exhausted["lane"], exhausted["tenant"], exhausted["version"]) == (
        "realtime",
        "acme",
        "v1",
    )
    assert exhausted["receives"] == manifest.platform.max_receive_count
    assert exhausted["status"] == "error"
    assert exhausted["last_error"] == "failed after 3 attempts: RuntimeError: injected fault"
    assert exhausted["enqueued_at"] <= time.time()
    queued = rows["still-queued"]
    assert (queued["tenant"], queued["version"], queued["status"]) == ("globex", "v2", "queued")
    assert queued["last_error"] == "v2: CUDA out of memory"
    assert rows["batch-one"]["lane"] == "batch"
    assert rows["batch-one"]["last_error"] == (
        "failed after 3 attempts: RuntimeError: batch fault\n  in forward, layer 3"
    )
    undecodable = rows[None]
    assert undecodable["tenant"] == "initech" and undecodable["receives"] == 0
    assert undecodable["last_error"].startswith("undecodable: not JSON")
    # ... and every message is still in its DLQ, visible again at once
    assert depth(sqs, realtime_dlq) == 3 and depth(sqs, realtime_dlq, hidden=True) == 0
    assert depth(sqs, provisioned.dlqs[MODEL]["batch"]) == 1

    # WHEN the operator lists one lane as a table
    code, out, _ = cli("dlq", "list", MODEL, "--lane", "batch")

    # THEN only that lane's message is shown, readably: a row a message (its error's
    # first line; the rest is in --json)
    assert code == 0
    assert "batch-one" in out and "failed after 3 attempts: RuntimeError: batch fault …" in out
    assert "layer 3" not in out and len(out.splitlines()) == 3
    assert "exhausted" not in out and "still-queued" not in out
    assert "1 message(s) in the DLQ" in out


def test_redrive_moves_every_message_back_once_and_reopens_exhausted_requests(
    cli, results, clients, provisioned
):
    # GIVEN more dead letters than one receive returns: 23 exhausted requests of two
    # tenants, and one whose request was answered by other means meanwhile
    sqs = clients("sqs")
    ids = [f"req-{i:02d}" for i in range(23)]
    tenants = {rid: ("acme", "globex")[i % 2] for i, rid in enumerate(ids)}
    for rid in ids:
        admit(results, rid, tenants[rid])
        exhaust(results, rid, tenants[rid])
    admit(results, "answered")
    done = results.get("acme", "answered").model_copy(update={"status": "done", "outputs": [1]})
    assert results.complete(done)
    sent = [(message(rid, tenants[rid]), tenants[rid]) for rid in ids]
    sent.append((message("answered"), "acme"))
    dead_letter(sqs, provisioned, sent)
    code, out, _ = cli("dlq", "list", MODEL, "--json")
    assert code == 0 and len(json.loads(out)) == 24  # every page of the DLQ is read

    # WHEN an operator redrives the model's DLQs
    code, out, _ = cli("dlq", "redrive", MODEL, "--json")

    # THEN every message went back to its work queue once, with its tenant as group
    assert code == 0
    report = json.loads(out)
    assert report["realtime"]["moved"] == 24 and report["batch"]["moved"] == 0
    assert report["realtime"]["reopened"] == 23 and report["realtime"]["came_back"] == 0
    dlq = provisioned.dlqs[MODEL]["realtime"]
    assert depth(sqs, dlq) == 0 and depth(sqs, dlq, hidden=True) == 0
    assert Counter(drain(sqs, provisioned.queues[MODEL]["realtime"])) == Counter(sent)
    # ... the exhausted requests are queued again for a worker to answer, with their
    # failures forgotten; the answered one keeps its answer
    for rid in ids:
        record = results.get(tenants[rid], rid)
        assert record.status == "queued" and record.error is None and record.failures == 0
    assert results.get("acme", "answered").status == "done"


def test_purge_deletes_what_will_never_succeed_and_every_request_stays_ended(
    cli, results, clients, provisioned
):
    # GIVEN an exhausted request, one whose worker died before writing its error
    # (still queued), and an undecodable message, all in the realtime DLQ
    sqs = clients("sqs")
    admit(results, "hopeless")
    exhaust(results, "hopeless", reason="RuntimeError: the version cannot load")
    admit(results, "orphaned", "globex")
    dead_letter(sqs, provisioned, [(message("hopeless"), "acme"),
                                   (message("orphaned", "globex"), "globex")])  # fmt: skip
    dlq = provisioned.dlqs[MODEL]["realtime"]
    sqs.send_message(QueueUrl=dlq, MessageBody="{not json", MessageGroupId="initech")

    # WHEN an operator purges the model's DLQs
    code, out, _ = cli("dlq", "purge", MODEL)

    # THEN every message is gone, nothing went back to work, and each request has ended
    assert code == 0
    assert out.splitlines() == [
        f"{MODEL} realtime: deleted 3 message(s) from the DLQ",
        f"{MODEL} batch: deleted 0 message(s) from the DLQ",
    ]
    assert depth(sqs, dlq) == 0 and depth(sqs, dlq, hidden=True) == 0
    assert drain(sqs, provisioned.queues[MODEL]["realtime"]) == []
    kept = results.get("acme", "hopeless")
    assert kept.status == "error" and kept.error.message.endswith("the version cannot load")
    ended = results.get("globex", "orphaned")
    assert ended.status == "error" and ended.error.code == "purged"


def test_an_empty_dlq_is_listed_and_redriven_as_empty(cli, provisioned):
    code, out, _ = cli("dlq", "list", MODEL)
    assert code == 0 and out.strip() == f"{MODEL}: the DLQs are empty"
    code, out, _ = cli("dlq", "list", MODEL, "--lane", "realtime", "--json")
    assert code == 0 and json.loads(out) == []
    code, out, _ = cli("dlq", "redrive", MODEL)
    assert code == 0
    assert out.splitlines() == [
        f"{MODEL} realtime: moved 0 message(s) back to the work queue, 0 request(s) reopened",
        f"{MODEL} batch: moved 0 message(s) back to the work queue, 0 request(s) reopened",
    ]


def test_an_unknown_model_is_refused_with_exit_code_2(cli, provisioned):
    for command in ("list", "redrive"):
        code, _, err = cli("dlq", command, "no-such-model")
        assert code == 2
        assert "unknown model 'no-such-model'" in err and MODEL in err


def test_with_aws_the_commands_find_the_deployed_stacks_queues_by_name(
    cli, results, clients, provisioned, emulator_url, monkeypatch
):
    # GIVEN a dead letter in the dev stage's realtime DLQ, and "AWS" reached through
    # boto3's own endpoint setting (the emulator answers as AWS would): no
    # platform.json is read, the queue URLs are built from the stack's names
    sqs = clients("sqs")
    admit(results, "exhausted")
    exhaust(results, "exhausted", reason="RuntimeError: injected fault")
    dead_letter(sqs, provisioned, [(message("exhausted"), "acme")])
    monkeypatch.setenv("AWS_ENDPOINT_URL", emulator_url)

    # WHEN an operator lists and redrives the model's DLQs of the deployed stage
    code, out, _ = cli(
        "--aws", "--stage", "dev", "--region", "us-east-1", "dlq", "list", MODEL, "--json"
    )
    assert code == 0
    rows = json.loads(out)
    code, out, _ = cli(
        "--aws", "--stage", "dev", "--region", "us-east-1", "dlq", "redrive", MODEL, "--json"
    )

    # THEN the listing shows the request and its last error, and the redrive moved
    # it back and reopened it
    assert [(r["request_id"], r["tenant"], r["lane"]) for r in rows] == [
        ("exhausted", "acme", "realtime")
    ]
    assert rows[0]["last_error"] == "failed after 3 attempts: RuntimeError: injected fault"
    assert code == 0 and json.loads(out)["realtime"]["moved"] == 1
    assert depth(sqs, provisioned.dlqs[MODEL]["realtime"]) == 0
    back = drain(sqs, provisioned.queues[MODEL]["realtime"])
    assert [json.loads(body)["request_id"] for body, _ in back] == ["exhausted"]
    assert results.get("acme", "exhausted").status == "queued"
