"""The batch splitter as Lambda runs it, invoked with the S3 event AWS sends when a
file is dropped; the workers answer the work it enqueues."""

from __future__ import annotations

import json

from switchyard_local.deployed import LambdaProcess, Launcher
from tests.deploy.lambda_events import s3_event

from .conftest import deployed_roots, wait_for


def test_the_cold_start_imports_the_platform_from_the_asset_and_layer_only(
    splitter: LambdaProcess, launcher: Launcher
) -> None:
    task, layer = deployed_roots(launcher, "splitter")
    assert "switchyard_batch.splitter" in splitter.modules
    for name, file in splitter.modules.items():
        root = task if name.startswith("switchyard_batch") or name == "handler" else layer
        assert file.startswith(f"{root}/"), f"{name} was imported from {file}"
    assert not any(n.startswith("switchyard_local") for n in splitter.modules)
    assert not {"torch", "fastapi"} & set(splitter.top_level)


def test_a_dropped_file_becomes_a_job_whose_lines_the_workers_answer(
    splitter: LambdaProcess, platform, adapters
) -> None:
    # GIVEN a data team's file in the drop bucket (a name S3 URL-encodes in events)
    names = platform.provisioned.names
    key = "acme/minilm-embed/nightly run.jsonl"
    lines = [json.dumps(f"sentence number {i}") for i in range(70)] + ["", '"   "']
    adapters.client("s3").put_object(
        Bucket=names.batch_drop_bucket, Key=key, Body="\n".join(lines).encode()
    )
    # WHEN S3's event reaches the function
    summary = splitter.invoke(s3_event(names.batch_drop_bucket, key))

    # THEN one job holds the valid lines, in chunks of the model's request size
    (job,) = summary["jobs"]
    assert job["inputs"] == 70 and job["rejected"] == 1 and job["chunks"] == 2
    stored = adapters.client("dynamodb").get_item(
        TableName=names.jobs_table,
        Key={"tenant": {"S": "acme"}, "job_id": {"S": job["job_id"]}},
    )["Item"]
    request_ids = json.loads(stored["doc"]["S"])["request_ids"]
    assert len(request_ids) == 2

    # and the workers answer every chunk on the batch lane
    def answered() -> list:
        records = [adapters.results.get("acme", rid) for rid in request_ids]
        return records if all(r and r.status == "done" for r in records) else []

    records = wait_for(answered)
    assert sum(len(r.outputs or []) for r in records) == 70
    assert {r.lane for r in records} == {"batch"}
