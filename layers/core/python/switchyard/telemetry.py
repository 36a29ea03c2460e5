"""Metrics (CloudWatch EMF on stdout) and prediction logs (Firehose).

Metric names and dimensions are fixed here because the CDK dashboards and the
canary alarms read them: namespace ``Switchyard``; dimensions ``model`` and
``version``, with the router's totals repeated under ``model`` alone and under
``model`` and ``role`` (one document per request, with those dimension sets).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from itertools import chain, groupby, repeat
from operator import attrgetter, itemgetter
from typing import Any, Protocol

from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit
from aws_lambda_powertools.metrics.provider.cloudwatch_emf.constants import MAX_METRICS

from switchyard.jsontext import written_once
from switchyard.schemas import ResultRecord

NAMESPACE = "Switchyard"
COUNT = MetricUnit.Count
MILLISECONDS = MetricUnit.Milliseconds
PERCENT = MetricUnit.Percent


MetricValues = dict[str, tuple[MetricUnit, float | Sequence[float]]]
"""Metric name -> (unit, one value or several): an EMF document carries up to 100
values of a metric, and CloudWatch files each as a sample of its own."""

# Values of one metric in one document: Powertools prints a document by itself once
# a metric reaches 100 (EMF's limit), so a document is filled to one short of that.
_MOST_VALUES = MAX_METRICS - 1


def emit_metrics(values: MetricValues, *more: Mapping[str, str], **dimensions: str) -> None:
    """One EMF document with ``values`` under ``dimensions``, and under each further
    dimension set in ``more`` (CloudWatch files the values once per set), on stdout
    (more than one document where a metric has more values than one holds).

    Each document is one line written in one call. Powertools prints a document
    with ``print``, the text and then its newline, and a log line that another
    thread writes in between (the worker's finisher, the router's other requests)
    lands inside the document's line: neither then reads as JSON, so CloudWatch
    drops the metrics and a reader of the logs the record."""
    for document in metrics_documents(values, *more, **dimensions):
        sys.stdout.write(json.dumps(document, separators=(",", ":")) + "\n")


def metrics_documents(
    values: MetricValues, *more: Mapping[str, str], **dimensions: str
) -> list[dict[str, Any]]:
    """The EMF documents :func:`emit_metrics` writes: one, or more where a metric has
    more than :data:`_MOST_VALUES` values (each document takes its share of them)."""
    counts = [1 if isinstance(v, int | float) else len(v) for _, v in values.values()]
    documents = []
    for start in range(0, max(counts, default=0), _MOST_VALUES):
        share: MetricValues = {}
        for name, (unit, value) in values.items():
            if isinstance(value, int | float):
                if start == 0:
                    share[name] = (unit, value)
            elif part := value[start : start + _MOST_VALUES]:
                share[name] = (unit, part)
        documents.append(metrics_document(share, *more, **dimensions))
    return documents


def metrics_document(
    values: MetricValues, *more: Mapping[str, str], **dimensions: str
) -> dict[str, Any]:
    """One EMF document with ``values`` (at most :data:`_MOST_VALUES` of a metric),
    as :func:`emit_metrics` writes it; also for a process that writes its metrics
    into a log file of its own (the local supervisor's autoscaler)."""
    return dict(_metric_set(values, dimensions, more).serialize_metric_set())


def request_dimension_sets(model: str, version: str, role: str) -> list[dict[str, str]]:
    """The dimension sets a routed request's metrics are filed under, in one document:
    (model, version), the rollback rule's sample, unless the caller pinned the
    version or the result cache answered (roles "pinned" and "cached": no sample of
    a rollout); then (model) and (model, role), which the canary alarms compare."""
    sets = [{"model": model}, {"model": model, "role": role}]
    if role not in ("pinned", "cached"):
        sets.insert(0, {"model": model, "version": version})
    return sets


def dimension_sets(document: Mapping[str, Any]) -> list[list[str]]:
    """The dimension sets an EMF document files its values under."""
    try:
        return [list(names) for names in document["_aws"]["CloudWatchMetrics"][0]["Dimensions"]]
    except (KeyError, IndexError, TypeError):
        return []


def _metric_set(
    values: MetricValues,
    dimensions: Mapping[str, str],
    more: Sequence[Mapping[str, str]] = (),
) -> EphemeralMetrics:
    # service="" keeps POWERTOOLS_SERVICE_NAME out of the dimensions: the dashboards
    # and alarms read exactly (model), (model, version) and (model, role).
    metrics = EphemeralMetrics(namespace=NAMESPACE, service="")
    for name, value in dimensions.items():
        metrics.add_dimension(name=name, value=value)
    for further in more:
        metrics.add_dimensions(**further)
    for name, (unit, value) in values.items():
        for one in (value,) if isinstance(value, int | float) else value:
            metrics.add_metric(name=name, unit=unit, value=one)
    return metrics


class PredictionLog(Protocol):
    def write(self, records: list[Any]) -> None: ...


# A prediction-log record's lines: the most Firehose's deaggregation splits out of one.
LOG_LINES_PER_RECORD = 500
LOG_RECORD_BYTES = 1_000 * 1024  # a Firehose record's most
_CALL_RECORDS = 500  # a PutRecordBatch's most records
_CALL_BYTES = 4 * 1024 * 1024  # and bytes


class FirehosePredictionLog:
    """A batch's prediction logs, one JSON line each, to a Firehose stream (S3, by
    model and date), its lines together in as few records as they fit: one for a
    batch. Firehose bills each record rounded up to 5 KB, so a record per line paid
    5 KB for a line of a few hundred bytes; the stream splits a record back into its
    lines (``stacks.data.PredictionLog``), so S3 holds one line per prediction
    either way."""

    def __init__(self, firehose: Any, stream: str) -> None:
        self._firehose = firehose
        self._stream = stream

    def write(self, records: list[Any]) -> None:
        for call in _calls(log_records(records, LOG_LINES_PER_RECORD, LOG_RECORD_BYTES)):
            self._firehose.put_record_batch(
                DeliveryStreamName=self._stream, Records=[{"Data": data} for data in call]
            )


def log_records(records: list[Any], most_lines: int, most_bytes: int) -> list[bytes]:
    """``records`` (what :func:`prediction_records` makes, or any object msgspec
    writes as JSON) as newline-terminated JSON lines (UTF-8), packed in order into
    records of at most ``most_lines`` lines and ``most_bytes`` bytes (a longer line
    is a record of its own). The lines are written in one call for the batch
    (msgspec's ``encode_lines``: 0.4 µs a line against 1.3 for a call per line), and
    a batch that fits one record, as a worker's always does, is that record as it
    was written; JSON escapes a newline within a string, so the lines are split at
    their newlines only when they must be packed into several."""
    if not records:
        return []
    lines = _line_encoder().encode_lines(records)
    if len(records) <= most_lines and len(lines) <= most_bytes:
        return [lines]
    packed: list[bytes] = []
    held: list[bytes] = []
    size = 0
    for line in lines.splitlines(keepends=True):
        if held and (len(held) >= most_lines or size + len(line) > most_bytes):
            packed.append(b"".join(held))
            held, size = [], 0
        held.append(line)
        size += len(line)
    packed.append(b"".join(held))
    return packed


@lru_cache(maxsize=1)
def _line_encoder() -> Any:
    """The prediction log's line writer. Only a worker writes the log, and its image
    installs msgspec (it reads its messages with it): the router's layer need not."""
    import msgspec

    return msgspec.json.Encoder()


def _calls(packed: list[bytes]) -> list[list[bytes]]:
    """Records grouped into PutRecordBatch calls within its limits."""
    calls: list[list[bytes]] = []
    size = 0
    for data in packed:
        if not calls or len(calls[-1]) >= _CALL_RECORDS or size + len(data) > _CALL_BYTES:
            calls.append([])
            size = 0
        calls[-1].append(data)
        size += len(data)
    return calls


def prediction_records(results: Sequence[ResultRecord]) -> list[Any]:
    """What is logged of each prediction, for a batch's results at once. Inputs and raw
    outputs are redacted: a log line says who asked which version, how it went and
    how long it took, and for a classifier the class it gave (an embedding is
    summarised by its dimensions). Durations are kept to the microsecond
    (``_durations_in_ms``).

    The lines are built from the batch's columns: each field read for every result
    by one ``attrgetter`` pass, and each line made from its row by ``map`` over a
    struct type (``_line_types``), with no Python statement run per result: a dict
    literal per line, and a dict per line's durations, cost half of what a line did.
    The structs are written as the JSON objects the dicts were, field for field."""
    if not results:
        return []
    line, durations_of = _line_types()
    outputs = [r.outputs or () for r in results]
    # Most batches hold no error and no cost: their columns are read, not converted.
    errors, costs = list(map(_ERROR, results)), list(map(_COST, results))
    if any(errors):
        errors = list(map(_error_code, errors))
    if any(costs):
        costs = _dumped(costs)
    return list(
        map(
            line,
            repeat(time.time()),
            *zip(*map(_PLAIN_FIELDS, results), strict=True),
            map(len, outputs),
            map(_summary, outputs),
            errors,
            map(_SHADOW, results),
            _durations_in_ms([r.timings for r in results], durations_of),
            costs,
        )
    )


# A prediction-log line's fields, in the order its JSON object has them.
_LINE_FIELDS = (
    "ts", "request_id", "tenant", "model", "version", "status", "lane", "n_outputs",
    "outputs", "error", "shadow_of", "timings", "cost",
)  # fmt: skip
_PLAIN_FIELDS = attrgetter("request_id", "tenant", "model", "version", "status", "lane")
_ERROR, _SHADOW, _COST = attrgetter("error"), attrgetter("shadow_of"), attrgetter("cost")


def _error_code(error: Any) -> str | None:
    return error.code if error is not None else None


def _dumped(costs: list[Any]) -> list[Any]:
    """Each cost as its line writes it, its JSON (``msgspec.Raw``) written once for
    the answers that share it, and each line takes the JSON as it is (0.4 µs a line
    against 0.9 for a dict a line, written with the line)."""
    import msgspec  # the workers' (only a worker writes the log: ``_line_types``)

    return written_once(costs, lambda cost: msgspec.Raw(cost.model_dump_json()))


@lru_cache(maxsize=1)
def _line_types() -> tuple[Any, Callable[[tuple[str, ...]], Any]]:
    """The line's struct type, and the durations' struct type for a set of names
    (each made once). Only a worker writes the log, and its image installs msgspec:
    the router's layer need not."""
    import msgspec

    line = msgspec.defstruct("PredictionLine", list(_LINE_FIELDS))

    @lru_cache(maxsize=64)
    def durations_of(names: tuple[str, ...]) -> Any:
        return msgspec.defstruct("Durations", list(names))

    return line, durations_of


def _durations_in_ms(
    timings: Sequence[Mapping[str, float]], durations_of: Callable[[tuple[str, ...]], Any]
) -> list[Any]:
    """Each record's durations (its ``_ms`` timings), each to three decimals: scaled,
    rounded to a whole number and scaled back (``round(x, 3)`` costs five times as
    much: it goes through the value's decimal digits), as a ``durations_of`` struct
    for their names. Records whose timings have the same names, as a batch's do, are
    rounded together by numpy, in one pass over them all, and made into structs
    column by column."""
    rounded: list[Any] = []
    keyed = zip(map(tuple, timings), timings, strict=True)  # each with its names
    for names, run in groupby(keyed, key=itemgetter(0)):
        kept, of_run = _durations(names), [t for _, t in run]
        durations = durations_of(kept)
        if not kept:  # none of its timings is a duration
            rounded += [durations() for _ in of_run]
            continue
        rounded += map(durations, *_rounded(of_run, kept))
    return rounded


def _rounded(timings: Sequence[Mapping[str, float]], names: tuple[str, ...]) -> list[list[float]]:
    """``names`` of each of ``timings`` (which all have them), to three decimals: one
    column a name, in ``names``' order."""
    values = (
        map(itemgetter(*names), timings) if len(names) > 1 else ([t[names[0]]] for t in timings)
    )
    import numpy as np  # the workers' (only a worker writes the log: ``_line_types``)

    # rint rounds half to even, as round() does, and the same IEEE operations give
    # the same floats
    read = np.fromiter(chain.from_iterable(values), np.float64, len(timings) * len(names))
    columns: list[list[float]] = (
        (np.rint(read * 1000) / 1000).reshape(len(timings), len(names)).T.tolist()
    )
    return columns


def _summary(outputs: Sequence[Any]) -> list[Any]:
    """A classifier's classes; an embedding's dimensions."""
    summary: list[Any] = []
    for out in outputs:
        if isinstance(out, dict) and "class" in out:
            summary.append(out["class"])
        elif isinstance(out, list):
            summary.append({"dimensions": len(out)})
    return summary


@lru_cache(maxsize=64)
def _durations(names: tuple[str, ...]) -> tuple[str, ...]:
    """Which of a record's timings are durations (``_ms``): its results share their
    names, so this is worked out once per set of names."""
    return tuple(n for n in names if n.endswith("_ms"))
