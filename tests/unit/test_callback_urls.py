"""A job's callback URL: refused at submission when it could never be posted to, and
a stored one that cannot be posted to is a failed attempt, not an error that stops
the job's callbacks."""

from __future__ import annotations

import json
from urllib.parse import urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from switchyard.bodies import CALLBACK_URL_PATTERN, JobSubmission
from switchyard.callbacks import deliver_once
from switchyard_router.app import JOB_REFUSAL
from switchyard_router.bodies import validated
from switchyard_router.logic import RequestRejected


def submission(url: str) -> JobSubmission:
    return JobSubmission(model="minilm-embed", inputs=["a"], callback_url=url)


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example.com/switchyard",
        "http://10.0.0.7:8080/ended?team=data#x",
        "https://example.com/caf%C3%A9",
        "https://user:pa%20ss@hooks.example.com:65535/a?b=c#d",
        "http://10.0.0.7:/x",  # an empty port is none
    ],
)
def test_a_callback_url_urllib_can_post_to_is_taken(url):
    assert submission(url).callback_url == url


@pytest.mark.parametrize(
    "url",
    [
        "https://[::1/",  # urllib: Invalid IPv6 URL
        "https://h\x00/",
        "https://h/\x00",
        "https://\x85/",  # NEL: not whitespace to the old pattern, not ASCII
        "https://example.com/café",  # to be written percent-encoded
        "https://example.com:port/",
        "https:///path",
        "ftp://example.com/",
        "https://exa mple.com/",
        # no host, or a port urllib cannot read (the fuzzer found the first)
        "https://:@",
        "https://user@/x",
        "https://h:65536/",
        "https://h:1:2/",
        # an IPv6 literal: its brackets are not checked here, so none is taken
        "https://[::1]:8443/hook",
    ],
)
def test_a_callback_url_that_could_never_be_posted_to_is_refused(url):
    with pytest.raises(ValidationError) as refused:
        submission(url)
    assert refused.value.errors()[0]["loc"] == ("callback_url",)


@settings(max_examples=500, deadline=None)
@given(st.from_regex(CALLBACK_URL_PATTERN, fullmatch=True))
def test_every_url_the_pattern_takes_names_a_host_and_a_port_urllib_reads(url):
    # The API document states the pattern alone: what it takes, the router takes.
    parts = urlsplit(url)
    assert parts.scheme in ("http", "https") and parts.hostname
    parts.port  # noqa: B018 - raises ValueError for a port urllib cannot read
    assert submission(url).callback_url == url


def test_a_stored_url_urllib_cannot_post_to_is_a_failed_attempt():
    outcome = deliver_once("https://[::1/", b"{}", "secret", "job-1", 1)
    assert outcome.startswith("ValueError")


def test_a_refused_callback_url_is_told_in_words_not_as_the_pattern():
    body = json.dumps({"model": "minilm-embed", "inputs": ["a"], "callback_url": "ftp://h/"})
    with pytest.raises(RequestRejected) as refused:
        validated(JobSubmission, json.loads(body), JOB_REFUSAL)
    (error,) = refused.value.errors
    assert error.field == "callback_url"
    assert error.message.startswith("must be an http:// or https:// URL")
    assert "^" not in error.message  # it read "String should match pattern '^https?://..."
