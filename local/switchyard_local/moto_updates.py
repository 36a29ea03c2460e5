"""DynamoDB's UpdateItem in the local emulator, without moto's request machinery.

The platform's counters are conditional UpdateItems: a tenant's queued work
(``DynamoDBQueuedCounts``: ``ADD`` under a cap, ``ReturnValues`` ``ALL_NEW``), its
concurrency slots, a job's chunks, a failed attempt's count. moto 5.2.5 serves each
through Flask, its request parser and its response serializer around its backend's
``update_item`` (which parses the expressions and applies them).

What :func:`update_item` answers, through ``moto_reads.wrap`` in the emulator's
process: an UpdateItem of the plain form (a table name, a key of string or number
attributes naming exactly the table's key, an ``UpdateExpression``, optionally a
``ConditionExpression``, their names and values, each value a string, number,
boolean or null, ``ReturnValues`` of ``NONE``, ``ALL_NEW`` or ``ALL_OLD``,
``ReturnValuesOnConditionCheckFailure``) on a table that exists, whose item, if
there is one, holds plain attributes (``moto_wire.plain_attributes``). It makes
the checks moto's handler makes (the expressions parsed, every name and value
used). An update of the platform's counters' forms (SET, ADD of a number and REMOVE
of top-level attributes by placeholder, under conditions of ``attribute_exists``,
``attribute_not_exists`` and comparisons, joined by AND, OR and parentheses) it then
evaluates itself (``_plan``: below) and stores as moto's ``put_item`` stores an
item; any other it passes to moto's backend ``update_item`` with what that handler
passes. Either way it answers as moto answers: the capacity moto reports for every
UpdateItem, and the item after or before the update where asked. The item is read
and updated under ``moto_dynamodb``'s write lock, so the item before is the one the
update changed.
Anything else is moto's, and so is an update moto refuses: a failed condition, a
bad expression, a type that does not add up; moto refuses those before it writes,
so it answers them from the same state with its own error.
``tests/unit/test_moto_updates.py`` sends one script of UpdateItems both ways and
compares every answer and every item after.
"""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from switchyard_local.moto_dynamodb import write_lock
from switchyard_local.moto_wire import (
    json_request,
    key_names,
    plain_attributes,
    plain_key,
    plain_values,
    table_of,
)

TARGET = "DynamoDB_20120810.UpdateItem"
_FIELDS = {
    "TableName",
    "Key",
    "UpdateExpression",
    "ConditionExpression",
    "ExpressionAttributeNames",
    "ExpressionAttributeValues",
    "ReturnValues",
    "ReturnValuesOnConditionCheckFailure",
}
_RETURNED = {"NONE", "ALL_NEW", "ALL_OLD"}


def update_item(environ: dict[str, Any], body: bytes) -> bytes | None:
    """The answer to a plain UpdateItem, applied; or None for moto to answer
    (nothing written)."""
    request = json_request(body, _FIELDS)
    if request is None:
        return None
    name, key, expression = (
        request.get("TableName"),
        request.get("Key"),
        request.get("UpdateExpression"),
    )
    if not isinstance(name, str) or not isinstance(key, dict) or not plain_key(key):
        return None
    if not isinstance(expression, str) or not expression.strip():
        return None
    returned = request.get("ReturnValues", "NONE")
    on_failure = request.get("ReturnValuesOnConditionCheckFailure")
    condition = request.get("ConditionExpression")
    names = request.get("ExpressionAttributeNames", {})
    values = request.get("ExpressionAttributeValues", {})
    if returned not in _RETURNED or on_failure not in (None, "NONE", "ALL_OLD"):
        return None
    if condition is not None and not isinstance(condition, str):
        return None
    if not isinstance(names, dict) or not all(isinstance(v, str) for v in names.values()):
        return None
    if not isinstance(values, dict) or not plain_values(values):
        return None
    if "ExpressionAttributeValues" in request and not values:
        return None  # moto's error: values given empty
    if not all(isinstance(v, str) and v.startswith(":") for v in values):
        return None
    found = table_of(environ, name)
    if found is None:
        return None
    backend, table = found
    if set(key) != set(key_names(table)) or not _parsed(
        expression.strip(), condition, names, values
    ):
        return None
    plan = _plan(expression.strip(), condition)
    with write_lock:
        before = backend.get_item(name, key)
        old = {} if before is None else plain_attributes(before.attrs)
        if old is None:
            return None  # an item moto's serializer is to answer
        if plan is not None:
            try:
                after = plan.apply(old, names, values, key_names(table))
            except _Unsure:
                pass  # moto's backend decides it, below
            else:
                if after is None:
                    return None  # the condition failed: moto answers it, with its error
                return _written(backend, name, key, old, after, returned)
        try:
            item = backend.update_item(
                name,
                key,
                update_expression=expression.strip(),
                attribute_updates=None,
                expression_attribute_names=names,
                expression_attribute_values=values,
                expected=None,
                condition_expression=condition,
                return_values_on_condition_check_failure=on_failure,
            )
        except Exception:  # noqa: BLE001 - refused before writing: moto answers it
            return None
        new = plain_attributes(item.attrs)
    return _answer(name, old, new, returned)


