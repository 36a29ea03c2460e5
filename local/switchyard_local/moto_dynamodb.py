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

And a transaction costs what it touches. moto's ``transact_write_items`` deep-copies
every table it names before it starts, to roll back on failure: a batch job's chunk
(its result and its job's count, one transaction) copied the whole results table,
so a job of n chunks cost O(n²). Measured with a 1M-line job (3,907 chunks): the
emulator peaked at 13.7 GiB and the job slowed to half its rate. Here the items
the transaction names are saved instead (deep copies of a few items), moto's
table-wide copy is skipped, and on failure those items are put back as they were:
the same all-or-nothing outcome, since no other write runs meanwhile.

And an item's size is counted once as it is built (:func:`_sized_once`), not
again for every attribute added; the same items are refused at the same limit.

And a Query reads its partition, not the table. moto's ``Table.query`` starts from
``all_items()``: every item of every partition, sorted, for each call. A streamed
generation's reader queries its chunks every 10 to 50 ms, in the results table that
holds every request of every tenant: measured with 5,000 results in the table, one
Query took 92 ms against 5 ms on an empty table, growing with every request the
platform answers. Here a Query on a table's own key (no index) starts from its one
partition, already narrowed to the items its sort-key condition matches, in key
order; moto then applies the condition, paging and filters to those as before, so
it answers the same. DynamoDB itself reads a Query's range in key order.
"""

from __future__ import annotations

import copy
import functools
import threading
from collections.abc import Callable
from typing import Any

from switchyard_local.moto_sqs import require_pinned_moto

_WRITES = ("put_item", "update_item", "delete_item", "transact_write_items")
# One write at a time; one may run another (a transaction, a batch), and a write made
# of a read and a put (``moto_statements``) holds it across both.
write_lock = threading.RLock()
_query = threading.local()  # the partition (and range condition) a Query reads
_originals: dict[str, Any] = {}  # method name -> moto's own; empty while not applied
_MOST_ITEM_BYTES = 405_000  # moto's limit of an item's size (LimitedSizeDict)


def apply() -> None:
    """Serialise the DynamoDB backend's writes in this process (idempotent)."""
    if _originals:
        return
    from moto.dynamodb.models import DynamoDBBackend

    require_pinned_moto("switchyard_local.moto_dynamodb wraps {moto}'s DynamoDB writes")
    import moto.dynamodb.models as models

    for name in _WRITES:
        _originals[name] = DynamoDBBackend.__dict__[name]
        write = _originals[name]
        if name == "transact_write_items":
            write = _rolled_back_by_item(write)
        setattr(DynamoDBBackend, name, _one_at_a_time(write))
    _originals["copy"] = models.copy
    models.copy = _NoTableCopies  # type: ignore[assignment]
    from moto.dynamodb.models.table import Table

    _originals["Table.query"] = Table.query
    _originals["Table.all_items"] = Table.all_items
    Table.query = _partition_query(Table.query)  # type: ignore[method-assign]
    Table.all_items = _partition_items(Table.all_items)  # type: ignore[method-assign]
    from moto.dynamodb.models.dynamo_type import Item

    _originals["Item.__init__"] = Item.__init__
    Item.__init__ = _sized_once  # type: ignore[method-assign]


def undo() -> None:
    """Put moto's own methods back (for tests that compare the two)."""
    import moto.dynamodb.models as models
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.models.table import Table

    models.copy = _originals.pop("copy", copy)  # type: ignore[assignment]
    for name in ("query", "all_items"):
        if f"Table.{name}" in _originals:
            setattr(Table, name, _originals.pop(f"Table.{name}"))
    if "Item.__init__" in _originals:
        from moto.dynamodb.models.dynamo_type import Item

        Item.__init__ = _originals.pop("Item.__init__")  # type: ignore[method-assign]
    for name, original in _originals.items():
        setattr(DynamoDBBackend, name, original)
    _originals.clear()


def _partition_query(query: Callable[..., Any]) -> Callable[..., Any]:
    """moto's Query, told (for this thread) which partition and range it reads."""

    @functools.wraps(query)
    def partition_query(
        table: Any, hash_key: Any, range_comparison: Any, range_objs: Any, *args: Any, **kw: Any
    ) -> Any:
        if kw.get("index_name") or hash_key is None or not table.range_key_attr:
            return query(table, hash_key, range_comparison, range_objs, *args, **kw)
        _query.scope = (table, hash_key, range_comparison, range_objs)
        try:
            return query(table, hash_key, range_comparison, range_objs, *args, **kw)
        finally:
            _query.scope = None

    return partition_query


def _partition_items(all_items: Callable[..., Any]) -> Callable[..., Any]:
    """``all_items``, inside a Query on the table's key: that partition's items its
    range condition matches, in key order; everywhere else, moto's own."""

    @functools.wraps(all_items)
    def items(table: Any) -> list[Any]:
        scope = getattr(_query, "scope", None)
        if scope is None or scope[0] is not table:
            return list(all_items(table))
        _, hash_key, comparison, values = scope
        partition = table.items.get(hash_key, {})
        # Its keys, not its (key, item) pairs: a list of the keys makes no new object
        # for each item, which in a partition of thousands would set off the
        # collector's passes over the emulator's whole heap, for most of a Query's time.
        keys = list(partition)
        if comparison == "BETWEEN" and all(v.type == "S" for v in values):
            low, high = values[0].value, values[1].value  # the platform's ranges: plain
            chosen = [key for key in keys if low <= key.value <= high]
        else:
            chosen = [key for key in keys if not comparison or key.compare(comparison, values)]
        found = (partition.get(key) for key in chosen)  # one deleted meanwhile: None
        return sorted((item for item in found if item is not None), key=lambda i: i.range_key)

    return items


def _sized_once(item: Any, hash_key: Any, range_key: Any, attrs: dict[str, Any]) -> None:
    """moto's ``Item.__init__``, its size kept as it goes. moto's item dictionary
    (``LimitedSizeDict``) sums the size of every attribute it holds each time one is
    added, to refuse an item over its limit: n² sizes for an item of n attributes,
    half of a batch of result INSERTs. Here each attribute's size is added to a
    running total, checked against the same limit at the same step (sizes only add
    up), so the same item is refused with the same error; the item is then filled
    without the dictionary's own check."""
    from moto.dynamodb.exceptions import ItemSizeTooLarge
    from moto.dynamodb.models.dynamo_type import DynamoType, LimitedSizeDict
    from moto.dynamodb.models.utilities import bytesize

    item.hash_key = hash_key
    item.range_key = range_key
    typed: dict[str, Any] = {}
    size = 0
    for name, value in attrs.items():
        typed[name] = DynamoType(value)
        size += bytesize(name) + typed[name].size()
        if size > _MOST_ITEM_BYTES:
            raise ItemSizeTooLarge
    item.attrs = LimitedSizeDict(typed)  # filled by dict.update: not checked again


def _one_at_a_time(write: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(write)
    def locked(*args: Any, **kwargs: Any) -> Any:
        with write_lock:
            return write(*args, **kwargs)

    return locked


class _NoTableCopies:
    """``copy`` as moto's DynamoDB backend sees it: a whole table is not copied
    (only ``transact_write_items`` copies tables, to roll back; its items are saved
    by :func:`_rolled_back_by_item` instead); anything else is copied as usual."""

    @staticmethod
    def deepcopy(value: Any, memo: Any = None) -> Any:
        from moto.dynamodb.models.table import Table

        return value if isinstance(value, Table) else copy.deepcopy(value, memo)


def _rolled_back_by_item(transact: Callable[..., Any]) -> Callable[..., Any]:
    """moto's transaction, with the items it names saved first and put back if it
    fails (it runs under the write lock: nothing else writes meanwhile)."""

    @functools.wraps(transact)
    def transact_write_items(backend: Any, transact_items: list[dict[str, Any]]) -> Any:
        saved = []
        for entry in transact_items:
            op = next(iter(entry.values())) if len(entry) == 1 else {}
            table = backend.tables.get(op.get("TableName"))
            if table is None:
                continue
            key = op.get("Key")
            if key is None and "Item" in op:
                names = [table.hash_key_attr, table.range_key_attr]
                key = {n: op["Item"][n] for n in names if n is not None and n in op["Item"]}
            try:
                current = backend.get_item(op["TableName"], key)
            except Exception:  # noqa: BLE001 - moto refuses the transaction itself
                continue
            saved.append((op["TableName"], key, copy.deepcopy(current)))
        try:
            return transact(backend, transact_items)
        except Exception:
            for table_name, key, before in saved:
                if before is None:
                    backend.tables[table_name].delete_item(
                        *backend.get_keys_value(backend.tables[table_name], key)
                    )
                else:
                    backend.tables[table_name].put_item(before.to_json()["Attributes"])
            raise

    return transact_write_items
