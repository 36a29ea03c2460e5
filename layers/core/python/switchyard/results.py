"""The results table: async status and results, scoped to the tenant that asked.

A result is written once. The router records an async or batch request as
``queued`` before it enqueues it (a sync request only if it is handed off at its
deadline: one write fewer on the common path); a worker may turn ``queued``, or no
record, into ``done`` or ``error`` and nothing else, with a conditional write. A
redelivered message whose result is already stored therefore changes nothing, and
its message is simply deleted.

A queued record the router counted in its tenant's queued work says so
(``queued_counted``, an attribute of its own). A final result written over it says
whether it replaced a counted record (:class:`Stored`), so that whoever stored it
gives the place back: a sync request handed off at its deadline is counted from
then, which its message cannot say.
"""

from __future__ import annotations

import contextlib
import json
import struct
import sys
import uuid
from array import array
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from enum import IntEnum
from functools import lru_cache, partial
from itertools import accumulate, chain
from operator import itemgetter
from typing import Any, Protocol

from switchyard.aws_json import all_answered, calls_at_once
from switchyard.jsontext import json_bytes, written_once
from switchyard.payloads import PayloadStore, json_array
from switchyard.schemas import RETRIES_EXHAUSTED, ErrorInfo, ResultRecord
from switchyard.tables import RESULTS

_BATCH_GET_LIMIT = 100  # keys per BatchGetItem
_BATCH_STATEMENT_LIMIT = 25  # statements per BatchExecuteStatement
_QUEUED = {"S": "queued"}
_COUNTED = "queued_counted"
# The attribute that holds packed embeddings (:func:`pack_rows`), and the one that
# held them as float32 before.
PACKED = "outputs_e7"
_PACKED_FLOAT32 = "outputs_f32"
# Attributes an item holds only while queued (a failed attempt's count, its place
# counted) or only once final (its outputs, its error's code, its cost).
_FINAL_ONLY_OR_QUEUED_ONLY = (
    "failures", "last_failure", _COUNTED, "error_code", "outputs", PACKED, _PACKED_FLOAT32,
    "outputs_ref", "outputs_range", "cost",
)  # fmt: skip
_TTL = RESULTS.ttl_attribute or "expires_at"
# A result item's own attributes (keys, status, model, version, TTL, failures,
# outputs, cost), left out of its ``doc``.
_NOT_IN_DOC = {
    "request_id",
    "tenant",
    "model",
    "version",
    "status",
    "expires_at",
    "outputs",
    "failures",
    "last_failure",
    _COUNTED,
    "cost",
}


class Stored(IntEnum):
    """How a final result's write went: true when it was stored, so that a caller
    that asks no more tests it as a bool. ``OVER_COUNTED``: stored over a queued
    record that says its request was counted in its tenant's queued work
    (``ResultRecord.queued_counted``), whose place the writer gives back."""

    REFUSED = 0  # a final result was there already
    STORED = 1
    OVER_COUNTED = 2

    @property
    def over_counted(self) -> bool:
        return self is Stored.OVER_COUNTED


# Outputs as an item holds them: the attribute's name and value, or the JSON text of
# outputs too large to hold inline (for S3).
StoredForm = tuple[str, dict[str, Any]] | bytes


@dataclass(frozen=True)
class AsStored:
    """A batch's records as their items would hold them, worked out before they are
    stored: each one's outputs (:func:`stored_outputs_each` of those it has, None
    for one without), for items that hold at most ``limit`` bytes inline, and each
    one's ``doc`` (:func:`result_docs`). The worker works them out once, to price
    its answers by their size (``switchyard.costs.price_answers``), and the store
    writes them as they are rather than write them again: a result is written as
    JSON once. A doc holds no cost (an item holds its cost apart), so pricing the
    records after their docs were written leaves the docs as they are."""

    limit: int
    each: Sequence[StoredForm | None]
    docs: Sequence[str]

    def part(self, indexes: Sequence[int]) -> AsStored:
        return AsStored(
            self.limit, [self.each[i] for i in indexes], [self.docs[i] for i in indexes]
        )


def as_stored(records: Sequence[ResultRecord], limit: int) -> AsStored:
    """:class:`AsStored` of ``records``."""
    return AsStored(limit, _outputs_as_stored(records, limit), result_docs(list(records)))


def _outputs_as_stored(records: Sequence[ResultRecord], limit: int) -> list[StoredForm | None]:
    each: list[StoredForm | None] = [None] * len(records)
    having = [i for i, record in enumerate(records) if record.outputs is not None]
    forms = stored_outputs_each([records[i].outputs for i in having], limit)  # type: ignore[misc]
    for i, form in zip(having, forms, strict=True):
        each[i] = form
    return each


