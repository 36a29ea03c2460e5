"""Idempotency keys claimed in the results table (DynamoDBKeyStore), on the
emulator: one claim wins a race between routers, another body is refused, a key
is its tenant's own, and its item is no request to a tenant's reads."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from switchyard.idempotency import (
    DynamoDBKeyStore,
    IdempotencyKeys,
    KeyReused,
    KeyUse,
    fingerprint,
)
from switchyard.results import DynamoDBResultStore

NOW = float(int(time.time()))  # (the emulator removes items whose TTL has passed)
BODY = fingerprint("predict digits-cnn", {"inputs": [[0] * 64]})
OTHER = fingerprint("predict digits-cnn", {"inputs": [[1] * 64]})


@pytest.fixture
def routers(manifest, provisioned, clients):
    """Two routers' keys on one table, as two Lambda instances would have them."""
    table = manifest.names("dev").results_table

    def router() -> IdempotencyKeys:
        return IdempotencyKeys(DynamoDBKeyStore(clients("dynamodb"), table))

    return router(), router(), table


def use(request_id: str, tenant: str = "acme", body: str = BODY, ttl: int = 3_600) -> KeyUse:
    return KeyUse(tenant, "order-7", body, request_id, int(NOW) + ttl, answer=f"a-{request_id}")


def test_one_claim_wins_a_race_and_the_others_replay_it(routers):
    # GIVEN 10 requests with one key at once, over two routers
    first, second, _ = routers

    def claim(i: int) -> str:
        held = (first if i % 2 else second).claim(use(f"r{i}"), NOW)
        return f"r{i}" if held is None else held.request_id

    with ThreadPoolExecutor(8) as pool:
        answered = list(pool.map(claim, range(10)))
    # THEN one claimed it, and every other answers with its request
    assert len(set(answered)) == 1
    winner = answered[0]
    found = second.earlier("acme", "order-7", BODY, NOW)
    assert found is not None and found.request_id == winner and found.answer == f"a-{winner}"


def test_another_body_is_refused_and_another_tenant_is_independent(routers):
    first, second, _ = routers
    assert first.claim(use("r1"), NOW) is None
    with pytest.raises(KeyReused, match="order-7"):
        second.claim(use("r2", body=OTHER), NOW)
    with pytest.raises(KeyReused):
        second.earlier("acme", "order-7", OTHER, NOW)
    assert second.claim(use("r3", tenant="globex", body=OTHER), NOW) is None


def test_a_key_past_its_ttl_or_given_back_is_claimed_anew(routers):
    first, second, _ = routers
    assert first.claim(use("r1", ttl=10), NOW) is None
    assert second.claim(use("r2"), NOW + 11) is None  # its TTL passed: the item is stale
    second.release(use("r1"))  # no longer r1's to give back: no change
    assert first.earlier("acme", "order-7", BODY, NOW + 12).request_id == "r2"
    second.release(use("r2"))
    assert first.earlier("acme", "order-7", BODY, NOW + 12) is None
    assert first.claim(use("r3", body=OTHER), NOW + 12) is None


def test_a_keys_item_is_no_request(routers, clients):
    first, _, table = routers
    first.claim(use("r1"), NOW)
    results = DynamoDBResultStore(clients("dynamodb"), table, payloads=None, inline_bytes=1)  # type: ignore[arg-type]
    assert results.get("acme", "idem#order-7") is None
