"""Batch jobs over the HTTP API on the running local platform: submitted, listed,
shown and cancelled, each tenant seeing only its own."""

from __future__ import annotations

import json
import time

from harness.waiting import wait_for
from switchyard.callbacks import ATTEMPT_HEADER, JOB_HEADER, SIGNATURE_HEADER, verify
from tests.callback_receiver import CallbackReceiver


def auth(platform, tenant: str) -> dict[str, str]:
    return {"x-api-key": platform.keys[tenant]}


def output_lines(platform, uri: str) -> list[dict]:
    bucket, key = uri.removeprefix("s3://").split("/", 1)
    body = platform.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read().decode()
    return [json.loads(line) for line in body.splitlines()]


def test_a_submitted_job_runs_to_its_output_and_only_its_tenant_sees_it(platform, http):
    # GIVEN inputs of which one is not text
    inputs = [f"sentence {i} to embed" for i in range(30)]
    inputs[7] = 7  # type: ignore[call-overload]

    # WHEN acme submits them as a job
    response = http.post(
        "/v1/jobs", json={"model": "minilm-embed", "inputs": inputs}, headers=auth(platform, "acme")
    )

    # THEN it is accepted at once, with where to follow it
    assert response.status_code == 202, response.text
    job = response.json()
    assert response.headers["Location"] == job["location"] == f"/v1/jobs/{job['job_id']}"
    assert job["status"] in ("queued", "running") and job["model"] == "minilm-embed"

    def succeeded() -> dict | None:
        body = http.get(job["location"], headers=auth(platform, "acme")).json()
        return body if body["status"] == "succeeded" else None

    done = wait_for(succeeded, timeout_s=120)
    assert done["counts"] == {"total": 30, "read": 30, "done": 30, "failed": 1, "refused": 1}
    assert done["progress"] == 1.0 and done["timings"]["finished_at"]
    lines = output_lines(platform, done["output_uri"])
    assert [line["line"] for line in lines] == list(range(1, 31))
    assert lines[7]["error"]["code"] == "invalid_input"
    assert all(len(line["output"]) == 384 for i, line in enumerate(lines) if i != 7)

    # AND acme lists it, newest first; globex neither lists nor reads it
    listed = http.get("/v1/jobs", params={"limit": 100}, headers=auth(platform, "acme")).json()
    assert job["job_id"] in [j["job_id"] for j in listed["jobs"]]
    created = [j["timings"]["created_at"] for j in listed["jobs"]]
    assert created == sorted(created, reverse=True)
    other = http.get("/v1/jobs", params={"limit": 100}, headers=auth(platform, "globex")).json()
    assert job["job_id"] not in [j["job_id"] for j in other["jobs"]]
    assert http.get(job["location"], headers=auth(platform, "globex")).status_code == 404
    assert http.delete(job["location"], headers=auth(platform, "globex")).status_code == 404

    # AND an ended job cannot be cancelled: it stays as it is
    late = http.delete(job["location"], headers=auth(platform, "acme"))
    assert late.status_code == 409 and late.json()["status"] == "succeeded"


def test_a_file_already_in_the_drop_bucket_is_the_same_job_again(platform, http):
    # GIVEN a file acme dropped, which made its job
    bucket = platform.info["names"]["batch_drop_bucket"]
    key = "acme/minilm-embed/weekly.jsonl"
    body = "\n".join(json.dumps(f"weekly line {i}") for i in range(12)).encode()
    platform.client("s3").put_object(Bucket=bucket, Key=key, Body=body)
    uri = f"s3://{bucket}/{key}"

    def listed() -> list:
        jobs = http.get("/v1/jobs", params={"limit": 100}, headers=auth(platform, "acme")).json()
        return [j for j in jobs["jobs"] if j["source"] == uri and j["status"] == "succeeded"]

    (dropped,) = wait_for(listed)
    # WHEN it is submitted by its URI THEN that is the same job, not a second run
    again = http.post(
        "/v1/jobs", json={"model": "minilm-embed", "input_uri": uri}, headers=auth(platform, "acme")
    )
    assert again.status_code == 200 and again.json()["job_id"] == dropped["job_id"]


def test_bad_submissions_are_refused_and_make_no_job(platform, http):
    bucket = platform.info["names"]["batch_drop_bucket"]
    before = http.get("/v1/jobs", params={"limit": 100}, headers=auth(platform, "globex")).json()
    cases = [
        ({"model": "minilm-embed"}, 422, "invalid_request"),
        ({"model": "minilm-embed", "inputs": ["a"], "input_uri": "s3://x/y.jsonl"}, 422, None),
        ({"model": "minilm-embed", "inputs": []}, 422, None),
        ({"model": "no-such-model", "inputs": ["a"]}, 404, "unknown_model"),
        ({"model": "minilm-embed", "inputs": ["a"], "callback": "x"}, 422, None),
        # another tenant's prefix, and a file that is not there
        ({"model": "minilm-embed", "input_uri": f"s3://{bucket}/acme/minilm-embed/a.jsonl"},
         404, "no_such_file"),
        (b"{not json", 400, "malformed_json"),
        ({"model": "minilm-embed", "input_uri": f"s3://{bucket}/globex/minilm-embed/none.jsonl"},
         404, "no_such_file"),
        # no job runs from a file elsewhere: a mistake in the field
        ({"model": "minilm-embed", "input_uri": "https://example.com/x.jsonl"}, 422, None),
    ]  # fmt: skip
    for body, status, code in cases:
        response = (
            http.post("/v1/jobs", content=body, headers=auth(platform, "globex"))
            if isinstance(body, bytes)
            else http.post("/v1/jobs", json=body, headers=auth(platform, "globex"))
        )
        assert response.status_code == status, (body, response.text)
        if code:
            assert response.json()["code"] == code
        assert response.json()["message"]
    assert http.get("/v1/jobs/" + "x" * 65, headers=auth(platform, "globex")).status_code == 422
    for params in ({"limit": 0}, {"after": "garbage"}):
        refused = http.get("/v1/jobs", params=params, headers=auth(platform, "globex"))
        assert refused.status_code == 422 and refused.json()["errors"][0]["field"] in params
    time.sleep(1)
    after = http.get("/v1/jobs", params={"limit": 100}, headers=auth(platform, "globex")).json()
    assert after["jobs"] == before["jobs"]