class ResultStore(Protocol):
    def put_queued(self, record: ResultRecord) -> bool:
        """Record a request as queued; False if it has a record already (a sync
        request handed off after its worker stored the result)."""
        ...

    def complete(self, record: ResultRecord, also: dict[str, Any] | None = None) -> Stored:
        """Store a final result; REFUSED if one was stored already (a redelivery),
        OVER_COUNTED if it replaced a counted queued record (never with ``also``:
        a job's chunk is not counted). ``also``: one more write (a DynamoDB
        transaction item) made with the result, or not at all."""
        ...

    def complete_batch(
        self, records: list[ResultRecord], new: list[bool], outputs: AsStored | None = None
    ) -> list[Stored]:
        """Store a batch's final results, many to a call, the calls made together.
        Those ``new`` (sync requests' results, most likely with no record yet: one is
        recorded only if handed off at its deadline) are inserted; the others (async
        requests', most likely over a queued record) are written over it. One that
        finds otherwise is stored as :meth:`complete` stores it. What :meth:`complete`
        would return, for each (a sync request handed off at its deadline is
        OVER_COUNTED where its tenant's queued work counted it), except that one
        written over its queued record is STORED whether that was counted or not (the
        write cannot tell): an async request's message says whether it was counted.
        ``outputs``: the records' outputs as their items hold them, where the caller
        worked them out already (used if worked out for this store's inline limit)."""
        ...

    def get(self, tenant: str, request_id: str) -> ResultRecord | None: ...

    def get_many(self, keys: list[tuple[str, str]]) -> dict[tuple[str, str], ResultRecord]:
        """The record of each (tenant, request id) that has one, read together
        (BatchGetItem, up to 100 keys a call)."""
        ...

    def mark_failed(self, queued: ResultRecord, reason: str) -> None:
        """Count a failed attempt on a request that has no result yet. ``queued`` is
        its queued record, written with the failure if there is none yet."""
        ...

    def statuses(self, keys: list[tuple[str, str]]) -> dict[tuple[str, str], str]:
        """The status of each (tenant, request id) that has a record, in one read."""
        ...

    def cancel(self, tenant: str, request_id: str, at: float) -> ResultRecord | None:
        """Cancel a request that is still queued. The record as it stands after:
        cancelled, or the final result it already had; None if there is none."""
        ...

    def expire(self, record: ResultRecord, at: float) -> ResultRecord:
        """Answer a queued request whose work expired; the record as it stands after
        (a result stored first stays)."""
        ...

    def reopen(self, tenant: str, request_id: str) -> bool:
        """Back to queued, for a request that ended with ``retries_exhausted`` and
        whose message is redriven from its DLQ; False for any other record."""
        ...