def _written(
    backend: Any,
    table: str,
    key: dict[str, Any],
    old: dict[str, Any],
    after: dict[str, Any],
    returned: str,
) -> bytes | None:
    """``after`` stored as the item (with its key, where the update creates it) and
    the update's answer; None if moto refuses the item (nothing written)."""
    from moto.core.exceptions import JsonRESTError
    from moto.dynamodb.exceptions import DynamodbException

    item = {**key, **after}
    try:
        backend.put_item(table, item, None, None, None, None, True, None)
    except (DynamodbException, JsonRESTError):
        return None
    return _answer(table, old, item, returned)


def _answer(table: str, old: dict[str, Any], new: dict[str, Any] | None, returned: str) -> bytes:
    """An UpdateItem's answer as moto gives it: the capacity it reports for every
    one, and the item after or before where asked."""
    answer: dict[str, Any] = {"ConsumedCapacity": {"TableName": table, "CapacityUnits": 0.5}}
    if returned == "ALL_NEW":
        answer["Attributes"] = new
    elif returned == "ALL_OLD" and old:
        answer["Attributes"] = old
    return json.dumps(answer).encode()


# What _parsed found, by the expressions and the placeholders given: the platform
# sends a few forms again and again with other names' values (a slot's id) and
# other values, and parsing them is a quarter of an UpdateItem here (232 µs a call).
# A form this accepts that moto's update refuses after all is still answered by
# moto: its update raises before it writes.
_PARSED: dict[tuple[str, str | None, frozenset[str], frozenset[str]], bool] = {}
_PARSED_MOST = 256


def _parsed(
    expression: str, condition: str | None, names: dict[str, str], values: dict[str, Any]
) -> bool:
    """Whether the update and condition expressions parse, and use every name and
    value given, as moto's handler checks before it updates (kept by the forms)."""
    form = (expression, condition, frozenset(names), frozenset(values))
    found = _PARSED.get(form)
    if found is None:
        if len(_PARSED) >= _PARSED_MOST:
            _PARSED.clear()
        found = _PARSED[form] = _parses(expression, condition, names, values)
    return found


def _parses(
    expression: str, condition: str | None, names: dict[str, str], values: dict[str, Any]
) -> bool:
    from moto.dynamodb.comparisons import create_condition_expression_parser
    from moto.dynamodb.parsing.expressions import (  # type: ignore[attr-defined]
        ExpressionAttributeName,
        ExpressionAttributeValue,
        UpdateExpressionParser,
    )
    from moto.dynamodb.responses import validate_attributes_used

    try:
        ast = UpdateExpressionParser.make(expression)
        names_used = [
            a.get_attribute_name_placeholder() for a in ast.find_clauses([ExpressionAttributeName])
        ]
        values_used = [a.get_value_name() for a in ast.find_clauses([ExpressionAttributeValue])]
        parser = create_condition_expression_parser(condition, names, values)
        parser.parse()
        validate_attributes_used(names, names_used + parser.expr_attr_names_found)
        validate_attributes_used(values, values_used + parser.expr_attr_values_found, "Values")
    except Exception:  # noqa: BLE001 - moto's error to give
        return False
    return True


