"""An ended job's callback: asked for on the batch-drop queue by whoever ends the
job, delivered by the splitter to a real HTTP receiver, signed with the tenant's
webhook secret from Secrets Manager, and tried again with SQS's delay until it is
taken or the tries run out. Against the emulator over its wire protocol."""

from __future__ import annotations

import json

import pytest

from switchyard.callbacks import ATTEMPT_HEADER, JOB_ENDED, SIGNATURE_HEADER, JobEvents, verify
from switchyard.jobs import JobStore, job_for_file
from switchyard.registry import DynamoDBRegistry
from switchyard.settings import SplitterSettings
from switchyard.wiring import build_adapters
from switchyard_batch.splitter import handle_message, splitter_of
from tests.callback_receiver import CallbackReceiver

MODEL = "digits-cnn"


def forever() -> int:
    return 900_000


@pytest.fixture
def rig(manifest, provisioned, clients):
    names = manifest.names("dev")
    registry = DynamoDBRegistry(clients("dynamodb"), names.registry_table)
    registry.register(manifest.models[MODEL].version_record(MODEL, "v1", "s3://x/y", "0" * 64))
    splitter = splitter_of(build_adapters(SplitterSettings(**provisioned.splitter_values(None))))
    splitter.callback_delays = (1, 1)  # three tries in all, a second apart
    sqs = clients("sqs")
    s3 = clients("s3")
    secrets = clients("secretsmanager")

    class Rig:
        jobs = JobStore(clients("dynamodb"), names.jobs_table)
        delivering = splitter
        events = JobEvents.on_queue(sqs, provisioned.drop_queue)

        @staticmethod
        def secret(tenant: str) -> str:
            name = f"{names.webhook_secret_prefix}{tenant}"
            return secrets.get_secret_value(SecretId=name)["SecretString"]

        @staticmethod
        def ended_job(url: str, tenant: str = "acme"):
            """A job whose every line is refused: the split ends it at once."""
            key = f"{tenant}/{MODEL}/refused.jsonl"
            bucket = names.batch_drop_bucket
            s3.put_object(Bucket=bucket, Key=key, Body=b"not json\n[1, 2]\n")
            job = job_for_file(s3, registry, manifest.models, bucket, key, 3600, None)
            Rig.jobs.create(job.model_copy(update={"callback_url": url}))
            event = {"Records": [{"s3": {"bucket": {"name": bucket}, "object": {"key": key}}}]}
            (ended,) = handle_message(event, splitter, forever)
            return ended

        @staticmethod
        def run_callbacks(wait_s: int = 3) -> int:
            """Hand the queue's *job ended* messages to the splitter, as its event
            source mapping does, until none comes within ``wait_s``; how many."""
            handled = 0
            while True:
                got = sqs.receive_message(
                    QueueUrl=provisioned.drop_queue, MaxNumberOfMessages=10, WaitTimeSeconds=wait_s
                ).get("Messages", [])
                bodies = [json.loads(m["Body"]) for m in got]
                for m in got:
                    sqs.delete_message(
                        QueueUrl=provisioned.drop_queue, ReceiptHandle=m["ReceiptHandle"]
                    )
                ended = [b for b in bodies if JOB_ENDED in b]
                if not got:
                    return handled
                for body in ended:
                    handle_message(body, splitter, forever)
                handled += len(ended)

    sqs.purge_queue(QueueUrl=provisioned.drop_queue)
    return Rig


def test_a_refused_callback_is_tried_again_after_a_delay_until_it_is_taken(rig):
    # GIVEN a receiver that refuses the first two deliveries
    with CallbackReceiver(refuse=2) as receiver:
        # WHEN a job with its URL ends, and the queue's messages reach the splitter
        job = rig.ended_job(receiver.url)
        handled = rig.run_callbacks()

    # THEN it was delivered three times, the same signed summary each time
    assert job.status == "succeeded" and handled == 3
    bodies = {d.body for d in receiver.deliveries}
    assert len(bodies) == 1
    (body,) = bodies
    summary = json.loads(body)
    assert summary["job_id"] == job.job_id and summary["status"] == "succeeded"
    assert summary["counts"]["failed"] == 2
    for delivery in receiver.deliveries:
        assert verify(rig.secret("acme"), body, delivery.headers[SIGNATURE_HEADER])
        assert not verify(rig.secret("globex"), body, delivery.headers[SIGNATURE_HEADER])
    assert [d.headers[ATTEMPT_HEADER] for d in receiver.deliveries] == ["1", "2", "3"]
    # AND the job records what each try got
    assert rig.jobs.get("acme", job.job_id).callback == ["503", "503", "200"]


def test_a_receiver_that_never_answers_gets_a_bounded_number_of_tries(rig):
    # GIVEN a URL where nothing listens
    receiver = CallbackReceiver()
    url = receiver.url
    receiver.close()

    # WHEN a job with that URL ends
    job = rig.ended_job(url)
    handled = rig.run_callbacks()

    # THEN it is tried as often as the delays allow, and no more
    assert handled == 3
    tries = rig.jobs.get("acme", job.job_id).callback
    assert len(tries) == 3 and all("Error" in t for t in tries)


def test_a_cancel_calls_back_once_and_a_job_without_a_url_never(rig):
    with CallbackReceiver() as receiver:
        # GIVEN a running job with a callback_url, and an ended one without
        base = rig.ended_job(receiver.url)
        rig.run_callbacks()
        receiver.deliveries.clear()
        running = base.model_copy(
            update={
                "job_id": "running",
                "status": "queued",
                "split_done": False,
                "callback": None,
                "assembling_at": None,
                "finished_at": None,
                "output_uri": None,
            }
        )
        rig.jobs.create(running)

        # WHEN the running one is cancelled twice (as the jobs API and CLI do), and
        # the ended one announced
        for _ in range(2):
            job, ended = rig.jobs.cancel("acme", "running")
            if ended:
                rig.events.ended(job)
        rig.events.ended(base.model_copy(update={"callback_url": None}))
        handled = rig.run_callbacks()

    # THEN only the cancel is delivered, once
    assert handled == 1
    (delivery,) = receiver.deliveries
    summary = json.loads(delivery.body)
    assert (summary["job_id"], summary["status"]) == ("running", "cancelled")


def test_in_aws_a_callback_reaches_public_addresses_only(rig):
    # GIVEN the splitter as deployed (not the local platform's, which allows
    # loopback) and a receiver on loopback, named by address and by name
    rig.delivering.callbacks_to_private_addresses = False
    with CallbackReceiver() as receiver:
        by_name = receiver.url.replace("127.0.0.1", "localhost")
        # WHEN jobs calling back there end
        jobs = [rig.ended_job(receiver.url), rig.ended_job(by_name, tenant="globex")]
        rig.run_callbacks()

    # THEN nothing was posted: each try failed at the connection, and said why
    assert receiver.deliveries == []
    for job in jobs:
        tries = rig.jobs.get(job.tenant, job.job_id).callback
        assert len(tries) == 3
        assert all(t.endswith("is not a public address>") for t in tries), tries