class DynamoDBResultStore:
    def __init__(
        self, dynamodb: Any, table: str, payloads: PayloadStore, inline_bytes: int
    ) -> None:
        """Outputs of more than ``inline_bytes`` (as stored) go to S3 under a key:
        a tenant's among the results written together share one object (see
        :meth:`_items`)."""
        self._ddb = dynamodb
        self._table = table
        self._payloads = payloads
        self._inline_bytes = inline_bytes

    def put_queued(self, record: ResultRecord) -> bool:
        try:
            self._ddb.put_item(
                TableName=self._table,
                Item=self._to_item(record),
                ConditionExpression="attribute_not_exists(#sk)",
                ExpressionAttributeNames={"#sk": RESULTS.sort},
            )
        except self._ddb.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def complete(self, record: ResultRecord, also: dict[str, Any] | None = None) -> Stored:
        return self._put_final(self._to_item(record), also)

    def _put_final(self, item: dict[str, Any], also: dict[str, Any] | None = None) -> Stored:
        """A final result's item written over no record or ``queued``, not over a
        final one (with ``also`` in one transaction). The put returns the item it
        replaced (no more capacity: a put's write is billed by the larger item), so
        it says whether that was a counted queued record."""
        put = {
            "TableName": self._table,
            "Item": item,
            "ConditionExpression": "attribute_not_exists(#sk) OR #st = :queued",
            "ExpressionAttributeNames": {"#sk": RESULTS.sort, "#st": "status"},
            "ExpressionAttributeValues": {":queued": {"S": "queued"}},
        }
        if also is not None:
            try:
                self._ddb.transact_write_items(TransactItems=[{"Put": put}, also])
            except self._ddb.exceptions.TransactionCanceledException as exc:
                reasons = exc.response.get("CancellationReasons") or [{}]
                if reasons[0].get("Code") == "ConditionalCheckFailed":
                    return Stored.REFUSED
                raise
            return Stored.STORED
        try:
            old = self._ddb.put_item(**put, ReturnValues="ALL_OLD").get("Attributes") or {}
        except self._ddb.exceptions.ConditionalCheckFailedException:
            return Stored.REFUSED
        return Stored.OVER_COUNTED if _COUNTED in old else Stored.STORED

    def complete_batch(
        self, records: list[ResultRecord], new: list[bool], outputs: AsStored | None = None
    ) -> list[Stored]:
        # BatchExecuteStatements of 25 statements each, sent together
        # (``calls_at_once``): they wait on DynamoDB at once, on this thread. A new
        # result is an INSERT, which never replaces an item; the others an UPDATE of
        # the item only while it is ``queued``, as the conditional put's condition: a
        # result is still written once. A statement that fails (an INSERT's key is
        # taken: a record handed off at its deadline, cancelled, expired, or answered
        # by the fallback; an UPDATE finds no record yet, or a final one; or either was
        # throttled) leaves that one result to the conditional put, which stores it
        # over ``queued`` or finds it answered. A PartiQL statement returns no old
        # values, so an UPDATE over a counted record is STORED, not OVER_COUNTED. One
        # statement per item in a call: a request delivered twice in one batch has its
        # second result stored on its own, after (and so not at all).
        stored: dict[int, Stored] = {}
        firsts: dict[tuple[str, str], int] = {}
        for i, r in enumerate(records):
            firsts.setdefault((r.tenant, r.request_id), i)
        once = list(firsts.values())
        parts: list[list[int]] = []  # places of the results in each call, new ones first
        for way in (True, False):
            of_way = [i for i in once if new[i] == way]
            step = _BATCH_STATEMENT_LIMIT
            parts += [of_way[j : j + step] for j in range(0, len(of_way), step)]
        # Built once: large outputs go to S3 here, not again for the put.
        items = [
            self._items([records[i] for i in part], None if outputs is None else outputs.part(part))
            for part in parts
        ]
        calls = [
            {"Statements": [self._statement(x, new[i]) for i, x in zip(part, of, strict=True)]}
            for part, of in zip(parts, items, strict=True)
        ]
        answers = all_answered(calls_at_once(self._ddb, "batch_execute_statement", calls))
        for part, of_part, answer in zip(parts, items, answers, strict=True):
            for i, item, said in zip(part, of_part, answer["Responses"], strict=True):
                stored[i] = Stored.STORED if "Error" not in said else self._put_final(item)
        for i, record in enumerate(records):
            if i not in stored:
                stored[i] = self.complete(record)
        return [stored[i] for i in range(len(records))]

    def _statement(self, item: dict[str, Any], new: bool) -> dict[str, Any]:
        if new:
            return insert_of(self._table, item)
        return update_of_queued(self._table, item, _absent(tuple(item)))

    def mark_failed(self, queued: ResultRecord, reason: str) -> None:
        # A request answered already has nothing to mark. One that has no record yet
        # (a sync request is recorded only if it is handed off at its deadline) gets
        # ``queued``'s, with the failure on it, in the same write.
        item = self._to_item(queued)
        rest = [n for n in item if n not in (RESULTS.partition, RESULTS.sort)]
        names = {f"#a{i}": n for i, n in enumerate(rest)}
        values = {f":v{i}": item[n] for i, n in enumerate(rest)}
        keep = ", ".join(f"#a{i} = if_not_exists(#a{i}, :v{i})" for i in range(len(rest)))
        with contextlib.suppress(self._ddb.exceptions.ConditionalCheckFailedException):
            self._ddb.update_item(
                TableName=self._table,
                Key={RESULTS.partition: item[RESULTS.partition], RESULTS.sort: item[RESULTS.sort]},
                UpdateExpression="SET failures = if_not_exists(failures, :zero) + :one, "
                f"last_failure = :why, {keep}",
                ConditionExpression="attribute_not_exists(#sk) OR #st = :queued",
                ExpressionAttributeNames={**names, "#sk": RESULTS.sort, "#st": "status"},
                ExpressionAttributeValues={
                    **values,
                    ":zero": {"N": "0"},
                    ":one": {"N": "1"},
                    ":why": {"S": f"{queued.version}: {reason}"[:500]},
                    ":queued": {"S": "queued"},
                },
            )

    def statuses(self, keys: list[tuple[str, str]]) -> dict[tuple[str, str], str]:
        projection = {
            "ProjectionExpression": "#pk, #sk, #st",
            "ExpressionAttributeNames": {
                "#pk": RESULTS.partition,
                "#sk": RESULTS.sort,
                "#st": "status",
            },
        }
        return {key: item["status"]["S"] for key, item in self._items_of(keys, projection)}

    def get_many(self, keys: list[tuple[str, str]]) -> dict[tuple[str, str], ResultRecord]:
        out: dict[tuple[str, str], ResultRecord] = {}
        for key, item in self._items_of(keys, {}):
            record = self._record_of(item, *key)
            if record is not None:
                out[key] = record
        return out

    def _items_of(
        self, keys: list[tuple[str, str]], projection: dict[str, Any]
    ) -> list[tuple[tuple[str, str], dict[str, Any]]]:
        """The items of these (tenant, request id) keys that exist, read consistently,
        ``_BATCH_GET_LIMIT`` to a BatchGetItem (and again for unprocessed keys)."""
        out: list[tuple[tuple[str, str], dict[str, Any]]] = []
        unique = list(dict.fromkeys(keys))
        for i in range(0, len(unique), _BATCH_GET_LIMIT):
            request: dict[str, Any] = {
                self._table: {
                    "Keys": [
                        {RESULTS.partition: {"S": t}, RESULTS.sort: {"S": r}}
                        for t, r in unique[i : i + _BATCH_GET_LIMIT]
                    ],
                    "ConsistentRead": True,
                    **projection,
                }
            }
            while request:
                response = self._ddb.batch_get_item(RequestItems=request)
                for item in response.get("Responses", {}).get(self._table, []):
                    out.append(((item[RESULTS.partition]["S"], item[RESULTS.sort]["S"]), item))
                request = response.get("UnprocessedKeys") or {}
        return out

    def cancel(self, tenant: str, request_id: str, at: float) -> ResultRecord | None:
        record = self.get(tenant, request_id)
        if record is None or record.status != "queued":
            return record
        cancelled = record.model_copy(
            update={"status": "cancelled", "completed_at": at, "failures": 0, "last_failure": None}
        )
        return cancelled if self.complete(cancelled) else self.get(tenant, request_id)

    def expire(self, record: ResultRecord, at: float) -> ResultRecord:
        expired = record.model_copy(
            update={
                "status": "expired",
                "error": ErrorInfo(code="expired", message="the request expired before it ran"),
                "completed_at": at,
            }
        )
        if self.complete(expired):
            return expired
        return self.get(record.tenant, record.request_id) or expired

    def reopen(self, tenant: str, request_id: str) -> bool:
        record = self.get(tenant, request_id)
        if record is None or record.error is None or record.error.code != RETRIES_EXHAUSTED:
            return False
        queued = record.model_copy(
            update={
                "status": "queued",
                "error": None,
                "completed_at": None,
                "worker": None,
                "failures": 0,
                "last_failure": None,
            }
        )
        try:
            self._ddb.put_item(
                TableName=self._table,
                Item=self._to_item(queued),
                ConditionExpression="#st = :error AND #code = :exhausted",
                ExpressionAttributeNames={"#st": "status", "#code": "error_code"},
                ExpressionAttributeValues={
                    ":error": {"S": "error"},
                    ":exhausted": {"S": RETRIES_EXHAUSTED},
                },
            )
        except self._ddb.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def get(self, tenant: str, request_id: str) -> ResultRecord | None:
        item = self._ddb.get_item(
            TableName=self._table,
            Key={RESULTS.partition: {"S": tenant}, RESULTS.sort: {"S": request_id}},
            ConsistentRead=True,
        ).get("Item")
        return self._record_of(item, tenant, request_id) if item else None

    def _record_of(self, item: dict[str, Any], tenant: str, request_id: str) -> ResultRecord | None:
        """The request record an item holds; None for an item that holds none."""
        if "doc" not in item:
            # (a key that names a generation's token chunk, ``<id>#t000000``, is no request)
            return None
        doc = json.loads(item["doc"]["S"])
        # The fields the item holds as attributes of their own are not in the doc.
        doc.update(
            request_id=request_id,
            tenant=tenant,
            model=item["model"]["S"],
            version=item["version"]["S"],
            status=item["status"]["S"],
            expires_at=int(item[_TTL]["N"]),
        )
        if _COUNTED in item:
            doc[_COUNTED] = item[_COUNTED]["BOOL"]
        if "cost" in item:
            doc["cost"] = json.loads(item["cost"]["S"])
        if "failures" in item:
            doc["failures"] = int(item["failures"]["N"])
            doc["last_failure"] = item.get("last_failure", {}).get("S")
        inline = inline_outputs(item)
        if inline is not None:
            doc["outputs"] = inline
        elif "outputs_ref" in item:
            part = item.get("outputs_range", {}).get("S")
            doc["outputs"] = self._payloads.get_json(item["outputs_ref"]["S"], part)
        return ResultRecord.model_validate(doc)

    def _to_item(self, record: ResultRecord) -> dict[str, Any]:
        return self._items([record])[0]

    def _items(
        self, records: list[ResultRecord], outputs: AsStored | None = None
    ) -> list[dict[str, Any]]:
        """The items of ``records`` (``outputs``: their outputs and docs as stored, if
        worked out already; their outputs are worked out again for another inline
        limit than this store's, their docs hold for any). Outputs too large to hold
        inline go to S3, one object per tenant for all of its among ``records`` (a
        JSON array; each item points at its own element's bytes), so that a batch's
        large results cost one PUT, not one each; a tenant's only one keeps an object
        of its own. Every object's key is new: a copy of a request run twice (a
        message redelivered while it ran) whose result is refused never overwrites the
        object the stored one points at (what it leaves expires with the bucket's
        lifecycle)."""
        attributes: dict[int, dict[str, Any]] = {}  # each item's outputs
        large: dict[str, dict[int, bytes]] = {}  # JSON texts for S3, by tenant
        if outputs is not None and outputs.limit == self._inline_bytes:
            each = outputs.each
        else:
            each = _outputs_as_stored(records, self._inline_bytes)
        for i, (record, stored) in enumerate(zip(records, each, strict=True)):
            if stored is None:
                continue
            if isinstance(stored, bytes):
                large.setdefault(record.tenant, {})[i] = stored
            else:
                name, value = stored
                attributes[i] = {name: value}
        for tenant, texts in large.items():
            first = records[next(iter(texts))].request_id
            key = f"results/{tenant}/{first}.{uuid.uuid4().hex[:12]}.json"
            if len(texts) == 1:
                [(i, text)] = texts.items()
                attributes[i] = {"outputs_ref": {"S": self._payloads.put_json_text(key, text)}}
                continue
            body, ranges = json_array(list(texts.values()))
            uri = self._payloads.put_json_text(key, body)
            for i, part in zip(texts, ranges, strict=True):
                attributes[i] = {"outputs_ref": {"S": uri}, "outputs_range": {"S": part}}
        docs = result_docs(records) if outputs is None else outputs.docs
        costs = _costs_json(records)
        return [
            {**self._base_item(record, doc, cost), **attributes.get(i, {})}
            for i, (record, doc, cost) in enumerate(zip(records, docs, costs, strict=True))
        ]

    def _base_item(self, record: ResultRecord, doc: str, cost: str | None) -> dict[str, Any]:
        item: dict[str, Any] = {
            RESULTS.partition: {"S": record.tenant},
            RESULTS.sort: {"S": record.request_id},
            "status": {"S": record.status},
            "model": {"S": record.model},
            "version": {"S": record.version},
            _TTL: {"N": str(record.expires_at)},
            # The rest of the record, without what is above or below and without its
            # empty fields: DynamoDB bills a write by the kilobyte.
            "doc": {"S": doc},
        }
        if record.error is not None:
            item["error_code"] = {"S": record.error.code}
        if record.queued_counted:
            item[_COUNTED] = {"BOOL": True}
        if cost is not None:
            item["cost"] = {"S": cost}
        return item


