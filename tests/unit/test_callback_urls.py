"""A job's callback URL: refused at submission when it could never be posted to, and
a stored one that cannot be posted to is a failed attempt, not an error that stops
the job's callbacks."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from switchyard.callbacks import deliver_once
from switchyard_router.jobs_api import JobSubmission


def submission(url: str) -> JobSubmission:
    return JobSubmission(model="minilm-embed", inputs=["a"], callback_url=url)


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example.com/switchyard",
        "http://10.0.0.7:8080/ended?team=data#x",
        "https://[::1]:8443/hook",
        "https://example.com/caf%C3%A9",
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
    ],
)
def test_a_callback_url_that_could_never_be_posted_to_is_refused(url):
    with pytest.raises(ValidationError) as refused:
        submission(url)
    assert refused.value.errors()[0]["loc"] == ("callback_url",)


def test_a_stored_url_urllib_cannot_post_to_is_a_failed_attempt():
    outcome = deliver_once("https://[::1/", b"{}", "secret", "job-1", 1)
    assert outcome.startswith("ValueError")