# -- the platform's update forms, evaluated here ---------------------------------
#
# moto's backend update_item parses the update expression again on every call and
# deep-copies its tree (and the item) before it applies it: 1.2 ms of the emulator's
# CPU a call, a third of it during a burst of async requests (each takes a place in
# its tenant's queued work: one UpdateItem). The platform's counters use a few forms
# of one grammar, which ``_plan`` reads once per form and ``_Plan.apply`` evaluates
# against the item as moto's update would: SET of a value, ADD of a number, REMOVE,
# each naming a top-level attribute by placeholder, under a condition of
# ``attribute_exists``, ``attribute_not_exists`` and comparisons of an attribute with
# a value, joined by AND, OR and parentheses. Anything else, and any update whose
# result it cannot be sure of (a number it does not read as moto does, a comparison
# of values of two types, a failed condition), goes to moto's backend as before.

_TOKENS = re.compile(r"\s*(#\w+|:\w+|\w+|<>|<=|>=|[=<>(),])")
_NUMBER = re.compile(r"-?\d+(\.\d+)?")
_COMPARISONS: dict[str, Callable[[Any, Any], bool]] = {
    "=": operator.eq,
    "<>": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
# A condition's tree: ("or" | "and", [parts]), ("exists" | "missing", name) or
# ("compare", name, operator, value).
Condition = tuple[Any, ...]


class _Unsure(Exception):
    """This update is not one ``_Plan`` evaluates; moto's backend does."""


@dataclass(frozen=True)
class _Plan:
    """An update form read once: its actions (each ``("SET", name, value)``,
    ``("ADD", name, value)`` or ``("REMOVE", name, None)``, by placeholder) and its
    condition, if any."""

    actions: tuple[tuple[str, str, str | None], ...]
    condition: Condition | None

    def apply(
        self,
        old: dict[str, Any],
        names: dict[str, str],
        values: dict[str, Any],
        keys: list[str],
    ) -> dict[str, Any] | None:
        """The item after the update (``old``: the item's attributes, empty if there
        is none; the key attributes are added where the update creates it); None if
        the condition fails. Raises ``_Unsure`` for what moto is to decide."""
        if self.condition is not None and not _holds(self.condition, old, names, values):
            return None
        targets = [names[name] for _, name, _ in self.actions]
        if len(set(targets)) != len(targets) or set(targets) & set(keys):
            raise _Unsure  # overlapping paths, or a key attribute: moto's error
        new = dict(old)
        for (verb, _, value), target in zip(self.actions, targets, strict=True):
            if verb == "SET":
                new[target] = values[value]
            elif verb == "REMOVE":
                new.pop(target, None)
            else:
                new[target] = {"N": _added(old.get(target), values[value])}
        return new


def _added(existing: dict[str, Any] | None, value: dict[str, Any]) -> str:
    """A number ADDed as moto adds it (an integer unless it has a point, then a
    Decimal; written by Python's formatting): the existing one, or 0."""
    current = existing if existing is not None else {"N": "0"}
    if set(current) != {"N"} or set(value) != {"N"}:
        raise _Unsure  # a set, or a type that does not add up: moto's answer
    texts = (current["N"], value["N"])
    if not all(_NUMBER.fullmatch(t) for t in texts):
        raise _Unsure
    a, b = (Decimal(t) if "." in t else int(t) for t in texts)
    return f"{a + b}"


def _holds(
    condition: Condition, item: dict[str, Any], names: dict[str, str], values: dict[str, Any]
) -> bool:
    kind = condition[0]
    if kind == "or":
        return any(_holds(part, item, names, values) for part in condition[1])
    if kind == "and":
        return all(_holds(part, item, names, values) for part in condition[1])
    attribute = item.get(names[condition[1]])
    if kind == "exists":
        return attribute is not None
    if kind == "missing":
        return attribute is None
    _, _, compare, placeholder = condition
    value = values[placeholder]
    if attribute is None:
        if compare == "<>":
            raise _Unsure  # moto holds a missing attribute unequal to any value
        return False
    ((kind_a, a),) = attribute.items()
    ((kind_v, v),) = value.items()
    if kind_a != kind_v or kind_v not in ("N", "S"):
        raise _Unsure  # two types, or a type moto compares its own way
    if kind_v == "N":
        if not (_NUMBER.fullmatch(a) and _NUMBER.fullmatch(v)):
            raise _Unsure
        return _COMPARISONS[compare](Decimal(a), Decimal(v))
    return _COMPARISONS[compare](a, v)


_PLANS: dict[tuple[str, str | None], _Plan | None] = {}


def _plan(expression: str, condition: str | None) -> _Plan | None:
    """The form's plan, read once (None: not a form evaluated here)."""
    form = (expression, condition)
    if form not in _PLANS:
        if len(_PLANS) >= _PARSED_MOST:
            _PLANS.clear()
        try:
            _PLANS[form] = _Plan(
                _actions(_tokens(expression)),
                None if condition is None else _condition(_tokens(condition)),
            )
        except _Unsure:
            _PLANS[form] = None
    return _PLANS[form]


def _tokens(text: str) -> list[str]:
    tokens, at = [], 0
    text = text.rstrip()
    while at < len(text):
        match = _TOKENS.match(text, at)
        if match is None:
            raise _Unsure
        tokens.append(match.group(1))
        at = match.end()
    return tokens


def _actions(tokens: list[str]) -> tuple[tuple[str, str, str | None], ...]:
    """SET #a = :v, ... / ADD #a :v, ... / REMOVE #a, ... clauses, each once."""
    actions: list[tuple[str, str, str | None]] = []
    seen: set[str] = set()
    at = 0
    while at < len(tokens):
        verb = tokens[at].upper()
        if verb not in ("SET", "ADD", "REMOVE") or verb in seen:
            raise _Unsure
        seen.add(verb)
        at += 1
        while True:
            shape = {"SET": 3, "ADD": 2, "REMOVE": 1}[verb]
            part = tokens[at : at + shape]
            if len(part) != shape or not part[0].startswith("#"):
                raise _Unsure
            if verb == "SET" and (part[1] != "=" or not part[2].startswith(":")):
                raise _Unsure
            if verb == "ADD" and not part[1].startswith(":"):
                raise _Unsure
            actions.append((verb, part[0], part[-1] if verb != "REMOVE" else None))
            at += shape
            if at < len(tokens) and tokens[at] == ",":
                at += 1
                continue
            break
    if not actions:
        raise _Unsure
    return tuple(actions)


def _condition(tokens: list[str]) -> Condition:
    """A condition of OR over AND over terms (a term: a function, a comparison or a
    parenthesised condition)."""
    condition, at = _joined(tokens, 0)
    if at != len(tokens):
        raise _Unsure
    return condition


def _joined(tokens: list[str], at: int, word: str = "OR") -> tuple[Condition, int]:
    """Parts joined by ``word``: ORs of ANDs of terms."""
    parts = []
    while True:
        part, at = _joined(tokens, at, "AND") if word == "OR" else _term(tokens, at)
        parts.append(part)
        if at < len(tokens) and tokens[at].upper() == word:
            at += 1
            continue
        return (parts[0] if len(parts) == 1 else (word.lower(), parts)), at


def _term(tokens: list[str], at: int) -> tuple[Condition, int]:
    head = tokens[at] if at < len(tokens) else ""
    if head == "(":
        inner, at = _joined(tokens, at + 1)
        if at >= len(tokens) or tokens[at] != ")":
            raise _Unsure
        return inner, at + 1
    if head in ("attribute_exists", "attribute_not_exists"):
        part = tokens[at + 1 : at + 4]
        if len(part) != 3 or part[0] != "(" or not part[1].startswith("#") or part[2] != ")":
            raise _Unsure
        return ("exists" if head == "attribute_exists" else "missing", part[1]), at + 4
    part = tokens[at : at + 3]
    if (
        len(part) == 3
        and part[0].startswith("#")
        and part[1] in _COMPARISONS
        and part[2].startswith(":")
    ):
        return ("compare", part[0], part[1], part[2]), at + 3
    raise _Unsure