def _costs_json(records: list[ResultRecord]) -> list[str | None]:
    """Each record's cost as JSON (None: it has none), as its doc wrote it before
    an item held it apart, a cost many of a batch's records hold written once."""
    return written_once([r.cost for r in records], _cost_json)


def _cost_json(cost: Any) -> str:
    return cost.model_dump_json(exclude_none=True)


def result_docs(records: list[ResultRecord]) -> list[str]:
    """Each record's ``doc``: its fields but those its item holds as attributes of
    their own (``_NOT_IN_DOC``), without its empty ones, as JSON
    (:func:`records_json`)."""
    return records_json(records, _NOT_IN_DOC)


def records_json(records: list[ResultRecord], exclude: Collection[str]) -> list[str]:
    """Each record as JSON, without the fields named in ``exclude`` and without its
    empty ones, as ``model_dump_json(exclude=exclude, exclude_none=True)`` writes it.
    A batch's are written in one pass where msgspec is installed (a worker's image):
    the records' fields taken from their dicts into structs that leave out what is
    None, in one call, and all of them encoded as lines in one call (2.3 µs a record
    through pydantic, one at a time, for a result's doc). Without it (the router's
    layer, which writes one queued record at a time) each is pydantic's dump. The two
    give the same JSON values (``tests/unit/test_result_docs.py``)."""
    writer = _json_writer(frozenset(exclude))
    if writer is None:
        return [r.model_dump_json(exclude=set(exclude), exclude_none=True) for r in records]
    encoder, structs = writer
    lines = encoder().encode_lines(structs([r.__dict__ for r in records]))
    # JSON escapes a newline within a string: each line is one record's.
    return lines.decode().split("\n")[:-1]


