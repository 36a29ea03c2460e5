"""Builds of the deployed layouts are cached by content; an older build stays while
a platform started from an older tree may still run from it."""

from __future__ import annotations

import os
import time

from stacks.assets import HOST_TARGET, KEEP_UNUSED_BUILDS_SECONDS, LAMBDA_TARGET, _built


def make(into):
    (into / "module.py").write_text("ANSWER = 42\n")


def test_a_build_is_made_once_and_found_again(tmp_path):
    first = _built(tmp_path, "worker", [], HOST_TARGET, make)
    (first / "module.py").write_text("changed after the build\n")
    again = _built(tmp_path, "worker", [], HOST_TARGET, make)
    assert again == first
    assert (again / "module.py").read_text() == "changed after the build\n"


def test_an_older_build_in_use_is_kept_and_one_unused_for_a_day_is_removed(tmp_path):
    # GIVEN a build a running platform asked for, then a newer build of the same name
    older = _built(tmp_path, "worker", [], HOST_TARGET, make)
    newer = _built(tmp_path, "worker", [], LAMBDA_TARGET, make)
    assert newer != older

    # THEN the older one is still there for the platform that runs from it
    assert (older / "module.py").exists()

    # WHEN nobody has asked for the older one for longer than the limit
    long_ago = time.time() - KEEP_UNUSED_BUILDS_SECONDS - 60
    os.utime(older / ".complete", (long_ago, long_ago))
    _built(tmp_path, "worker", [], LAMBDA_TARGET, make)

    # THEN it is removed, and the newer one kept
    assert not older.exists()
    assert (newer / "module.py").exists()


def test_asking_for_a_build_keeps_it_alive(tmp_path):
    older = _built(tmp_path, "worker", [], HOST_TARGET, make)
    long_ago = time.time() - KEEP_UNUSED_BUILDS_SECONDS - 60
    os.utime(older / ".complete", (long_ago, long_ago))
    _built(tmp_path, "worker", [], HOST_TARGET, make)  # a platform starts from it again
    _built(tmp_path, "worker", [], LAMBDA_TARGET, make)
    assert older.exists()