def test_a_cancelled_job_stops_and_writes_no_output(platform, http):
    # GIVEN a job larger than the workers answer at once, to be called back
    receiver = CallbackReceiver()
    inputs = [f"line {i} of a long job" for i in range(3000)]
    submitted = http.post(
        "/v1/jobs",
        json={"model": "minilm-embed", "inputs": inputs, "callback_url": receiver.url},
        headers=auth(platform, "globex"),
    ).json()

    # WHEN it is cancelled while it runs (a chunk answered: the split has begun)
    wait_for(
        lambda: (
            http.get(submitted["location"], headers=auth(platform, "globex")).json()["status"]
            == "running"
        )
    )
    cancelled = http.delete(submitted["location"], headers=auth(platform, "globex"))

    # THEN it ends cancelled, stays so, and no output is written
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["status"] == "cancelled"
    time.sleep(8)  # chunks already queued are answered as cancelled, not run
    job = http.get(submitted["location"], headers=auth(platform, "globex")).json()
    assert job["status"] == "cancelled" and job["output_uri"] is None
    # (its chunks not yet run were answered as cancelled: their lines, all valid, count
    # as failed, not as outputs)
    assert job["counts"]["failed"] > 0
    # AND its callback says so, once, signed with globex's secret
    wait_for(lambda: receiver.deliveries, timeout_s=60)
    receiver.close()
    (delivery,) = receiver.deliveries
    assert verify(
        webhook_secret(platform, "globex"), delivery.body, delivery.headers[SIGNATURE_HEADER]
    )
    assert json.loads(delivery.body)["status"] == "cancelled"


def test_the_cli_submits_watches_lists_and_fetches_a_job(platform, tmp_path):
    from tests.e2e.test_rollouts import cli

    # GIVEN a data team's file on disk, one line of which is not text
    source = tmp_path / "cli-export.jsonl"
    lines = [json.dumps(f"cli line {i}") for i in range(40)]
    lines[3] = "[3]"
    source.write_text("\n".join(lines) + "\n")

    # WHEN it is submitted with --wait
    submitted = cli(platform, "jobs", "submit", str(source), "--model", "minilm-embed", "--wait")

    # THEN it is uploaded under the tenant's prefix, followed to its end, and succeeds
    job_id = submitted.stdout.split()[1]
    assert "succeeded; 40 lines, 1 with an error" in submitted.stdout
    assert "40/40 lines answered (1 with an error) · succeeded" in submitted.stdout
    shown = json.loads(cli(platform, "jobs", "show", job_id).stdout)
    assert shown["status"] == "succeeded"
    assert shown["source"].endswith(
        f"/{platform.info['default_tenant']}/minilm-embed/cli-export.jsonl"
    )
    listed = cli(platform, "jobs", "list", "--limit", "100").stdout
    assert job_id in listed and "succeeded" in listed
    # AND its output comes back as a file: one line per input line, in order
    out = tmp_path / "out.jsonl"
    cli(platform, "jobs", "fetch", job_id, "-o", str(out))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["line"] for r in rows] == list(range(1, 41)) and "error" in rows[3]
    # AND an ended job cannot be cancelled, nor an unknown one shown
    late = cli(platform, "jobs", "cancel", job_id, ok=False)
    assert late.returncode == 2 and "already ended" in late.stderr
    unknown = cli(platform, "jobs", "show", "no-such-job", ok=False)
    assert unknown.returncode == 2 and "no job no-such-job" in unknown.stderr


def webhook_secret(platform, tenant: str) -> str:
    """The tenant's webhook secret, as the operator hands it over."""
    from tests.e2e.test_rollouts import cli

    return cli(platform, "jobs", "secret", "--tenant", tenant).stdout.strip()


def test_an_ended_job_calls_back_signed_and_retries_a_refusal(platform, http):
    # GIVEN a receiver that refuses the first delivery, and the tenant's secret
    receiver = CallbackReceiver(refuse=1)
    secret = webhook_secret(platform, "acme")

    # WHEN a job with a callback_url ends
    job = http.post(
        "/v1/jobs",
        json={"model": "minilm-embed", "inputs": ["one", "two"], "callback_url": receiver.url},
        headers=auth(platform, "acme"),
    ).json()
    wait_for(lambda: len(receiver.deliveries) >= 2, timeout_s=120)
    receiver.close()

    # THEN its summary was POSTed, signed with the tenant's secret, and tried again
    # after the refusal with the same body
    first, second = receiver.deliveries
    assert second.body == first.body
    assert [d.headers[ATTEMPT_HEADER] for d in receiver.deliveries] == ["1", "2"]
    assert verify(secret, second.body, second.headers[SIGNATURE_HEADER])
    assert not verify("another tenant's secret", second.body, second.headers[SIGNATURE_HEADER])
    summary = json.loads(second.body)
    assert summary["job_id"] == job["job_id"] and summary["status"] == "succeeded"
    assert summary["output_uri"].endswith(".jsonl.out")
    assert second.headers[JOB_HEADER] == job["job_id"]
    # AND the job says what each try got
    shown = http.get(job["location"], headers=auth(platform, "acme")).json()
    assert shown["callback"] == ["503", "200"]
