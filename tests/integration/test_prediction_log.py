"""The prediction log over the emulator's Firehose: a batch's lines in one record."""

from __future__ import annotations

import gzip
import json
import time

import msgspec

from switchyard.schemas import ResultRecord
from switchyard.telemetry import FirehosePredictionLog, prediction_records


def _result(i: int, now: float) -> ResultRecord:
    return ResultRecord(
        request_id=f"r-{i}", tenant="acme", model="digits-cnn", version="v1", status="done",
        outputs=[{"class": i % 10}], created_at=now, completed_at=now, expires_at=int(now) + 60,
        timings={"compute_ms": 1.5, "queue_wait_ms": 3.25},
    )  # fmt: skip


def test_a_batch_of_predictions_is_one_firehose_record_and_one_line_each_in_s3(
    clients, provisioned
):
    # GIVEN the prediction-log stream, and the calls its client makes
    firehose, s3 = clients("firehose"), clients("s3")
    names = provisioned.names
    sent: list[int] = []
    firehose.meta.events.register(
        "provide-client-params.firehose.PutRecordBatch",
        lambda params, **_: sent.append(len(params["Records"])),
    )
    # WHEN a batch of 16 answers is logged
    now = time.time()
    logged = prediction_records([_result(i, now) for i in range(16)])
    FirehosePredictionLog(firehose, names.prediction_log_stream).write(logged)
    # THEN one call carried one record, and S3 holds one JSON line per prediction
    assert sent == [1]
    listed = s3.list_objects_v2(Bucket=names.prediction_logs_bucket)["Contents"]
    [key] = [o["Key"] for o in listed]
    body = s3.get_object(Bucket=names.prediction_logs_bucket, Key=key)["Body"].read()
    text = (gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body).decode()
    assert text.endswith("\n")
    assert [json.loads(line) for line in text.splitlines()] == msgspec.to_builtins(logged)