@lru_cache(maxsize=8)
def _json_writer(
    exclude: frozenset[str],
) -> tuple[Callable[[], Any], Callable[[list[dict[str, Any]]], list[Any]]] | None:
    """What makes msgspec's encoder of a batch's records (their nested models, an
    error, a job, a cost, written where they are first met and copied where they are
    met again: a batch's answers that cost the same hold one cost), and what makes
    the structs of records' fields (their dicts) but ``exclude``, in the record's
    order: a struct takes a dict's fields of its own, as they are (each is typed as
    any), and leaves the others; None without msgspec."""
    try:
        import msgspec
    except ImportError:
        return None
    from pydantic import BaseModel

    def fields(value: Any) -> Any:
        if isinstance(value, BaseModel):
            # Its fields but the empty ones, as pydantic's dump gives them: a record's
            # models have no aliases, serializers or extra fields (the test holds each
            # to its dump).
            return {k: v for k, v in value.__dict__.items() if v is not None}
        raise NotImplementedError(f"{type(value).__name__} is not written in a result's JSON")

    plain = msgspec.json.Encoder(enc_hook=fields)

    def encoder() -> Any:
        written: dict[int, Any] = {}  # a model's id -> its JSON, while the batch is held

        def nested(value: Any) -> Any:
            text = written.get(id(value))
            if text is None:
                written[id(value)] = text = msgspec.Raw(plain.encode(fields(value)))
            return text

        return msgspec.json.Encoder(enc_hook=nested)

    names = [name for name in ResultRecord.model_fields if name not in exclude]
    doc_type = msgspec.defstruct(
        "RecordJson", [(name, Any, None) for name in names], omit_defaults=True
    )
    many = list[doc_type]  # type: ignore[valid-type]
    return encoder, partial(msgspec.convert, type=many)


