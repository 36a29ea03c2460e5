"""DynamoDB in the local emulator: a conditional write is one step, as in DynamoDB.

DynamoDB checks a write's condition and applies the write atomically: of two
writers of one item under ``status = queued``, one wins and the other gets
``ConditionalCheckFailedException``. The platform relies on it wherever a request
ends (a worker's result, a caller's cancel, an expiry, a redrive's reopen), so that
every request ends exactly once.

moto 5.2.5's server is threaded, and its table reads the item, evaluates the
condition and then writes (``moto/dynamodb/models/table.py``, ``Table.put_item``;
``update_item`` and ``delete_item`` alike) with nothing held in between. Two
writers of one item can both see the condition hold and both write, the last one
winning. Measured on the local platform: in a 30-minute soak, one request of 10,800
was answered ``cancelled`` to its DELETE and ``done`` afterwards, a worker's result
having overwritten the cancel.

What :func:`apply` changes, where the local platform starts the emulator
(``switchyard_local.emulator``): the backend's writes (PutItem, UpdateItem,
DeleteItem, TransactWriteItems, and BatchWriteItem through them) run one at a time
under one lock per emulator process. Reads do not take it. What moto answers is
unchanged; only two writes no longer interleave. ``tests/unit/test_moto_dynamodb.py``
widens the window between check and write and shows the difference.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from switchyard_local.moto_sqs import PINNED_MOTO, UnsupportedMoto

_WRITES = ("put_item", "update_item", "delete_item", "transact_write_items")
_lock = threading.RLock()  # one write may run another (a transaction, a batch)
_originals: dict[str, Any] = {}  # method name -> moto's own; empty while not applied


def apply() -> None:
    """Serialise the DynamoDB backend's writes in this process (idempotent)."""
    if _originals:
        return
    from importlib import metadata

    from moto.dynamodb.models import DynamoDBBackend

    version = metadata.version("moto")
    if version != PINNED_MOTO:
        raise UnsupportedMoto(
            f"switchyard_local.moto_dynamodb wraps moto {PINNED_MOTO}'s DynamoDB writes; "
            f"moto {version} is installed (requirements.txt pins it)"
        )
    for name in _WRITES:
        _originals[name] = DynamoDBBackend.__dict__[name]
        setattr(DynamoDBBackend, name, _one_at_a_time(_originals[name]))


def undo() -> None:
    """Put moto's own methods back (for tests that compare the two)."""
    from moto.dynamodb.models import DynamoDBBackend

    for name, original in _originals.items():
        setattr(DynamoDBBackend, name, original)
    _originals.clear()


def _one_at_a_time(write: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(write)
    def locked(*args: Any, **kwargs: Any) -> Any:
        with _lock:
            return write(*args, **kwargs)

    return locked
