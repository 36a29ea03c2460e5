"""Checking routing documents: an operator's weights, shadow and fallback as a
document, refused in words where it is wrong."""

from __future__ import annotations

import pytest

from switchyard_cli.traffic import TrafficError, check_document, document_from_args


@pytest.fixture
def versions(digits_v1, digits_v2, manifest):
    v3 = manifest.models["digits-cnn"].version_record(
        "digits-cnn", "v3", "s3://a/b", "0" * 64, created_at=3.0
    )
    old = v3.model_copy(update={"version": "v0", "status": "retired", "created_at": 0.5})
    return {v.version: v for v in (digits_v1, digits_v2, v3, old)}


def raw(*weights, **kw):
    return document_from_args(
        list(weights),
        sticky=kw.get("sticky"),
        shadow=kw.get("shadow"),
        fallback=kw.get("fallback"),
        previous=None,
    )


def test_a_valid_document_is_ordered_oldest_version_first(versions):
    doc = check_document(raw("v2=10", "v1=90", shadow="v3:5", fallback="v1"), versions)
    assert list(doc.weights) == ["v1", "v2"]
    assert doc.shadow.version == "v3" and doc.shadow.percent == 5
    assert doc.fallback == "v1"


@pytest.mark.parametrize(
    ("args", "kw", "message"),
    [
        (["v1=90", "v2=20"], {}, "sum to 110, not 100"),
        (["v1=90", "v9=10"], {}, "unknown version 'v9'"),
        (["v0=100"], {}, "version 'v0' is retired"),
        (["v1=100"], {"fallback": "v7"}, "unknown version 'v7'"),
        (["v1=100"], {"shadow": "v2:101"}, "shadow"),
        (["v1=150"], {}, "weights.v1"),
    ],
)
def test_bad_documents_are_refused_with_a_clear_message(versions, args, kw, message):
    with pytest.raises(TrafficError, match=message):
        check_document(raw(*args, **kw), versions)


@pytest.mark.parametrize(
    ("args", "kw", "message"),
    [
        (["v1"], {}, "expected VERSION=PERCENT"),
        (["v1=ten"], {}, "whole number"),
        (["v1=100"], {"shadow": "v2"}, "expected VERSION:PERCENT"),
    ],
)
def test_bad_arguments_are_refused(args, kw, message):
    with pytest.raises(TrafficError, match=message):
        raw(*args, **kw)