def insert_of(table: str, item: dict[str, Any]) -> dict[str, Any]:
    """A BatchExecuteStatement's statement that inserts ``item``."""
    return {"Statement": _insert_text(table, tuple(item)), "Parameters": list(item.values())}


def update_of_queued(table: str, item: dict[str, Any], removed: Sequence[str]) -> dict[str, Any]:
    """A BatchExecuteStatement's statement that writes ``item`` (a result) over its
    record while that is ``queued``, removing ``removed``."""
    text, values = _update_plan(table, tuple(item), tuple(removed))
    return {"Statement": text, "Parameters": [*values(item), _QUEUED]}


# A batch's items mostly share their attributes' names, so each statement's text,
# and the order its parameters are read in, is worked out once per set of names,
# not once per item.
@lru_cache(maxsize=256)
def _insert_text(table: str, names: tuple[str, ...]) -> str:
    return insert_statement(table, list(names))


@lru_cache(maxsize=256)
def _update_plan(
    table: str, names: tuple[str, ...], removed: tuple[str, ...]
) -> tuple[str, Callable[[dict[str, Any]], tuple[Any, ...]]]:
    """An UPDATE's text for items of ``names``, and the reader of an item's
    parameters for it: its values but the keys', in order, then the keys'."""
    keys = (RESULTS.partition, RESULTS.sort)
    rest = [n for n in names if n not in keys]
    # every result item has attributes besides its keys: the reader gives a tuple
    return update_statement(table, rest, list(removed), keys), itemgetter(*rest, *keys)


@lru_cache(maxsize=256)
def _absent(names: tuple[str, ...]) -> tuple[str, ...]:
    """What a queued record may hold and a result of ``names`` does not: removed by
    its UPDATE, so that the item is what the put would have written."""
    return tuple(n for n in _FINAL_ONLY_OR_QUEUED_ONLY if n not in names)


