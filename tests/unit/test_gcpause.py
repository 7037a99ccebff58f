"""healthcheck.store.gcpause: the collector is paused inside the block and resumed only if it was running."""

from __future__ import annotations

import gc

import pytest

from healthcheck.store.gcpause import gc_paused


def test_paused_inside_resumed_after_even_on_error() -> None:
    assert gc.isenabled()
    with pytest.raises(ValueError), gc_paused():
        assert not gc.isenabled()
        with gc_paused():  # nested: the inner block does not resume it
            pass
        assert not gc.isenabled()
        raise ValueError("boom")
    assert gc.isenabled()


def test_left_off_when_it_was_off() -> None:
    gc.disable()
    try:
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
