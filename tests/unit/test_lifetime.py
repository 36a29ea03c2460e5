"""Starting a child and recording it is one step a Ctrl-C cannot split."""

from __future__ import annotations

import signal
import threading

import pytest

from switchyard_local.lifetime import signals_held


def test_a_ctrl_c_inside_the_block_is_delivered_when_it_ends():
    steps = []
    with pytest.raises(KeyboardInterrupt), signals_held():
        signal.raise_signal(signal.SIGINT)
        steps.append("after the signal, still inside")
    assert steps == ["after the signal, still inside"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_nested_block_delivers_to_the_outer_one():
    steps = []
    with pytest.raises(KeyboardInterrupt), signals_held():
        with signals_held():
            signal.raise_signal(signal.SIGINT)
        steps.append("the outer block goes on")
    assert steps == ["the outer block goes on"]


def test_a_block_with_no_signal_changes_nothing():
    before = signal.getsignal(signal.SIGTERM)
    with signals_held():
        pass
    assert signal.getsignal(signal.SIGTERM) is before


def test_outside_the_main_thread_it_holds_nothing():
    # Python runs handlers in the main thread only, and only it may set them.
    errors = []

    def run():
        try:
            with signals_held():
                pass
        except Exception as exc:  # noqa: BLE001 - the test reports any
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert errors == []