def update_statement(
    table: str, names: list[str], removed: list[str], keys: tuple[str, str]
) -> str:
    """A PartiQL UPDATE of the item at ``keys`` on the condition that its status is
    the last parameter's (``queued``): each of ``names`` set, each of ``removed``
    removed. Parameters: the values of ``names`` in order, the two keys', the status."""
    sets = " ".join(f'SET "{n}"=?' for n in names)
    removes = "".join(f' REMOVE "{n}"' for n in removed)
    return f'UPDATE "{table}" {sets}{removes} WHERE "{keys[0]}"=? AND "{keys[1]}"=? AND "status"=?'


def insert_statement(table: str, names: list[str]) -> str:
    """A PartiQL INSERT of an item with attributes ``names``, its values passed as
    parameters in that order."""
    return f'INSERT INTO "{table}" VALUE {{' + ", ".join(f"'{n}': ?" for n in names) + "}"


def outputs_attribute(outputs: list[Any], limit: int) -> tuple[str, dict[str, Any]] | None:
    """Outputs as the item attribute that holds them inline: ``outputs_e7``
    (embeddings packed, see :func:`pack_rows`) or ``outputs`` (JSON); None if they
    take more than ``limit`` bytes either way."""
    stored = stored_outputs(outputs, limit)
    return None if isinstance(stored, bytes) else stored


def stored_outputs(outputs: list[Any], limit: int) -> tuple[str, dict[str, Any]] | bytes:
    """As :func:`outputs_attribute`, but where the outputs take more than ``limit``
    bytes either way, their JSON text (for S3) rather than None."""
    return stored_outputs_each([outputs], limit)[0]


def stored_outputs_each(
    outputs_each: Sequence[list[Any]], limit: int
) -> list[tuple[str, dict[str, Any]] | bytes]:
    """:func:`stored_outputs` of each of a batch's outputs, their embeddings packed
    together (:func:`pack_rows_each`)."""
    stored: list[tuple[str, dict[str, Any]] | bytes] = []
    for outputs, packed in zip(outputs_each, pack_rows_each(outputs_each, limit), strict=True):
        if packed is not None:
            stored.append((PACKED, {"B": packed}))
            continue
        text = json_bytes(outputs)
        stored.append(text if len(text) > limit else ("outputs", {"S": text.decode()}))
    return stored


def inline_outputs(item: dict[str, Any]) -> list[Any] | None:
    """The outputs an item holds inline (None if it holds none, or a pointer)."""
    if "outputs" in item:
        return json.loads(item["outputs"]["S"])
    if PACKED in item:
        return unpack_rows(item[PACKED]["B"])
    if _PACKED_FLOAT32 in item:
        return unpack_float32_rows(item[_PACKED_FLOAT32]["B"])
    return None


# Embeddings leave the runtimes rounded to 7 decimals (`runtimes.py`): each value is
# a whole number of ten-millionths, divided by 1e7. Packed as those whole numbers,
# each reads back as the same float by the same division.
PACKED_SCALE = 1e7
_INT32 = 2**31
# A negative zero (numpy's round of a small negative value; a few in most of
# minilm-embed's embeddings) has no whole number of its own: it is packed as the one
# int32 no 7-decimal value within the range takes.
_NEGATIVE_ZERO = -(2**31)
# Packed rows were once float32 (``outputs_f32``); items and cache entries written so
# are read until they expire, by :func:`unpack_float32_rows`.
FLOAT32_DECIMALS = 7


def pack_rows(outputs: list[Any], limit: int | None = None) -> bytes | None:
    """Embeddings (rows of floats of one length) packed as little-endian int32 counts
    of ten-millionths after their row length: a quarter of their JSON text, and
    DynamoDB bills writes by the kilobyte. Packed only if every value reads back
    bit for bit (:func:`unpack_rows`), as every 7-decimal value within ±214 does (a
    negative zero too); None for any other outputs, which are stored as JSON text, and for rows that
    would take more than ``limit`` bytes packed (checked before any value is looked
    at). See :func:`pack_rows_each`, which packs a batch's."""
    return pack_rows_each([outputs], limit)[0]


