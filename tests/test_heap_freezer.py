"""The worker's heap freezing after judging passes (rlhealth/streams/heap.py)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from rlhealth.streams.heap import HeapFreezer


@pytest.fixture(autouse=True)
def _thawed() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()  # the test process must not keep the permanent generation


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_survivors_are_frozen_and_a_thaw_collects_garbage_frozen_alive() -> None:
    freezer = HeapFreezer(thaw_every=3)
    freezer.after_pass()
    assert gc.get_freeze_count() > 0
    # a cycle alive at a freeze, dropped afterwards: no collection walks it while it is frozen
    cycle = _Cycle()
    freezer.after_pass()
    del cycle
    gc.collect()
    assert _cycles_alive() == 1  # frozen: a full collection does not see it
    freezer.after_pass()  # the third pass thaws and collects everything
    assert freezer.thawed == 1
    assert _cycles_alive() == 0
    assert gc.get_freeze_count() > 0  # and freezes again


def test_young_garbage_is_collected_before_freezing() -> None:
    freezer = HeapFreezer(thaw_every=100)
    cycle = _Cycle()
    del cycle
    freezer.after_pass()
    gc.unfreeze()
    assert _cycles_alive() == 0


def test_zero_never_freezes() -> None:
    HeapFreezer(thaw_every=0).after_pass()
    assert gc.get_freeze_count() == 0


def _cycles_alive() -> int:
    """`_Cycle` objects still in memory, frozen or not (the permanent generation is looked through)."""
    frozen = gc.get_freeze_count()
    gc.unfreeze()
    try:
        return sum(isinstance(o, _Cycle) for o in gc.get_objects())
    finally:
        if frozen:
            gc.freeze()