def pack_rows_each(
    outputs_each: Sequence[list[Any]], limit: int | None = None
) -> list[bytes | None]:
    """Each of a batch's outputs packed as :func:`pack_rows` packs them (None where
    they are not so packed). The values of all of them are checked together by
    numpy, a vector for the batch, not a call for each: for 64 embeddings of 384
    values, 27 µs a result packed one by one. The workers that pack have numpy; a
    router only unpacks (without numpy, nothing is packed: the outputs are stored as
    JSON text)."""
    packed: list[bytes | None] = [None] * len(outputs_each)
    shapes = []  # (index, width, values) of each that may be packed
    for i, outputs in enumerate(outputs_each):
        if (
            not outputs
            or type(outputs[0]) not in _ROW_TYPES  # a class's scores, say: looked at once
            or not all(type(row) in _ROW_TYPES for row in outputs)
        ):
            continue
        width = len(outputs[0])
        if width == 0 or any(len(row) != width for row in outputs):
            continue
        if limit is not None and 4 + 4 * width * len(outputs) > limit:
            continue
        shapes.append((i, width, width * len(outputs)))
    if not shapes:
        return packed
    rows = list(chain.from_iterable(outputs_each[i] for i, _, _ in shapes))
    arrays = all(type(row) is ArrayRow for row in rows)
    if not arrays:
        flat = list(chain.from_iterable(rows))
        if set(map(type, flat)) != {float}:
            if len(shapes) == 1:
                return packed
            # Not all floats: each is looked at on its own, so the others are still packed.
            return [pack_rows_each([outputs], limit)[0] for outputs in outputs_each]
    try:
        import numpy as np  # the workers'; a router's layer has none, and packs nothing
    except ImportError:
        return packed

    # Rows that keep the array they were made from are read from it: their values are
    # floats, and no number is converted from Python's.
    values = (
        np.concatenate([row.values for row in rows])
        if arrays
        else np.array(flat, dtype=np.float64)
    )
    counts = values * PACKED_SCALE
    np.rint(counts, out=counts)
    fits = np.abs(counts) < _INT32  # false too for what is infinite or not a number
    if not fits.all():
        counts[~fits] = 0  # read back as 0, not the value: wrong below
    whole = counts.astype("<i4")
    # A value that does not read back bit for bit has more than 7 decimals, or is out
    # of range, or is a negative zero, which reads back as the one count no value in
    # range takes.
    wrong = (whole / PACKED_SCALE).view(np.int64) != values.view(np.int64)
    odd = np.flatnonzero(wrong)
    if odd.size:
        zeros = odd[values[odd] == 0]  # a positive zero reads back as itself
        whole[zeros] = _NEGATIVE_ZERO
        wrong[zeros] = False
    ends = list(accumulate(n for _, _, n in shapes))
    starts = [0, *ends[:-1]]
    any_wrong = np.logical_or.reduceat(wrong, starts).tolist()
    for (i, width, _), start, end, bad in zip(shapes, starts, ends, any_wrong, strict=True):
        if not bad:
            packed[i] = struct.pack("<I", width) + whole[start:end].tobytes()
    return packed


class ArrayRow(list):  # type: ignore[type-arg]
    """A row of floats, as a list, that keeps the float64 array it was made from
    (``values``, which it holds as floats): a runtime's embedding, packed from its
    array (:func:`pack_rows_each`) rather than from its numbers one by one. Made by
    :func:`array_rows`, and not changed after."""

    __slots__ = ("values",)
    values: Any


_ROW_TYPES = (list, ArrayRow)


def array_rows(array: Any) -> list[ArrayRow]:
    """A 2-D float64 array's rows, each a list of its floats that keeps its row of the
    array."""
    rows = []
    for values, numbers in zip(array, array.tolist(), strict=True):
        row = ArrayRow(numbers)
        row.values = values
        rows.append(row)
    return rows


def unpack_rows(data: bytes) -> list[list[float]]:
    """Rows packed by :func:`pack_rows`: each count divided by 1e7, as the runtimes
    and the packer divided (IEEE division, so the same float)."""
    (width,) = struct.unpack_from("<I", data)
    counts = array("i")
    counts.frombytes(data[4:])
    if sys.byteorder == "big":
        counts.byteswap()
    flat = [count / PACKED_SCALE for count in counts]
    if counts and min(counts) == _NEGATIVE_ZERO:
        for i, count in enumerate(counts):
            if count == _NEGATIVE_ZERO:
                flat[i] = -0.0
    return [flat[i : i + width] for i in range(0, len(flat), width)]


def unpack_float32_rows(data: bytes) -> list[list[float]]:
    """Rows packed as float32 (``outputs_f32``), as results and cache entries were
    before :func:`pack_rows`: each value read back rounded to 7 decimals."""
    (width,) = struct.unpack_from("<I", data)
    values = array("f")
    values.frombytes(data[4:])
    if sys.byteorder == "big":
        values.byteswap()
    flat = [round(v, FLOAT32_DECIMALS) for v in values.tolist()]
    return [flat[i : i + width] for i in range(0, len(flat), width)]
